//! Every "docs/design.md §n" that code and docs cite names a section that
//! exists in docs/design.md, and nothing cites the old out-of-tree DESIGN file.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Source and documentation files of the repository (no build output).
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "target" || name == "__pycache__" {
            continue;
        }
        if path.is_dir() {
            files(&path, out);
        } else if ["rs", "md", "toml", "sh", "py", "proto"]
            .iter()
            .any(|ext| path.extension().is_some_and(|e| e == *ext))
        {
            out.push(path);
        }
    }
}

/// The section numbers of docs/design.md: headings `## 2a. Title`.
fn sections() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("docs/design.md")).unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("## "))
        .filter_map(|h| h.split_once(". "))
        .map(|(n, _)| n.to_string())
        .collect()
}

/// The sections cited after each "design.md §" (or "design.md) §" in a
/// Markdown link): `§1, §3 and §6` gives 1, 3 and 6.
fn citations(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for marker in ["design.md §", "design.md) §"] {
        let mut rest = text;
        while let Some(at) = rest.find(marker) {
            rest = &rest[at + marker.len()..];
            let mut list = rest;
            loop {
                let n: String = list
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric())
                    .collect();
                out.push(n.clone());
                list = &list[n.len()..];
                match [", §", " and §"].iter().find(|s| list.starts_with(**s)) {
                    Some(sep) => list = &list[sep.len()..],
                    None => break,
                }
            }
        }
    }
    out
}

#[test]
fn every_design_citation_names_an_existing_section() {
    let known = sections();
    assert!(known.len() >= 11, "docs/design.md sections: {known:?}");
    let mut all = Vec::new();
    files(&root(), &mut all);
    let mut bad = Vec::new();
    let mut cited = 0;
    for path in all {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let shown = path.strip_prefix(root()).unwrap().display().to_string();
        if shown == "tests/design_references.rs" {
            continue; // its own patterns and examples
        }
        if text.contains("DESIGN §") || text.contains("DESIGN.md §") {
            bad.push(format!(
                "{shown}: cites the old DESIGN file; cite docs/design.md §n"
            ));
        }
        for n in citations(&text) {
            cited += 1;
            if !known.contains(&n) {
                bad.push(format!("{shown}: docs/design.md §{n} does not exist"));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert!(
        cited >= 28,
        "only {cited} citations found: is the scan right?"
    );
}

#[test]
fn citation_lists_are_read_whole() {
    assert_eq!(
        citations("(docs/design.md §1, §3, §6) and ([design.md](design.md) §2a and §5)"),
        ["1", "3", "6", "2a", "5"]
    );
}
