//! BGP: border-mgmt announces each VIP as a host route through a local
//! gobgpd, and withdraws it when the appliance can no longer serve it
//! (docs/bgp.md).
//!
//! - [`reconcile`]: the pure decision (which routes, which calls);
//! - [`crate::backoff`]: the retry schedule for a failing gobgpd;
//! - [`gobgp`]: gobgpd's generated client and the requests border sends;
//! - [`observe`]: what the decision needs, read off the [`crate::Manager`];
//! - [`task`]: the tokio task that runs it all against gobgpd.

pub mod gobgp;
pub mod observe;
pub mod reconcile;
pub mod state;
pub mod task;

pub use state::{BgpEvent, BgpReport, BgpShared, BgpView, NeighbourView, VipRouteView};
pub mod metrics;
pub mod service;

/// GetStatus's `bgp` (`None` without `[mgmt.bgp]`): the view, and while
/// in maintenance the connections border-dp still holds (what the operator
/// waits for).
pub fn report(m: &crate::Manager) -> Option<BgpReport> {
    let shared = m.bgp();
    if !shared.configured() {
        return None;
    }
    let maintenance = shared.maintenance();
    let active_connections = if maintenance {
        m.stats()
            .vips
            .iter()
            .map(|v| v.flows.active_connections)
            .sum()
    } else {
        0
    };
    Some(BgpReport {
        view: shared.view(),
        maintenance,
        active_connections,
    })
}
