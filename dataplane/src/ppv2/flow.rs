//! What one connection needs for its PROXY header, and the per-segment
//! rules (docs/design.md §4).
//!
//! Sequence spaces: the client's first data byte is `isn + 1`; the backend
//! sees the `L`-byte header at `isn + 1 .. isn + 1 + L` and every client
//! byte `L` further on. So, once the header length `L` is fixed
//! ("committed"):
//! - client -> backend: `seq += L` for every segment after the SYN, except
//!   the one that carries the header (it keeps `isn + 1`: the header takes
//!   those sequence numbers and its payload follows) and a data-less segment
//!   at `isn + 1` while no header has been sent yet (the backend still
//!   expects `isn + 1` there);
//! - backend -> client: `ack -= L` and every SACK edge `-= L`; values inside
//!   the header map to `isn + 1`;
//! - the backend's SYN-ACK MSS is lowered by the longest header the VIP can
//!   produce, so first segment plus header still fit.
//!
//! The header goes into the segment at `isn + 1` (the first data segment, or
//! with `send_on_connect` the ACK that completes the handshake), and again
//! into every segment at `isn + 1` until the backend acknowledges past the
//! header: a retransmitted first segment carries it again, at the same
//! length, so the backend gets it exactly once. A header never splits;
//! when header plus payload exceed the backend's MSS (or the frame's
//! room), the payload is split and its rest queued as a segment of its own
//! (or, with no room for that, left for the client to retransmit).
//!
//! `L` is fixed at the SYN when it does not depend on the first segment
//! (no `AUTHORITY` TLV, or `send_on_connect`); with `AUTHORITY` it is fixed
//! by the first data segment, and client data beyond it that arrives first
//! is dropped (the client retransmits it) since its sequence numbers cannot
//! be translated yet.

use std::net::IpAddr;

use conf::counters::Counter;

use super::header::{Header, MAX_HEADER_LEN};
use super::queue::Pending;
use super::{seg, tls, PpConfig, PpWorker};
use crate::conntrack::EntryId;
use crate::counters::Counters;
use crate::wire::{Parsed, TcpFlags};

/// `PpFlow::bits`.
mod bit {
    /// The client's SYN was seen: `client_isn` is valid.
    pub const ISN: u8 = 0x01;
    /// `hdr_len` is fixed and sequence numbers are translated.
    pub const COMMITTED: u8 = 0x02;
    /// A header went out at least once.
    pub const SENT: u8 = 0x04;
    /// The backend acknowledged past the header.
    pub const ACKED: u8 = 0x08;
    /// A retransmission timer runs for the header.
    pub const TIMER: u8 = 0x10;
    /// The backend's SYN-ACK was seen.
    pub const SYNACK: u8 = 0x20;
}

/// `a` is after `b` in sequence space.
fn after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

fn after_eq(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) >= 0
}

/// Applies `map` to a segment's acknowledgement number and SACK edges.
#[inline(always)]
fn remap(frame: &mut [u8], s: &seg::Seg, map: impl Fn(u32) -> u32 + Copy) {
    let ack = s.ack(frame);
    let new = map(ack);
    if new != ack {
        seg::set_ack(frame, s, new);
    }
    seg::map_sack_edges(frame, s, map);
}

/// The addresses and id a connection's header carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ends {
    pub client: (IpAddr, u16),
    pub vip: (IpAddr, u16),
    pub conn_id: u64,
}

/// A client segment on its way out: the connection it belongs to, the port
/// it leaves by, its connection-table entry (for the header's
/// retransmission timer) and the worker's clock.
#[derive(Clone, Copy, Debug)]
pub struct Departure<'a> {
    pub ends: &'a Ends,
    pub out_port: usize,
    pub entry: EntryId,
    pub now: u64,
}

