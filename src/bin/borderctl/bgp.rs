//! The BGP part of `borderctl status` (GetStatus's `bgp`): gobgpd's
//! connection, each neighbour's session, and per VIP announced or withdrawn
//! with the reason.

use mgmt::pb;
use serde::Serialize;

use crate::output::{plural, yes_no, Table, Text};

#[derive(Debug, Serialize)]
pub struct BgpView {
    pub api: String,
    pub connected: bool,
    pub last_error: String,
    pub errors: u64,
    pub retry_in_ms: u64,
    pub maintenance: bool,
    /// Connections border-dp still holds (shown in maintenance).
    pub active_connections: u64,
    pub neighbours: Vec<NeighbourView>,
    pub vips: Vec<VipRouteView>,
}

#[derive(Debug, Serialize)]
pub struct NeighbourView {
    pub address: String,
    pub peer_asn: u32,
    pub state: String,
}

#[derive(Debug, Serialize)]
pub struct VipRouteView {
    pub name: String,
    pub prefix: String,
    pub next_hop: String,
    pub announced: bool,
    pub reason: String,
}

impl BgpView {
    /// `None` without `[mgmt.bgp]`.
    pub fn from_pb(b: Option<&pb::BgpStatus>) -> Option<BgpView> {
        let b = b.filter(|b| b.configured)?;
        Some(BgpView {
            api: b.api.clone(),
            connected: b.connected,
            last_error: b.last_error.clone(),
            errors: b.errors,
            retry_in_ms: b.retry_in_ms,
            maintenance: b.maintenance,
            active_connections: b.active_connections,
            neighbours: b
                .neighbours
                .iter()
                .map(|n| NeighbourView {
                    address: n.address.clone(),
                    peer_asn: n.peer_asn,
                    state: n.state.clone(),
                })
                .collect(),
            vips: b
                .vips
                .iter()
                .map(|v| VipRouteView {
                    name: v.name.clone(),
                    prefix: v.prefix.clone(),
                    next_hop: v.next_hop.clone(),
                    announced: v.announced,
                    reason: v.reason.clone(),
                })
                .collect(),
        })
    }

    /// The lines and tables under the status summary.
    pub fn render(&self, t: &mut Text) {
        if self.connected {
            t.line(format!("gobgpd        {}: connected", self.api));
        } else {
            t.line(format!(
                "gobgpd        {}: UNREACHABLE ({} failed call{}; retry in {} ms): {}",
                self.api,
                self.errors,
                plural(self.errors as usize),
                self.retry_in_ms,
                self.last_error
            ));
        }
        if self.maintenance {
            t.line(format!(
                "maintenance   ON: every VIP withdrawn; {} connection{} still established",
                self.active_connections,
                plural(self.active_connections as usize)
            ));
        }
        if !self.neighbours.is_empty() {
            t.blank();
            let mut n = Table::new(&[("NEIGHBOUR", false), ("AS", true), ("SESSION", false)]);
            for x in &self.neighbours {
                n.row(vec![
                    x.address.clone(),
                    x.peer_asn.to_string(),
                    x.state.clone(),
                ]);
            }
            t.table(&n);
        }
        if !self.vips.is_empty() {
            t.blank();
            let mut r = Table::new(&[
                ("VIP", false),
                ("ROUTE", false),
                ("NEXT HOP", false),
                ("ANNOUNCED", false),
                ("REASON", false),
            ]);
            for v in &self.vips {
                r.row(vec![
                    v.name.clone(),
                    v.prefix.clone(),
                    v.next_hop.clone(),
                    yes_no(v.announced),
                    v.reason.clone(),
                ]);
            }
            t.table(&r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(connected: bool) -> pb::BgpStatus {
        pb::BgpStatus {
            configured: true,
            api: "127.0.0.1:50051".into(),
            connected,
            last_error: if connected {
                String::new()
            } else {
                "gobgpd 127.0.0.1:50051: ListPeer: Unavailable: tcp connect error".into()
            },
            errors: if connected { 0 } else { 3 },
            retry_in_ms: if connected { 0 } else { 640 },
            maintenance: true,
            active_connections: 12,
            neighbours: vec![pb::BgpNeighbour {
                address: "10.71.0.254".into(),
                peer_asn: 65100,
                state: "established".into(),
            }],
            vips: vec![pb::VipRoute {
                name: "web".into(),
                prefix: "10.71.9.100/32".into(),
                next_hop: "10.71.0.1".into(),
                announced: false,
                reason: "maintenance".into(),
            }],
        }
    }

    #[test]
    fn status_shows_gobgpd_maintenance_neighbours_and_routes() {
        let mut t = Text::default();
        BgpView::from_pb(Some(&fixture(true)))
            .unwrap()
            .render(&mut t);
        let want = "\
gobgpd        127.0.0.1:50051: connected
maintenance   ON: every VIP withdrawn; 12 connections still established

NEIGHBOUR       AS  SESSION
10.71.0.254  65100  established

VIP  ROUTE           NEXT HOP   ANNOUNCED  REASON
web  10.71.9.100/32  10.71.0.1  no         maintenance";
        assert_eq!(t.to_string(), want);
    }

    #[test]
    fn status_says_gobgpd_is_unreachable_and_why() {
        let mut t = Text::default();
        BgpView::from_pb(Some(&fixture(false)))
            .unwrap()
            .render(&mut t);
        assert!(t.to_string().starts_with(
            "gobgpd        127.0.0.1:50051: UNREACHABLE (3 failed calls; retry in 640 ms): gobgpd 127.0.0.1:50051: ListPeer: Unavailable: tcp connect error"
        ));
        let v = serde_json::to_value(BgpView::from_pb(Some(&fixture(false))).unwrap()).unwrap();
        assert_eq!(v["connected"], false);
        assert_eq!(v["vips"][0]["reason"], "maintenance");
        assert_eq!(v["neighbours"][0]["state"], "established");
    }

    #[test]
    fn nothing_without_bgp() {
        assert!(BgpView::from_pb(None).is_none());
        assert!(BgpView::from_pb(Some(&pb::BgpStatus::default())).is_none());
    }
}
