//! What the manager reports, in its own types: events, status, statistics,
//! the running config. The manager, the dataplane watcher, the health
//! checker and the Prometheus renderer speak these; [`crate::proto`]
//! converts them to and from `border.v1` at the gRPC service boundary.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use conf::config::{Mode, Protocol};
use conf::counters::Counter;
use conf::state::RunState;
use conf::tables::BackendState;

use crate::findings::Finding;
use crate::health::engine::Change;

/// One event, as every subscriber sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// Increases by one per event of this process.
    pub seq: u64,
    /// When it was sent (milliseconds since the Unix epoch).
    pub unix_ms: u64,
    /// What happened.
    pub kind: EventKind,
}

/// What happened.
#[derive(Clone, Debug, PartialEq)]
pub enum EventKind {
    /// A table generation was published.
    Published {
        /// The generation.
        generation: u64,
        /// What caused it: "startup", "config", "backend", "health", "retry".
        cause: String,
        /// Blocks written into the arena.
        blocks_written: u32,
        /// Bytes written into the arena.
        bytes_written: u64,
        /// Free arena bytes after it.
        arena_free_bytes: u64,
    },
    /// A publish failed.
    PublishFailed {
        /// Why.
        error: String,
        /// border-mgmt retries by itself.
        will_retry: bool,
    },
    /// A worker refused a published generation.
    TablesRefused {
        /// Worker index.
        worker: u32,
        /// Its lcore.
        lcore: u64,
        /// Its tables_refused counter now.
        refused_total: u64,
    },
    /// A worker's heartbeat started or stopped moving.
    WorkerLiveness {
        /// Worker index.
        worker: u32,
        /// Its lcore.
        lcore: u64,
        /// Heartbeat moving.
        alive: bool,
        /// The generation it has adopted.
        applied_generation: u64,
    },
    /// The dataplane appeared, went, or changed run state.
    Dataplane {
        /// State region present.
        present: bool,
        /// pid recorded by border-dp.
        pid: u32,
        /// That pid exists.
        pid_alive: bool,
        /// [`DpSnap::run_state_name`].
        run_state: String,
    },
    /// A config was applied.
    ConfigApplied {
        /// Where it came from.
        origin: String,
        /// The generation carrying it.
        generation: u64,
        /// It differed from the running one.
        changed: bool,
    },
    /// A config was refused; the running one stays.
    ConfigRejected {
        /// Where it came from.
        origin: String,
        /// Why, in one line.
        error: String,
    },
    /// A backend changed state, weight or reason.
    BackendChanged {
        /// VIP name.
        vip: String,
        /// The backend after the change.
        backend: BackendStatus,
        /// What changed it: "operator" or "health".
        cause: &'static str,
    },
    /// The health checker: a VIP fails open, a weight-header fallback, an
    /// unreliable witness. Never [`Change::Backend`]: backend changes are
    /// [`EventKind::BackendChanged`] with cause "health".
    Health(Change),
    /// BGP: gobgpd connection, a neighbour's session, a VIP route,
    /// maintenance.
    Bgp(crate::bgp::BgpEvent),
}

/// What a change did to the tables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangeOutcome {
    /// The generation carrying the change (0 while pending or for a dry run).
    pub generation: u64,
    /// Something changed.
    pub changed: bool,
    /// Not published yet; why. border-mgmt retries by itself.
    pub pending: Option<String>,
}

/// The running config as applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunningConfig {
    /// The TOML text.
    pub text: String,
    /// Where it came from: the file path, or `"<api>"`.
    pub origin: String,
    /// When it was applied (milliseconds since the Unix epoch).
    pub applied_unix_ms: u64,
    /// The published generation now.
    pub generation: u64,
}

/// One backend of one VIP after overrides, as published.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendStatus {
    /// addr:port.
    pub address: SocketAddr,
    /// Stable id (per VIP name and addr:port); keys the statistics.
    pub id: u32,
    /// State in the tables.
    pub state: BackendState,
    /// Why, in words.
    pub reason: String,
    /// Effective weight (operator override, else configured).
    pub weight: u32,
    /// Configured weight.
    pub config_weight: u32,
    /// Operator weight in force.
    pub weight_overridden: bool,
    /// Drained by the operator (also when killed).
    pub drained: bool,
    /// Killed by the operator: drained, and its flows reset.
    pub killed: bool,
    /// Slots of the VIP's Maglev ring that point at it.
    pub ring_slots: u32,
    /// Its zone, if configured.
    pub zone: Option<String>,
}

/// One VIP and its backends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VipStatus {
    /// Name.
    pub name: String,
    /// addr:port.
    pub address: SocketAddr,
    /// Transport protocol.
    pub protocol: Protocol,
    /// Forwarding mode.
    pub mode: Mode,
    /// No backend was eligible: every backend serves.
    pub fail_open: bool,
    /// The ring holds only this appliance's zone.
    pub zone_local: bool,
    /// Backends in config order.
    pub backends: Vec<BackendStatus>,
}

