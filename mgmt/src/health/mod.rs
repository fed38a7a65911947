//! Health checking that does no harm (docs/design.md §5, docs/health.md).
//!
//! Probes run here, in border-mgmt, and reach the backends through the
//! kernel twin interfaces (docs/design.md §2a), so they take the data path. The
//! pieces:
//! - [`probe`]: one attempt (tcp, tls, http, https, optional PPv2 LOCAL
//!   header; dns and udp in [`probe_dns`] and [`probe_udp`]), bounded in
//!   time and memory, ending in a reason;
//! - [`engine`]: the pure verdict engine (rise/fall, no-data, quorum across
//!   checkers, unreliable witnesses, fail-open, weight header), driven by a
//!   clock the caller passes in;
//! - this module: the tokio runner (one task per distinct probe, one per
//!   peer, one owning the engine) and [`HealthView`], the interface the
//!   rest of border-mgmt uses: [`HealthView::snapshot`] is an overrides
//!   source keyed by (VIP name, backend address), and
//!   [`HealthView::subscribe`] changes whenever a verdict does;
//! - [`service`]: the gRPC service `border.v1.BorderHealth` (peers exchange
//!   observations; operators read verdicts) and the peer client;
//! - [`attach`]: wires a [`HealthView`] into a [`crate::Manager`]: verdicts
//!   become table generations, health events become API events, config
//!   applies reconfigure the probes.

pub mod agent;
pub mod dns_message;
pub mod engine;
pub mod probe;
pub mod probe_dns;
pub mod probe_udp;
pub mod service;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use conf::Config;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use engine::Engine;
pub use engine::{
    Change, HealthState, Key, Observation, ProbeOutcome, Verdict, VipHealth, Witness,
};
use probe::{ProbeSpec, ProbeTls};

use crate::model::{Event, EventKind};
use crate::store::{now_unix_ms, BackendKey, HealthVerdict};
use crate::Manager;

/// Everything the checker knows, as of one evaluation.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// This checker's id.
    pub checker: String,
    /// The quorum in force.
    pub quorum: u32,
    /// Every backend of every VIP with `[vip.health]`.
    pub verdicts: BTreeMap<Key, Verdict>,
    /// Per VIP with `[vip.health]`.
    pub vips: BTreeMap<String, VipHealth>,
    /// This checker, then each peer.
    pub witnesses: Vec<Witness>,
}

impl Snapshot {
    /// The verdict on a backend.
    pub fn get(&self, vip: &str, backend: SocketAddr) -> Option<&Verdict> {
        self.verdicts.get(&(vip.to_string(), backend))
    }

    /// The overrides view: `(state, weight from the header if any, reason)`.
    pub fn lookup(
        &self,
        vip: &str,
        backend: SocketAddr,
    ) -> Option<(HealthState, Option<u32>, &str)> {
        self.get(vip, backend)
            .map(|v| (v.state, v.weight, v.reason.as_str()))
    }
}

/// How the runner works. [`Options::for_config`] gives the defaults.
#[derive(Clone, Debug)]
pub struct Options {
    /// This checker's id (default `<hostname>/<instance>`).
    pub checker: String,
    /// How often each peer is asked for its observations.
    pub peer_interval: Duration,
    /// Deadline of one call to a peer (connect included).
    pub peer_timeout: Duration,
    /// Client identity for `tcp://` peers.
    pub peer_tls: Option<crate::tls::ClientTls>,
    /// How often verdicts are re-evaluated without new input (staleness).
    pub tick: Duration,
    /// Backends that start down without data, with the reason (verdicts
    /// kept across a restart of border-mgmt).
    pub seed_down: Vec<(Key, String)>,
}

