//! The verdict engine: pure, deterministic, driven by the caller's clock
//! (milliseconds, monotonic), so every rule is unit-tested with a fake clock.
//!
//! Inputs: this checker's probe results ([`Engine::local_result`]) and the
//! observations peers report ([`Engine::peer_update`]). Output: one
//! [`Verdict`] per (VIP, backend) of every VIP with `[vip.health]`, plus
//! per-VIP flags and per-checker witness state ([`Engine::evaluate`]).
//!
//! The rules (docs/design.md §5):
//! - one failure is noise: a checker's own view of a backend goes down after
//!   `fall` consecutive failures and back up after `rise` consecutive
//!   successes ([`Local`]);
//! - silence is not a verdict: a vote counts only while fresh; without fresh
//!   votes a backend keeps its state and is marked `no_data`;
//! - quorum: a backend is down when at least `quorum` credible checkers'
//!   fresh views say down;
//! - unreliable witness: a checker whose failing targets, contradicted by a
//!   fresh success of another checker, are at least half of all it checks
//!   (and more than one, unless it is all of them) has its votes discarded
//!   until that is no longer so;
//! - never leave a VIP empty: when every backend of a VIP is down the VIP is
//!   flagged fail-open (the table builder keeps all of them in the ring);
//! - weight header: while every answering backend of a VIP with
//!   `weight_header = true` sends a valid weight, those weights apply;
//!   otherwise the VIP falls back to configured weights, with the reason;
//! - trusted checker: a fresh down view of a `trusted = true` peer takes
//!   the backend down whatever the quorum says; its silence means nothing;
//! - split: when the down votes reach the quorum but do not outnumber the
//!   up votes (two checkers, one each way), the backend keeps its state and
//!   its reason names both sides, until a trusted checker decides;
//! - agent: the backend's own answer (HAProxy agent-check) takes it down
//!   (`down`, `maint`), drains it (`drain`) or scales its weight (`N%`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;

use conf::{Config, Health, HealthKind};

use super::agent::{AgentAdmin, AgentResult};

/// A backend of a VIP: (VIP name, backend address).
pub type Key = (String, SocketAddr);

/// A backend's health.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HealthState {
    /// Takes new flows.
    Up,
    /// Out of the ring (unless its VIP fails open).
    Down,
}

impl HealthState {
    /// "up" / "down".
    pub fn as_str(self) -> &'static str {
        match self {
            HealthState::Up => "up",
            HealthState::Down => "down",
        }
    }
}

/// What a probe said about `X-Load-Balancing-Endpoint-Weight`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WeightObs {
    /// A valid weight (0..=65535).
    Value(u32),
    /// Missing or invalid, with why.
    Invalid(String),
}

/// One probe's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeOutcome {
    /// Passed.
    pub ok: bool,
    /// What happened, in words: "TCP connect ok", "HTTP 200", "connect
    /// refused", "TLS handshake timeout after 500 ms", "HTTP 503".
    pub reason: String,
    /// The weight header of an HTTP answer (`None`: not an HTTP answer).
    pub weight: Option<WeightObs>,
}

/// One checker's view of one backend, as shared with peers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    /// The checker's own state of the backend (`None`: not decided yet).
    pub state: Option<HealthState>,
    /// The last probe passed (`None`: no probe result yet).
    pub last_ok: Option<bool>,
    /// Consecutive results equal to the last one.
    pub streak: u32,
    /// The last probe's reason.
    pub reason: String,
    /// The last failed probe's reason (empty: none yet).
    pub last_failure: String,
    /// When the last result came (engine clock, ms).
    pub at_ms: u64,
    /// Weight header of the last result.
    pub weight: Option<WeightObs>,
}

/// This checker's rise/fall machine for one backend.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Local {
    state: Option<HealthState>,
    succ: u32,
    fail: u32,
    last: Option<(u64, bool, String, Option<WeightObs>)>,
    last_failure: String,
    agent: Option<AgentState>,
}

/// What the backend's agent said, as it stands: the administrative state
/// and the weight stick until the agent names others (HAProxy's rule).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct AgentState {
    /// The last answer said down/fail/stopped.
    down: bool,
    admin: AgentAdmin,
    weight_pct: Option<u32>,
    /// The last valid answer.
    said: String,
    /// Why the last attempt gave no answer (cleared by the next answer).
    error: Option<String>,
}