/// Per-connection PROXY state, kept in the connection table's record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PpFlow {
    /// The VIP's settings when the connection started; `enabled == false`
    /// means no header for this connection.
    pub cfg: PpConfig,
    pub client_isn: u32,
    pub backend_isn: u32,
    /// The MSS the backend announced (before clamping).
    pub backend_mss: u16,
    /// Header length `L` once committed.
    pub hdr_len: u16,
    bits: u8,
}

impl PpFlow {
    /// State for a new connection to a VIP with `cfg` (IPv6 when `v6`).
    pub fn new(cfg: PpConfig, v6: bool) -> PpFlow {
        let mut f = PpFlow {
            cfg,
            ..PpFlow::default()
        };
        if let Some(l) = cfg.fixed_len(v6).filter(|_| cfg.enabled) {
            f.hdr_len = l;
            f.bits |= bit::COMMITTED;
        }
        f
    }

    pub fn is_on(&self) -> bool {
        self.cfg.enabled
    }

    fn has(&self, b: u8) -> bool {
        self.bits & b != 0
    }

    /// The backend acknowledged the header.
    pub fn acked(&self) -> bool {
        self.has(bit::ACKED)
    }

    /// A header went out at least once.
    pub fn sent(&self) -> bool {
        self.has(bit::SENT)
    }

    /// The header length is fixed (and sequence numbers translated).
    pub fn committed(&self) -> bool {
        self.has(bit::COMMITTED)
    }

    /// Past the header: it went out and the backend acknowledged it, so
    /// every later segment only has its sequence (client side) or
    /// acknowledgement numbers (backend side) shifted, which the express
    /// lane does with [`PpFlow::shift_client`] / [`PpFlow::map_backend`].
    pub fn steady(&self) -> bool {
        const ALL: u8 = bit::ISN | bit::COMMITTED | bit::SENT | bit::ACKED;
        self.bits & ALL == ALL
    }

    /// What a retransmission timer of this flow should do.
    pub fn pending(&self) -> Pending {
        if self.acked() {
            Pending::Done
        } else {
            Pending::Resend
        }
    }

