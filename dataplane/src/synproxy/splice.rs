//! The splice of a cookie connection: the client's handshake was with
//! border (ISN `cookie`, TSval `our_tsval`, window scale [`OUR_WSCALE`]),
//! the backend's with the client's ISN and options through border. Every
//! later segment has the backend's numbers moved into the cookie's space:
//!
//! - backend -> client: `seq += seq_delta`, `TSval += ts_delta`, the
//!   window rescaled from the backend's scale to border's;
//! - client -> backend: `ack -= seq_delta` and every SACK edge with it,
//!   `TSecr -= ts_delta`, the window rescaled when the backend refused
//!   window scaling (the client then still scales).
//!
//! The client's own sequence numbers and TSvals are the backend's too
//! (border's SYN carried the client's ISN): nothing else moves. Checksums
//! are updated incrementally.

use super::cookie::SynOptions;
use crate::ppv2::seg::{self, Seg};
use crate::tstamp;
use crate::wire::{TcpFlags, TcpPacket};

/// The window scale border announces to clients that offer one: Linux's
/// usual choice, so a Linux backend's windows pass unchanged.
pub const OUR_WSCALE: u8 = 7;

/// `SpFlow::bits`.
mod bit {
    /// The backend's SYN-ACK was seen: the deltas are set.
    pub const SPLICED: u8 = 1;
    /// The connection uses timestamps.
    pub const TS: u8 = 2;
}

/// Per-connection SYN proxy state, kept beside the connection table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpFlow {
    /// Border's ISN towards the client (the cookie).
    pub cookie: u32,
    /// The client's ISN.
    pub client_isn: u32,
    /// Border's SYN-ACK TSval, as the client's ACK echoed it.
    pub our_tsval: u32,
    /// `cookie - backend ISN`.
    pub seq_delta: u32,
    /// `our_tsval - the backend's SYN-ACK TSval`.
    pub ts_delta: u32,
    /// Window shifts: backend -> client (backend's scale minus border's)
    /// and client -> backend (client's minus the one the backend applies).
    pub b2c_shift: i8,
    pub c2b_shift: i8,
    /// The client's window scale (`None`: no scaling).
    pub client_ws: Option<u8>,
    bits: u8,
    /// What the cookie carried: the options of border's SYN, and when it
    /// last went to the backend (a retransmission is due after
    /// [`SYN_RETRY_MS`]).
    pub opts: Option<SynOptions>,
    pub syn_at_ms: u64,
}

/// Border's SYN to the backend goes again when a client segment arrives
/// this long after it and the backend has not answered.
pub const SYN_RETRY_MS: u64 = 1_000;

/// What a backend's SYN-ACK says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackendSynAck {
    pub isn: u32,
    pub tsval: Option<u32>,
    pub wscale: Option<u8>,
}

impl SpFlow {
    /// A connection whose client proved cookie `cookie` with its ACK
    /// (`client_isn` from it, `our_tsval` its TSecr if it has timestamps).
    pub fn new(
        cookie: u32,
        client_isn: u32,
        our_tsval: Option<u32>,
        client_ws: Option<u8>,
    ) -> SpFlow {
        SpFlow {
            cookie,
            client_isn,
            our_tsval: our_tsval.unwrap_or(0),
            client_ws,
            bits: if our_tsval.is_some() { bit::TS } else { 0 },
            ..SpFlow::default()
        }
    }

    /// Whether border's SYN should go to the backend again at `now`.
    pub fn syn_due(&self, now: u64) -> bool {
        !self.spliced() && now.saturating_sub(self.syn_at_ms) >= SYN_RETRY_MS
    }

    pub fn spliced(&self) -> bool {
        self.bits & bit::SPLICED != 0
    }

    /// Takes the backend's SYN-ACK: the deltas from now on.
    pub fn splice(&mut self, b: &BackendSynAck) {
        self.seq_delta = self.cookie.wrapping_sub(b.isn);
        if let (true, Some(v)) = (self.bits & bit::TS != 0, b.tsval) {
            self.ts_delta = self.our_tsval.wrapping_sub(v);
        }
        // Window scaling holds with the backend only if both sent the option.
        let (ours, theirs) = match (self.client_ws, b.wscale) {
            (Some(cw), Some(bw)) => ((OUR_WSCALE, cw), (bw, cw)),
            (Some(cw), None) => ((OUR_WSCALE, cw), (0, 0)),
            (None, _) => ((0, 0), (0, 0)),
        };
        // backend -> client: the backend scales by theirs.0, the client reads by ours.0.
        self.b2c_shift = theirs.0 as i8 - ours.0 as i8;
        // client -> backend: the client scales by ours.1, the backend reads by theirs.1.
        self.c2b_shift = ours.1 as i8 - theirs.1 as i8;
        self.bits |= bit::SPLICED;
    }

