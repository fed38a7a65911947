//! Flows brought to the established state through the rig (the
//! handshake, and for PROXY protocol flows the header and its ACK), and
//! the frames that then replay them.

use super::frames::{
    addrs_of, client, seq_ack_v4, shuffle, syns, tcp_frame, tcp_payload_len_v4, tcp_segment,
};
use super::rig::{backend_mac, Rig, Vip, CLIENT_MAC, EXT, EXT_MAC, INT, INT_MAC};

/// Prebuilt frames, one per flow.
pub(super) type Frames = Vec<Vec<u8>>;

/// Established flows: the handshake of `n` flows through the rig, then the
/// client's data segments and the backends' (in shuffled flow order).
pub(super) fn establish(rig: &mut Rig, vip: Vip, n: usize) -> anyhow::Result<(Frames, Frames)> {
    let syn = syns(vip, 0, n);
    let sent = rig.exchange(EXT, &syn);
    anyhow::ensure!(
        sent.len() == n && sent.iter().all(|(p, _)| *p == INT),
        "{} of {n} SYNs forwarded (drops {:?})",
        sent.len(),
        rig.w.pipeline.counters().nonzero()
    );
    let mut fwd = Vec::with_capacity(n);
    let mut rev = Vec::with_capacity(n);
    let mut synack = Vec::with_capacity(n);
    for (i, (_, f)) in sent.iter().enumerate() {
        let (src, dst) = addrs_of(f);
        let c = client(vip, 0, i as u32);
        synack.push(tcp_frame(
            backend_mac(dst.0),
            INT_MAC,
            dst,
            src,
            true,
            Some(2),
        ));
        rev.push(tcp_frame(
            backend_mac(dst.0),
            INT_MAC,
            dst,
            src,
            false,
            Some(2),
        ));
        fwd.push(tcp_frame(
            CLIENT_MAC,
            EXT_MAC,
            c,
            (vip.addr(), 80),
            false,
            Some(2),
        ));
    }
    let back = rig.exchange(INT, &synack);
    anyhow::ensure!(back.len() == n, "{} of {n} SYN-ACKs translated", back.len());
    let acked = rig.exchange(EXT, &fwd);
    anyhow::ensure!(acked.len() == n, "{} of {n} ACKs forwarded", acked.len());
    shuffle(&mut fwd);
    shuffle(&mut rev);
    Ok((fwd, rev))
}

/// Established direct-server-return flows: the client's SYN and ACK
/// through the rig (no backend packet ever passes it), then the client's
/// segments in shuffled flow order.
pub(super) fn establish_dsr(rig: &mut Rig, vip: Vip, n: usize) -> anyhow::Result<Frames> {
    let sent = rig.exchange(EXT, &syns(vip, 0, n));
    anyhow::ensure!(
        sent.len() == n && sent.iter().all(|(p, _)| *p == INT),
        "{} of {n} SYNs forwarded (drops {:?})",
        sent.len(),
        rig.w.pipeline.counters().nonzero()
    );
    let mut fwd: Frames = (0..n)
        .map(|i| {
            let c = client(vip, 0, i as u32);
            tcp_frame(CLIENT_MAC, EXT_MAC, c, (vip.addr(), 80), false, Some(2))
        })
        .collect();
    let acked = rig.exchange(EXT, &fwd);
    anyhow::ensure!(acked.len() == n, "{} of {n} ACKs forwarded", acked.len());
    shuffle(&mut fwd);
    Ok(fwd)
}

/// The client's first data of a PROXY protocol flow.
pub(super) const FIRST_DATA: &[u8] = b"GET / HTTP/1.0\r\n\r\n";
/// The backends' initial sequence number in PROXY protocol flows.
pub(super) const BACKEND_ISN: u32 = 1000;

