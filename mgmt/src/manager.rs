//! The manager: the config store, the publisher and the dataplane watcher
//! behind one lock, and the events they produce. Every change (a config
//! apply, an operator override, a health verdict) is made on a copy of the
//! store, built and published, and only then committed: a change that
//! cannot be published leaves the running config as it was. An operator's
//! change (config, override) is also saved around its publish
//! ([`crate::intent`]): one that cannot be saved changes nothing either.
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
use conf::{Config, ConfigError, ConfigText};
use tokio::sync::broadcast;

use crate::dp::{read_stats, DpWatcher, StatKeys};
use crate::edit::{edited, ConfigEdit, EditError};
use crate::intent::{Intent, IntentError, IntentFile, Staged};
pub use crate::model::ChangeOutcome;
use crate::model::{
    BackendStats, BackendStatus, DpSnap, Event, EventKind, PublisherStatus, RunningConfig, Stats,
    Status, VipStats, VipStatus, WorkerCounters,
};
use crate::publisher::{Opened, PublishError, Publisher};
use crate::store::{
    check_reloadable, load_config_file, now_unix_ms, resolve_tls_paths, tls_paths_to_resolve,
    BackendAction, BackendKey, HealthVerdict, SetBackendError, Store,
};

/// Where an instance's files are. Injectable for tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Paths {
    /// The tables region (written by border-mgmt).
    pub tables: PathBuf,
    /// The state region (written by border-dp).
    pub state: PathBuf,
    /// The records region (written by border-dp, drained by border-mgmt
    /// with `[records]`).
    pub records: PathBuf,
    /// The connections region (made by border-dp; border-mgmt asks its
    /// workers for walks of their tables there).
    pub conns: PathBuf,
    /// The state directory: the applied config and the operator overrides,
    /// kept across restarts and reboots ([`crate::intent`]); `None`: kept
    /// in memory only.
    pub state_dir: Option<PathBuf>,
    /// Drains and weights an older border-mgmt kept on tmpfs, taken when
    /// the state directory has none yet ([`crate::intent::start`]).
    pub legacy_overrides: Option<PathBuf>,
}

impl Paths {
    /// The standard paths of `instance`: `/dev/shm/border-<instance>-tables`,
    /// `/dev/shm/border-<instance>-state`, `/var/lib/border/<instance>/`.
    pub fn for_instance(instance: &str) -> Paths {
        Paths {
            tables: tables_path(instance),
            state: state_path(instance),
            records: conf::records::records_path(instance),
            conns: conf::conns::conns_path(instance),
            state_dir: Some(crate::intent::default_state_dir(instance)),
            legacy_overrides: Some(crate::intent::legacy_overrides_path(instance)),
        }
    }

