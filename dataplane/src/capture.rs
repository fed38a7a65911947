//! Packet capture on demand: with `[dataplane] capture = true`, border-dp
//! serves DPDK's capture framework (`rte_pdump`), so Debian's
//! `dpdk-dumpcap` and `borderctl capture` attach as secondary processes
//! and write pcapng (docs/capture.md).
//!
//! While nothing captures, workers run exactly as without it: pdump adds
//! its rx/tx callbacks to the captured queues only for the length of a
//! capture, and removes them when the tool ends it.

use dpdk_ffi::{CaptureServer, Mempool};
use tracing::{info, warn};

/// Starts the capture server when the config asks for it (after the ports
/// are up; `pool` lends an mbuf to start the capture timestamps' clock); a
/// failure costs only capture.
pub fn start(enabled: bool, pool: &Mempool) -> Option<CaptureServer> {
    if !enabled {
        return None;
    }
    match CaptureServer::start(pool) {
        Ok(server) => {
            info!("packet capture: dpdk-dumpcap and borderctl capture can attach");
            Some(server)
        }
        Err(e) => {
            warn!(error = %e, "cannot serve packet capture; forwarding is unaffected");
            None
        }
    }
}
