//! `border-perf wake`: what idling costs the first packet. A real
//! border-dp (the binary, `--dp`) runs with one worker and one TAP port
//! moved into a client namespace; after each idle spell (`--idle-ms`, 1 s
//! by default) the client sends ONE ping to the port address, answered by
//! the worker, and the round trip (ping's own, kernel-timestamped) is the
//! sample. The same with `poll = "busy"` and `poll = "adaptive"` (asleep on
//! its Rx interrupts by then); the difference of the medians is what the
//! sleep adds (goal: at most 50 µs). Also reports the worker's CPU use
//! while idle (scheduler nanoseconds, /proc/<pid>/task/<tid>/schedstat).
//!
//! IPv6 is off in both namespaces and the client has a permanent
//! neighbour entry for the port, so nothing but the pings reaches the
//! worker. Needs root (network namespaces, TAP).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use conf::state::{RunState, StateRegion};

use crate::report::Table;

/// Options of the `wake` benchmark.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The border-dp binary (build it with --release).
    #[arg(long, value_name = "PATH", default_value = "target/release/border-dp")]
    pub dp: PathBuf,
    /// Pings per poll mode, each after an idle spell.
    #[arg(long, default_value_t = 10)]
    pub samples: usize,
    /// Idle time before each ping, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub idle_ms: u64,
    /// Measure only this poll mode (busy or adaptive) instead of both.
    #[arg(long, value_name = "MODE", value_parser = ["busy", "adaptive"])]
    pub only: Option<String>,
    /// Directory for the config and the log.
    #[arg(long, default_value = "/dev/shm")]
    pub dir: PathBuf,
}

const LB: &str = "border-perf-wake";
const CLI: &str = "border-perf-wake-cli";
const INSTANCE: &str = "perfwake";
const PORT_ADDR: &str = "10.203.0.1";
const PORT_MAC: &str = "02:00:00:cb:00:01";

fn config(poll: &str) -> String {
    format!(
        r#"instance = "{INSTANCE}"

[dataplane]
main_lcore = 0
worker_lcores = [1]
poll = "{poll}"
eal_args = ["--no-huge", "-m", "256", "--no-pci", "--no-shconf", "--log-level=lib.eal:error"]
conntrack_per_worker = 4096
flow_hash_key = "00112233445566778899aabbccddeeff"

[[port]]
name = "ext"
devargs = "net_tap0,iface=bpw-ext"
addresses = ["{PORT_ADDR}/24"]
host_interface = "kbpw-ext"
mac = "{PORT_MAC}"
"#
    )
}

