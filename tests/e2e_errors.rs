//! Bad input ends a border process with ONE line on stderr that names the
//! cause and a non-zero exit: never a panic, never a hang. Covers an invalid
//! or missing config, an EAL that refuses the devargs, a port whose device
//! does not probe, an af_xdp port with fewer queues than workers, and a
//! second process of a running instance (which must leave the first one
//! working; likewise a second border-mgmt). Also
//! `borderctl counters|status` against a running and a stopped dataplane.
//!
//! Namespaces, instances and interfaces are prefixed `er-` so this file runs
//! in parallel with the other end-to-end tests.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;
use conf::counters::Counter;
use conf::state::RunState;

/// How long a failing start may take before we call it a hang.
const DEADLINE: Duration = Duration::from_secs(15);

fn mgmt_bin() -> &'static str {
    env!("CARGO_BIN_EXE_border-mgmt")
}

fn ctl_bin() -> &'static str {
    env!("CARGO_BIN_EXE_borderctl")
}

fn example_config() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("conf/tests/data/border.example.toml")
}

/// Runs `cmd` to completion with output captured in `dir`; panics if it
/// takes longer than `DEADLINE`. RUST_BACKTRACE is on so that a panic could
/// not hide.
fn run_bounded(mut cmd: Command, dir: &TempDir, tag: &str) -> Output {
    let out_path = dir.path(&format!("{tag}.stdout"));
    let err_path = dir.path(&format!("{tag}.stderr"));
    let start = Instant::now();
    let mut child = cmd
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{cmd:?} still running after {DEADLINE:?} (a hang):\n{}",
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: std::fs::read(&out_path).unwrap(),
        stderr: std::fs::read(&err_path).unwrap(),
    }
}

fn bin(path: &str, args: &[&str]) -> Command {
    let mut c = Command::new(path);
    c.args(args);
    c
}

fn in_netns(ns: &Netns, path: &str, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &ns.name, path]).args(args);
    c
}

/// Asserts a failed run whose stderr carries exactly one `<program>: error:`
/// line, as its last line, and no panic. Returns that line.
fn one_line_error(program: &str, out: &Output) -> String {
    one_line_error_exit(program, out, 1)
}

/// [`one_line_error`] with exit status `code` (borderctl's table in
/// docs/api.md: 3 for a target that is not there).
fn one_line_error_exit(program: &str, out: &Output, code: i32) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        !out.status.success(),
        "{program} succeeded, expected failure:\n{stderr}"
    );
    assert_eq!(
        out.status.code(),
        Some(code),
        "{program} should exit {code}, not die by a signal or abort:\n{stderr}"
    );
    for bad in ["panicked", "stack backtrace", "RUST_BACKTRACE"] {
        assert!(
            !stderr.contains(bad),
            "{program} printed {bad:?}:\n{stderr}"
        );
    }
    let prefix = format!("{program}: error: ");
    let ours: Vec<&str> = stderr.lines().filter(|l| l.starts_with(&prefix)).collect();
    assert_eq!(ours.len(), 1, "expected one `{prefix}` line:\n{stderr}");
    assert_eq!(
        stderr.trim_end().lines().last(),
        Some(ours[0]),
        "the error line must be the last line (nothing continues it):\n{stderr}"
    );
    ours[0].to_string()
}

/// A one-port config for a border-dp in a namespace.
fn dp_config(instance: &str, devargs: &str, twin: &str, subnet: u8) -> String {
    format!(
        r#"
instance = "{instance}"

[dataplane]
main_lcore = 0
worker_lcores = [1]
poll = "adaptive"
eal_args = ["--no-huge", "-m", "256", "--no-pci", "--no-shconf", "--log-level=lib.eal:error"]
conntrack_per_worker = 4096
flow_hash_key = "00112233445566778899aabbccddeeff"

[[port]]
name = "ext"
devargs = "{devargs}"
addresses = ["10.{subnet}.0.1/24"]
host_interface = "{twin}"

[mgmt]
listen = "unix:///run/border/{instance}.sock"
"#
    )
}