/// The publisher.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublisherStatus {
    /// Path of the tables region.
    pub tables_path: PathBuf,
    /// Published generation (0: none).
    pub published_generation: u64,
    /// Arena bytes.
    pub arena_bytes: u64,
    /// Free arena bytes.
    pub arena_free_bytes: u64,
    /// Why a publish waits for a retry, while one does.
    pub pending: Option<String>,
    /// The last publish error, if the last attempt failed.
    pub last_error: Option<String>,
    /// Where the running config came from.
    pub config_origin: String,
    /// When it was applied.
    pub config_applied_unix_ms: u64,
    /// The intent file the running config was restored from at start
    /// (`None`: it came from `--config`, SIGHUP or ApplyConfig since).
    pub config_restored_from: Option<PathBuf>,
    /// Where the applied config and overrides are saved (`None`: nowhere).
    pub state_dir: Option<PathBuf>,
}

/// GetStatus: everything at one look.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// Instance name.
    pub instance: String,
    /// This appliance's zone.
    pub zone: Option<String>,
    /// The publisher.
    pub publisher: PublisherStatus,
    /// The dataplane.
    pub dataplane: DpSnap,
    /// Problems read off the workers' counters and border-dp's namespace.
    pub findings: Vec<Finding>,
    /// Every VIP in config order.
    pub vips: Vec<VipStatus>,
    /// BGP announcements; `None` without `[mgmt.bgp]`.
    pub bgp: Option<crate::bgp::BgpReport>,
    /// The connection records drain; `None` without `[records]`.
    pub records: Option<crate::records::RecordsReport>,
}

impl Status {
    /// border-dp runs: state region present, marked running, process alive.
    pub fn dataplane_running(&self) -> bool {
        let dp = &self.dataplane;
        dp.present && dp.pid_alive && dp.run_state == Some(RunState::Running)
    }
}

/// Flow statistics of a VIP or a backend, summed over workers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowStats {
    /// Packets forwarded (both directions).
    pub packets: u64,
    /// Bytes forwarded (both directions).
    pub bytes: u64,
    /// Connections created.
    pub new_connections: u64,
    /// Connections in the workers' tables now (a gauge).
    pub active_connections: u64,
}

impl From<[u64; 4]> for FlowStats {
    /// From values in [`conf::state::FlowStat::ALL`] order.
    fn from(a: [u64; 4]) -> FlowStats {
        FlowStats {
            packets: a[0],
            bytes: a[1],
            new_connections: a[2],
            active_connections: a[3],
        }
    }
}

/// One backend's flow statistics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendStats {
    /// addr:port.
    pub address: SocketAddr,
    /// Stable id.
    pub id: u32,
    /// Its flows.
    pub flows: FlowStats,
}

/// One VIP's flow statistics and its backends'.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VipStats {
    /// Name.
    pub name: String,
    /// Its flows.
    pub flows: FlowStats,
    /// Backends in config order.
    pub backends: Vec<BackendStats>,
}

/// One worker's counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerCounters {
    /// Its lcore.
    pub lcore: u64,
    /// Values in [`Counter::ALL`] order.
    pub values: Vec<u64>,
}

/// GetStats: every counter per worker, flow statistics per VIP and backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stats {
    /// The state region was there.
    pub dataplane_present: bool,
    /// Per worker, by index.
    pub workers: Vec<WorkerCounters>,
    /// Per VIP, config order.
    pub vips: Vec<VipStats>,
    /// Full-NAT tuple use per local address (summed over workers).
    pub local_pools: Vec<conf::state::LocalPoolUse>,
    /// Per port (data ports, then kernel twins): the NIC's statistics as
    /// border-dp last copied them.
    pub ports: Vec<conf::state::PortSnapshot>,
}

impl Stats {
    /// The counters, in the order of every worker's values.
    pub fn counters(&self) -> &'static [Counter] {
        Counter::ALL
    }

    /// Per counter, summed over workers.
    pub fn totals(&self) -> Vec<u64> {
        (0..Counter::ALL.len())
            .map(|i| {
                self.workers
                    .iter()
                    .map(|w| w.values.get(i).copied().unwrap_or(0))
                    .fold(0u64, u64::wrapping_add)
            })
            .collect()
    }
}

/// One worker at one look.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerSnap {
    /// lcore the worker runs on.
    pub lcore: u64,
    /// Its quiescent state: the generation it has adopted.
    pub applied_generation: u64,
    /// Poll-loop iterations.
    pub heartbeat: u64,
    /// Heartbeat moved within the grace period (or not watched long
    /// enough to tell: a worker is presumed alive until proven stalled).
    pub alive: bool,
    /// How long ago the heartbeat was last seen moving (or first seen).
    pub heartbeat_age: Duration,
}

/// The dataplane at one look.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DpSnap {
    /// The state region exists and is readable.
    pub present: bool,
    /// Why it is present but unreadable, if so.
    pub problem: Option<String>,
    /// pid recorded by border-dp.
    pub pid: u32,
    /// That pid exists.
    pub pid_alive: bool,
    /// Run state recorded by border-dp.
    pub run_state: Option<RunState>,
    /// Per worker.
    pub workers: Vec<WorkerSnap>,
}

impl DpSnap {
    /// The run state in words.
    pub fn run_state_name(&self) -> String {
        match self.run_state {
            None => "absent".into(),
            Some(RunState::Starting) => "starting".into(),
            Some(RunState::Running) => "running".into(),
            Some(RunState::Stopped) => "stopped".into(),
            Some(RunState::Unknown(v)) => format!("unknown({v})"),
        }
    }

    /// Whether workers of this dataplane may be reading the tables: its
    /// process exists and has not marked itself stopped.
    pub fn has_readers(&self) -> bool {
        self.present && self.pid_alive && self.run_state != Some(RunState::Stopped)
    }
}
