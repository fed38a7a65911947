//! `border-perf apply`: how long a one-backend change takes from the API
//! call to every worker running on the new table generation (docs/design.md §3,
//! §6). Goal: p99 under 5 ms.
//!
//! border-mgmt runs in-process, exactly as the binary runs it: a
//! [`mgmt::Manager`] over the tables region, served by
//! [`mgmt::server::serve`] on a unix socket; the benchmark is a gRPC client
//! of it. The workers are, by default, threads that do what border-dp's
//! workers do with tables and nothing else: each owns a
//! [`dataplane::tables_source::ShmTables`] (the worker's own table source:
//! one atomic load per poll, validation of a new generation, building the
//! lookup structures), adopts what it returns into a
//! [`dataplane::lb::Lb`] (`Lb::adopt`: backends of the VIPs whose block
//! changed, the others carried over), records the generation in a
//! state region as its quiescent state and beats its heartbeat; idle, it
//! backs off like border-dp's adaptive poll on ports without Rx interrupts
//! (spin 512 polls, then sleep 10 µs doubling to 1 ms) or spins (`--poll
//! busy`). With `--dp PATH` a real border-dp (the binary) runs instead, in
//! a network namespace of its own with TAP ports (root needed): its idle
//! adaptive worker sleeps on their Rx interrupts and is woken for each
//! publication (docs/architecture.md, "Idle workers").
//!
//! Changes come one at a time, each after a random pause of 0..2 ms (so they
//! do not fall in step with an idle worker's sleeps). For each change the clock starts before the SetBackend (or ApplyConfig)
//! call and stops when every worker's applied generation in the state
//! region has reached the generation the call returned. Two scenarios: one
//! VIP, and `--vips` VIPs x `--backends` backends (a different VIP changes
//! each time); the publish time inside border-mgmt (`Manager::set_backend`:
//! build, write, publish, save the override) is timed separately.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use conf::state::FlowStats;
use conf::state::{RunState, StateRegion};
use conf::tables::TablesReader;
use dataplane::conntrack::Timeouts;
use dataplane::lb::Lb;
use dataplane::neigh::NeighborSync;
use dataplane::routes::Routes;
use dataplane::tables_source::{reader_inbox, ShmTables};
use dataplane::worker::{TablePoll, TableSource};
use mgmt::pb;
use mgmt::store::BackendAction;

use crate::report::Table;

/// How simulated workers wait when they have nothing to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PollArg {
    /// Spin: look at the tables on every iteration.
    Busy,
    /// As border-dp's adaptive poll without Rx interrupts: spin 512 empty
    /// polls, then sleep 10 µs doubling up to 1 ms.
    Adaptive,
}

/// Options of the `apply` benchmark.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Timed one-backend changes (SetBackend) per scenario.
    #[arg(long, default_value_t = 500)]
    pub changes: usize,
    /// Timed ApplyConfig changes per scenario (the whole config each time).
    #[arg(long, default_value_t = 50)]
    pub applies: usize,
    /// Untimed changes before timing.
    #[arg(long, default_value_t = 20)]
    pub warmup: usize,
    /// VIPs of the large scenario (compared with 1 VIP).
    #[arg(long, default_value_t = 512)]
    pub vips: u32,
    /// Backends per VIP.
    #[arg(long, default_value_t = 64)]
    pub backends: u32,
    /// Maglev ring size per VIP (a prime >= 100 x backends).
    #[arg(long, default_value_t = 65537)]
    pub m: u32,
    /// Simulated workers.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// How simulated workers wait when idle.
    #[arg(long, value_enum, default_value = "adaptive")]
    pub poll: PollArg,
    /// Run this border-dp binary (one worker on lcore 1, TAP ports in a
    /// network namespace `border-perf-apply`) instead of simulated workers.
    /// Needs root.
    #[arg(long, value_name = "PATH")]
    pub dp: Option<PathBuf>,
    /// Directory for the regions, the socket and the logs (tmpfs, like /dev/shm).
    #[arg(long, default_value = "/dev/shm")]
    pub dir: PathBuf,
}

const NETNS: &str = "border-perf-apply";
const INSTANCE: &str = "perfapply";

/// The backend whose weight the changes alternate (backend 0 of each VIP).
const CHANGED: &str = "10.201.0.1:8080";