impl Local {
    /// Feeds one result. A backend never seen before is up at its first
    /// success; it goes down after `fall` consecutive failures and comes
    /// back after `rise` consecutive successes.
    pub fn record(&mut self, out: &ProbeOutcome, rise: u32, fall: u32, now: u64) {
        if out.ok {
            self.succ = self.succ.saturating_add(1);
            self.fail = 0;
            match self.state {
                None => self.state = Some(HealthState::Up),
                Some(HealthState::Down) if self.succ >= rise => self.state = Some(HealthState::Up),
                _ => {}
            }
        } else {
            self.fail = self.fail.saturating_add(1);
            self.succ = 0;
            self.last_failure = out.reason.clone();
            if self.fail >= fall {
                self.state = Some(HealthState::Down);
            }
        }
        self.last = Some((now, out.ok, out.reason.clone(), out.weight.clone()));
    }

    /// Feeds one answer of the backend's agent (or why there is none: the
    /// last answer then stands).
    pub fn record_agent(&mut self, r: &AgentResult) {
        let a = self.agent.get_or_insert_with(AgentState::default);
        match r {
            Ok(ans) => {
                a.down = ans.down;
                if let Some(adm) = ans.admin {
                    a.admin = adm;
                }
                if let Some(p) = ans.weight_pct {
                    a.weight_pct = Some(p);
                }
                a.said = ans.text.clone();
                a.error = None;
            }
            Err(e) => a.error = Some(e.clone()),
        }
    }

    /// The view to share.
    pub fn observation(&self) -> Observation {
        let (at_ms, last_ok, reason, weight) = match &self.last {
            Some((at, ok, r, w)) => (*at, Some(*ok), r.clone(), w.clone()),
            None => (0, None, String::new(), None),
        };
        Observation {
            state: self.state,
            last_ok,
            streak: if last_ok == Some(true) {
                self.succ
            } else {
                self.fail
            },
            reason,
            last_failure: self.last_failure.clone(),
            at_ms,
            weight,
        }
    }
}

/// The health verdict on one backend of one VIP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Up or down.
    pub state: HealthState,
    /// No fresh credible vote decided it: the state was kept.
    pub no_data: bool,
    /// Weight from the weight header; `None`: the configured (or operator) weight.
    pub weight: Option<u32>,
    /// The backend's agent says drain: out of the ring, established flows
    /// stay (like an operator drain).
    pub drain: bool,
    /// The backend's agent's weight, in percent of the configured weight.
    pub weight_pct: Option<u32>,
    /// Why, in words; stable while nothing changes (safe to publish).
    pub reason: String,
    /// The last probes, in words (changes with every probe).
    pub detail: String,
    /// When `state` last changed (engine clock, ms).
    pub since_ms: u64,
    /// The same in Unix milliseconds.
    pub since_unix_ms: u64,
    /// The last [`RECENT_CHANGES`] changes of `state` (not the first
    /// verdict), Unix ms, oldest first: what tells a flapping backend.
    pub changes_unix_ms: Vec<u64>,
    /// The checkers whose votes made the decision.
    pub checkers: Vec<String>,
}

/// How many state changes a verdict remembers.
pub const RECENT_CHANGES: usize = 8;

/// Health of one VIP as a whole.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VipHealth {
    /// Every backend is down: all stay in the ring.
    pub fail_open: bool,
    /// `weight_header = true` but some backend's header is missing or
    /// invalid: configured weights apply; why.
    pub weight_fallback: Option<String>,
}

/// A checker as this engine sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Witness {
    /// The checker's id.
    pub id: String,
    /// Where it is reached (`self` for this one).
    pub address: String,
    /// Sent anything fresh.
    pub fresh: bool,
    /// Votes discarded; why.
    pub unreliable: Option<String>,
    /// The last error reaching it.
    pub error: Option<String>,
}

/// Something that changed in [`Engine::evaluate`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A backend's state, no-data flag, weight or reason changed.
    Backend(Key),
    /// A VIP started or stopped failing open.
    FailOpen {
        /// VIP name.
        vip: String,
        /// Now failing open.
        on: bool,
        /// Why.
        reason: String,
    },
    /// A VIP's weight-header fallback started or ended.
    WeightFallback {
        /// VIP name.
        vip: String,
        /// Why, while falling back.
        reason: Option<String>,
    },
    /// A checker became (or stopped being) an unreliable witness.
    Witness {
        /// Checker id.
        checker: String,
        /// Why, while unreliable.
        reason: Option<String>,
    },
}

#[derive(Clone, Debug)]
struct VipSpec {
    name: String,
    backends: Vec<SocketAddr>,
    health: Health,
}

impl VipSpec {
    fn fresh_ms(&self) -> u64 {
        // Full jitter puts two probes up to two intervals apart, plus the
        // probe's own time.
        2 * u64::from(self.health.interval_ms) + u64::from(self.health.timeout_ms) + FRESH_SLACK_MS
    }
}

