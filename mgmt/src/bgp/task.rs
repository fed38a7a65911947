//! The tokio task that keeps gobgpd's table equal to what
//! [`Reconciler`] wants: it looks every [`TICK`] (and at once when woken:
//! maintenance, shutdown), runs the planned AddPath/DeletePath calls, reads
//! the neighbours' sessions and checks that gobgpd still holds our routes
//! (a restarted gobgpd has forgotten them). A failing gobgpd is retried with
//! capped exponential backoff and full jitter; forwarding never waits on it.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::gobgp::{self, apipb, Client};
use super::observe;
use super::reconcile::{shown, Op, Reconciler, Verdict, Why};
use super::state::BgpEvent;
use super::state::{BgpShared, BgpView, NeighbourView, VipRouteView};
use crate::backoff::Backoff;
use crate::manager::Manager;
use crate::model::EventKind;

/// How often the task looks without being woken: a withdraw reaches
/// gobgpd within this plus one call (well under 1 s).
pub const TICK: Duration = Duration::from_millis(200);
/// How often neighbours are read and our routes checked in gobgpd.
pub const VERIFY_EVERY: Duration = Duration::from_secs(1);
/// First retry ceiling, and the cap, after gobgpd fails.
pub const BACKOFF_BASE: Duration = Duration::from_millis(200);
/// See [`BACKOFF_BASE`].
pub const BACKOFF_CAP: Duration = Duration::from_secs(5);

/// Starts the task when `[mgmt.bgp]` is set. It runs until `shutdown`.
pub fn attach(m: Arc<Manager>, shutdown: watch::Receiver<bool>) {
    let Some(cfg) = m.config().mgmt.bgp else {
        return;
    };
    tokio::spawn(run(m, cfg.api, shutdown));
}

/// One failed call.
struct Failure(String);

fn failure(api: SocketAddr, what: &str, s: tonic::Status) -> Failure {
    let msg = s.message().lines().next().unwrap_or("").to_string();
    Failure(format!("gobgpd {api}: {what}: {:?}: {msg}", s.code()))
}

struct Task {
    m: Arc<Manager>,
    shared: Arc<BgpShared>,
    api: SocketAddr,
    client: Client,
    rec: Reconciler,
    adoption: observe::Adoption,
    backoff: Backoff,
    /// gobgpd calls failed in a row (the backoff's step).
    failures: u32,
    retry_at: Option<Instant>,
    verify_at: Instant,
    view: BgpView,
}

async fn run(m: Arc<Manager>, api: SocketAddr, mut shutdown: watch::Receiver<bool>) {
    let shared = m.bgp().clone();
    let known = observe::all_routes(&m.config());
    let mut t = Task {
        shared: shared.clone(),
        api,
        client: gobgp::client(api),
        rec: Reconciler::new(known),
        adoption: observe::Adoption::default(),
        backoff: Backoff {
            base: BACKOFF_BASE,
            cap: BACKOFF_CAP,
        },
        failures: 0,
        retry_at: None,
        verify_at: Instant::now(),
        view: BgpView {
            api: api.to_string(),
            ..BgpView::default()
        },
        m,
    };
    tracing::info!(api = %api, "BGP: driving gobgpd");
    loop {
        let done = t.round().await;
        if done {
            let _ = shared.withdrawn.send(true);
            return;
        }
        tokio::select! {
            _ = shared.wake.notified() => {}
            _ = tokio::time::sleep(TICK) => {}
            r = shutdown.changed() => if r.is_err() || *shutdown.borrow() {
                // Stopped without the withdraw handshake (the API server
                // ended): withdraw what we can, once.
                shared.begin_stop();
                let _ = t.round().await;
                let _ = shared.withdrawn.send(true);
                return;
            },
        }
    }
}