    /// Every file under `dir` (tests).
    pub fn in_dir(dir: &Path) -> Paths {
        Paths {
            tables: dir.join("tables"),
            state: dir.join("state"),
            records: dir.join("records"),
            conns: dir.join("conns"),
            state_dir: Some(dir.join("intent")),
            legacy_overrides: None,
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
    /// Start from the config given to [`Manager::new`] even when the
    /// state directory holds a saved one (`--from-config-file`).
    pub from_config_file: bool,
}

impl Options {
    /// Defaults for `paths`: a grace of 3 s, no config file.
    pub fn new(paths: Paths) -> Options {
        Options {
            paths,
            liveness_grace: Duration::from_secs(3),
            config_path: None,
            from_config_file: false,
        }
    }
}

/// Events to every subscriber; each gets a sequence number.
#[derive(Debug)]
pub struct EventBus {
    tx: broadcast::Sender<Event>,
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
    pub fn emit(&self, kind: EventKind) {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let _ = self.tx.send(Event {
            seq,
            unix_ms: now_unix_ms(),
            kind,
        });
    }

    /// A receiver of every event from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
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
    /// The saved intent.
    #[error("{0}")]
    Intent(#[from] crate::intent::StartError),
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
    /// A full-NAT port range meets the kernel's ephemeral ports.
    #[error("{0}")]
    LocalPorts(#[from] conf::ephemeral::LocalPortsError),
    /// No config file to reload.
    #[error("border-mgmt was not started with a config file")]
    NoFile,
    /// Valid, but the tables could not be published; nothing changed.
    #[error("cannot publish the tables: {0}")]
    Publish(#[from] PublishError),
    /// Valid, but it could not be saved; nothing changed.
    #[error("{0}; nothing changed")]
    Save(#[from] IntentError),
    /// A change made to the running config found another config running
    /// by the time it was applied (and kept finding one); nothing changed.
    #[error("the running config changed while this change was made; nothing changed, try again")]
    Raced,
}

/// Why one change (AddBackend, RemoveBackend, AddVip, RemoveVip) was not
/// applied.
#[derive(Debug, thiserror::Error)]
pub enum EditConfigError {
    /// It cannot be written into the running config's text.
    #[error("{0}")]
    Edit(#[from] EditError),
    /// The config with the change is refused as an ApplyConfig of it would be.
    #[error("{0}")]
    Apply(#[from] ApplyError),
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
    /// Could not be saved; nothing changed.
    #[error("{0}; nothing changed")]
    Save(#[from] IntentError),
}

#[derive(Debug)]
struct Core {
    store: Store,
    publisher: Publisher,
    pending: Option<String>,
    last_error: Option<String>,
    /// The intent file the running config was restored from at start,
    /// until the next apply.
    restored_from: Option<PathBuf>,
}

/// The management process's state.
#[derive(Debug)]
pub struct Manager {
    opts: Options,
    /// Where the operator's intent is saved (`None`: not saved).
    intent: Option<IntentFile>,
    core: Mutex<Core>,
    /// The last config text that validated (paths as written), so that the
    /// next one parses only the VIP entry that changed. A parse cache, not
    /// the running config: ApplyConfig with `dry_run`, or one refused
    /// later as not reloadable, may leave a text here that never ran.
    parsed: Mutex<Option<ConfigText>>,
    dp: Mutex<DpWatcher>,
    events: EventBus,
    /// BGP announcements (docs/bgp.md): maintenance switch and view.
    bgp: Arc<crate::bgp::BgpShared>,
    /// The records drain's counters; `None` without `[records]`.
    records: Option<Arc<crate::records::RecordsStats>>,
}

enum Publication {
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
    /// Opens the tables region (attach, or create) and chooses what runs:
    /// the config and operator overrides saved in the state directory, or
    /// `cfg` if none were saved or `opts.from_config_file` says so (see
    /// [`crate::intent::start`]). Publishes nothing yet: see
    /// [`Manager::publish_now`].
    pub fn new(
        cfg: Config,
        text: String,
        origin: String,
        opts: Options,
    ) -> Result<(Arc<Manager>, Opened), StartError> {
        let intent = opts.paths.state_dir.as_deref().map(IntentFile::in_dir);
        let (mut store, restored_from) = match &intent {
            Some(file) => {
                let tls_dir = opts.config_path.as_deref().and_then(Path::parent);
                let start = crate::intent::start(
                    file,
                    (cfg, text, origin),
                    opts.from_config_file,
                    tls_dir,
                    opts.paths.legacy_overrides.as_deref(),
                )?;
                (start.store, start.restored_from)
            }
            None => (Store::new(cfg, text, origin), None),
        };
        if let Some(p) = &restored_from {
            tracing::info!(origin = store.origin(), applied_unix_ms = store.applied_unix_ms(), path = %p.display(), "running the last applied config");
        }
        let mut dp = DpWatcher::new(opts.paths.state.clone(), opts.liveness_grace);
        let (snap, _) = dp.sample();
        let (publisher, opened) = Publisher::open(&opts.paths.tables, store.config(), &snap)?;
        // Parsed once more so that the first ApplyConfig of a large config
        // is as fast as the next ones.
        let parsed = ConfigText::parse(store.text(), store.origin()).ok();
        let cfg_has_bgp = store.config().mgmt.bgp.is_some();
        let records = store
            .config()
            .records
            .as_ref()
            .map(|_| Arc::new(crate::records::RecordsStats::default()));
        if let Some(g) = publisher.published() {
            seed_health(&mut store, g);
        }
        let m = Manager {
            opts,
            intent,
            core: Mutex::new(Core {
                store,
                publisher,
                pending: None,
                last_error: None,
                restored_from,
            }),
            parsed: Mutex::new(parsed),
            dp: Mutex::new(dp),
            events: EventBus::new(),
            bgp: Arc::new(crate::bgp::BgpShared::new(cfg_has_bgp)),
            records,
        };
        Ok((Arc::new(m), opened))
    }

    /// Publishes the running config now if it differs from the published
    /// generation (after a restart with the same config and overrides it does
    /// not: the generation stays). Returns the published generation.
    pub fn publish_now(&self, cause: &str) -> Result<ChangeOutcome, PublishError> {
        let mut core = lock(&self.core);
        match self.publish(&mut core, None, None, cause)? {
            Publication::New(g) => Ok(ChangeOutcome {
                generation: g,
                changed: true,
                pending: None,
            }),
            Publication::Same(g) => Ok(ChangeOutcome {
                generation: g,
                changed: false,
                pending: None,
            }),
            Publication::Pending(why) => Ok(ChangeOutcome {
                generation: 0,
                changed: true,
                pending: Some(why),
            }),
        }
    }

    /// BGP state shared with its task, the API and the exporter.
    pub fn bgp(&self) -> &Arc<crate::bgp::BgpShared> {
        &self.bgp
    }

    /// The records drain's counters (`None` without `[records]`).
    pub fn records_stats(&self) -> Option<&Arc<crate::records::RecordsStats>> {
        self.records.as_ref()
    }

    /// The options.
    pub fn options(&self) -> &Options {
        &self.opts
    }

    /// Subscribes to events.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }

    /// Emits an event.
    pub fn emit(&self, kind: EventKind) {
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

    /// Builds the generation of `next` (of the running store if `None`)
    /// and publishes it. `changed`: positions of the VIPs whose inputs
    /// (config entry, overrides of their backends) changed since the last
    /// build; only those are looked at (`None`: every VIP). On success (or
    /// pending) the caller commits `next`; on error it takes the change
    /// back (the builder then forgets what it built from it).
    fn publish(
        &self,
        core: &mut Core,
        next: Option<&Store>,
        changed: Option<&[usize]>,
        cause: &str,
    ) -> Result<Publication, PublishError> {
        let Core {
            store,
            publisher,
            pending,
            last_error,
            ..
        } = core;
        let next = next.unwrap_or(store);
        let built = match changed {
            Some(c) => publisher.build_changed(next, c),
            None => publisher.build(next),
        };
        let gen = match built {
            Ok(g) => g,
            Err(e) => {
                publisher.invalidate();
                return Err(e.into());
            }
        };
        let snap = self.sample_dp();
        match publisher.publish(next.config(), gen, &snap) {
            Ok(Some(stats)) => {
                *pending = None;
                *last_error = None;
                let b = publisher.last_build();
                tracing::info!(
                    generation = stats.generation,
                    cause,
                    vips_examined = b.vips_examined,
                    rings_built = b.rings_built,
                    blocks_written = stats.blocks_written,
                    bytes_written = stats.bytes_written,
                    blocks_reclaimed = stats.blocks_reclaimed,
                    arena_free = stats.arena_free,
                    "tables published"
                );
                self.events.emit(EventKind::Published {
                    generation: stats.generation,
                    cause: cause.to_string(),
                    blocks_written: stats.blocks_written,
                    bytes_written: stats.bytes_written,
                    arena_free_bytes: stats.arena_free,
                });
                Ok(Publication::New(stats.generation))
            }
            Ok(None) => {
                *pending = None;
                Ok(Publication::Same(publisher.published_generation()))
            }
            Err(e) => {
                let retry = e.is_retryable();
                let msg = e.to_string();
                *last_error = Some(msg.clone());
                self.events.emit(EventKind::PublishFailed {
                    error: msg.clone(),
                    will_retry: retry,
                });
                if retry {
                    tracing::warn!(error = %msg, cause, "publish deferred: retrying when the workers pass older generations");
                    *pending = Some(msg.clone());
                    Ok(Publication::Pending(msg))
                } else {
                    tracing::error!(error = %msg, cause, "publish failed");
                    publisher.invalidate();
                    Err(e)
                }
            }
        }
    }

    fn outcome(p: Publication, changed: bool) -> ChangeOutcome {
        match p {
            Publication::New(g) => ChangeOutcome {
                generation: g,
                changed: true,
                pending: None,
            },
            Publication::Same(g) => ChangeOutcome {
                generation: g,
                changed,
                pending: None,
            },
            Publication::Pending(why) => ChangeOutcome {
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
    ) -> Result<ChangeOutcome, ApplyError> {
        let dir = self.opts.config_path.as_deref().and_then(Path::parent);
        match self.parse(text, origin, dir) {
            Ok((cfg, text)) => self.apply_parsed(cfg, text, origin, dry_run),
            Err(e) => Err(self.rejected(origin, e.into())),
        }
    }

    /// One change to the running config (AddBackend, RemoveBackend,
    /// AddVip, RemoveVip): the running text with `edit` made is validated,
    /// published and saved exactly as [`Manager::apply_config`] of it
    /// would be, in one generation. Should another config become the
    /// running one meanwhile, the change is made again on that one.
    pub fn edit_config(
        &self,
        edit: &ConfigEdit,
        origin: &str,
        dry_run: bool,
    ) -> Result<ChangeOutcome, EditConfigError> {
        const TRIES: usize = 4;
        let dir = self.opts.config_path.as_deref().and_then(Path::parent);
        for _ in 0..TRIES {
            let base: Arc<str> = lock(&self.core).store.text().into();
            let text = edited(&base, edit)?;
            let (cfg, text) = match self.parse(&text, origin, dir) {
                Ok(parsed) => parsed,
                Err(e) => return Err(self.rejected(origin, e.into()).into()),
            };
            match self.apply_parsed_over(cfg, text, origin, dry_run, Some(&base)) {
                Err(ApplyError::Raced) => continue,
                Ok(out) => {
                    tracing::info!(
                        origin,
                        ?edit,
                        generation = out.generation,
                        dry_run,
                        "config changed by one edit"
                    );
                    return Ok(out);
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(ApplyError::Raced.into())
    }

    /// SIGHUP: re-reads the config file and applies it.
    pub fn reload_file(&self) -> Result<ChangeOutcome, ApplyError> {
        let Some(path) = self.opts.config_path.clone() else {
            return Err(ApplyError::NoFile);
        };
        let origin = path.display().to_string();
        let loaded = match std::fs::read_to_string(&path) {
            Ok(text) => self.parse(&text, &origin, path.parent()),
            // Unreadable or not UTF-8: said the way the file loader says it.
            Err(_) => load_config_file(&path).map(|(c, t)| (Arc::new(c), t.into())),
        };
        match loaded {
            Ok((cfg, text)) => self.apply_parsed(cfg, text, &origin, false),
            Err(e) => Err(self.rejected(&origin, e.into())),
        }
    }

    /// Validates `text` (reusing the last validated text's parse where it
    /// is unchanged) and resolves relative TLS paths against `dir`. The
    /// config and text are shared with the parse cache, not copied.
    fn parse(
        &self,
        text: &str,
        origin: &str,
        dir: Option<&Path>,
    ) -> Result<(Arc<Config>, Arc<str>), ConfigError> {
        let mut last = lock(&self.parsed);
        let next = match last.as_ref() {
            Some(prev) => prev.reparse(text, origin)?,
            None => ConfigText::parse(text, origin)?,
        };
        if let Some(vips) = next.reparsed() {
            tracing::debug!(
                origin,
                ?vips,
                "config validated: only these VIP entries were parsed"
            );
        }
        let (mut cfg, text) = (next.shared_config(), next.shared_text());
        *last = Some(next);
        drop(last);
        if tls_paths_to_resolve(&cfg, dir) {
            resolve_tls_paths(Arc::make_mut(&mut cfg), dir);
        }
        Ok((cfg, text))
    }

    fn rejected(&self, origin: &str, e: ApplyError) -> ApplyError {
        tracing::error!(origin, error = %e, "config rejected; the running config stays");
        self.events.emit(EventKind::ConfigRejected {
            origin: origin.to_string(),
            error: e.to_string(),
        });
        e
    }

    fn apply_parsed(
        &self,
        cfg: Arc<Config>,
        text: Arc<str>,
        origin: &str,
        dry_run: bool,
    ) -> Result<ChangeOutcome, ApplyError> {
        self.apply_parsed_over(cfg, text, origin, dry_run, None)
    }

    /// [`Manager::apply_parsed`]; with `base`, only while the running
    /// config's text is still `base` (else [`ApplyError::Raced`], nothing
    /// changed).
    fn apply_parsed_over(
        &self,
        cfg: Arc<Config>,
        text: Arc<str>,
        origin: &str,
        dry_run: bool,
        base: Option<&str>,
    ) -> Result<ChangeOutcome, ApplyError> {
        if let Err(e) = conf::ephemeral::check_local_ports_here(&cfg) {
            return Err(self.rejected(origin, e.into()));
        }
        let mut core = lock(&self.core);
        if base.is_some_and(|b| b != core.store.text()) {
            return Err(ApplyError::Raced);
        }
        if let Err(section) = check_reloadable(core.store.config(), &cfg) {
            drop(core);
            return Err(self.rejected(origin, ApplyError::NotReloadable { section }));
        }
        let changed = *core.store.config() != *cfg;
        if dry_run {
            return Ok(ChangeOutcome {
                generation: 0,
                changed,
                pending: None,
            });
        }
        // Only the VIPs whose config entry differs (or that are new) are
        // built again: the overrides of the others' backends stay as they are.
        let vips = changed_vips(core.store.config(), &cfg);
        let mut next = core.store.clone();
        let pruned = next.replace_config(cfg, text, origin.to_string());
        let staged = match self.stage(&next) {
            Ok(s) => s,
            Err(e) => {
                drop(core);
                return Err(self.rejected(origin, e.into()));
            }
        };
        let p = match self.publish(&mut core, Some(&next), Some(&vips), "config") {
            Ok(p) => p,
            Err(e) => {
                drop(core);
                return Err(self.rejected(origin, e.into()));
            }
        };
        if let Err(e) = self.commit(&mut core, staged) {
            drop(core);
            return Err(self.rejected(origin, e.into()));
        }
        core.store = next;
        core.restored_from = None;
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
        self.events.emit(EventKind::ConfigApplied {
            origin: origin.to_string(),
            generation: out.generation,
            changed,
        });
        Ok(out)
    }

    /// SetBackend: an operator weight, drain or undrain of one backend.
    pub fn set_backend(
        &self,
        vip: &str,
        backend: &str,
        action: BackendAction,
        note: &str,
    ) -> Result<(ChangeOutcome, BackendStatus), SetError> {
        let addr: SocketAddr = backend
            .trim()
            .parse()
            .map_err(|_| SetError::BadAddress(backend.to_string()))?;
        let key = BackendKey::new(vip, addr);
        let mut core = lock(&self.core);
        // Changed in place (nothing copied), taken back if it cannot be
        // published; only this backend's VIP is built again.
        let undo = core.store.undo_point(&key);
        let changed = core.store.set_backend(&key, action, note)?;
        let (vi, _) = core.store.find(&key).expect("checked by set_backend");
        let staged = match self.stage(&core.store) {
            Ok(s) => s,
            Err(e) => {
                core.store.undo(undo);
                return Err(e.into());
            }
        };
        let p = match self.publish(&mut core, None, Some(&[vi]), "backend") {
            Ok(p) => p,
            Err(e) => {
                core.store.undo(undo);
                return Err(e.into());
            }
        };
        if let Some(Err(e)) = staged.map(Staged::commit) {
            tracing::error!(error = %e, "change taken back: it cannot be saved");
            core.store.undo(undo);
            self.republish_running(&mut core);
            return Err(e.into());
        }
        let status = self
            .backend_after(&core, &key, changed.then_some("operator"))
            .expect("checked by set_backend");
        if changed {
            tracing::info!(vip, backend = %addr, ?action, state = ?status.state, weight = status.weight, "backend changed by the operator");
        }
        Ok((Self::outcome(p, changed), status))
    }

    /// Writes the intent of `next` under a temporary name (`None` when
    /// intent is not saved): what can fail for want of space fails here,
    /// before anything is published.
    fn stage(&self, next: &Store) -> Result<Option<Staged>, IntentError> {
        match &self.intent {
            Some(f) => f.stage(&Intent::of(next)).map(Some).inspect_err(|e| {
                tracing::error!(error = %e, "change refused: it cannot be saved");
            }),
            None => Ok(None),
        }
    }

    /// Makes a staged intent the saved one, after the publish of a new
    /// store that is not yet the running one. If that fails the publish is
    /// taken back: the running store is published again whole.
    fn commit(&self, core: &mut Core, staged: Option<Staged>) -> Result<(), IntentError> {
        let Some(staged) = staged else {
            return Ok(());
        };
        staged.commit().inspect_err(|e| {
            tracing::error!(error = %e, "change taken back: it cannot be saved");
            self.republish_running(core);
        })
    }

    /// Publishes the running store again, built from scratch (after a
    /// change that was published but could not be saved).
    fn republish_running(&self, core: &mut Core) {
        core.publisher.invalidate();
        if let Err(e) = self.publish(core, None, None, "rollback") {
            tracing::error!(error = %e, "the running config could not be published again");
        }
    }

    /// Backend `key` as published now (`None` if not configured); when
    /// `changed_by` names a cause, announced as changed by it.
    fn backend_after(
        &self,
        core: &Core,
        key: &BackendKey,
        changed_by: Option<&'static str>,
    ) -> Option<BackendStatus> {
        let (vi, bi) = core.store.find(key)?;
        let share = ring_share(core.publisher.published(), &core.store, vi);
        let status = backend_status(&core.store, &share, vi, bi);
        if let Some(cause) = changed_by {
            self.events.emit(EventKind::BackendChanged {
                vip: key.vip.clone(),
                backend: status.clone(),
                cause,
            });
        }
        Some(status)
    }

    /// The health checker's hook: records (or clears) a verdict on a backend
    /// and republishes if its effective state changed. Returns the outcome,
    /// or `None` for an unknown backend or no change.
    pub fn set_health(
        &self,
        key: &BackendKey,
        verdict: Option<HealthVerdict>,
    ) -> Result<Option<ChangeOutcome>, PublishError> {
        self.set_health_batch(vec![(key.clone(), verdict)])
    }

    /// The health checker's hook for several verdicts at once (see
    /// [`Manager::set_health`]): one table generation for the whole batch.
    /// Returns the outcome, or `None` if no backend's effective state changed.
    pub fn set_health_batch(
        &self,
        batch: Vec<(BackendKey, Option<HealthVerdict>)>,
    ) -> Result<Option<ChangeOutcome>, PublishError> {
        let mut core = lock(&self.core);
        let mut changed = Vec::new();
        let mut vips = Vec::new();
        let mut undo = Vec::with_capacity(batch.len());
        for (key, verdict) in batch {
            undo.push(core.store.undo_point(&key));
            if core.store.set_health(&key, verdict) {
                vips.extend(core.store.find(&key).map(|(vi, _)| vi));
                changed.push(key);
            }
        }
        if changed.is_empty() {
            return Ok(None);
        }
        vips.sort_unstable();
        vips.dedup();
        let p = match self.publish(&mut core, None, Some(&vips), "health") {
            Ok(p) => p,
            Err(e) => {
                for u in undo.into_iter().rev() {
                    core.store.undo(u);
                }
                return Err(e);
            }
        };
        for key in &changed {
            self.backend_after(&core, key, Some("health"));
        }
        Ok(Some(Self::outcome(p, true)))
    }

    /// Periodic work: look at the dataplane (events), retry a pending publish.
    pub fn tick(&self) {
        self.sample_dp();
        let mut core = lock(&self.core);
        if core.pending.is_some() {
            // The last build is the running store's: nothing to look at again.
            let _ = self.publish(&mut core, None, Some(&[]), "retry");
        }
    }

    /// The running config as applied (GetConfig).
    pub fn running_config(&self) -> RunningConfig {
        let core = lock(&self.core);
        RunningConfig {
            text: core.store.text().to_string(),
            origin: core.store.origin().to_string(),
            applied_unix_ms: core.store.applied_unix_ms(),
            generation: core.publisher.published_generation(),
        }
    }

    /// Publisher, dataplane and every VIP and backend (GetStatus).
    pub fn status(&self) -> Status {
        let bgp = crate::bgp::report(self);
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
                let flags =
                    published_vip(published, vi, &v.name).map_or(VipFlags::EMPTY, |t| t.flags);
                let share = ring_share(published, &core.store, vi);
                VipStatus {
                    name: v.name.clone(),
                    address: SocketAddr::new(v.address, v.port),
                    protocol: v.protocol,
                    mode: v.mode,
                    fail_open: flags.contains(VipFlags::FAIL_OPEN),
                    zone_local: flags.contains(VipFlags::ZONE_LOCAL),
                    backends: (0..v.backends.len())
                        .map(|bi| backend_status(&core.store, &share, vi, bi))
                        .collect(),
                }
            })
            .collect();
        Status {
            instance: cfg.instance.clone(),
            zone: cfg.zone.clone(),
            publisher: PublisherStatus {
                tables_path: core.publisher.path().to_path_buf(),
                published_generation: core.publisher.published_generation(),
                arena_bytes: arena,
                arena_free_bytes: free,
                pending: core.pending.clone(),
                last_error: core.last_error.clone(),
                config_origin: core.store.origin().to_string(),
                config_applied_unix_ms: core.store.applied_unix_ms(),
                config_restored_from: core.restored_from.clone(),
                state_dir: self.opts.paths.state_dir.clone(),
            },
            findings: {
                let mut f = crate::findings::local_tuples(
                    &read_stats(&self.opts.paths.state, &StatKeys::new()).workers,
                    cfg.ports.iter().map(|p| p.local_addresses.len()).sum(),
                );
                if snap.present && snap.pid_alive {
                    f.extend(crate::netns_findings::netns(cfg, snap.pid));
                }
                f
            },
            dataplane: snap,
            vips,
            bgp,
            records: self.records.as_ref().map(|r| r.report()),
        }
    }

    /// Counters per worker, flow statistics per VIP and backend (GetStats).
    pub fn stats(&self) -> Stats {
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
        Stats {
            dataplane_present: s.present,
            local_pools: s.local_pools,
            ports: s.ports,
            workers: s
                .workers
                .into_iter()
                .map(|(lcore, values)| WorkerCounters { lcore, values })
                .collect(),
            vips: cfg
                .vips
                .iter()
                .zip(s.vips)
                .zip(&keys)
                .map(|((v, (vs, bs)), (_, ids))| VipStats {
                    name: v.name.clone(),
                    flows: vs.into(),
                    backends: v
                        .backends
                        .iter()
                        .zip(bs)
                        .zip(ids)
                        .map(|((b, st), id)| BackendStats {
                            address: SocketAddr::new(b.address, b.port),
                            id: *id,
                            flows: st.into(),
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

/// Positions of the VIPs of `new` whose config entry differs from `old`'s
/// at the same position (new ones included): the only VIPs whose tables a
/// config change can change, besides a change of `zone`, which the builder
/// sees by itself.
pub fn changed_vips(old: &Config, new: &Config) -> Vec<usize> {
    (0..new.vips.len())
        .filter(|&i| old.vips.get(i) != Some(&new.vips[i]))
        .collect()
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
                    drain: false,
                    weight_pct: None,
                }),
            );
        }
    }
}

/// The published table of the VIP called `name`, which is at position `vi`
/// unless the config changed since.
fn published_vip<'g>(
    published: Option<&'g Generation>,
    vi: usize,
    name: &str,
) -> Option<&'g conf::tables::VipTable> {
    let g = published?;
    match g.vips.get(vi) {
        Some(t) if t.name == name => Some(t),
        _ => g.vips.iter().find(|t| t.name == name).map(|t| &**t),
    }
}

/// The backend ids of config VIP `vi`, and the ring slots per backend id of
/// its published table.
struct Share {
    ids: Vec<u32>,
    slots: HashMap<u32, u32>,
}

fn ring_share(published: Option<&Generation>, store: &Store, vi: usize) -> Share {
    let v = &store.config().vips[vi];
    let addrs: Vec<_> = v.backends.iter().map(|b| (b.address, b.port)).collect();
    let mut slots = HashMap::new();
    if let Some(t) = published_vip(published, vi, &v.name) {
        let mut counts = vec![0u32; t.backends.len()];
        for &r in &t.ring {
            if let Some(c) = counts.get_mut(r as usize) {
                *c += 1;
            }
        }
        for (b, c) in t.backends.iter().zip(counts) {
            slots.insert(b.id, c);
        }
    }
    Share {
        ids: backend_ids(&v.name, &addrs),
        slots,
    }
}

fn backend_status(store: &Store, share: &Share, vi: usize, bi: usize) -> BackendStatus {
    let cfg = store.config();
    let v = &cfg.vips[vi];
    let b = &v.backends[bi];
    let e = store.effective(vi, bi).expect("indices from the config");
    let id = share.ids[bi];
    BackendStatus {
        address: SocketAddr::new(b.address, b.port),
        id,
        state: e.state,
        reason: e.reason,
        weight: e.weight,
        config_weight: e.config_weight,
        weight_overridden: e.weight_overridden,
        drained: e.drained,
        killed: e.killed,
        ring_slots: share.slots.get(&id).copied().unwrap_or(0),
        zone: b.zone.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use conf::tables::{build_generation, TablesReader};
    use std::fmt::Write;

    /// `n` VIPs of 4 backends (2 in zone a, 2 in zone b; VIP 1 has zone
    /// affinity); `weight` sets (VIP, backend 0) weights, `zone` the
    /// appliance's zone.
    fn text(n: u32, weight: Option<(u32, u32)>, zone: &str) -> String {
        let mut c = format!(
            r#"instance = "t"
zone = "{zone}"
[dataplane]
worker_lcores = [1]
flow_hash_key = "000102030405060708090a0b0c0d0e0f"
[[port]]
name = "p0"
devargs = "net_null0"
addresses = ["10.0.0.1/16"]
local_addresses = ["10.0.0.1"]
"#
        );
        for v in 0..n {
            let _ = write!(
                c,
                "[[vip]]\nname = \"v{v}\"\naddress = \"10.0.100.{v}\"\nport = 80\nmaglev_table_size = 1009\nzone_affinity = {}\n",
                v == 1
            );
            for b in 0..4u32 {
                let w = match weight {
                    Some((wv, w)) if wv == v && b == 0 => w,
                    _ => 1,
                };
                let z = if b < 2 { "a" } else { "b" };
                let _ = write!(
                    c,
                    "[[vip.backend]]\naddress = \"10.0.{}.{}\"\nport = 8080\nweight = {w}\nzone = \"{z}\"\n",
                    1 + b,
                    v + 1
                );
            }
        }
        c
    }

    fn manager(dir: &Path, n: u32) -> Arc<Manager> {
        let t = text(n, None, "a");
        let cfg = Config::from_toml_str(&t, "t.toml").unwrap();
        let (m, _) =
            Manager::new(cfg, t, "t.toml".into(), Options::new(Paths::in_dir(dir))).unwrap();
        m.publish_now("start").unwrap();
        m
    }

    /// Block offsets of the published VIPs.
    fn offsets(dir: &Path) -> Vec<u64> {
        let r = TablesReader::open(&Paths::in_dir(dir).tables).unwrap();
        let v = r.view_current().unwrap();
        v.vips().iter().map(|v| v.block_offset()).collect()
    }

    /// Which VIPs got a new block since `before`.
    fn moved(dir: &Path, before: &[u64]) -> Vec<usize> {
        let after = offsets(dir);
        (0..after.len())
            .filter(|&i| before.get(i) != Some(&after[i]))
            .collect()
    }

    /// The published generation is what a build from scratch of the
    /// running config and overrides gives.
    fn assert_same_as_full_build(m: &Manager) {
        let core = lock(&m.core);
        let s = &core.store;
        let full = build_generation(s.config(), &|vi, bi| s.overrides(vi, bi)).unwrap();
        assert_eq!(core.publisher.published(), Some(&full));
    }

    fn last_build(m: &Manager) -> conf::tables::BuildStats {
        lock(&m.core).publisher.last_build()
    }

    fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("border-mgmt-mgr-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// A change to one backend among many VIPs looks at that VIP only,
    /// builds its ring only, and writes its block only: every other VIP's
    /// block keeps its offset. Same for a health verdict and for an
    /// ApplyConfig of the whole config that changes one backend's weight.
    #[test]
    fn a_one_backend_change_rebuilds_one_vip_block() {
        let n = 64;
        let dir = tmpdir("one");
        let m = manager(&dir, n);
        assert!(last_build(&m).full);
        assert_eq!(last_build(&m).vips_examined, n);

        let before = offsets(&dir);
        let (o, _) = m
            .set_backend("v37", "10.0.2.38:8080", BackendAction::Weight(3), "")
            .unwrap();
        assert!(o.changed && o.generation == 2, "{o:?}");
        let b = last_build(&m);
        assert_eq!(
            (b.full, b.vips_examined, b.vips_changed, b.rings_built),
            (false, 1, 1, 1)
        );
        assert_eq!(moved(&dir, &before), vec![37]);
        assert_same_as_full_build(&m);

        // A drain of a drained backend: the VIP is looked at, nothing is
        // published.
        m.set_backend("v5", "10.0.1.6:8080", BackendAction::Drain, "")
            .unwrap();
        let before = offsets(&dir);
        let (o, _) = m
            .set_backend("v5", "10.0.1.6:8080", BackendAction::Drain, "")
            .unwrap();
        assert!(!o.changed && o.generation == 3, "{o:?}");
        assert_eq!(last_build(&m).vips_examined, 1);
        assert!(moved(&dir, &before).is_empty());

        // Health: two verdicts on two VIPs, one generation.
        let before = offsets(&dir);
        let down = |reason: &str| {
            Some(HealthVerdict {
                up: false,
                reason: reason.into(),
                since_unix_ms: 1,
                weight: None,
                drain: false,
                weight_pct: None,
            })
        };
        let o = m
            .set_health_batch(vec![
                (
                    BackendKey::new("v9", "10.0.3.10:8080".parse().unwrap()),
                    down("x"),
                ),
                (
                    BackendKey::new("v60", "10.0.4.61:8080".parse().unwrap()),
                    down("y"),
                ),
            ])
            .unwrap()
            .unwrap();
        assert_eq!(o.generation, 4);
        assert_eq!(last_build(&m).vips_examined, 2);
        assert_eq!(moved(&dir, &before), vec![9, 60]);
        assert_same_as_full_build(&m);

        // ApplyConfig of the whole text, backend 0 of VIP 12 at weight 2.
        let before = offsets(&dir);
        let o = m
            .apply_config(&text(n, Some((12, 2)), "a"), "<api>", false)
            .unwrap();
        assert!(o.changed && o.generation == 5, "{o:?}");
        let reparsed = lock(&m.parsed).as_ref().and_then(|p| p.reparsed());
        assert_eq!(reparsed, Some(12..13), "only VIP 12's entry is parsed");
        let b = last_build(&m);
        assert_eq!((b.full, b.vips_examined, b.rings_built), (false, 1, 1));
        assert_eq!(moved(&dir, &before), vec![12]);
        assert_same_as_full_build(&m);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// ApplyConfig texts that differ in one VIP entry are validated from
    /// that entry alone, with the full parse's errors when they are wrong;
    /// a refused text leaves the running config and the next change works.
    #[test]
    fn apply_config_reparses_the_changed_vip_with_full_errors() {
        let dir = tmpdir("reparse");
        let m = manager(&dir, 8);
        let running = |m: &Manager| lock(&m.core).store.config().clone();
        let good = text(8, Some((5, 7)), "a");
        let o = m.apply_config(&good, "<api>", false).unwrap();
        assert!(o.changed && o.generation == 2, "{o:?}");
        assert_eq!(running(&m).vips[5].backends[0].weight, 7);
        assert_eq!(
            lock(&m.parsed).as_ref().and_then(|p| p.reparsed()),
            Some(5..6)
        );

        let bad = good.replacen("name = \"v6\"", "name = \"v2\"", 1);
        let expected = Config::from_toml_str(&bad, "<api>")
            .unwrap_err()
            .to_string();
        let e = m.apply_config(&bad, "<api>", false).unwrap_err();
        assert_eq!(e.to_string(), expected);
        assert!(
            expected.contains("already the name of vip[2]"),
            "{expected}"
        );
        assert_eq!(running(&m).vips[5].backends[0].weight, 7);
        assert_eq!(lock(&m.core).store.text(), good);

        let next = text(8, Some((6, 3)), "a");
        let o = m.apply_config(&next, "<api>", false).unwrap();
        assert!(o.changed && o.generation == 3, "{o:?}");
        let cfg = running(&m);
        assert_eq!(
            (
                cfg.vips[5].backends[0].weight,
                cfg.vips[6].backends[0].weight
            ),
            (1, 3)
        );
        assert_eq!(cfg, Config::from_toml_str(&next, "x").unwrap());
        assert_same_as_full_build(&m);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_full_nat_range_inside_the_kernels_ephemeral_ports_is_refused() {
        let dir = tmpdir("ephemeral");
        let m = manager(&dir, 1);
        let (lo, hi) =
            conf::ephemeral::read_range(Path::new(conf::ephemeral::IP_LOCAL_PORT_RANGE)).unwrap();
        let bad = text(1, None, "a").replace(
            "local_addresses = [\"10.0.0.1\"]\n",
            &format!("local_addresses = [\"10.0.0.1\"]\nlocal_port_range = [1024, {hi}]\n"),
        );
        let e = m
            .apply_config(&bad, "<api>", false)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!("port[0] (\"p0\").local_port_range [1024, {hi}] overlaps the kernel's ephemeral ports {lo}-{hi} ")),
            "{e}"
        );
        assert_eq!(m.published_generation(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A restart runs what was applied and drained last, not the config it
    /// is given, unless told to; a state directory that cannot take the
    /// save refuses the change and leaves everything as it was.
    #[test]
    fn the_last_applied_config_and_drains_outlive_the_manager() {
        let dir = tmpdir("intent");
        let m = manager(&dir, 2);
        let applied = text(2, Some((1, 5)), "a");
        m.apply_config(&applied, "<api>", false).unwrap();
        m.set_backend("v0", "10.0.1.1:8080", BackendAction::Drain, "kept")
            .unwrap();
        let at = m.running_config().applied_unix_ms;
        drop(m);

        let start = |opts: Options| {
            let t = text(2, None, "a");
            let cfg = Config::from_toml_str(&t, "t.toml").unwrap();
            Manager::new(cfg, t, "t.toml".into(), opts).unwrap().0
        };
        let m = start(Options::new(Paths::in_dir(&dir)));
        let rc = m.running_config();
        assert_eq!(
            (rc.text.as_str(), rc.origin.as_str(), rc.applied_unix_ms),
            (applied.as_str(), "<api>", at)
        );
        let st = m.status();
        assert_eq!(
            st.publisher.config_restored_from,
            Some(dir.join("intent").join("intent.json"))
        );
        assert_eq!(st.vips[0].backends[0].state, BackendState::Draining);
        drop(m);

        let mut opts = Options::new(Paths::in_dir(&dir));
        opts.from_config_file = true;
        let m = start(opts);
        assert_eq!(m.running_config().origin, "t.toml");
        assert_eq!(m.status().publisher.config_restored_from, None);
        assert_eq!(m.status().vips[0].backends[0].state, BackendState::Draining);
        m.publish_now("start").unwrap();

        // A state directory that cannot be made (a file in its place; root
        // writes through read-only modes): nothing changes.
        let g = m.published_generation();
        std::fs::remove_dir_all(dir.join("intent")).unwrap();
        std::fs::write(dir.join("intent"), "not a directory").unwrap();
        let e = m
            .set_backend("v0", "10.0.1.1:8080", BackendAction::Undrain, "")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("cannot save the applied config and overrides to "),
            "{e}"
        );
        assert!(e.ends_with("; nothing changed"), "{e}");
        assert!(m.apply_config(&applied, "<api>", false).is_err());
        assert_eq!(m.published_generation(), g);
        assert_eq!(m.running_config().origin, "t.toml");
        assert_eq!(m.status().vips[0].backends[0].state, BackendState::Draining);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A kill is saved like a drain: a restarted border-mgmt publishes the
    /// backend killed again; undrain (enable) undoes it, durably too.
    #[test]
    fn a_kill_outlives_the_manager_and_undrain_undoes_it() {
        let dir = tmpdir("kill");
        let m = manager(&dir, 2);
        m.set_backend("v0", "10.0.1.1:8080", BackendAction::Kill, "bad")
            .unwrap();
        let b = &m.status().vips[0].backends[0];
        assert_eq!((b.state, b.ring_slots), (BackendState::Killed, 0));
        drop(m);

        let start = || {
            let t = text(2, None, "a");
            let cfg = Config::from_toml_str(&t, "t.toml").unwrap();
            let m = Manager::new(cfg, t, "t.toml".into(), Options::new(Paths::in_dir(&dir)))
                .unwrap()
                .0;
            m.publish_now("start").unwrap();
            m
        };
        let m = start();
        let b = &m.status().vips[0].backends[0];
        assert_eq!(b.state, BackendState::Killed);
        assert_eq!(b.reason, "killed by the operator: bad");
        let r = TablesReader::open(&Paths::in_dir(&dir).tables).unwrap();
        let v = r.view_current().unwrap();
        assert_eq!(
            v.vips()[0].backends()[0].backend_state(),
            BackendState::Killed,
            "published killed"
        );
        m.set_backend("v0", "10.0.1.1:8080", BackendAction::Undrain, "")
            .unwrap();
        drop(m);
        let m = start();
        assert_eq!(m.status().vips[0].backends[0].state, BackendState::Up);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A change whose save fails at the rename, after its publish, is taken
    /// back: the running store is published again and nothing changed.
    #[test]
    fn a_change_published_but_not_saved_is_published_back() {
        let dir = tmpdir("rollback");
        let m = manager(&dir, 2);
        let g = m.published_generation();
        let slots = |m: &Manager| m.status().vips[0].backends[0].ring_slots;
        let before = slots(&m);
        assert!(before > 0);
        // A directory in the intent file's place: the rename fails.
        let intent = dir.join("intent").join("intent.json");
        std::fs::remove_file(&intent).unwrap();
        std::fs::create_dir_all(intent.join("x")).unwrap();
        let e = m
            .set_backend("v0", "10.0.1.1:8080", BackendAction::Drain, "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("(renaming the temporary file): "), "{e}");
        // Published (g + 1), then the running store again (g + 2).
        assert_eq!(m.published_generation(), g + 2);
        let st = m.status();
        assert_eq!(st.vips[0].backends[0].state, BackendState::Up);
        assert_eq!(slots(&m), before);
        let e = m
            .apply_config(&text(1, None, "a"), "<api>", false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("(renaming the temporary file): "), "{e}");
        assert_eq!(m.status().vips.len(), 2);
        assert_eq!(m.published_generation(), g + 4);
        assert_same_as_full_build(&m);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Relative `[mgmt.tls]` paths of an ApplyConfig resolve against the
    /// config file's directory, as the file's own did: the shared parse is
    /// copied for that, and the cached parse keeps the paths as written.
    #[test]
    fn apply_config_resolves_relative_tls_paths_like_the_file() {
        let dir = tmpdir("tls");
        let tls = format!(
            "[mgmt]\nlisten = \"unix:///run/border/t.sock\"\n[mgmt.tls]\ncert = \"c.pem\"\nkey = \"/abs/k.pem\"\nclient_ca = \"ca.pem\"\nclient_fingerprints = [\"sha256:{}\"]\n",
            "ab".repeat(32)
        );
        let with_tls = |t: String| t.replacen("[[vip]]", &format!("{tls}[[vip]]"), 1);
        let t = with_tls(text(4, None, "a"));
        let file = dir.join("border.toml");
        std::fs::write(&file, &t).unwrap();
        let cfg = Config::from_file(&file).unwrap();
        let mut opts = Options::new(Paths::in_dir(&dir));
        opts.config_path = Some(file.clone());
        let (m, _) = Manager::new(cfg, t, file.display().to_string(), opts).unwrap();
        m.publish_now("start").unwrap();

        let o = m
            .apply_config(&with_tls(text(4, Some((2, 5)), "a")), "<api>", false)
            .unwrap();
        assert!(o.changed, "{o:?}");
        let running = lock(&m.core).store.config().clone();
        let resolved = running.mgmt.tls.as_ref().unwrap();
        assert_eq!(resolved.cert, dir.join("c.pem"));
        assert_eq!(resolved.key, PathBuf::from("/abs/k.pem"));
        assert_eq!(resolved.client_ca, dir.join("ca.pem"));
        assert_eq!(running.vips[2].backends[0].weight, 5);
        let cached = lock(&m.parsed).as_ref().unwrap().config().mgmt.tls.clone();
        assert_eq!(cached.unwrap().cert, PathBuf::from("c.pem"));
        assert!(!tls_paths_to_resolve(&running, Some(&dir)));
        assert!(!tls_paths_to_resolve(&running, None));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Whatever changes — VIPs added or removed, the zone, overrides on
    /// VIPs that move — the incremental builds publish what a full build
    /// gives.
    #[test]
    fn incremental_builds_equal_full_builds() {
        let dir = tmpdir("equal");
        let m = manager(&dir, 6);
        type Step = Box<dyn Fn(&Manager)>;
        let steps: Vec<Step> = vec![
            Box::new(|m| {
                m.set_backend("v1", "10.0.1.2:8080", BackendAction::Drain, "")
                    .unwrap();
            }),
            // Zone b: VIP 1 (affinity) changes without being named.
            Box::new(|m| {
                m.apply_config(&text(6, None, "b"), "<api>", false).unwrap();
            }),
            // Fewer VIPs, then more again (the drained backend's override
            // stays with its VIP).
            Box::new(|m| {
                m.apply_config(&text(3, None, "b"), "<api>", false).unwrap();
            }),
            Box::new(|m| {
                m.apply_config(&text(8, Some((7, 4)), "b"), "<api>", false)
                    .unwrap();
            }),
            Box::new(|m| {
                m.set_health(
                    &BackendKey::new("v7", "10.0.1.8:8080".parse().unwrap()),
                    Some(HealthVerdict {
                        up: false,
                        reason: "down".into(),
                        since_unix_ms: 1,
                        weight: None,
                        drain: false,
                        weight_pct: None,
                    }),
                )
                .unwrap();
            }),
            // VIPs reordered: v0 and v1 swap names and places.
            Box::new(|m| {
                let t = text(8, Some((7, 4)), "b")
                    .replacen("name = \"v0\"", "name = \"tmp\"", 1)
                    .replacen("name = \"v1\"", "name = \"v0\"", 1)
                    .replacen("name = \"tmp\"", "name = \"v1\"", 1);
                m.apply_config(&t, "<api>", false).unwrap();
            }),
            Box::new(|m| {
                m.set_backend("v0", "10.0.1.2:8080", BackendAction::Undrain, "")
                    .unwrap();
            }),
        ];
        for (i, step) in steps.iter().enumerate() {
            step(&m);
            let b = last_build(&m);
            assert!(!b.full || i == 1, "step {i}: {b:?}");
            assert_same_as_full_build(&m);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
