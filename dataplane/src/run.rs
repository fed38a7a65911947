//! The border-dp process: EAL, ports and kernel twins from the config, one
//! pinned worker per `worker_lcores` entry, and a clean shutdown on
//! SIGINT/SIGTERM.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use conf::os::files::Access;
use conf::records::{records_path, RecordsRegion};
use conf::state::{state_path, PortRole, RunState, StateRegion};
use conf::{Config, PollMode};
use dpdk_ffi::{
    Eal, FlowRules, Mbuf, Mempool, Port, SteerRule, DEFAULT_DATA_ROOM, LCORE_PANICKED,
    SOCKET_ID_ANY,
};
use tracing::{error, info, warn};

use crate::host;
use crate::io::BURST;
use crate::io_dpdk::{rx_waiter, DpdkPorts};
use crate::lb::Lb;
use crate::neigh::NeighborSync;
use crate::pipeline::Pipeline;
use crate::plan::{eal_plan, EalPlan};
use crate::port::{ports_from_config, PortDesc};
use crate::port_stats::{read_port, PortStatsCopier, StatPort};
use crate::routes::Routes;
use crate::tables_source::{reader_inbox, ReaderInbox, ShmTables};
use crate::worker::{Clock, Handoff, Poll, Worker};
use conf::tables::{tables_path, GenerationBuilder, Published, TablesReader, TablesWriter};

/// Milliseconds from the TSC: no system call on the worker's path.
struct TscClock {
    per_ms: u64,
}

impl Clock for TscClock {
    fn now_ms(&self) -> u64 {
        dpdk_ffi::tsc_cycles() / self.per_ms
    }
}

/// How long the main thread sleeps between looks at signals and workers.
const MAIN_LOOP_PERIOD: Duration = Duration::from_millis(50);
/// How often the main thread looks for a new or replaced tables region.
const FOLLOW_PERIOD: Duration = Duration::from_millis(500);

const RX_DESC: u16 = 1024;
const TX_DESC: u16 = 1024;
const MEMPOOL_CACHE: u32 = 256;

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
    #[error("{0}")]
    Records(#[from] conf::records::RecordsError),
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

/// An exclusive lock on the instance name, held for the life of the process.
struct InstanceLock {
    _file: File,
}

impl InstanceLock {
    fn acquire(instance: &str) -> Result<InstanceLock, RunError> {
        let path = conf::os::instance_lock_path(instance, "dp");
        match conf::os::lock_file(&path) {
            Ok(file) => Ok(InstanceLock { _file: file }),
            Err(conf::os::LockError::Held) => Err(RunError::AlreadyRunning {
                instance: instance.to_string(),
                path,
            }),
            Err(conf::os::LockError::Io(source)) => Err(RunError::Lock { path, source }),
            Err(conf::os::LockError::Untrusted(u)) => Err(RunError::Lock {
                path,
                source: std::io::Error::other(format!("{}; {}", u.what, u.fix)),
            }),
        }
    }
}

/// Counts workers that returned, including by panic, so the main lcore
/// notices a dead worker while the others run.
struct ExitGuard(Arc<AtomicUsize>);

/// The message of each worker's panic, by worker index: the main thread
/// names it in its log line and exit error. Touched only when a worker dies.
#[derive(Clone, Default)]
struct PanicNotes(Arc<Mutex<Vec<(usize, String)>>>);

impl PanicNotes {
    fn record(&self, worker: usize, payload: &(dyn std::any::Any + Send)) {
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "non-string panic payload".into());
        let mut notes = self.0.lock().unwrap_or_else(|e| e.into_inner());
        notes.push((worker, msg));
    }

    fn of(&self, worker: usize) -> Option<String> {
        let notes = self.0.lock().unwrap_or_else(|e| e.into_inner());
        notes
            .iter()
            .find(|(w, _)| *w == worker)
            .map(|(_, m)| m.clone())
    }

    fn first(&self) -> Option<(usize, String)> {
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
fn leak_stats(state: &Arc<StateRegion>, w: usize, vips: bool) -> conf::state::FlowStats<'static> {
    let region: &'static StateRegion = Box::leak(Box::new(state.clone()));
    let block = region.worker(w).expect("worker index checked by caller");
    if vips {
        block.vip_stats()
    } else {
        block.backend_stats()
    }
}

impl From<dpdk_ffi::DpdkError> for RunError {
    fn from(e: dpdk_ffi::DpdkError) -> Self {
        RunError::Dpdk(Box::new(e))
    }
}

/// SIGHUP: re-read the config file and, in standalone mode, publish it.
fn reload_config(
    opts: &RunOptions,
    live: &mut Config,
    publisher: Option<&mut Publisher>,
    state: &StateRegion,
) {
    let Some(publisher) = publisher else {
        warn!("SIGHUP ignored: tables come from border-mgmt (reload it there, or run with --standalone)");
        return;
    };
    let Some(path) = &opts.config_path else {
        return;
    };
    let new = match Config::from_file(path) {
        Ok(c) => c,
        Err(e) => {
            error!(error = %e, "reload refused: invalid config; the running tables stay");
            return;
        }
    };
    if let Err(what) = reloadable(live, &new) {
        error!(section = %what, "reload refused: only [[vip]] changes apply without a restart");
        return;
    }
    match publisher.publish(&new, state) {
        Ok(g) => {
            info!(generation = g, "config reloaded");
            *live = new;
        }
        Err(e) => error!(error = %e, "reload failed; the running tables stay"),
    }
}

/// Where the NIC supports rte_flow, programs full-NAT local port ownership
/// into it (docs/design.md §2): replies arrive on their owner's rx queue and the
/// handoff queues stay empty. Elsewhere the handoff queues do the job.
fn steer_replies<'p>(cfg: &Config, ports: &'p [Port]) -> Vec<FlowRules<'p>> {
    let workers = cfg.dataplane.worker_lcores.len();
    let mut steering = Vec::new();
    if workers < 2 {
        return steering;
    }
    debug_assert_eq!(
        usize::from(dpdk_ffi::owner_mask(workers)),
        crate::lb::port_owner(u16::MAX, workers)
    );
    // The data ports come first in `ports`, in config order.
    for (port, pc) in ports.iter().zip(&cfg.ports) {
        if pc.local_addresses.is_empty() {
            continue;
        }
        let rules = SteerRule::owner_rules(&pc.local_addresses, workers);
        match port.steer_local_ports(&rules) {
            Ok(r) => {
                info!(
                    "rte_flow steers full-NAT replies on port {}: {} rules",
                    pc.name,
                    r.len()
                );
                steering.push(r);
            }
            Err(e) => info!(
                "port {} cannot steer by rte_flow ({e}); handoff queues deliver replies to their owner",
                pc.name
            ),
        }
    }
    steering
}

