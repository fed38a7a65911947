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
