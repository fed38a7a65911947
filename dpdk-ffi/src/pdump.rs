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

use crate::{sys, DpdkError, Eal, Mbuf, Mempool};

// Declared here rather than through bindgen: a few calls, and rte_pdump.h
// pulls in rte_bpf.h, which the rest of the crate has no use for.
extern "C" {
    fn rte_pdump_init() -> c_int;
    fn rte_pdump_uninit() -> c_int;
    fn rte_pdump_stats(port_id: u16, stats: *mut RawPdumpStats) -> c_int;
    fn rte_pcapng_copy(
        port_id: u16,
        queue: u32,
        md: *const sys::rte_mbuf,
        mp: *mut sys::rte_mempool,
        length: u32,
        cycles: u64,
        direction: c_int,
    ) -> *mut sys::rte_mbuf;
}

/// `RTE_PCAPNG_DIRECTION_IN` (rte_pcapng.h).
const PCAPNG_DIRECTION_IN: c_int = 1;

/// Starts the clock that stamps captured packets, before any capture.
///
/// pdump stamps each packet in this process: it reads the TSC, then has
/// rte_pcapng turn the reading into wall-clock nanoseconds against a
/// reference (a TSC reading and CLOCK_REALTIME) that DPDK 22.11 takes
/// inside the first conversion, after the caller read the TSC it passes.
/// That first TSC is thus below the reference; the difference wraps to
/// nearly 2^64 ticks, and rte_pcapng moves its reference by that many
/// seconds: every timestamp of the process's life comes out 2^64 TSC
/// ticks late (about 225 years at 2.6 GHz; tools that keep 32-bit seconds
/// show an arbitrary offset, e.g. two hours) while their order and
/// intervals stay right. Making the first conversion here, for a TSC a
/// few milliseconds ahead, lets the reference be taken before it, as the
/// arithmetic expects; the copy it makes is freed.
fn start_pcapng_clock(pool: &Mempool) -> Result<(), DpdkError> {
    let Some(port) = crate::port_ids().next() else {
        return Ok(());
    };
    let mut frame = pool
        .alloc()
        .ok_or_else(|| DpdkError::from_errno("capture clock: mbuf", libc::ENOMEM))?;
    frame
        .append(60)
        .map_err(|_| DpdkError::from_errno("capture clock: mbuf", libc::ENOSPC))?
        .fill(0);
    let ahead = crate::tsc_cycles() + crate::tsc_hz() / 100;
    // SAFETY: `frame` is a valid one-segment mbuf we own, `pool` a live
    // pktmbuf pool, `port` a valid ethdev port (from the port table);
    // rte_pcapng_copy only reads `frame` and returns a new mbuf from
    // `pool` (or NULL), which we own.
    let copy = unsafe {
        rte_pcapng_copy(
            port,
            0,
            frame.as_ptr(),
            pool.as_ptr(),
            64,
            ahead,
            PCAPNG_DIRECTION_IN,
        )
    };
    if copy.is_null() {
        return Err(DpdkError::from_rte_errno("capture clock: rte_pcapng_copy"));
    }
    // SAFETY: `copy` is the mbuf rte_pcapng_copy just gave us, owned by
    // nothing else; Mbuf frees it on drop.
    drop(unsafe { Mbuf::from_raw(copy) });
    Ok(())
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
    /// Starts answering capture requests from secondary processes, once
    /// the ports exist; `pool` lends one mbuf to start the timestamps'
    /// clock ([`start_pcapng_clock`]).
    pub fn start(pool: &Mempool) -> Result<CaptureServer, DpdkError> {
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
        let server = CaptureServer { _eal: eal };
        // On failure the server is dropped: no capture rather than
        // captures with wrong times.
        start_pcapng_clock(pool)?;
        Ok(server)
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