/// The config of a scenario: `n_vips` VIPs with `backends` backends each;
/// backend 0 of VIP `heavy` (if any) has weight 2.
fn config(args: &Args, n_vips: u32, socket: &Path, heavy: Option<u32>) -> String {
    use std::fmt::Write;
    let mut c = format!(
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
devargs = "net_tap0,iface=bpa-ext"
addresses = ["10.200.255.254/16"]
host_interface = "kbpa-ext"

[[port]]
name = "int"
devargs = "net_tap1,iface=bpa-int"
addresses = ["10.201.255.1/16"]
host_interface = "kbpa-int"
local_addresses = ["10.201.255.1"]

[mgmt]
listen = "unix://{socket}"
"#,
        poll = match args.poll {
            PollArg::Busy => "busy",
            PollArg::Adaptive => "adaptive",
        },
        socket = socket.display(),
    );
    for v in 0..n_vips {
        let [_, _, hi, lo] = (v + 1).to_be_bytes();
        let _ = write!(
            c,
            "\n[[vip]]\nname = \"vip-{v}\"\naddress = \"10.200.{hi}.{lo}\"\nport = 443\nmaglev_table_size = {}\n",
            args.m
        );
        for b in 0..args.backends {
            let [_, _, bh, bl] = (b + 1).to_be_bytes();
            let weight = if b == 0 && heavy == Some(v) { 2 } else { 1 };
            let _ = write!(
                c,
                "[[vip.backend]]\naddress = \"10.201.{bh}.{bl}\"\nport = 8080\nweight = {weight}\n"
            );
        }
    }
    c
}

