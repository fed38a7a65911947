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

use crate::{DpdkError, Eal};

// Declared here rather than through bindgen: two calls, and rte_pdump.h
// pulls in rte_bpf.h, which the rest of the crate has no use for.
extern "C" {
    fn rte_pdump_init() -> c_int;
    fn rte_pdump_uninit() -> c_int;
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
        Ok(CaptureServer { _eal: eal })
    }
}

impl Drop for CaptureServer {
    fn drop(&mut self) {
        // SAFETY: paired with the successful rte_pdump_init in `start`; EAL
        // is still alive (self holds it).
        unsafe { rte_pdump_uninit() };
    }
}
