//! The workspace rules every Cargo.toml keeps (docs/design.md §1): one
//! toolchain floor, one set of lints, and every dependency's version said
//! once, in the root's `[workspace.dependencies]`.

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
