//! Ethernet ports and their rx/tx queue handles.

use std::ffi::{c_char, CStr, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::eal::Eal;
use crate::error::DpdkError;
use crate::mbuf::MbufBurst;
use crate::mempool::Mempool;
use crate::sys;

/// Number of ports EAL probed and nobody else owns (`rte_eth_dev_count_avail`).
pub fn port_count() -> u16 {
    // SAFETY: walks ethdev's static port table; no preconditions.
    unsafe { sys::rte_eth_dev_count_avail() }
}

/// Ids of the available ports, ascending (`RTE_ETH_FOREACH_DEV`).
pub fn port_ids() -> impl Iterator<Item = u16> {
    let mut next: u64 = 0;
    std::iter::from_fn(move || {
        let start = u16::try_from(next).ok()?;
        // SAFETY: walks ethdev's static port table from `start`; returns
        // RTE_MAX_ETHPORTS when none is left.
        let p =
            unsafe { sys::rte_eth_find_next_owned_by(start, u64::from(sys::RTE_ETH_DEV_NO_OWNER)) };
        if p >= u64::from(sys::RTE_MAX_ETHPORTS) {
            return None;
        }
        next = p + 1;
        u16::try_from(p).ok()
    })
}

/// The ethdev name of port `port_id` (e.g. `net_tap0`).
pub fn port_name(port_id: u16) -> Result<String, DpdkError> {
    let mut buf: [c_char; sys::RTE_ETH_NAME_MAX_LEN as usize] =
        [0; sys::RTE_ETH_NAME_MAX_LEN as usize];
    // SAFETY: buf has RTE_ETH_NAME_MAX_LEN bytes, the size the API requires;
    // the port id is validated by the callee.
    let ret = unsafe { sys::rte_eth_dev_get_name_by_port(port_id, buf.as_mut_ptr()) };
    if ret != 0 {
        return Err(DpdkError::from_ret(
            format!("port {port_id} name lookup"),
            ret,
        ));
    }
    // SAFETY: on success the callee wrote a NUL-terminated name into buf.
    Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned())
}

/// Counters of port `port_id` (`rte_eth_stats_get`) without owning it: for
/// readers on other threads, such as DPDK's telemetry thread. DPDK's own
/// `/ethdev/stats` telemetry command reads them the same way while the
/// workers poll; a port closed meanwhile answers `ENODEV`.
pub fn port_stats(port_id: u16) -> Result<PortStats, DpdkError> {
    let mut s = sys::rte_eth_stats::default();
    // SAFETY: s is a valid out-pointer of the C size; the callee validates
    // port_id and only reads the port's counters.
    let ret = unsafe { sys::rte_eth_stats_get(port_id, &mut s) };
    if ret != 0 {
        return Err(DpdkError::from_ret(
            format!("port {port_id} stats read"),
            ret,
        ));
    }
    Ok(PortStats {
        ipackets: s.ipackets,
        opackets: s.opackets,
        ibytes: s.ibytes,
        obytes: s.obytes,
        imissed: s.imissed,
        ierrors: s.ierrors,
        oerrors: s.oerrors,
        rx_nombuf: s.rx_nombuf,
    })
}

/// Link state from `link()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkStatus {
    /// Carrier up.
    pub up: bool,
    /// Mbit/s; 0 if none, `u32::MAX` if the PMD does not know.
    pub speed_mbps: u32,
    /// Full duplex.
    pub full_duplex: bool,
}

/// Port counters from `stats()` (`rte_eth_stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Packets received.
    pub ipackets: u64,
    /// Packets sent.
    pub opackets: u64,
    /// Bytes received.
    pub ibytes: u64,
    /// Bytes sent.
    pub obytes: u64,
    /// Packets the NIC dropped because rx queues were full.
    pub imissed: u64,
    /// Erroneous received packets.
    pub ierrors: u64,
    /// Failed transmissions.
    pub oerrors: u64,
    /// Rx mbuf allocation failures (pool exhausted).
    pub rx_nombuf: u64,
}

