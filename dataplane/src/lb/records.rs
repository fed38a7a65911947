//! Connection records (docs/records.md): a meter per
//! connection-table slot counts each flow's packets and bytes both ways,
//! and when an entry goes, its record is written to the worker's ring in
//! the records region for border-mgmt to export.
//!
//! Off unless `[records]` is configured: then the only cost per packet is
//! the `Option` test. On, a packet adds to one 32-byte meter (half a cache
//! line, indexed like the entry), and an ended connection costs one
//! 192-byte copy into the ring: no allocation, no lock, no system call.
//!
//! The meters live beside the entries in the worker's flows region when it
//! has one (`crate::flows_region`), so they outlive the process with their
//! flows: adoption copies an adopted flow's meter to its new slot
//! ([`FlowRecords::adopt_meter`]) and its record counts its whole traffic.

use conf::config::Mode;
use conf::records::{ConnRecord, RecordWriter, REC_FULL_NAT, REC_PAYLOAD, REC_PROXY_SENT};

use super::flow::{Ending, FlowRec};
use crate::conntrack::adopt::RawValue;
use crate::conntrack::{Dir, Entry, EntryId, Slab};

/// Bit 63 of a direction's octet count: a packet that way carried payload.
/// 2^63 bytes is never reached by a count, so the bit is free.
const PAYLOAD_SEEN: u64 = 1 << 63;

/// One flow's traffic, per [`Dir`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C, align(32))]
pub struct FlowMeter {
    packets: [u64; 2],
    /// IP bytes, with [`PAYLOAD_SEEN`].
    octets: [u64; 2],
}

// SAFETY: four `u64`s: every bit pattern is a valid meter.
unsafe impl RawValue for FlowMeter {
    fn bytes_valid(bytes: &[u8]) -> bool {
        bytes.len() == core::mem::size_of::<FlowMeter>()
    }
}

impl FlowMeter {
    /// The meter in `raw` (a previous process's, same machine: native
    /// byte order); `None` if it is not one meter long.
    pub fn from_raw(raw: &[u8]) -> Option<FlowMeter> {
        if raw.len() != core::mem::size_of::<FlowMeter>() {
            return None;
        }
        let w = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&raw[i * 8..i * 8 + 8]);
            u64::from_ne_bytes(b)
        };
        Some(FlowMeter {
            packets: [w(0), w(1)],
            octets: [w(2), w(3)],
        })
    }
}

/// Bytes of one meter (a flows region's meters).
pub const METER_BYTES: usize = core::mem::size_of::<FlowMeter>();

/// A worker's meters and its end of the records ring.
pub struct FlowRecords {
    /// One per connection-table slot: private memory, or the flows
    /// region's meters.
    meters: Slab<FlowMeter>,
    ring: RecordWriter<'static>,
    log_empty: bool,
    worker: u16,
    /// Records written, connections without payload skipped, records lost
    /// to a full ring (the `conn_records*` counters, set at each tick).
    written: u64,
    empty: u64,
    ring_full: u64,
}

impl FlowRecords {
    /// Meters for worker `worker`'s table of `capacity` entries (in
    /// `mapped` when it is given and has that many), records into `ring`.
    pub fn new(
        ring: RecordWriter<'static>,
        capacity: usize,
        log_empty: bool,
        worker: usize,
        mapped: Option<Slab<FlowMeter>>,
    ) -> FlowRecords {
        let meters = match mapped {
            Some(m) if m.len() == capacity => m,
            _ => {
                let mut m = Slab::heap(capacity);
                while m.push(FlowMeter::default()).is_ok() {}
                m
            }
        };
        FlowRecords {
            meters,
            ring,
            log_empty,
            worker: worker as u16,
            written: 0,
            empty: 0,
            ring_full: 0,
        }
    }

    /// A packet of `ip_len` IP bytes forwarded for the flow in slot `id`.
    #[inline(always)]
    pub(super) fn count(&mut self, id: EntryId, dir: Dir, ip_len: usize, payload: bool) {
        if let Some(m) = self.meters.get_mut(id.index() as usize) {
            let d = dir as usize;
            m.packets[d] += 1;
            m.octets[d] = (m.octets[d] + ip_len as u64) | (u64::from(payload) << 63);
        }
    }

