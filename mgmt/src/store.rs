//! The config store: the running [`Config`] (and the text it came from) plus
//! the operator's per-backend overrides (weight, drain) and the health
//! verdicts, keyed by (VIP name, backend `addr:port`). Everything the table
//! builder needs comes out of here as one value per backend
//! ([`Store::effective`]), so backend set, weights, drain and health always
//! change together in one generation (docs/design.md §1: one atomically swapped value).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use conf::tables::BackendState;
use conf::{Config, ConfigError};
use serde::{Deserialize, Serialize};

/// Milliseconds since the Unix epoch.
pub fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A backend of a VIP, as operators name it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BackendKey {
    /// VIP name.
    pub vip: String,
    /// Backend address and port.
    pub backend: SocketAddr,
}

impl BackendKey {
    /// A key from a VIP name and a backend.
    pub fn new(vip: &str, backend: SocketAddr) -> BackendKey {
        BackendKey {
            vip: vip.to_string(),
            backend,
        }
    }
}

/// What an operator set on one backend (SetBackend). Kept across config
/// applies while the backend stays configured, and across restarts of
/// border-mgmt and reboots (saved with the applied config: [`crate::intent`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorOverride {
    /// Replaces the configured weight.
    #[serde(default)]
    pub weight: Option<u32>,
    /// Out of the ring; existing flows finish (unless `killed`).
    #[serde(default)]
    pub drained: bool,
    /// Drained, and every established flow reset on its next packet. Saved
    /// with `drained` set too, so a border-mgmt that does not know this
    /// field reads a drain.
    #[serde(default)]
    pub killed: bool,
    /// The operator's note, shown in the reason.
    #[serde(default)]
    pub note: String,
    /// When it was last changed.
    #[serde(default)]
    pub since_unix_ms: u64,
}

impl OperatorOverride {
    fn is_empty(&self) -> bool {
        self.weight.is_none() && !self.drained && !self.killed
    }
}

/// A health verdict on one backend: the hook for the health checker (a later
/// issue). `up == false` takes the backend out of the ring (unless the VIP
/// fails open); the reason is shown as is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthVerdict {
    /// Healthy.
    pub up: bool,
    /// Why, in words ("3 consecutive TCP connects refused", ...).
    pub reason: String,
    /// Since when.
    pub since_unix_ms: u64,
    /// Weight from the backend's `X-Load-Balancing-Endpoint-Weight` header
    /// (`weight_header = true`); applies while up, below an operator weight.
    pub weight: Option<u32>,
    /// The backend's agent says drain: out of the ring, established flows
    /// stay (an operator drain from health).
    pub drain: bool,
    /// The backend's agent's weight in percent of the configured weight;
    /// applies while up, below an operator weight and the weight header.
    pub weight_pct: Option<u32>,
}

/// One SetBackend action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendAction {
    /// Operator weight (0..=65535).
    Weight(u32),
    /// Back to the configured weight.
    ResetWeight,
    /// Out of the ring, existing flows finish.
    Drain,
    /// Out of the ring, and established flows reset on their next packet
    /// (whatever the VIP's `on_down`).
    Kill,
    /// Undo [`BackendAction::Drain`] or [`BackendAction::Kill`].
    Undrain,
}

/// A backend as the builder and the API see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Effective {
    /// Weight after overrides.
    pub weight: u32,
    /// Configured weight.
    pub config_weight: u32,
    /// Operator weight in force.
    pub weight_overridden: bool,
    /// Drained by the operator (also when killed).
    pub drained: bool,
    /// Killed by the operator: drained, and its flows reset.
    pub killed: bool,
    /// State for the tables.
    pub state: BackendState,
    /// Why, in words.
    pub reason: String,
}

/// Why a SetBackend was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SetBackendError {
    /// No VIP of that name.
    #[error("no VIP `{0}` in the running config")]
    NoVip(String),
    /// The VIP has no such backend.
    #[error("VIP `{vip}` has no backend {backend}")]
    NoBackend {
        /// VIP name.
        vip: String,
        /// The backend asked for.
        backend: SocketAddr,
    },
    /// Weight out of range.
    #[error("weight {0} is out of range (expected 0..=65535)")]
    Weight(u32),
}

