//! The load balancer's files depend one way (docs/architecture.md): shared
//! types first, then the stages in the order a packet meets them (classify
//! -> track -> select -> rewrite -> emit), then the policies and the two
//! paths that put stages together. Each file of `dataplane/src/lb` may
//! name (by `super::` or `crate::lb::`) only files listed before it; a
//! stage that reaches for a later stage's item, or a new file not placed
//! in [`ORDER`], fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// Every module of `lb/` (but `mod.rs`, the root), in dependency order.
const ORDER: &[&str] = &[
    // Shared: what every stage may use.
    "key", "flow", "admit", "records", "conns", "release", "tables", "flood",
    // The stages, in the order a packet meets them.
    "classify", "track", "select", "rewrite", "emit", "dsr",
    // Policies and the paths that put the stages together.
    "on_down", "synproxy", "early", "path", "express",
    // Start-up only: the previous process's flows fitted to the tables.
    "adopt",
];

fn lb_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/lb")
}

/// `text` without comments and without its `#[cfg(test)] mod tests` (whose
/// `super` is the file itself).
fn code_of(text: &str) -> String {
    let end = text.find("#[cfg(test)]\nmod tests").unwrap_or(text.len());
    text[..end]
        .lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first identifiers of every path that follows `prefix` in `code`,
/// braces expanded one level deep (`super::{a::X, b}` gives `a`, `b`).
fn heads_after(code: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find(prefix) {
        rest = &rest[i + prefix.len()..];
        let tree = rest.trim_start();
        if let Some(inner) = tree.strip_prefix('{') {
            // Items at depth 0 of the group.
            let mut depth = 0;
            let mut item = String::new();
            for c in inner.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.push(ident(&item));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                if depth == 0 {
                    item.push(c);
                }
            }
            if !item.trim().is_empty() {
                out.push(ident(&item));
            }
        } else {
            out.push(ident(tree));
        }
    }
    out.retain(|s| !s.is_empty() && s != "self");
    out
}

fn ident(s: &str) -> String {
    s.trim_start()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// What `lb/mod.rs` re-exports: name -> the module it comes from.
fn reexports(mod_rs: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    let code = code_of(mod_rs);
    for stmt in code.split(';') {
        let s = stmt.trim();
        let Some(path) = s
            .strip_prefix("pub use ")
            .or_else(|| s.strip_prefix("pub(crate) use "))
            .or_else(|| s.strip_prefix("use "))
        else {
            continue;
        };
        let path = path.trim();
        let Some((module, names)) = path.split_once("::") else {
            continue;
        };
        if !ORDER.contains(&module) {
            continue;
        }
        let names = names.trim().trim_start_matches('{').trim_end_matches('}');
        for n in names.split(',') {
            let n = ident(n);
            if !n.is_empty() {
                map.insert(n, module.to_string());
            }
        }
    }
    map
}

#[test]
fn every_lb_file_names_only_files_before_it() {
    let dir = lb_dir();
    let mod_rs = std::fs::read_to_string(dir.join("mod.rs")).expect("lb/mod.rs");
    let via_mod = reexports(&mod_rs);
    let mut files = BTreeSet::new();
    for entry in std::fs::read_dir(&dir).expect("src/lb") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "rs") {
            let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
            if stem != "mod" {
                files.insert(stem);
            }
        }
    }
    let listed: BTreeSet<String> = ORDER.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        files, listed,
        "every file of dataplane/src/lb has its place in ORDER (and no other)"
    );
    let mut wrong = Vec::new();
    for (pos, name) in ORDER.iter().enumerate() {
        let text = std::fs::read_to_string(dir.join(format!("{name}.rs"))).expect("lb file");
        let code = code_of(&text);
        let mut heads = heads_after(&code, "super::");
        heads.extend(heads_after(&code, "crate::lb::"));
        for head in heads {
            // A module of lb, an item lb/mod.rs re-exports, or one it defines.
            let from = if listed.contains(&head) {
                head.clone()
            } else if let Some(m) = via_mod.get(&head) {
                m.clone()
            } else {
                continue;
            };
            let at = ORDER.iter().position(|m| *m == from).unwrap();
            if at >= pos {
                wrong.push(format!("lb/{name}.rs names `{head}` of lb/{from}.rs"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "files of dataplane/src/lb may only use files before them in ORDER:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_checker_sees_grouped_and_inline_paths() {
    let code = "use super::{track::Release, Out, rewrite::{a, b}};\nfn f() { super::FLOW_SP; }";
    assert_eq!(
        heads_after(code, "super::"),
        vec!["track", "Out", "rewrite", "FLOW_SP"]
    );
    let map = reexports("pub use flow::{FlowRec, FLOW_PP};\nuse release::Release;\n");
    assert_eq!(map.get("FlowRec").map(String::as_str), Some("flow"));
    assert_eq!(map.get("Release").map(String::as_str), Some("release"));
}
