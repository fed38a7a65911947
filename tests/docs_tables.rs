//! Tables in the docs made from a command's JSON must say what the JSON
//! says: each is remade from its JSON here and compared with the doc.

use std::process::Command;

/// The text between `begin` and `end` in `doc`, trimmed.
fn between<'a>(doc: &'a str, begin: &str, end: &str) -> &'a str {
    let start = doc
        .find(begin)
        .unwrap_or_else(|| panic!("no marker {begin}"))
        + begin.len();
    let stop = doc[start..]
        .find(end)
        .unwrap_or_else(|| panic!("no marker {end}"))
        + start;
    doc[start..stop].trim()
}

#[test]
fn the_flood_table_is_the_json_of_scripts_floods_sh() {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new("python3")
        .arg("scripts/floods_table.py")
        .current_dir(root)
        .output()
        .expect("python3 runs scripts/floods_table.py");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let made = String::from_utf8(out.stdout).unwrap();
    let doc = std::fs::read_to_string(format!("{root}/docs/reliability.md")).unwrap();
    let shown = between(
        &doc,
        "<!-- floods table: made by scripts/floods_table.py from docs/reliability-floods.json -->",
        "<!-- end floods table -->",
    );
    assert_eq!(
        shown,
        made.trim(),
        "docs/reliability.md's flood table is not docs/reliability-floods.json: run python3 scripts/floods_table.py --write"
    );
}
