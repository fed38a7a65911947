//! The BGP families of the Prometheus exporter, rendered from the status's
//! BGP report (nothing without `[mgmt.bgp]`). States are values, not
//! labels: a neighbour's session state is a number, and a series keeps its
//! labels for as long as its neighbour or VIP is configured.

use crate::prom::Exposition;

use super::BgpReport;

/// A session state as `border_bgp_neighbour_state` exports it: the BGP FSM
/// states numbered as in RFC 4271's order and BGP4-MIB's `bgpPeerState`
/// (and gobgp's `SessionState`), 0 for a state gobgpd did not name.
pub fn session_state_value(state: &str) -> u64 {
    match state {
        "idle" => 1,
        "connect" => 2,
        "active" => 3,
        "opensent" => 4,
        "openconfirm" => 5,
        "established" => 6,
        _ => 0,
    }
}

/// The text of every BGP family.
pub fn render(o: &mut Exposition, bgp: Option<&BgpReport>) {
    let Some(r) = bgp else {
        return;
    };
    let b = &r.view;
    o.family(
        "border_bgp_gobgpd_up",
        "gauge",
        "1 while the last call to gobgpd's API succeeded",
    );
    o.sample(
        "border_bgp_gobgpd_up",
        &[("api", &b.api)],
        u8::from(b.connected),
    );
    o.one(
        "border_bgp_gobgpd_errors_total",
        "counter",
        "calls to gobgpd that failed (unreachable, refused, garbage)",
        b.errors,
    );
    o.gauge(
        "border_bgp_maintenance",
        "1 while borderctl maintenance is on (every VIP withdrawn)",
        u64::from(r.maintenance),
    );
    o.family(
        "border_bgp_neighbour_state",
        "gauge",
        "the BGP session state with the neighbour: 0 unknown, 1 idle, 2 connect, 3 active, 4 opensent, 5 openconfirm, 6 established",
    );
    for n in &b.neighbours {
        o.sample(
            "border_bgp_neighbour_state",
            &[("neighbour", &n.address)],
            session_state_value(&n.state),
        );
    }
    o.family(
        "border_bgp_neighbour_established",
        "gauge",
        "1 while the BGP session with the neighbour is established, else 0",
    );
    for n in &b.neighbours {
        o.sample(
            "border_bgp_neighbour_established",
            &[("neighbour", &n.address)],
            u8::from(n.state == "established"),
        );
    }
    o.family(
        "border_bgp_vip_announced",
        "gauge",
        "1 while gobgpd holds the VIP's host route, else 0 (why: borderctl status, the BGP events)",
    );
    for v in &b.vips {
        o.sample(
            "border_bgp_vip_announced",
            &[("vip", &v.name), ("prefix", &v.prefix)],
            u8::from(v.announced),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_gobgp_names_has_its_own_value() {
        let names = [
            "idle",
            "connect",
            "active",
            "opensent",
            "openconfirm",
            "established",
        ];
        for (i, n) in names.iter().enumerate() {
            assert_eq!(session_state_value(n), i as u64 + 1, "{n}");
            assert_eq!(
                crate::bgp::gobgp::session_state_name(i as i32 + 1),
                *n,
                "gobgp's numbering"
            );
        }
        assert_eq!(session_state_value("unknown"), 0);
    }
}