fn port_err(port: &str, device: &str) -> impl FnOnce(dpdk_ffi::DpdkError) -> RunError {
    let (port, device) = (port.to_string(), device.to_string());
    move |source| RunError::Port {
        port,
        device,
        source: Box::new(source),
    }
}

/// Sets the port's MAC to the configured one (if any) and returns the MAC
/// the port uses.
fn set_port_mac(
    port: &mut Port,
    name: &str,
    wanted: Option<[u8; 6]>,
) -> Result<[u8; 6], dpdk_ffi::DpdkError> {
    let mac = port.mac_addr()?;
    let Some(wanted) = wanted else {
        return Ok(mac);
    };
    match port.set_mac_addr(wanted) {
        Ok(()) => Ok(wanted),
        Err(e) if e.errno() == libc::ENOTSUP => {
            // The PMD (e.g. net_pcap) cannot change its address: use the
            // configured one in software and accept every frame, the
            // pipeline filters by destination MAC itself.
            warn!(port = %name, "device cannot set its MAC; using the configured MAC in software (promiscuous)");
            if let Err(e) = port.set_promiscuous(true) {
                warn!(port = %name, error = %e, "cannot enable promiscuous mode");
            }
            Ok(wanted)
        }
        Err(e) => Err(e),
    }
}

/// Brings a port up (`bring_up` configures and starts it) with Rx
/// interrupts when `wanted`, and without them when the PMD refuses them
/// (PCI NICs without MSI-X refuse the start). Returns what `bring_up`
/// returned and, when interrupts were wanted but refused, why.
fn with_rx_interrupts<T>(
    port: &mut Port,
    wanted: bool,
    mut bring_up: impl FnMut(&mut Port, bool) -> Result<T, dpdk_ffi::DpdkError>,
) -> Result<(T, Option<String>), dpdk_ffi::DpdkError> {
    if wanted {
        match bring_up(port, true) {
            Ok(v) => return Ok((v, None)),
            Err(e) => return Ok((bring_up(port, false)?, Some(e.to_string()))),
        }
    }
    Ok((bring_up(port, false)?, None))
}

