//! The open-loop tables in docs/performance.md are generated from the
//! committed JSON of `perf/openloop.py` (`--render`): each generated section
//! is remade from the JSON its marker names and compared with the doc. No
//! benchmark runs here; only python3 and the renderer.

use std::path::{Path, PathBuf};
use std::process::Command;

const DOC: &str = "docs/performance.md";
const BEGIN: &str = "<!-- generated from ";
const BY: &str = " by perf/openloop.py --render -->";
const END: &str = "<!-- end generated -->";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The open-loop sections of `doc`: (the JSON its marker names, the text
/// between the marker and the end marker, trimmed).
fn sections(doc: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = doc;
    while let Some(i) = rest.find(BEGIN) {
        let after = &rest[i + BEGIN.len()..];
        let close = after.find("-->").expect("a generated marker is closed") + 3;
        let marker = &after[..close];
        rest = &after[close..];
        let Some(json) = marker.strip_suffix(BY) else {
            continue; // another script's generated section
        };
        let stop = rest
            .find(END)
            .unwrap_or_else(|| panic!("no {END} after the marker of {json}"));
        out.push((json.to_string(), rest[..stop].trim().to_string()));
        rest = &rest[stop..];
    }
    out
}

fn render(json: &Path) -> String {
    let out = Command::new("python3")
        .arg("perf/openloop.py")
        .arg("--render")
        .arg("--json")
        .arg(json)
        .current_dir(root())
        .output()
        .expect("python3 runs perf/openloop.py");
    assert!(
        out.status.success(),
        "perf/openloop.py --render --json {}: {}",
        json.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_open_loop_sections_are_their_json() {
    let doc = std::fs::read_to_string(root().join(DOC)).unwrap();
    let found = sections(&doc);
    assert!(!found.is_empty(), "{DOC} has no open-loop section");
    for (json, shown) in found {
        assert!(
            json.starts_with("perf/results/openloop-") && json.ends_with(".json"),
            "{json}"
        );
        let made = render(Path::new(&json));
        assert_eq!(
            shown,
            made.trim(),
            "{DOC}'s section from {json} is not its JSON: run \
             python3 perf/openloop.py --render --json {json} --write-doc {DOC}"
        );
    }
}

/// The comparison above sees a changed measurement: one number of the JSON
/// changed, its rendering no longer matches the doc.
#[test]
fn a_changed_measurement_changes_the_tables() {
    let doc = std::fs::read_to_string(root().join(DOC)).unwrap();
    let (json, shown) = sections(&doc).remove(0);
    let mut report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root().join(&json)).unwrap()).unwrap();
    let per10k = &mut report["peers"][0]["runs"][0]["cpu_s_per_10k"]["middle"];
    let was = per10k.as_f64().expect("a CPU figure in the JSON");
    *per10k = serde_json::json!(was + 1.0);
    let dir = std::env::temp_dir().join(format!("border-openloop-tables-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let changed = dir.join("openloop.json");
    std::fs::write(&changed, serde_json::to_vec(&report).unwrap()).unwrap();
    let made = render(&changed);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_ne!(shown, made.trim(), "a changed CPU figure went unseen");
}