/// `RTE_ETH_RX_OFFLOAD_UDP_CKSUM | RTE_ETH_RX_OFFLOAD_TCP_CKSUM` (bits 2
/// and 3; `RTE_BIT64` macros bindgen does not see).
const RX_OFFLOAD_L4_CKSUM: u64 = 1 << 2 | 1 << 3;
/// `RTE_ETH_RX_OFFLOAD_SCATTER`: frames longer than one buffer arrive chained.
const RX_OFFLOAD_SCATTER: u64 = 1 << 13;
/// `RTE_ETH_TX_OFFLOAD_MULTI_SEGS`: chained frames may be sent.
const TX_OFFLOAD_MULTI_SEGS: u64 = 1 << 15;
/// What an Ethernet frame adds to its IP packet at most: the header, two
/// VLAN tags and the CRC.
pub const FRAME_OVERHEAD: u16 = 14 + 8 + 4;

/// Static facts about a port from `rte_eth_dev_info_get`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortInfo {
    /// PMD name, e.g. `net_tap`, `net_null`.
    pub driver_name: String,
    /// Most rx queues `configure` accepts.
    pub max_rx_queues: u16,
    /// Most tx queues `configure` accepts.
    pub max_tx_queues: u16,
    /// RSS hash types the device supports (0: no RSS).
    pub flow_type_rss_offloads: u64,
    /// `RTE_ETH_RX_OFFLOAD_*` capabilities.
    pub rx_offload_capa: u64,
    /// `RTE_ETH_TX_OFFLOAD_*` capabilities.
    pub tx_offload_capa: u64,
    /// Largest MTU.
    pub max_mtu: u16,
    /// Smallest MTU.
    pub min_mtu: u16,
    /// Longest frame the device receives (what bounds its MTU in ethdev).
    pub max_rx_pktlen: u32,
}

struct Queues {
    nb_rx: u16,
    nb_tx: u16,
    rx_taken: Vec<bool>,
    tx_taken: Vec<bool>,
}

impl Queues {
    fn live(&self) -> usize {
        self.rx_taken
            .iter()
            .chain(&self.tx_taken)
            .filter(|t| **t)
            .count()
    }
}

pub(crate) struct PortShared {
    id: u16,
    /// Whether our last start succeeded without a stop since; Drop stops
    /// only then (stopping twice makes DPDK log an error).
    started: AtomicBool,
    name: String,
    queues: Mutex<Queues>,
    /// Every pool the port's queues were ever set up with: rx rings hold
    /// their mbufs until the port is closed.
    pools: Mutex<Vec<Mempool>>,
    eal: Eal,
}

impl PortShared {
    fn queues(&self) -> MutexGuard<'_, Queues> {
        // Queues is only ever updated by whole-field assignments.
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for PortShared {
    fn drop(&mut self) {
        if self.started.load(Ordering::Acquire) {
            // SAFETY: no queue handle is left (each holds an Arc of us), so
            // no thread is in rx/tx on this port; we own the port id.
            let ret = unsafe { sys::rte_eth_dev_stop(self.id) };
            if ret != 0 {
                eprintln!(
                    "border dpdk-ffi: {}",
                    DpdkError::from_ret(format!("port {} stop", self.name), ret)
                );
            }
        }
        // SAFETY: as above; after close the id is invalid and never used again
        // by us (the claim is released below only after close).
        let ret = unsafe { sys::rte_eth_dev_close(self.id) };
        if ret != 0 {
            eprintln!(
                "border dpdk-ffi: {}",
                DpdkError::from_ret(format!("port {} close", self.name), ret)
            );
        }
        self.eal.release_port(self.id);
        // Fields drop after this: the pools go only now that the rings are gone.
    }
}

/// An Ethernet port, owned by exactly one `Port` value per process.
///
/// Dropping it stops and closes the port (for vdevs that also removes it:
/// its id and name cannot be looked up again) — once every rx/tx queue handle
/// taken from it is gone too.
pub struct Port {
    shared: Arc<PortShared>,
    /// Whether the next `configure` asks the PMD for Rx queue interrupts.
    rx_interrupts: bool,
    /// The MTU the next `configure` sets (0: the device's default).
    mtu: u16,
}

impl std::fmt::Debug for Port {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Port")
            .field("id", &self.shared.id)
            .field("name", &self.shared.name)
            .finish()
    }
}