impl Options {
    /// The defaults for `cfg`: peers asked every second with a 1 s
    /// deadline, `[mgmt.tls]` as the client identity for TCP peers
    /// (trusting server certificates signed by its `client_ca`), a 200 ms tick.
    pub fn for_config(cfg: &Config) -> Options {
        Options {
            checker: checker_id(&cfg.instance),
            peer_interval: Duration::from_secs(1),
            peer_timeout: Duration::from_secs(1),
            peer_tls: cfg.mgmt.tls.as_ref().map(|t| crate::tls::ClientTls {
                server_ca: t.client_ca.clone(),
                cert: t.cert.clone(),
                key: t.key.clone(),
                server_name: None,
            }),
            tick: Duration::from_millis(200),
            seed_down: Vec::new(),
        }
    }
}

/// `<hostname>/<instance>`: names this checker to its peers and in decisions.
pub fn checker_id(instance: &str) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string());
    format!("{host}/{instance}")
}

enum Msg {
    Local(
        Arc<ProbeSpec>,
        ProbeOutcome,
        Option<agent::AgentResult>,
        u64,
    ),
    Peer(String, String, Vec<(Key, Observation)>),
    PeerError(String, String),
    Reconfigure(Box<Config>),
}

/// The running health checker, as the rest of border-mgmt sees it.
#[derive(Debug)]
pub struct HealthView {
    start: Instant,
    checker: String,
    verdicts: watch::Sender<Arc<Snapshot>>,
    observations: Mutex<Arc<Vec<(Key, Observation)>>>,
    events: broadcast::Sender<Change>,
    cmd: mpsc::Sender<Msg>,
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Msg")
    }
}

impl HealthView {
    /// The verdicts now.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.verdicts.borrow().clone()
    }

    /// A receiver that changes whenever a verdict, a VIP flag or a witness
    /// changes.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.verdicts.subscribe()
    }

    /// Every change as it happens (fail-open, weight fallback, witnesses,
    /// backends).
    pub fn events(&self) -> broadcast::Receiver<Change> {
        self.events.subscribe()
    }

    /// This checker's id.
    pub fn checker(&self) -> &str {
        &self.checker
    }

    /// The runner's clock, in ms since it started.
    pub fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// This checker's own observations with their age in ms (for peers).
    pub fn observations(&self) -> Vec<(Key, Observation, u64)> {
        let now = self.now_ms();
        let obs = self
            .observations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        obs.iter()
            .map(|(k, o)| (k.clone(), o.clone(), now.saturating_sub(o.at_ms)))
            .collect()
    }

    /// Takes a new config (VIPs, health settings, peers, quorum).
    pub fn reconfigure(&self, cfg: Config) {
        let _ = self.cmd.try_send(Msg::Reconfigure(Box::new(cfg)));
    }
}

/// Starts the checker for `cfg`; it stops when `shutdown` turns true.
/// Needs a tokio runtime.
pub fn spawn(cfg: &Config, opts: Options, shutdown: watch::Receiver<bool>) -> Arc<HealthView> {
    let (cmd, rx) = mpsc::channel(1024);
    let view = Arc::new(HealthView {
        start: Instant::now(),
        checker: opts.checker.clone(),
        verdicts: watch::channel(Arc::new(Snapshot {
            checker: opts.checker.clone(),
            quorum: cfg.mgmt.quorum,
            ..Snapshot::default()
        }))
        .0,
        observations: Mutex::new(Arc::new(Vec::new())),
        events: broadcast::channel(1024).0,
        cmd: cmd.clone(),
    });
    let mut engine = Engine::new(
        &opts.checker,
        cfg,
        (opts.peer_interval + opts.peer_timeout).as_millis() as u64,
    );
    for (key, reason) in &opts.seed_down {
        engine.seed_down(key, reason, 0, now_unix_ms());
    }
    let runner = Runner {
        view: view.clone(),
        engine,
        cfg: cfg.clone(),
        opts,
        tx: cmd,
        tls: ProbeTls::new(),
        probes: HashMap::new(),
        peers: HashMap::new(),
        logged_quorum: None,
    };
    tokio::spawn(runner.run(rx, shutdown));
    view
}

struct Runner {
    view: Arc<HealthView>,
    engine: Engine,
    cfg: Config,
    opts: Options,
    tx: mpsc::Sender<Msg>,
    tls: ProbeTls,
    /// One task per distinct probe, and the VIP backends it stands for.
    probes: HashMap<Arc<ProbeSpec>, (JoinHandle<()>, Vec<Key>)>,
    /// One task per peer address.
    peers: HashMap<String, JoinHandle<()>>,
    /// The quorum "health checks configured" last named (None: not yet).
    logged_quorum: Option<usize>,
}

