//! The side-by-side comparison harness (`perf/e2e.py`, docs/performance.md)
//! in its short form: one round of four peers, two of them named twice (so
//! they run twice), 1 s of warm-up and 2 s of measured load each, its JSON
//! checked for sane, non-zero numbers and ratios taken round by round; its
//! bad input (one line naming what failed) and its clean-up when
//! interrupted.
//!
//! The harness names its namespaces `pe-lb`, `pe-cli`, `pe-bk`; the tests
//! here take turns (one lock) because they share them.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

static HARNESS: Mutex<()> = Mutex::new(());

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("perf/e2e.py")
}

/// The interpreter itself (not a wrapper script such as pyenv's shim),
/// so the harness also runs with a PATH that lacks a tool.
fn python3() -> String {
    let out = run(&["python3", "-c", "import sys; print(sys.executable)"]);
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn harness(args: &[&str]) -> Command {
    let mut c = Command::new(python3());
    c.arg(script()).args(args).stdin(Stdio::null());
    c
}

/// No namespace of the harness and no process it started is left.
fn nothing_left() {
    let ns = run(&["ip", "netns", "list"]);
    let ns = String::from_utf8_lossy(&ns.stdout);
    for name in ["pe-lb", "pe-cli", "pe-bk"] {
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
        if cmdline.contains("border-e2e-perf-") || cmdline.contains("--file-prefix=pe-fwd") {
            left.push(cmdline);
        }
    }
    assert!(left.is_empty(), "processes left behind: {left:?}");
}

/// Whether a wrk process runs in the harness's client namespace (not some
/// other wrk on the machine).
fn wrk_in_client_ns() -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(ns) = std::fs::metadata("/var/run/netns/pe-cli") else {
        return false;
    };
    let want = format!("net:[{}]", ns.ino());
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        let c = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        String::from_utf8_lossy(&c).starts_with("wrk\0")
            && std::fs::read_link(e.path().join("ns/net"))
                .is_ok_and(|l| l.to_string_lossy() == want)
    })
}

/// The one `e2e.py: error:` line of a failed run.
fn one_line_error(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "exit status: {stderr}");
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("e2e.py: error: "))
        .collect();
    assert_eq!(errors.len(), 1, "one error line: {stderr}");
    assert!(!stderr.contains("Traceback"), "{stderr}");
    assert_eq!(
        stderr.trim_end().lines().last(),
        Some(errors[0]),
        "{stderr}"
    );
    errors[0].to_string()
}

fn num(v: &Value, path: &[&str]) -> f64 {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_f64()
        .unwrap_or_else(|| panic!("{path:?} is not a number in {v}"))
}