impl Port {
    /// Looks a port up by device name. `name` may be a whole devargs string
    /// (`net_tap0,iface=dp0`): only the part before the first comma counts.
    pub fn by_name(name: &str) -> Result<Port, DpdkError> {
        let dev = name.split(',').next().unwrap_or(name).trim();
        let what = || format!("port {dev:?} lookup");
        let eal = Eal::current()?;
        let cname = CString::new(dev)
            .map_err(|_| DpdkError::with_detail(what(), libc::EINVAL, "name contains NUL"))?;
        let mut id: u16 = 0;
        // SAFETY: cname is NUL-terminated; id is a valid out-pointer.
        let ret = unsafe { sys::rte_eth_dev_get_port_by_name(cname.as_ptr(), &mut id) };
        if ret != 0 {
            return Err(DpdkError::from_ret(what(), ret)
                .hint("is it in eal_args as --vdev/-a, and did its driver probe?"));
        }
        Self::claim(eal, id)
    }

    /// Takes the port with id `port_id`.
    pub fn by_id(port_id: u16) -> Result<Port, DpdkError> {
        let eal = Eal::current()?;
        // SAFETY: bounds-checks the id against ethdev's static table.
        if unsafe { sys::rte_eth_dev_is_valid_port(port_id) } == 0 {
            return Err(DpdkError::from_errno(
                format!("port {port_id} lookup"),
                libc::ENODEV,
            ));
        }
        Self::claim(eal, port_id)
    }

    fn claim(eal: Eal, id: u16) -> Result<Port, DpdkError> {
        let name = port_name(id)?;
        if !eal.claim_port(id) {
            return Err(DpdkError::with_detail(
                format!("port {name:?} open"),
                libc::EBUSY,
                "already owned by another Port value",
            ));
        }
        Ok(Port {
            shared: Arc::new(PortShared {
                id,
                started: AtomicBool::new(false),
                name,
                queues: Mutex::new(Queues {
                    nb_rx: 0,
                    nb_tx: 0,
                    rx_taken: Vec::new(),
                    tx_taken: Vec::new(),
                }),
                pools: Mutex::new(Vec::new()),
                eal,
            }),
            rx_interrupts: false,
            mtu: 0,
        })
    }

    /// The port id.
    pub fn port_id(&self) -> u16 {
        self.shared.id
    }

