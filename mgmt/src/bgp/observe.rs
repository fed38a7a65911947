//! What the BGP decision needs, read off the running config and the status
//! border-mgmt already computes (dataplane liveness, generations, backend
//! states, fail-open). Pure: tested on hand-made statuses.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use conf::{Announce, Config, Vip};

use conf::state::RunState;
use conf::tables::BackendState;

use super::reconcile::{Inputs, Route, VipRouteInput};
use crate::model::{DpSnap, Status, VipStatus};

/// The appliance's own address on the port whose subnet holds `vip`: the
/// next hop the routers send the VIP's traffic to.
pub fn next_hop(cfg: &Config, vip: IpAddr) -> Option<IpAddr> {
    cfg.ports
        .iter()
        .flat_map(|p| p.addresses.iter())
        .find(|n| n.contains(vip))
        .map(|n| n.addr)
}

/// The host route of `v` (`None` when no port address holds it, which a
/// validated config rules out).
pub fn route(cfg: &Config, v: &Vip) -> Option<Route> {
    let communities = cfg.mgmt.bgp.as_ref().map(|b| b.communities.clone());
    Some(Route {
        prefix: v.address,
        next_hop: next_hop(cfg, v.address)?,
        communities: communities.unwrap_or_default(),
    })
}

/// Every route the config could announce (what an earlier border-mgmt may
/// have left in gobgpd).
pub fn all_routes(cfg: &Config) -> Vec<Route> {
    cfg.vips
        .iter()
        .filter(|v| v.announce != Announce::Never)
        .filter_map(|v| route(cfg, v))
        .collect()
}

/// A worker whose heartbeat has not moved for this long is down for BGP.
/// Far stricter than the liveness grace that holds back table memory
/// (`--liveness-grace-ms`, 3 s): a withdraw must start within 1 s, and an
/// idle adaptive worker still beats every 10 ms (its longest sleep).
pub const HEARTBEAT_STALL: Duration = Duration::from_millis(500);

/// border-dp runs and every worker's heartbeat moves.
pub fn dataplane_alive(d: &DpSnap) -> bool {
    d.present
        && d.pid_alive
        && d.run_state == Some(RunState::Running)
        && !d.workers.is_empty()
        && d.workers
            .iter()
            .all(|w| w.alive && w.heartbeat_age < HEARTBEAT_STALL)
}

/// How long the workers may stay behind the published generation before
/// a `healthy` VIP is withdrawn. Every publish (a health verdict, an
/// operator's drain) leaves them behind for a moment, until they adopt it
/// within milliseconds; that moment must not flap the routes.
pub const ADOPTION_GRACE: Duration = Duration::from_secs(1);

/// Whether border-dp has adopted the current generation, with
/// [`ADOPTION_GRACE`]: remembers since when its workers are behind.
#[derive(Debug, Default)]
pub struct Adoption {
    behind_since: Option<Instant>,
}

impl Adoption {
    /// At `now`: every worker has adopted some generation, and none has
    /// been behind the published one for [`ADOPTION_GRACE`].
    pub fn adopted(&mut self, status: &Status, now: Instant) -> bool {
        let published = status.publisher.published_generation;
        let workers = &status.dataplane.workers;
        if published == 0 || workers.is_empty() || workers.iter().any(|w| w.applied_generation == 0)
        {
            self.behind_since = None;
            return false;
        }
        if workers.iter().all(|w| w.applied_generation >= published) {
            self.behind_since = None;
            return true;
        }
        let since = *self.behind_since.get_or_insert(now);
        now.saturating_duration_since(since) < ADOPTION_GRACE
    }
}

/// A backend takes new flows: up with a weight. A VIP in fail-open has none.
pub fn has_eligible_backend(v: &VipStatus) -> bool {
    !v.fail_open
        && v.backends
            .iter()
            .any(|b| b.state == BackendState::Up && b.weight > 0)
}

/// How long a VIP's condition must hold before it is announced again.
pub fn rise(v: &Vip) -> Duration {
    v.health.as_ref().map_or(Duration::ZERO, |h| {
        Duration::from_millis(u64::from(h.rise) * u64::from(h.interval_ms))
    })
}