    /// The packets and IP bytes counted so far for the flow in `slot`,
    /// per [`Dir`] (a walk of the live connections).
    pub(super) fn meter(&self, slot: usize) -> Option<([u64; 2], [u64; 2])> {
        let m = self.meters.get(slot)?;
        Some((m.packets, m.octets.map(|n| n & !PAYLOAD_SEEN)))
    }

    /// The meter of a flow adopted into slot `id`, from the raw bytes of
    /// its meter in the previous process's region.
    #[cold]
    pub(super) fn adopt_meter(&mut self, id: EntryId, raw: &[u8]) {
        if let (Some(m), Some(old)) = (
            self.meters.get_mut(id.index() as usize),
            FlowMeter::from_raw(raw),
        ) {
            *m = old;
        }
    }

    /// Starts loading the meter of the flow in `slot` (with its entry, in
    /// the express lane's prefetch step); a hint, nothing changes.
    #[inline(always)]
    pub(super) fn prefetch(&self, slot: u32) {
        crate::conntrack::prefetch(self.meters.as_ptr().wrapping_add(slot as usize));
    }

    /// The entry in slot `id` goes: its record to the ring (or, without
    /// payload, only to the count), and its meter starts over for the
    /// slot's next flow.
    #[cold]
    pub(super) fn ended(&mut self, id: EntryId, e: &Entry<FlowRec>, ending: Ending, end_ms: u64) {
        let Some(m) = self.meters.get_mut(id.index() as usize) else {
            return;
        };
        let meter = core::mem::take(m);
        let payload = (meter.octets[0] | meter.octets[1]) & PAYLOAD_SEEN != 0;
        if !payload && !self.log_empty {
            self.empty += 1;
            return;
        }
        let v = &e.value;
        let (o, r) = (e.orig(), e.reply());
        let flags = if v.mode == Mode::FullNat {
            REC_FULL_NAT
        } else {
            0
        } | if v.pp_on() && v.proxy.sent() {
            REC_PROXY_SENT
        } else {
            0
        } | if payload { REC_PAYLOAD } else { 0 };
        let rec = ConnRecord {
            start_ms: e.created_at(),
            end_ms: end_ms.max(e.created_at()),
            conn_id: v.conn_id,
            packets: meter.packets,
            octets: meter.octets.map(|n| n & !PAYLOAD_SEEN),
            client: o.src,
            vip: o.dst,
            backend: r.src,
            local: r.dst,
            client_port: o.sport,
            vip_port: o.dport,
            backend_port: r.sport,
            local_port: r.dport,
            proto: o.proto,
            client_v6: o.v6,
            backend_v6: r.v6,
            end: ending.reason(e.state()),
            flags,
            worker: self.worker,
        };
        if self.ring.push(&rec) {
            self.written += 1;
        } else {
            self.ring_full += 1;
        }
    }

    /// Records written, connections skipped for no payload, records lost
    /// to a full ring.
    pub(super) fn totals(&self) -> (u64, u64, u64) {
        (self.written, self.empty, self.ring_full)
    }
}

#[cfg(test)]
mod tests {
    use conf::records::EndReason;

    use super::*;
    use crate::conntrack::State;

    #[test]
    fn a_meter_is_half_a_cache_line() {
        assert_eq!(core::mem::size_of::<FlowMeter>(), 32);
        assert_eq!(core::mem::align_of::<FlowMeter>(), 32);
    }

    #[test]
    fn the_end_reason_follows_the_remover_then_the_state() {
        use EndReason::*;
        let cases = [
            (Ending::AsItsState, State::Established, Timeout),
            (Ending::AsItsState, State::SynSent, Timeout),
            (Ending::AsItsState, State::Udp, Timeout),
            (Ending::AsItsState, State::FinWait, Fin),
            (Ending::AsItsState, State::TimeWait, Fin),
            (Ending::AsItsState, State::Closed, Rst),
            (Ending::Evicted, State::SynSent, Evicted),
            (Ending::Reset, State::Established, Reset),
        ];
        for (ending, state, want) in cases {
            assert_eq!(ending.reason(state), want, "{ending:?} {state:?}");
        }
    }
}