/// Added to a VIP's freshness window for scheduling noise.
pub const FRESH_SLACK_MS: u64 = 500;

#[derive(Clone, Debug, Default)]
struct PeerData {
    /// The id the peer reports for itself.
    id: Option<String>,
    obs: HashMap<Key, Observation>,
    error: Option<String>,
}

/// The verdict engine.
#[derive(Debug)]
pub struct Engine {
    me: String,
    quorum: usize,
    /// Added to freshness windows for peers' observations (their poll
    /// interval and call time).
    peer_slack_ms: u64,
    vips: Vec<VipSpec>,
    local: HashMap<Key, Local>,
    /// By peer address, in config order.
    peers: BTreeMap<String, PeerData>,
    peer_order: Vec<String>,
    /// Addresses of the peers marked `trusted = true`.
    trusted: BTreeSet<String>,
    verdicts: BTreeMap<Key, Verdict>,
    vip_health: BTreeMap<String, VipHealth>,
    witnesses: BTreeMap<String, Witness>,
}

impl Engine {
    /// An engine for checker `me` over `cfg` (its VIPs with `[vip.health]`,
    /// `[[mgmt.peer]]` and `quorum`). Peers' observations get
    /// `peer_slack_ms` more to stay fresh.
    pub fn new(me: &str, cfg: &Config, peer_slack_ms: u64) -> Engine {
        let mut e = Engine {
            me: me.to_string(),
            quorum: 1,
            peer_slack_ms,
            vips: Vec::new(),
            local: HashMap::new(),
            peers: BTreeMap::new(),
            peer_order: Vec::new(),
            trusted: BTreeSet::new(),
            verdicts: BTreeMap::new(),
            vip_health: BTreeMap::new(),
            witnesses: BTreeMap::new(),
        };
        e.reconfigure(cfg);
        e
    }

    /// This checker's id.
    pub fn me(&self) -> &str {
        &self.me
    }

    /// The quorum in force.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// Takes a new config: backends that stay (same VIP, address and health
    /// settings) keep their state; the others start over.
    pub fn reconfigure(&mut self, cfg: &Config) {
        let old: HashMap<String, Health> = self
            .vips
            .iter()
            .map(|v| (v.name.clone(), v.health.clone()))
            .collect();
        self.vips = cfg
            .vips
            .iter()
            .filter_map(|v| {
                v.health.as_ref().map(|h| VipSpec {
                    name: v.name.clone(),
                    backends: v
                        .backends
                        .iter()
                        .map(|b| SocketAddr::new(b.address, b.port))
                        .collect(),
                    health: h.clone(),
                })
            })
            .collect();
        // `on_down` is the dataplane's business, not the probes': changing
        // it keeps the verdicts.
        let probing = |h: &Health| Health {
            on_down: Default::default(),
            ..h.clone()
        };
        let keep: BTreeSet<Key> = self
            .vips
            .iter()
            .filter(|v| old.get(&v.name).map(probing) == Some(probing(&v.health)))
            .flat_map(|v| v.backends.iter().map(|b| (v.name.clone(), *b)))
            .collect();
        self.local.retain(|k, _| keep.contains(k));
        self.verdicts.retain(|k, _| keep.contains(k));
        let names: BTreeSet<&str> = self.vips.iter().map(|v| v.name.as_str()).collect();
        self.vip_health.retain(|k, _| names.contains(k.as_str()));
        self.quorum = (cfg.mgmt.quorum as usize).max(1);
        self.peer_order = cfg.mgmt.peers.iter().map(|p| p.address_string()).collect();
        self.trusted = cfg
            .mgmt
            .peers
            .iter()
            .filter(|p| p.trusted)
            .map(|p| p.address_string())
            .collect();
        let order = self.peer_order.clone();
        self.peers.retain(|k, _| order.contains(k));
        for p in order {
            self.peers.entry(p).or_default();
        }
    }

    /// The (VIP, backend) keys of every probed backend with its VIP's health settings.
    pub fn targets(&self) -> Vec<(Key, Health)> {
        self.vips
            .iter()
            .flat_map(|v| {
                v.backends
                    .iter()
                    .map(|b| ((v.name.clone(), *b), v.health.clone()))
            })
            .collect()
    }

    fn spec(&self, vip: &str) -> Option<&VipSpec> {
        self.vips.iter().find(|v| v.name == vip)
    }

