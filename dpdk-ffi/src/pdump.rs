//! DPDK's packet-capture server (`rte_pdump`), so Debian's `dpdk-dumpcap`
//! (a secondary process) can capture on border-dp's ports.
//!
//! `rte_pdump_init` only registers a multi-process request handler: nothing
//! touches the fast path until a capture tool asks. While a capture runs,
//! pdump has rx/tx callbacks on the captured queues that copy matching
//! frames (filtered by the tool's BPF program) into the tool's ring, and
//! counts what did not fit (`rte_pdump_stats`: `ringfull`, `nombuf`); when
//! the tool stops, the callbacks are removed again.
//!
//! It needs EAL multi-process: not `--no-shconf` or `--in-memory` (no
//! multi-process socket), not `--no-huge` (a secondary cannot map the
//! primary's memory then). See docs/capture.md.

use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::{DpdkError, Eal};

// Declared here rather than through bindgen: two calls, and rte_pdump.h
// pulls in rte_bpf.h, which the rest of the crate has no use for.
extern "C" {
    fn rte_pdump_init() -> c_int;
    fn rte_pdump_uninit() -> c_int;
    fn rte_pdump_stats(port_id: u16, stats: *mut RawPdumpStats) -> c_int;
}

/// `struct rte_pdump_stats` of DPDK 22.11 (rte_pdump.h).
#[repr(C)]
#[derive(Default)]
struct RawPdumpStats {
    accepted: u64,
    filtered: u64,
    nombuf: u64,
    ringfull: u64,
    reserved: [u64; 4],
}

/// Whether this process runs the capture server. rte_pdump_stats in a
/// primary process without it logs `pdump stats not initialized` at ERR
/// on every call, and border-dp reads the statistics every second.
static SERVING: AtomicBool = AtomicBool::new(false);

/// What packet capture did on a port since the capture server started
/// (Rx and Tx queues summed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CaptureStats {
    /// Packets its filter matched, copied to the capture tool.
    pub accepted: u64,
    /// Packets its filter rejected.
    pub filtered: u64,
    /// Packets lost: no mbuf to copy them into.
    pub nombuf: u64,
    /// Packets lost: the ring to the capture tool was full.
    pub ringfull: u64,
}

/// Port `port_id`'s capture statistics; None when the capture server does
/// not run (its statistics memory does not exist) or the port is unknown.
pub fn capture_stats(port_id: u16) -> Option<CaptureStats> {
    if !crate::eal::initialised() || !SERVING.load(Ordering::Acquire) {
        return None;
    }
    let mut raw = RawPdumpStats::default();
    // SAFETY: EAL is initialised (checked); `raw` is a writable struct with
    // the layout of rte_pdump_stats, which the call fills; it only looks
    // up pdump's memzone (failing with -1 when there is none) and reads
    // that port's counters.
    let ret = unsafe { rte_pdump_stats(port_id, &mut raw) };
    (ret == 0).then_some(CaptureStats {
        accepted: raw.accepted,
        filtered: raw.filtered,
        nombuf: raw.nombuf,
        ringfull: raw.ringfull,
    })
}

/// The capture server; dropping it unregisters the handler (a running
/// capture's callbacks stay until its tool disables them or the port closes).
#[derive(Debug)]
pub struct CaptureServer {
    _eal: Eal,
}

impl CaptureServer {
    /// Starts answering capture requests from secondary processes.
    pub fn start() -> Result<CaptureServer, DpdkError> {
        let eal = Eal::current()?;
        // SAFETY: EAL is initialised (we hold it); rte_pdump_init only
        // reserves its stats memzone and registers an mp action, and fails
        // cleanly (rte_errno) when multi-process is off.
        let ret = unsafe { rte_pdump_init() };
        if ret != 0 {
            return Err(
                DpdkError::from_rte_errno("packet capture (rte_pdump_init)").hint(
                    "needs EAL multi-process: no --no-shconf, --in-memory or --no-huge in eal_args",
                ),
            );
        }
        SERVING.store(true, Ordering::Release);
        Ok(CaptureServer { _eal: eal })
    }
}

impl Drop for CaptureServer {
    fn drop(&mut self) {
        SERVING.store(false, Ordering::Release);
        // SAFETY: paired with the successful rte_pdump_init in `start`; EAL
        // is still alive (self holds it).
        unsafe { rte_pdump_uninit() };
    }
}
