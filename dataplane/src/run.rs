//! The border-dp process: EAL, ports and kernel twins from the config, one
//! pinned worker per `worker_lcores` entry, and a clean shutdown on
//! SIGINT/SIGTERM.
//!
//! [`run`] puts the pieces together in order; each file under `run/` has
//! one job: `lock.rs` the instance lock, `signals.rs` the signals,
//! `ports.rs` EAL, the mbuf pool and the ports, `publish.rs` standalone
//! tables and SIGHUP reloads, `follow.rs` the tables region,
//! `readiness.rs` what the service manager is told (ready, watchdog,
//! stopping), `telemetry.rs` what the ports show while running,
//! `workers.rs` launching and stopping the workers, `supervise.rs` the main
//! thread's loop meanwhile.

mod flows;
mod follow;
mod lock;
mod ports;
mod publish;
mod readiness;
mod signals;
mod supervise;
mod telemetry;
mod workers;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use conf::conns::{conns_path, ConnsRegion};
use conf::os::files::Access;
use conf::records::{records_path, RecordsRegion};
use conf::state::{state_path, RunState, StateRegion};
use conf::tables::tables_path;
use conf::{Config, PollMode};
use tracing::{info, warn};

use crate::host;
use crate::plan::eal_plan;
use crate::port_stats::{read_port, PortStatsCopier};
use crate::worker::{Handoff, Poll};
use follow::TablesFollow;
use lock::InstanceLock;
use ports::{create_pool, start_eal, start_ports, steer_replies};
use publish::Publisher;
use signals::Signals;
use supervise::{set_records_clock, supervise, Chores};
use telemetry::{start_telemetry, stat_ports};
use workers::{launch_workers, report_dead_worker, stop_workers, Crew};