    /// Starts `key` down without data (border-mgmt restarted while the
    /// published tables had it down): it stays down until fresh results
    /// decide, and this checker needs `rise` successes to call it up.
    pub fn seed_down(&mut self, key: &Key, reason: &str, now: u64, unix_ms: u64) {
        if !self
            .spec(&key.0)
            .is_some_and(|v| v.backends.contains(&key.1))
        {
            return;
        }
        self.local.entry(key.clone()).or_default().state = Some(HealthState::Down);
        self.verdicts.insert(
            key.clone(),
            Verdict {
                state: HealthState::Down,
                no_data: true,
                weight: None,
                drain: false,
                weight_pct: None,
                reason: reason.to_string(),
                detail: String::new(),
                since_ms: now,
                since_unix_ms: unix_ms,
                changes_unix_ms: Vec::new(),
                checkers: Vec::new(),
            },
        );
    }

    /// Records this checker's probe result for `keys` (every VIP backend
    /// the probe stands for).
    pub fn local_result(&mut self, keys: &[Key], out: &ProbeOutcome, now: u64) {
        for k in keys {
            let Some((rise, fall)) = self.spec(&k.0).map(|v| (v.health.rise, v.health.fall)) else {
                continue;
            };
            if !self.spec(&k.0).is_some_and(|v| v.backends.contains(&k.1)) {
                continue;
            }
            self.local
                .entry(k.clone())
                .or_default()
                .record(out, rise, fall, now);
        }
    }

    /// Records what the backends' agent said for `keys` (every VIP backend
    /// the probe stands for).
    pub fn agent_result(&mut self, keys: &[Key], r: &AgentResult) {
        for k in keys {
            if !self.spec(&k.0).is_some_and(|v| v.backends.contains(&k.1)) {
                continue;
            }
            self.local.entry(k.clone()).or_default().record_agent(r);
        }
    }

    /// The ids of the trusted peers that have said who they are.
    fn trusted_ids(&self) -> BTreeSet<&str> {
        self.trusted
            .iter()
            .filter_map(|a| self.peers.get(a)?.id.as_deref())
            .filter(|id| *id != self.me)
            .collect()
    }

