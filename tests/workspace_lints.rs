//! The workspace rules (docs/design.md §1): every Cargo.toml inherits one
//! toolchain floor and one set of lints and takes every dependency's version
//! from the root's `[workspace.dependencies]`; the crates that need no
//! `unsafe` deny it at their roots.

use std::path::{Path, PathBuf};

use toml::{Table, Value};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn manifest(path: &Path) -> Table {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.parse()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The root manifest and every member's, with the path for messages.
fn packages() -> Vec<(PathBuf, Table)> {
    let root_path = root().join("Cargo.toml");
    let root_manifest = manifest(&root_path);
    let members = root_manifest["workspace"]["members"]
        .as_array()
        .expect("workspace.members is a list")
        .iter()
        .map(|m| root().join(m.as_str().unwrap()).join("Cargo.toml"))
        .collect::<Vec<_>>();
    let mut all = vec![(root_path, root_manifest)];
    all.extend(members.into_iter().map(|p| {
        let m = manifest(&p);
        (p, m)
    }));
    all
}

fn inherits(table: &Table, key: &str) -> bool {
    table
        .get(key)
        .and_then(Value::as_table)
        .and_then(|t| t.get("workspace"))
        .and_then(Value::as_bool)
        == Some(true)
}

#[test]
fn every_package_inherits_rust_version_and_the_workspace_lints() {
    for (path, m) in packages() {
        let package = m["package"].as_table().expect("[package]");
        for key in ["version", "edition", "license", "rust-version"] {
            assert!(
                inherits(package, key),
                "{}: package.{key} must be `{key}.workspace = true`",
                path.display()
            );
        }
        assert!(
            inherits(&m, "lints"),
            "{}: needs `[lints] workspace = true`",
            path.display()
        );
    }
}

#[test]
fn every_dependency_comes_from_the_workspace_table() {
    let mut outside = Vec::new();
    for (path, m) in packages() {
        for section in ["dependencies", "dev-dependencies", "build-dependencies"] {
            let Some(deps) = m.get(section).and_then(Value::as_table) else {
                continue;
            };
            for (name, spec) in deps {
                let from_workspace = spec
                    .as_table()
                    .and_then(|t| t.get("workspace"))
                    .and_then(Value::as_bool)
                    == Some(true);
                if !from_workspace {
                    outside.push(format!("{}: [{section}] {name}", path.display()));
                }
            }
        }
    }
    assert!(
        outside.is_empty(),
        "give these a version in the root's [workspace.dependencies] and `.workspace = true` here:\n{}",
        outside.join("\n")
    );
}

/// Crate roots that need no `unsafe`. Cargo lets no package add a lint to
/// `[lints] workspace = true`, so they say `#![deny(unsafe_code)]` themselves.
/// conf (mmap, flock), dpdk-ffi, dataplane (its I/O module) and perf
/// (counting allocator, rdtsc, signals) need it.
fn safe_crate_roots() -> Vec<PathBuf> {
    let root_manifest = manifest(&root().join("Cargo.toml"));
    let mut roots = vec![root().join("src/lib.rs"), root().join("mgmt/src/lib.rs")];
    for bin in root_manifest["bin"].as_array().expect("[[bin]] targets") {
        roots.push(root().join(bin["path"].as_str().expect("bin.path")));
    }
    roots
}

#[test]
fn crates_that_need_no_unsafe_deny_it() {
    for path in safe_crate_roots() {
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            text.lines().any(|l| l.trim() == "#![deny(unsafe_code)]"),
            "{}: needs #![deny(unsafe_code)]",
            path.display()
        );
    }
}
