//! What the BGP decision needs, read off the running config and the status
//! border-mgmt already computes (dataplane liveness, generations, backend
//! states, fail-open). Pure: tested on hand-made statuses.

use std::net::IpAddr;
use std::time::Duration;

use conf::{Announce, Config, Vip};

use super::reconcile::{Inputs, Route, VipInput};
use crate::pb;

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

/// border-dp runs and every worker's heartbeat moves.
pub fn dataplane_alive(dp: Option<&pb::DataplaneStatus>) -> bool {
    dp.is_some_and(|d| {
        d.present
            && d.pid_alive
            && d.run_state == "running"
            && !d.workers.is_empty()
            && d.workers.iter().all(|w| w.alive)
    })
}

/// Every worker has adopted the published generation.
pub fn generation_adopted(status: &pb::GetStatusResponse) -> bool {
    let published = status
        .publisher
        .as_ref()
        .map_or(0, |p| p.published_generation);
    let workers = status
        .dataplane
        .as_ref()
        .map_or(&[][..], |d| &d.workers[..]);
    published > 0
        && !workers.is_empty()
        && workers.iter().all(|w| w.applied_generation >= published)
}

/// A backend takes new flows: up with a weight. A VIP in fail-open has none.
pub fn has_eligible_backend(v: &pb::VipStatus) -> bool {
    !v.fail_open
        && v.backends
            .iter()
            .any(|b| b.state == pb::BackendState::Up as i32 && b.weight > 0)
}

/// How long a VIP's condition must hold before it is announced again.
pub fn rise(v: &Vip) -> Duration {
    v.health.as_ref().map_or(Duration::ZERO, |h| {
        Duration::from_millis(u64::from(h.rise) * u64::from(h.interval_ms))
    })
}

/// The decision's inputs from the config and a status taken at the same time.
pub fn inputs(cfg: &Config, status: &pb::GetStatusResponse, maintenance: bool) -> Inputs {
    let vips = cfg
        .vips
        .iter()
        .filter_map(|v| {
            let eligible = status
                .vips
                .iter()
                .find(|s| s.name == v.name)
                .is_some_and(has_eligible_backend);
            Some(VipInput {
                name: v.name.clone(),
                route: route(cfg, v)?,
                announce: v.announce,
                eligible,
                rise: rise(v),
            })
        })
        .collect();
    Inputs {
        dataplane_alive: dataplane_alive(status.dataplane.as_ref()),
        generation_adopted: generation_adopted(status),
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

    fn status(
        alive: bool,
        applied: u64,
        backend: pb::BackendState,
        fail_open: bool,
    ) -> pb::GetStatusResponse {
        pb::GetStatusResponse {
            publisher: Some(pb::PublisherStatus {
                published_generation: 4,
                ..Default::default()
            }),
            dataplane: Some(pb::DataplaneStatus {
                present: true,
                pid_alive: true,
                run_state: "running".into(),
                workers: vec![pb::WorkerStatus {
                    alive,
                    applied_generation: applied,
                    ..Default::default()
                }],
                ..Default::default()
            }),
            vips: vec![pb::VipStatus {
                name: "web".into(),
                fail_open,
                backends: vec![pb::BackendStatus {
                    state: backend as i32,
                    weight: 1,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }
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
        let i = inputs(&c, &status(true, 4, pb::BackendState::Up, false), true);
        assert!(i.dataplane_alive && i.generation_adopted && i.maintenance);
        assert!(i.vips[0].eligible);
        assert_eq!(i.vips[0].rise, Duration::from_millis(900));

        let i = inputs(&c, &status(false, 3, pb::BackendState::Up, false), false);
        assert!(!i.dataplane_alive && !i.generation_adopted);
        let i = inputs(&c, &status(true, 4, pb::BackendState::Down, false), false);
        assert!(!i.vips[0].eligible, "the only backend is down");
        let i = inputs(&c, &status(true, 4, pb::BackendState::Up, true), false);
        assert!(
            !i.vips[0].eligible,
            "fail-open counts as no eligible backend"
        );
        let i = inputs(&c, &pb::GetStatusResponse::default(), false);
        assert!(
            !i.dataplane_alive && !i.vips[0].eligible,
            "no dataplane at all"
        );
    }
}
