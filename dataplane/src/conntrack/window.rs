//! What a TCP flow's segments say about its two sequence spaces, and the
//! checks a RST or an ICMP error about the flow must pass before it may
//! change anything (RFC 5961 §3, RFC 5927 §4.1).
//!
//! Per direction the entry keeps, in its cold cache line ([`TcpTrack`]):
//! - `nxt`: the sequence number after the last new byte that direction
//!   sent (its `SND.NXT` as seen here);
//! - `ack`: the highest acknowledgement it sent (its `RCV.NXT` for the
//!   other direction, as far as it told);
//! - `win`: the window field of that segment, and the window scale its SYN
//!   announced (RFC 7323: only when both SYNs carried the option).
//!
//! A value moves only forwards and only by what a real peer could send:
//! `nxt` within the receiver's advertised window, `ack` never past what the
//! other side sent. A spoofed segment therefore moves nothing unless it
//! lands inside the window, the same bound every stateful middlebox has.
//!
//! A RST sent in direction `d` is then judged against the receiver's next
//! expected sequence number, which lies between the last `ack` the receiver
//! sent and the sender's `nxt` (both, when nothing is in flight):
//! - in that range: [`RstFit::Exact`], the flow closes;
//! - elsewhere in the receiver's window: [`RstFit::InWindow`], forwarded
//!   unchanged (an RFC 5961 endpoint answers with a challenge ACK; a peer
//!   that really reset answers that with a RST at the exact number) while
//!   the flow's state stays;
//! - outside: [`RstFit::Outside`], dropped.
//!
//! Flows picked up mid-stream (no SYN seen) know no window scale: 14, the
//! largest, is assumed, so their window check is loose, but their exact
//! check is as tight as any once a segment from each side was seen. While
//! one side has not been seen, its window is taken as the largest possible
//! ([`MAX_WINDOW`]) and the exact value is the one that side's peer told.
//! A RST with no reference at all (the first answer to a SYN) is exact only
//! if it acknowledges exactly the SYN (RFC 9293 §3.10.7.3).

use crate::wire::TcpFlags;

/// The largest window RFC 7323 allows: 65535 << 14.
pub const MAX_WINDOW: u32 = 65_535 << 14;

/// The window scale assumed for a side whose SYN was not seen.
const UNKNOWN_SCALE: u8 = 14;

/// `TcpSeg::wscale` of a SYN without the option (and of non-SYN segments).
pub const NO_WSCALE: u8 = 0xFF;

/// `TcpTrack::known` bits: `NXT << d`, `ACK_KNOWN << d`, `SYN_SEEN << d`.
const NXT_KNOWN: u8 = 0x01;
const ACK_KNOWN: u8 = 0x04;
const SYN_SEEN: u8 = 0x10;

/// `a` is after `b` in sequence space.
#[inline(always)]
fn after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// The fields of a TCP segment the connection table tracks, read from its
/// header ([`TcpSeg::parse`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpSeg {
    /// The flags byte.
    pub flags: u8,
    pub seq: u32,
    pub ack: u32,
    /// The window field, unscaled.
    pub win: u16,
    /// Payload bytes.
    pub len: u32,
    /// A SYN's window scale option (shift count), [`NO_WSCALE`] if none.
    pub wscale: u8,
}

impl TcpSeg {
    /// A segment of `flags` at sequence and acknowledgement 0 with no
    /// payload (tests and benchmarks).
    pub const fn flags(flags: u8) -> TcpSeg {
        TcpSeg {
            flags,
            seq: 0,
            ack: 0,
            win: 0,
            len: 0,
            wscale: NO_WSCALE,
        }
    }

