//! Bringing DPDK up for border-dp: EAL, the mbuf pool, the data ports and
//! their kernel twins (with Rx interrupts where the PMD has them), and
//! rte_flow steering of full-NAT replies.

use conf::Config;
use dpdk_ffi::{
    Eal, FlowRules, Mempool, Port, SteerRule, DEFAULT_DATA_ROOM, FRAME_OVERHEAD, PKTMBUF_HEADROOM,
    SOCKET_ID_ANY,
};
use tracing::{debug, error, info, warn};

use super::RunError;
use crate::host;
use crate::io::BURST;
use crate::plan::EalPlan;

pub(super) const RX_DESC: u16 = 1024;
pub(super) const TX_DESC: u16 = 1024;
pub(super) const MEMPOOL_CACHE: u32 = 256;

/// Where the NIC supports rte_flow, programs full-NAT local port ownership
/// into it (docs/design.md §2): replies arrive on their owner's rx queue and the
/// handoff queues stay empty. Elsewhere the handoff queues do the job.
pub(super) fn steer_replies<'p>(cfg: &Config, ports: &'p [Port]) -> Vec<FlowRules<'p>> {
    let workers = cfg.dataplane.worker_lcores.len();
    let mut steering = Vec::new();
    if workers < 2 {
        return steering;
    }
    debug_assert_eq!(
        usize::from(dpdk_ffi::owner_mask(workers)),
        crate::lb::port_owner(u16::MAX, workers)
    );
    // The data ports come first in `ports`, in config order.
    for (port, pc) in ports.iter().zip(&cfg.ports) {
        if pc.local_addresses.is_empty() {
            continue;
        }
        let rules = SteerRule::owner_rules(&pc.local_addresses, workers);
        match port.steer_local_ports(&rules) {
            Ok(r) => {
                info!(
                    "rte_flow steers full-NAT replies on port {}: {} rules",
                    pc.name,
                    r.len()
                );
                steering.push(r);
            }
            Err(e) => info!(
                "port {} cannot steer by rte_flow ({e}); handoff queues deliver replies to their owner",
                pc.name
            ),
        }
    }
    steering
}

pub(super) fn port_err(port: &str, device: &str) -> impl FnOnce(dpdk_ffi::DpdkError) -> RunError {
    let (port, device) = (port.to_string(), device.to_string());
    move |source| RunError::Port {
        port,
        device,
        source: Box::new(source),
    }
}

/// Sets the port's MAC to the configured one (if any) and returns the MAC
/// the port uses.
pub(super) fn set_port_mac(
    port: &mut Port,
    name: &str,
    wanted: Option<[u8; 6]>,
) -> Result<[u8; 6], dpdk_ffi::DpdkError> {
    let mac = port.mac_addr()?;
    let Some(wanted) = wanted else {
        return Ok(mac);
    };
    match port.set_mac_addr(wanted) {
        Ok(()) => Ok(wanted),
        Err(e) if e.errno() == libc::ENOTSUP => {
            // The PMD (e.g. net_pcap) cannot change its address: use the
            // configured one in software and accept every frame, the
            // pipeline filters by destination MAC itself.
            warn!(port = %name, "device cannot set its MAC; using the configured MAC in software (promiscuous)");
            if let Err(e) = port.set_promiscuous(true) {
                warn!(port = %name, error = %e, "cannot enable promiscuous mode");
            }
            Ok(wanted)
        }
        Err(e) => Err(e),
    }
}

/// Brings a port up (`bring_up` configures and starts it) with Rx
/// interrupts when `wanted`, and without them when the PMD refuses them
/// (PCI NICs without MSI-X refuse the start). Returns what `bring_up`
/// returned and, when interrupts were wanted but refused, why.
pub(super) fn with_rx_interrupts<T>(
    port: &mut Port,
    wanted: bool,
    mut bring_up: impl FnMut(&mut Port, bool) -> Result<T, dpdk_ffi::DpdkError>,
) -> Result<(T, Option<String>), dpdk_ffi::DpdkError> {
    if wanted {
        match bring_up(port, true) {
            Ok(v) => return Ok((v, None)),
            Err(e) => return Ok((bring_up(port, false)?, Some(e.to_string()))),
        }
    }
    Ok((bring_up(port, false)?, None))
}