/// Per port: a name for the log, why it has no Rx interrupts when its
/// start refused them, and whether that was logged already.
struct InterruptLog {
    labels: Vec<String>,
    refused: Vec<Option<String>>,
    reported: Vec<bool>,
}

impl InterruptLog {
    fn add(&mut self, label: String, refused: Option<String>) {
        self.labels.push(label);
        self.refused.push(refused);
        self.reported.push(false);
    }

    /// Logs, once per port, that a port has no Rx interrupts, so the
    /// workers polling it back off with sleeps when idle. `at` is the
    /// port's index, when the failure was a port's.
    fn report(&mut self, at: Option<usize>, e: &dpdk_ffi::DpdkError) {
        let Some(i) = at else {
            warn!(error = %e, "cannot sleep on Rx interrupts; idle workers back off with sleeps");
            return;
        };
        let Some(reported) = self.reported.get_mut(i) else {
            return;
        };
        if std::mem::replace(reported, true) {
            return;
        }
        let label = self.labels.get(i).map_or("?", String::as_str);
        let why = match self.refused.get(i) {
            Some(Some(r)) => r.clone(),
            _ => e.to_string(),
        };
        info!("port {label} has no Rx interrupts ({why}); idle workers polling it back off with sleeps");
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

/// Arena bytes for a standalone tables region: room for every VIP block
/// several times over, so reloads never wait for reclamation.
fn arena_bytes(cfg: &Config) -> u64 {
    let per_generation: u64 = cfg
        .vips
        .iter()
        .map(|v| {
            512 + u64::from(v.maglev_table_size) * 4
                + v.backends.len() as u64 * 32
                + v.name.len() as u64
        })
        .sum::<u64>()
        + 64
        + 32 * cfg.vips.len() as u64;
    (per_generation * 8).max(16 << 20)
}

/// The standalone publisher: builds generations from the config file.
struct Publisher {
    writer: TablesWriter,
    builder: GenerationBuilder,
}

impl Publisher {
    fn create(cfg: &Config) -> Result<Publisher, RunError> {
        let path = tables_path(&cfg.instance);
        let writer = TablesWriter::create(&path, arena_bytes(cfg))
            .map_err(|e| RunError::Tables(e.to_string()))?;
        Ok(Publisher {
            writer,
            builder: GenerationBuilder::new(),
        })
    }

    fn publish(&mut self, cfg: &Config, state: &StateRegion) -> Result<u64, RunError> {
        let gen = self
            .builder
            .build(cfg, &conf::tables::no_overrides)
            .map_err(|e| RunError::Tables(e.to_string()))?;
        let quiescent: Vec<u64> = (0..state.n_workers())
            .filter_map(|w| state.worker(w))
            .map(|w| w.applied_generation())
            .collect();
        let stats = self
            .writer
            .publish(&gen, &quiescent)
            .map_err(|e| RunError::Tables(e.to_string()))?;
        info!(
            generation = stats.generation,
            blocks_written = stats.blocks_written,
            bytes_written = stats.bytes_written,
            "tables published"
        );
        Ok(stats.generation)
    }
}

/// What a reload may change: VIPs and backends. Everything else needs a restart.
fn reloadable(old: &Config, new: &Config) -> Result<(), String> {
    if old.instance != new.instance {
        return Err("instance".into());
    }
    if old.dataplane != new.dataplane {
        return Err("[dataplane]".into());
    }
    if old.ports != new.ports {
        return Err("[[port]]".into());
    }
    Ok(())
}

/// Opens one reader per worker and hands them over (a new or replaced region).
fn hand_readers(
    path: &std::path::Path,
    inboxes: &[ReaderInbox],
) -> Result<TablesReader, conf::tables::TablesError> {
    let watch = TablesReader::open(path)?;
    for inbox in inboxes {
        let r = TablesReader::open(path)?;
        // The inbox holds one reader; a stale one not yet picked up is replaced.
        let _ = inbox.force_push(r);
    }
    Ok(watch)
}

/// SIGINT/SIGTERM ask border-dp to stop (a second one ends the process at
/// once); SIGHUP asks for a reload.
struct Signals {
    terminate: Arc<AtomicBool>,
    reload: Arc<AtomicBool>,
}

impl Signals {
    fn install() -> Result<Signals, RunError> {
        let terminate = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            // A second signal while shutting down ends the process at once.
            signal_hook::flag::register_conditional_shutdown(sig, 1, terminate.clone())
                .map_err(RunError::Signals)?;
            signal_hook::flag::register(sig, terminate.clone()).map_err(RunError::Signals)?;
        }
        let reload = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(signal_hook::consts::SIGHUP, reload.clone())
            .map_err(RunError::Signals)?;
        Ok(Signals { terminate, reload })
    }

    fn terminating(&self) -> bool {
        self.terminate.load(Ordering::Relaxed)
    }
}

/// Starts EAL with the lcore layout and the devices of the plan; a failure
/// names the devices EAL may not have probed.
fn start_eal(plan: &EalPlan) -> Result<Eal, RunError> {
    info!(args = ?plan.args, "starting EAL");
    Ok(Eal::init(&plan.args).map_err(|e| {
        // EAL says which device it could not probe on its own log lines;
        // the one error line names the candidates.
        let devices: Vec<String> = plan
            .ports
            .iter()
            .map(|p| format!("port `{}` = {}", p.name, p.device))
            .collect();
        e.hint(format!(
            "check eal_args and the devargs of {}",
            devices.join(", ")
        ))
    })?)
}

/// The mbuf pool every port and worker draws from: room for every rx and
/// tx descriptor of every data port and twin, plus each lcore's cache and
/// bursts in flight.
fn create_pool(ports_and_twins: usize, workers: usize) -> Result<Mempool, RunError> {
    let queues = workers as u32;
    let mbufs = ports_and_twins as u32 * queues * u32::from(RX_DESC + TX_DESC)
        + (queues + 1) * (MEMPOOL_CACHE + (BURST * (ports_and_twins + 2)) as u32)
        + 4096;
    Ok(Mempool::pktmbuf(
        "border_rx",
        mbufs,
        MEMPOOL_CACHE,
        DEFAULT_DATA_ROOM,
        SOCKET_ID_ANY,
    )?)
}

/// The data ports (config order) followed by their kernel twins, started,
/// with the MAC each data port uses.
struct StartedPorts {
    ports: Vec<Port>,
    macs: Vec<[u8; 6]>,
}

/// Configures and starts every data port, then every kernel twin (which
/// gets its port's MAC and addresses), `queues` rx and tx queues each.
fn start_ports(
    cfg: &Config,
    plan: &EalPlan,
    pool: &Mempool,
    queues: u16,
    want_interrupts: bool,
) -> Result<(StartedPorts, InterruptLog), RunError> {
    let all_ports = plan.ports.len() * 2;
    let mut started = StartedPorts {
        ports: Vec::with_capacity(all_ports),
        macs: Vec::with_capacity(plan.ports.len()),
    };
    let mut interrupt_log = InterruptLog {
        labels: Vec::with_capacity(all_ports),
        refused: Vec::with_capacity(all_ports),
        reported: Vec::with_capacity(all_ports),
    };
    for (planned, pc) in plan.ports.iter().zip(&cfg.ports) {
        let err = || port_err(&planned.name, &planned.device);
        let mut port = Port::by_name(&planned.device).map_err(err())?;
        let bring_up = |port: &mut Port, interrupts: bool| {
            port.set_rx_interrupts(interrupts);
            port.configure(queues, queues, RX_DESC, TX_DESC, pool)?;
            let mac = set_port_mac(port, &planned.name, pc.mac)?;
            port.start()?;
            Ok::<_, dpdk_ffi::DpdkError>(mac)
        };
        let (mac, refused) =
            with_rx_interrupts(&mut port, want_interrupts, bring_up).map_err(err())?;
        info!(port = %planned.name, device = %planned.device, mac = %host::format_mac(mac), "port up");
        started.macs.push(mac);
        started.ports.push(port);
        let label = format!("`{}` ({})", planned.name, planned.device);
        interrupt_log.add(label, refused);
    }
    for (i, (planned, pc)) in plan.ports.iter().zip(&cfg.ports).enumerate() {
        let err = || port_err(&planned.twin_iface, &planned.twin_device);
        let mut twin = Port::by_name(&planned.twin_device).map_err(err())?;
        let bring_up = |port: &mut Port, interrupts: bool| {
            port.set_rx_interrupts(interrupts);
            port.configure(queues, queues, RX_DESC, TX_DESC, pool)?;
            port.start()
        };
        let ((), refused) =
            with_rx_interrupts(&mut twin, want_interrupts, bring_up).map_err(err())?;
        host::configure_twin(&planned.twin_iface, started.macs[i], &pc.addresses)?;
        info!(port = %planned.name, iface = %planned.twin_iface, "kernel twin up");
        started.ports.push(twin);
        let label = format!(
            "kernel twin `{}` ({})",
            planned.twin_iface, planned.twin_device
        );
        interrupt_log.add(label, refused);
    }
    Ok((started, interrupt_log))
}

/// What the main thread shares with every worker.
struct Crew {
    state: Arc<StateRegion>,
    /// Set by the main thread to stop the workers.
    stop: Arc<AtomicBool>,
    /// How many workers returned (including by panic).
    exited: Arc<AtomicUsize>,
    /// What each panicked worker's panic said.
    panics: PanicNotes,
    handoff: Handoff<Mbuf>,
    sync: NeighborSync,
    poll: Poll,
    /// TSC ticks per millisecond.
    per_ms: u64,
    /// The records region (`[records]`) and `log_empty`; it lives as long
    /// as the process, like the workers' writers into it.
    records: Option<(&'static RecordsRegion, bool)>,
    /// Open connections of capped VIPs and backends, counted across workers.
    conn_counts: Arc<crate::lb::ConnCounts>,
}

/// Everything one worker needs, moved onto its lcore.
struct WorkerSetup {
    index: usize,
    workers: usize,
    io: DpdkPorts,
    ports_info: Vec<PortDesc>,
    inbox: ReaderInbox,
    routes: Routes,
    capacity: usize,
    timeouts: conf::Timeouts,
    state: Arc<StateRegion>,
    stop: Arc<AtomicBool>,
    exit_guard: ExitGuard,
    panics: PanicNotes,
    sync: NeighborSync,
    handoff: Handoff<Mbuf>,
    poll: Poll,
    per_ms: u64,
    records: Option<(&'static RecordsRegion, bool)>,
    conn_counts: Arc<crate::lb::ConnCounts>,
    icmp_echo_per_second: u32,
}

impl WorkerSetup {
    /// The worker's life on its lcore: builds its tables there (first touch
    /// puts them in its NUMA node's memory) and runs until `stop`.
    fn run(self) -> i32 {
        let _guard = self.exit_guard;
        let w = self.index;
        let Some(block) = self.state.worker(w) else {
            return -1;
        };
        let mut lb = Lb::new(
            w,
            self.workers,
            self.capacity,
            self.timeouts,
            self.sync,
            leak_stats(&self.state, w, true),
            leak_stats(&self.state, w, false),
        );
        lb.share_conn_counts(self.conn_counts);
        let region: &'static StateRegion = Box::leak(Box::new(self.state.clone()));
        if let Some(b) = region.worker(w) {
            lb.set_local_pool_stats(b.local_pools());
        }
        if let Some((records, log_empty)) = self.records {
            match records.writer(w) {
                Some(ring) => lb.enable_records(ring, log_empty),
                None => return -1,
            }
        }
        let mut pipeline = Pipeline::new(self.ports_info, lb);
        pipeline.set_icmp_echo_rate(self.icmp_echo_per_second);
        let counters = block.counters();
        let clock = TscClock {
            per_ms: self.per_ms,
        };
        let quiescent = self.state.clone();
        let applied = Box::new(move |g| {
            if let Some(b) = quiescent.worker(w) {
                b.set_applied_generation(g);
            }
        });
        let tables = ShmTables::new(self.inbox, self.routes, applied);
        let mut worker = Worker::new(self.io, pipeline, self.poll, clock, tables, self.handoff);
        // A panic is noted for the main thread's log line, then goes on to
        // the lcore entry point, which catches it (LCORE_PANICKED).
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            worker.run(&counters, &self.stop)
        }));
        if let Err(payload) = ran {
            self.panics.record(w, &*payload);
            std::panic::resume_unwind(payload);
        }
        0
    }
}