    /// The ethdev name (e.g. `net_tap0`).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Puts the MTU of [`Port::set_configured_mtu`] into `conf`, with scattered Rx and
    /// multi-segment Tx when a frame of that MTU is longer than one buffer
    /// of `pool`; refuses an MTU the device cannot take.
    fn mtu_conf(
        &self,
        info: &PortInfo,
        pool: &Mempool,
        conf: &mut sys::rte_eth_conf,
    ) -> Result<(), DpdkError> {
        let mtu = self.mtu;
        if mtu == 0 {
            return Ok(());
        }
        let refuse = |why: String| {
            DpdkError::with_detail(
                format!("port {} configure", self.shared.name),
                libc::EINVAL,
                why,
            )
        };
        if mtu > info.max_mtu || mtu < info.min_mtu {
            return Err(refuse(format!(
                "mtu {mtu} is outside what {} takes ({}..={})",
                info.driver_name, info.min_mtu, info.max_mtu
            )));
        }
        // ethdev bounds the MTU by the longest frame the device receives
        // (net_tap, net_af_packet, net_memif: 1518 or 1522 bytes in DPDK
        // 22.11); say so rather than a bare EINVAL.
        // The overhead as ethdev reckons it: the device's own, else 18.
        let overhead = match u32::from(info.max_mtu) {
            m if m != u32::from(u16::MAX) && info.max_rx_pktlen > m => info.max_rx_pktlen - m,
            _ => 18,
        };
        let frame = u32::from(mtu) + overhead;
        if frame > info.max_rx_pktlen {
            return Err(refuse(format!(
                "mtu {mtu} needs {frame}-byte frames, {} takes at most {} (mtu {})",
                info.driver_name,
                info.max_rx_pktlen,
                info.max_rx_pktlen.saturating_sub(overhead)
            )));
        }
        conf.rxmode.mtu = u32::from(mtu);
        let room =
            usize::from(pool.data_room()).saturating_sub(usize::from(crate::PKTMBUF_HEADROOM));
        if usize::from(mtu) + usize::from(FRAME_OVERHEAD) > room {
            if info.rx_offload_capa & RX_OFFLOAD_SCATTER == 0 {
                return Err(refuse(format!(
                    "mtu {mtu} needs frames longer than one {room}-byte buffer and {} has no scattered Rx",
                    info.driver_name
                )));
            }
            conf.rxmode.offloads |= RX_OFFLOAD_SCATTER;
            conf.txmode.offloads |= TX_OFFLOAD_MULTI_SEGS & info.tx_offload_capa;
        }
        Ok(())
    }

    fn err(&self, op: &str, ret: i32) -> DpdkError {
        DpdkError::from_ret(format!("port {} {op}", self.shared.name), ret)
    }

    fn busy(&self, op: &str) -> DpdkError {
        DpdkError::with_detail(
            format!("port {} {op}", self.shared.name),
            libc::EBUSY,
            "rx/tx queue handles are still alive",
        )
        .hint("drop every RxQueue/TxQueue of the port first")
    }

    /// NUMA socket of the device; -1 (`SOCKET_ID_ANY`) if unknown.
    pub fn socket_id(&self) -> i32 {
        // SAFETY: the id is valid while we own the port.
        unsafe { sys::rte_eth_dev_socket_id(self.shared.id) }
    }

    /// Device capabilities.
    pub fn info(&self) -> Result<PortInfo, DpdkError> {
        let mut di = sys::rte_eth_dev_info::default();
        // SAFETY: di is a properly sized rte_eth_dev_info (checked against C
        // in tests) and a valid out-pointer.
        let ret = unsafe { sys::rte_eth_dev_info_get(self.shared.id, &mut di) };
        if ret != 0 {
            return Err(self.err("info", ret));
        }
        let driver_name = if di.driver_name.is_null() {
            String::new()
        } else {
            // SAFETY: driver_name points at the PMD's static NUL-terminated name.
            unsafe { CStr::from_ptr(di.driver_name) }
                .to_string_lossy()
                .into_owned()
        };
        Ok(PortInfo {
            driver_name,
            max_rx_queues: di.max_rx_queues,
            max_tx_queues: di.max_tx_queues,
            flow_type_rss_offloads: di.flow_type_rss_offloads,
            rx_offload_capa: di.rx_offload_capa,
            tx_offload_capa: di.tx_offload_capa,
            max_mtu: di.max_mtu,
            min_mtu: di.min_mtu,
            max_rx_pktlen: di.max_rx_pktlen,
        })
    }

    /// Whether the next [`Port::configure`] asks for Rx queue interrupts
    /// (`intr_conf.rxq`), which an [`RxWaiter`](crate::RxWaiter) sleeps on.
    /// Not every PMD has them, and some refuse the whole configuration or
    /// the start when asked (PCI NICs without MSI-X): configure and start
    /// again without them then.
    pub fn set_rx_interrupts(&mut self, on: bool) {
        self.rx_interrupts = on;
    }

    /// The MTU the next [`Port::configure`] sets (0: the device's
    /// default). Frames longer than one buffer of the pool then arrive
    /// chained (scattered Rx) and may leave chained, where the device can;
    /// `configure` refuses an MTU the device cannot take.
    pub fn set_configured_mtu(&mut self, mtu: u16) {
        self.mtu = mtu;
    }