/// The running config and the overrides on top of it. Cloning gives a
/// candidate to change and build from; commit it by replacing the original
/// and calling [`Store::save`]. The config and its text are shared between
/// clones (cloning does not copy them); a change to one backend can also be
/// made in place and taken back ([`Store::undo_point`], [`Store::undo`]),
/// which copies nothing at all.
#[derive(Debug, Clone)]
pub struct Store {
    config: Arc<Config>,
    text: Arc<str>,
    /// VIP name -> position in `config.vips`.
    index: Arc<HashMap<String, usize>>,
    origin: String,
    applied_unix_ms: u64,
    operator: BTreeMap<BackendKey, OperatorOverride>,
    health: HashMap<BackendKey, HealthVerdict>,
}

/// What [`Store::replace_config`] dropped: overrides of backends the new
/// config no longer has.
pub type Pruned = Vec<BackendKey>;

/// What one backend had before a change made in place: [`Store::undo`]
/// puts it back.
#[derive(Debug, Clone)]
pub struct Undo {
    key: BackendKey,
    operator: Option<OperatorOverride>,
    health: Option<HealthVerdict>,
}

fn name_index(cfg: &Config) -> Arc<HashMap<String, usize>> {
    Arc::new(
        cfg.vips
            .iter()
            .enumerate()
            .map(|(i, v)| (v.name.clone(), i))
            .collect(),
    )
}

impl Store {
    /// A store running `config` (parsed from `text`, named `origin`),
    /// applied now, with no overrides.
    pub fn new(config: impl Into<Arc<Config>>, text: impl Into<Arc<str>>, origin: String) -> Store {
        let config = config.into();
        Store {
            index: name_index(&config),
            config,
            text: text.into(),
            origin,
            applied_unix_ms: now_unix_ms(),
            operator: BTreeMap::new(),
            health: HashMap::new(),
        }
    }

    /// Puts back saved operator overrides (after a restart); those of
    /// backends the config does not have are dropped and returned.
    pub fn restore_overrides(
        &mut self,
        saved: impl IntoIterator<Item = (BackendKey, OperatorOverride)>,
    ) -> Pruned {
        let mut gone = Vec::new();
        for (k, o) in saved {
            if self.find(&k).is_none() {
                gone.push(k);
            } else if !o.is_empty() {
                self.operator.insert(k, o);
            }
        }
        gone
    }

    /// Says the running config was applied at `unix_ms` (a restored one
    /// keeps the time the operator applied it).
    pub fn set_applied_unix_ms(&mut self, unix_ms: u64) {
        self.applied_unix_ms = unix_ms;
    }

    /// The running config.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The text the running config was parsed from.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Where it came from (a file path or `<api>`).
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// When it was applied.
    pub fn applied_unix_ms(&self) -> u64 {
        self.applied_unix_ms
    }

    /// Operator overrides in force.
    pub fn operator_overrides(&self) -> &BTreeMap<BackendKey, OperatorOverride> {
        &self.operator
    }

    /// The running config, shared.
    pub fn config_arc(&self) -> &Arc<Config> {
        &self.config
    }