/// Registers border-dp's telemetry commands (crate::telemetry) over the
/// state region and the started ports; a failure costs only telemetry.
fn start_telemetry(
    cfg: &Config,
    ports: &[StatPort],
    state: &Arc<StateRegion>,
) -> Option<crate::telemetry::Telemetry> {
    let ports = ports
        .iter()
        .map(|p| crate::telemetry::NamedPort {
            name: p.name.clone(),
            port_id: p.port_id,
        })
        .collect();
    let source = crate::telemetry::Source {
        instance: cfg.instance.clone(),
        state: state.clone(),
        ports,
    };
    match crate::telemetry::register(source) {
        Ok(t) => {
            match dpdk_ffi::telemetry_socket_path() {
                Some(p) => {
                    info!(socket = %p.display(), "DPDK telemetry: /border/info, /border/counters, /border/ports, /border/port_stats")
                }
                None => info!("DPDK telemetry is off (--no-telemetry in eal_args)"),
            }
            Some(t)
        }
        Err(e) => {
            warn!(error = %e, "cannot register telemetry commands; forwarding is unaffected");
            None
        }
    }
}

/// The started ports by name: the data ports by their `[[port]].name`, then
/// their kernel twins by interface (`started.ports` holds them in that
/// order, in plan order).
fn stat_ports(plan: &EalPlan, started: &StartedPorts) -> Vec<StatPort> {
    let data = plan.ports.iter().map(|p| (p.name.clone(), PortRole::Data));
    let twins = plan
        .ports
        .iter()
        .map(|p| (p.twin_iface.clone(), PortRole::Twin));
    data.chain(twins)
        .zip(&started.ports)
        .map(|((name, role), port)| StatPort {
            name,
            role,
            port_id: port.port_id(),
        })
        .collect()
}

