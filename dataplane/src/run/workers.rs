//! The workers: what the main thread shares with them ([`Crew`]), what
//! each takes onto its lcore ([`WorkerSetup`]), launching them, and
//! stopping them and reporting one that died.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use conf::records::RecordsRegion;
use conf::state::StateRegion;
use conf::Config;
use dpdk_ffi::{Mbuf, Mempool, LCORE_PANICKED};
use tracing::error;

use super::ports::{InterruptLog, StartedPorts};
use super::RunError;
use crate::io_dpdk::{rx_waiter, DpdkPorts};
use crate::lb::Lb;
use crate::neigh::NeighborSync;
use crate::pipeline::Pipeline;
use crate::port::{ports_from_config, PortDesc};
use crate::routes::Routes;
use crate::tables_source::{ReaderInbox, ShmTables};
use crate::worker::{Clock, Handoff, Poll, Worker};

/// Milliseconds from the TSC: no system call on the worker's path.
pub(super) struct TscClock {
    per_ms: u64,
}

impl Clock for TscClock {
    fn now_ms(&self) -> u64 {
        dpdk_ffi::tsc_cycles() / self.per_ms
    }
}

/// Counts workers that returned, including by panic, so the main lcore
/// notices a dead worker while the others run.
pub(super) struct ExitGuard(Arc<AtomicUsize>);

/// The message of each worker's panic, by worker index: the main thread
/// names it in its log line and exit error. Touched only when a worker dies.
#[derive(Clone, Default)]
pub(super) struct PanicNotes(Arc<Mutex<Vec<(usize, String)>>>);

impl PanicNotes {
    pub(super) fn record(&self, worker: usize, payload: &(dyn std::any::Any + Send)) {
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "non-string panic payload".into());
        let mut notes = self.0.lock().unwrap_or_else(|e| e.into_inner());
        notes.push((worker, msg));
    }

    pub(super) fn of(&self, worker: usize) -> Option<String> {
        let notes = self.0.lock().unwrap_or_else(|e| e.into_inner());
        notes
            .iter()
            .find(|(w, _)| *w == worker)
            .map(|(_, m)| m.clone())
    }

    pub(super) fn first(&self) -> Option<(usize, String)> {
        let notes = self.0.lock().unwrap_or_else(|e| e.into_inner());
        notes.first().cloned()
    }
}

impl Drop for ExitGuard {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// The worker's statistics slices with a 'static lifetime: the state region
/// is kept alive (leaked Arc) until the process exits.
pub(super) fn leak_stats(
    state: &Arc<StateRegion>,
    w: usize,
    vips: bool,
) -> conf::state::FlowStats<'static> {
    let region: &'static StateRegion = Box::leak(Box::new(state.clone()));
    let block = region.worker(w).expect("worker index checked by caller");
    if vips {
        block.vip_stats()
    } else {
        block.backend_stats()
    }
}