    /// This checker's observations (for peers).
    pub fn local_observations(&self) -> Vec<(Key, Observation)> {
        let mut v: Vec<_> = self
            .local
            .iter()
            .map(|(k, l)| (k.clone(), l.observation()))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// What peer `peer` (its configured address) reported: its id and its
    /// observations, with `at_ms` already on this engine's clock.
    pub fn peer_update(&mut self, peer: &str, id: &str, obs: Vec<(Key, Observation)>) {
        if let Some(p) = self.peers.get_mut(peer) {
            p.id = Some(id.to_string());
            p.error = None;
            p.obs = obs.into_iter().collect();
        }
    }

    /// Peer `peer` could not be reached. Its last observations stay (and go
    /// stale by themselves).
    pub fn peer_error(&mut self, peer: &str, error: &str) {
        if let Some(p) = self.peers.get_mut(peer) {
            p.error = Some(error.to_string());
        }
    }

    /// The verdict on a backend.
    pub fn verdict(&self, vip: &str, backend: SocketAddr) -> Option<&Verdict> {
        self.verdicts.get(&(vip.to_string(), backend))
    }

    /// Every verdict.
    pub fn verdicts(&self) -> &BTreeMap<Key, Verdict> {
        &self.verdicts
    }

    /// Per-VIP health.
    pub fn vip_health(&self) -> &BTreeMap<String, VipHealth> {
        &self.vip_health
    }

    /// Checkers: this one first, then peers in config order.
    pub fn witnesses(&self) -> Vec<Witness> {
        let mut out = Vec::new();
        if let Some(w) = self.witnesses.get(&self.me) {
            out.push(w.clone());
        }
        for addr in &self.peer_order {
            let p = &self.peers[addr];
            let id = p.id.clone().unwrap_or_default();
            let mut w = self
                .witnesses
                .get(&id)
                .filter(|w| w.address == *addr)
                .cloned()
                .unwrap_or_default();
            w.id = id;
            w.address = addr.clone();
            w.error = p.error.clone();
            out.push(w);
        }
        out
    }

    /// All observations by checker id: this checker first, then each peer
    /// with a new id (a second peer claiming an id already seen is not an
    /// independent checker and is left out).
    fn checkers(&self) -> Vec<Checker> {
        let mut out = vec![(
            self.me.clone(),
            "self".to_string(),
            self.local
                .iter()
                .map(|(k, l)| (k.clone(), l.observation()))
                .filter(|(_, o)| o.last_ok.is_some())
                .collect(),
            0,
        )];
        let mut seen: BTreeSet<String> = [self.me.clone()].into();
        for addr in &self.peer_order {
            let p = &self.peers[addr];
            let Some(id) = &p.id else { continue };
            if !seen.insert(id.clone()) {
                continue;
            }
            out.push((id.clone(), addr.clone(), p.obs.clone(), self.peer_slack_ms));
        }
        out
    }

    /// Recomputes every verdict at `now` (engine ms; `unix_ms` is the same
    /// instant in Unix ms). Returns what changed.
    pub fn evaluate(&mut self, now: u64, unix_ms: u64) -> Vec<Change> {
        let mut changes = Vec::new();
        let checkers = self.checkers();
        let fresh = Freshness {
            now,
            fresh_ms: self
                .vips
                .iter()
                .map(|v| (v.name.clone(), v.fresh_ms()))
                .collect(),
        };
        let witnesses = self.judge_witnesses(&checkers, &fresh);
        witness_changes(&self.witnesses, &witnesses, &mut changes);
        self.witnesses = witnesses;

        let mut verdicts = BTreeMap::new();
        let mut vip_health = BTreeMap::new();
        for v in &self.vips {
            let (weights, fallback) = self.header_weights(v, &fresh);
            let mut all_down = !v.backends.is_empty();
            for b in &v.backends {
                let key = (v.name.clone(), *b);
                let votes = self.votes(&key, &checkers, &fresh);
                let prev = self.verdicts.get(&key);
                let (mut state, mut no_data, mut reason, mut names) = self.decide(v, &votes, prev);
                let mut drain = false;
                let mut weight_pct = None;
                if let Some(a) = self.local.get(&key).and_then(|l| l.agent.as_ref()) {
                    let agent_only = v.health.kind == HealthKind::Agent;
                    if a.down || a.admin == AgentAdmin::Maint {
                        state = HealthState::Down;
                        no_data = false;
                        let what = if a.down { "" } else { " (maintenance)" };
                        reason = format!("down: the backend's agent says {:?}{what}", a.said);
                        names = vec![self.me.clone()];
                    } else if !a.said.is_empty() {
                        weight_pct = a.weight_pct;
                        if a.admin == AgentAdmin::Drain && state == HealthState::Up {
                            drain = true;
                            reason = format!(
                                "draining: the backend's agent says {:?}; {reason}",
                                a.said
                            );
                        } else if let (Some(p), HealthState::Up) = (a.weight_pct, state) {
                            reason.push_str(&format!("; agent weight {p}%"));
                        }
                    }
                    // Alone, the agent's failure is the probe's reason already;
                    // beside an active check it only says why the last answer stands.
                    if let (Some(e), false) = (&a.error, agent_only) {
                        reason.push_str(&format!("; agent: {e}"));
                        if !a.said.is_empty() {
                            reason.push_str(&format!(" (its last answer {:?} stands)", a.said));
                        }
                    }
                }
                if state == HealthState::Up {
                    all_down = false;
                }
                let (since_ms, since_unix_ms) = match prev {
                    Some(p) if p.state == state => (p.since_ms, p.since_unix_ms),
                    _ => (now, unix_ms),
                };
                let mut changes_unix_ms = prev.map_or_else(Vec::new, |p| p.changes_unix_ms.clone());
                if prev.is_some_and(|p| p.state != state) {
                    if changes_unix_ms.len() == RECENT_CHANGES {
                        changes_unix_ms.remove(0);
                    }
                    changes_unix_ms.push(unix_ms);
                }
                verdicts.insert(
                    key,
                    Verdict {
                        state,
                        no_data,
                        weight: weights.get(b).copied(),
                        drain,
                        weight_pct,
                        reason,
                        detail: votes.details.join("; "),
                        since_ms,
                        since_unix_ms,
                        changes_unix_ms,
                        checkers: names,
                    },
                );
            }
            let health = VipHealth {
                fail_open: all_down,
                weight_fallback: fallback,
            };
            if health.fail_open {
                for b in &v.backends {
                    if let Some(vd) = verdicts.get_mut(&(v.name.clone(), *b)) {
                        vd.reason.push_str(
                            "; VIP fails open: every backend is down, all stay in the ring",
                        );
                    }
                }
            }
            let before = self.vip_health.get(&v.name).cloned().unwrap_or_default();
            vip_changes(v, &before, &health, &mut changes);
            vip_health.insert(v.name.clone(), health);
        }
        for (k, vd) in &verdicts {
            let old = self.verdicts.get(k);
            let same = old.is_some_and(|o| {
                o.state == vd.state
                    && o.no_data == vd.no_data
                    && o.weight == vd.weight
                    && o.drain == vd.drain
                    && o.weight_pct == vd.weight_pct
                    && o.reason == vd.reason
            });
            if !same {
                changes.push(Change::Backend(k.clone()));
            }
        }
        self.verdicts = verdicts;
        self.vip_health = vip_health;
        changes
    }

    /// Witnesses: who fails at least half of what it checks while another
    /// checker sees those targets pass.
    fn judge_witnesses(
        &self,
        checkers: &[Checker],
        fresh: &Freshness,
    ) -> BTreeMap<String, Witness> {
        let mut witnesses: BTreeMap<String, Witness> = BTreeMap::new();
        let mut fresh_ok: HashMap<&Key, Vec<&str>> = HashMap::new();
        for (id, _, obs, slack) in checkers {
            for (k, o) in obs {
                if fresh.is_fresh(k, o, *slack) && o.last_ok == Some(true) {
                    fresh_ok.entry(k).or_default().push(id);
                }
            }
        }
        for (id, addr, obs, slack) in checkers {
            let mut checked = 0usize;
            let mut contradicted = 0usize;
            for (k, o) in obs {
                if !fresh.is_fresh(k, o, *slack) {
                    continue;
                }
                checked += 1;
                if o.last_ok == Some(false)
                    && fresh_ok
                        .get(k)
                        .is_some_and(|ids| ids.iter().any(|i| i != id))
                {
                    contradicted += 1;
                }
            }
            // At least half, and either everything or more than one target:
            // one disagreement about one of two backends is an opinion, not
            // a broken checker.
            let unreliable = (contradicted > 0
                && 2 * contradicted >= checked
                && (contradicted >= 2 || contradicted == checked))
                .then(|| {
                    format!(
                        "fails {contradicted} of {checked} targets that other checkers see pass"
                    )
                });
            witnesses.insert(
                id.clone(),
                Witness {
                    id: id.clone(),
                    address: addr.clone(),
                    fresh: checked > 0,
                    unreliable,
                    error: None,
                },
            );
        }
        witnesses
    }

    /// Weight header: the weights of VIP `v`'s backends, which apply only
    /// while every answering backend sends a valid value; otherwise none,
    /// and why (the fallback to configured weights).
    fn header_weights(
        &self,
        v: &VipSpec,
        fresh: &Freshness,
    ) -> (HashMap<SocketAddr, u32>, Option<String>) {
        let mut weights: HashMap<SocketAddr, u32> = HashMap::new();
        let mut fallback = None;
        if !v.health.weight_header {
            return (weights, fallback);
        }
        for b in &v.backends {
            let key = (v.name.clone(), *b);
            let Some(o) = self.local.get(&key).map(Local::observation) else {
                continue;
            };
            if !fresh.is_fresh(&key, &o, 0) || o.last_ok != Some(true) {
                continue;
            }
            match &o.weight {
                Some(WeightObs::Value(w)) => {
                    weights.insert(*b, *w);
                }
                Some(WeightObs::Invalid(why)) => {
                    fallback.get_or_insert_with(|| format!("{b}: {why}"));
                }
                None => {
                    fallback.get_or_insert_with(|| {
                        format!("{b}: no X-Load-Balancing-Endpoint-Weight header")
                    });
                }
            }
        }
        if fallback.is_some() {
            weights.clear();
        }
        (weights, fallback)
    }

    /// The fresh observations of backend `key` by every checker, sorted
    /// into votes.
    fn votes<'c>(&self, key: &Key, checkers: &'c [Checker], fresh: &Freshness) -> Votes<'c> {
        let multi = checkers_configured(&self.peer_order) > 1;
        let trusted = self.trusted_ids();
        let mut votes = Votes::default();
        for (id, _, obs, slack) in checkers {
            let Some(o) = obs.get(key) else { continue };
            let fresh = fresh.is_fresh(key, o, *slack);
            if fresh {
                votes.details.push(format!(
                    "{}{} {} x{}",
                    if multi {
                        format!("{id}: ")
                    } else {
                        String::new()
                    },
                    o.state.map_or("undecided", HealthState::as_str),
                    o.reason,
                    o.streak
                ));
            }
            if !fresh {
                continue;
            }
            // A trusted checker's votes count even when it looks like an
            // unreliable witness: the operator vouched for it.
            if trusted.contains(id.as_str()) {
                match o.state {
                    Some(HealthState::Down) => votes.trusted_down.push((id, o)),
                    Some(HealthState::Up) => votes.trusted_up.push((id, o)),
                    None => {}
                }
            } else if self
                .witnesses
                .get(id)
                .is_some_and(|w| w.unreliable.is_some())
            {
                votes.discarded.push(id);
                continue;
            }
            if o.state.is_some() {
                votes.voted.push(id);
            }
            match o.state {
                Some(HealthState::Down) => votes.down.push((id, o)),
                Some(HealthState::Up) => votes.up.push((id, o)),
                None => {}
            }
        }
        votes
    }

    /// A backend of VIP `v`'s state from the `votes` on it and its previous
    /// verdict: state, no-data flag, reason, and the checkers that decided.
    fn decide<'c>(
        &self,
        v: &VipSpec,
        votes: &Votes<'c>,
        prev: Option<&Verdict>,
    ) -> (HealthState, bool, String, Vec<String>) {
        let n_checkers = checkers_configured(&self.peer_order);
        let quorum = self.quorum;
        let multi = n_checkers > 1;
        let Votes {
            down,
            up,
            discarded,
            trusted_down,
            trusted_up,
            voted,
            ..
        } = votes;
        let silent = n_checkers - down.len() - up.len() - discarded.len();
        let prev_state = prev.map_or(HealthState::Up, |p| p.state);
        let (rise, fall) = (v.health.rise, v.health.fall);
        let failure = |o: &Observation| {
            if o.last_failure.is_empty() {
                o.reason.clone()
            } else {
                o.last_failure.clone()
            }
        };
        let votes = |l: &[(&str, &Observation)]| {
            l.iter()
                .map(|(id, o)| format!("{id}: {}", failure(o)))
                .collect::<Vec<_>>()
                .join("; ")
        };
        let side =
            |l: &[(&str, &Observation)]| l.iter().map(|(id, _)| *id).collect::<Vec<_>>().join(", ");
        let ids =
            |l: &[(&'c str, &'c Observation)]| l.iter().map(|(id, _)| *id).collect::<Vec<_>>();
        // The down votes reach the quorum but do not outnumber the up votes:
        // no majority either way (two checkers, one each way).
        let split = multi && down.len() >= quorum && !up.is_empty() && up.len() >= down.len();
        // A down verdict a trusted checker made, and that checker is silent now.
        let trusted_ids = self.trusted_ids();
        let trusted_silent = prev.is_some_and(|p| {
            p.checkers
                .iter()
                .any(|c| trusted_ids.contains(c.as_str()) && !voted.contains(&c.as_str()))
        });
        let (state, no_data, mut reason, names): (HealthState, bool, String, Vec<&str>) =
            if !trusted_down.is_empty() {
                let mut r = format!(
                    "down: trusted checker {} sees it fail, whatever the quorum: {}",
                    side(trusted_down),
                    votes(trusted_down)
                );
                if !up.is_empty() {
                    r.push_str(&format!("; {} see it pass", side(up)));
                }
                (HealthState::Down, false, r, ids(trusted_down))
            } else if split && !trusted_up.is_empty() {
                let r = format!(
                    "up: trusted checker {} sees it pass, deciding a split: {} see it fail ({}); {} see it pass",
                    side(trusted_up),
                    side(down),
                    votes(down),
                    side(up)
                );
                (HealthState::Up, false, r, ids(trusted_up))
            } else if split {
                let r = format!(
                    "split: {} see it fail ({}); {} see it pass; no majority either way, state kept ({}) until a trusted checker decides",
                    side(down),
                    votes(down),
                    side(up),
                    prev_state.as_str()
                );
                let mut names = ids(down);
                names.extend(ids(up));
                (prev_state, false, r, names)
            } else if down.len() >= quorum {
                let reason = if multi {
                    format!(
                        "down: {} of {n_checkers} checkers see it fail (quorum {quorum}): {}",
                        down.len(),
                        votes(down)
                    )
                } else {
                    let o = down[0].1;
                    let mut r = format!("down: {} ({fall} consecutive failures)", failure(o));
                    if o.last_ok == Some(true) {
                        r.push_str(&format!("; recovering: {} of {rise} successes", o.streak));
                    }
                    r
                };
                (
                    HealthState::Down,
                    false,
                    reason,
                    down.iter().map(|d| d.0).collect(),
                )
            } else if prev_state == HealthState::Down
                && (down.len() + silent >= quorum || trusted_silent)
            {
                (
                    HealthState::Down,
                    true,
                    kept_down_reason(prev),
                    prev.map(|p| p.checkers.iter().map(String::as_str).collect())
                        .unwrap_or_default(),
                )
            } else if up.is_empty() && down.is_empty() {
                let reason = if prev.is_none() {
                    "up (no data: no probe result yet)".to_string()
                } else {
                    "up (no data: no fresh probe result; state kept)".to_string()
                };
                (HealthState::Up, true, reason, Vec::new())
            } else {
                let reason = if multi {
                    let mut r = format!("up: {} of {n_checkers} checkers see it pass", up.len());
                    if !down.is_empty() {
                        r.push_str(&format!(
                            "; {} see it fail, fewer than quorum {quorum} ({})",
                            down.len(),
                            votes(down)
                        ));
                    }
                    r
                } else if let Some((_, o)) = up.first() {
                    if o.last_ok == Some(false) {
                        format!(
                            "up: {} ({} of {fall} failures to go down)",
                            o.reason, o.streak
                        )
                    } else {
                        format!("up: {}", o.reason)
                    }
                } else {
                    "up".to_string()
                };
                (
                    HealthState::Up,
                    false,
                    reason,
                    up.iter().map(|u| u.0).collect(),
                )
            };
        if !discarded.is_empty() {
            reason.push_str(&format!(
                "; votes discarded (unreliable witness): {}",
                discarded.join(", ")
            ));
        }
        let names = names.into_iter().map(str::to_string).collect();
        (state, no_data, reason, names)
    }
}

