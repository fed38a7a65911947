//! `border-perf memif`: the generator against border-dp, then against
//! `dpdk-testpmd` (io forwarding) over the same kind of memif pair, then
//! against nothing (its two ports joined: the generator's own ceiling), in
//! one run; a table with the ratios and a JSON file.
//!
//! Layout (2-core machine): the generator's lcore and the main lcores share
//! `--gen-cpu`; border-dp's one busy worker and testpmd's one forwarding
//! core run on `--dut-cpu`. border-dp runs in its own network namespace so
//! its kernel twins stay out of the host's; the memif sockets are files in
//! a scratch directory. Every child, the namespace and the directory go
//! away on every exit path (errors and SIGINT/SIGTERM included).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use conf::state::{state_path, RunState, StateRegion};
use serde_json::{json, Value};

use super::gen::PHASES;
use crate::report::Table;

const CLIENT_MAC: &str = "02:00:00:00:71:01";
const BACKEND_MAC: &str = "02:00:00:00:72:01";

/// Options of `border-perf memif`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Measured seconds per phase.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Established flows per phase.
    #[arg(long, default_value_t = 1024)]
    pub flows: u32,
    /// Packets (or new connections) outstanding at most.
    #[arg(long, default_value_t = 512)]
    pub window: u32,
    /// Phases, comma-separated (fullnat, dnat, ppv2, new).
    #[arg(long, value_delimiter = ',', default_value = "fullnat,dnat,ppv2,new")]
    pub phases: Vec<String>,
    /// Rounds; each runs border-dp, then testpmd, so both see the same
    /// mix of load from the rest of the machine. The table shows medians.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// Niceness of the generator, border-dp and testpmd (e.g. -10 on a
    /// machine busy with builds; 0 leaves it alone).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub nice: i32,
    /// CPU of the generator (and of border-dp's and testpmd's main lcores).
    #[arg(long, default_value_t = 0)]
    pub gen_cpu: u32,
    /// CPU of border-dp's worker and testpmd's forwarding core.
    #[arg(long, default_value_t = 1)]
    pub dut_cpu: u32,
    /// border-dp binary (default: next to this one).
    #[arg(long)]
    pub border_dp: Option<PathBuf>,
    /// testpmd binary.
    #[arg(long, default_value = "dpdk-testpmd")]
    pub testpmd: PathBuf,
    /// Where to write the results as JSON.
    #[arg(long, default_value = "memif.json")]
    pub json: PathBuf,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn catch_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is
        // async-signal-safe; the function pointer lives for the process.
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
}

fn stopped() -> anyhow::Result<()> {
    if STOP.load(Ordering::SeqCst) {
        bail!("interrupted");
    }
    Ok(())
}

/// A child process that is stopped (`signal`, then SIGKILL after 10 s) when
/// dropped, with its output in a log file.
struct Proc {
    name: &'static str,
    child: Option<Child>,
    log: PathBuf,
    signal: libc::c_int,
}

impl Proc {
    fn spawn(
        name: &'static str,
        mut cmd: Command,
        log: PathBuf,
        signal: libc::c_int,
    ) -> anyhow::Result<Proc> {
        let f = std::fs::File::create(&log)?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(f.try_clone()?)
            .stderr(f)
            .spawn()
            .with_context(|| format!("start {name}"))?;
        Ok(Proc {
            name,
            child: Some(child),
            log,
            signal,
        })
    }

