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
    for (before, after) in [
        (
            vec!["--instance", instance, "counters", "--all"],
            vec!["counters", "--all", "--instance", instance],
        ),
        (
            vec!["--instance", instance, "--json", "status", "--local"],
            vec!["status", "--local", "--json", "--instance", instance],
        ),
        (
            vec!["--config", "/nonexistent/cg.toml", "status"],
            vec!["status", "--config", "/nonexistent/cg.toml"],
        ),
        (
            vec!["--server", socket, "--timeout-ms", "500", "stats"],
            vec!["stats", "--timeout-ms", "500", "--server", socket],
        ),
    ] {
        let a = borderctl(&before);
        let b = borderctl(&after);
        assert_eq!(a, b, "{before:?} and {after:?} differ");
        // Each reached its command: a one-line error about the target, not
        // a usage error.
        assert_eq!(a.0, 1, "{before:?}: {a:?}");
        assert_eq!(a.2.lines().count(), 1, "{before:?}: {}", a.2);
        assert!(a.2.starts_with("borderctl: error: "), "{before:?}: {}", a.2);
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
