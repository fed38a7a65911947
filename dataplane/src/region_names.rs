//! The names of the per-worker regions a restart hands over (flows,
//! carry): `border-<instance>-<kind>-<worker>` while live, and
//! `….g<generation>` while a start adopts from them, so that a crash
//! during adoption leaves them to the next start.

use std::path::{Path, PathBuf};

/// The live path of worker `w`'s region of `kind`.
pub fn live_path(instance: &str, kind: &str, w: usize) -> PathBuf {
    conf::os::region_dir().join(format!("border-{instance}-{kind}-{w}"))
}

/// The name of worker `w`'s region of `kind` and `generation` while a
/// start adopts from it.
pub fn pending_path(dir: &Path, instance: &str, kind: &str, w: usize, generation: u64) -> PathBuf {
    dir.join(format!("border-{instance}-{kind}-{w}.g{generation}"))
}

/// Every region file of `kind` of `instance` in `dir`: path, worker, and
/// the generation of its name (`None`: the live name); oldest generation
/// first, live names first of all.
pub fn region_files(dir: &Path, instance: &str, kind: &str) -> Vec<(PathBuf, usize, Option<u64>)> {
    let prefix = format!("border-{instance}-{kind}-");
    let Ok(dir) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<_> = dir
        .filter_map(Result::ok)
        .filter_map(|d| {
            let name = d.file_name().into_string().ok()?;
            let rest = name.strip_prefix(&prefix)?;
            let (w, g) = match rest.split_once(".g") {
                Some((w, g)) => (w, Some(g.parse::<u64>().ok()?)),
                None => (rest, None),
            };
            let w = w.parse::<usize>().ok()?;
            Some((d.path(), w, g))
        })
        .collect();
    out.sort_by_key(|(_, w, g)| (*g, *w));
    out
}