/// Takes worker `w`'s queue on every port, its Rx interrupt waiter (when
/// adaptive) and launches it on its lcore, `worker_lcores[w]`.
fn launch_worker(
    w: usize,
    cfg: &Config,
    started: &StartedPorts,
    pool: &Mempool,
    inbox: ReaderInbox,
    crew: &Crew,
    interrupt_log: &mut InterruptLog,
) -> Result<(), RunError> {
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
    let setup = WorkerSetup {
        index: w,
        workers: cfg.dataplane.worker_lcores.len(),
        io: DpdkPorts::new(rx, tx, pool.clone(), waiter),
        ports_info: ports_from_config(cfg, &started.macs, true),
        inbox,
        routes: Routes::from_config(cfg),
        capacity: cfg.dataplane.conntrack_per_worker as usize,
        timeouts: cfg.dataplane.timeouts,
        state: crew.state.clone(),
        stop: crew.stop.clone(),
        exit_guard: ExitGuard(crew.exited.clone()),
        panics: crew.panics.clone(),
        sync: crew.sync.clone(),
        handoff: crew.handoff.clone(),
        poll: crew.poll,
        per_ms: crew.per_ms,
        records: crew.records,
        conn_counts: crew.conn_counts.clone(),
        icmp_echo_per_second: cfg.dataplane.icmp_echo_per_second,
    };
    dpdk_ffi::launch_on(cfg.dataplane.worker_lcores[w], move || setup.run())?;
    Ok(())
}