impl Task {
    /// Looks, decides, calls gobgpd. Returns true when shutting down and
    /// everything is withdrawn (or gobgpd cannot be reached to do it).
    async fn round(&mut self) -> bool {
        let m = self.m.clone();
        let Ok((cfg, status)) = tokio::task::spawn_blocking(move || (m.config(), m.status())).await
        else {
            return false;
        };
        let now = Instant::now();
        let stopping = self.shared.stopping();
        let adopted = self.adoption.adopted(&status, now);
        let inputs = observe::inputs(&cfg, &status, self.shared.maintenance(), adopted);
        let mut verdicts = self.rec.decide(&inputs, now);
        if stopping {
            for v in &mut verdicts {
                v.why = Why::ShuttingDown;
            }
        }
        let ops = self.rec.plan(&verdicts);
        let mut failed = None;
        if self.retry_at.is_none_or(|at| now >= at) {
            if let Err(f) = self.apply(&ops).await {
                failed = Some(f);
            } else if stopping {
                // Withdrawn: nothing more to verify.
            } else if now >= self.verify_at {
                self.verify_at = now + VERIFY_EVERY;
                if let Err(f) = self.verify().await {
                    failed = Some(f);
                }
            }
            match failed {
                Some(f) => self.failed(f),
                None => self.succeeded(),
            }
        }
        self.show(&verdicts);
        stopping && (self.rec.withdraw_all().is_empty() || !self.view.connected)
    }

    /// Runs `ops` in order; stops at the first failure.
    async fn apply(&mut self, ops: &[Op]) -> Result<(), Failure> {
        for op in ops {
            let r = match op {
                Op::Add(route) => self
                    .client
                    .add_path(gobgp::add_request(route))
                    .await
                    .map(|_| ())
                    .map_err(|s| {
                        failure(self.api, &format!("AddPath {}", route.prefix_string()), s)
                    }),
                Op::Delete(route) => self
                    .client
                    .delete_path(gobgp::delete_request(route))
                    .await
                    .map(|_| ())
                    .map_err(|s| {
                        failure(
                            self.api,
                            &format!("DeletePath {}", route.prefix_string()),
                            s,
                        )
                    }),
            };
            r?;
            match op {
                Op::Add(r) => {
                    tracing::info!(prefix = %r.prefix_string(), next_hop = %r.next_hop, "BGP: announced")
                }
                Op::Delete(r) => tracing::info!(prefix = %r.prefix_string(), "BGP: withdrawn"),
            }
            self.rec.done(op);
        }
        Ok(())
    }

    /// Reads the neighbours, and checks gobgpd still holds every route we
    /// installed (if not, it restarted: everything goes again).
    async fn verify(&mut self) -> Result<(), Failure> {
        let mut stream = self
            .client
            .list_peer(apipb::ListPeerRequest::default())
            .await
            .map_err(|s| failure(self.api, "ListPeer", s))?
            .into_inner();
        let mut neighbours = Vec::new();
        while let Some(r) = stream
            .message()
            .await
            .map_err(|s| failure(self.api, "ListPeer", s))?
        {
            let Some(st) = r.peer.and_then(|p| p.state) else {
                continue;
            };
            neighbours.push(NeighbourView {
                address: st.neighbor_address.clone(),
                peer_asn: st.peer_asn,
                state: gobgp::session_state_name(st.session_state).to_string(),
            });
        }
        neighbours.sort_by(|a, b| a.address.cmp(&b.address));
        self.neighbours(neighbours);

        let installed: Vec<_> = self.rec.installed().cloned().collect();
        for family_v4 in [true, false] {
            let mine: Vec<_> = installed
                .iter()
                .filter(|r| r.prefix.is_ipv4() == family_v4)
                .collect();
            if mine.is_empty() {
                continue;
            }
            let held = self.list_prefixes(&mine).await?;
            if mine.iter().any(|r| !held.contains(&r.prefix_string())) {
                tracing::warn!(api = %self.api, "BGP: gobgpd no longer holds our routes (restarted?): announcing them again");
                self.rec.lost_gobgpd();
                return Ok(());
            }
        }
        Ok(())
    }

