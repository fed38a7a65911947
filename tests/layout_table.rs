//! The layout table of docs/architecture.md is the one description of the
//! tree: every Rust source file under a crate's `src/` has a row, every path
//! a row names exists, and the dataplane files marked "calls dpdk-ffi" are
//! exactly those that do.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const BEGIN: &str = "<!-- layout table:";
const END: &str = "<!-- end layout table -->";
const FFI_MARK: &str = "(calls dpdk-ffi)";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One row: the paths its first cell names (in backquotes) and its job.
struct Row {
    paths: Vec<String>,
    job: String,
}

/// The rows of the table in `doc`, between its markers.
fn rows(doc: &str) -> Vec<Row> {
    let start = doc
        .find(BEGIN)
        .expect("docs/architecture.md has no layout table marker");
    let stop = doc[start..]
        .find(END)
        .expect("the layout table has no end marker")
        + start;
    doc[start..stop]
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| path |") && !l.starts_with("| ---"))
        .map(|line| {
            let (first, job) = line[2..]
                .split_once(" | ")
                .unwrap_or_else(|| panic!("a layout row without a job: {line}"));
            let paths = first
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect();
            Row {
                paths,
                job: job.trim_end_matches('|').trim().to_string(),
            }
        })
        .collect()
}

/// Every `*.rs` under a directory named `src` (build output and hidden
/// directories left out), relative to the repository.
fn sources(dir: &Path, in_src: bool, out: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "target" {
            continue;
        }
        if path.is_dir() {
            sources(&path, in_src || name == "src", out);
        } else if in_src && name.ends_with(".rs") {
            let rel = path.strip_prefix(root()).unwrap();
            out.insert(rel.to_string_lossy().into_owned());
        }
    }
}

/// Whether `text` uses dpdk-ffi outside comments.
fn calls_dpdk_ffi(text: &str) -> bool {
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .any(|code| code.contains("dpdk_ffi"))
}

fn table() -> Vec<Row> {
    let doc = std::fs::read_to_string(root().join("docs/architecture.md")).unwrap();
    let rows = rows(&doc);
    assert!(
        rows.len() > 100,
        "only {} layout rows: is the parse right?",
        rows.len()
    );
    rows
}

#[test]
fn every_source_file_has_a_row() {
    let named: BTreeSet<String> = table().into_iter().flat_map(|r| r.paths).collect();
    let mut all = BTreeSet::new();
    sources(&root(), false, &mut all);
    assert!(
        all.contains("dataplane/src/worker.rs"),
        "scan found {all:?}"
    );
    let missing: Vec<_> = all.difference(&named).collect();
    assert!(
        missing.is_empty(),
        "source files without a row in docs/architecture.md's layout table \
         (add one with the file's job):\n{}",
        missing
            .iter()
            .map(|m| m.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn every_row_names_what_exists_and_says_its_job() {
    let mut bad = Vec::new();
    for row in table() {
        if row.paths.is_empty() || row.job.is_empty() {
            bad.push(format!(
                "a row without a path or a job: {:?} {}",
                row.paths, row.job
            ));
        }
        for p in &row.paths {
            let path = root().join(p);
            let exists = if p.ends_with('/') {
                path.is_dir()
            } else {
                path.is_file()
            };
            if !exists {
                bad.push(format!("{p}: named in the layout table, not in the tree"));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn only_the_marked_dataplane_files_call_dpdk_ffi() {
    let mut marked = BTreeSet::new();
    for row in table() {
        if row.job.contains(FFI_MARK) {
            marked.extend(row.paths);
        }
    }
    let mut all = BTreeSet::new();
    sources(&root().join("dataplane"), false, &mut all);
    let calling: BTreeSet<String> = all
        .into_iter()
        .filter(|f| calls_dpdk_ffi(&std::fs::read_to_string(root().join(f)).unwrap()))
        .collect();
    assert!(calling.contains("dataplane/src/io_dpdk.rs"), "{calling:?}");
    assert_eq!(
        calling, marked,
        "dataplane files that use dpdk_ffi (left) and the rows marked {FFI_MARK:?} (right) differ"
    );
}

#[test]
fn a_row_names_each_path_in_its_first_cell() {
    let r = rows(&format!(
        "{BEGIN} x -->\n| path | job |\n| --- | --- |\n| `a/src/b.rs` | b's job |\n| `c/`, `d/` | e \\| f |\n{END}"
    ));
    assert_eq!(r.len(), 2);
    assert_eq!(r[0].paths, ["a/src/b.rs"]);
    assert_eq!(r[0].job, "b's job");
    assert_eq!(r[1].paths, ["c/", "d/"]);
    assert!(calls_dpdk_ffi("use dpdk_ffi::port;"));
    assert!(!calls_dpdk_ffi(
        "/// (`dpdk_ffi::port::PortInfo` is what DPDK says"
    ));
}