/// The tables region border-dp follows: border-mgmt's (or its own in
/// standalone mode). It may not exist yet, and may be replaced.
struct TablesFollow {
    path: PathBuf,
    /// One inbox per worker, through which it gets its own reader.
    inboxes: Vec<ReaderInbox>,
    /// The main thread's own reader, to wait on publications; None while
    /// there is no region.
    watch: Option<TablesReader>,
    /// The last publication the workers were woken for.
    seen: Published,
    followed: Instant,
}

impl TablesFollow {
    fn attach(path: PathBuf, workers: usize) -> TablesFollow {
        let inboxes: Vec<ReaderInbox> = (0..workers).map(|_| reader_inbox()).collect();
        let watch = match hand_readers(&path, &inboxes) {
            Ok(r) => Some(r),
            Err(e) => {
                info!(path = %path.display(), reason = %e, "waiting for border-mgmt to publish tables");
                None
            }
        };
        let seen = watch.as_ref().map_or(Published::NONE, |w| w.current());
        TablesFollow {
            path,
            inboxes,
            watch,
            seen,
            followed: Instant::now(),
        }
    }

    /// Sleeps up to MAIN_LOOP_PERIOD, but wakes for every publication and
    /// wakes the workers for it: one asleep on its Rx interrupts then
    /// adopts the new generation at once, not at the end of its bounded wait.
    fn wait(&mut self, handoff: &Handoff<Mbuf>) {
        match &self.watch {
            Some(w) => {
                w.wait_published(self.seen, MAIN_LOOP_PERIOD);
                let now = w.current();
                if now != self.seen {
                    self.seen = now;
                    handoff.ring_all();
                }
            }
            None => std::thread::sleep(MAIN_LOOP_PERIOD),
        }
    }