    fn tail(&self) -> String {
        let s = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Fails if the process has exited.
    fn alive(&mut self) -> anyhow::Result<()> {
        if let Some(c) = self.child.as_mut() {
            if let Some(st) = c.try_wait()? {
                self.child = None;
                bail!("{} exited early ({st}):\n{}", self.name, self.tail());
            }
        }
        Ok(())
    }

    /// Sends the stop signal and reaps it.
    fn stop(&mut self) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        // SAFETY: kill(2) on a child we spawned and have not reaped, so
        // the pid cannot have been reused.
        unsafe { libc::kill(c.id() as libc::pid_t, self.signal) };
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = c.kill();
        let _ = c.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Scratch directory and network namespace, removed when dropped.
struct Scratch {
    dir: PathBuf,
    netns: String,
}

impl Scratch {
    fn new() -> anyhow::Result<Scratch> {
        let pid = std::process::id();
        let dir = std::env::temp_dir().join(format!("border-memif-{pid}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let netns = format!("bmemif{pid}");
        let s = Scratch { dir, netns };
        let st = Command::new("ip")
            .args(["netns", "add", &s.netns])
            .status()
            .context("run ip netns add")?;
        if !st.success() {
            bail!("ip netns add {} failed (root needed)", s.netns);
        }
        Ok(s)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // border-dp's shared-memory regions (state, and the tables it
        // publishes with --standalone) outlive it by design.
        let instance = instance_name();
        let _ = std::fs::remove_file(state_path(&instance));
        let _ = std::fs::remove_file(conf::tables::tables_path(&instance));
        let _ = Command::new("ip")
            .args(["netns", "del", &self.netns])
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What one device under test did.
struct DutRun {
    phases: Vec<Value>,
    /// border-dp's non-zero counters (empty for testpmd).
    counters: serde_json::Map<String, Value>,
}

/// Runs both devices and returns the comparison; writes `a.json`.
pub fn run(a: &Args) -> anyhow::Result<Table> {
    for p in &a.phases {
        if !PHASES.contains(&p.as_str()) {
            bail!("unknown phase {p:?} (known: {})", PHASES.join(", "));
        }
    }
    if a.rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    catch_signals();
    let scratch = Scratch::new()?;
    let border_dp = match &a.border_dp {
        Some(p) => p.clone(),
        None => std::env::current_exe()?.with_file_name("border-dp"),
    };
    if !border_dp.exists() {
        bail!(
            "{} not found: build it (cargo build --release --bin border-dp) or pass --border-dp",
            border_dp.display()
        );
    }
    let load_before = loadavg();
    let mut border = Vec::new();
    let mut testpmd = Vec::new();
    let mut loopback = Vec::new();
    for round in 0..a.rounds {
        border.push(run_border(a, &scratch, &border_dp, round)?);
        testpmd.push(run_testpmd(a, &scratch, round)?);
        loopback.push(run_loopback(a, &scratch, round)?);
    }
    let load_after = loadavg();

    let mut t = Table::new(
        format!(
            "memif: packets through the device per second (both directions), one worker core; median of {} rounds",
            a.rounds
        ),
        &[
            "phase",
            "border Mpps",
            "testpmd Mpps",
            "ratio",
            "border range",
            "testpmd range",
            "border new conn/s",
            "border lost",
            "testpmd lost",
            "gen loopback Mpps",
            "testpmd / loopback",
        ],
    );
    let mut rows = Vec::new();
    for (i, phase) in a.phases.iter().enumerate() {
        let b: Vec<&Value> = border.iter().map(|r| &r.phases[i]).collect();
        let p: Vec<&Value> = testpmd.iter().map(|r| &r.phases[i]).collect();
        let l: Vec<&Value> = loopback.iter().map(|r| &r.phases[i]).collect();
        let (bm, bmin, bmax) = median_range(&b, "mpps");
        let (pm, pmin, pmax) = median_range(&p, "mpps");
        let (lm, _, _) = median_range(&l, "mpps");
        let ratio = if pm > 0.0 { bm / pm } else { 0.0 };
        let of_loopback = if lm > 0.0 { pm / lm } else { 0.0 };
        let (conn, _, _) = median_range(&b, "new_flows_per_s");
        t.row(vec![
            phase.clone(),
            format!("{bm:.3}"),
            format!("{pm:.3}"),
            format!("{ratio:.2}"),
            format!("{bmin:.2}-{bmax:.2}"),
            format!("{pmin:.2}-{pmax:.2}"),
            if phase == "new" {
                format!("{conn:.0}")
            } else {
                "-".into()
            },
            b.iter().map(|v| lost(v)).sum::<i64>().to_string(),
            p.iter().map(|v| lost(v)).sum::<i64>().to_string(),
            format!("{lm:.3}"),
            format!("{of_loopback:.2}"),
        ]);
        rows.push(json!({
            "phase": phase,
            "border_mpps": bm,
            "testpmd_mpps": pm,
            "ratio": ratio,
            "loopback_mpps": lm,
            "testpmd_of_loopback": of_loopback,
            "border": b,
            "testpmd": p,
            "loopback": l,
        }));
    }
    t.note(format!(
        "{} s per phase, {} flows, window {}, nice {}; generator on CPU {}, worker/forwarding core on CPU {}",
        a.seconds, a.flows, a.window, a.nice, a.gen_cpu, a.dut_cpu
    ));
    t.note(format!(
        "load average before/after: {load_before} / {load_after} (a shared machine: numbers are noisy)"
    ));
    t.note("lost: frames sent into the device that did not come out (both directions, incl. those in flight at the end)");
    t.note("gen loopback: the generator's two ports joined, no device (its own ceiling on one core); testpmd near it means the generator, not testpmd, set testpmd's rate");
    let doc = json!({
        "seconds": a.seconds,
        "flows": a.flows,
        "window": a.window,
        "gen_cpu": a.gen_cpu,
        "dut_cpu": a.dut_cpu,
        "loadavg_before": load_before,
        "loadavg_after": load_after,
        "rounds": a.rounds,
        "nice": a.nice,
        "phases": rows,
        "border_counters": border.iter().map(|r| &r.counters).collect::<Vec<_>>(),
    });
    std::fs::write(&a.json, serde_json::to_string_pretty(&doc)? + "\n")
        .with_context(|| format!("write {}", a.json.display()))?;
    t.note(format!("JSON: {}", a.json.display()));
    drop(scratch);
    Ok(t)
}

/// Median, minimum and maximum of `key` over rounds.
fn median_range(v: &[&Value], key: &str) -> (f64, f64, f64) {
    let mut x: Vec<f64> = v.iter().map(|p| p[key].as_f64().unwrap_or(0.0)).collect();
    x.sort_by(f64::total_cmp);
    match x.len() {
        0 => (0.0, 0.0, 0.0),
        n if n % 2 == 1 => (x[n / 2], x[0], x[n - 1]),
        n => ((x[n / 2 - 1] + x[n / 2]) / 2.0, x[0], x[n - 1]),
    }
}

fn lost(p: &Value) -> i64 {
    let g = |k: &str| p[k].as_i64().unwrap_or(0);
    (g("client_tx") - g("backend_rx")) + (g("backend_tx") - g("client_rx"))
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// `prog` under `nice -n a.nice`.
fn niced(a: &Args, prog: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new("nice");
    c.arg("-n").arg(a.nice.to_string()).arg(prog);
    c
}

fn gen_command(a: &Args, s: &Scratch, tag: &str) -> anyhow::Result<(Command, PathBuf, PathBuf)> {
    let client = s.path(&format!("{tag}-client.sock"));
    let backend = s.path(&format!("{tag}-backend.sock"));
    let mut cmd = niced(a, std::env::current_exe()?);
    cmd.arg("gen")
        .arg("--client-socket")
        .arg(&client)
        .arg("--backend-socket")
        .arg(&backend)
        .args(["--dut-client-mac", CLIENT_MAC])
        .arg("--hold")
        .arg("--json")
        .arg(s.path(&format!("gen-{tag}.json")))
        .arg(format!("--seconds={}", a.seconds))
        .arg(format!("--flows={}", a.flows))
        .arg(format!("--window={}", a.window))
        .arg(format!("--phases={}", a.phases.join(",")))
        .arg(format!("--cpu={}", a.gen_cpu));
    Ok((cmd, client, backend))
}

/// Waits until the generator (memif server) has created both sockets.
fn wait_sockets(gen: &mut Proc, socks: &[&Path]) -> anyhow::Result<()> {
    let start = Instant::now();
    while !socks.iter().all(|p| p.exists()) {
        stopped()?;
        gen.alive()?;
        if start.elapsed() > Duration::from_secs(30) {
            bail!("generator made no memif sockets in 30 s:\n{}", gen.tail());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Waits for the generator's results file while both processes live.
fn wait_results(
    path: &Path,
    limit: Duration,
    gen: &mut Proc,
    mut dut: Option<&mut Proc>,
) -> anyhow::Result<()> {
    let start = Instant::now();
    while !path.exists() {
        stopped()?;
        gen.alive()?;
        if let Some(d) = dut.as_deref_mut() {
            d.alive()?;
        }
        if start.elapsed() > limit {
            bail!(
                "no results from the generator after {limit:?}:\n{}",
                gen.tail()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

fn gen_limit(a: &Args) -> Duration {
    // Per phase: handshakes (<= 10 s), warm-up, measurement, drain; plus start-up.
    Duration::from_secs_f64(60.0 + a.phases.len() as f64 * (a.seconds + 15.0))
}

fn read_phases(path: &Path) -> anyhow::Result<Vec<Value>> {
    let s = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    Ok(serde_json::from_str(&s)?)
}

/// border-dp's instance name: one per runner process.
fn instance_name() -> String {
    format!("memif{}", std::process::id())
}

fn border_config(a: &Args, s: &Scratch, client: &Path, backend: &Path) -> String {
    let instance = instance_name();
    format!(
        r#"instance = "{instance}"

[dataplane]
main_lcore = 0
worker_lcores = [1]
lcore_cpus = [{gen}, {dut}]
poll = "busy"
eal_args = ["--no-huge", "-m", "256", "--no-pci", "--no-shconf", "--log-level=lib.eal:error"]
flow_hash_key = "00112233445566778899aabbccddeeff"

[dataplane.timeouts]
tcp_closing = 1
local_port_cooldown = 0

[[port]]
name = "client"
devargs = "net_memif0,role=client,socket={client},socket-abstract=no,id=0"
addresses = ["10.71.0.1/24"]
gateway = "10.71.0.2"
mac = "{CLIENT_MAC}"
host_interface = "kmemif-c"

[[port]]
name = "backend"
devargs = "net_memif1,role=client,socket={backend},socket-abstract=no,id=0"
addresses = ["10.72.0.1/24"]
mac = "{BACKEND_MAC}"
host_interface = "kmemif-b"
local_addresses = ["10.72.0.1"]
local_port_range = [1024, 32767]

[mgmt]
listen = "unix://{mgmt}"

[[vip]]
name = "fullnat"
address = "10.71.0.10"
port = 80
mode = "fullnat"
[[vip.backend]]
address = "10.72.0.2"
port = 8080

[[vip]]
name = "dnat"
address = "10.71.0.11"
port = 80
mode = "dnat"
[[vip.backend]]
address = "10.72.0.3"
port = 8080

[[vip]]
name = "ppv2"
address = "10.71.0.12"
port = 80
mode = "fullnat"
proxy_protocol = "v2"
[[vip.backend]]
address = "10.72.0.4"
port = 8080
"#,
        gen = a.gen_cpu,
        dut = a.dut_cpu,
        client = client.display(),
        backend = backend.display(),
        mgmt = s.path("mgmt.sock").display(),
    )
}

fn run_border(a: &Args, s: &Scratch, border_dp: &Path, round: u32) -> anyhow::Result<DutRun> {
    let tag = format!("border{round}");
    let (cmd, client, backend) = gen_command(a, s, &tag)?;
    let mut gen = Proc::spawn(
        "generator",
        cmd,
        s.path(&format!("gen-{tag}.log")),
        libc::SIGTERM,
    )?;
    wait_sockets(&mut gen, &[&client, &backend])?;

    let cfg = s.path("border.toml");
    std::fs::write(&cfg, border_config(a, s, &client, &backend))?;
    let instance = instance_name();
    let mut dp_cmd = Command::new("ip");
    dp_cmd
        .args(["netns", "exec", &s.netns, "nice", "-n"])
        .arg(a.nice.to_string())
        .arg(border_dp)
        .arg("--standalone")
        .arg("--config")
        .arg(&cfg)
        .env("RUST_LOG", "warn");
    let mut dp = Proc::spawn("border-dp", dp_cmd, s.path("border-dp.log"), libc::SIGTERM)?;
    let state = state_path(&instance);
    let results = s.path(&format!("gen-{tag}.json"));
    wait_results(&results, gen_limit(a), &mut gen, Some(&mut dp))?;
    let mut counters = serde_json::Map::new();
    match StateRegion::open(&state) {
        Ok(r) if r.run_state() == RunState::Running && r.pid() == dp.pid() => {
            for (c, v) in r.totals() {
                if v != 0 {
                    counters.insert(c.name().to_string(), json!(v));
                }
            }
        }
        Ok(_) => bail!("border-dp's state region is not its running one"),
        Err(e) => bail!("open {}: {e}", state.display()),
    }
    dp.stop();
    gen.stop();
    let _ = std::fs::remove_file(&state);
    Ok(DutRun {
        phases: read_phases(&results)?,
        counters,
    })
}

fn run_testpmd(a: &Args, s: &Scratch, round: u32) -> anyhow::Result<DutRun> {
    let tag = format!("testpmd{round}");
    let (cmd, client, backend) = gen_command(a, s, &tag)?;
    let mut gen = Proc::spawn(
        "generator",
        cmd,
        s.path(&format!("gen-{tag}.log")),
        libc::SIGTERM,
    )?;
    wait_sockets(&mut gen, &[&client, &backend])?;
    let mut tp_cmd = niced(a, &a.testpmd);
    tp_cmd
        .args(["--no-huge", "-m", "256", "--no-pci", "--no-shconf"])
        .arg(format!(
            "--file-prefix=border-testpmd-{}",
            std::process::id()
        ))
        .arg(format!("--lcores=0@{},1@{}", a.gen_cpu, a.dut_cpu))
        .arg("--log-level=lib.eal:error")
        .arg(super::gen::memif_vdev(0, "client", &client))
        .arg(super::gen::memif_vdev(1, "client", &backend))
        .args([
            "--",
            "--forward-mode=io",
            "--auto-start",
            "--stats-period=1",
            "--nb-cores=1",
            "--total-num-mbufs=16384",
        ]);
    let mut tp = Proc::spawn("dpdk-testpmd", tp_cmd, s.path("testpmd.log"), libc::SIGINT)?;
    let results = s.path(&format!("gen-{tag}.json"));
    wait_results(&results, gen_limit(a), &mut gen, Some(&mut tp))?;
    tp.stop();
    gen.stop();
    Ok(DutRun {
        phases: read_phases(&results)?,
        counters: serde_json::Map::new(),
    })
}

/// The generator with its two ports joined (`gen --loopback`): no device.
fn run_loopback(a: &Args, s: &Scratch, round: u32) -> anyhow::Result<DutRun> {
    let tag = format!("loopback{round}");
    let client = s.path(&format!("{tag}-client.sock"));
    let results = s.path(&format!("gen-{tag}.json"));
    let mut cmd = niced(a, std::env::current_exe()?);
    cmd.arg("gen")
        .arg("--loopback")
        // Held like the others: the results file is the only sign of the end.
        .arg("--hold")
        .arg("--client-socket")
        .arg(&client)
        .args(["--dut-client-mac", CLIENT_MAC])
        .arg("--json")
        .arg(&results)
        .arg(format!("--seconds={}", a.seconds))
        .arg(format!("--flows={}", a.flows))
        .arg(format!("--window={}", a.window))
        .arg(format!("--phases={}", a.phases.join(",")))
        .arg(format!("--cpu={}", a.gen_cpu));
    let mut gen = Proc::spawn(
        "generator",
        cmd,
        s.path(&format!("gen-{tag}.log")),
        libc::SIGTERM,
    )?;
    wait_results(&results, gen_limit(a), &mut gen, None)?;
    gen.stop();
    Ok(DutRun {
        phases: read_phases(&results)?,
        counters: serde_json::Map::new(),
    })
}