#[test]
fn check_config_accepts_the_example_in_both_processes() {
    let dir = TempDir::new("er-ok");
    let example = example_config();
    let example = example.to_str().unwrap();
    for (program, path) in [("border-dp", border_dp_bin()), ("border-mgmt", mgmt_bin())] {
        let out = run_bounded(bin(path, &["--check-config", example]), &dir, program);
        assert!(
            out.status.success(),
            "{program}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), "OK\n", "{program}");
    }
}

#[test]
fn an_invalid_config_is_one_line_with_file_line_column_and_key() {
    let dir = TempDir::new("er-bad");
    let example = std::fs::read_to_string(example_config()).unwrap();
    let bad_text = example.replacen("worker_lcores = [1]", "worker_lcores = [0]", 1);
    assert_ne!(bad_text, example, "the example config changed shape");
    let bad = dir.path("bad.toml");
    std::fs::write(&bad, &bad_text).unwrap();
    let line = bad_text
        .lines()
        .position(|l| l.starts_with("worker_lcores"))
        .unwrap()
        + 1;
    let want = format!(
        "{}:{line}:18: dataplane.worker_lcores[0]: lcore 0 is the main_lcore",
        bad.display()
    );
    let bad = bad.to_str().unwrap();

    for (program, path) in [("border-dp", border_dp_bin()), ("border-mgmt", mgmt_bin())] {
        let out = run_bounded(bin(path, &["--check-config", bad]), &dir, program);
        assert!(!out.status.success(), "{program} accepted a bad config");
        assert!(out.stdout.is_empty(), "{program} printed to stdout");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{program}: {stderr}");
        assert!(
            stderr.starts_with(&want),
            "{program}: {stderr}\nwant {want}"
        );

        // Running with it fails the same way, before touching anything.
        let out = run_bounded(bin(path, &["--config", bad]), &dir, program);
        let e = one_line_error(program, &out);
        assert!(e.contains(&want), "{program}: {e}");
    }

    // A key the format does not know is refused with its position too.
    let unknown = dir.path("unknown.toml");
    std::fs::write(
        &unknown,
        example.replacen("zone = \"a\"", "zone = \"a\"\nzonee = \"b\"", 1),
    )
    .unwrap();
    for (program, path) in [("border-dp", border_dp_bin()), ("border-mgmt", mgmt_bin())] {
        let out = run_bounded(
            bin(path, &["--check-config", unknown.to_str().unwrap()]),
            &dir,
            program,
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert_eq!(stderr.lines().count(), 1, "{program}: {stderr}");
        assert!(
            stderr.starts_with(&format!("{}:8:1: zonee", unknown.display())),
            "{program}: {stderr}"
        );
    }
}

#[test]
fn a_missing_config_file_is_one_line() {
    let dir = TempDir::new("er-missing");
    for (program, path) in [
        ("border-dp", border_dp_bin()),
        ("border-mgmt", mgmt_bin()),
        ("borderctl", ctl_bin()),
    ] {
        let args: &[&str] = if program == "borderctl" {
            &["counters", "--config", "/nonexistent"]
        } else {
            &["--config", "/nonexistent"]
        };
        let out = run_bounded(bin(path, args), &dir, program);
        let e = one_line_error(program, &out);
        assert!(
            e.contains("/nonexistent") && e.contains("No such file"),
            "{program}: {e}"
        );
    }
    for (program, path) in [("border-dp", border_dp_bin()), ("border-mgmt", mgmt_bin())] {
        let out = run_bounded(
            bin(path, &["--check-config", "/nonexistent"]),
            &dir,
            program,
        );
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{program}: {stderr}");
        assert!(stderr.contains("/nonexistent"), "{program}: {stderr}");
    }
}

/// The kernel twin's own connections take source ports from its
/// namespace's ephemeral range; a full-NAT range that meets it is refused
/// by both processes before anything starts, naming both ranges, and
/// `--check-config` in the same namespace refuses it with the same line.
#[test]
fn a_full_nat_range_inside_the_kernels_ephemeral_ports_is_refused_at_start() {
    let ns = Netns::new("er-eph");
    let dir = TempDir::new("er-eph");
    ns.run(&[
        "sh",
        "-c",
        "echo '20000 60999' > /proc/sys/net/ipv4/ip_local_port_range",
    ]);
    let config = dp_config("er-eph", "net_tap0,iface=er-eph-ext", "ker-eph", 89).replace(
        "host_interface = \"ker-eph\"\n",
        "host_interface = \"ker-eph\"\nlocal_addresses = [\"10.89.0.1\"]\nlocal_port_range = [1024, 32767]\n",
    );
    let cfg = dir.path("border.toml");
    std::fs::write(&cfg, &config).unwrap();
    let state = dir.path("state");
    let args = [
        "--config",
        cfg.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
    ];
    let overlap = "port[0] (\"ext\").local_port_range [1024, 32767] overlaps the kernel's ephemeral ports 20000-60999 (net.ipv4.ip_local_port_range of this network namespace), which its kernel twin ker-eph uses for the host's own connections: their replies would be taken for full-NAT replies and dropped (expected a local_port_range outside 20000-60999, e.g. [1024, 19999], or move the kernel's range with sysctl)";
    for (program, path, args) in [
        ("border-dp", border_dp_bin(), &args[..2]),
        ("border-mgmt", mgmt_bin(), &args[..]),
    ] {
        let out = run_bounded(in_netns(&ns, path, args), &dir, program);
        assert_eq!(
            one_line_error(program, &out),
            format!("{program}: error: {overlap}")
        );

        // --check-config looks at the namespace it runs in, as the start does.
        let check = ["--check-config", cfg.to_str().unwrap()];
        let tag = format!("{program}-check");
        let out = run_bounded(in_netns(&ns, path, &check), &dir, &tag);
        assert!(!out.status.success(), "{program} --check-config said OK");
        assert!(out.stdout.is_empty(), "{program} printed to stdout");
        assert_eq!(String::from_utf8_lossy(&out.stderr), format!("{overlap}\n"));
    }
    // Where the kernel's range stays clear of the pool, the same file is OK.
    ns.run(&[
        "sh",
        "-c",
        "echo '40000 60999' > /proc/sys/net/ipv4/ip_local_port_range",
    ]);
    for (program, path) in [("border-dp", border_dp_bin()), ("border-mgmt", mgmt_bin())] {
        let check = ["--check-config", cfg.to_str().unwrap()];
        let tag = format!("{program}-check-ok");
        let out = run_bounded(in_netns(&ns, path, &check), &dir, &tag);
        assert!(
            out.status.success(),
            "{program}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), "OK\n", "{program}");
    }
    assert!(!state.exists(), "border-mgmt saved nothing");
}

#[test]
fn devargs_with_an_unknown_driver_fail_in_eal() {
    let ns = Netns::new("er-unk");
    let dir = TempDir::new("er-unk");
    let cfg = dir.path("border.toml");
    std::fs::write(
        &cfg,
        dp_config("er-unk", "net_doesnotexist0", "ker-unk", 81),
    )
    .unwrap();
    let out = run_bounded(
        in_netns(&ns, border_dp_bin(), &["--config", cfg.to_str().unwrap()]),
        &dir,
        "dp",
    );
    let e = one_line_error("border-dp", &out);
    assert!(e.contains("EAL") && e.contains("devargs"), "{e}");
    assert!(
        e.contains("port `ext` = net_doesnotexist0"),
        "the device is named: {e}"
    );
}

#[test]
fn a_port_that_fails_to_probe_is_named() {
    let ns = Netns::new("er-pcap");
    let dir = TempDir::new("er-pcap");
    let cfg = dir.path("border.toml");
    let devargs = format!(
        "net_pcap0,rx_pcap=/nonexistent.pcap,tx_pcap={}",
        dir.path("out.pcap").display()
    );
    std::fs::write(&cfg, dp_config("er-pcap", &devargs, "ker-pcap", 82)).unwrap();
    let out = run_bounded(
        in_netns(&ns, border_dp_bin(), &["--config", cfg.to_str().unwrap()]),
        &dir,
        "dp",
    );
    let e = one_line_error("border-dp", &out);
    assert!(e.contains("port `ext`") && e.contains("net_pcap0"), "{e}");
}

#[test]
fn an_af_xdp_port_with_fewer_queues_than_workers_is_named() {
    let ns = Netns::new("er-xq");
    let dir = TempDir::new("er-xq");
    run(&[
        "ip", "-n", "er-xq", "link", "add", "er-xq0", "type", "veth", "peer", "name", "er-xq1",
    ]);
    run(&["ip", "-n", "er-xq", "link", "set", "er-xq0", "up"]);
    let cfg = dir.path("border.toml");
    let text = dp_config(
        "er-xq",
        "net_af_xdp0,iface=er-xq0,start_queue=0,queue_count=1",
        "ker-xq",
        83,
    )
    .replace(
        "worker_lcores = [1]",
        "worker_lcores = [1, 2]\nlcore_cpus = [0, 1, 1]",
    );
    std::fs::write(&cfg, text).unwrap();
    let out = run_bounded(
        in_netns(&ns, border_dp_bin(), &["--config", cfg.to_str().unwrap()]),
        &dir,
        "dp",
    );
    let e = one_line_error("border-dp", &out);
    assert!(e.contains("port `ext`") && e.contains("net_af_xdp0"), "{e}");
    assert!(
        e.contains("2 rx and 2 tx queues wanted") && e.contains("queue_count"),
        "the shortfall and the fix are named: {e}"
    );
}

fn ping_ok(ns: &Netns, target: &str) -> bool {
    ns.try_run(&["ping", "-c", "2", "-i", "0.2", "-W", "2", target])
        .status
        .success()
}

#[test]
fn a_second_border_dp_of_a_running_instance_is_refused_and_the_first_keeps_working() {
    let lb = Netns::new("er-lb");
    let cli = Netns::new("er-cli");
    let dir = TempDir::new("er-dup");
    let config = dp_config("er-dup", "net_tap0,iface=er-ext", "ker-ext", 83);
    let mut dp = BorderDp::start(&lb, &dir, "er-dup", &config);
    wait_iface(&lb, "er-ext");
    cli.adopt(&lb, "er-ext", &["10.83.0.2/24"]);
    assert!(ping_ok(&cli, "10.83.0.1"), "{}", dp.log_text());
    let replies = dp.counter(Counter::IcmpEchoReplies);

    // Same instance, same config, same namespace: refused before EAL starts.
    let second_cfg = dir.path("second.toml");
    std::fs::write(&second_cfg, &config).unwrap();
    let out = run_bounded(
        in_netns(
            &lb,
            border_dp_bin(),
            &["--config", second_cfg.to_str().unwrap()],
        ),
        &dir,
        "second",
    );
    let e = one_line_error("border-dp", &out);
    assert!(
        e.contains("another border-dp of instance `er-dup` is running"),
        "{e}"
    );

    // The first still owns its state region and still answers.
    let state = dp.state();
    assert_eq!(
        state.pid(),
        dp.pid(),
        "the second border-dp took the region"
    );
    assert_eq!(state.run_state(), RunState::Running);
    assert!(ping_ok(&cli, "10.83.0.1"), "{}", dp.log_text());
    wait_until("echo replies counted", Duration::from_secs(5), || {
        dp.counter(Counter::IcmpEchoReplies) >= replies + 2
    });

    let status = dp.stop();
    assert!(status.success(), "exit {status}:\n{}", dp.log_text());
}

/// A background process with its stderr in a file, stopped on drop.
struct Bg {
    child: std::process::Child,
    log: PathBuf,
}

impl Bg {
    fn spawn(path: &str, args: &[&str], log: PathBuf) -> Bg {
        let child = Command::new(path)
            .args(args)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Bg { child, log }
    }
    fn text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
    /// SIGTERM, then the exit status (at most 10 s).
    fn stop(&mut self) -> std::process::ExitStatus {
        // SAFETY: kill(2) on a child we spawned and have not reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let start = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "no exit within 10 s of SIGTERM:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Bg {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn borderctl_reads_a_running_and_a_stopped_dataplane() {
    let lb = Netns::new("er-tl-lb");
    let cli = Netns::new("er-tl-cli");
    let dir = TempDir::new("er-tools");
    let instance = "er-tools";
    let config = dp_config(instance, "net_tap0,iface=er-tl-ext", "ker-tl-ext", 84);
    let cfg = dir.path("ctl.toml");
    std::fs::write(&cfg, &config).unwrap();
    let cfg = cfg.to_str().unwrap();
    // A region left by an earlier run of this test would read as "stopped".
    let _ = std::fs::remove_file(conf::state::state_path(instance));

    // Nothing runs yet: borderctl says so in one line.
    for sub in ["counters", "status"] {
        let out = run_bounded(bin(ctl_bin(), &[sub, "--config", cfg]), &dir, sub);
        let e = one_line_error_exit("borderctl", &out, 3);
        assert!(
            e.contains("border-dp of instance `er-tools` is not running (no /dev/shm/border-er-tools-state)"),
            "{e}"
        );
    }

    let mut dp = BorderDp::start(&lb, &dir, instance, &config);
    wait_iface(&lb, "er-tl-ext");
    cli.adopt(&lb, "er-tl-ext", &["10.84.0.2/24"]);
    assert!(ping_ok(&cli, "10.84.0.1"), "{}", dp.log_text());
    wait_until("echo replies counted", Duration::from_secs(5), || {
        dp.counter(Counter::IcmpEchoReplies) >= 2
    });

    // status: pid, running, the worker's lcore and a moving heartbeat.
    let out = run_bounded(bin(ctl_bin(), &["status", "--config", cfg]), &dir, "st");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&format!("pid {} (alive), running", dp.pid())),
        "{text}"
    );
    let row = text
        .lines()
        .find(|l| l.starts_with("0 "))
        .unwrap_or_else(|| panic!("no worker row:\n{text}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[1], "1", "lcore: {row}");
    assert_eq!(cells[3], "yes", "heartbeat moving: {row}");

    let out = run_bounded(
        bin(ctl_bin(), &["status", "--instance", instance, "--json"]),
        &dir,
        "stj",
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["pid"], dp.pid());
    assert_eq!(v["run_state"], "running");
    assert_eq!(v["healthy"], true);
    assert_eq!(v["workers"][0]["lcore"], 1);
    assert_eq!(v["workers"][0]["heartbeat_moving"], true);
    assert_eq!(
        v["workers"][0]["applied_generation"],
        dp.state().worker(0).unwrap().applied_generation()
    );

    // counters: the table lists non-zero counters with per-worker values and
    // a total; --json lists all of them and agrees with the region.
    let out = run_bounded(bin(ctl_bin(), &["counters", "--config", cfg]), &dir, "c");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text}");
    let header: Vec<&str> = text.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["COUNTER", "LCORE", "1", "TOTAL"], "{text}");
    let echo: Vec<&str> = text
        .lines()
        .find(|l| l.starts_with("icmp_echo_replies "))
        .unwrap_or_else(|| panic!("no icmp_echo_replies row:\n{text}"))
        .split_whitespace()
        .collect();
    assert_eq!(echo.len(), 3);
    assert_eq!(echo[1], echo[2], "one worker: its value is the total");
    assert!(echo[2].parse::<u64>().unwrap() >= 2, "{text}");
    assert!(
        !text.contains("drop_fragment "),
        "zero counters are hidden:\n{text}"
    );
    let out = run_bounded(
        bin(ctl_bin(), &["counters", "--config", cfg, "--all"]),
        &dir,
        "ca",
    );
    let all = String::from_utf8_lossy(&out.stdout);
    // The counters table, then a blank line and the ports' statistics.
    let (counters, ports) = all.split_once("\n\n").unwrap_or((&all, ""));
    assert_eq!(counters.lines().count(), 1 + Counter::COUNT, "{all}");
    assert!(ports.starts_with("PORT "), "{all}");

    let out = run_bounded(
        bin(ctl_bin(), &["counters", "--instance", instance, "--json"]),
        &dir,
        "cj",
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["instance"], instance);
    assert_eq!(v["running"], true);
    let counters = v["counters"].as_object().unwrap();
    assert_eq!(counters.len(), Counter::COUNT);
    assert!(
        v["counters"]["icmp_echo_replies"]["total"]
            .as_u64()
            .unwrap()
            >= 2
    );
    assert_eq!(
        v["counters"]["drop_fragment"]["per_worker"],
        serde_json::json!([0])
    );

    // The dataplane stops: status says so and fails, counters still show
    // the last run with a note, and exit 1 (what they show is a problem).
    let status = dp.stop();
    assert!(status.success(), "exit {status}:\n{}", dp.log_text());
    let out = run_bounded(bin(ctl_bin(), &["status", "--config", cfg]), &dir, "st2");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("stopped"), "{text}");
    let out = run_bounded(bin(ctl_bin(), &["counters", "--config", cfg]), &dir, "c2");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not running (stopped)"));
    assert!(String::from_utf8_lossy(&out.stdout).contains("icmp_echo_replies"));
}

#[test]
fn a_second_border_mgmt_of_an_instance_is_refused() {
    let dir = TempDir::new("er-mgmt");
    let socket = dir.path("mgmt.sock");
    let config = format!(
        r#"instance = "er-mgmt"

[dataplane]
worker_lcores = [1]
flow_hash_key = "00112233445566778899aabbccddeeff"

[[port]]
name = "p0"
devargs = "net_null0"
addresses = ["10.85.0.1/24"]

[mgmt]
listen = "unix://{}"
"#,
        socket.display()
    );
    let cfg = dir.path("mgmt.toml");
    std::fs::write(&cfg, config).unwrap();
    let cfg = cfg.to_str().unwrap();

    let mut first = Bg::spawn(mgmt_bin(), &["--config", cfg], dir.path("mgmt.log"));
    // It holds the instance lock before it listens.
    wait_until("border-mgmt listening", Duration::from_secs(10), || {
        socket.exists()
    });
    let out = run_bounded(bin(mgmt_bin(), &["--config", cfg]), &dir, "second");
    let e = one_line_error("border-mgmt", &out);
    assert!(
        e.contains("another border-mgmt of instance `er-mgmt` is running"),
        "{e}"
    );
    assert!(socket.exists(), "the second border-mgmt removed the socket");

    let st = first.stop();
    assert!(st.success(), "border-mgmt exit {st}:\n{}", first.text());
    assert!(!first.text().contains("panicked"), "{}", first.text());
    let _ = std::fs::remove_file(conf::tables::tables_path("er-mgmt"));
    forget_intent("er-mgmt");
}