    /// Configures `nb_rxq` rx and `nb_txq` tx queues with `nb_desc_rx` /
    /// `nb_desc_tx` descriptors each (0: PMD default; rounded to what the
    /// device accepts), rx buffers from `pool`. With more than one rx queue,
    /// RSS over IP/TCP/UDP is enabled as far as the device supports it.
    ///
    /// The port must be stopped and no queue handle may be alive.
    pub fn configure(
        &mut self,
        nb_rxq: u16,
        nb_txq: u16,
        nb_desc_rx: u16,
        nb_desc_tx: u16,
        pool: &Mempool,
    ) -> Result<(), DpdkError> {
        let id = self.shared.id;
        let mut q = self.shared.queues();
        if q.live() != 0 {
            return Err(self.busy("configure"));
        }
        let info = self.info()?;
        if nb_rxq > info.max_rx_queues || nb_txq > info.max_tx_queues {
            // ethdev would refuse with a bare EINVAL; say what is short.
            return Err(DpdkError::with_detail(
                format!("port {} configure", self.shared.name),
                libc::EINVAL,
                format!(
                    "{nb_rxq} rx and {nb_txq} tx queues wanted (one per worker), the device has at most {} and {}",
                    info.max_rx_queues, info.max_tx_queues
                ),
            )
            .hint(queue_hint(&info.driver_name)));
        }
        let mut conf = sys::rte_eth_conf::default();
        if nb_rxq > 1 && info.flow_type_rss_offloads != 0 {
            conf.rxmode.mq_mode = sys::RTE_ETH_MQ_RX_RSS;
            // SAFETY: returns a constant.
            let wanted = unsafe { sys::border_shim_rss_hf_ip_tcp_udp() };
            conf.rx_adv_conf.rss_conf.rss_hf = wanted & info.flow_type_rss_offloads;
        }
        // The NIC's TCP/UDP checksum verdict (`Mbuf::rx_l4_checksum_ok`)
        // saves the dataplane its own check. net_tap's "offload" is a
        // software check of every frame, dearer than the dataplane's of
        // only the segments that may change state: left off there.
        if info.driver_name != "net_tap" {
            conf.rxmode.offloads = RX_OFFLOAD_L4_CKSUM & info.rx_offload_capa;
        }
        self.mtu_conf(&info, pool, &mut conf)?;
        conf.intr_conf.set_rxq(u32::from(self.rx_interrupts));
        // SAFETY: conf is a zero-initialised rte_eth_conf of the C size
        // (checked in tests) and is only read by the callee.
        let ret = unsafe { sys::rte_eth_dev_configure(id, nb_rxq, nb_txq, &conf) };
        if ret != 0 {
            return Err(self.err("configure", ret));
        }
        if self.mtu != 0 {
            // The configure above validated it; this has the PMD apply it
            // to the device (net_tap: the kernel interface's MTU too).
            // SAFETY: we own the port id, which is configured now.
            let ret = unsafe { sys::rte_eth_dev_set_mtu(id, self.mtu) };
            if ret != 0 && !(ret == -libc::ENOTSUP && self.mtu == 1500) {
                return Err(self
                    .err(&format!("mtu {} set", self.mtu), ret)
                    .hint(format!("{} cannot take this mtu", info.driver_name)));
            }
        }
        let (mut nrx, mut ntx) = (nb_desc_rx, nb_desc_tx);
        // SAFETY: both are valid in/out pointers to u16.
        let ret = unsafe { sys::rte_eth_dev_adjust_nb_rx_tx_desc(id, &mut nrx, &mut ntx) };
        if ret != 0 {
            return Err(self.err("descriptor adjust", ret));
        }
        let socket = self.socket_id() as u32; // SOCKET_ID_ANY stays -1 in C
        self.shared
            .pools
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(pool.clone());
        for qid in 0..nb_rxq {
            // SAFETY: qid < nb_rxq as configured; a NULL rxconf means the
            // PMD's defaults; the pool outlives the port (kept in `pools`).
            let ret = unsafe {
                sys::rte_eth_rx_queue_setup(id, qid, nrx, socket, std::ptr::null(), pool.as_ptr())
            };
            if ret != 0 {
                return Err(self.err(&format!("rx queue {qid} setup"), ret));
            }
        }
        for qid in 0..nb_txq {
            // SAFETY: qid < nb_txq as configured; NULL txconf means defaults.
            let ret =
                unsafe { sys::rte_eth_tx_queue_setup(id, qid, ntx, socket, std::ptr::null()) };
            if ret != 0 {
                return Err(self.err(&format!("tx queue {qid} setup"), ret));
            }
        }
        *q = Queues {
            nb_rx: nb_rxq,
            nb_tx: nb_txq,
            rx_taken: vec![false; usize::from(nb_rxq)],
            tx_taken: vec![false; usize::from(nb_txq)],
        };
        Ok(())
    }

