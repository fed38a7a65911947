//! The manager: the config store, the publisher and the dataplane watcher
//! behind one lock, and the events they produce. Every change (a config
//! apply, an operator override, later a health verdict) is made on a copy of
//! the store, built and published, and only then committed: a change that
//! cannot be published leaves the running config as it was.
//!
//! Methods block (file I/O, Maglev); async callers use `spawn_blocking`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use conf::state::{state_path, vip_stat_key};
use conf::tables::{backend_ids, tables_path, BackendState, Generation, TablesError, VipFlags};
use conf::{Config, ConfigError};
use tokio::sync::broadcast;

use crate::dp::{read_stats, DpSnap, DpWatcher, StatKeys};
use crate::pb;
use crate::publisher::{Opened, PublishError, Publisher};
use crate::store::{
    check_reloadable, load_config_file, now_unix_ms, resolve_tls_paths, BackendAction, BackendKey,
    HealthVerdict, SetBackendError, Store,
};

/// Where an instance's files are. Injectable for tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Paths {
    /// The tables region (written by border-mgmt).
    pub tables: PathBuf,
    /// The state region (written by border-dp).
    pub state: PathBuf,
    /// Operator overrides, kept across restarts; `None`: not persisted.
    pub overrides: Option<PathBuf>,
}

impl Paths {
    /// The standard paths of `instance`: `/dev/shm/border-<instance>-tables`,
    /// `/dev/shm/border-<instance>-state`, `/run/border/<instance>.overrides.json`.
    pub fn for_instance(instance: &str) -> Paths {
        Paths {
            tables: tables_path(instance),
            state: state_path(instance),
            overrides: Some(PathBuf::from(format!(
                "/run/border/{instance}.overrides.json"
            ))),
        }
    }

    /// Every file under `dir` (tests).
    pub fn in_dir(dir: &Path) -> Paths {
        Paths {
            tables: dir.join("tables"),
            state: dir.join("state"),
            overrides: Some(dir.join("overrides.json")),
        }
    }
}

/// How the manager runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// Files.
    pub paths: Paths,
    /// A worker whose heartbeat did not move for this long is stalled: left
    /// out of the QSBR quiescent set. Far longer than a burst.
    pub liveness_grace: Duration,
    /// The config file (SIGHUP re-reads it; relative TLS paths in applied
    /// configs resolve against its directory).
    pub config_path: Option<PathBuf>,
}

impl Options {
    /// Defaults for `paths`: a grace of 3 s, no config file.
    pub fn new(paths: Paths) -> Options {
        Options {
            paths,
            liveness_grace: Duration::from_secs(3),
            config_path: None,
        }
    }
}

/// Events to every subscriber; each gets a sequence number.
#[derive(Debug)]
pub struct EventBus {
    tx: broadcast::Sender<pb::Event>,
    seq: AtomicU64,
}

impl EventBus {
    fn new() -> EventBus {
        EventBus {
            tx: broadcast::channel(1024).0,
            seq: AtomicU64::new(1),
        }
    }

    /// Sends one event (dropped if nobody listens).
    pub fn emit(&self, kind: pb::event::Kind) {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let _ = self.tx.send(pb::Event {
            seq,
            unix_ms: now_unix_ms(),
            kind: Some(kind),
        });
    }

    /// A receiver of every event from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<pb::Event> {
        self.tx.subscribe()
    }
}