/// What the main thread shares with every worker; each worker takes a
/// clone of it onto its lcore.
#[derive(Clone)]
pub(super) struct Crew {
    pub(super) state: Arc<StateRegion>,
    /// Set by the main thread to stop the workers.
    pub(super) stop: Arc<AtomicBool>,
    /// How many workers returned (including by panic).
    pub(super) exited: Arc<AtomicUsize>,
    /// What each panicked worker's panic said.
    pub(super) panics: PanicNotes,
    pub(super) handoff: Handoff<Mbuf>,
    sync: NeighborSync,
    poll: Poll,
    /// TSC ticks per millisecond.
    per_ms: u64,
    /// The records region (`[records]`) and `log_empty`; it lives as long
    /// as the process, like the workers' writers into it.
    pub(super) records: Option<(&'static RecordsRegion, bool)>,
    /// The connections region (`borderctl conns`); it lives as long as
    /// the process, like the workers' exporters into it.
    pub(super) conns: Option<&'static conf::conns::ConnsRegion>,
    /// Open connections of capped VIPs and backends, counted across workers.
    conn_counts: Arc<crate::lb::ConnCounts>,
    /// What every worker's load balancer is built with.
    lb: LbSettings,
    /// The flows regions: each worker's slab, the previous flows.
    pub(super) flows: super::flows::FlowsStart,
}

/// The `[dataplane]` settings every worker's load balancer is built with.
#[derive(Clone, Copy)]
struct LbSettings {
    workers: usize,
    capacity: usize,
    timeouts: conf::Timeouts,
    icmp_echo_per_second: u32,
}

impl Crew {
    /// The crew of `cfg`'s workers over `state`, waking them through
    /// `handoff`'s doorbells.
    pub(super) fn new(
        cfg: &Config,
        handoff: Handoff<Mbuf>,
        state: Arc<StateRegion>,
        poll: Poll,
        per_ms: u64,
        records: Option<(&'static RecordsRegion, bool)>,
        flows: super::flows::FlowsStart,
    ) -> Crew {
        let workers = cfg.dataplane.worker_lcores.len();
        Crew {
            sync: NeighborSync::new(workers).with_doorbells(handoff.doorbells()),
            handoff,
            state,
            stop: Arc::new(AtomicBool::new(false)),
            exited: Arc::new(AtomicUsize::new(0)),
            panics: PanicNotes::default(),
            poll,
            per_ms,
            records,
            conns: None,
            conn_counts: Arc::new(crate::lb::ConnCounts::default()),
            flows,
            lb: LbSettings {
                workers,
                capacity: cfg.dataplane.conntrack_per_worker as usize,
                timeouts: cfg.dataplane.timeouts,
                icmp_echo_per_second: cfg.dataplane.icmp_echo_per_second,
            },
        }
    }
}

/// Everything one worker needs, moved onto its lcore: its own queues,
/// ports, reader inbox and routes, and the crew.
struct WorkerSetup {
    index: usize,
    io: DpdkPorts,
    ports_info: Vec<PortDesc>,
    inbox: ReaderInbox,
    routes: Routes,
    exit_guard: ExitGuard,
    crew: Crew,
}

impl WorkerSetup {
    /// The worker's life on its lcore: builds its tables there (first touch
    /// puts them in its NUMA node's memory) and runs until `stop`.
    fn run(self) -> i32 {
        let _guard = self.exit_guard;
        let crew = self.crew;
        let w = self.index;
        let Some(block) = crew.state.worker(w) else {
            return -1;
        };
        let mut lb = Lb::new(
            w,
            crew.lb.workers,
            crew.lb.capacity,
            crew.lb.timeouts,
            crew.sync,
            leak_stats(&crew.state, w, true),
            leak_stats(&crew.state, w, false),
        );
        lb.share_conn_counts(crew.conn_counts);
        let super::flows::WorkerFlows {
            slab,
            meters,
            previous,
            carry,
        } = crew.flows.take(w, crew.per_ms);
        if let Some(carry) = carry {
            lb.use_carry(carry);
        }
        if let Some(slab) = slab {
            lb.use_slab(slab);
        }
        if let Some(meters) = meters {
            lb.use_meters(meters);
        }
        if let Some(previous) = previous {
            lb.adopt_from(previous);
        }
        let region: &'static StateRegion = Box::leak(Box::new(crew.state.clone()));
        if let Some(b) = region.worker(w) {
            lb.set_local_pool_stats(b.local_pools());
        }
        if let Some(export) = crew.conns.and_then(|c| c.exporter(w)) {
            lb.enable_conns(export);
        }
        if let Some((records, log_empty)) = crew.records {
            match records.writer(w) {
                Some(ring) => lb.enable_records(ring, log_empty),
                None => return -1,
            }
        }
        let mut pipeline = Pipeline::new(self.ports_info, lb);
        pipeline.set_icmp_echo_rate(crew.lb.icmp_echo_per_second);
        let counters = block.counters();
        let clock = TscClock {
            per_ms: crew.per_ms,
        };
        let quiescent = crew.state.clone();
        let applied = Box::new(move |g| {
            if let Some(b) = quiescent.worker(w) {
                b.set_applied_generation(g);
            }
        });
        let tables = ShmTables::new(self.inbox, self.routes, applied);
        let mut worker = Worker::new(self.io, pipeline, crew.poll, clock, tables, crew.handoff);
        // A panic is noted for the main thread's log line, then goes on to
        // the lcore entry point, which catches it (LCORE_PANICKED).
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            worker.run(&counters, &crew.stop)
        }));
        if let Err(payload) = ran {
            crew.panics.record(w, &*payload);
            std::panic::resume_unwind(payload);
        }
        0
    }
}

