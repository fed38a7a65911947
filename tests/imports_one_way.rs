//! Source files that import each other in a circle can be read, tested
//! and moved only together. In the crates listed here every file depends
//! one way: this test draws each crate's imports between its files (the
//! `crate::`, `super::` and `self::` paths outside comments and test
//! modules) and fails naming the files of any circle.
//!
//! A module naming its own children (`mod x; pub use x::Y;`, or
//! `self::x::Y`) is the module tree, not an import, and is not drawn; a
//! child naming its parent (`super::`) is.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The source directories whose files must import one way.
const CRATES: &[&str] = &[
    "conf/src",
    "mgmt/src",
    "gw/src",
    "src/bin/borderctl",
    "dataplane/src",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`, relative to it, with `/` separators.
fn sources(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p
                    .strip_prefix(dir)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/");
                out.push(rel);
            }
        }
    }
    out.sort();
    out
}

/// The module path of file `rel` (`a/b.rs` and `a/b/mod.rs`: `[a, b]`;
/// `lib.rs`: `[]`).
fn module_of(rel: &str) -> Vec<String> {
    let stem = rel.strip_suffix(".rs").unwrap();
    let mut segs: Vec<String> = stem.split('/').map(str::to_owned).collect();
    if matches!(
        segs.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        segs.pop();
    }
    segs
}

/// Test modules kept in files of their own (`#[path]` or `mod tests;`).
fn is_test_file(rel: &str) -> bool {
    let stem = rel.rsplit('/').next().unwrap().trim_end_matches(".rs");
    stem == "tests" || stem.ends_with("_tests")
}

/// The code of a file without comments and without its test module.
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]")
            && lines
                .peek()
                .is_some_and(|n| n.trim_start().starts_with("mod "))
        {
            break;
        }
        let without_comment = match t.find("//") {
            Some(i) => &t[..i],
            None => t,
        };
        out.push_str(without_comment);
        out.push('\n');
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn skip_space(b: &[u8], i: &mut usize) {
    while *i < b.len() && (b[*i] as char).is_whitespace() {
        *i += 1;
    }
}

/// Reads one use tree at `b[*i..]` (a path, `*`, or a `{...}` group of
/// trees), pushing every path it names, each after `prefix`.
fn use_tree(b: &[u8], i: &mut usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut path = prefix;
    loop {
        skip_space(b, i);
        if b.get(*i) == Some(&b'{') {
            *i += 1;
            loop {
                skip_space(b, i);
                match b.get(*i) {
                    Some(b'}') => {
                        *i += 1;
                        return;
                    }
                    Some(b',') => *i += 1,
                    None => return,
                    _ => {
                        let before = *i;
                        use_tree(b, i, path.clone(), out);
                        if *i == before {
                            *i += 1;
                        }
                    }
                }
            }
        }
        let start = *i;
        while *i < b.len() && is_ident(b[*i] as char) {
            *i += 1;
        }
        let ident = std::str::from_utf8(&b[start..*i]).unwrap();
        if !ident.is_empty() && ident != "self" {
            path.push(ident.to_owned());
        }
        if b[*i..].starts_with(b"::") {
            *i += 2;
            continue;
        }
        // The path ends here (`as name`, `*`, `(`, `;` ... stay unread).
        if b.get(*i) == Some(&b'*') {
            *i += 1;
        }
        if b[*i..].starts_with(b" as ") {
            *i += 4;
            skip_space(b, i);
            while *i < b.len() && is_ident(b[*i] as char) {
                *i += 1;
            }
        }
        out.push(path);
        return;
    }
}

/// The module paths file `rel` names through `crate::`, `super::` and
/// `self::`, made absolute.
fn named_modules(rel: &str, text: &str) -> Vec<Vec<String>> {
    let here = module_of(rel);
    let code = code(text);
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let at_word = i == 0 || !is_ident(b[i - 1] as char);
        let rest = &b[i..];
        let base = if !at_word {
            None
        } else if rest.starts_with(b"crate::") {
            i += "crate::".len();
            Some(Vec::new())
        } else if rest.starts_with(b"self::") {
            i += "self::".len();
            Some(here.clone())
        } else if rest.starts_with(b"super::") {
            let mut m = here.clone();
            while b[i..].starts_with(b"super::") {
                m.pop();
                i += "super::".len();
            }
            Some(m)
        } else {
            None
        };
        match base {
            Some(m) => use_tree(b, &mut i, m, &mut out),
            None => i += 1,
        }
    }
    out
}