    /// The fields of the TCP header at the start of `tcp` (at least its 20
    /// fixed bytes; the options too for a SYN's window scale) whose segment
    /// carries `payload` bytes. `None` if `tcp` is shorter than 20 bytes.
    #[inline(always)]
    pub fn parse(tcp: &[u8], payload: usize) -> Option<TcpSeg> {
        let h: &[u8; 20] = tcp.get(..20)?.try_into().ok()?;
        let flags = h[13];
        let mut s = TcpSeg {
            flags,
            seq: u32::from_be_bytes([h[4], h[5], h[6], h[7]]),
            ack: u32::from_be_bytes([h[8], h[9], h[10], h[11]]),
            win: u16::from_be_bytes([h[14], h[15]]),
            len: payload as u32,
            wscale: NO_WSCALE,
        };
        if flags & TcpFlags::SYN.0 != 0 {
            s.wscale = syn_wscale(tcp);
        }
        Some(s)
    }

    /// The sequence number after this segment (payload, SYN and FIN each
    /// take sequence space).
    #[inline(always)]
    pub fn end(&self) -> u32 {
        self.seq
            .wrapping_add(self.len)
            .wrapping_add(u32::from(self.flags & TcpFlags::SYN.0 != 0))
            .wrapping_add(u32::from(self.flags & TcpFlags::FIN.0 != 0))
    }
}

/// The window scale option of a SYN's header, [`NO_WSCALE`] without one
/// (or with malformed options).
#[cold]
fn syn_wscale(tcp: &[u8]) -> u8 {
    use crate::wire::tcp::{TcpOption, TcpOptions};
    let doff = usize::from(tcp.get(12).map_or(0, |b| b >> 4)) * 4;
    let Some(opts) = tcp.get(20..doff) else {
        return NO_WSCALE;
    };
    for o in TcpOptions::new(opts) {
        match o {
            Ok(TcpOption::WindowScale(s)) => return s.min(14),
            Ok(_) => {}
            Err(_) => return NO_WSCALE,
        }
    }
    NO_WSCALE
}

/// How a RST fits what the flow's receiver expects (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RstFit {
    /// At the receiver's next expected sequence number: the flow closes.
    Exact,
    /// In the receiver's window, not at its next expected number: forwarded,
    /// the flow's state kept.
    InWindow,
    /// Outside the receiver's window: dropped.
    Outside,
}

/// One TCP flow's sequence tracking (see the module docs). Index 0 is the
/// original direction (client -> VIP), 1 the reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct TcpTrack {
    nxt: [u32; 2],
    ack: [u32; 2],
    win: [u16; 2],
    /// Per side: the window scale its SYN announced in the high nibble
    /// (15: none), and in the low nibble the shift applied to its window:
    /// both announced: its own; one did not: 0; a SYN not seen:
    /// [`UNKNOWN_SCALE`].
    ws: [u8; 2],
    /// `NXT_KNOWN`, `ACK_KNOWN`, `SYN_SEEN` bits per direction.
    known: u8,
}

impl Default for TcpTrack {
    fn default() -> Self {
        TcpTrack::NEW
    }
}

impl TcpTrack {
    /// Nothing seen yet.
    pub const NEW: TcpTrack = TcpTrack {
        nxt: [0; 2],
        ack: [0; 2],
        win: [0; 2],
        ws: [0xF0 | UNKNOWN_SCALE; 2],
        known: 0,
    };

    #[inline(always)]
    fn has(&self, bit: u8, d: usize) -> bool {
        self.known & (bit << d) != 0
    }

    /// The shift applied to side `d`'s window.
    #[inline(always)]
    fn scale(&self, d: usize) -> u32 {
        u32::from(self.ws[d] & 15)
    }

    /// The window side `d` last advertised, scaled; [`MAX_WINDOW`] if it
    /// advertised none yet.
    #[inline(always)]
    fn window(&self, d: usize) -> u32 {
        if self.has(ACK_KNOWN, d) {
            u32::from(self.win[d]) << self.scale(d)
        } else {
            MAX_WINDOW
        }
    }

