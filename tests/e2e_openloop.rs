//! The open-loop harness (`perf/openloop.py`, docs/performance.md) in its
//! short form: one peer (border full-NAT over TAP, this build's border-dp),
//! two fixed rates of a few seconds each; its JSON checked for sane numbers
//! and its namespaces (`ll-lb`, `ll-cli`, `ll-bk`) and processes gone after.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Instant;

use common::*;
use serde_json::Value;

/// The tests take turns: a failed run removes the ll-* namespaces, even
/// those of a run beside it.
static TURN: Mutex<()> = Mutex::new(());

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("perf/openloop.py")
}

fn num(v: &Value, path: &[&str]) -> f64 {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_f64()
        .unwrap_or_else(|| panic!("{path:?} is not a number in {v}"))
}

fn nothing_left() {
    let ns = run(&["ip", "netns", "list"]);
    let ns = String::from_utf8_lossy(&ns.stdout);
    for name in ["ll-lb", "ll-cli", "ll-bk"] {
        assert!(
            !ns.lines()
                .any(|l| l.split_whitespace().next() == Some(name)),
            "namespace {name} left behind: {ns}"
        );
    }
    let mut left = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains("border-openloop-") || cmdline.contains("--file-prefix=ll-fwd") {
            left.push(cmdline);
        }
    }
    assert!(left.is_empty(), "processes left behind: {left:?}");
}

#[test]
fn short_open_loop_run_measures_cpu_and_latency() {
    let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    let dir = TempDir::new("ll-openloop");
    let json = dir.path("openloop.json");
    let start = Instant::now();
    let out = Command::new("python3")
        .arg(script())
        .args([
            "--peers",
            "border-fullnat",
            "--loads",
            "25,50",
            "--duration",
            "3",
            "--ceiling-duration",
            "3",
            "--pause",
            "0.5",
            "--border-dp",
            border_dp_bin(),
            "--json",
            json.to_str().unwrap(),
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "openloop.py failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{stdout}\n(took {:?})", start.elapsed());
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(report["commit"].as_str().is_some_and(|c| !c.is_empty()));
    assert!(report["command"]
        .as_str()
        .is_some_and(|c| c.contains("--loads 25,50")));
    for when in ["start", "end"] {
        let la = report["load_average"][when]
            .as_array()
            .expect("load average");
        assert_eq!(la.len(), 3, "{when}: {la:?}");
    }
    let peers = report["peers"].as_array().expect("peers");
    assert_eq!(peers.len(), 1);
    let peer = &peers[0];
    assert_eq!(peer["peer"], "border-fullnat");
    let ceiling = num(peer, &["ceiling", "cps"]);
    assert!(ceiling > 0.0, "{peer}");
    let runs = peer["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2);
    let mut last_offered = 0.0;
    for (run, fraction) in runs.iter().zip([0.25, 0.5]) {
        assert_eq!(num(run, &["fraction"]), fraction);
        // The offered rate is the fraction of the ceiling (h2load's whole
        // milliseconds round it a little).
        let offered = num(run, &["offered_cps"]);
        let want = (ceiling * fraction).max(1.0);
        assert!(
            (offered - want).abs() <= want * 0.1 + 1.0,
            "offered {offered} for {want}: {run}"
        );
        assert!(offered > last_offered, "{run}");
        last_offered = offered;
        let done = num(run, &["requests", "succeeded"]);
        assert!(done > 0.0, "no connection completed: {run}");
        assert!(done <= num(run, &["connections"]), "{run}");
        assert!(num(run, &["achieved_cps"]) > 0.0, "{run}");
        assert!(num(run, &["cpu_seconds", "middle_process"]) > 0.0, "{run}");
        assert!(num(run, &["cpu_s_per_10k", "middle"]) > 0.0, "{run}");
        assert!(num(run, &["cpu_seconds", "nginx"]) >= 0.0, "{run}");
        let (p50, p99, p999) = (
            num(run, &["latency_ms", "p50"]),
            num(run, &["latency_ms", "p99"]),
            num(run, &["latency_ms", "p99.9"]),
        );
        assert!(
            0.0 < p50 && p50 <= p99 && p99 <= p999,
            "latency {p50} {p99} {p999}: {run}"
        );
        assert_eq!(run["load_average_before"].as_array().map(Vec::len), Some(3));
    }
    assert!(stdout.contains("| border-fullnat "), "{stdout}");
    nothing_left();
}

/// Bad input is one line naming what failed, before anything is set up.
#[test]
fn bad_input_is_one_line() {
    let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    for (args, want) in [
        (&["--peers", "lvs"][..], "unknown peer 'lvs'"),
        (&["--loads", "50,abc"][..], "--loads"),
        (
            &["--render", "--json", "/nonexistent/openloop.json"][..],
            "/nonexistent/openloop.json",
        ),
    ] {
        let out = Command::new("python3")
            .arg(script())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(!stderr.contains("Traceback"), "{stderr}");
        let line = stderr.trim_end();
        assert!(
            line.starts_with("openloop.py: error: ") && !line.contains('\n') && line.contains(want),
            "{args:?}: {stderr}"
        );
    }
    nothing_left();
}
