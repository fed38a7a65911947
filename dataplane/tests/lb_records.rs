//! Connection records (docs/records.md) on byte fixtures through
//! `Worker::poll_once`: every forwarded packet is metered, and when the
//! entry goes its record lands in the worker's ring of a real records
//! region, as border-mgmt will read it.

mod support;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use conf::counters::Counter;
use conf::os::files::Access;
use conf::records::{ConnRecord, EndReason, RecordsRegion, REC_FULL_NAT, REC_PAYLOAD};
use support::lb::flags::{ACK, FIN, PSH, RST, SYN};
use support::lb::*;

const CISN: u32 = 1000;
const BISN: u32 = 70_000;

/// A records region of `slots` per ring for `workers`, in a directory of
/// the test's own (kept: the region is leaked with the workers).
fn region(name: &str, workers: usize, slots: u32) -> &'static RecordsRegion {
    let dir = std::env::temp_dir().join(format!("border-lb-records-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path: PathBuf = dir.join(name);
    let r = RecordsRegion::create(&path, workers, slots, Access::PRIVATE).unwrap();
    Box::leak(Box::new(r))
}

fn node_with(records: &'static RecordsRegion, log_empty: bool) -> Node {
    Setup {
        records: Some((records, log_empty)),
        ..Setup::default()
    }
    .node()
}

fn drained(r: &RecordsRegion) -> Vec<ConnRecord> {
    let mut out = Vec::new();
    r.drain(0, usize::MAX, |x| {
        out.push(x.expect("a well-formed record"))
    });
    out
}

/// Polls until the expiry sweep has passed over the whole table.
fn sweep(n: &mut Node) {
    for _ in 0..64 {
        n.poll();
    }
}

fn ip_len(p: &Pkt) -> u64 {
    p.ip_bytes().len() as u64
}

#[test]
fn a_closed_full_nat_connection_leaves_one_record_with_its_traffic() {
    let r = region("fin", 1, 1024);
    let mut n = node_with(r, false);
    n.advance_ms(5_000);
    let (client, vip) = (sa(CLIENT4, 47000), sa(VIP4, 80));
    let mut sent = [(0u64, 0u64); 2];
    let mut to_backend = |n: &mut Node, p: Pkt| {
        sent[0].0 += 1;
        sent[0].1 += ip_len(&p);
        decode(&n.forward(EXT, &p.build(), INT))
    };
    let syn = Pkt {
        seq: CISN,
        ack: 0,
        ..Pkt::tcp(client, vip, SYN)
    };
    let fwd = to_backend(&mut n, syn);
    let (backend, local) = (fwd.dst, fwd.src);
    let from_backend = |flags, seq, ack, payload: &[u8]| Pkt {
        seq,
        ack,
        ..Pkt::tcp(backend, local, flags)
            .by_backend()
            .payload(payload)
    };
    let from_client = |flags, seq, ack, payload: &[u8]| Pkt {
        seq,
        ack,
        ..Pkt::tcp(client, vip, flags).payload(payload)
    };
    let mut replies = Vec::new();
    replies.push(from_backend(SYN | ACK, BISN, CISN + 1, b""));
    n.forward(INT, &replies[0].build(), EXT);
    to_backend(&mut n, from_client(ACK, CISN + 1, BISN + 1, b""));
    n.advance_ms(20);
    to_backend(
        &mut n,
        from_client(ACK | PSH, CISN + 1, BISN + 1, &[7; 100]),
    );
    replies.push(from_backend(ACK | PSH, BISN + 1, CISN + 101, &[9; 300]));
    n.forward(INT, &replies[1].build(), EXT);
    n.advance_ms(30);
    to_backend(&mut n, from_client(ACK | FIN, CISN + 101, BISN + 301, b""));
    replies.push(from_backend(ACK | FIN, BISN + 301, CISN + 102, b""));
    n.forward(INT, &replies[2].build(), EXT);
    to_backend(&mut n, from_client(ACK, CISN + 102, BISN + 302, b""));
    for p in &replies {
        sent[1].0 += 1;
        sent[1].1 += ip_len(p);
    }
    assert!(drained(r).is_empty(), "no record while the entry lingers");

    // tcp_closing (10 s) runs out: the entry goes, its record is written.
    n.advance_ms(10_001);
    sweep(&mut n);
    let recs = drained(r);
    assert_eq!(recs.len(), 1, "{recs:?}");
    let rec = recs[0];
    assert_eq!(rec.client_ip(), IpAddr::from(CLIENT4));
    assert_eq!(rec.client_port, 47000);
    assert_eq!((rec.vip_ip(), rec.vip_port), (IpAddr::from(VIP4), 80));
    assert_eq!(SocketAddr::new(rec.backend_ip(), rec.backend_port), backend);
    assert_eq!(SocketAddr::new(rec.local_ip(), rec.local_port), local);
    assert_eq!(rec.proto, 6);
    assert_eq!(rec.packets, [sent[0].0, sent[1].0]);
    assert_eq!(rec.octets, [sent[0].1, sent[1].1]);
    assert_eq!(rec.end, EndReason::Fin);
    assert_eq!(rec.flags, REC_FULL_NAT | REC_PAYLOAD);
    assert_eq!((rec.start_ms, rec.end_ms), (5_000, 5_050));
    assert_eq!(n.counter(Counter::ConnRecords), 1);
    assert_eq!(n.counter(Counter::ConnRecordsEmpty), 0);
}

/// A health check's connection: handshake, then RST, no byte of payload.
fn empty_connection(n: &mut Node, port: u16) {
    let (client, vip) = (sa(CLIENT4, port), sa(VIP4, 80));
    let syn = Pkt {
        seq: CISN,
        ack: 0,
        ..Pkt::tcp(client, vip, SYN)
    };
    let fwd = decode(&n.forward(EXT, &syn.build(), INT));
    let synack = Pkt {
        seq: BISN,
        ack: CISN + 1,
        ..Pkt::tcp(fwd.dst, fwd.src, SYN | ACK).by_backend()
    };
    n.forward(INT, &synack.build(), EXT);
    let rst = Pkt {
        seq: CISN + 1,
        ack: 0,
        ..Pkt::tcp(client, vip, RST)
    };
    n.forward(EXT, &rst.build(), INT);
}

#[test]
fn a_connection_without_payload_is_counted_not_recorded_unless_log_empty() {
    let r = region("empty", 1, 1024);
    let mut n = node_with(r, false);
    empty_connection(&mut n, 47001);
    n.advance_ms(10_001);
    sweep(&mut n);
    assert!(drained(r).is_empty());
    assert_eq!(n.counter(Counter::ConnRecordsEmpty), 1);
    assert_eq!(n.counter(Counter::ConnRecords), 0);

    let r = region("log-empty", 1, 1024);
    let mut n = node_with(r, true);
    empty_connection(&mut n, 47002);
    n.advance_ms(10_001);
    sweep(&mut n);
    let recs = drained(r);
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].end, EndReason::Rst);
    assert_eq!(recs[0].flags, REC_FULL_NAT, "no payload flag");
    assert_eq!(recs[0].packets, [2, 1], "SYN and RST; SYN-ACK");
    assert_eq!(n.counter(Counter::ConnRecords), 1);
}