/// Why the manager could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The tables region.
    #[error("{0}")]
    Tables(#[from] TablesError),
    /// The first publish.
    #[error("cannot publish the tables: {0}")]
    Publish(#[from] PublishError),
}

/// Why a config was not applied.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Not a valid config: the one-line `origin:line:col: key: message`.
    #[error("{0}")]
    Invalid(#[from] ConfigError),
    /// Changes something only a restart applies.
    #[error("{section} differs from the running config: it changes only with a restart of border-dp and border-mgmt (only [[vip]] and zone apply at run time)")]
    NotReloadable {
        /// The section.
        section: &'static str,
    },
    /// No config file to reload.
    #[error("border-mgmt was not started with a config file")]
    NoFile,
    /// Valid, but the tables could not be published; nothing changed.
    #[error("cannot publish the tables: {0}")]
    Publish(#[from] PublishError),
}

/// Why a SetBackend was not applied.
#[derive(Debug, thiserror::Error)]
pub enum SetError {
    /// Not `addr:port`.
    #[error("backend `{0}`: expected addr:port, e.g. 10.20.0.11:8080 or [2001:db8::11]:8080")]
    BadAddress(String),
    /// Unknown VIP/backend or bad weight.
    #[error("{0}")]
    Store(#[from] SetBackendError),
    /// Could not publish; nothing changed.
    #[error("cannot publish the tables: {0}")]
    Publish(#[from] PublishError),
}

/// What a change did to the tables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The generation carrying the change (0 while pending or for a dry run).
    pub generation: u64,
    /// Something changed.
    pub changed: bool,
    /// Not published yet; why. border-mgmt retries by itself.
    pub pending: Option<String>,
}

#[derive(Debug)]
struct Core {
    store: Store,
    publisher: Publisher,
    pending: Option<String>,
    last_error: Option<String>,
}

/// The management process's state.
#[derive(Debug)]
pub struct Manager {
    opts: Options,
    core: Mutex<Core>,
    dp: Mutex<DpWatcher>,
    events: EventBus,
}

enum Published {
    /// A new generation.
    New(u64),
    /// Equal to the published one.
    Same(u64),
    /// ArenaFull: retried later.
    Pending(String),
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves consistent data (every change is
    // made on a copy and committed by assignment): keep going.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Manager {
    /// Opens the tables region (attach, or create) for `cfg` and restores the
    /// operator overrides. Publishes nothing yet: see [`Manager::publish_now`].
    pub fn new(
        cfg: Config,
        text: String,
        origin: String,
        opts: Options,
    ) -> Result<(Arc<Manager>, Opened), StartError> {
        let mut dp = DpWatcher::new(opts.paths.state.clone(), opts.liveness_grace);
        let (snap, _) = dp.sample();
        let (publisher, opened) = Publisher::open(&opts.paths.tables, &cfg, &snap)?;
        let mut store = Store::new(cfg, text, origin, opts.paths.overrides.clone());
        if let Some(g) = publisher.published() {
            seed_health(&mut store, g);
        }
        let m = Manager {
            opts,
            core: Mutex::new(Core {
                store,
                publisher,
                pending: None,
                last_error: None,
            }),
            dp: Mutex::new(dp),
            events: EventBus::new(),
        };
        Ok((Arc::new(m), opened))
    }

    /// Publishes the running config now if it differs from the published
    /// generation (after a restart with the same config and overrides it does
    /// not: the generation stays). Returns the published generation.
    pub fn publish_now(&self, cause: &str) -> Result<Outcome, PublishError> {
        let mut core = lock(&self.core);
        let next = core.store.clone();
        match self.publish(&mut core, &next, cause)? {
            Published::New(g) => Ok(Outcome {
                generation: g,
                changed: true,
                pending: None,
            }),
            Published::Same(g) => Ok(Outcome {
                generation: g,
                changed: false,
                pending: None,
            }),
            Published::Pending(why) => Ok(Outcome {
                generation: 0,
                changed: true,
                pending: Some(why),
            }),
        }
    }

    /// The options.
    pub fn options(&self) -> &Options {
        &self.opts
    }

    /// Subscribes to events.
    pub fn subscribe(&self) -> broadcast::Receiver<pb::Event> {
        self.events.subscribe()
    }

    /// Emits an event.
    pub fn emit(&self, kind: pb::event::Kind) {
        self.events.emit(kind)
    }

    /// The running config.
    pub fn config(&self) -> Config {
        lock(&self.core).store.config().clone()
    }

    /// The health verdicts in force (the health checker starts from them).
    pub fn health_verdicts(&self) -> Vec<(BackendKey, HealthVerdict)> {
        lock(&self.core)
            .store
            .health_verdicts()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// The published generation.
    pub fn published_generation(&self) -> u64 {
        lock(&self.core).publisher.published_generation()
    }

    /// Looks at the dataplane now; emits what changed.
    pub fn sample_dp(&self) -> DpSnap {
        let (snap, events) = lock(&self.dp).sample();
        for e in events {
            self.events.emit(e);
        }
        snap
    }

    /// Builds `next` and publishes it. On success (or pending) the caller
    /// commits `next`.
    fn publish(
        &self,
        core: &mut Core,
        next: &Store,
        cause: &str,
    ) -> Result<Published, PublishError> {
        let gen = core.publisher.build(next)?;
        let snap = self.sample_dp();
        match core.publisher.publish(next.config(), gen, &snap) {
            Ok(Some(stats)) => {
                core.pending = None;
                core.last_error = None;
                tracing::info!(
                    generation = stats.generation,
                    cause,
                    blocks_written = stats.blocks_written,
                    bytes_written = stats.bytes_written,
                    blocks_reclaimed = stats.blocks_reclaimed,
                    arena_free = stats.arena_free,
                    "tables published"
                );
                self.events.emit(pb::event::Kind::Published(pb::Published {
                    generation: stats.generation,
                    cause: cause.to_string(),
                    blocks_written: stats.blocks_written,
                    bytes_written: stats.bytes_written,
                    arena_free_bytes: stats.arena_free,
                }));
                Ok(Published::New(stats.generation))
            }
            Ok(None) => {
                core.pending = None;
                Ok(Published::Same(core.publisher.published_generation()))
            }
            Err(e) => {
                let retry = e.is_retryable();
                let msg = e.to_string();
                core.last_error = Some(msg.clone());
                self.events
                    .emit(pb::event::Kind::PublishFailed(pb::PublishFailed {
                        error: msg.clone(),
                        will_retry: retry,
                    }));
                if retry {
                    tracing::warn!(error = %msg, cause, "publish deferred: retrying when the workers pass older generations");
                    core.pending = Some(msg.clone());
                    Ok(Published::Pending(msg))
                } else {
                    tracing::error!(error = %msg, cause, "publish failed");
                    Err(e)
                }
            }
        }
    }

    fn outcome(p: Published, changed: bool) -> Outcome {
        match p {
            Published::New(g) => Outcome {
                generation: g,
                changed: true,
                pending: None,
            },
            Published::Same(g) => Outcome {
                generation: g,
                changed,
                pending: None,
            },
            Published::Pending(why) => Outcome {
                generation: 0,
                changed,
                pending: Some(why),
            },
        }
    }

    /// ApplyConfig: validates `text` (errors name `origin`), checks that only
    /// what may change at run time changes, then builds, publishes and
    /// commits it atomically.
    pub fn apply_config(
        &self,
        text: &str,
        origin: &str,
        dry_run: bool,
    ) -> Result<Outcome, ApplyError> {
        let parsed = Config::from_toml_str(text, origin).map(|mut c| {
            let dir = self.opts.config_path.as_deref().and_then(Path::parent);
            resolve_tls_paths(&mut c, dir);
            c
        });
        match parsed {
            Ok(cfg) => self.apply_parsed(cfg, text.to_string(), origin, dry_run),
            Err(e) => Err(self.rejected(origin, e.into())),
        }
    }

    /// SIGHUP: re-reads the config file and applies it.
    pub fn reload_file(&self) -> Result<Outcome, ApplyError> {
        let Some(path) = self.opts.config_path.clone() else {
            return Err(ApplyError::NoFile);
        };
        let origin = path.display().to_string();
        match load_config_file(&path) {
            Ok((cfg, text)) => self.apply_parsed(cfg, text, &origin, false),
            Err(e) => Err(self.rejected(&origin, e.into())),
        }
    }

    fn rejected(&self, origin: &str, e: ApplyError) -> ApplyError {
        tracing::error!(origin, error = %e, "config rejected; the running config stays");
        self.events
            .emit(pb::event::Kind::ConfigRejected(pb::ConfigRejected {
                origin: origin.to_string(),
                error: e.to_string(),
            }));
        e
    }

    fn apply_parsed(
        &self,
        cfg: Config,
        text: String,
        origin: &str,
        dry_run: bool,
    ) -> Result<Outcome, ApplyError> {
        let mut core = lock(&self.core);
        if let Err(section) = check_reloadable(core.store.config(), &cfg) {
            drop(core);
            return Err(self.rejected(origin, ApplyError::NotReloadable { section }));
        }
        let changed = *core.store.config() != cfg;
        if dry_run {
            return Ok(Outcome {
                generation: 0,
                changed,
                pending: None,
            });
        }
        let mut next = core.store.clone();
        let pruned = next.replace_config(cfg, text, origin.to_string());
        let p = match self.publish(&mut core, &next, "config") {
            Ok(p) => p,
            Err(e) => {
                drop(core);
                return Err(self.rejected(origin, e.into()));
            }
        };
        core.store = next;
        core.store.save();
        for k in pruned {
            tracing::info!(vip = %k.vip, backend = %k.backend, "operator override dropped: the backend is no longer configured");
        }
        let out = Self::outcome(p, changed);
        tracing::info!(
            origin,
            generation = out.generation,
            changed,
            "config applied"
        );
        self.events
            .emit(pb::event::Kind::ConfigApplied(pb::ConfigApplied {
                origin: origin.to_string(),
                generation: out.generation,
                changed,
            }));
        Ok(out)
    }

    /// SetBackend: an operator weight, drain or undrain of one backend.
    pub fn set_backend(
        &self,
        vip: &str,
        backend: &str,
        action: BackendAction,
        note: &str,
    ) -> Result<(Outcome, pb::BackendStatus), SetError> {
        let addr: SocketAddr = backend
            .trim()
            .parse()
            .map_err(|_| SetError::BadAddress(backend.to_string()))?;
        let key = BackendKey::new(vip, addr);
        let mut core = lock(&self.core);
        let mut next = core.store.clone();
        let changed = next.set_backend(&key, action, note)?;
        let p = self.publish(&mut core, &next, "backend")?;
        core.store = next;
        core.store.save();
        let (vi, bi) = core.store.find(&key).expect("checked by set_backend");
        let share = ring_share(core.publisher.published(), vip);
        let status = backend_status(&core.store, &share, vi, bi);
        if changed {
            tracing::info!(vip, backend = %addr, ?action, state = ?status.state, weight = status.weight, "backend changed by the operator");
            self.events
                .emit(pb::event::Kind::BackendChanged(pb::BackendChanged {
                    vip: vip.to_string(),
                    backend: Some(status.clone()),
                    cause: "operator".into(),
                }));
        }
        Ok((Self::outcome(p, changed), status))
    }

    /// The health checker's hook: records (or clears) a verdict on a backend
    /// and republishes if its effective state changed. Returns the outcome,
    /// or `None` for an unknown backend or no change.
    pub fn set_health(
        &self,
        key: &BackendKey,
        verdict: Option<HealthVerdict>,
    ) -> Result<Option<Outcome>, PublishError> {
        let mut core = lock(&self.core);
        let mut next = core.store.clone();
        if !next.set_health(key, verdict) {
            core.store = next;
            return Ok(None);
        }
        let p = self.publish(&mut core, &next, "health")?;
        core.store = next;
        if let Some((vi, bi)) = core.store.find(key) {
            let share = ring_share(core.publisher.published(), &key.vip);
            let status = backend_status(&core.store, &share, vi, bi);
            self.events
                .emit(pb::event::Kind::BackendChanged(pb::BackendChanged {
                    vip: key.vip.clone(),
                    backend: Some(status),
                    cause: "health".into(),
                }));
        }
        Ok(Some(Self::outcome(p, true)))
    }

    /// The health checker's hook for several verdicts at once (see
    /// [`Manager::set_health`]): one table generation for the whole batch.
    /// Returns the outcome, or `None` if no backend's effective state changed.
    pub fn set_health_batch(
        &self,
        batch: Vec<(BackendKey, Option<HealthVerdict>)>,
    ) -> Result<Option<Outcome>, PublishError> {
        let mut core = lock(&self.core);
        let mut next = core.store.clone();
        let mut changed = Vec::new();
        for (key, verdict) in batch {
            if next.set_health(&key, verdict) {
                changed.push(key);
            }
        }
        if changed.is_empty() {
            core.store = next;
            return Ok(None);
        }
        let p = self.publish(&mut core, &next, "health")?;
        core.store = next;
        for key in &changed {
            if let Some((vi, bi)) = core.store.find(key) {
                let share = ring_share(core.publisher.published(), &key.vip);
                let status = backend_status(&core.store, &share, vi, bi);
                self.events
                    .emit(pb::event::Kind::BackendChanged(pb::BackendChanged {
                        vip: key.vip.clone(),
                        backend: Some(status),
                        cause: "health".into(),
                    }));
            }
        }
        Ok(Some(Self::outcome(p, true)))
    }

    /// Periodic work: look at the dataplane (events), retry a pending publish.
    pub fn tick(&self) {
        self.sample_dp();
        let mut core = lock(&self.core);
        if core.pending.is_some() {
            let next = core.store.clone();
            let _ = self.publish(&mut core, &next, "retry");
        }
    }

    /// GetConfig.
    pub fn get_config(&self) -> pb::GetConfigResponse {
        let core = lock(&self.core);
        pb::GetConfigResponse {
            config_toml: core.store.text().to_string(),
            origin: core.store.origin().to_string(),
            applied_unix_ms: core.store.applied_unix_ms(),
            generation: core.publisher.published_generation(),
        }
    }

    /// GetStatus.
    pub fn status(&self) -> pb::GetStatusResponse {
        let snap = self.sample_dp();
        let core = lock(&self.core);
        let cfg = core.store.config();
        let (arena, free) = core.publisher.arena();
        let published = core.publisher.published();
        let vips = cfg
            .vips
            .iter()
            .enumerate()
            .map(|(vi, v)| {
                let flags = published
                    .and_then(|g| g.vips.iter().find(|t| t.name == v.name))
                    .map_or(VipFlags::EMPTY, |t| t.flags);
                let share = ring_share(published, &v.name);
                pb::VipStatus {
                    name: v.name.clone(),
                    address: SocketAddr::new(v.address, v.port).to_string(),
                    protocol: v.protocol.to_string(),
                    mode: v.mode.to_string(),
                    fail_open: flags.contains(VipFlags::FAIL_OPEN),
                    zone_local: flags.contains(VipFlags::ZONE_LOCAL),
                    backends: (0..v.backends.len())
                        .map(|bi| backend_status(&core.store, &share, vi, bi))
                        .collect(),
                }
            })
            .collect();
        pb::GetStatusResponse {
            instance: cfg.instance.clone(),
            zone: cfg.zone.clone().unwrap_or_default(),
            publisher: Some(pb::PublisherStatus {
                tables_path: core.publisher.path().display().to_string(),
                published_generation: core.publisher.published_generation(),
                arena_bytes: arena,
                arena_free_bytes: free,
                pending: core.pending.clone().unwrap_or_default(),
                last_error: core.last_error.clone().unwrap_or_default(),
                config_origin: core.store.origin().to_string(),
                config_applied_unix_ms: core.store.applied_unix_ms(),
            }),
            dataplane: Some(dataplane_status(&snap)),
            vips,
        }
    }

    /// GetStats.
    pub fn stats(&self) -> pb::GetStatsResponse {
        let cfg = self.config();
        let keys: StatKeys = cfg
            .vips
            .iter()
            .map(|v| {
                let addrs: Vec<_> = v.backends.iter().map(|b| (b.address, b.port)).collect();
                (vip_stat_key(&v.name), backend_ids(&v.name, &addrs))
            })
            .collect();
        let s = read_stats(&self.opts.paths.state, &keys);
        let counters = conf::counters::Counter::ALL;
        let totals = (0..counters.len())
            .map(|i| {
                s.workers
                    .iter()
                    .map(|(_, v)| v[i])
                    .fold(0u64, u64::wrapping_add)
            })
            .collect();
        let flow = |a: [u64; 4]| pb::FlowStats {
            packets: a[0],
            bytes: a[1],
            new_connections: a[2],
            active_connections: a[3],
        };
        pb::GetStatsResponse {
            dataplane_present: s.present,
            counters: counters
                .iter()
                .map(|c| pb::CounterInfo {
                    name: c.name().to_string(),
                    help: c.help().to_string(),
                    drop: c.is_drop(),
                })
                .collect(),
            workers: s
                .workers
                .iter()
                .enumerate()
                .map(|(i, (lcore, values))| pb::WorkerCounters {
                    index: i as u32,
                    lcore: *lcore,
                    values: values.clone(),
                })
                .collect(),
            totals,
            vips: cfg
                .vips
                .iter()
                .zip(&s.vips)
                .zip(&keys)
                .map(|((v, (vs, bs)), (_, ids))| pb::VipStats {
                    name: v.name.clone(),
                    stats: Some(flow(*vs)),
                    backends: v
                        .backends
                        .iter()
                        .zip(bs)
                        .zip(ids)
                        .map(|((b, st), id)| pb::BackendStats {
                            address: SocketAddr::new(b.address, b.port).to_string(),
                            id: *id,
                            stats: Some(flow(*st)),
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

/// Why a backend is down right after a restart of border-mgmt.
pub const KEPT_ACROSS_RESTART: &str =
    "down (no data: kept from the published tables across a restart of border-mgmt)";

/// Silence is not a verdict, across restarts too: backends of checked VIPs
/// that the published tables have down stay down until fresh probes decide
/// (docs/health.md); otherwise a restart would put them back in the ring.
fn seed_health(store: &mut Store, g: &Generation) {
    for t in &g.vips {
        let checked = store
            .config()
            .vip(&t.name)
            .is_some_and(|v| v.health.is_some());
        if !checked {
            continue;
        }
        for b in t.backends.iter().filter(|b| b.state == BackendState::Down) {
            let key = BackendKey::new(&t.name, SocketAddr::new(b.addr, b.port));
            store.set_health(
                &key,
                Some(HealthVerdict {
                    up: false,
                    reason: KEPT_ACROSS_RESTART.to_string(),
                    since_unix_ms: now_unix_ms(),
                    weight: None,
                }),
            );
        }
    }
}

/// The proto enum of a table state.
pub fn pb_state(s: BackendState) -> pb::BackendState {
    match s {
        BackendState::Up => pb::BackendState::Up,
        BackendState::Down => pb::BackendState::Down,
        BackendState::Draining => pb::BackendState::Draining,
    }
}

/// Ring slots per backend id of VIP `name` in the published tables.
fn ring_share(published: Option<&Generation>, name: &str) -> HashMap<u32, u32> {
    let mut out = HashMap::new();
    if let Some(t) = published.and_then(|g| g.vips.iter().find(|t| t.name == name)) {
        let mut counts = vec![0u32; t.backends.len()];
        for &r in &t.ring {
            if let Some(c) = counts.get_mut(r as usize) {
                *c += 1;
            }
        }
        for (b, c) in t.backends.iter().zip(counts) {
            out.insert(b.id, c);
        }
    }
    out
}

fn backend_status(
    store: &Store,
    share: &HashMap<u32, u32>,
    vi: usize,
    bi: usize,
) -> pb::BackendStatus {
    let cfg = store.config();
    let v = &cfg.vips[vi];
    let b = &v.backends[bi];
    let e = store.effective(vi, bi).expect("indices from the config");
    let addrs: Vec<_> = v.backends.iter().map(|b| (b.address, b.port)).collect();
    let id = backend_ids(&v.name, &addrs)[bi];
    pb::BackendStatus {
        address: SocketAddr::new(b.address, b.port).to_string(),
        id,
        state: pb_state(e.state) as i32,
        reason: e.reason,
        weight: e.weight,
        config_weight: e.config_weight,
        weight_overridden: e.weight_overridden,
        drained: e.drained,
        ring_slots: share.get(&id).copied().unwrap_or(0),
        zone: b.zone.clone().unwrap_or_default(),
    }
}

fn dataplane_status(s: &DpSnap) -> pb::DataplaneStatus {
    pb::DataplaneStatus {
        present: s.present,
        pid: s.pid,
        pid_alive: s.pid_alive,
        run_state: s.run_state_name(),
        workers: s
            .workers
            .iter()
            .enumerate()
            .map(|(i, w)| pb::WorkerStatus {
                index: i as u32,
                lcore: w.lcore,
                applied_generation: w.applied_generation,
                alive: w.alive,
                heartbeat: w.heartbeat,
                heartbeat_age_ms: w.heartbeat_age.as_millis() as u64,
            })
            .collect(),
        problem: s.problem.clone().unwrap_or_default(),
    }
}
