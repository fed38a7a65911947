//! Everything DPDK-unsafe in border: bindgen bindings over the system DPDK
//! (22.11, found through pkg-config), a C shim for DPDK's static-inline hot
//! path, and safe RAII wrappers.
//!
//! Lifetimes are enforced by handles rather than borrows so the dataplane
//! can store them freely: [`Eal`] is cleaned up only after every [`Mempool`]
//! and [`Port`] is gone, a port is closed only after every [`RxQueue`] /
//! [`TxQueue`] of it is gone, and a pool is freed only when none of its
//! mbufs is out (otherwise it is leaked on purpose).
//!
//! EAL can be initialised once per process; tests that start it live in
//! their own files under `tests/`.

#![warn(missing_docs)]

/// Raw bindgen output plus the `border_shim_*` functions. Prefer the safe
/// wrappers; this is here for what they do not cover.
#[allow(
    warnings,
    unsafe_op_in_unsafe_fn,
    missing_docs,
    clippy::all,
    clippy::pedantic,
    clippy::undocumented_unsafe_blocks
)]
pub mod sys {
    include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
}

mod cycles;
mod eal;
mod error;
mod flow;
mod intr;
mod lcore;
mod log;
mod mbuf;
mod mempool;
mod pdump;
mod port;
mod telemetry;

pub use cycles::{pause, tsc_cycles, tsc_hz};
pub use eal::Eal;
pub use error::{rte_errno, strerror, DpdkError};
pub use flow::{owner_mask, FlowRules, SteerProto, SteerRule};
pub use intr::{RxWaiter, MAX_WATCHED};
pub use lcore::{
    launch_on, lcore_count, lcore_id, lcore_is_enabled, lcore_socket_id, main_lcore, wait_all,
    wait_lcore, worker_lcores, LCORE_ID_ANY, LCORE_PANICKED,
};
pub use log::{redirect_log, LogLevel};
pub use mbuf::{Drain, Mbuf, MbufBurst, MbufError};
pub use mempool::{Mempool, DEFAULT_DATA_ROOM, PKTMBUF_HEADROOM, SOCKET_ID_ANY};
pub use pdump::{capture_stats, CaptureServer, CaptureStats};
pub use port::{
    port_count, port_ids, port_name, port_stats, LinkStatus, Port, PortInfo, PortStats, RxQueue,
    TxQueue, FRAME_OVERHEAD,
};
pub use telemetry::{
    runtime_dir, telemetry_socket_path, TelemetryCommand, TelemetryDict, MAX_DICT_ENTRIES,
};

/// DPDK version this crate was built against (from pkg-config).
pub const DPDK_VERSION: &str = env!("BORDER_DPDK_VERSION");

// Declared here rather than through bindgen: one call, for `--version`.
extern "C" {
    fn rte_version() -> *const std::os::raw::c_char;
}