    /// A backend RST before its SYN-ACK (the backend refused): its sequence
    /// number becomes the one the client expects next.
    pub fn refuse(&mut self, rst_seq: u32) {
        self.seq_delta = self.cookie.wrapping_add(1).wrapping_sub(rst_seq);
        self.bits |= bit::SPLICED;
    }

    /// A backend -> client segment `s` of `frame`, already translated (NAT).
    pub fn to_client(&self, frame: &mut [u8], s: &Seg) {
        if self.seq_delta != 0 {
            let seq = s.seq(frame);
            seg::set_seq(frame, s, seq.wrapping_add(self.seq_delta));
        }
        if self.b2c_shift != 0 {
            rescale(frame, s, self.b2c_shift);
        }
        if self.bits & bit::TS != 0 && self.ts_delta != 0 {
            if let Some(tcp) = frame.get_mut(s.l4..s.end) {
                tstamp::shift_tsval(tcp, self.ts_delta);
            }
        }
    }

    /// A client -> backend segment `s` of `frame`, before it is translated.
    pub fn to_backend(&self, frame: &mut [u8], s: &Seg) {
        let d = self.seq_delta;
        if d != 0 && TcpFlags(s.flags(frame)).contains(TcpFlags::ACK) {
            let ack = s.ack(frame);
            seg::set_ack(frame, s, ack.wrapping_sub(d));
            seg::map_sack_edges(frame, s, |e| e.wrapping_sub(d));
        }
        if self.c2b_shift != 0 {
            rescale(frame, s, self.c2b_shift);
        }
        if self.bits & bit::TS != 0 && self.ts_delta != 0 {
            if let Some(tcp) = frame.get_mut(s.l4..s.end) {
                unshift_tsecr(tcp, self.ts_delta);
            }
        }
    }
}

/// TSecr -= `delta` (an ACK's echo only).
fn unshift_tsecr(tcp: &mut [u8], delta: u32) {
    tstamp::unshift_tsecr(tcp, delta);
}

