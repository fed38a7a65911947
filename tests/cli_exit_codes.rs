//! borderctl's exit-status table (docs/api.md, "Exit status") holds for
//! every command: against a target that is not there each one exits 3, as
//! one error line or, with `--json`, one JSON object on stderr; a bad
//! command line exits 2; `counters` and `status --local` of a border-dp
//! that has stopped exit 1 and still show what its state region holds.
//!
//! No daemon runs: the targets are a socket path that does not exist, a
//! socket nobody listens on, a socket that never answers, and instances
//! (`ec-` prefix) without a state region, or with one written here.

use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::Command;

use conf::state::{state_path, RunState, StateRegion};

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

struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!("border-ec-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The example config as instance `instance`, serving capture (so that
/// `capture` gets as far as looking for border-dp).
fn capture_config(dir: &Scratch, instance: &str) -> PathBuf {
    let example = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("conf/tests/data/border.example.toml"),
    )
    .unwrap();
    let text = example
        .replace("instance = \"demo\"", &format!("instance = \"{instance}\""))
        .replace(
            "eal_args = [\"--no-huge\", \"-m\", \"512\", \"--no-pci\", \"--no-shconf\"]",
            "eal_args = [\"--no-pci\"]",
        )
        .replace("# capture = true ", "capture = true ");
    assert!(text.contains("\ncapture = true"), "the example changed");
    let path = dir.path("border.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Every command's arguments against `server` (or the instance), beside
/// the commands `borderctl --help` lists: a command added without a line
/// here fails the test.
fn every_command(server: &str, instance: &str, apply: &str, config: &str) -> Vec<Vec<String>> {
    let s = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    let cases = vec![
        s(&["status", "--server", server]),
        s(&["status", "--local", "--instance", instance]),
        s(&["status", "--instance", instance]),
        s(&["apply", apply, "--server", server]),
        s(&["apply", apply, "--dry-run", "--server", server]),
        s(&["config", "show", "--server", server]),
        s(&["health", "--server", server]),
        s(&["drain", "web", "10.20.0.11:8080", "--server", server]),
        s(&["undrain", "web", "10.20.0.11:8080", "--server", server]),
        s(&["weight", "web", "10.20.0.11:8080", "5", "--server", server]),
        s(&[
            "backend",
            "add",
            "web",
            "10.20.0.12:8080",
            "--weight",
            "2",
            "--server",
            server,
        ]),
        s(&[
            "backend",
            "remove",
            "web",
            "10.20.0.11:8080",
            "--server",
            server,
        ]),
        s(&[
            "backend",
            "disable",
            "web",
            "10.20.0.11:8080",
            "--kill",
            "--server",
            server,
        ]),
        s(&[
            "backend",
            "enable",
            "web",
            "10.20.0.11:8080",
            "--server",
            server,
        ]),
        s(&["vip", "add", apply, "--dry-run", "--server", server]),
        s(&["vip", "remove", "web", "--server", server]),
        s(&["stats", "--server", server]),
        s(&["stats", "--instance", instance]),
        s(&["events", "--count", "1", "--server", server]),
        s(&["conns", "--vip", "10.20.0.100:80", "--server", server]),
        s(&["maintenance", "on", "--server", server]),
        s(&["log-level", "debug", "--server", server]),
        s(&["log-level", "info", "--daemon", "dp", "--server", server]),
        s(&["diag", "--window", "1s", "--server", server]),
        s(&["counters", "--instance", instance]),
        s(&[
            "capture",
            "--config",
            config,
            "--port",
            "ext",
            "--duration",
            "1s",
            "-w",
            "/nonexistent/ec.pcapng",
        ]),
    ];
    let (_, help, _) = borderctl(&["--help"]);
    let listed: Vec<&str> = help
        .lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        // No target: they write what they make.
        .filter(|c| !["help", "completions", "man-pages"].contains(c))
        .collect();
    for c in &listed {
        assert!(
            cases.iter().any(|a| a[0] == *c),
            "`borderctl {c}` has no case in this test: add one"
        );
    }
    assert!(listed.len() >= 11, "{listed:?}");
    cases
}

/// `args` exits `code` with one error line, and with `--json` one JSON
/// object of the same code and `kind`; returns the error text.
fn fails_with(args: &[String], code: i32, kind: &str) -> String {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (got, out, err) = borderctl(&args);
    assert_eq!(
        got, code,
        "borderctl {args:?}\nstdout: {out}\nstderr: {err}"
    );
    assert_eq!(err.lines().count(), 1, "borderctl {args:?}: {err}");
    let text = err
        .trim_end()
        .strip_prefix("borderctl: error: ")
        .unwrap_or_else(|| panic!("borderctl {args:?}: not an error line: {err}"))
        .to_string();

    let mut with_json = args.clone();
    with_json.push("--json");
    let (got, out, err) = borderctl(&with_json);
    assert_eq!(got, code, "borderctl {with_json:?}\nstderr: {err}");
    assert!(out.is_empty(), "borderctl {with_json:?}: {out}");
    assert_eq!(err.lines().count(), 1, "borderctl {with_json:?}: {err}");
    let v: serde_json::Value = serde_json::from_str(&err)
        .unwrap_or_else(|e| panic!("borderctl {with_json:?}: not JSON ({e}): {err}"));
    assert_eq!(v["code"], code, "{v}");
    assert_eq!(v["kind"], kind, "{v}");
    assert_eq!(
        v["error"],
        text.as_str(),
        "the same error as text and as JSON"
    );
    text
}

#[test]
fn every_command_exits_3_when_its_target_is_not_there() {
    let dir = Scratch::new("away");
    let instance = format!("ec-away-{}", std::process::id());
    let apply = dir.path("new.toml");
    std::fs::write(&apply, "instance = \"x\"\n").unwrap();
    let config = capture_config(&dir, &instance);
    let absent = format!("unix://{}", dir.path("absent.sock").display());
    let cases = every_command(
        &absent,
        &instance,
        apply.to_str().unwrap(),
        config.to_str().unwrap(),
    );
    for args in &cases {
        let e = fails_with(args, 3, "unreachable");
        let about_mgmt = e.contains("border-mgmt is not reachable");
        let about_dp = e.contains(&format!(
            "border-dp of instance `{instance}` is not running"
        ));
        assert!(about_mgmt || about_dp, "{args:?}: {e}");
    }

    // A socket file nobody listens on: connection refused.
    let refused = dir.path("refused.sock");
    drop(UnixListener::bind(&refused).unwrap());
    let server = format!("unix://{}", refused.display());
    let e = fails_with(
        &[
            "drain".into(),
            "web".into(),
            "10.20.0.11:8080".into(),
            "--server".into(),
            server,
        ],
        3,
        "unreachable",
    );
    assert!(e.contains("Connection refused"), "{e}");

    // A socket that accepts and never answers: --timeout-ms, with a unit.
    let silent = dir.path("silent.sock");
    let _listener = UnixListener::bind(&silent).unwrap();
    let server = format!("unix://{}", silent.display());
    for timeout in ["300ms", "300"] {
        let t = std::time::Instant::now();
        let e = fails_with(
            &[
                "stats",
                "--timeout-ms",
                timeout,
                "--server",
                server.as_str(),
            ]
            .map(String::from),
            3,
            "unreachable",
        );
        assert!(e.contains("within 300 ms"), "{e}");
        assert!(
            t.elapsed() < std::time::Duration::from_secs(5),
            "{:?}",
            t.elapsed()
        );
    }
}

#[test]
fn a_bad_command_line_exits_2_and_with_json_says_so_in_json() {
    for args in [
        &["statu"][..],
        &["diag", "--window", "2h"][..],
        &["stats", "--timeout-ms", "5 apples"][..],
        &["--config", "x.toml", "status", "--instance", "ec-x"][..],
        &["counters"][..],
        &["status", "--local"][..],
        &["conns", "--limit", "0"][..],
        &["conns", "--client"][..],
        &["log-level", "loud"][..],
        &["log-level", "debug", "--daemon", "gw"][..],
    ] {
        let (code, _, err) = borderctl(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.starts_with("error: "), "{args:?}: {err}");
        let mut json = args.to_vec();
        json.push("--json");
        let (code, out, err) = borderctl(&json);
        assert_eq!(code, 2, "{json:?}: {err}");
        assert!(out.is_empty());
        assert_eq!(err.lines().count(), 1, "{json:?}: {err}");
        let v: serde_json::Value = serde_json::from_str(&err).unwrap();
        assert_eq!(
            (v["code"].as_u64(), v["kind"].as_str()),
            (Some(2), Some("usage")),
            "{v}"
        );
        assert!(!v["error"].as_str().unwrap().is_empty(), "{v}");
    }
    let (_, _, err) = borderctl(&["diag", "--window", "2h", "--json"]);
    assert!(err.contains("2h is not between 1s and 1h"), "{err}");
    // Help is not an error, with or without --json.
    let (code, out, _) = borderctl(&["status", "--help", "--json"]);
    assert_eq!(code, 0);
    assert!(out.contains("Usage: borderctl status"), "{out}");
}

/// A state region of instance `name` as border-dp leaves it, with this
/// process as its pid; removed on drop.
struct Region(PathBuf);

impl Region {
    fn new(name: &str, state: RunState) -> Region {
        let path = state_path(name);
        let region = StateRegion::create(&path, &[1]).unwrap();
        region.set_run_state(state);
        Region(path)
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn a_stopped_border_dp_is_a_problem_its_counters_are_still_shown() {
    let name = format!("ec-stopped-{}", std::process::id());
    let _region = Region::new(&name, RunState::Stopped);
    let (code, out, err) = borderctl(&["counters", "--instance", &name, "--json"]);
    assert_eq!(code, 1, "{out}\n{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["running"], false, "{v}");
    assert!(
        v["counters"].as_object().is_some_and(|c| !c.is_empty()),
        "{v}"
    );
    let note: serde_json::Value = serde_json::from_str(err.trim()).unwrap();
    assert!(
        note["note"]
            .as_str()
            .unwrap()
            .contains("these are the counters of its last run"),
        "{note}"
    );
    let (code, out, err) = borderctl(&["counters", "--instance", &name]);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        err.starts_with("borderctl: note: border-dp of instance"),
        "{err}"
    );
    let (code, _, _) = borderctl(&[
        "status",
        "--local",
        "--instance",
        &name,
        "--sample-ms",
        "20ms",
    ]);
    assert_eq!(code, 1);

    // The same region while border-dp runs (this process is its pid).
    let running = format!("ec-running-{}", std::process::id());
    let _region = Region::new(&running, RunState::Running);
    let (code, out, err) = borderctl(&["counters", "--instance", &running]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(err.is_empty(), "{err}");
}
