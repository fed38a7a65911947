//! border-mgmt: the management process of border. Today only a watcher of the
//! dataplane; the gRPC API, health checks and table publishing come later.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use conf::state::{state_path, RunState};
use conf::Config;
use tracing::{info, warn};

use border::{DpStateError, DpView};

const PROGRAM: &str = "border-mgmt";

/// The border management process.
///
/// What it does today: `--check-config` validates a config file;
/// `--config` validates it, logs what it will manage (VIPs, backends, health
/// checks, API endpoints), then watches the state region of the instance's
/// border-dp and logs when the dataplane appears, stops or disappears and
/// when a worker's heartbeat starts or stops moving. It exits 0 on
/// SIGINT/SIGTERM.
///
/// Not yet: the gRPC API, health checks, building and publishing tables
/// (so no VIP is load-balanced yet), Prometheus export.
#[derive(Parser, Debug)]
#[command(name = "border-mgmt", version, about, long_about)]
struct Args {
    /// Run with this configuration file (TOML; see docs/config.md).
    #[arg(long, value_name = "FILE", required_unless_present = "check_config")]
    config: Option<PathBuf>,
    /// Validate FILE, print OK or the first error, and exit.
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    check_config: Option<PathBuf>,
    /// How often to look at the dataplane's state region, in milliseconds.
    /// A worker whose heartbeat did not move between two looks is reported stalled.
    #[arg(long, value_name = "MS", default_value_t = 500,
          value_parser = clap::value_parser!(u64).range(50..=60_000))]
    watch_interval_ms: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(path) = args.check_config {
        return border::check_config(&path);
    }
    let Some(path) = args.config else {
        return ExitCode::FAILURE;
    };
    let cfg = match Config::from_file(&path) {
        Ok(c) => c,
        Err(e) => return border::fail(PROGRAM, &e),
    };
    let terminate = match border::termination_flag() {
        Ok(f) => f,
        Err(e) => return border::fail(PROGRAM, &format!("cannot install signal handlers: {e}")),
    };
    let _lock = match border::lock_instance(PROGRAM, &cfg.instance, "mgmt") {
        Ok(l) => l,
        Err(e) => return border::fail(PROGRAM, &e),
    };
    border::init_logging();
    describe(&cfg, &path);
    watch(
        &cfg.instance,
        Duration::from_millis(args.watch_interval_ms),
        &terminate,
    );
    info!("signal received, exiting");
    ExitCode::SUCCESS
}

/// Logs what this process will manage once it is complete.
fn describe(cfg: &Config, path: &std::path::Path) {
    info!(
        instance = %cfg.instance,
        config = %path.display(),
        zone = cfg.zone.as_deref().unwrap_or("-"),
        "border-mgmt started (today: config check and dataplane watch only)"
    );
    let metrics = cfg
        .mgmt
        .metrics_listen
        .map_or("off".to_string(), |a| a.to_string());
    info!(
        listen = %cfg.mgmt.listen,
        metrics = %metrics,
        tls = cfg.mgmt.tls.is_some(),
        "would serve the gRPC API (not implemented yet: nothing listens)"
    );
    for v in &cfg.vips {
        let backends: Vec<String> = v
            .backends
            .iter()
            .map(|b| format!("{}:{}(w{})", b.address, b.port, b.weight))
            .collect();
        let health = v.health.as_ref().map_or("none".to_string(), |h| {
            format!(
                "{} every {} ms{}",
                h.kind,
                h.interval_ms,
                h.path
                    .as_deref()
                    .map(|p| format!(" {p}"))
                    .unwrap_or_default()
            )
        });
        info!(
            vip = %v.name,
            address = %v.address,
            port = v.port,
            protocol = %v.protocol,
            mode = %v.mode,
            proxy_protocol = %v.proxy_protocol,
            maglev_table_size = v.maglev_table_size,
            backends = %backends.join(" "),
            health = %health,
            "would manage VIP (health checks and table publishing not implemented yet)"
        );
    }
    if cfg.vips.is_empty() {
        info!("no [[vip]] configured");
    }
}

/// What the last look at the state region showed.
#[derive(Default)]
struct Seen {
    /// The last "cannot read" message, to log each distinct one once.
    problem: Option<String>,
    /// pid, run state and staleness (marked live, but the pid is gone) of
    /// the dataplane last seen.
    dp: Option<(u32, RunState, bool)>,
    /// Per worker: last heartbeat seen and whether it was moving then.
    beats: Vec<(Option<u64>, Option<bool>)>,
}

/// Looks at the state region every `interval` until `terminate` is set and
/// logs every change of the dataplane's state and of its workers' liveness.
///
/// The region is mapped afresh for each look: a restarted border-dp
/// re-initialises the same file, and a long-held mapping would outlive it.
fn watch(instance: &str, interval: Duration, terminate: &AtomicBool) {
    let path = state_path(instance);
    let mut seen = Seen::default();
    while !terminate.load(Ordering::Relaxed) {
        look(instance, &path, &mut seen);
        let until = Instant::now() + interval;
        while !terminate.load(Ordering::Relaxed) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20).min(interval));
        }
    }
}

fn look(instance: &str, path: &std::path::Path, seen: &mut Seen) {
    let region = match border::open_state(instance) {
        Ok(r) => r,
        Err(e) => {
            let msg = e.to_string();
            if seen.problem.as_deref() != Some(msg.as_str()) {
                match e {
                    DpStateError::NotRunning { .. } => {
                        info!("{msg}; waiting for it")
                    }
                    DpStateError::Unreadable(_) => warn!("{msg}"),
                }
                seen.problem = Some(msg);
            }
            seen.dp = None;
            seen.beats.clear();
            return;
        }
    };
    seen.problem = None;
    let view = DpView::read(&region);
    let stale = view.run_state != RunState::Stopped && !view.pid_alive;
    let key = (view.pid, view.run_state, stale);
    if seen.dp != Some(key) {
        let lcores: Vec<String> = view.workers.iter().map(|w| w.lcore.to_string()).collect();
        if seen.dp.map(|d| d.0) != Some(view.pid) {
            // A new (or first seen) dataplane: judge its workers afresh.
            seen.beats.clear();
        }
        if stale {
            warn!(
                pid = view.pid,
                state = %path.display(),
                "border-dp is gone without marking its state region stopped (killed?)"
            );
        } else {
            info!(
                pid = view.pid,
                workers = view.workers.len(),
                lcores = %lcores.join(","),
                state = %path.display(),
                "dataplane {}",
                border::run_state_name(view.run_state)
            );
        }
        seen.dp = Some(key);
    }
    if !view.is_running() {
        // Only a running dataplane's workers beat: judge afresh once it runs.
        seen.beats.clear();
        return;
    }
    seen.beats.resize(view.workers.len(), (None, None));
    for (i, w) in view.workers.iter().enumerate() {
        let (last, verdict) = seen.beats[i];
        // The first look at a worker only records where its heartbeat is.
        let Some(last) = last else {
            seen.beats[i] = (Some(w.heartbeat), None);
            continue;
        };
        let moving = w.heartbeat != last;
        if verdict != Some(moving) {
            if moving {
                info!(
                    worker = i,
                    lcore = w.lcore,
                    heartbeat = w.heartbeat,
                    applied_generation = w.applied_generation,
                    "worker alive: heartbeat moving"
                );
            } else {
                warn!(
                    worker = i,
                    lcore = w.lcore,
                    heartbeat = w.heartbeat,
                    "worker stalled: heartbeat not moving"
                );
            }
        }
        seen.beats[i] = (Some(w.heartbeat), Some(moving));
    }
}