/// Per port: a name for the log, why it has no Rx interrupts when its
/// start refused them, and whether that was logged already.
pub(super) struct InterruptLog {
    labels: Vec<String>,
    refused: Vec<Option<String>>,
    reported: Vec<bool>,
}

impl InterruptLog {
    pub(super) fn add(&mut self, label: String, refused: Option<String>) {
        self.labels.push(label);
        self.refused.push(refused);
        self.reported.push(false);
    }

    /// Logs, once per port, that a port has no Rx interrupts, so the
    /// workers polling it back off with sleeps when idle. `at` is the
    /// port's index, when the failure was a port's.
    pub(super) fn report(&mut self, at: Option<usize>, e: &dpdk_ffi::DpdkError) {
        let Some(i) = at else {
            warn!(error = %e, "cannot sleep on Rx interrupts; idle workers back off with sleeps");
            return;
        };
        let Some(reported) = self.reported.get_mut(i) else {
            return;
        };
        if std::mem::replace(reported, true) {
            return;
        }
        let label = self.labels.get(i).map_or("?", String::as_str);
        let why = match self.refused.get(i) {
            Some(Some(r)) => r.clone(),
            _ => e.to_string(),
        };
        info!("port {label} has no Rx interrupts ({why}); idle workers polling it back off with sleeps");
    }
}

/// One of DPDK's log lines, as an event of border-dp's log (target `dpdk`),
/// so it takes the `--log-format` of the rest.
fn dpdk_log_line(level: dpdk_ffi::LogLevel, line: &str) {
    match level {
        dpdk_ffi::LogLevel::Error => error!(target: "dpdk", "{line}"),
        dpdk_ffi::LogLevel::Warning => warn!(target: "dpdk", "{line}"),
        dpdk_ffi::LogLevel::Info => info!(target: "dpdk", "{line}"),
        dpdk_ffi::LogLevel::Debug => debug!(target: "dpdk", "{line}"),
    }
}

/// Starts EAL with the lcore layout and the devices of the plan; a failure
/// names the devices EAL may not have probed.
pub(super) fn start_eal(plan: &EalPlan) -> Result<Eal, RunError> {
    if let Err(e) = dpdk_ffi::redirect_log(dpdk_log_line) {
        warn!("DPDK's own log lines stay plain text on stderr: {e}");
    }
    info!(args = ?plan.args, "starting EAL");
    Ok(Eal::init(&plan.args).map_err(|e| {
        // EAL says which device it could not probe on its own log lines;
        // the one error line names the candidates.
        let devices: Vec<String> = plan
            .ports
            .iter()
            .map(|p| format!("port `{}` = {}", p.name, p.device))
            .collect();
        e.hint(format!(
            "check eal_args and the devargs of {}",
            devices.join(", ")
        ))
    })?)
}

/// Room past the longest frame in each buffer: what a PROXY header (at
/// most 312 bytes) inserted into a full-sized segment grows into.
const GROWTH_ROOM: u16 = 512;

/// Bytes per mbuf (headroom included) for ports whose largest `mtu` is
/// `mtu`: a whole frame of that MTU fits in one buffer with room to grow,
/// so jumbo frames are single-segment wherever the PMD fills one buffer
/// per frame (chains that still arrive are made contiguous in it).
pub(super) fn data_room_for(mtu: u16) -> u16 {
    DEFAULT_DATA_ROOM.max(PKTMBUF_HEADROOM + mtu + FRAME_OVERHEAD + GROWTH_ROOM)
}

