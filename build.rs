//! Records the git commit the binaries are built from, for `--version`:
//! `git rev-parse --short HEAD`, or BORDER_GIT_COMMIT when set (a build
//! from a source tarball can name its commit), or `unknown` outside a
//! git checkout.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=BORDER_GIT_COMMIT");
    let commit = std::env::var("BORDER_GIT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=BORDER_GIT_COMMIT={commit}");
    // Build again when HEAD moves: a checkout changes HEAD, a commit
    // appends to HEAD's reflog (a worktree has its own of both).
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        for file in ["HEAD", "logs/HEAD"] {
            let path = Path::new(&dir).join(file);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
}
