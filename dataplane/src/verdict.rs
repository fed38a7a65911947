//! What becomes of one received frame: the answer of the sans-IO packet
//! path ([`crate::pipeline`], [`crate::lb`]) to the worker loop, which does
//! the I/O.

use conf::counters::Counter;

/// What to do with a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Transmit the first `len` bytes of the (possibly rewritten) frame on `port`.
    Send { port: usize, len: usize },
    /// Release the frame; it was counted under this counter.
    Drop(Counter),
    /// A full-NAT reply owned by another worker: queue it there.
    Handoff { worker: usize },
    /// Ready to send on `port` (the first `len` bytes) but for the
    /// destination MAC: wait until next hop `hop` is resolved
    /// ([`crate::neigh_queue`]).
    Park {
        port: usize,
        len: usize,
        hop: crate::neigh::Slot,
    },
}