impl Runner {
    async fn run(mut self, mut rx: mpsc::Receiver<Msg>, mut shutdown: watch::Receiver<bool>) {
        self.sync_tasks();
        let mut tick = tokio::time::interval(self.opts.tick);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                r = shutdown.changed() => if r.is_err() || *shutdown.borrow() { break },
                m = rx.recv() => {
                    let Some(m) = m else { break };
                    self.handle(m);
                    // Take whatever else is queued before evaluating.
                    while let Ok(m) = rx.try_recv() {
                        self.handle(m);
                    }
                }
                _ = tick.tick() => {}
            }
            self.evaluate();
        }
        for (_, (t, _)) in self.probes.drain() {
            t.abort();
        }
        for (_, t) in self.peers.drain() {
            t.abort();
        }
    }

    fn handle(&mut self, m: Msg) {
        match m {
            Msg::Local(spec, out, answer, at) => {
                if let Some((_, keys)) = self.probes.get(&spec) {
                    self.engine.local_result(keys, &out, at);
                    if let Some(a) = &answer {
                        self.engine.agent_result(keys, a);
                    }
                }
            }
            Msg::Peer(addr, id, obs) => self.engine.peer_update(&addr, &id, obs),
            Msg::PeerError(addr, e) => self.engine.peer_error(&addr, &e),
            Msg::Reconfigure(cfg) => {
                self.engine.reconfigure(&cfg);
                self.cfg = *cfg;
                self.sync_tasks();
            }
        }
    }

    /// Starts and stops probe and peer tasks to match the config, and says
    /// so when that changed anything: a reconfigure that leaves every probe,
    /// peer and the quorum as they were (an apply or an operator change of
    /// a weight) logs nothing, so churn does not flood the log.
    fn sync_tasks(&mut self) {
        let mut changed = self.sync_probes();
        changed |= self.sync_peers();
        let quorum = self.engine.quorum();
        changed |= self.logged_quorum != Some(quorum);
        if !changed {
            return;
        }
        self.logged_quorum = Some(quorum);
        tracing::info!(
            probes = self.probes.len(),
            backends = self.probes.values().map(|(_, k)| k.len()).sum::<usize>(),
            peers = self.peers.len(),
            quorum,
            checker = %self.engine.me(),
            "health checks configured"
        );
    }

    /// One probe task per distinct probe; whether any started, stopped or
    /// now stands for other VIP backends.
    fn sync_probes(&mut self) -> bool {
        let mut want: HashMap<Arc<ProbeSpec>, Vec<Key>> = HashMap::new();
        for (key, h) in self.engine.targets() {
            want.entry(Arc::new(ProbeSpec::new(key.1, &h)))
                .or_default()
                .push(key);
        }
        let mut changed = false;
        self.probes.retain(|spec, (task, _)| {
            let keep = want.contains_key(spec);
            if !keep {
                task.abort();
                changed = true;
            }
            keep
        });
        for (spec, keys) in want {
            match self.probes.get_mut(&spec) {
                Some((_, k)) => {
                    if *k != keys {
                        *k = keys;
                        changed = true;
                    }
                }
                None => {
                    let task = tokio::spawn(probe_loop(
                        spec.clone(),
                        self.tls.clone(),
                        self.tx.clone(),
                        self.view.clone(),
                    ));
                    self.probes.insert(spec, (task, keys));
                    changed = true;
                }
            }
        }
        changed
    }

    /// One task per peer; whether any started or stopped.
    fn sync_peers(&mut self) -> bool {
        let peers: HashSet<String> = self
            .cfg
            .mgmt
            .peers
            .iter()
            .map(|p| p.address_string())
            .collect();
        let mut changed = false;
        self.peers.retain(|addr, task| {
            let keep = peers.contains(addr);
            if !keep {
                task.abort();
                changed = true;
            }
            keep
        });
        for p in &self.cfg.mgmt.peers {
            let addr = p.address_string();
            if !self.peers.contains_key(&addr) {
                let task = tokio::spawn(service::peer_loop(
                    p.address.clone(),
                    addr.clone(),
                    self.tx.clone(),
                    self.view.clone(),
                    self.opts.clone(),
                ));
                self.peers.insert(addr, task);
                changed = true;
            }
        }
        changed
    }

    fn evaluate(&mut self) {
        let now = self.view.now_ms();
        let changes = self.engine.evaluate(now, now_unix_ms());
        *self
            .view
            .observations
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Arc::new(self.engine.local_observations());
        // A checker's status (fresh, its last error) changes without any
        // verdict changing: GetHealth must not show a stale one.
        let witnesses = self.engine.witnesses();
        if changes.is_empty() && self.view.verdicts.borrow().witnesses == witnesses {
            return;
        }
        for c in &changes {
            match c {
                Change::Backend(k) => {
                    if let Some(v) = self.engine.verdicts().get(k) {
                        tracing::info!(vip = %k.0, backend = %k.1, state = v.state.as_str(), no_data = v.no_data, weight = ?v.weight, checkers = ?v.checkers, reason = %v.reason, "health verdict");
                    }
                }
                Change::FailOpen { vip, on, reason } => {
                    if *on {
                        tracing::error!(vip = %vip, "{reason}");
                    } else {
                        tracing::warn!(vip = %vip, "{reason}");
                    }
                }
                Change::WeightFallback { vip, reason } => match reason {
                    Some(r) => {
                        tracing::warn!(vip = %vip, "weight header ignored, configured weights apply: {r}")
                    }
                    None => tracing::info!(vip = %vip, "weight header weights apply"),
                },
                Change::Witness { checker, reason } => match reason {
                    Some(r) => {
                        tracing::warn!(checker = %checker, "unreliable witness, votes discarded: {r}")
                    }
                    None => {
                        tracing::info!(checker = %checker, "witness reliable again, votes count")
                    }
                },
            }
            let _ = self.view.events.send(c.clone());
        }
        let snap = Snapshot {
            checker: self.engine.me().to_string(),
            quorum: self.engine.quorum() as u32,
            verdicts: self.engine.verdicts().clone(),
            vips: self.engine.vip_health().clone(),
            witnesses,
        };
        self.view.verdicts.send_replace(Arc::new(snap));
    }
}