    /// Position of the VIP called `name` in the running config.
    pub fn vip_position(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    /// (VIP index, backend index) of a key in the running config.
    pub fn find(&self, key: &BackendKey) -> Option<(usize, usize)> {
        let vi = self.vip_position(&key.vip)?;
        let bi = self.config.vips[vi]
            .backends
            .iter()
            .position(|b| SocketAddr::new(b.address, b.port) == key.backend)?;
        Some((vi, bi))
    }

    /// The key of (VIP index, backend index).
    pub fn key(&self, vi: usize, bi: usize) -> Option<BackendKey> {
        let v = self.config.vips.get(vi)?;
        let b = v.backends.get(bi)?;
        Some(BackendKey::new(&v.name, SocketAddr::new(b.address, b.port)))
    }

    /// Backend `bi` of VIP `vi` after overrides (None if out of range).
    pub fn effective(&self, vi: usize, bi: usize) -> Option<Effective> {
        let v = self.config.vips.get(vi)?;
        let b = v.backends.get(bi)?;
        let key = BackendKey::new(&v.name, SocketAddr::new(b.address, b.port));
        let op = self.operator.get(&key);
        let health = self.health.get(&key);
        let agent_weight = health
            .filter(|h| h.up)
            .and_then(|h| h.weight_pct)
            .map(|p| scaled_weight(b.weight, p));
        let health_weight = health
            .filter(|h| h.up)
            .and_then(|h| h.weight)
            .or(agent_weight);
        let weight = op
            .and_then(|o| o.weight)
            .or(health_weight)
            .unwrap_or(b.weight);
        let weight_overridden = op.and_then(|o| o.weight).is_some();
        let killed = op.is_some_and(|o| o.killed);
        let drained = killed || op.is_some_and(|o| o.drained);
        let note = |o: &OperatorOverride| {
            if o.note.is_empty() {
                String::new()
            } else {
                format!(": {}", o.note)
            }
        };
        let (state, reason) = if killed {
            let o = op.expect("killed implies an override");
            (
                BackendState::Killed,
                format!("killed by the operator{}", note(o)),
            )
        } else if drained {
            let o = op.expect("drained implies an override");
            (
                BackendState::Draining,
                format!("drained by the operator{}", note(o)),
            )
        } else if let Some(h) = health.filter(|h| !h.up) {
            (BackendState::Down, h.reason.clone())
        } else if let Some(h) = health.filter(|h| h.drain) {
            (BackendState::Draining, h.reason.clone())
        } else if weight == 0 {
            let why = match op.filter(|o| o.weight.is_some()) {
                Some(o) => format!("weight 0 set by the operator{}", note(o)),
                None if health.is_some_and(|h| h.weight.is_some()) => {
                    "weight 0 from the backend's X-Load-Balancing-Endpoint-Weight header"
                        .to_string()
                }
                None if agent_weight.is_some() => "weight 0 from the backend's agent".to_string(),
                None => "configured weight 0".to_string(),
            };
            (BackendState::Up, format!("{why}: takes no new flows"))
        } else if let Some(h) = health {
            (BackendState::Up, h.reason.clone())
        } else if v.health.is_some() {
            (BackendState::Up, "up: no health verdict yet".to_string())
        } else {
            (
                BackendState::Up,
                "up: no health check configured".to_string(),
            )
        };
        Some(Effective {
            weight,
            config_weight: b.weight,
            weight_overridden,
            drained,
            killed,
            state,
            reason,
        })
    }

    /// The builder's view of the overrides: `(weight, state)` for every backend.
    pub fn overrides(&self, vi: usize, bi: usize) -> Option<(u32, BackendState)> {
        self.effective(vi, bi).map(|e| (e.weight, e.state))
    }

    /// Makes `config` the running config. Overrides of backends it no longer
    /// has are dropped and returned.
    pub fn replace_config(
        &mut self,
        config: impl Into<Arc<Config>>,
        text: impl Into<Arc<str>>,
        origin: String,
    ) -> Pruned {
        let config = config.into();
        self.index = name_index(&config);
        self.config = config;
        self.text = text.into();
        self.origin = origin;
        self.applied_unix_ms = now_unix_ms();
        let gone: Vec<BackendKey> = self
            .operator
            .keys()
            .filter(|k| self.find(k).is_none())
            .cloned()
            .collect();
        for k in &gone {
            self.operator.remove(k);
        }
        let (config, index) = (&self.config, &self.index);
        self.health.retain(|k, _| {
            index.get(&k.vip).is_some_and(|&vi| {
                config.vips[vi]
                    .backends
                    .iter()
                    .any(|b| SocketAddr::new(b.address, b.port) == k.backend)
            })
        });
        gone
    }

    /// What `key` has now (operator override, health verdict), to take a
    /// change made in place back with [`Store::undo`].
    pub fn undo_point(&self, key: &BackendKey) -> Undo {
        Undo {
            key: key.clone(),
            operator: self.operator.get(key).cloned(),
            health: self.health.get(key).cloned(),
        }
    }

    /// Puts back what [`Store::undo_point`] recorded.
    pub fn undo(&mut self, u: Undo) {
        match u.operator {
            Some(o) => self.operator.insert(u.key.clone(), o),
            None => self.operator.remove(&u.key),
        };
        match u.health {
            Some(h) => self.health.insert(u.key, h),
            None => self.health.remove(&u.key),
        };
    }

    /// Applies an operator action. Returns whether the effective backend changed.
    pub fn set_backend(
        &mut self,
        key: &BackendKey,
        action: BackendAction,
        note: &str,
    ) -> Result<bool, SetBackendError> {
        if self.vip_position(&key.vip).is_none() {
            return Err(SetBackendError::NoVip(key.vip.clone()));
        }
        let Some((vi, bi)) = self.find(key) else {
            return Err(SetBackendError::NoBackend {
                vip: key.vip.clone(),
                backend: key.backend,
            });
        };
        if let BackendAction::Weight(w) = action {
            if w > conf::config::MAX_WEIGHT {
                return Err(SetBackendError::Weight(w));
            }
        }
        let before = self.effective(vi, bi);
        let mut o = self.operator.get(key).cloned().unwrap_or_default();
        match action {
            BackendAction::Weight(w) => o.weight = Some(w),
            BackendAction::ResetWeight => o.weight = None,
            BackendAction::Drain => (o.drained, o.killed) = (true, false),
            BackendAction::Kill => (o.drained, o.killed) = (true, true),
            BackendAction::Undrain => (o.drained, o.killed) = (false, false),
        }
        if !note.is_empty()
            || matches!(
                action,
                BackendAction::Drain | BackendAction::Kill | BackendAction::Weight(_)
            )
        {
            o.note = note.to_string();
        }
        o.since_unix_ms = now_unix_ms();
        if o.is_empty() {
            self.operator.remove(key);
        } else {
            self.operator.insert(key.clone(), o);
        }
        Ok(before != self.effective(vi, bi))
    }

    /// Records (or clears, with `None`) a health verdict. Returns whether
    /// the effective backend changed. Unknown backends are ignored.
    pub fn set_health(&mut self, key: &BackendKey, verdict: Option<HealthVerdict>) -> bool {
        let Some((vi, bi)) = self.find(key) else {
            return false;
        };
        let before = self.effective(vi, bi);
        match verdict {
            Some(v) => {
                self.health.insert(key.clone(), v);
            }
            None => {
                self.health.remove(key);
            }
        }
        before != self.effective(vi, bi)
    }

    /// The health verdicts in force.
    pub fn health_verdicts(&self) -> &HashMap<BackendKey, HealthVerdict> {
        &self.health
    }
}

/// Reads and validates a config file like [`Config::from_file`], also
/// returning its text (for GetConfig).
pub fn load_config_file(path: &Path) -> Result<(Config, String), ConfigError> {
    let bytes = std::fs::read(path).map_err(|source| ConfigError::Io {
        path: path.to_owned(),
        source,
    })?;
    match String::from_utf8(bytes) {
        Ok(text) => {
            let mut cfg = Config::from_toml_str(&text, &path.display().to_string())?;
            resolve_tls_paths(&mut cfg, path.parent());
            Ok((cfg, text))
        }
        // from_file reports the first invalid byte with its position.
        Err(_) => Config::from_file(path).map(|c| (c, String::new())),
    }
}

/// Whether [`resolve_tls_paths`] would change `cfg`.
pub fn tls_paths_to_resolve(cfg: &Config, dir: Option<&Path>) -> bool {
    let Some(tls) = &cfg.mgmt.tls else {
        return false;
    };
    dir.is_some_and(|d| !d.as_os_str().is_empty())
        && [&tls.cert, &tls.key, &tls.client_ca]
            .iter()
            .any(|p| p.is_relative())
}

/// Resolves relative `[mgmt.tls]` paths against `dir`, as
/// [`Config::from_file`] does for a file in `dir`.
pub fn resolve_tls_paths(cfg: &mut Config, dir: Option<&Path>) {
    let Some(dir) = dir.filter(|d| !d.as_os_str().is_empty()) else {
        return;
    };
    if let Some(tls) = &mut cfg.mgmt.tls {
        for p in [&mut tls.cert, &mut tls.key, &mut tls.client_ca] {
            if p.is_relative() {
                *p = dir.join(&*p);
            }
        }
    }
}

/// What a new config may not change without restarting the processes:
/// `Err(section)` names the first such section that differs.
pub fn check_reloadable(old: &Config, new: &Config) -> Result<(), &'static str> {
    if old.instance != new.instance {
        return Err("instance");
    }
    if old.dataplane != new.dataplane {
        return Err("[dataplane]");
    }
    if old.ports != new.ports {
        return Err("[[port]]");
    }
    if old.mgmt != new.mgmt {
        return Err("[mgmt]");
    }
    if old.records != new.records {
        return Err("[records]");
    }
    Ok(())
}