    /// Every FOLLOW_PERIOD: attaches to a region that appeared (mgmt
    /// started) or replaced the one followed. Returns whether it looked.
    fn follow(&mut self, handoff: &Handoff<Mbuf>) -> bool {
        if self.followed.elapsed() < FOLLOW_PERIOD {
            return false;
        }
        self.followed = Instant::now();
        if !self.watch.as_ref().is_none_or(|w| w.replaced()) {
            return true;
        }
        match hand_readers(&self.path, &self.inboxes) {
            Ok(r) => {
                info!(path = %self.path.display(), generation = r.current().generation, "attached to tables region");
                self.seen = r.current();
                self.watch = Some(r);
                handoff.ring_all();
            }
            Err(_) if self.watch.is_some() => {
                warn!(path = %self.path.display(), "tables region gone; forwarding on the last tables");
                self.watch = None;
            }
            Err(_) => {}
        }
        true
    }
}

/// The test trigger of an empty mbuf pool ([`crate::fault`]): the main
/// thread turns it on (each worker then takes every mbuf it can get, its
/// lcore's cache included), turns it off after the time asked, and logs
/// what the ports counted meanwhile (`rx_nombuf`: frames a port had no
/// mbuf for). Inert unless the trigger fires (never in a release build).
struct PoolHold<'a> {
    pool: &'a Mempool,
    ports: &'a [Port],
    until: Option<Instant>,
    nombuf_before: u64,
}

impl<'a> PoolHold<'a> {
    fn new(pool: &'a Mempool, ports: &'a [Port]) -> PoolHold<'a> {
        PoolHold {
            pool,
            ports,
            until: None,
            nombuf_before: 0,
        }
    }

    fn nombuf(&self) -> u64 {
        self.ports
            .iter()
            .filter_map(|p| p.stats().ok())
            .map(|s| s.rx_nombuf)
            .sum()
    }

    fn tick(&mut self, handoff: &Handoff<Mbuf>) {
        if let Some(hold) = crate::fault::poll_hold_trigger() {
            self.nombuf_before = self.nombuf();
            crate::fault::set_pool_held(true);
            handoff.ring_all();
            self.until = Some(Instant::now() + hold);
            warn!(
                ms = hold.as_millis() as u64,
                free = self.pool.avail_count(),
                "test trigger: the workers hold every mbuf they can take"
            );
        }
        if self.until.is_some_and(|t| Instant::now() >= t) {
            let left = self.pool.avail_count();
            crate::fault::set_pool_held(false);
            handoff.ring_all();
            self.until = None;
            let dropped = self.nombuf().saturating_sub(self.nombuf_before);
            warn!(
                free_while_held = left,
                rx_nombuf = dropped,
                "test trigger: mbufs given back; the ports counted rx_nombuf={dropped} frames they had no mbuf for"
            );
        }
    }
}

/// What the main thread does every loop besides tables and signals.
struct Chores<'a> {
    hold: PoolHold<'a>,
    port_stats: &'a mut PortStatsCopier,
    /// The records region whose clock offset is kept current, and TSC
    /// ticks per millisecond (the workers' clock).
    records_clock: Option<(&'static RecordsRegion, u64)>,
}

impl Chores<'_> {
    fn tick(&mut self, handoff: &Handoff<Mbuf>) {
        self.hold.tick(handoff);
        self.port_stats.tick(read_port);
        if let Some((region, per_ms)) = self.records_clock {
            set_records_clock(region, per_ms);
        }
    }
}

/// Tells border-mgmt how the workers' clock (TSC milliseconds) maps to
/// wall-clock time, for the records' times; refreshed every main-loop
/// turn, so a stepped wall clock shows up in records within 50 ms.
fn set_records_clock(region: &RecordsRegion, per_ms: u64) {
    let unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let worker_ms = (dpdk_ffi::tsc_cycles() / per_ms) as i64;
    region.set_clock_offset_ms(unix_ms - worker_ms);
}