/// Probes `spec` forever: one probe per interval, at a uniformly random
/// point of each interval ("full jitter": a fleet does not probe in
/// lockstep, and the rate stays one per interval).
async fn probe_loop(
    spec: Arc<ProbeSpec>,
    tls: ProbeTls,
    tx: mpsc::Sender<Msg>,
    view: Arc<HealthView>,
) {
    let interval = Duration::from_millis(u64::from(spec.interval_ms.max(1)));
    // An agent beside an active probe gets a deadline of its own.
    let attempts = if spec.agent_port.is_some() && spec.kind != probe::KindKey::Agent {
        2
    } else {
        1
    };
    let hard = Duration::from_millis(attempts * u64::from(spec.timeout_ms) + 250);
    let mut rng = fastrand::Rng::new();
    let mut slot = Instant::now();
    loop {
        let offset = Duration::from_millis(rng.u64(0..u64::from(spec.interval_ms.max(1))));
        tokio::time::sleep_until(slot + offset).await;
        // probe() keeps its own deadline; this one is a backstop.
        let (out, answer) = match tokio::time::timeout(hard, probe::check(&spec, &tls)).await {
            Ok(o) => o,
            Err(_) => (
                ProbeOutcome {
                    ok: false,
                    reason: format!("probe timeout after {} ms", spec.timeout_ms),
                    weight: None,
                },
                None,
            ),
        };
        if tx
            .send(Msg::Local(spec.clone(), out, answer, view.now_ms()))
            .await
            .is_err()
        {
            return;
        }
        slot += interval;
        let now = Instant::now();
        if slot + interval < now {
            // Stalled (a suspended process): start over instead of catching up.
            slot = now;
        }
    }
}