/// The mbuf pool every port and worker draws from: room for every rx and
/// tx descriptor of every data port and twin, plus each lcore's cache and
/// bursts in flight, each buffer [`data_room_for`] the largest `mtu`.
pub(super) fn create_pool(
    ports_and_twins: usize,
    workers: usize,
    mtu: u16,
) -> Result<Mempool, RunError> {
    let queues = workers as u32;
    let mbufs = ports_and_twins as u32 * queues * u32::from(RX_DESC + TX_DESC)
        + (queues + 1) * (MEMPOOL_CACHE + (BURST * (ports_and_twins + 2)) as u32)
        + 4096;
    Ok(Mempool::pktmbuf(
        "border_rx",
        mbufs,
        MEMPOOL_CACHE,
        data_room_for(mtu),
        SOCKET_ID_ANY,
    )?)
}

/// The data ports (config order) followed by their kernel twins, started,
/// with the MAC each data port uses.
pub(super) struct StartedPorts {
    pub(super) ports: Vec<Port>,
    pub(super) macs: Vec<[u8; 6]>,
}

/// Configures and starts every data port, then every kernel twin (which
/// gets its port's MAC and addresses), `queues` rx and tx queues each.
pub(super) fn start_ports(
    cfg: &Config,
    plan: &EalPlan,
    pool: &Mempool,
    queues: u16,
    want_interrupts: bool,
) -> Result<(StartedPorts, InterruptLog), RunError> {
    let all_ports = plan.ports.len() * 2;
    let mut started = StartedPorts {
        ports: Vec::with_capacity(all_ports),
        macs: Vec::with_capacity(plan.ports.len()),
    };
    let mut interrupt_log = InterruptLog {
        labels: Vec::with_capacity(all_ports),
        refused: Vec::with_capacity(all_ports),
        reported: Vec::with_capacity(all_ports),
    };
    for (planned, pc) in plan.ports.iter().zip(&cfg.ports) {
        let err = || port_err(&planned.name, &planned.device);
        let mut port = Port::by_name(&planned.device).map_err(err())?;
        let bring_up = |port: &mut Port, interrupts: bool| {
            port.set_rx_interrupts(interrupts);
            port.set_configured_mtu(pc.mtu);
            port.configure(queues, queues, RX_DESC, TX_DESC, pool)?;
            let mac = set_port_mac(port, &planned.name, pc.mac)?;
            port.start()?;
            Ok::<_, dpdk_ffi::DpdkError>(mac)
        };
        let (mac, refused) =
            with_rx_interrupts(&mut port, want_interrupts, bring_up).map_err(err())?;
        info!(port = %planned.name, device = %planned.device, mac = %host::format_mac(mac), mtu = pc.mtu, "port up");
        started.macs.push(mac);
        started.ports.push(port);
        let label = format!("`{}` ({})", planned.name, planned.device);
        interrupt_log.add(label, refused);
    }
    for (i, (planned, pc)) in plan.ports.iter().zip(&cfg.ports).enumerate() {
        let err = || port_err(&planned.twin_iface, &planned.twin_device);
        let mut twin = Port::by_name(&planned.twin_device).map_err(err())?;
        let bring_up = |port: &mut Port, interrupts: bool| {
            port.set_rx_interrupts(interrupts);
            // The kernel sends what leaves by the port through its twin.
            port.set_configured_mtu(pc.mtu);
            port.configure(queues, queues, RX_DESC, TX_DESC, pool)?;
            port.start()
        };
        let ((), refused) =
            with_rx_interrupts(&mut twin, want_interrupts, bring_up).map_err(err())?;
        host::configure_twin(&planned.twin_iface, started.macs[i], &pc.addresses)?;
        info!(port = %planned.name, iface = %planned.twin_iface, "kernel twin up");
        started.ports.push(twin);
        let label = format!(
            "kernel twin `{}` ({})",
            planned.twin_iface, planned.twin_device
        );
        interrupt_log.add(label, refused);
    }
    Ok((started, interrupt_log))
}