/// Multiplies the segment's window by `2^shift` (divides for a negative
/// shift, rounding up so that an open window never reads as closed).
fn rescale(frame: &mut [u8], s: &Seg, shift: i8) {
    let Some(Ok(mut tcp)) = frame.get_mut(s.l4..s.end).map(TcpPacket::new_checked) else {
        return;
    };
    if tcp.flags().contains(TcpFlags::SYN) {
        return; // a SYN's window is never scaled
    }
    let old = tcp.window();
    let new = if shift > 0 {
        (u32::from(old) << shift).min(65535) as u16
    } else {
        let sh = u32::from(shift.unsigned_abs());
        (u32::from(old).div_ceil(1 << sh)) as u16
    };
    if new != old {
        tcp.rewrite_window(new);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ppv2::seg::locate;
    use crate::synproxy::segment::{checksum_ok, timestamps};
    use crate::wire::parse_frame;
    use etherparse::{PacketBuilder, TcpHeader, TcpOptionElement};

    fn seg(
        flags_ack: bool,
        seq: u32,
        ack: u32,
        win: u16,
        ts: Option<(u32, u32)>,
        sack: Option<(u32, u32)>,
    ) -> Vec<u8> {
        let mut h = TcpHeader::new(80, 40000, seq, win);
        h.ack = flags_ack;
        h.acknowledgment_number = ack;
        let mut o = Vec::new();
        if let Some((v, e)) = ts {
            o.push(TcpOptionElement::Noop);
            o.push(TcpOptionElement::Noop);
            o.push(TcpOptionElement::Timestamp(v, e));
        }
        if let Some(b) = sack {
            o.push(TcpOptionElement::Noop);
            o.push(TcpOptionElement::Noop);
            o.push(TcpOptionElement::SelectiveAcknowledgement(
                b,
                [None, None, None],
            ));
        }
        h.set_options(&o).unwrap();
        let mut f = Vec::new();
        PacketBuilder::ethernet2([2; 6], [4; 6])
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp_header(h)
            .write(&mut f, b"data")
            .unwrap();
        f
    }

    fn fields(f: &[u8]) -> (u32, u32, u16, Option<(u32, u32)>) {
        let p = parse_frame(f).unwrap();
        let s = locate(f, &p).unwrap();
        assert!(checksum_ok(f, &s), "checksum");
        let t = &f[s.l4..s.end];
        (
            s.seq(f),
            s.ack(f),
            u16::from_be_bytes([t[14], t[15]]),
            timestamps(t),
        )
    }

    fn flow() -> SpFlow {
        let mut f = SpFlow::new(0xC000_0000, 1000, Some(0x5000_0017), Some(9));
        f.splice(&BackendSynAck {
            isn: 0x1000_0000,
            tsval: Some(0x7000_0000),
            wscale: Some(9),
        });
        f
    }

    #[test]
    fn backend_numbers_move_into_the_cookies_space_and_back() {
        let sp = flow();
        let mut f = seg(true, 0x1000_0001, 1001, 300, Some((0x7000_0100, 77)), None);
        let p = parse_frame(&f).unwrap();
        let s = locate(&f, &p).unwrap();
        sp.to_client(&mut f, &s);
        // Border announced 7, the backend scales by 9: 300 << 2.
        assert_eq!(
            fields(&f),
            (0xC000_0001, 1001, 1200, Some((0x5000_0117, 77)))
        );
        // The client's answer goes back to the backend's numbers.
        let mut f = seg(
            true,
            1001,
            0xC000_0001,
            5000,
            Some((78, 0x5000_0117)),
            Some((0xC000_0100, 0xC000_0200)),
        );
        let p = parse_frame(&f).unwrap();
        let s = locate(&f, &p).unwrap();
        sp.to_backend(&mut f, &s);
        assert_eq!(
            fields(&f),
            (1001, 0x1000_0001, 5000, Some((78, 0x7000_0100)))
        );
        let t = crate::wire::TcpPacket::new_checked(&f[s.l4..s.end]).unwrap();
        let edges: Vec<(u32, u32)> = t
            .options_iter()
            .filter_map(|o| match o {
                Ok(crate::wire::TcpOption::Sack(b)) => Some(b.collect::<Vec<_>>()),
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(edges, vec![(0x1000_0100, 0x1000_0200)]);
    }

    #[test]
    fn windows_follow_whoever_refused_scaling() {
        let mut sp = SpFlow::new(5, 1, None, Some(8));
        sp.splice(&BackendSynAck {
            isn: 5,
            tsval: None,
            wscale: None,
        });
        // The backend does not scale: its 65535 reads as 65535 >> 7 rounded up.
        let mut f = seg(true, 6, 2, 65535, None, None);
        let p = parse_frame(&f).unwrap();
        let s = locate(&f, &p).unwrap();
        sp.to_client(&mut f, &s);
        assert_eq!(fields(&f).2, 512);
        // The client scales by 8, the backend reads unscaled: capped.
        let mut f = seg(true, 2, 6, 1000, None, None);
        let p = parse_frame(&f).unwrap();
        let s = locate(&f, &p).unwrap();
        sp.to_backend(&mut f, &s);
        assert_eq!(fields(&f).2, 65535);
        // Same scale and no deltas: nothing changes.
        let mut sp = SpFlow::new(5, 1, None, None);
        sp.splice(&BackendSynAck {
            isn: 5,
            tsval: None,
            wscale: None,
        });
        let f0 = seg(true, 6, 2, 777, None, None);
        let mut f = f0.clone();
        let p = parse_frame(&f).unwrap();
        let s = locate(&f, &p).unwrap();
        sp.to_client(&mut f, &s);
        sp.to_backend(&mut f, &s);
        assert_eq!(f, f0);
    }

    #[test]
    fn a_refusing_backends_rst_lands_on_the_clients_next_number() {
        let mut sp = SpFlow::new(0x1234, 1, None, None);
        sp.refuse(0);
        let mut f = seg(true, 0, 2, 0, None, None);
        let p = parse_frame(&f).unwrap();
        let s = locate(&f, &p).unwrap();
        sp.to_client(&mut f, &s);
        assert_eq!(fields(&f).0, 0x1235);
    }
}