/// Starts the health checker of `m`'s running config and wires it in:
/// verdicts go into the store (one table generation per batch of changes,
/// `cause = "health"`), health events into the event stream, and config
/// applies (API or SIGHUP) reconfigure it. Stops with `shutdown`.
pub fn attach(m: Arc<Manager>, shutdown: watch::Receiver<bool>) -> Arc<HealthView> {
    let cfg = m.config();
    let mut opts = Options::for_config(&cfg);
    opts.seed_down = m
        .health_verdicts()
        .into_iter()
        .filter(|(_, v)| !v.up)
        .map(|(k, v)| ((k.vip, k.backend), v.reason))
        .collect();
    let view = spawn(&cfg, opts, shutdown.clone());
    // Config applies.
    {
        let (m, view, mut shutdown) = (m.clone(), view.clone(), shutdown.clone());
        let mut events = m.subscribe();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    r = shutdown.changed() => if r.is_err() || *shutdown.borrow() { return },
                    e = events.recv() => match e {
                        Ok(Event { kind: EventKind::ConfigApplied { changed: true, .. }, .. }) => {
                            view.reconfigure(m.config());
                        }
                        Err(broadcast::error::RecvError::Lagged(_)) => view.reconfigure(m.config()),
                        Err(broadcast::error::RecvError::Closed) => return,
                        Ok(_) => {}
                    },
                }
            }
        });
    }
    // Verdicts into the store.
    {
        let (m, mut rx, mut shutdown) = (m.clone(), view.subscribe(), shutdown.clone());
        tokio::spawn(async move {
            let mut sent: HashMap<Key, HealthVerdict> = HashMap::new();
            loop {
                let snap = rx.borrow_and_update().clone();
                let mut batch = Vec::new();
                for (k, v) in &snap.verdicts {
                    let hv = HealthVerdict {
                        up: v.state == HealthState::Up,
                        reason: v.reason.clone(),
                        since_unix_ms: v.since_unix_ms,
                        weight: v.weight,
                        drain: v.drain,
                        weight_pct: v.weight_pct,
                    };
                    let same = sent.get(k).is_some_and(|o| {
                        o.up == hv.up
                            && o.reason == hv.reason
                            && o.weight == hv.weight
                            && o.drain == hv.drain
                            && o.weight_pct == hv.weight_pct
                    });
                    if !same {
                        sent.insert(k.clone(), hv.clone());
                        batch.push((BackendKey::new(&k.0, k.1), Some(hv)));
                    }
                }
                let gone: Vec<Key> = sent
                    .keys()
                    .filter(|k| !snap.verdicts.contains_key(*k))
                    .cloned()
                    .collect();
                for k in gone {
                    sent.remove(&k);
                    batch.push((BackendKey::new(&k.0, k.1), None));
                }
                if !batch.is_empty() {
                    let m = m.clone();
                    let r = tokio::task::spawn_blocking(move || m.set_health_batch(batch)).await;
                    if let Ok(Err(e)) = r {
                        tracing::error!(error = %e, "health verdicts not published; retried with the next change");
                        sent.clear();
                    }
                }
                tokio::select! {
                    r = shutdown.changed() => if r.is_err() || *shutdown.borrow() { return },
                    r = rx.changed() => if r.is_err() { return },
                }
            }
        });
    }
    // Health events into the event stream.
    {
        let (m, mut events, mut shutdown) = (m.clone(), view.events(), shutdown);
        tokio::spawn(async move {
            loop {
                let c = tokio::select! {
                    r = shutdown.changed() => if r.is_err() || *shutdown.borrow() { return } else { continue },
                    c = events.recv() => match c {
                        Ok(c) => c,
                        Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(broadcast::error::RecvError::Closed) => return,
                    },
                };
                // Backend changes reach the event stream as BackendChanged,
                // from the store.
                if !matches!(c, Change::Backend(_)) {
                    m.emit(EventKind::Health(c));
                }
            }
        });
    }
    view
}
