//! The man pages and shell completions the Debian package installs: the
//! copies in deploy/man and deploy/completions are what the binaries make
//! now (`borderctl man-pages`, `borderctl completions`), every page renders
//! with groff and man without a warning, the completions know every
//! command, and the package metadata installs them where Debian looks.
//!
//! After a change to a command line, refresh the copies with
//! `BORDER_REFRESH_MANUALS=1 cargo test --test cli_manuals`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const BORDERCTL: &str = env!("CARGO_BIN_EXE_borderctl");
const SHELLS: [(&str, &str); 3] = [
    ("bash", "borderctl.bash"),
    ("zsh", "_borderctl"),
    ("fish", "borderctl.fish"),
];

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn refresh() -> bool {
    std::env::var_os("BORDER_REFRESH_MANUALS").is_some()
}

fn run(cmd: &mut Command) -> (bool, String, String) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn files(dir: &Path) -> BTreeMap<String, String> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().into_string().unwrap(),
                std::fs::read_to_string(e.path()).unwrap(),
            )
        })
        .collect()
}

/// borderctl's commands as `borderctl --help` lists them.
fn commands() -> Vec<String> {
    let (_, help, _) = run(Command::new(BORDERCTL).arg("--help"));
    help.lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(String::from)
        .collect()
}

struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn the_man_pages_in_deploy_are_current_and_render() {
    let tmp = Scratch(std::env::temp_dir().join(format!("border-man-{}", std::process::id())));
    let (ok, _, err) = run(Command::new(BORDERCTL).arg("man-pages").arg(&tmp.0));
    assert!(ok, "borderctl man-pages: {err}");
    let made = files(&tmp.0);
    let kept_dir = repo().join("deploy/man");
    if refresh() {
        let _ = std::fs::remove_dir_all(&kept_dir);
        std::fs::create_dir_all(&kept_dir).unwrap();
        for (name, text) in &made {
            std::fs::write(kept_dir.join(name), text).unwrap();
        }
    }
    let kept = files(&kept_dir);
    assert_eq!(
        kept.keys().collect::<Vec<_>>(),
        made.keys().collect::<Vec<_>>(),
        "deploy/man is stale: BORDER_REFRESH_MANUALS=1 cargo test --test cli_manuals"
    );
    for (name, text) in &made {
        assert!(
            kept[name] == *text,
            "deploy/man/{name} is stale: BORDER_REFRESH_MANUALS=1 cargo test --test cli_manuals"
        );
    }
    // One page per binary and per borderctl command.
    for page in ["border-dp.1", "border-mgmt.1", "border-gw.1", "borderctl.1"] {
        assert!(made.contains_key(page), "{page}: {:?}", made.keys());
    }
    for c in commands() {
        assert!(
            made.contains_key(&format!("borderctl-{c}.1")),
            "borderctl {c}"
        );
    }

    for name in made.keys() {
        let page = kept_dir.join(name);
        // -ww: every warning; -z: no output, only the diagnostics.
        let (ok, _, err) = run(Command::new("groff")
            .args(["-man", "-Tutf8", "-ww", "-z"])
            .arg(&page));
        assert!(ok && err.is_empty(), "groff {name}: {err}");
        let (ok, text, err) = run(Command::new("man")
            .arg("-l")
            .arg(&page)
            .env("MANPAGER", "cat")
            .env("MANWIDTH", "100"));
        assert!(ok && err.is_empty(), "man -l {name}: {err}");
        assert!(
            text.contains("NAME") && text.contains("SYNOPSIS"),
            "{name}: {text}"
        );
    }
    let (_, gw, _) = run(Command::new("man")
        .arg("-l")
        .arg(kept_dir.join("border-gw.1"))
        .env("MANPAGER", "cat"));
    assert!(gw.contains("--check-config"), "{gw}");
    assert!(
        !gw.contains("--check "),
        "the old spelling stays out of the page: {gw}"
    );
    let (_, ctl, _) = run(Command::new("man")
        .arg("-l")
        .arg(kept_dir.join("borderctl.1"))
        .env("MANPAGER", "cat"));
    assert!(
        ctl.contains("--timeout-ms") && ctl.contains("borderctl-status(1)"),
        "{ctl}"
    );
}

#[test]
fn the_completions_in_deploy_are_current_and_know_every_command() {
    let commands = commands();
    assert!(
        commands.contains(&"completions".to_string()),
        "{commands:?}"
    );
    for (shell, file) in SHELLS {
        let (ok, script, err) = run(Command::new(BORDERCTL).args(["completions", shell]));
        assert!(ok && err.is_empty(), "completions {shell}: {err}");
        for c in &commands {
            assert!(script.contains(c.as_str()), "{shell}: no `{c}`");
        }
        for flag in ["--server", "--timeout-ms", "--json", "--window"] {
            assert!(
                script.contains(flag.trim_start_matches('-')),
                "{shell}: no {flag}"
            );
        }
        let kept = repo().join("deploy/completions").join(file);
        if refresh() {
            std::fs::write(&kept, &script).unwrap();
        }
        assert!(
            std::fs::read_to_string(&kept).unwrap() == script,
            "{} is stale: BORDER_REFRESH_MANUALS=1 cargo test --test cli_manuals",
            kept.display()
        );
    }
    // bash loads it and completes the commands.
    let kept = repo().join("deploy/completions/borderctl.bash");
    let (ok, out, err) = run(Command::new("bash").arg("-c").arg(format!(
        "source {}; COMP_WORDS=(borderctl st); COMP_CWORD=1; _borderctl borderctl st borderctl; \
         printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        kept.display()
    )));
    assert!(ok, "{err}");
    let offered: Vec<&str> = out.lines().collect();
    assert_eq!(offered, ["status", "stats"], "{err}");
}

#[test]
fn the_package_installs_the_man_pages_and_completions() {
    let manifest: toml::Value =
        toml::from_str(&std::fs::read_to_string(repo().join("Cargo.toml")).unwrap()).unwrap();
    let assets = manifest["package"]["metadata"]["deb"]["assets"]
        .as_array()
        .unwrap();
    let pairs: Vec<(&str, &str)> = assets
        .iter()
        .map(|a| (a[0].as_str().unwrap(), a[1].as_str().unwrap()))
        .collect();
    for want in [
        ("deploy/man/*.1", "usr/share/man/man1/"),
        (
            "deploy/completions/borderctl.bash",
            "usr/share/bash-completion/completions/borderctl",
        ),
        (
            "deploy/completions/_borderctl",
            "usr/share/zsh/vendor-completions/_borderctl",
        ),
        (
            "deploy/completions/borderctl.fish",
            "usr/share/fish/vendor_completions.d/borderctl.fish",
        ),
    ] {
        assert!(pairs.contains(&want), "{want:?} not in {pairs:?}");
    }
    let install = std::fs::read_to_string(repo().join("scripts/install.sh")).unwrap();
    for f in [
        "deploy/man/*.1",
        "borderctl.bash",
        "_borderctl",
        "borderctl.fish",
    ] {
        assert!(
            install.contains(f),
            "scripts/install.sh does not install {f}"
        );
    }
}