    /// Takes in a segment sent in direction `d` (0: original, 1: reply)
    /// that is not a RST: moves `nxt`, `ack` and `win` forward where the
    /// segment is plausible, and learns window scales from SYNs.
    #[inline(always)]
    pub fn note(&mut self, d: usize, s: &TcpSeg) {
        let r = d ^ 1;
        let end = s.end();
        // New data, and within what the receiver allowed (right edge: its
        // last ack plus its window; while it sent none: anything ahead).
        let allowed =
            !self.has(ACK_KNOWN, r) || !after(end, self.ack[r].wrapping_add(self.window(r)));
        let fresh = !self.has(NXT_KNOWN, d) || (after(end, self.nxt[d]) && allowed);
        if fresh {
            self.nxt[d] = end;
        }
        // An acknowledgement never goes back, nor past what the other side
        // sent.
        if s.flags & TcpFlags::ACK.0 != 0
            && (!self.has(ACK_KNOWN, d)
                || (!after(self.ack[d], s.ack)
                    && (!self.has(NXT_KNOWN, r) || !after(s.ack, self.nxt[r]))))
        {
            self.ack[d] = s.ack;
            self.win[d] = s.win;
            self.known |= ACK_KNOWN << d;
        }
        self.known |= NXT_KNOWN << d;
        if s.flags & TcpFlags::SYN.0 != 0 {
            self.syn(d, s.wscale);
        }
    }

    /// Whether a segment from side `d` acknowledging `ack` acknowledges the
    /// other side's SYN and nothing it has not sent: the ACK that completes
    /// a handshake (`ISN + 1` while that side has sent no data yet).
    #[inline]
    pub fn acks_syn(&self, d: usize, ack: u32) -> bool {
        let r = (d & 1) ^ 1;
        self.has(SYN_SEEN, r) && self.has(NXT_KNOWN, r) && ack == self.nxt[r]
    }

    /// Whether both sides' `nxt` and `ack` are known: what
    /// [`TcpTrack::note_steady`] needs.
    #[inline(always)]
    pub fn steady(&self) -> bool {
        const ALL: u8 = NXT_KNOWN | NXT_KNOWN << 1 | ACK_KNOWN | ACK_KNOWN << 1;
        self.known & ALL == ALL
    }

    /// [`TcpTrack::note`] for the common segment, short and without
    /// branches on what is known: no SYN, FIN or RST, and both sides'
    /// values known ([`TcpTrack::steady`]).
    #[inline(always)]
    pub fn note_steady(&mut self, d: usize, s: &TcpSeg) {
        debug_assert!(self.steady() && s.flags & (TcpFlags::SYN.0 | TcpFlags::FIN.0) == 0);
        let d = d & 1;
        let r = d ^ 1;
        let end = s.seq.wrapping_add(s.len);
        let right = self.ack[r].wrapping_add(u32::from(self.win[r]) << (self.ws[r] & 15));
        let fresh =
            (end.wrapping_sub(self.nxt[d]) as i32 > 0) & (right.wrapping_sub(end) as i32 >= 0);
        if fresh {
            self.nxt[d] = end;
        }
        let acks = (s.flags & TcpFlags::ACK.0 != 0)
            & (s.ack.wrapping_sub(self.ack[d]) as i32 >= 0)
            & (self.nxt[r].wrapping_sub(s.ack) as i32 >= 0);
        if acks {
            self.ack[d] = s.ack;
            self.win[d] = s.win;
        }
    }

    /// Whether side `d`'s `nxt` and `ack` are known and nothing of the
    /// other side is: a one-way (DSR) flow, whose backend's packets never
    /// pass, once its client has acknowledged something.
    /// [`TcpTrack::note_one_way`] is [`TcpTrack::note`] for it.
    #[inline(always)]
    pub fn one_way_steady(&self, d: usize) -> bool {
        let d = d & 1;
        const SIDE: u8 = NXT_KNOWN | ACK_KNOWN;
        self.known & (SIDE | SIDE << 1) == SIDE << d
    }