/// The decision's inputs from the config and a status taken at the same time.
/// `generation_adopted`: from [`Adoption::adopted`].
pub fn inputs(
    cfg: &Config,
    status: &Status,
    maintenance: bool,
    generation_adopted: bool,
) -> Inputs {
    let vips = cfg
        .vips
        .iter()
        .filter_map(|v| {
            let eligible = status
                .vips
                .iter()
                .find(|s| s.name == v.name)
                .is_some_and(has_eligible_backend);
            Some(VipRouteInput {
                name: v.name.clone(),
                route: route(cfg, v)?,
                announce: v.announce,
                eligible,
                rise: rise(v),
            })
        })
        .collect();
    Inputs {
        dataplane_alive: dataplane_alive(&status.dataplane),
        generation_adopted,
        maintenance,
        vips,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"
instance = "t"
[dataplane]
worker_lcores = [1]
flow_hash_key = "00112233445566778899aabbccddeeff"
[[port]]
name = "ext"
devargs = "net_tap0,iface=b-ext"
addresses = ["10.71.0.1/24", "10.71.9.1/24"]
[mgmt.bgp]
communities = ["65000:100"]
[[vip]]
name = "web"
address = "10.71.9.100"
port = 80
mode = "dnat"
[vip.health]
kind = "tcp"
interval_ms = 300
timeout_ms = 200
rise = 3
[[vip.backend]]
address = "10.71.9.11"
port = 8080
"#;

    fn cfg() -> Config {
        Config::from_toml_str(CONFIG, "t.toml").unwrap()
    }

    fn status(alive: bool, applied: u64, backend: BackendState, fail_open: bool) -> Status {
        let c = cfg();
        Status {
            instance: "t".into(),
            zone: None,
            publisher: crate::model::PublisherStatus {
                tables_path: "/dev/shm/x".into(),
                published_generation: 4,
                arena_bytes: 0,
                arena_free_bytes: 0,
                pending: None,
                last_error: None,
                config_origin: String::new(),
                config_applied_unix_ms: 0,
                config_restored_from: None,
                state_dir: None,
            },
            dataplane: DpSnap {
                present: true,
                problem: None,
                pid: 1,
                pid_alive: true,
                run_state: Some(RunState::Running),
                workers: vec![crate::model::WorkerSnap {
                    lcore: 1,
                    applied_generation: applied,
                    heartbeat: 1,
                    alive,
                    heartbeat_age: Duration::ZERO,
                }],
            },
            findings: Vec::new(),
            vips: vec![VipStatus {
                name: "web".into(),
                address: "10.71.9.100:80".parse().unwrap(),
                protocol: c.vips[0].protocol,
                mode: c.vips[0].mode,
                fail_open,
                zone_local: false,
                backends: vec![crate::model::BackendStatus {
                    address: "10.71.9.11:8080".parse().unwrap(),
                    id: 1,
                    state: backend,
                    reason: String::new(),
                    weight: 1,
                    config_weight: 1,
                    weight_overridden: false,
                    drained: false,
                    killed: false,
                    ring_slots: 1,
                    zone: None,
                }],
            }],
            bgp: None,
            records: None,
        }
    }

    #[test]
    fn workers_behind_a_new_generation_count_as_adopted_for_a_grace() {
        let t0 = Instant::now();
        let mut a = Adoption::default();
        assert!(a.adopted(&status(true, 4, BackendState::Up, false), t0));
        // A publish: the workers are one behind for a moment.
        let behind = status(true, 3, BackendState::Up, false);
        assert!(a.adopted(&behind, t0 + Duration::from_millis(10)));
        assert!(a.adopted(&behind, t0 + Duration::from_millis(900)));
        assert!(
            !a.adopted(&behind, t0 + Duration::from_millis(1100)),
            "behind for over 1 s"
        );
        assert!(a.adopted(
            &status(true, 4, BackendState::Up, false),
            t0 + Duration::from_millis(1200)
        ));
        // The grace starts over with the next lag.
        assert!(a.adopted(&behind, t0 + Duration::from_millis(1300)));
        // A worker that never adopted a generation (border-dp starting).
        assert!(!a.adopted(&status(true, 0, BackendState::Up, false), t0));
    }

    #[test]
    fn route_is_the_vip_via_the_port_address_of_its_subnet() {
        let c = cfg();
        let r = route(&c, &c.vips[0]).unwrap();
        assert_eq!(r.prefix_string(), "10.71.9.100/32");
        assert_eq!(r.next_hop, "10.71.9.1".parse::<IpAddr>().unwrap());
        assert_eq!(r.communities, [65000 << 16 | 100]);
    }

    #[test]
    fn inputs_follow_the_status() {
        let c = cfg();
        let i = inputs(&c, &status(true, 4, BackendState::Up, false), true, true);
        assert!(i.dataplane_alive && i.generation_adopted && i.maintenance);
        assert!(i.vips[0].eligible);
        assert_eq!(i.vips[0].rise, Duration::from_millis(900));

        let i = inputs(&c, &status(false, 3, BackendState::Up, false), false, false);
        assert!(!i.dataplane_alive && !i.generation_adopted);
        let mut stalled = status(true, 4, BackendState::Up, false);
        stalled.dataplane.workers[0].heartbeat_age = Duration::from_millis(600);
        assert!(
            !inputs(&c, &stalled, false, true).dataplane_alive,
            "a heartbeat still for 600 ms is down for BGP, before the 3 s liveness grace"
        );
        let i = inputs(&c, &status(true, 4, BackendState::Down, false), false, true);
        assert!(!i.vips[0].eligible, "the only backend is down");
        let i = inputs(&c, &status(true, 4, BackendState::Up, true), false, true);
        assert!(
            !i.vips[0].eligible,
            "fail-open counts as no eligible backend"
        );
        let mut none = status(true, 4, BackendState::Up, false);
        none.dataplane = DpSnap::default();
        none.vips.clear();
        let i = inputs(&c, &none, false, false);
        assert!(
            !i.dataplane_alive && !i.vips[0].eligible,
            "no dataplane at all"
        );
    }
}