/// Why border-dp could not start or stopped abnormally. Each is one line.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("another border-dp of instance `{instance}` is running (lock {path} is held)")]
    AlreadyRunning { instance: String, path: PathBuf },
    #[error("cannot take instance lock {path}: {source}")]
    Lock {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Dpdk(Box<dpdk_ffi::DpdkError>),
    #[error("port `{port}` ({device}): {source}")]
    Port {
        port: String,
        device: String,
        source: Box<dpdk_ffi::DpdkError>,
    },
    #[error("{0}")]
    Twin(#[from] host::TwinError),
    #[error("{0}")]
    State(#[from] conf::state::StateError),
    /// The records or the connections region.
    #[error("{0}")]
    Region(#[from] conf::RegionError),
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
    /// `[mgmt] operators_group` names no group on this machine.
    #[error("{0}")]
    Access(String),
    #[error("cannot build the tables: {0}")]
    Tables(String),
    #[error("worker {worker} on lcore {lcore} {how}; border-dp stopped (its supervisor restarts it: docs/reliability.md)")]
    WorkerDied {
        worker: usize,
        lcore: u32,
        how: String,
    },
}

impl From<dpdk_ffi::DpdkError> for RunError {
    fn from(e: dpdk_ffi::DpdkError) -> Self {
        RunError::Dpdk(Box::new(e))
    }
}

/// How border-dp gets its tables.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Publish tables from the config file ourselves (and reload it on
    /// SIGHUP) instead of following border-mgmt's tables region.
    pub standalone: bool,
    /// The config file, re-read on SIGHUP in standalone mode.
    pub config_path: Option<PathBuf>,
}

/// Runs border-dp until SIGINT/SIGTERM. Returns after ports are stopped and
/// EAL is cleaned up.
pub fn run(cfg: &Config, opts: &RunOptions) -> Result<(), RunError> {
    let signals = Signals::install()?;
    // Who besides root reads the state region (docs/security.md).
    let access =
        Access::for_group_name(cfg.mgmt.operators_group.as_deref()).map_err(RunError::Access)?;
    let _lock = InstanceLock::acquire(&cfg.instance)?;
    let mut publisher = if opts.standalone {
        Some(Publisher::create(cfg)?)
    } else {
        None
    };

    let plan = eal_plan(cfg, true);
    let eal = start_eal(&plan)?;
    let runtime_dir = dpdk_ffi::runtime_dir();
    let lcores = &cfg.dataplane.worker_lcores;
    let max_mtu = cfg
        .ports
        .iter()
        .map(|p| p.mtu)
        .max()
        .unwrap_or(conf::DEFAULT_MTU);
    let pool = create_pool(plan.ports.len() * 2, lcores.len(), max_mtu)?;
    let poll = match cfg.dataplane.poll {
        PollMode::Busy => Poll::Busy,
        PollMode::Adaptive => Poll::Adaptive,
    };
    // Adaptive workers sleep on Rx interrupts where the ports have them.
    let want_interrupts = poll == Poll::Adaptive;
    let (started, mut interrupt_log) =
        start_ports(cfg, &plan, &pool, lcores.len() as u16, want_interrupts)?;
    // Dropped (rules destroyed) before the ports, which it borrows.
    let steering = steer_replies(cfg, &started.ports);

    let state = Arc::new(StateRegion::create_for(
        &state_path(&cfg.instance),
        lcores,
        access,
    )?);
    if let Some(p) = publisher.as_mut() {
        p.publish(cfg, &state)?;
    }
    // Dropped before the ports close (a late request then answers null).
    let stat_ports = stat_ports(&plan, &started);
    let telemetry = start_telemetry(cfg, &stat_ports, &state);
    let mut port_stats = PortStatsCopier::new(state.clone(), &stat_ports);
    // Dropped before the ports close, like telemetry.
    let capture = crate::capture::start(cfg.dataplane.capture, &pool);
    let mut tables = TablesFollow::attach(tables_path(&cfg.instance), lcores.len());
    let per_ms = (dpdk_ffi::tsc_hz() / 1000).max(1);
    let records = open_records(cfg, access, per_ms)?;
    let flows = flows::FlowsStart::prepare(cfg, access, per_ms);
    let conns = open_conns(cfg, access)?;
    let mut crew = Crew::new(
        cfg,
        Handoff::new(lcores.len()),
        state,
        poll,
        per_ms,
        records,
        flows,
    );
    crew.conns = Some(conns);
    let (launched, outcome) = launch_workers(
        cfg,
        &started,
        &pool,
        &tables.inboxes,
        &crew,
        &mut interrupt_log,
    );

    if outcome.is_ok() {
        crew.state.set_run_state(RunState::Running);
        info!(
            instance = %cfg.instance,
            workers = launched.len(),
            state = %crew.state.path().display(),
            "border-dp running"
        );
        let records_clock = crew.records.map(|(r, _)| (r, per_ms));
        let mut chores = Chores::new(&pool, &started.ports, &mut port_stats, records_clock);
        chores.flows_clock = Some((crew.flows.clone(), per_ms));
        supervise(
            cfg,
            opts,
            &signals,
            publisher.as_mut(),
            &mut tables,
            &crew,
            &mut chores,
        );
        chores.readiness.stopping();
        if signals.terminating() {
            info!("signal received, stopping workers");
        } else if crew.exited.load(Ordering::SeqCst) > 0 {
            report_dead_worker(&crew, lcores);
        }
    }
    // A wedged worker (test trigger) must answer the stop.
    crate::fault::release_stall();
    let outcome = stop_workers(launched, &crew, outcome);
    if outcome.is_ok() && crew.exited.load(Ordering::SeqCst) > 0 && !signals.terminating() {
        warn!("a worker stopped without being asked to");
    }
    // The last run's port statistics stay readable after it.
    port_stats.copy_now(read_port);
    crew.state.set_run_state(RunState::Stopped);
    log_totals(&crew.state);
    // Ports stop and close before the pool they draw from and before EAL;
    // their flow rules go first, and telemetry stops reading them before.
    drop(telemetry);
    drop(capture);
    drop(steering);
    drop(started);
    drop(pool);
    drop(eal);
    remove_runtime_dir(runtime_dir.as_deref(), &cfg.instance);
    outcome
}

/// The records region of `[records]`, if configured, with its clock set
/// and `log_empty`; it lives as long as the process.
fn open_records(
    cfg: &Config,
    access: Access,
    per_ms: u64,
) -> Result<Option<(&'static RecordsRegion, bool)>, RunError> {
    let Some(r) = &cfg.records else {
        return Ok(None);
    };
    let region = RecordsRegion::create(
        &records_path(&cfg.instance),
        cfg.dataplane.worker_lcores.len(),
        r.ring_slots,
        access,
    )?;
    let region: &'static RecordsRegion = Box::leak(Box::new(region));
    set_records_clock(region, per_ms);
    Ok(Some((region, r.log_empty)))
}

/// The connections region the workers serve walks of their tables
/// through (`borderctl conns`); it lives as long as the process.
fn open_conns(cfg: &Config, access: Access) -> Result<&'static ConnsRegion, RunError> {
    let region = ConnsRegion::create(
        &conns_path(&cfg.instance),
        cfg.dataplane.worker_lcores.len(),
        conf::conns::RING_SLOTS,
        access,
    )?;
    Ok(Box::leak(Box::new(region)))
}

/// Logs the counters the workers left non-zero.
fn log_totals(state: &StateRegion) {
    let totals: Vec<String> = state
        .totals()
        .into_iter()
        .filter(|(_, v)| *v != 0)
        .map(|(c, v)| format!("{}={v}", c.name()))
        .collect();
    info!(counters = %totals.join(" "), "workers stopped");
}

/// EAL leaves its runtime directory (telemetry and multi-process sockets)
/// behind; a clean exit removes it when it is the instance's own (the
/// default `--file-prefix=border-<instance>`), so instances that come and
/// go leave nothing under /run/dpdk.
fn remove_runtime_dir(dir: Option<&Path>, instance: &str) {
    let Some(dir) = dir else { return };
    let own = format!("border-{instance}");
    if dir.file_name().is_some_and(|n| n == own.as_str()) {
        if let Err(e) = std::fs::remove_dir_all(dir) {
            warn!(dir = %dir.display(), error = %e, "cannot remove EAL's runtime directory");
        }
    }
}