    /// [`TcpTrack::note`] for the common segment of a one-way flow (no
    /// SYN, FIN or RST; [`TcpTrack::one_way_steady`]): with nothing known
    /// of the other side, any window allows the data and nothing bounds
    /// the acknowledgement but the last one.
    #[inline(always)]
    pub fn note_one_way(&mut self, d: usize, s: &TcpSeg) {
        debug_assert!(self.one_way_steady(d) && s.flags & (TcpFlags::SYN.0 | TcpFlags::FIN.0) == 0);
        let d = d & 1;
        let end = s.seq.wrapping_add(s.len);
        if after(end, self.nxt[d]) {
            self.nxt[d] = end;
        }
        if s.flags & TcpFlags::ACK.0 != 0 && !after(self.ack[d], s.ack) {
            self.ack[d] = s.ack;
            self.win[d] = s.win;
        }
    }

    /// A SYN from side `d` announced window scale `ws` ([`NO_WSCALE`]).
    #[cold]
    fn syn(&mut self, d: usize, ws: u8) {
        self.known |= SYN_SEEN << d;
        self.ws[d] = ws.min(15) << 4 | (self.ws[d] & 15);
        let both = SYN_SEEN | SYN_SEEN << 1;
        let announced = self.ws.map(|w| w >> 4);
        let shift = |d: usize| {
            if self.known & both != both {
                UNKNOWN_SCALE
            } else if announced.contains(&15) {
                0
            } else {
                announced[d]
            }
        };
        self.ws = [announced[0] << 4 | shift(0), announced[1] << 4 | shift(1)];
    }

    /// How a RST sent in direction `d` fits what its receiver expects.
    pub fn judge_rst(&self, d: usize, s: &TcpSeg) -> RstFit {
        let r = d ^ 1;
        // The receiver's next expected number lies in [lo, hi].
        let lo = self.has(ACK_KNOWN, r).then_some(self.ack[r]);
        let hi = self.has(NXT_KNOWN, d).then_some(self.nxt[d]);
        let wnd = self.window(r);
        let (lo, hi) = match (lo, hi) {
            (Some(lo), Some(hi)) => (lo, hi),
            (Some(x), None) | (None, Some(x)) => (x, x),
            // Nothing heard from the receiver's peer's side: only a RST
            // that acknowledges exactly what the receiver sent.
            (None, None) => {
                let acks_it = s.flags & TcpFlags::ACK.0 != 0
                    && self.has(NXT_KNOWN, r)
                    && s.ack == self.nxt[r];
                return if acks_it {
                    RstFit::Exact
                } else {
                    RstFit::Outside
                };
            }
        };
        let span = hi.wrapping_sub(lo);
        let in_range = span <= wnd && s.seq.wrapping_sub(lo) <= span;
        if in_range || s.seq == lo || s.seq == hi {
            return RstFit::Exact;
        }
        // RFC 5961: RCV.NXT <= seq < RCV.NXT + RCV.WND. Without the
        // receiver's ack, `lo` is the sender's own edge: either side of it.
        let ahead = s.seq.wrapping_sub(lo);
        let inside = if self.has(ACK_KNOWN, r) {
            ahead < wnd.max(span.min(MAX_WINDOW)).max(1)
        } else {
            ahead < wnd || lo.wrapping_sub(s.seq) < wnd
        };
        if inside {
            RstFit::InWindow
        } else {
            RstFit::Outside
        }
    }

    /// Whether an ICMP error may be about a segment sent in direction `d`
    /// at sequence number `seq` (RFC 5927 §4.1: between the oldest
    /// unacknowledged number and the next one, as seen here). True when
    /// nothing was seen of that direction.
    pub fn quote_plausible(&self, d: usize, seq: u32) -> bool {
        let r = d ^ 1;
        if !self.has(NXT_KNOWN, d) {
            return true;
        }
        let hi = self.nxt[d];
        let lo = if self.has(ACK_KNOWN, r) && !after(self.ack[r], hi) {
            self.ack[r]
        } else {
            hi.wrapping_sub(self.window(r))
        };
        seq.wrapping_sub(lo) <= hi.wrapping_sub(lo)
    }