fn sh(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {args:?}"))?;
    anyhow::ensure!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn in_ns(ns: &str, args: &[&str]) -> anyhow::Result<String> {
    let mut full = vec!["ip", "netns", "exec", ns];
    full.extend_from_slice(args);
    sh(&full)
}

fn fresh_ns(ns: &str) -> anyhow::Result<()> {
    let _ = Command::new("ip")
        .args(["netns", "del", ns])
        .stderr(Stdio::null())
        .status();
    sh(&["ip", "netns", "add", ns]).context("root needed")?;
    in_ns(
        ns,
        &["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"],
    )?;
    in_ns(ns, &["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"])?;
    Ok(())
}

/// A border-dp with its port in the client namespace; stopped on drop.
struct Dp {
    child: Child,
    log: PathBuf,
}

impl Dp {
    fn start(bin: &Path, dir: &Path, poll: &str) -> anyhow::Result<Dp> {
        fresh_ns(LB)?;
        fresh_ns(CLI)?;
        let cfg = dir.join("border.toml");
        std::fs::write(&cfg, config(poll))?;
        let log = dir.join("border-dp.log");
        let logf = std::fs::File::create(&log)?;
        let child = Command::new("ip")
            .args(["netns", "exec", LB])
            .arg(bin)
            .args(["--standalone", "--config"])
            .arg(&cfg)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(logf.try_clone()?)
            .stderr(logf)
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        let dp = Dp { child, log };
        let state = conf::state::state_path(INSTANCE);
        let start = Instant::now();
        loop {
            let up = StateRegion::open(&state)
                .is_ok_and(|s| s.pid() == dp.child.id() && s.run_state() == RunState::Running);
            if up && in_ns(LB, &["ip", "link", "show", "bpw-ext"]).is_ok() {
                break;
            }
            anyhow::ensure!(
                start.elapsed() < Duration::from_secs(30),
                "border-dp did not come up in 30 s:\n{}",
                dp.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        sh(&["ip", "-n", LB, "link", "set", "bpw-ext", "netns", CLI])?;
        in_ns(
            CLI,
            &["ip", "addr", "add", "10.203.0.2/24", "dev", "bpw-ext"],
        )?;
        in_ns(CLI, &["ip", "link", "set", "bpw-ext", "up"])?;
        in_ns(
            CLI,
            &[
                "ip",
                "neigh",
                "replace",
                PORT_ADDR,
                "lladdr",
                PORT_MAC,
                "dev",
                "bpw-ext",
                "nud",
                "permanent",
            ],
        )?;
        Ok(dp)
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Nanoseconds on CPU so far of the worker thread(s).
    fn worker_cpu_ns(&self) -> u64 {
        let dir = format!("/proc/{}/task", self.child.id());
        let Ok(tasks) = std::fs::read_dir(dir) else {
            return 0;
        };
        tasks
            .filter_map(Result::ok)
            .filter(|t| {
                std::fs::read_to_string(t.path().join("comm"))
                    .is_ok_and(|c| c.starts_with("rte-worker"))
            })
            .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
            .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .sum()
    }
}

impl Drop for Dp {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child, not reaped yet.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let start = Instant::now();
        while matches!(self.child.try_wait(), Ok(None)) && start.elapsed() < Duration::from_secs(20)
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        for ns in [LB, CLI] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        let _ = std::fs::remove_file(conf::state::state_path(INSTANCE));
        let _ = std::fs::remove_file(conf::tables::tables_path(INSTANCE));
    }
}

/// One ping from the client; its round trip in microseconds.
fn ping_us() -> anyhow::Result<f64> {
    let out = in_ns(CLI, &["ping", "-c", "1", "-W", "2", PORT_ADDR])?;
    let rtt = out
        .split("time=")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .with_context(|| format!("no round trip in ping's output:\n{out}"))?;
    Ok(rtt * 1000.0)
}

/// Samples of one poll mode: round trips after idling (µs), back-to-back
/// round trips (µs), and the worker's CPU while idle (% of a core).
struct Mode {
    after_idle: Vec<f64>,
    warm: Vec<f64>,
    idle_cpu: f64,
}

fn measure(args: &Args, dir: &Path, poll: &str) -> anyhow::Result<Mode> {
    let dp = Dp::start(&args.dp, dir, poll)?;
    // Warm up: first contact, caches.
    for _ in 0..3 {
        ping_us().with_context(|| dp.log_text())?;
    }
    let mut m = Mode {
        after_idle: Vec::new(),
        warm: Vec::new(),
        idle_cpu: 0.0,
    };
    let idle = Duration::from_millis(args.idle_ms);
    let (mut cpu, mut wall) = (0u64, Duration::ZERO);
    for _ in 0..args.samples {
        let (c0, t0) = (dp.worker_cpu_ns(), Instant::now());
        std::thread::sleep(idle);
        cpu += dp.worker_cpu_ns().saturating_sub(c0);
        wall += t0.elapsed();
        m.after_idle.push(ping_us()?);
        m.warm.push(ping_us()?);
    }
    m.idle_cpu = cpu as f64 * 100.0 / wall.as_nanos().max(1) as f64;
    Ok(m)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs the benchmark.
pub fn run(args: &Args) -> anyhow::Result<Table> {
    anyhow::ensure!(args.samples > 0, "--samples must be above 0");
    anyhow::ensure!(
        args.dp.exists(),
        "--dp {}: no such file (cargo build --release --bin border-dp)",
        args.dp.display()
    );
    let dir = args
        .dir
        .join(format!("border-perf-wake-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut t = Table::new(
        format!(
            "wake: ping round trip to a port address, one worker on a TAP port; {} ({} samples, {} ms idle before each)",
            args.dp.display(),
            args.samples,
            args.idle_ms
        ),
        &["poll", "ping", "min µs", "p50 µs", "p90 µs", "max µs"],
    );
    let mut medians = Vec::new();
    let mut cpu = Vec::new();
    let modes: Vec<&str> = match &args.only {
        Some(m) => vec![m.as_str()],
        None => vec!["busy", "adaptive"],
    };
    for poll in modes {
        let mut m = measure(args, &dir, poll);
        if m.is_err() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        let m = m.as_mut().map_err(|e| anyhow::anyhow!("{poll}: {e:#}"))?;
        for (what, v) in [("after idle", &mut m.after_idle), ("warm", &mut m.warm)] {
            let p50 = median(v);
            t.row(vec![
                poll.to_string(),
                what.to_string(),
                format!("{:.0}", v[0]),
                format!("{p50:.0}"),
                format!("{:.0}", v[v.len() * 9 / 10]),
                format!("{:.0}", v[v.len() - 1]),
            ]);
            if what == "after idle" {
                medians.push(p50);
            }
        }
        cpu.push((poll, m.idle_cpu));
    }
    let _ = std::fs::remove_dir_all(&dir);
    if let [busy, adaptive] = medians[..] {
        let extra = adaptive - busy;
        t.note(format!(
            "first packet after {} ms idle: adaptive - busy = {extra:.0} µs (median): {} (goal <= 50 µs)",
            args.idle_ms,
            if extra <= 50.0 { "met" } else { "MISSED" }
        ));
    }
    for (poll, c) in cpu {
        t.note(format!("{poll}: the idle worker used {c:.2}% of a core"));
    }
    t.note("ping: its own round trip (kernel timestamps), client namespace -> TAP -> worker -> TAP -> client.");
    t.note("after idle: the first ping after the idle spell; warm: a second ping right after it.");
    Ok(t)
}