#[test]
fn an_idle_udp_flow_ends_by_timeout_and_a_full_ring_counts_what_it_lost() {
    let r = region("udp", 1, 1024);
    let mut n = node_with(r, false);
    let vip = sa(VIP4, 53);
    for port in 0..1024u16 {
        let q = Pkt::udp(sa(CLIENT4, 20_000 + port), vip, b"query");
        n.forward(EXT, &q.build(), INT);
    }
    // udp timeout is 300 s.
    n.advance_ms(300_001);
    sweep(&mut n);
    assert_eq!(n.counter(Counter::ConnRecords), 1024);
    assert_eq!(n.counter(Counter::ConnRecordsRingFull), 0);
    let recs = drained(r);
    assert_eq!(recs.len(), 1024);
    assert!(recs
        .iter()
        .all(|x| x.end == EndReason::Timeout && x.proto == 17));
    assert!(recs
        .iter()
        .all(|x| x.packets == [1, 0] && x.octets == [20 + 8 + 5, 0]));

    // Nobody drains: the ring fills, the rest is counted.
    for port in 0..1024u16 {
        let q = Pkt::udp(sa(CLIENT4, 30_000 + port), vip, b"query");
        // (Neighbour refreshes go out beside the datagrams now.)
        n.exchange(EXT, &q.build());
    }
    n.advance_ms(300_001);
    sweep(&mut n);
    n.advance_ms(1);
    for port in 0..100u16 {
        let q = Pkt::udp(sa(CLIENT4, 40_000 + port), vip, b"query");
        n.exchange(EXT, &q.build());
    }
    n.advance_ms(300_001);
    sweep(&mut n);
    assert_eq!(n.counter(Counter::ConnRecords), 2048);
    assert_eq!(n.counter(Counter::ConnRecordsRingFull), 100);
    assert_eq!(drained(r).len(), 1024);
}

#[test]
fn without_records_nothing_is_metered() {
    let mut n = node();
    let q = Pkt::udp(sa(CLIENT4, 20_000), sa(VIP4, 53), b"query");
    n.forward(EXT, &q.build(), INT);
    n.advance_ms(300_001);
    sweep(&mut n);
    assert_eq!(n.counter(Counter::ConnRecords), 0);
    assert_eq!(n.counter(Counter::ConnRecordsEmpty), 0);
}