    /// Starts the port (after `configure`).
    pub fn start(&mut self) -> Result<(), DpdkError> {
        // SAFETY: we own the port id.
        let ret = unsafe { sys::rte_eth_dev_start(self.shared.id) };
        if ret != 0 {
            return Err(self.err("start", ret));
        }
        self.shared.started.store(true, Ordering::Release);
        Ok(())
    }

    /// Stops the port. Refused while queue handles are alive, because a
    /// worker could be inside rx/tx_burst on it.
    pub fn stop(&mut self) -> Result<(), DpdkError> {
        if self.shared.queues().live() != 0 {
            return Err(self.busy("stop"));
        }
        // SAFETY: we own the port id and no queue handle exists.
        let ret = unsafe { sys::rte_eth_dev_stop(self.shared.id) };
        if ret != 0 {
            return Err(self.err("stop", ret));
        }
        self.shared.started.store(false, Ordering::Release);
        Ok(())
    }

    /// The port's MAC address.
    pub fn mac_addr(&self) -> Result<[u8; 6], DpdkError> {
        let mut mac = sys::rte_ether_addr::default();
        // SAFETY: mac is a valid out-pointer of the C size.
        let ret = unsafe { sys::rte_eth_macaddr_get(self.shared.id, &mut mac) };
        if ret != 0 {
            return Err(self.err("MAC read", ret));
        }
        Ok(mac.addr_bytes)
    }

    /// Sets the port's MAC address.
    pub fn set_mac_addr(&mut self, mac: [u8; 6]) -> Result<(), DpdkError> {
        let mut addr = sys::rte_ether_addr { addr_bytes: mac };
        // SAFETY: addr is a valid rte_ether_addr, only read by the callee.
        let ret = unsafe { sys::rte_eth_dev_default_mac_addr_set(self.shared.id, &mut addr) };
        if ret != 0 {
            return Err(self.err("MAC set", ret));
        }
        Ok(())
    }

    /// Turns promiscuous mode on or off.
    pub fn set_promiscuous(&mut self, on: bool) -> Result<(), DpdkError> {
        // SAFETY: we own the port id.
        let ret = unsafe {
            if on {
                sys::rte_eth_promiscuous_enable(self.shared.id)
            } else {
                sys::rte_eth_promiscuous_disable(self.shared.id)
            }
        };
        if ret != 0 {
            return Err(self.err("promiscuous set", ret));
        }
        Ok(())
    }

    /// Sets the MTU (L3 payload size, not frame size).
    pub fn set_mtu(&mut self, mtu: u16) -> Result<(), DpdkError> {
        // SAFETY: we own the port id.
        let ret = unsafe { sys::rte_eth_dev_set_mtu(self.shared.id, mtu) };
        if ret != 0 {
            return Err(self.err("MTU set", ret));
        }
        Ok(())
    }