/// One checker's observations: its id, its address ("self" for this
/// one), what it observed, and the slack its results get on freshness.
type Checker = (String, String, HashMap<Key, Observation>, u64);

/// This checker and every configured peer.
fn checkers_configured(peer_order: &[String]) -> usize {
    1 + peer_order.len()
}

/// Whether an observation is recent enough to count, at one instant.
struct Freshness {
    now: u64,
    /// Per VIP name: how old a result may be.
    fresh_ms: HashMap<String, u64>,
}

impl Freshness {
    fn is_fresh(&self, k: &Key, o: &Observation, slack: u64) -> bool {
        o.last_ok.is_some()
            && self
                .fresh_ms
                .get(k.0.as_str())
                .is_some_and(|f| self.now.saturating_sub(o.at_ms) <= f + slack)
    }
}

/// The fresh votes on one backend.
#[derive(Default)]
struct Votes<'c> {
    down: Vec<(&'c str, &'c Observation)>,
    up: Vec<(&'c str, &'c Observation)>,
    /// Checkers whose votes do not count (unreliable witnesses).
    discarded: Vec<&'c str>,
    /// The trusted checkers' votes (also in `down`/`up`).
    trusted_down: Vec<(&'c str, &'c Observation)>,
    trusted_up: Vec<(&'c str, &'c Observation)>,
    /// Every checker with a fresh, counted vote.
    voted: Vec<&'c str>,
    /// Every fresh observation, in words.
    details: Vec<String>,
}

