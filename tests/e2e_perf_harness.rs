//! The side-by-side comparison harness (`perf/e2e.py`, docs/performance.md)
//! in its short form: 3 s of load per peer over a subset of the peers, its
//! JSON checked for sane, non-zero numbers; its bad input (one line naming
//! what failed) and its clean-up when interrupted.
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
    let peers = [
        "border-fullnat",
        "border-dnat",
        "border-fullnat-xdp",
        "nftables-dnat",
        "testpmd-tap",
    ];
    let start = Instant::now();
    let out = harness(&[
        "--duration",
        "3",
        "--iperf-duration",
        "1",
        "--peers",
        &peers.join(","),
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
    let rows = report["peers"].as_array().expect("peers array");
    assert_eq!(rows.len(), peers.len());
    for (row, name) in rows.iter().zip(peers) {
        assert_eq!(row["peer"], name);
        assert!(
            stdout.contains(&format!("| {name} ")),
            "{name} in the table"
        );
        let requests = num(row, &["requests"]);
        assert!(requests > 0.0, "{name}: no request completed: {row}");
        assert!(num(row, &["cps"]) > 0.0, "{name}: {row}");
        let (p50, p99, max) = (
            num(row, &["latency_ms", "p50"]),
            num(row, &["latency_ms", "p99"]),
            num(row, &["latency_ms", "max"]),
        );
        assert!(
            0.0 < p50 && p50 <= p99 && p99 <= max,
            "{name}: latency {p50} {p99} {max}"
        );
        let series = row["per_second"].as_array().expect("per_second");
        assert!(series.len() >= 2, "{name}: per-second series {series:?}");
        assert!(
            series.iter().any(|s| s[1].as_f64().unwrap() > 0.0),
            "{name}: {series:?}"
        );
        for iperf in ["iperf_1", "iperf_8"] {
            assert!(num(row, &[iperf, "gbps"]) > 0.0, "{name}: {iperf}: {row}");
        }
        assert!(num(row, &["cpu_seconds"]) > 0.0, "{name}: {row}");
        assert!(num(row, &["cpu_s_per_10k_conns"]) > 0.0, "{name}: {row}");
        for k in ["retrans_segs", "syn_retrans", "attempt_fails"] {
            assert!(row["client_tcp"][k].is_u64(), "{name}: client_tcp.{k}");
        }
        if name.starts_with("border") {
            // border-dp's own counters, read before it stopped.
            let counters = &row["border_counters"];
            assert!(
                num(counters, &["new_flows"]) >= requests,
                "{name}: {counters}"
            );
            assert!(row["border_drops"].is_object(), "{name}: {row}");
        } else {
            assert!(row["border_counters"].is_null(), "{name}");
        }
    }
    // Ratios: border over TAP against the TAP forwarder, everyone against
    // the best kernel peer (the only one here: nftables).
    let fwd = &rows[0]["vs_forwarder"];
    assert_eq!(fwd["forwarder"], "testpmd-tap");
    assert!(num(fwd, &["cps"]) > 0.0);
    assert_eq!(num(&rows[3], &["cps_vs_best_kernel"]), 1.0);
    assert!(rows[2]["vs_forwarder"].is_null(), "no af_xdp forwarder ran");
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