    fn header<'a>(&self, e: &Ends, authority: Option<&'a [u8]>) -> Header<'a> {
        Header {
            src: e.client,
            dst: e.vip,
            unique_id: self.cfg.unique_id.then_some(e.conn_id),
            authority: authority.filter(|_| self.cfg.authority && !self.cfg.send_on_connect),
            crc32c: self.cfg.crc32c,
            max_len: self.cfg.max_len,
        }
    }

    fn mss_or_default(&self, v6: bool) -> usize {
        match (self.has(bit::SYNACK), self.backend_mss) {
            (true, m) if m > 0 => usize::from(m),
            _ if v6 => 1220,
            _ => 536,
        }
    }

    /// A client -> backend segment of this flow, already translated (NAT,
    /// MACs) in `buf[..len]`; the rest of `buf` is room to grow. Returns the
    /// new frame length, or the counter to drop it under.
    pub fn client_segment(
        &mut self,
        d: &Departure<'_>,
        buf: &mut [u8],
        len: usize,
        p: &Parsed,
        wk: &mut PpWorker,
        counters: &mut Counters,
    ) -> Result<usize, Counter> {
        let e = d.ends;
        let Some(s) = buf.get(..len).and_then(|f| seg::locate(f, p)) else {
            return Err(Counter::DropPpBadSegment);
        };
        let flags = s.flags(buf);
        let seq = s.seq(buf);
        let plen = s.payload_len();
        if flags & TcpFlags::SYN.0 != 0 {
            if flags & TcpFlags::ACK.0 == 0 {
                if !self.has(bit::ISN) {
                    self.client_isn = seq;
                    self.bits |= bit::ISN;
                } else if seq != self.client_isn {
                    // The first SYN fixed where the header goes. A SYN with
                    // another ISN would move that place while the backend
                    // may still count from the first one: data at the first
                    // ISN would then pass unshifted and without our header.
                    return Err(Counter::DropPpSynNewIsn);
                }
            }
            if plen > 0 {
                // TCP Fast Open data would precede the header: the backend
                // acknowledges the SYN only and the client sends it again.
                counters.inc(Counter::PpSynDataStripped);
                return Ok(seg::truncate(buf, &s, 0).end);
            }
            return Ok(len);
        }
        let fin = flags & TcpFlags::FIN.0 != 0;
        if !self.has(bit::ISN) {
            // No SYN went out in this flow: there is no place for a header,
            // so no byte may pass (docs/security.md, PROXY header).
            if plen > 0 || fin {
                return Err(Counter::DropPpMidStream);
            }
            return Ok(len);
        }
        let c1 = self.client_isn.wrapping_add(1);
        let first = seq == c1;
        let rst = flags & TcpFlags::RST.0 != 0;
        if plen > 0 && !self.has(bit::ACKED) && after(c1, seq) {
            // Data starting before the client's first byte: unshifted, it
            // would cover the header's place at the backend (which trims the
            // bytes it had and reads the rest) before our header got there.
            return Err(Counter::DropPpBeforeHeader);
        }
        if !self.has(bit::COMMITTED) {
            if first && plen > 0 && !rst {
                let sni = tls::client_hello_sni(&buf[s.payload..s.end]);
                let l = self
                    .header(e, sni)
                    .encoded_len()
                    .ok_or(Counter::DropPpBadSegment)?;
                self.hdr_len = l as u16;
                self.bits |= bit::COMMITTED;
                return self.carry(d, buf, s, wk, counters);
            }
            if plen > 0 || (fin && !first) {
                return Err(Counter::DropPpAheadOfHeader);
            }
            return Ok(len);
        }
        let wants_header =
            first && !rst && !self.has(bit::ACKED) && (plen > 0 || fin || self.cfg.send_on_connect);
        if wants_header {
            return self.carry(d, buf, s, wk, counters);
        }
        let untouched = first && plen == 0 && !fin && !self.has(bit::SENT);
        if !untouched {
            self.shift_client(buf, &s);
        }
        Ok(len)
    }

    /// Moves a client segment's sequence number past the header (segments
    /// before the first data byte keep theirs until the backend has the
    /// header; from then on every segment moves: a comparison with the
    /// first byte would turn once the stream passed 2 GiB).
    pub fn shift_client(&self, frame: &mut [u8], s: &seg::Seg) {
        let seq = s.seq(frame);
        if self.has(bit::ACKED) || after_eq(seq, self.client_isn.wrapping_add(1)) {
            seg::set_seq(frame, s, seq.wrapping_add(u32::from(self.hdr_len)));
        }
    }

    /// Writes the header into the segment at `isn + 1` (splitting its
    /// payload if needed) and shifts its sequence number.
    fn carry(
        &mut self,
        d: &Departure<'_>,
        buf: &mut [u8],
        mut s: seg::Seg,
        wk: &mut PpWorker,
        counters: &mut Counters,
    ) -> Result<usize, Counter> {
        let Departure {
            ends: e,
            out_port,
            entry,
            now,
        } = *d;
        let l = usize::from(self.hdr_len);
        let sni = if self.cfg.authority {
            tls::client_hello_sni(&buf[s.payload..s.end])
        } else {
            None
        };
        let mut hdr = [0u8; MAX_HEADER_LEN];
        let w = self
            .header(e, sni)
            .write_exact(&mut hdr, l)
            .ok_or(Counter::DropPpBadSegment)?;
        let flags = s.flags(buf);
        let plen = s.payload_len();
        let room = buf.len() - s.end;
        let keep = plen
            .min(self.mss_or_default(s.v6).saturating_sub(l))
            .min((plen + room).saturating_sub(l));
        // The segment keeps its sequence number: the header takes the
        // client's first sequence numbers, the payload follows it.
        if keep < plen {
            counters.inc(Counter::PpSegmentsSplit);
            let frame = &buf[..s.end];
            if !wk
                .emits
                .push_with(out_port, |out| seg::tail(frame, &s, keep, l as u32, out))
            {
                counters.inc(Counter::PpSplitTailDeferred);
            }
            s = seg::truncate(buf, &s, keep);
            if flags & TcpFlags::FIN.0 != 0 {
                // The FIN comes after the rest of the payload.
                seg::set_flags(buf, &s, flags & !TcpFlags::FIN.0);
            }
        }
        let s = seg::insert(buf, &s, &hdr[..l]).ok_or(Counter::DropPpBadSegment)?;
        if self.has(bit::SENT) {
            counters.inc(Counter::PpHeadersRetransmitted);
        } else {
            counters.inc(Counter::PpHeadersInserted);
            counters.add(Counter::PpTlvsDroppedForSize, u64::from(w.dropped));
            if plen == 0 {
                counters.inc(Counter::PpHeadersStandalone);
            }
            self.bits |= bit::SENT;
        }
        if self.cfg.send_on_connect && !self.has(bit::TIMER) {
            if wk
                .timers
                .arm(entry, e.conn_id, now, out_port, &buf[..s.end])
            {
                self.bits |= bit::TIMER;
            } else {
                counters.inc(Counter::PpRetransmitTimerFull);
            }
        }
        Ok(s.end)
    }

    /// A backend -> client segment of this flow, already translated in
    /// `frame`: acknowledgement and SACK edges moved back over the header,
    /// the SYN-ACK's MSS lowered.
    pub fn backend_segment(
        &mut self,
        frame: &mut [u8],
        p: &Parsed,
        counters: &mut Counters,
    ) -> Result<(), Counter> {
        let Some(s) = seg::locate(frame, p) else {
            return Err(Counter::DropPpBadSegment);
        };
        let flags = s.flags(frame);
        if flags & (TcpFlags::SYN.0 | TcpFlags::ACK.0) == TcpFlags::SYN.0 | TcpFlags::ACK.0 {
            self.backend_isn = s.seq(frame);
            self.backend_mss = seg::mss(frame, &s).unwrap_or(0);
            self.bits |= bit::SYNACK;
            let mss = self.mss_or_default(s.v6) as u16;
            let clamp = self.cfg.clamp_len(s.v6);
            if seg::clamp_mss(frame, &s, mss.saturating_sub(clamp).max(64)) {
                counters.inc(Counter::PpMssClamped);
            }
        }
        // Nothing to translate before the length is fixed, nor in a flow
        // picked up mid-stream (no SYN seen: no header ever goes out).
        if !self.has(bit::COMMITTED) || !self.has(bit::ISN) || flags & TcpFlags::ACK.0 == 0 {
            return Ok(());
        }
        let edge = self
            .client_isn
            .wrapping_add(1)
            .wrapping_add(u32::from(self.hdr_len));
        let acks_header = self.has(bit::SENT) && after_eq(s.ack(frame), edge);
        // Mapped as the flow stood: the segment that first acknowledges the
        // header may still SACK bytes inside it.
        self.map_backend(frame, &s);
        if acks_header {
            self.bits |= bit::ACKED;
        }
        Ok(())
    }

    /// Moves a backend segment's acknowledgement number and SACK edges back
    /// over the header: values past it by `L`, values inside it to the
    /// client's first data byte. Once the backend acknowledged the header,
    /// every value moves by `L`: as in [`PpFlow::shift_client`], a
    /// comparison with the header's end would turn after 2 GiB (an old
    /// value inside the header then lands before the client's first byte,
    /// which the client ignores as acknowledged long ago).
    pub fn map_backend(&self, frame: &mut [u8], s: &seg::Seg) {
        let l = u32::from(self.hdr_len);
        if self.has(bit::ACKED) {
            return remap(frame, s, |a| a.wrapping_sub(l));
        }
        let c1 = self.client_isn.wrapping_add(1);
        let edge = c1.wrapping_add(l);
        remap(frame, s, |a: u32| {
            if after_eq(a, edge) {
                a.wrapping_sub(l)
            } else if after(a, c1) {
                c1
            } else {
                a
            }
        })
    }
}
