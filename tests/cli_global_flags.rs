//! borderctl's target flags and `--json` go before or after the command, as
//! kubectl and git users expect: both spellings run the same command with
//! the same outcome. Uses an instance that does not exist (`cg-` prefix),
//! so nothing needs to run.

use std::process::Command;

const BORDERCTL: &str = env!("CARGO_BIN_EXE_borderctl");

/// (exit code, stdout, stderr) of borderctl `args`.
fn borderctl(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BORDERCTL)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run borderctl: {e}"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn target_flags_before_and_after_the_command_do_the_same() {
    let instance = "cg-nothing-runs";
    let socket = "unix:///nonexistent/cg-api.sock";
    // (before, after, exit status: 3 the target is not there, 1 the
    // config cannot be read)
    for (before, after, code) in [
        (
            vec!["--instance", instance, "counters", "--all"],
            vec!["counters", "--all", "--instance", instance],
            3,
        ),
        (
            vec!["--instance", instance, "--json", "status", "--local"],
            vec!["status", "--local", "--json", "--instance", instance],
            3,
        ),
        (
            vec!["--config", "/nonexistent/cg.toml", "status"],
            vec!["status", "--config", "/nonexistent/cg.toml"],
            1,
        ),
        (
            vec!["--server", socket, "--timeout-ms", "500", "stats"],
            vec!["stats", "--timeout-ms", "500ms", "--server", socket],
            3,
        ),
    ] {
        let a = borderctl(&before);
        let b = borderctl(&after);
        assert_eq!(a, b, "{before:?} and {after:?} differ");
        // Each reached its command: a one-line error about the target, not
        // a usage error.
        assert_eq!(a.0, code, "{before:?}: {a:?}");
        assert_eq!(a.2.lines().count(), 1, "{before:?}: {}", a.2);
        if before.contains(&"--json") {
            let v: serde_json::Value = serde_json::from_str(&a.2).unwrap();
            assert_eq!(v["code"], code, "{before:?}: {v}");
        } else {
            assert!(a.2.starts_with("borderctl: error: "), "{before:?}: {}", a.2);
        }
    }
    let (_, _, err) = borderctl(&["--instance", instance, "counters"]);
    assert!(
        err.contains("border-dp of instance `cg-nothing-runs` is not running"),
        "{err}"
    );
    let (_, _, err) = borderctl(&["--server", socket, "stats"]);
    assert!(
        err.contains("border-mgmt is not reachable") && err.contains(socket),
        "{err}"
    );
}

#[test]
fn global_flags_keep_their_rules_across_the_command() {
    for args in [
        &["--config", "x.toml", "status", "--instance", "cg-x"][..],
        &["--cert", "c.pem", "stats", "--key", "k.pem"][..],
        &["counters"][..],
        &[
            "--server",
            "unix:///x.sock",
            "counters",
            "--instance",
            "cg-x",
        ][..],
    ] {
        let (code, _, err) = borderctl(args);
        assert_eq!(code, 2, "{args:?}: a usage error\n{err}");
        assert!(err.starts_with("error: "), "{args:?}: {err}");
    }
}

#[test]
fn the_target_flags_are_listed_once_under_their_heading() {
    let (_, top, _) = borderctl(&["--help"]);
    let target = top
        .split("\nTarget:\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no Target: heading\n{top}"));
    for flag in [
        "--server",
        "--config",
        "--instance",
        "--cert",
        "--key",
        "--ca",
        "--server-name",
        "--gateway",
        "--appliance",
        "--timeout-ms",
    ] {
        assert_eq!(
            top.matches(&format!("  {flag} <")).count(),
            1,
            "{flag} once in borderctl --help"
        );
        assert!(
            target.contains(&format!("  {flag} <")),
            "{flag} under Target:"
        );
    }
    for cmd in ["status", "stats", "drain", "diag", "counters", "capture"] {
        let (code, help, _) = borderctl(&[cmd, "--help"]);
        assert_eq!(code, 0);
        assert!(
            !help.contains("--server <") && !help.contains("--timeout-ms <"),
            "`{cmd} --help` repeats the target flags:\n{help}"
        );
        assert!(
            help.contains("Target: --server, --config, --instance")
                && help.contains("see `borderctl --help`"),
            "`{cmd} --help` does not say where the target flags are:\n{help}"
        );
        assert!(help.contains("--json"), "{cmd}: {help}");
    }
}