/// Why a down backend stays down without enough fresh results to decide.
fn kept_down_reason(prev: Option<&Verdict>) -> String {
    match prev {
        Some(p) if p.reason.starts_with("down") => {
            let base = p
                .reason
                .split(" (no data:")
                .next()
                .unwrap_or(&p.reason)
                .split("; VIP fails open")
                .next()
                .unwrap_or(&p.reason);
            format!("{base} (no data: not enough fresh results to decide; state kept)")
        }
        _ => "down (no data: not enough fresh results to decide; state kept)".to_string(),
    }
}

/// The witness changes from `before` to `after`.
fn witness_changes(
    before: &BTreeMap<String, Witness>,
    after: &BTreeMap<String, Witness>,
    changes: &mut Vec<Change>,
) {
    for (id, w) in after {
        let was = before.get(id).and_then(|o| o.unreliable.clone());
        if was != w.unreliable {
            changes.push(Change::Witness {
                checker: id.clone(),
                reason: w.unreliable.clone(),
            });
        }
    }
    for (id, w) in before {
        if w.unreliable.is_some() && !after.contains_key(id) {
            changes.push(Change::Witness {
                checker: id.clone(),
                reason: None,
            });
        }
    }
}

/// VIP `v`'s fail-open and weight-fallback changes from `before` to `after`.
fn vip_changes(v: &VipSpec, before: &VipHealth, after: &VipHealth, changes: &mut Vec<Change>) {
    if before.fail_open != after.fail_open {
        changes.push(Change::FailOpen {
            vip: v.name.clone(),
            on: after.fail_open,
            reason: if after.fail_open {
                format!(
                    "every backend of VIP {} is down: failing open, all {} stay in the ring",
                    v.name,
                    v.backends.len()
                )
            } else {
                format!("VIP {} has a healthy backend again: fail-open ends", v.name)
            },
        });
    }
    if before.weight_fallback != after.weight_fallback {
        changes.push(Change::WeightFallback {
            vip: v.name.clone(),
            reason: after.weight_fallback.clone(),
        });
    }
}