/// The DPDK release this process loaded, as librte_eal names itself
/// (`DPDK 22.11.11`): a point release can differ from [`DPDK_VERSION`].
pub fn loaded_version() -> String {
    // SAFETY: rte_version() returns a pointer to a static NUL-terminated
    // string of librte_eal; it reads no EAL state, so it needs no
    // rte_eal_init, and the string lives as long as the library.
    unsafe { std::ffi::CStr::from_ptr(rte_version()) }
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod layout_tests {
    use std::mem::{align_of, offset_of, size_of};

    use crate::sys::{self, rte_mbuf};

    fn c_layout() -> sys::border_shim_mbuf_layout {
        let mut l = sys::border_shim_mbuf_layout::default();
        // SAFETY: l is a valid out-pointer to the struct the C side fills.
        unsafe { sys::border_shim_mbuf_layout(&mut l) };
        l
    }

    #[test]
    fn rte_mbuf_matches_c() {
        let c = c_layout();
        assert_eq!(size_of::<rte_mbuf>(), c.size, "sizeof");
        assert_eq!(align_of::<rte_mbuf>(), c.align, "alignof");
        assert_eq!(offset_of!(rte_mbuf, buf_addr), c.buf_addr, "buf_addr");
        assert_eq!(offset_of!(rte_mbuf, data_off), c.data_off, "data_off");
        assert_eq!(offset_of!(rte_mbuf, refcnt), c.refcnt, "refcnt");
        assert_eq!(offset_of!(rte_mbuf, nb_segs), c.nb_segs, "nb_segs");
        assert_eq!(offset_of!(rte_mbuf, port), c.port, "port");
        assert_eq!(offset_of!(rte_mbuf, ol_flags), c.ol_flags, "ol_flags");
        assert_eq!(
            offset_of!(rte_mbuf, __bindgen_anon_1.packet_type),
            c.packet_type,
            "packet_type"
        );
        assert_eq!(offset_of!(rte_mbuf, pkt_len), c.pkt_len, "pkt_len");
        assert_eq!(offset_of!(rte_mbuf, data_len), c.data_len, "data_len");
        assert_eq!(offset_of!(rte_mbuf, vlan_tci), c.vlan_tci, "vlan_tci");
        assert_eq!(offset_of!(rte_mbuf, __bindgen_anon_2.hash), c.hash, "hash");
        assert_eq!(offset_of!(rte_mbuf, buf_len), c.buf_len, "buf_len");
        assert_eq!(offset_of!(rte_mbuf, pool), c.pool, "pool");
        assert_eq!(offset_of!(rte_mbuf, next), c.next, "next");
        // The hot path reads these directly, so pin the well-known values too.
        assert_eq!(c.size, 128);
        assert_eq!(c.data_off, 16);
        assert_eq!(c.pkt_len, 36);
        assert_eq!(c.data_len, 40);
    }

    #[test]
    fn structs_passed_by_pointer_match_c() {
        let mut c = sys::border_shim_sizes::default();
        // SAFETY: c is a valid out-pointer to the struct the C side fills.
        unsafe { sys::border_shim_sizes(&mut c) };
        assert_eq!(size_of::<sys::rte_eth_conf>(), c.rte_eth_conf);
        assert_eq!(size_of::<sys::rte_eth_dev_info>(), c.rte_eth_dev_info);
        assert_eq!(size_of::<sys::rte_eth_stats>(), c.rte_eth_stats);
        assert_eq!(size_of::<sys::rte_eth_link>(), c.rte_eth_link);
        assert_eq!(size_of::<sys::rte_ether_addr>(), c.rte_ether_addr);
        assert_eq!(size_of::<sys::rte_eth_rxconf>(), c.rte_eth_rxconf);
        assert_eq!(size_of::<sys::rte_eth_txconf>(), c.rte_eth_txconf);
    }

    #[test]
    fn constants_are_sane() {
        assert_eq!(sys::RTE_PKTMBUF_HEADROOM, 128);
        assert_eq!(sys::RTE_MBUF_DEFAULT_BUF_SIZE, 2048 + 128);
        const { assert!(sys::RTE_MAX_LCORE >= 2) };
        const { assert!(sys::RTE_MAX_ETHPORTS >= 2 && sys::RTE_MAX_ETHPORTS <= u16::MAX as u32) };
        assert_eq!(sys::RTE_ETH_NAME_MAX_LEN, 64);
        assert_eq!(sys::SOCKET_ID_ANY, -1);
        assert_eq!(sys::LCORE_ID_ANY, u32::MAX);
        assert_eq!(sys::RTE_ETH_LINK_UP, 1);
        assert_eq!(sys::RTE_MBUF_F_RX_RSS_HASH, 1 << 1);
        assert!(
            crate::DPDK_VERSION.starts_with("22.11"),
            "{}",
            crate::DPDK_VERSION
        );
        // SAFETY: returns a constant.
        let hf = unsafe { sys::border_shim_rss_hf_ip_tcp_udp() };
        assert_ne!(hf, 0);
    }

    #[test]
    fn eal_free_helpers_work_without_eal() {
        // Before init: no lcore, no ports, and a clean error for EAL users.
        assert_eq!(crate::lcore_id(), crate::LCORE_ID_ANY);
        assert_eq!(crate::port_count(), 0);
        assert_eq!(crate::port_ids().count(), 0);
        assert_eq!(crate::tsc_hz(), 0);
        let a = crate::tsc_cycles();
        crate::pause();
        assert!(crate::tsc_cycles() >= a);
        let e = crate::Mempool::pktmbuf("x", 63, 0, crate::DEFAULT_DATA_ROOM, -1).unwrap_err();
        assert!(e.to_string().contains("not initialised"), "{e}");
        let e = crate::Port::by_name("net_null0").unwrap_err();
        assert!(e.to_string().contains("not initialised"), "{e}");
        assert_eq!(crate::wait_lcore(1), -libc::EINVAL);
        assert!(crate::launch_on(1, || 0).is_err());
    }
}