    /// The prefixes of `routes` that gobgpd's global table holds.
    async fn list_prefixes(
        &mut self,
        routes: &[&super::reconcile::Route],
    ) -> Result<BTreeSet<String>, Failure> {
        let req = apipb::ListPathRequest {
            table_type: apipb::TableType::Global as i32,
            family: gobgp::add_request(routes[0]).path.and_then(|p| p.family),
            prefixes: routes
                .iter()
                .map(|r| apipb::TableLookupPrefix {
                    prefix: r.prefix_string(),
                    r#type: apipb::table_lookup_prefix::Type::Exact as i32,
                })
                .collect(),
            ..Default::default()
        };
        let mut stream = self
            .client
            .list_path(req)
            .await
            .map_err(|s| failure(self.api, "ListPath", s))?
            .into_inner();
        let mut held = BTreeSet::new();
        while let Some(r) = stream
            .message()
            .await
            .map_err(|s| failure(self.api, "ListPath", s))?
        {
            if let Some(d) = r.destination {
                if !d.paths.is_empty() {
                    held.insert(d.prefix);
                }
            }
        }
        Ok(held)
    }

    fn failed(&mut self, f: Failure) {
        self.failures = self.failures.saturating_add(1);
        let wait = self.backoff.wait(self.failures, fastrand::f64());
        self.retry_at = Some(Instant::now() + wait);
        self.rec.lost_gobgpd();
        self.view.errors += 1;
        self.view.retry_in_ms = wait.as_millis() as u64;
        if self.view.connected || self.view.last_error.as_deref() != Some(&f.0) {
            tracing::warn!(error = %f.0, retry_in_ms = self.view.retry_in_ms, "BGP: gobgpd call failed; retrying with backoff (forwarding is unaffected)");
        }
        if self.view.connected || self.view.errors == 1 {
            self.event("gobgpd", &self.api.to_string(), "unreachable", &f.0);
        }
        self.view.connected = false;
        self.view.last_error = Some(f.0);
        // Sessions are unknown while gobgpd cannot be asked.
        self.neighbours(Vec::new());
    }

    fn succeeded(&mut self) {
        if !self.view.connected {
            tracing::info!(api = %self.api, "BGP: gobgpd connected");
            self.event("gobgpd", &self.api.to_string(), "connected", "");
        }
        self.failures = 0;
        self.retry_at = None;
        self.view.connected = true;
        self.view.last_error = None;
        self.view.retry_in_ms = 0;
    }

    fn neighbours(&mut self, now: Vec<NeighbourView>) {
        for n in &now {
            let before = self.view.neighbours.iter().find(|o| o.address == n.address);
            if before.is_none_or(|o| o.state != n.state) {
                tracing::info!(neighbour = %n.address, state = %n.state, "BGP: neighbour session");
                self.event("neighbour", &n.address, &n.state, "");
            }
        }
        self.view.neighbours = now;
    }

    /// Publishes the view; one event per VIP whose announced state changed.
    fn show(&mut self, verdicts: &[Verdict]) {
        let up = self.view.connected;
        let vips: Vec<VipRouteView> = verdicts
            .iter()
            .map(|v| {
                let (announced, reason) = shown(v, self.rec.is_installed(&v.route), up);
                VipRouteView {
                    name: v.name.clone(),
                    prefix: v.route.prefix_string(),
                    next_hop: v.route.next_hop.to_string(),
                    announced,
                    reason: reason.to_string(),
                }
            })
            .collect();
        for v in &vips {
            let before = self.view.vips.iter().find(|o| o.name == v.name);
            if before.is_none_or(|o| o.announced != v.announced || o.reason != v.reason) {
                let state = if v.announced {
                    "announced"
                } else {
                    "withdrawn"
                };
                self.event("vip", &v.name, state, &v.reason);
            }
        }
        self.view.vips = vips;
        self.shared.set_view(self.view.clone());
    }

    fn event(&self, what: &str, subject: &str, state: &str, reason: &str) {
        self.m.emit(EventKind::Bgp(BgpEvent {
            what: what.into(),
            subject: subject.into(),
            state: state.into(),
            reason: reason.into(),
        }));
    }
}