    /// The sequence number a RST sent in direction `d` must carry to be
    /// [`RstFit::Exact`] (the receiver's last acknowledgement, else the
    /// sender's next number), if any is known.
    pub fn exact_rst_seq(&self, d: usize) -> Option<u32> {
        let r = d ^ 1;
        if self.has(ACK_KNOWN, r) {
            Some(self.ack[r])
        } else {
            self.has(NXT_KNOWN, d).then_some(self.nxt[d])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIN: u8 = TcpFlags::FIN.0;
    const SYN: u8 = TcpFlags::SYN.0;
    const RST: u8 = TcpFlags::RST.0;
    const PSH: u8 = TcpFlags::PSH.0;
    const ACK: u8 = TcpFlags::ACK.0;

    fn seg(flags: u8, seq: u32, ack: u32, win: u16, len: u32) -> TcpSeg {
        TcpSeg {
            flags,
            seq,
            ack,
            win,
            len,
            wscale: NO_WSCALE,
        }
    }

    fn syn(flags: u8, seq: u32, ack: u32, win: u16, ws: u8) -> TcpSeg {
        TcpSeg {
            wscale: ws,
            ..seg(flags, seq, ack, win, 0)
        }
    }

    /// A handshake with scale 7 both ways, then 1000 bytes each way, all
    /// acknowledged: client ISN 1000, server ISN 5000.
    fn established() -> TcpTrack {
        let mut t = TcpTrack::default();
        t.note(0, &syn(SYN, 1000, 0, 64_240, 7));
        t.note(1, &syn(SYN | ACK, 5000, 1001, 65_160, 7));
        t.note(0, &seg(ACK, 1001, 5001, 502, 0));
        t.note(0, &seg(ACK, 1001, 5001, 502, 1000));
        t.note(1, &seg(ACK, 5001, 2001, 509, 1000));
        t.note(0, &seg(ACK, 2001, 6001, 502, 0));
        t
    }

    #[test]
    fn segments_move_the_edges() {
        let t = established();
        assert_eq!(t.nxt, [2001, 6001]);
        assert_eq!(t.ack, [6001, 2001]);
        assert_eq!(t.win, [502, 509]);
        assert_eq!((t.scale(0), t.scale(1)), (7, 7));
        assert_eq!(t.window(1), 509 << 7);
    }

    #[test]
    fn rst_at_the_next_expected_number_is_exact() {
        let t = established();
        assert_eq!(t.judge_rst(0, &seg(RST, 2001, 0, 0, 0)), RstFit::Exact);
        assert_eq!(
            t.judge_rst(1, &seg(RST | ACK, 6001, 2001, 0, 0)),
            RstFit::Exact
        );
    }

    #[test]
    fn rst_in_window_but_not_exact_is_not_exact() {
        let t = established();
        assert_eq!(t.judge_rst(0, &seg(RST, 2002, 0, 0, 0)), RstFit::InWindow);
        let edge = 2001 + (509 << 7) - 1;
        assert_eq!(t.judge_rst(0, &seg(RST, edge, 0, 0, 0)), RstFit::InWindow);
        assert_eq!(
            t.judge_rst(0, &seg(RST, edge + 1, 0, 0, 0)),
            RstFit::Outside
        );
    }

    #[test]
    fn rst_outside_the_window_is_outside() {
        let t = established();
        for seq in [0, 2000, 2001 + (1 << 20), 0x8000_0000, 1_000_000_000] {
            assert_eq!(
                t.judge_rst(0, &seg(RST, seq, 0, 0, 0)),
                RstFit::Outside,
                "{seq}"
            );
        }
        assert_eq!(t.judge_rst(1, &seg(RST, 6000, 0, 0, 0)), RstFit::Outside);
    }

    #[test]
    fn rst_anywhere_in_flight_data_is_exact() {
        // The client sent 300 more bytes the server has not acknowledged
        // yet: the server's next expected number is anywhere in between.
        let mut t = established();
        t.note(0, &seg(ACK, 2001, 6001, 502, 300));
        for seq in [2001, 2100, 2301] {
            assert_eq!(
                t.judge_rst(0, &seg(RST, seq, 0, 0, 0)),
                RstFit::Exact,
                "{seq}"
            );
        }
        assert_eq!(t.judge_rst(0, &seg(RST, 2302, 0, 0, 0)), RstFit::InWindow);
    }

    #[test]
    fn spoofed_segments_outside_the_window_move_nothing() {
        let mut t = established();
        let before = t;
        // Data far ahead of the window, an ack of data never sent, an ack
        // going back: none is taken in.
        t.note(0, &seg(ACK, 0x4000_0000, 6001, 502, 100));
        t.note(1, &seg(ACK, 6001, 0x7000_0000, 0xFFFF, 0));
        t.note(1, &seg(ACK, 6001, 1500, 0xFFFF, 0));
        assert_eq!(t, before);
        // So a RST at the spoofed edges is still refused.
        assert_eq!(
            t.judge_rst(0, &seg(RST, 0x4000_0064, 0, 0, 0)),
            RstFit::Outside
        );
        assert_eq!(
            t.judge_rst(1, &seg(RST, 0x7000_0000, 0, 0, 0)),
            RstFit::Outside
        );
    }

    #[test]
    fn answer_to_a_syn_must_acknowledge_it() {
        let mut t = TcpTrack::default();
        t.note(0, &syn(SYN, 1000, 0, 64_240, 7));
        // Connection refused: RST+ACK acknowledging the SYN.
        assert_eq!(
            t.judge_rst(1, &seg(RST | ACK, 0, 1001, 0, 0)),
            RstFit::Exact
        );
        assert_eq!(
            t.judge_rst(1, &seg(RST | ACK, 0, 1002, 0, 0)),
            RstFit::Outside
        );
        assert_eq!(t.judge_rst(1, &seg(RST, 0, 1001, 0, 0)), RstFit::Outside);
        // The client aborting its own SYN: at its next number.
        assert_eq!(t.judge_rst(0, &seg(RST, 1001, 0, 0, 0)), RstFit::Exact);
    }

    #[test]
    fn scale_applies_only_when_both_syns_announce_it() {
        let mut t = TcpTrack::default();
        t.note(0, &syn(SYN, 1000, 0, 64_240, 7));
        assert_eq!((t.scale(0), t.scale(1)), (14, 14));
        t.note(1, &syn(SYN | ACK, 5000, 1001, 65_160, NO_WSCALE));
        assert_eq!((t.scale(0), t.scale(1)), (0, 0));
    }

    #[test]
    fn mid_stream_pickup_judges_by_what_it_saw() {
        // Only the client's segments seen (picked up mid-stream).
        let mut t = TcpTrack::default();
        t.note(0, &seg(ACK, 70_000, 90_000, 1000, 100));
        assert_eq!((t.scale(0), t.scale(1)), (14, 14));
        // From the client: its own next number.
        assert_eq!(t.judge_rst(0, &seg(RST, 70_100, 0, 0, 0)), RstFit::Exact);
        assert_eq!(t.judge_rst(0, &seg(RST, 70_101, 0, 0, 0)), RstFit::InWindow);
        // From the server: what the client acknowledged.
        assert_eq!(t.judge_rst(1, &seg(RST, 90_000, 0, 0, 0)), RstFit::Exact);
        assert_eq!(t.judge_rst(1, &seg(RST, 90_001, 0, 0, 0)), RstFit::InWindow);
        // Then the server: the window of a side whose SYN was never seen
        // is scaled by 14.
        t.note(1, &seg(ACK, 90_000, 70_100, 10, 0));
        assert_eq!(t.window(1), 10 << 14);
        assert_eq!(
            t.judge_rst(0, &seg(RST, 70_100 + (10 << 14), 0, 0, 0)),
            RstFit::Outside
        );
    }

    #[test]
    fn icmp_quotes_must_be_in_flight() {
        let mut t = established();
        t.note(0, &seg(ACK, 2001, 6001, 502, 1400));
        assert!(t.quote_plausible(0, 2001));
        assert!(t.quote_plausible(0, 3000));
        assert!(t.quote_plausible(0, 3401));
        assert!(!t.quote_plausible(0, 3402));
        assert!(!t.quote_plausible(0, 2000));
        assert!(!t.quote_plausible(0, 0x9000_0000));
        assert!(t.quote_plausible(1, 6001));
        assert!(!t.quote_plausible(1, 5000));
        // A direction never seen: nothing to check against.
        assert!(TcpTrack::default().quote_plausible(1, 12345));
    }

    #[test]
    fn note_steady_is_note() {
        let base = established();
        assert!(base.steady());
        let segs = [
            seg(ACK, 2001, 6001, 502, 100),
            seg(ACK, 2001, 6001, 502, 0),
            seg(ACK, 1500, 6001, 7, 10),
            seg(ACK, 2001, 7000, 502, 0),
            seg(ACK, 2001, 5000, 9, 0),
            seg(PSH, 2001, 9, 9, 10),
            seg(ACK, 0x4000_0000, 6001, 502, 100),
            seg(ACK, 2001 + (509 << 7) - 10, 6001, 502, 10),
            seg(ACK, 2001 + (509 << 7) - 10, 6001, 502, 11),
        ];
        for d in 0..2 {
            for s in &segs {
                let (mut a, mut b) = (base, base);
                a.note(d, s);
                b.note_steady(d, s);
                assert_eq!(a, b, "{d} {s:?}");
            }
        }
    }

    /// A one-way flow (DSR: the backend's packets never pass): the
    /// client's SYN, its handshake ACK and 1000 bytes, client ISN 1000.
    fn one_way() -> TcpTrack {
        let mut t = TcpTrack::default();
        t.note(0, &syn(SYN, 1000, 0, 64_240, 7));
        t.note(0, &seg(ACK, 1001, 5001, 502, 0));
        t.note(0, &seg(ACK, 1001, 5001, 502, 1000));
        t
    }

    #[test]
    fn note_one_way_is_note() {
        let base = one_way();
        assert!(base.one_way_steady(0) && !base.one_way_steady(1) && !base.steady());
        assert!(!established().one_way_steady(0) && !established().one_way_steady(1));
        assert!(!TcpTrack::default().one_way_steady(0));
        let segs = [
            seg(ACK, 2001, 6001, 502, 100),
            seg(ACK, 2001, 5001, 502, 0),
            seg(ACK, 1500, 6001, 7, 10),
            seg(ACK, 2001, 5000, 9, 0),
            seg(PSH, 2001, 9, 9, 10),
            seg(ACK, 0x4000_0000, 6001, 502, 100),
            seg(ACK, 0x9000_0000, 0x9000_0000, 502, 100),
            seg(0, 1900, 6001, 502, 50),
        ];
        for s in &segs {
            let (mut a, mut b) = (base, base);
            a.note(0, s);
            b.note_one_way(0, s);
            assert_eq!(a, b, "{s:?}");
            // And again from where that left it.
            for t in &segs {
                let (mut a2, mut b2) = (a, a);
                a2.note(0, t);
                b2.note_one_way(0, t);
                assert_eq!(a2, b2, "{s:?} then {t:?}");
            }
        }
    }

    #[test]
    fn parse_reads_the_header_and_a_syns_scale() {
        let mut h = [0u8; 32];
        h[4..8].copy_from_slice(&1000u32.to_be_bytes());
        h[8..12].copy_from_slice(&7u32.to_be_bytes());
        h[12] = 8 << 4;
        h[13] = SYN;
        h[14..16].copy_from_slice(&64_240u16.to_be_bytes());
        h[20..24].copy_from_slice(&[1, 3, 3, 9]); // NOP, WS 9
        let s = TcpSeg::parse(&h, 0).unwrap();
        assert_eq!(
            (s.seq, s.ack, s.win, s.wscale, s.end()),
            (1000, 7, 64_240, 9, 1001)
        );
        h[13] = ACK | FIN;
        let s = TcpSeg::parse(&h, 10).unwrap();
        assert_eq!((s.wscale, s.end()), (NO_WSCALE, 1011));
        assert_eq!(TcpSeg::parse(&h[..19], 0), None);
    }
}