/// The main thread while the workers run: follows the tables region,
/// reloads on SIGHUP, reports refused generations. Returns at a stop
/// signal or when a worker returned on its own.
fn supervise(
    cfg: &Config,
    opts: &RunOptions,
    signals: &Signals,
    mut publisher: Option<&mut Publisher>,
    tables: &mut TablesFollow,
    crew: &Crew,
    chores: &mut Chores<'_>,
) {
    let mut refused_seen = 0;
    let mut live_cfg = cfg.clone();
    while !signals.terminating() && crew.exited.load(Ordering::SeqCst) == 0 {
        tables.wait(&crew.handoff);
        if let Some(w) = crate::fault::poll_trigger() {
            warn!(
                worker = w,
                "test trigger: this worker panics at its next poll"
            );
            crew.handoff.ring_all();
        }
        chores.tick(&crew.handoff);
        if signals.reload.swap(false, Ordering::Relaxed) {
            reload_config(opts, &mut live_cfg, publisher.as_deref_mut(), &crew.state);
        }
        if tables.follow(&crew.handoff) {
            let refused = crew.state.total(conf::counters::Counter::TablesRefused);
            if refused > refused_seen {
                error!(
                    refused,
                    "workers refused a published table generation (kept the previous one)"
                );
                refused_seen = refused;
            }
        }
    }
}

/// Stops the workers and waits for each; the first one that panicked or
/// failed becomes the outcome, unless it already is an error.
fn stop_workers(
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
fn report_dead_worker(crew: &Crew, lcores: &[u32]) {
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
    let pool = create_pool(plan.ports.len() * 2, lcores.len())?;
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
    let capture = crate::capture::start(cfg.dataplane.capture);
    let mut tables = TablesFollow::attach(tables_path(&cfg.instance), lcores.len());
    let handoff = Handoff::new(lcores.len());
    let per_ms = (dpdk_ffi::tsc_hz() / 1000).max(1);
    let records = match &cfg.records {
        Some(r) => {
            let region = RecordsRegion::create(
                &records_path(&cfg.instance),
                lcores.len(),
                r.ring_slots,
                access,
            )?;
            let region: &'static RecordsRegion = Box::leak(Box::new(region));
            set_records_clock(region, per_ms);
            Some((region, r.log_empty))
        }
        None => None,
    };
    let crew = Crew {
        sync: NeighborSync::new(lcores.len()).with_doorbells(handoff.doorbells()),
        handoff,
        state,
        stop: Arc::new(AtomicBool::new(false)),
        exited: Arc::new(AtomicUsize::new(0)),
        panics: PanicNotes::default(),
        poll,
        per_ms,
        records,
        conn_counts: Arc::new(crate::lb::ConnCounts::default()),
    };
    let mut launched = Vec::new();
    let mut outcome = Ok(());
    for (w, &lcore) in lcores.iter().enumerate() {
        let inbox = tables.inboxes[w].clone();
        match launch_worker(w, cfg, &started, &pool, inbox, &crew, &mut interrupt_log) {
            Ok(()) => launched.push(lcore),
            Err(e) => {
                outcome = Err(e);
                break;
            }
        }
    }

    if outcome.is_ok() {
        crew.state.set_run_state(RunState::Running);
        info!(
            instance = %cfg.instance,
            workers = launched.len(),
            state = %crew.state.path().display(),
            "border-dp running"
        );
        let mut chores = Chores {
            hold: PoolHold::new(&pool, &started.ports),
            port_stats: &mut port_stats,
            records_clock: crew.records.map(|(r, _)| (r, per_ms)),
        };
        supervise(
            cfg,
            opts,
            &signals,
            publisher.as_mut(),
            &mut tables,
            &crew,
            &mut chores,
        );
        if signals.terminating() {
            info!("signal received, stopping workers");
        } else if crew.exited.load(Ordering::SeqCst) > 0 {
            report_dead_worker(&crew, lcores);
        }
    }
    let outcome = stop_workers(launched, &crew, outcome);
    if outcome.is_ok() && crew.exited.load(Ordering::SeqCst) > 0 && !signals.terminating() {
        warn!("a worker stopped without being asked to");
    }
    // The last run's port statistics stay readable after it.
    port_stats.copy_now(read_port);
    crew.state.set_run_state(RunState::Stopped);
    let totals: Vec<String> = crew
        .state
        .totals()
        .into_iter()
        .filter(|(_, v)| *v != 0)
        .map(|(c, v)| format!("{}={v}", c.name()))
        .collect();
    info!(counters = %totals.join(" "), "workers stopped");
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