/// Launches every worker of `cfg` in order, worker `w` with reader inbox
/// `inboxes[w]`; stops at the first that cannot start. Returns the lcores
/// launched and whether all were.
pub(super) fn launch_workers(
    cfg: &Config,
    started: &StartedPorts,
    pool: &Mempool,
    inboxes: &[ReaderInbox],
    crew: &Crew,
    interrupt_log: &mut InterruptLog,
) -> (Vec<u32>, Result<(), RunError>) {
    let mut launched = Vec::new();
    for (w, (&lcore, inbox)) in cfg.dataplane.worker_lcores.iter().zip(inboxes).enumerate() {
        let setup = match worker_setup(w, cfg, started, pool, inbox.clone(), crew, interrupt_log) {
            Ok(setup) => setup,
            Err(e) => return (launched, Err(e)),
        };
        if let Err(e) = dpdk_ffi::launch_on(lcore, move || setup.run()) {
            return (launched, Err(e.into()));
        }
        launched.push(lcore);
    }
    (launched, Ok(()))
}

/// Takes worker `w`'s queue on every port and its Rx interrupt waiter
/// (when adaptive): what it needs on its lcore.
fn worker_setup(
    w: usize,
    cfg: &Config,
    started: &StartedPorts,
    pool: &Mempool,
    inbox: ReaderInbox,
    crew: &Crew,
    interrupt_log: &mut InterruptLog,
) -> Result<WorkerSetup, RunError> {
    let (rx, tx): (Vec<_>, Vec<_>) = started
        .ports
        .iter()
        .map(|p| Ok((p.rx_queue(w as u16)?, p.tx_queue(w as u16)?)))
        .collect::<Result<Vec<_>, dpdk_ffi::DpdkError>>()?
        .into_iter()
        .unzip();
    let waiter = if crew.poll == Poll::Adaptive {
        let bell = crew.handoff.doorbell(w).and_then(|b| b.fd());
        match rx_waiter(&rx, bell) {
            Ok(waiter) => Some(waiter),
            Err((at, e)) => {
                interrupt_log.report(at, &e);
                None
            }
        }
    } else {
        None
    };
    Ok(WorkerSetup {
        index: w,
        io: DpdkPorts::new(rx, tx, pool.clone(), waiter),
        ports_info: ports_from_config(cfg, &started.macs, true),
        inbox,
        routes: Routes::from_config(cfg),
        exit_guard: ExitGuard(crew.exited.clone()),
        crew: crew.clone(),
    })
}

/// Stops the workers and waits for each; the first one that panicked or
/// failed becomes the outcome, unless it already is an error.
pub(super) fn stop_workers(
    launched: Vec<u32>,
    crew: &Crew,
    mut outcome: Result<(), RunError>,
) -> Result<(), RunError> {
    crew.stop.store(true, Ordering::Relaxed);
    crew.handoff.ring_all();
    for (worker, lcore) in launched.into_iter().enumerate() {
        let rc = dpdk_ffi::wait_lcore(lcore);
        if rc != 0 && outcome.is_ok() {
            let how = if rc == LCORE_PANICKED {
                let msg = crew.panics.of(worker);
                format!("panicked: {}", msg.as_deref().unwrap_or("(no message)"))
            } else {
                format!("exited with {rc}")
            };
            outcome = Err(RunError::WorkerDied { worker, lcore, how });
        }
    }
    outcome
}

/// Says at once (before the others are stopped) that a worker died and
/// what border-dp does about it: crash-only, the supervisor restarts it.
pub(super) fn report_dead_worker(crew: &Crew, lcores: &[u32]) {
    match crew.panics.first() {
        Some((w, msg)) => error!(
            worker = w,
            lcore = lcores.get(w).copied().unwrap_or(u32::MAX),
            panic = %msg,
            "worker panicked: stopping every worker and exiting with status 1 (crash-only; systemd Restart=always starts border-dp again)"
        ),
        None => {
            error!("a worker returned on its own: stopping every worker")
        }
    }
}