    /// Current link state, without waiting.
    pub fn link(&self) -> Result<LinkStatus, DpdkError> {
        let mut link = sys::rte_eth_link::default();
        // SAFETY: link is a valid out-pointer of the C size.
        let ret = unsafe { sys::rte_eth_link_get_nowait(self.shared.id, &mut link) };
        if ret != 0 {
            return Err(self.err("link read", ret));
        }
        Ok(LinkStatus {
            up: u32::from(link.link_status()) == sys::RTE_ETH_LINK_UP,
            speed_mbps: link.link_speed,
            full_duplex: u32::from(link.link_duplex()) == sys::RTE_ETH_LINK_FULL_DUPLEX,
        })
    }

    /// Port counters since start or the last `reset_stats`.
    pub fn stats(&self) -> Result<PortStats, DpdkError> {
        port_stats(self.shared.id).map_err(|e| self.err("stats read", -e.errno()))
    }

    /// Zeroes the port counters.
    pub fn reset_stats(&mut self) -> Result<(), DpdkError> {
        // SAFETY: we own the port id.
        let ret = unsafe { sys::rte_eth_stats_reset(self.shared.id) };
        if ret != 0 {
            return Err(self.err("stats reset", ret));
        }
        Ok(())
    }

    /// Takes the handle for rx queue `queue`. Each queue has at most one
    /// live handle, because DPDK queues are single-consumer.
    pub fn rx_queue(&self, queue: u16) -> Result<RxQueue, DpdkError> {
        let mut q = self.shared.queues();
        let nb = q.nb_rx;
        take(&mut q.rx_taken, queue, || self.queue_err("rx", queue, nb))?;
        Ok(RxQueue {
            port_id: self.shared.id,
            queue_id: queue,
            shared: Arc::clone(&self.shared),
        })
    }

    /// Takes the handle for tx queue `queue` (at most one live handle each).
    pub fn tx_queue(&self, queue: u16) -> Result<TxQueue, DpdkError> {
        let mut q = self.shared.queues();
        let nb = q.nb_tx;
        take(&mut q.tx_taken, queue, || self.queue_err("tx", queue, nb))?;
        Ok(TxQueue {
            port_id: self.shared.id,
            queue_id: queue,
            shared: Arc::clone(&self.shared),
        })
    }

    fn queue_err(&self, dir: &str, queue: u16, nb: u16) -> DpdkError {
        DpdkError::with_detail(
            format!("port {} {dir} queue {queue} take", self.shared.name),
            libc::EBUSY,
            format!("queue not configured (have {nb}) or its handle is already taken"),
        )
    }
}

/// What to change when a device has fewer queues than workers.
fn queue_hint(driver: &str) -> String {
    match driver {
        "net_af_xdp" => "set queue_count=<workers> in the devargs; the interface needs that many queues (veth: numrxqueues/numtxqueues)".into(),
        _ => format!("use fewer worker_lcores or a {driver} device with more queues"),
    }
}

fn take(taken: &mut [bool], queue: u16, err: impl FnOnce() -> DpdkError) -> Result<(), DpdkError> {
    match taken.get_mut(usize::from(queue)) {
        Some(t) if !*t => {
            *t = true;
            Ok(())
        }
        _ => Err(err()),
    }
}

/// The only handle on one rx queue of a port. Not `Clone`: the queue is
/// single-consumer, so exactly one worker owns it (move it to that worker;
/// it is `Send`). Keeps the port open while it lives.
pub struct RxQueue {
    port_id: u16,
    queue_id: u16,
    pub(crate) shared: Arc<PortShared>,
}

impl std::fmt::Debug for RxQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RxQueue")
            .field("port_id", &self.port_id)
            .field("queue_id", &self.queue_id)
            .finish()
    }
}

impl RxQueue {
    /// Port id.
    pub fn port_id(&self) -> u16 {
        self.port_id
    }

    /// Queue id.
    pub fn queue_id(&self) -> u16 {
        self.queue_id
    }

