//! What border-dp shows about its ports while it runs: the ports by name
//! for the statistics copier, and its commands on DPDK's telemetry socket
//! ([`crate::telemetry`]).

use std::sync::Arc;

use conf::state::{PortRole, StateRegion};
use conf::Config;
use tracing::{info, warn};

use super::ports::StartedPorts;
use crate::plan::EalPlan;
use crate::port_stats::StatPort;

/// Registers border-dp's telemetry commands (crate::telemetry) over the
/// state region and the started ports; a failure costs only telemetry.
pub(super) fn start_telemetry(
    cfg: &Config,
    ports: &[StatPort],
    state: &Arc<StateRegion>,
) -> Option<crate::telemetry::Telemetry> {
    let ports = ports
        .iter()
        .map(|p| crate::telemetry::NamedPort {
            name: p.name.clone(),
            port_id: p.port_id,
        })
        .collect();
    let source = crate::telemetry::Source {
        instance: cfg.instance.clone(),
        state: state.clone(),
        ports,
    };
    match crate::telemetry::register(source) {
        Ok(t) => {
            match dpdk_ffi::telemetry_socket_path() {
                Some(p) => {
                    info!(socket = %p.display(), "DPDK telemetry: /border/info, /border/counters, /border/ports, /border/port_stats")
                }
                None => info!("DPDK telemetry is off (--no-telemetry in eal_args)"),
            }
            Some(t)
        }
        Err(e) => {
            warn!(error = %e, "cannot register telemetry commands; forwarding is unaffected");
            None
        }
    }
}

/// The started ports by name: the data ports by their `[[port]].name`, then
/// their kernel twins by interface (`started.ports` holds them in that
/// order, in plan order).
pub(super) fn stat_ports(plan: &EalPlan, started: &StartedPorts) -> Vec<StatPort> {
    let data = plan.ports.iter().map(|p| (p.name.clone(), PortRole::Data));
    let twins = plan
        .ports
        .iter()
        .map(|p| (p.twin_iface.clone(), PortRole::Twin));
    data.chain(twins)
        .zip(&started.ports)
        .map(|((name, role), port)| StatPort {
            name,
            role,
            port_id: port.port_id(),
        })
        .collect()
}