/// `weight` scaled by the agent's `pct` percent (rounded to nearest, at
/// least 1 while both are above 0, at most [`conf::config::MAX_WEIGHT`]).
pub fn scaled_weight(weight: u32, pct: u32) -> u32 {
    let w = (u64::from(weight) * u64::from(pct) + 50) / 100;
    let w = if w == 0 && weight > 0 && pct > 0 {
        1
    } else {
        w
    };
    w.min(u64::from(conf::config::MAX_WEIGHT)) as u32
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// One VIP of two backends (the second of weight 2); the publisher's
    /// tests use it too.
    pub(crate) const CFG: &str = r#"
instance = "t"
[dataplane]
worker_lcores = [1]
flow_hash_key = "000102030405060708090a0b0c0d0e0f"
[[port]]
name = "p0"
devargs = "net_null0"
addresses = ["10.0.0.1/24"]
local_addresses = ["10.0.0.1"]
[[vip]]
name = "web"
address = "10.0.0.100"
port = 80
maglev_table_size = 1009
[[vip.backend]]
address = "10.0.1.1"
port = 8080
[[vip.backend]]
address = "10.0.1.2"
port = 8080
weight = 2
"#;

    fn store() -> Store {
        let cfg = Config::from_toml_str(CFG, "t.toml").unwrap();
        Store::new(cfg, CFG, "t.toml".into())
    }

    fn key(b: &str) -> BackendKey {
        BackendKey::new("web", b.parse().unwrap())
    }

    #[test]
    fn overrides_change_the_effective_backend() {
        let mut s = store();
        let e = s.effective(0, 1).unwrap();
        assert_eq!((e.weight, e.state), (2, BackendState::Up));
        assert!(e.reason.contains("no health check"), "{}", e.reason);

        assert!(s
            .set_backend(&key("10.0.1.2:8080"), BackendAction::Drain, "maintenance")
            .unwrap());
        let e = s.effective(0, 1).unwrap();
        assert_eq!(e.state, BackendState::Draining);
        assert_eq!(e.reason, "drained by the operator: maintenance");
        assert!(!s
            .set_backend(&key("10.0.1.2:8080"), BackendAction::Drain, "maintenance")
            .unwrap());

        s.set_backend(&key("10.0.1.2:8080"), BackendAction::Weight(7), "")
            .unwrap();
        assert_eq!(s.effective(0, 1).unwrap().weight, 7);
        s.set_backend(&key("10.0.1.2:8080"), BackendAction::Undrain, "")
            .unwrap();
        s.set_backend(&key("10.0.1.2:8080"), BackendAction::ResetWeight, "")
            .unwrap();
        assert!(s.operator_overrides().is_empty());
        assert_eq!(s.effective(0, 1).unwrap().weight, 2);

        assert_eq!(
            s.set_backend(&key("10.0.1.9:8080"), BackendAction::Drain, ""),
            Err(SetBackendError::NoBackend {
                vip: "web".into(),
                backend: "10.0.1.9:8080".parse().unwrap()
            })
        );
        assert!(matches!(
            s.set_backend(
                &BackendKey::new("nope", "10.0.1.1:8080".parse().unwrap()),
                BackendAction::Drain,
                ""
            ),
            Err(SetBackendError::NoVip(_))
        ));
        assert_eq!(
            s.set_backend(&key("10.0.1.1:8080"), BackendAction::Weight(70000), ""),
            Err(SetBackendError::Weight(70000))
        );
    }

    #[test]
    fn health_verdicts_hook_in_and_drain_wins() {
        let mut s = store();
        let k = key("10.0.1.1:8080");
        assert!(s.set_health(
            &k,
            Some(HealthVerdict {
                up: false,
                reason: "3 connects refused".into(),
                since_unix_ms: 1,
                weight: None,
                drain: false,
                weight_pct: None,
            })
        ));
        let e = s.effective(0, 0).unwrap();
        assert_eq!(
            (e.state, e.reason.as_str()),
            (BackendState::Down, "3 connects refused")
        );
        s.set_backend(&k, BackendAction::Drain, "").unwrap();
        assert_eq!(s.effective(0, 0).unwrap().state, BackendState::Draining);
        assert!(
            s.set_health(&k, None) || s.effective(0, 0).unwrap().state == BackendState::Draining
        );
    }

    /// A kill: out of the ring like a drain (drained too), state Killed so
    /// workers reset its flows; it wins over health; undrain (`enable`)
    /// undoes it; a drain after it keeps the drain only.
    #[test]
    fn a_kill_is_a_drain_that_resets_and_undrain_undoes_it() {
        let mut s = store();
        let k = key("10.0.1.2:8080");
        assert!(s
            .set_backend(&k, BackendAction::Kill, "bad deploy")
            .unwrap());
        let e = s.effective(0, 1).unwrap();
        assert_eq!(e.state, BackendState::Killed);
        assert!(e.drained && e.killed);
        assert_eq!(e.reason, "killed by the operator: bad deploy");
        assert!(!s
            .set_backend(&k, BackendAction::Kill, "bad deploy")
            .unwrap());
        s.set_health(
            &k,
            Some(HealthVerdict {
                up: false,
                reason: "refused".into(),
                since_unix_ms: 1,
                weight: None,
                drain: false,
                weight_pct: None,
            }),
        );
        assert_eq!(s.effective(0, 1).unwrap().state, BackendState::Killed);
        s.set_health(&k, None);

        assert!(s.set_backend(&k, BackendAction::Drain, "").unwrap());
        let e = s.effective(0, 1).unwrap();
        assert_eq!(
            (e.state, e.drained, e.killed),
            (BackendState::Draining, true, false)
        );

        s.set_backend(&k, BackendAction::Kill, "").unwrap();
        assert!(s.set_backend(&k, BackendAction::Undrain, "").unwrap());
        let e = s.effective(0, 1).unwrap();
        assert_eq!(
            (e.state, e.drained, e.killed),
            (BackendState::Up, false, false)
        );
        assert!(s.operator_overrides().is_empty());
        assert_eq!(
            s.set_backend(&key("10.0.1.9:8080"), BackendAction::Kill, ""),
            Err(SetBackendError::NoBackend {
                vip: "web".into(),
                backend: "10.0.1.9:8080".parse().unwrap()
            })
        );
    }

    /// Saved, a kill is also a drain: a border-mgmt that does not know
    /// `killed` reads a drain.
    #[test]
    fn a_saved_kill_reads_as_a_drain_without_the_field() {
        let mut s = store();
        s.set_backend(&key("10.0.1.1:8080"), BackendAction::Kill, "x")
            .unwrap();
        let o = &s.operator_overrides()[&key("10.0.1.1:8080")];
        let v = serde_json::to_value(o).unwrap();
        assert_eq!(
            (v["drained"].as_bool(), v["killed"].as_bool()),
            (Some(true), Some(true))
        );
        let old: OperatorOverride =
            serde_json::from_str(r#"{"drained": true, "note": "old"}"#).unwrap();
        assert!(old.drained && !old.killed);
    }

    #[test]
    fn overrides_restore_and_follow_the_config() {
        let mut s = store();
        s.set_backend(&key("10.0.1.1:8080"), BackendAction::Drain, "x")
            .unwrap();
        s.set_backend(&key("10.0.1.2:8080"), BackendAction::Weight(9), "")
            .unwrap();
        let saved: Vec<_> = s
            .operator_overrides()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut s = store();
        let stranger = BackendKey::new("gone", "10.9.9.9:1".parse().unwrap());
        let mut with_stranger = saved.clone();
        with_stranger.push((stranger.clone(), OperatorOverride::default()));
        assert_eq!(s.restore_overrides(with_stranger), vec![stranger]);
        assert_eq!(s.operator_overrides().len(), 2);
        assert_eq!(s.effective(0, 0).unwrap().state, BackendState::Draining);
        assert_eq!(s.effective(0, 1).unwrap().weight, 9);

        // A config without 10.0.1.1 drops its override.
        let text = CFG.replace("10.0.1.1", "10.0.1.3");
        let cfg = Config::from_toml_str(&text, "<api>").unwrap();
        let gone = s.replace_config(cfg, text, "<api>".into());
        assert_eq!(gone, vec![key("10.0.1.1:8080")]);
        assert_eq!(s.operator_overrides().len(), 1);
    }

    #[test]
    fn reloadable_names_the_section() {
        let a = Config::from_toml_str(CFG, "a").unwrap();
        let mut b = a.clone();
        b.vips.clear();
        b.zone = Some("z".into());
        assert_eq!(check_reloadable(&a, &b), Ok(()));
        b.dataplane.conntrack_per_worker = 4096;
        assert_eq!(check_reloadable(&a, &b), Err("[dataplane]"));
        let mut c = a.clone();
        c.mgmt.metrics_listen = Some("127.0.0.1:9".parse().unwrap());
        assert_eq!(check_reloadable(&a, &c), Err("[mgmt]"));
    }
}