/// One simulated worker: border-dp's table handling without packets.
fn sim_worker(
    w: usize,
    tables_path: PathBuf,
    routes: Routes,
    state: Arc<StateRegion>,
    poll: PollArg,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<std::thread::JoinHandle<(u64, Vec<f64>)>> {
    let inbox = reader_inbox();
    let _ = inbox.push(TablesReader::open(&tables_path)?);
    Ok(std::thread::spawn(move || {
        let quiescent = state.clone();
        let applied = Box::new(move |g| {
            if let Some(b) = quiescent.worker(w) {
                b.set_applied_generation(g);
            }
        });
        let mut tables = ShmTables::new(inbox, routes, applied);
        // The worker's load-balancing state: adopting a generation is
        // ShmTables::poll (validation, lookup maps) then Lb::adopt (backends
        // of the VIPs whose block changed; the others are carried over).
        let mut lb = Lb::new(
            0,
            1,
            1024,
            Timeouts::default(),
            NeighborSync::new(1),
            FlowStats::detached(conf::state::MAX_VIPS),
            FlowStats::detached(conf::state::MAX_BACKENDS),
        );
        let (mut empty, mut idle) = (0u32, Duration::from_micros(10));
        let mut refused = 0u64;
        let mut adopt_ms = Vec::new();
        let counters = state.worker(w).map(|b| b.counters());
        while !stop.load(Ordering::Relaxed) {
            let t0 = Instant::now();
            match tables.poll(lb.generation()) {
                TablePoll::New(t) => {
                    let g = t.generation;
                    // The old generation is dropped before it is reported.
                    lb.adopt(*t);
                    adopt_ms.push(ms(t0.elapsed()));
                    tables.adopted(g);
                }
                TablePoll::Refused => refused += 1,
                TablePoll::Nothing => {}
            }
            if let Some(c) = &counters {
                c.beat();
            }
            // No packets ever: the adaptive worker backs off as when idle.
            if poll == PollArg::Adaptive {
                empty = empty.saturating_add(1);
                if empty > 512 {
                    std::thread::sleep(idle);
                    idle = (idle * 2).min(Duration::from_millis(1));
                }
            } else {
                std::hint::spin_loop();
            }
        }
        (refused, adopt_ms)
    }))
}

/// Where the workers are: simulated threads, or a border-dp process.
enum Workers {
    Sim {
        state: Arc<StateRegion>,
        stop: Arc<AtomicBool>,
        threads: Vec<std::thread::JoinHandle<(u64, Vec<f64>)>>,
    },
    Dp {
        child: Child,
        state_path: PathBuf,
        log: PathBuf,
    },
}

impl Workers {
    /// Every worker's applied generation (empty if unreadable).
    fn applied(&self) -> Vec<u64> {
        let read = |s: &StateRegion| {
            (0..s.n_workers())
                .filter_map(|i| s.worker(i).map(|w| w.applied_generation()))
                .collect()
        };
        match self {
            Workers::Sim { state, .. } => read(state),
            Workers::Dp { state_path, .. } => {
                StateRegion::open(state_path).map_or_else(|_| Vec::new(), |s| read(&s))
            }
        }
    }

    /// Stops the workers; the simulated ones report how long each adoption took.
    fn stop(self) -> anyhow::Result<Vec<f64>> {
        let mut adopt = Vec::new();
        match self {
            Workers::Sim { stop, threads, .. } => {
                stop.store(true, Ordering::Relaxed);
                let mut refused = 0;
                for t in threads {
                    let (r, a) = t.join().unwrap_or((1, Vec::new()));
                    refused += r;
                    adopt.extend(a);
                }
                anyhow::ensure!(
                    refused == 0,
                    "simulated workers refused {refused} generations"
                );
            }
            Workers::Dp { mut child, .. } => {
                // SAFETY: kill(2) on our own child, not reaped yet.
                unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
                let start = Instant::now();
                while child.try_wait()?.is_none() {
                    if start.elapsed() > Duration::from_secs(20) {
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                let _ = Command::new("ip").args(["netns", "del", NETNS]).status();
            }
        }
        Ok(adopt)
    }
}

/// Waits until every worker has applied `g` (or later).
fn wait_applied(w: &Workers, g: u64) -> anyhow::Result<()> {
    let start = Instant::now();
    loop {
        let a = w.applied();
        if !a.is_empty() && a.iter().all(|&x| x >= g) {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(10) {
            if let Workers::Dp { log, .. } = w {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                anyhow::bail!("border-dp did not apply generation {g} within 10 s (applied {a:?}); its log:\n{text}");
            }
            anyhow::bail!("workers did not apply generation {g} within 10 s (applied {a:?})");
        }
        // Sleep rather than spin: on a small box a spinning waiter takes the
        // CPU border-mgmt and border-dp need to get there.
        std::thread::sleep(Duration::from_micros(20));
    }
}

/// A pause of 0..2 ms before each change (xorshift), so that changes do not
/// fall in step with an idle worker's sleeps.
fn jitter(seed: &mut u64) {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    std::thread::sleep(Duration::from_micros(*seed % 2000));
}

/// Nearest-rank percentile of sorted samples.
fn pct(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

fn row(t: &mut Table, name: &str, ms: &mut [f64]) -> Option<f64> {
    if ms.is_empty() {
        return None;
    }
    ms.sort_by(f64::total_cmp);
    let p99 = pct(ms, 99.0);
    t.row(vec![
        name.to_string(),
        ms.len().to_string(),
        format!("{:.3}", ms[0]),
        format!("{:.3}", pct(ms, 50.0)),
        format!("{:.3}", pct(ms, 90.0)),
        format!("{p99:.3}"),
        format!("{:.3}", ms[ms.len() - 1]),
    ]);
    Some(p99)
}

/// Timings of one scenario, in milliseconds.
#[derive(Default)]
struct Outcome {
    rpc: Vec<f64>,
    e2e: Vec<f64>,
    manager: Vec<f64>,
    apply: Vec<f64>,
    parse: Vec<f64>,
    /// A full parse of the same texts, for comparison.
    full_parse: Vec<f64>,
    adopt: Vec<f64>,
    startup_ms: f64,
    config_bytes: usize,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn start_dp(dp: &Path, dir: &Path, text: &str) -> anyhow::Result<Workers> {
    let cfg = dir.join("border.toml");
    std::fs::write(&cfg, text)?;
    let log = dir.join("border-dp.log");
    let _ = Command::new("ip")
        .args(["netns", "del", NETNS])
        .stderr(Stdio::null())
        .status();
    let st = Command::new("ip").args(["netns", "add", NETNS]).status()?;
    anyhow::ensure!(st.success(), "ip netns add {NETNS} failed (root needed)");
    let state_path = conf::state::state_path(INSTANCE);
    let _ = std::fs::remove_file(&state_path);
    let logf = std::fs::File::create(&log)?;
    let child = Command::new("ip")
        .args(["netns", "exec", NETNS])
        .arg(dp)
        .arg("--config")
        .arg(&cfg)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(logf.try_clone()?)
        .stderr(logf)
        .spawn()
        .with_context(|| format!("cannot start {}", dp.display()))?;
    let pid = child.id();
    let w = Workers::Dp {
        child,
        state_path: state_path.clone(),
        log: log.clone(),
    };
    let start = Instant::now();
    loop {
        if let Ok(s) = StateRegion::open(&state_path) {
            if s.pid() == pid && s.run_state() == RunState::Running {
                break;
            }
        }
        if start.elapsed() > Duration::from_secs(30) {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            w.stop()?;
            anyhow::bail!("border-dp did not come up in 30 s:\n{text}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(w)
}

fn scenario(args: &Args, n_vips: u32) -> anyhow::Result<Outcome> {
    let dir = args
        .dir
        .join(format!("border-perf-apply-{}-{n_vips}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let result = run_scenario(args, n_vips, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    if args.dp.is_some() {
        let _ = std::fs::remove_file(conf::tables::tables_path(INSTANCE));
        let _ = std::fs::remove_file(conf::state::state_path(INSTANCE));
    }
    result
}

fn run_scenario(args: &Args, n_vips: u32, dir: &Path) -> anyhow::Result<Outcome> {
    let socket = dir.join("api.sock");
    let text = config(args, n_vips, &socket, None);
    let cfg = conf::Config::from_toml_str(&text, "perf")
        .map_err(|e| anyhow::anyhow!("generated config: {e}"))?;
    let paths = if args.dp.is_some() {
        let _ = std::fs::remove_file(conf::tables::tables_path(INSTANCE));
        mgmt::Paths {
            tables: conf::tables::tables_path(INSTANCE),
            state: conf::state::state_path(INSTANCE),
            records: conf::records::records_path(INSTANCE),
            conns: conf::conns::conns_path(INSTANCE),
            state_dir: Some(dir.join("intent")),
            legacy_overrides: None,
        }
    } else {
        mgmt::Paths::in_dir(dir)
    };
    let mut out = Outcome {
        config_bytes: text.len(),
        ..Outcome::default()
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;

    // border-mgmt, in-process: open the region, publish, serve.
    let t0 = Instant::now();
    let (m, _) = mgmt::Manager::new(
        cfg.clone(),
        text.clone(),
        "perf".into(),
        mgmt::Options::new(paths.clone()),
    )?;
    m.publish_now("startup")?;
    out.startup_ms = ms(t0.elapsed());
    let bound = rt.block_on(mgmt::server::bind(&cfg))?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let server = rt.spawn(mgmt::server::serve(
        m.clone(),
        bound,
        Duration::from_millis(250),
        stop_rx,
    ));

    let workers = match &args.dp {
        Some(dp) => start_dp(dp, dir, &text)?,
        None => start_sim_workers(args, &cfg, &paths)?,
    };
    let measured = (|| -> anyhow::Result<()> {
        wait_applied(&workers, m.published_generation())?;
        let client = rt.block_on(mgmt::client::connect_unix(socket.clone()))?;
        let mut bench = Bench {
            args,
            n_vips,
            rt: &rt,
            m: &m,
            workers: &workers,
            client,
            seed: 0x9E37_79B9_7F4A_7C15u64,
        };
        bench.set_backend_rpc(&mut out)?;
        bench.set_backend_in_manager(&mut out)?;
        bench.apply_config(&mut out, &text, &socket)
    })();
    let _ = stop_tx.send(true);
    let _ = rt.block_on(server);
    let stopped = workers.stop();
    measured?;
    out.adopt = stopped?;
    Ok(out)
}

/// border-dp's stand-in: `args.workers` threads that adopt tables as workers do.
fn start_sim_workers(
    args: &Args,
    cfg: &conf::Config,
    paths: &mgmt::Paths,
) -> anyhow::Result<Workers> {
    let lcores: Vec<u32> = (1..=args.workers as u32).collect();
    let state = Arc::new(StateRegion::create(&paths.state, &lcores)?);
    state.set_run_state(RunState::Running);
    let stop = Arc::new(AtomicBool::new(false));
    let threads = (0..args.workers)
        .map(|w| {
            sim_worker(
                w,
                paths.tables.clone(),
                Routes::from_config(cfg),
                state.clone(),
                args.poll,
                stop.clone(),
            )
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(Workers::Sim {
        state,
        stop,
        threads,
    })
}

/// What the timed steps of one scenario share.
struct Bench<'a> {
    args: &'a Args,
    n_vips: u32,
    rt: &'a tokio::runtime::Runtime,
    m: &'a mgmt::Manager,
    workers: &'a Workers,
    client: mgmt::client::Client,
    seed: u64,
}

impl Bench<'_> {
    /// SetBackend over gRPC: backend 0 of one VIP after the other, weight 2, then 1.
    fn set_backend_rpc(&mut self, out: &mut Outcome) -> anyhow::Result<()> {
        let (args, n_vips) = (self.args, self.n_vips as usize);
        for i in 0..args.warmup + args.changes {
            let v = i % n_vips;
            let weight = if (i / n_vips).is_multiple_of(2) { 2 } else { 1 };
            let req = pb::SetBackendRequest {
                vip: format!("vip-{v}"),
                backend: CHANGED.into(),
                action: Some(pb::set_backend_request::Action::Weight(weight)),
                note: String::new(),
            };
            jitter(&mut self.seed);
            let t0 = Instant::now();
            let r = self.rt.block_on(self.client.set_backend(req))?.into_inner();
            let rpc = t0.elapsed();
            anyhow::ensure!(
                r.changed && r.pending.is_empty() && r.generation > 0,
                "SetBackend did not publish: {r:?}"
            );
            wait_applied(self.workers, r.generation)?;
            let e2e = t0.elapsed();
            if i >= args.warmup {
                out.rpc.push(ms(rpc));
                out.e2e.push(ms(e2e));
            }
        }
        Ok(())
    }

    /// The same change inside border-mgmt, without gRPC; then back to the
    /// configured weights (untimed) so that config weights count.
    fn set_backend_in_manager(&mut self, out: &mut Outcome) -> anyhow::Result<()> {
        let (args, n_vips) = (self.args, self.n_vips as usize);
        for i in 0..args.warmup + args.changes {
            let v = i % n_vips;
            let action = if (i / n_vips).is_multiple_of(2) {
                BackendAction::Weight(3)
            } else {
                BackendAction::ResetWeight
            };
            jitter(&mut self.seed);
            let t0 = Instant::now();
            let (o, _) = self
                .m
                .set_backend(&format!("vip-{v}"), CHANGED, action, "")?;
            let dt = t0.elapsed();
            anyhow::ensure!(o.pending.is_none(), "publish pending: {o:?}");
            wait_applied(self.workers, o.generation)?;
            if i >= args.warmup {
                out.manager.push(ms(dt));
            }
        }
        for v in 0..n_vips {
            let (o, _) =
                self.m
                    .set_backend(&format!("vip-{v}"), CHANGED, BackendAction::ResetWeight, "")?;
            wait_applied(self.workers, o.generation)?;
        }
        Ok(())
    }

    /// ApplyConfig of the whole config, one backend weight different.
    fn apply_config(&mut self, out: &mut Outcome, text: &str, socket: &Path) -> anyhow::Result<()> {
        let (args, n_vips) = (self.args, self.n_vips);
        let mut last = self.m.published_generation();
        let mut parsed = conf::ConfigText::parse(text, "perf")
            .map_err(|e| anyhow::anyhow!("generated config: {e}"))?;
        for i in 0..args.applies + args.applies.min(args.warmup) {
            let heavy = i.is_multiple_of(2).then_some((i / 2) as u32 % n_vips);
            let t = config(args, n_vips, socket, heavy);
            // What parsing and validating the text costs by itself (untimed
            // in the ApplyConfig row's sense: done before the call).
            // border-mgmt validates from the previous text (ConfigText).
            let p0 = Instant::now();
            let next = parsed
                .reparse(&t, "perf")
                .map_err(|e| anyhow::anyhow!("generated config: {e}"))?;
            let parse = ms(p0.elapsed());
            anyhow::ensure!(
                next.reparsed().is_some_and(|r| r.len() == 1),
                "a one-backend change was parsed in full"
            );
            parsed = next;
            let p0 = Instant::now();
            conf::Config::from_toml_str(&t, "perf")
                .map_err(|e| anyhow::anyhow!("generated config: {e}"))?;
            let full_parse = ms(p0.elapsed());
            jitter(&mut self.seed);
            let t0 = Instant::now();
            let r = self
                .rt
                .block_on(self.client.apply_config(pb::ApplyConfigRequest {
                    config_toml: t,
                    dry_run: false,
                }))?
                .into_inner();
            anyhow::ensure!(
                r.changed && r.pending.is_empty() && r.generation > last,
                "ApplyConfig did not publish: {r:?}"
            );
            last = r.generation;
            wait_applied(self.workers, r.generation)?;
            if i >= args.applies.min(args.warmup) {
                out.apply.push(ms(t0.elapsed()));
                out.parse.push(parse);
                out.full_parse.push(full_parse);
            }
        }
        Ok(())
    }
}

/// Runs the benchmark.
pub fn run(args: &Args) -> anyhow::Result<Table> {
    anyhow::ensure!(
        args.vips > 0 && args.backends > 0 && args.changes > 0 && args.workers > 0,
        "--vips, --backends, --changes and --workers must be above 0"
    );
    if let Some(dp) = &args.dp {
        anyhow::ensure!(dp.exists(), "--dp {}: no such file", dp.display());
        anyhow::ensure!(args.workers == 1, "with --dp border-dp runs one worker");
    }
    let who = match &args.dp {
        Some(p) => format!("border-dp {} (1 worker, {:?} poll)", p.display(), args.poll),
        None => {
            format!("{} simulated worker(s), {:?} poll", args.workers, args.poll).to_lowercase()
        }
    };
    let mut t = Table::new(
        format!(
            "apply: one-backend change, API call -> every worker on the new generation; {who}; {} backends per VIP, M = {}",
            args.backends, args.m
        ),
        &["scenario", "n", "min ms", "p50 ms", "p90 ms", "p99 ms", "max ms"],
    );
    let mut p99s = Vec::new();
    let mut publish_p50 = Vec::new();
    for n in [1, args.vips] {
        let mut o = scenario(args, n)?;
        let label = |what: &str| format!("{n} VIP(s): {what}");
        row(&mut t, &label("SetBackend RPC returns"), &mut o.rpc);
        let p99 = row(
            &mut t,
            &label("SetBackend -> all workers applied"),
            &mut o.e2e,
        );
        row(
            &mut t,
            &label("publish in border-mgmt (Manager::set_backend)"),
            &mut o.manager,
        );
        publish_p50.push(pct(&o.manager, 50.0));
        row(
            &mut t,
            &label("ApplyConfig -> all workers applied"),
            &mut o.apply,
        );
        row(
            &mut t,
            &label("  of which: validating the text (ConfigText::reparse)"),
            &mut o.parse,
        );
        row(
            &mut t,
            &label("  (parsing it in full instead: Config::from_toml_str)"),
            &mut o.full_parse,
        );
        row(
            &mut t,
            &label("worker: one adopting poll (validate, lookups, Lb::adopt)"),
            &mut o.adopt,
        );
        p99s.push((n, p99.unwrap_or(f64::NAN)));
        t.note(format!(
            "{n} VIP(s): config {} KiB; border-mgmt start (every ring built, first publish) {:.1} ms",
            o.config_bytes >> 10,
            o.startup_ms
        ));
        if n == args.vips {
            break;
        }
    }
    for (n, p99) in &p99s {
        t.note(format!(
            "{n} VIP(s): SetBackend -> all workers p99 {p99:.3} ms: {} (goal < 5 ms)",
            if *p99 < 5.0 { "met" } else { "MISSED" }
        ));
    }
    if let [one, many] = publish_p50[..] {
        t.note(format!(
            "median publish through border-mgmt, {} VIPs / 1 VIP = {:.2}",
            args.vips,
            many / one.max(f64::MIN_POSITIVE)
        ));
    }
    t.note("SetBackend RPC: gRPC over the unix socket, the publish and the saved override, until the answer.");
    t.note("-> all workers applied: until every worker's applied generation in the state region reached the answered one.");
    t.note("ApplyConfig: the whole config text sent, validated, diffed and published (backend 0 of one VIP changes);");
    t.note("  border-mgmt parses only the VIP entry that differs from the last validated text; a full parse is shown for comparison.");
    if args.dp.is_none() {
        t.note("worker: ShmTables::poll that returned a new generation, then Lb::adopt (every adoption of the run); the worker forwards nothing meanwhile.");
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_run_reports_both_scenarios() {
        let args = Args {
            changes: 5,
            applies: 2,
            warmup: 1,
            vips: 3,
            backends: 2,
            m: 307,
            workers: 2,
            poll: PollArg::Adaptive,
            dp: None,
            dir: std::env::temp_dir(),
        };
        let t = run(&args).unwrap();
        assert_eq!(t.rows.len(), 14, "{t}");
        assert!(t.rows.iter().all(|r| r[1] != "0"), "{t}");
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let s: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(pct(&s, 50.0), 50.0);
        assert_eq!(pct(&s, 99.0), 99.0);
        assert_eq!(pct(&s[..1], 99.0), 1.0);
    }
}