/// Established PROXY protocol v2 flows: the handshake, the client's first
/// data (which gets the header) and the backend's ACK of it, so that every
/// later segment has its sequence (client side) or acknowledgement number
/// (backend side) translated. Then, as for [`establish`], one pure ACK per
/// flow each way.
pub(super) fn establish_proxied(rig: &mut Rig, n: usize) -> anyhow::Result<(Frames, Frames)> {
    let vip = Vip::Proxy4;
    let syn = syns(vip, 0, n);
    let sent = rig.exchange(EXT, &syn);
    anyhow::ensure!(sent.len() == n, "{} of {n} SYNs forwarded", sent.len());
    let sides: Vec<_> = sent.iter().map(|(_, f)| addrs_of(f)).collect();
    let client_seg = |i: usize, seq: u32, payload: &[u8]| {
        let c = client(vip, 0, i as u32);
        let ack = Some(BACKEND_ISN + 1);
        tcp_segment(
            CLIENT_MAC,
            EXT_MAC,
            (c, (vip.addr(), 80)),
            (false, seq, ack),
            payload,
        )
    };
    let backend_seg = |i: usize, syn: bool, seq: u32, ack: u32| {
        let (local, backend) = sides[i];
        tcp_segment(
            backend_mac(backend.0),
            INT_MAC,
            (backend, local),
            (syn, seq, Some(ack)),
            &[],
        )
    };
    let synack: Frames = (0..n)
        .map(|i| backend_seg(i, true, BACKEND_ISN, 2))
        .collect();
    let back = rig.exchange(INT, &synack);
    anyhow::ensure!(back.len() == n, "{} of {n} SYN-ACKs translated", back.len());
    let acks: Frames = (0..n).map(|i| client_seg(i, 2, &[])).collect();
    let acked = rig.exchange(EXT, &acks);
    anyhow::ensure!(acked.len() == n, "{} of {n} ACKs forwarded", acked.len());
    let data: Frames = (0..n).map(|i| client_seg(i, 2, FIRST_DATA)).collect();
    let with_header = rig.exchange(EXT, &data);
    anyhow::ensure!(
        with_header.len() == n,
        "{} of {n} first segments forwarded",
        with_header.len()
    );
    let header = tcp_payload_len_v4(&with_header[0].1) - FIRST_DATA.len();
    anyhow::ensure!(
        header >= 16,
        "no PROXY header in the first segment ({header} bytes more)"
    );
    let after = 2 + FIRST_DATA.len() as u32;
    let backend_ack = after + header as u32;
    let data_acks: Frames = (0..n)
        .map(|i| backend_seg(i, false, BACKEND_ISN + 1, backend_ack))
        .collect();
    let translated = rig.exchange(INT, &data_acks);
    anyhow::ensure!(
        translated.len() == n && translated.iter().all(|(_, f)| seq_ack_v4(f).1 == after),
        "the backends' ACKs do not reach the clients as {after}"
    );
    let fwd: Frames = (0..n).map(|i| client_seg(i, after, &[])).collect();
    let shifted = rig.exchange(EXT, &fwd);
    anyhow::ensure!(
        shifted.len() == n && shifted.iter().all(|(_, f)| seq_ack_v4(f).0 == backend_ack),
        "the clients' segments do not reach the backends at {backend_ack}"
    );
    let mut fwd = fwd;
    let mut rev = data_acks;
    shuffle(&mut fwd);
    shuffle(&mut rev);
    Ok((fwd, rev))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use conf::Config;
    use dataplane::io::{Burst, Frame, PortIo};

    use super::super::frames::{client, syns, tcp_frame};
    use super::super::ports::{BenchPorts, Replay};
    use super::super::rig::config_text;
    use super::*;

    /// The ones' complement sum of `words`, folded.
    fn sum(bytes: &[u8], mut acc: u32) -> u16 {
        for c in bytes.chunks(2) {
            acc += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        }
        while acc > 0xffff {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        acc as u16
    }

    /// Whether the IPv4 header's and the TCP segment's checksums hold.
    fn checksums_hold(f: &[u8]) -> bool {
        let (pseudo, tcp) = if f[12..14] == [0x08, 0x00] {
            let ihl = usize::from(f[14] & 0x0f) * 4;
            if sum(&f[14..14 + ihl], 0) != 0xffff {
                return false;
            }
            let tcp = &f[14 + ihl..];
            let mut p = f[26..34].to_vec();
            p.extend([0, 6]);
            p.extend((tcp.len() as u16).to_be_bytes());
            (p, tcp)
        } else {
            let tcp = &f[54..];
            let mut p = f[22..54].to_vec();
            p.extend((tcp.len() as u32).to_be_bytes());
            p.extend([0, 0, 0, 6]);
            (p, tcp)
        };
        sum(tcp, u32::from(sum(&pseudo, 0))) == 0xffff
    }

    /// Twice over `frames` through the port, as the pipeline receives them.
    fn replayed(port: usize, frames: &[Vec<u8>]) -> (usize, Vec<Vec<u8>>) {
        let replay = Arc::new(Replay::new(frames));
        let mut io = BenchPorts::new(2, 64);
        io.replay(port, &replay, 2 * frames.len() as u64);
        let mut got = Vec::new();
        let mut b = Burst::new();
        while io.remaining() > 0 {
            io.rx_burst(port, &mut b);
            got.extend(b.iter().map(|f| f.data().to_vec()));
            io.tx_burst(1 - port, &mut b);
        }
        (replay.stride(), got)
    }

    fn assert_replayed(what: &str, port: usize, frames: &[Vec<u8>]) {
        let (stride, got) = replayed(port, frames);
        assert_eq!(got.len(), 2 * frames.len(), "{what}");
        for (i, g) in got.iter().enumerate() {
            let want = &frames[i % frames.len()];
            assert_eq!(g, want, "{what}: frame {i}");
            assert!(checksums_hold(g), "{what}: checksums of frame {i}");
        }
        // Only the fields that vary per flow are kept per flow (addresses,
        // ports, MACs and the checksums over them), not whole frames.
        assert!(stride <= 48, "{what}: {stride} bytes per flow");
    }

    /// Every flow of each case's set (both directions), and clients
    /// spread over addresses as well as ports, come out of the port byte
    /// for byte as they were built, checksums included.
    #[test]
    fn the_port_hands_out_the_frames_it_was_given() {
        let cfg = Config::from_toml_str(&config_text(4), "bench.toml").unwrap();
        let hz = crate::clock::tsc_hz(std::time::Duration::from_millis(20)).expect("TSC");
        for vip in [
            Vip::FullNat4,
            Vip::Dnat4,
            Vip::FullNat6,
            Vip::Proxy4,
            Vip::Dsr4,
        ] {
            let mut rig = Rig::new(&cfg, 4, 2048, hz).unwrap();
            rig.freeze();
            let (fwd, rev) = match vip {
                Vip::Proxy4 => establish_proxied(&mut rig, 300).unwrap(),
                Vip::Dsr4 => (establish_dsr(&mut rig, vip, 300).unwrap(), Vec::new()),
                _ => establish(&mut rig, vip, 300).unwrap(),
            };
            assert_replayed(&format!("{vip:?} client->backend"), EXT, &fwd);
            if !rev.is_empty() {
                assert_replayed(&format!("{vip:?} backend->client"), INT, &rev);
            }
            assert_replayed(&format!("{vip:?} SYNs"), EXT, &syns(vip, 1, 300));
        }
        for vip in [Vip::FullNat4, Vip::FullNat6] {
            let spread: Vec<Vec<u8>> = (0..500u32)
                .map(|k| {
                    let c = client(vip, k % 3, k * 977);
                    tcp_frame(CLIENT_MAC, EXT_MAC, c, (vip.addr(), 80), false, Some(2))
                })
                .collect();
            assert_replayed(&format!("{vip:?} spread clients"), EXT, &spread);
        }
        // Frames of different lengths keep their own.
        let mixed = vec![vec![1u8; 60], vec![2; 90], vec![3; 64]];
        let (_, got) = replayed(EXT, &mixed);
        assert_eq!(got[..3], mixed[..]);
    }
}