/// The file a module path lives in: the longest prefix of it that is a file.
fn file_of(path: &[String], files: &BTreeSet<String>) -> Option<String> {
    (1..=path.len()).rev().find_map(|k| {
        let base = path[..k].join("/");
        [format!("{base}.rs"), format!("{base}/mod.rs")]
            .into_iter()
            .find(|f| files.contains(f))
    })
}

/// Whether file `f` is a module below file `parent`'s (a module using its
/// own children is the module tree, not an import).
fn is_below(f: &str, parent: &str) -> bool {
    let (m, p) = (module_of(f), module_of(parent));
    m.len() > p.len() && m.starts_with(&p)
}

/// Which files each file imports from, in the crate at `dir`.
fn imports(dir: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let all: Vec<String> = sources(dir);
    let files: BTreeSet<String> = all.iter().cloned().collect();
    let mut graph = BTreeMap::new();
    for rel in all.iter().filter(|r| !is_test_file(r)) {
        let text = std::fs::read_to_string(dir.join(rel)).unwrap();
        let deps: BTreeSet<String> = named_modules(rel, &text)
            .iter()
            .filter_map(|m| file_of(m, &files))
            .filter(|f| f != rel && !is_test_file(f) && !is_below(f, rel))
            .collect();
        graph.insert(rel.clone(), deps);
    }
    graph
}

/// A circle of `graph`, as the files along it, if there is one.
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        f: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        marks: &mut BTreeMap<String, Mark>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        marks.insert(f.to_owned(), Mark::Open);
        stack.push(f.to_owned());
        for d in graph.get(f).into_iter().flatten() {
            match marks.get(d) {
                Some(Mark::Open) => {
                    let from = stack.iter().position(|s| s == d).unwrap();
                    let mut c = stack[from..].to_vec();
                    c.push(d.clone());
                    return Some(c);
                }
                Some(Mark::Done) => {}
                None => {
                    if let Some(c) = visit(d, graph, marks, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        marks.insert(f.to_owned(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for f in graph.keys() {
        if !marks.contains_key(f) {
            if let Some(c) = visit(f, graph, &mut marks, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn the_files_of_these_crates_import_one_way() {
    for dir in CRATES {
        let graph = imports(&root().join(dir));
        assert!(graph.len() > 5, "{dir}: found too few files");
        if let Some(c) = circle(&graph) {
            panic!(
                "{dir}: these files import each other in a circle: {}; move what they share \
                 into a file both may import",
                c.join(" -> ")
            );
        }
    }
}

#[test]
fn a_circle_is_found_and_named() {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    graph.insert("a.rs".into(), ["b.rs".to_owned()].into());
    graph.insert("b.rs".into(), ["c.rs".to_owned()].into());
    graph.insert("c.rs".into(), BTreeSet::new());
    assert_eq!(circle(&graph), None);
    graph.insert("c.rs".into(), ["a.rs".to_owned()].into());
    assert_eq!(circle(&graph).unwrap(), ["a.rs", "b.rs", "c.rs", "a.rs"]);
}

#[test]
fn imports_are_read_from_use_lines_and_paths_in_code() {
    let text = "//! [`crate::doc::Only`] is a comment\n\
                use crate::{model::{DpSnap, EventKind}, authz};\n\
                use super::sibling::Thing as Other;\n\
                fn f() { crate::prom::serve(x); self::child::g(); }\n\
                #[cfg(test)]\nmod tests { use crate::tested::X; }\n";
    let got: BTreeSet<String> = named_modules("server/inner.rs", text)
        .iter()
        .map(|p| p.join("::"))
        .collect();
    let want: BTreeSet<String> = [
        "model::DpSnap",
        "model::EventKind",
        "authz",
        "server::sibling::Thing",
        "prom::serve",
        "server::inner::child::g",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(got, want);
}

#[test]
fn the_cycles_this_test_was_written_for_would_be_found() {
    // dp.rs naming the model and the model naming dp.rs, as they once did.
    let files: BTreeSet<String> = ["dp.rs", "model.rs"].map(str::to_owned).into();
    let dp = named_modules("dp.rs", "use crate::model::EventKind;\n");
    let model = named_modules("model.rs", "use crate::dp::DpSnap;\n");
    let mut graph = BTreeMap::new();
    graph.insert(
        "dp.rs".to_owned(),
        dp.iter()
            .filter_map(|m| file_of(m, &files))
            .collect::<BTreeSet<_>>(),
    );
    graph.insert(
        "model.rs".to_owned(),
        model
            .iter()
            .filter_map(|m| file_of(m, &files))
            .collect::<BTreeSet<_>>(),
    );
    assert_eq!(circle(&graph).unwrap(), ["dp.rs", "model.rs", "dp.rs"]);
}