#[test]
fn short_comparison_measures_every_peer() {
    let _turn = HARNESS.lock().unwrap_or_else(|p| p.into_inner());
    let dir = TempDir::new("pe-short");
    let json = dir.path("e2e.json");
    let png = dir.path("cps.png");
    // Named twice, border-fullnat and testpmd-tap run twice in the one round.
    let order = [
        "border-fullnat",
        "testpmd-tap",
        "border-ppv2",
        "haproxy-tcp",
        "border-fullnat",
        "testpmd-tap",
    ];
    let start = Instant::now();
    let out = harness(&[
        "--rounds",
        "1",
        "--warmup",
        "1",
        "--duration",
        "2",
        "--iperf-duration",
        "1",
        "--peers",
        &order.join(","),
        "--border-dp",
        border_dp_bin(),
        "--json",
        json.to_str().unwrap(),
        "--plot",
        png.to_str().unwrap(),
    ])
    .output()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "harness failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{stdout}\n(took {:?})", start.elapsed());
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let commit = report["commit"].as_str().expect("commit");
    assert_eq!(commit.len(), 40, "{commit}");
    assert!(
        report["command"]
            .as_str()
            .is_some_and(|c| c.starts_with("perf/e2e.py ") && c.contains(&order.join(","))),
        "{}",
        report["command"]
    );
    let runs = report["runs"].as_array().expect("runs array");
    assert_eq!(runs.len(), order.len());
    for (run, name) in runs.iter().zip(order) {
        assert_eq!(run["peer"], name);
        let requests = num(run, &["requests"]);
        assert!(requests > 0.0, "{name}: no request completed: {run}");
        assert!(num(run, &["cps"]) > 0.0, "{name}: {run}");
        // Every answer was nginx's 200, also through its proxy_protocol
        // listener (which refuses a connection without the header).
        assert_eq!(num(run, &["non_2xx"]), 0.0, "{name}: {run}");
        let (p50, p99, max) = (
            num(run, &["latency_ms", "p50"]),
            num(run, &["latency_ms", "p99"]),
            num(run, &["latency_ms", "max"]),
        );
        assert!(
            0.0 < p50 && p50 <= p99 && p99 <= max,
            "{name}: latency {p50} {p99} {max}"
        );
        let series = run["per_second"].as_array().expect("per_second");
        assert!(!series.is_empty(), "{name}: per-second series {series:?}");
        assert!(
            series.iter().any(|s| s[1].as_f64().unwrap() > 0.0),
            "{name}: {series:?}"
        );
        if name == "border-ppv2" {
            assert!(
                run["iperf_1"].is_null(),
                "{name}: no iperf3 VIP with PROXY v2"
            );
        } else {
            for iperf in ["iperf_1", "iperf_8"] {
                assert!(num(run, &[iperf, "gbps"]) > 0.0, "{name}: {iperf}: {run}");
            }
        }
        assert!(num(run, &["cpu_seconds"]) > 0.0, "{name}: {run}");
        assert!(run["load_average_before"][0].is_f64(), "{name}: {run}");
        for k in ["retrans_segs", "syn_retrans", "attempt_fails"] {
            assert!(run["client_tcp"][k].is_u64(), "{name}: client_tcp.{k}");
        }
        if name.starts_with("border") {
            assert_eq!(run["poll"], "busy", "{name}");
            // border-dp's own counters, read before it stopped (warm-up included).
            let counters = &run["border_counters"];
            assert!(
                num(counters, &["new_flows"]) >= requests,
                "{name}: {counters}"
            );
            if name == "border-ppv2" {
                assert!(
                    num(counters, &["pp_headers_inserted"]) >= requests,
                    "{name}: {counters}"
                );
            }
            assert!(run["border_drops"].is_object(), "{name}: {run}");
        } else {
            assert!(run["border_counters"].is_null(), "{name}");
        }
    }
    // Per peer: the runs counted, the spread, ratios round by round.
    let summary = report["summary"].as_array().expect("summary");
    let peer = |name: &str| {
        summary
            .iter()
            .find(|s| s["peer"] == name)
            .unwrap_or_else(|| panic!("{name} in the summary"))
    };
    let fullnat = peer("border-fullnat");
    assert_eq!(num(fullnat, &["runs"]), 2.0);
    let (lo, med, hi) = (
        num(fullnat, &["cps", "min"]),
        num(fullnat, &["cps", "median"]),
        num(fullnat, &["cps", "max"]),
    );
    assert!(lo <= med && med <= hi, "{fullnat}");
    let fwd = &fullnat["ratios"]["x fwd"];
    assert_eq!(fwd["against"], "testpmd-tap");
    let per_round = fwd["cps_per_round"].as_array().expect("per round");
    assert_eq!(per_round.len(), 2, "{fwd}");
    for (i, r) in per_round.iter().enumerate() {
        let want = num(&runs[[0, 4][i]], &["cps"]) / num(&runs[[1, 5][i]], &["cps"]);
        assert!((r.as_f64().unwrap() - want).abs() < 0.001, "{fwd}");
    }
    // haproxy-tcp ran once: one pair against it.
    assert_eq!(num(peer("haproxy-tcp"), &["runs"]), 1.0);
    assert_eq!(
        fullnat["ratios"]["x HAProxy"]["cps_per_round"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    for name in [
        "border-fullnat",
        "testpmd-tap",
        "border-ppv2",
        "haproxy-tcp",
    ] {
        assert!(
            stdout.contains(&format!("| {name} ")),
            "{name} in the table"
        );
    }
    // The markdown comes from the JSON alone.
    let md = harness(&["--render", json.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        md.status.success(),
        "{}",
        String::from_utf8_lossy(&md.stderr)
    );
    let md = String::from_utf8_lossy(&md.stdout);
    assert!(
        md.contains(&commit[..12]) && md.contains("perf/e2e.py "),
        "{md}"
    );
    let png_bytes = std::fs::read(&png).expect("plot written");
    assert!(png_bytes.starts_with(b"\x89PNG"), "plot is a PNG");
    nothing_left();
}

#[test]
fn bad_input_is_one_line_naming_what_failed() {
    let _turn = HARNESS.lock().unwrap_or_else(|p| p.into_inner());
    let e = one_line_error(
        &harness(&["--peers", "border-fullnat,lvs"])
            .output()
            .unwrap(),
    );
    assert!(e.contains("unknown peer 'lvs'"), "{e}");

    let e = one_line_error(&harness(&["--rounds", "0"]).output().unwrap());
    assert!(e.contains("--rounds"), "{e}");

    let e = one_line_error(
        &harness(&["--render", "/nonexistent/e2e.json"])
            .output()
            .unwrap(),
    );
    assert!(
        e.contains("cannot read results /nonexistent/e2e.json"),
        "{e}"
    );

    let e = one_line_error(
        &harness(&[
            "--peers",
            "border-dnat",
            "--border-dp",
            "/nonexistent/border-dp",
        ])
        .output()
        .unwrap(),
    );
    assert!(e.contains("/nonexistent/border-dp"), "{e}");

    // Every tool but wrk on PATH.
    let dir = TempDir::new("pe-path");
    for tool in [
        "ip",
        "iperf3",
        "nginx",
        "haproxy",
        "nft",
        "dpdk-testpmd",
        "ethtool",
        "curl",
        "gnuplot",
    ] {
        let out = run(&["sh", "-c", &format!("command -v {tool}")]);
        let real = String::from_utf8_lossy(&out.stdout).trim().to_string();
        std::os::unix::fs::symlink(real, dir.path(tool)).unwrap();
    }
    let e = one_line_error(
        &harness(&["--peers", "nftables-dnat"])
            .env("PATH", &dir.0)
            .output()
            .unwrap(),
    );
    assert!(e.contains("wrk not found"), "{e}");
    nothing_left();
}

#[test]
fn an_interrupted_run_removes_its_namespaces_and_processes() {
    let _turn = HARNESS.lock().unwrap_or_else(|p| p.into_inner());
    let dir = TempDir::new("pe-int");
    let err = dir.path("stderr");
    let mut child = harness(&[
        "--duration",
        "30",
        "--peers",
        "border-fullnat",
        "--border-dp",
        border_dp_bin(),
        "--json",
        dir.path("e2e.json").to_str().unwrap(),
    ])
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&err).unwrap())
    .spawn()
    .unwrap();
    // Interrupt it under load: border-dp, nginx and wrk all running.
    wait_until(
        "wrk running in pe-cli",
        Duration::from_secs(60),
        wrk_in_client_ns,
    );
    // SAFETY: kill(2) on our own child, not yet reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("harness still running 30 s after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = Output {
        status,
        stdout: Vec::new(),
        stderr: std::fs::read(&err).unwrap(),
    };
    let e = one_line_error(&out);
    assert!(
        e.contains("border-fullnat") && e.contains("signal 15"),
        "{e}"
    );
    // The broken run's logs stay for diagnosis; this test removes them.
    let logs = e
        .split("(logs in ")
        .nth(1)
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("the error names the logs: {e}"));
    assert!(
        Path::new(logs).join("border-dp.log").exists(),
        "border-dp's log kept in {logs}"
    );
    let run_dir = Path::new(logs).parent().unwrap();
    assert!(run_dir.starts_with(std::env::temp_dir()), "{logs}");
    std::fs::remove_dir_all(run_dir).unwrap();
    assert!(!dir.path("e2e.json").exists(), "no JSON from a broken run");
    nothing_left();
}