    /// Receives up to the free room of `burst` and appends what arrived;
    /// returns how many. No allocation, no locks.
    #[inline]
    pub fn rx_burst<const N: usize>(&mut self, burst: &mut MbufBurst<N>) -> usize {
        let room = u16::try_from(N - burst.len()).unwrap_or(u16::MAX);
        if room == 0 {
            return 0;
        }
        let spare = burst.spare_ptr();
        // SAFETY: we hold the queue's only handle (single consumer); `spare`
        // has room for `room` pointers; the PMD writes `got` owned mbufs there.
        let got = unsafe { sys::border_shim_rx_burst(self.port_id, self.queue_id, spare, room) };
        let got = usize::from(got);
        // SAFETY: the `got` slots after len now hold owned mbufs, got <= room.
        unsafe { burst.set_len(burst.len() + got) };
        got
    }

    /// Receives into raw pointers; the caller owns (and must free) the
    /// first `n` entries written, `n` being the return value.
    #[inline]
    pub fn rx_burst_raw(&mut self, pkts: &mut [*mut sys::rte_mbuf]) -> usize {
        let n = u16::try_from(pkts.len()).unwrap_or(u16::MAX);
        // SAFETY: single consumer (we hold the only handle); pkts has room
        // for n pointers. Leaking what we return is safe.
        usize::from(unsafe {
            sys::border_shim_rx_burst(self.port_id, self.queue_id, pkts.as_mut_ptr(), n)
        })
    }
}

impl Drop for RxQueue {
    fn drop(&mut self) {
        if let Some(t) = self
            .shared
            .queues()
            .rx_taken
            .get_mut(usize::from(self.queue_id))
        {
            *t = false;
        }
    }
}

/// The only handle on one tx queue of a port. Not `Clone`: the queue is
/// single-producer, so exactly one worker owns it (it is `Send`). Keeps the
/// port open while it lives.
pub struct TxQueue {
    port_id: u16,
    queue_id: u16,
    shared: Arc<PortShared>,
}

impl std::fmt::Debug for TxQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxQueue")
            .field("port_id", &self.port_id)
            .field("queue_id", &self.queue_id)
            .finish()
    }
}

impl TxQueue {
    /// Port id.
    pub fn port_id(&self) -> u16 {
        self.port_id
    }

    /// Queue id.
    pub fn queue_id(&self) -> u16 {
        self.queue_id
    }

    /// Sends from the front of `burst`; returns how many the device took.
    /// Those leave the burst; the rest move to its front, still owned by it:
    /// retry them, or `clear()` the burst to free them. No allocation, no
    /// locks.
    #[inline]
    pub fn tx_burst<const N: usize>(&mut self, burst: &mut MbufBurst<N>) -> usize {
        let n = u16::try_from(burst.len()).unwrap_or(u16::MAX);
        if n == 0 {
            return 0;
        }
        // SAFETY: single producer (we hold the only handle); the first n
        // entries are owned mbufs, of which the PMD takes ownership of the
        // first `sent` and leaves the rest to us.
        let sent =
            unsafe { sys::border_shim_tx_burst(self.port_id, self.queue_id, burst.base_ptr(), n) };
        let sent = usize::from(sent);
        burst.forget_front(sent);
        sent
    }

    /// Sends raw mbufs; returns how many the device took (the first ones).
    ///
    /// # Safety
    /// Every entry must be an owned, valid mbuf. The first `n` (the return
    /// value) now belong to the device and must not be used or freed; the
    /// rest still belong to the caller, who must free or resend them.
    #[inline]
    pub unsafe fn tx_burst_raw(&mut self, pkts: &mut [*mut sys::rte_mbuf]) -> usize {
        let n = u16::try_from(pkts.len()).unwrap_or(u16::MAX);
        // SAFETY: single producer; the caller vouches for the mbufs.
        usize::from(unsafe {
            sys::border_shim_tx_burst(self.port_id, self.queue_id, pkts.as_mut_ptr(), n)
        })
    }
}

impl Drop for TxQueue {
    fn drop(&mut self) {
        if let Some(t) = self
            .shared
            .queues()
            .tx_taken
            .get_mut(usize::from(self.queue_id))
        {
            *t = false;
        }
    }
}
