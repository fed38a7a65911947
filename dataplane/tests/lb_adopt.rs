//! A worker adopting the flows a previous process left in its flows
//! regions, on byte fixtures: a full-NAT connection goes on through the
//! worker that owns its local port when the number of workers changed, and
//! an entry that no longer fits the tables (its VIP, its backend, its
//! local tuple) is dropped and counted with its reason; a record of a flow
//! that spans the restart counts the traffic of both processes; adopted
//! connections hold their `[vip.limits]` places; a region of the previous
//! layout is read; and a start that dies while adopting leaves every flow
//! to the next.

mod support;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use conf::counters::Counter;
use conf::os::files::Access;
use conf::records::{ConnRecord, RecordsRegion, REC_PAYLOAD};
use dataplane::conntrack::adopt::{layout_words, slot_bytes};
use dataplane::flows_region::PreviousFlows;
use dataplane::lb::FlowRec;
use support::lb::flags::{ACK, FIN, PSH, SYN};
use support::lb::*;

fn vip() -> SocketAddr {
    sa(VIP4, 80)
}

/// A directory of its own for one test's regions.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lb-adopt-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// One worker whose table lives in `dir/old-0`, with an established
/// full-NAT connection from `client`; returns its backend and local
/// addresses.
fn previous_with_a_connection(
    dir: &std::path::Path,
    client: SocketAddr,
) -> (SocketAddr, SocketAddr) {
    let mut a = Setup {
        tcp4_weights: vec![1],
        flows: Some((dir.join("old"), None)),
        ..Setup::default()
    }
    .node();
    a.advance_ms(1_000);
    let (_, int) = a.exchange(EXT, &Pkt::tcp(client, vip(), SYN).build());
    let s = decode(int.first().expect("the SYN went to the backend"));
    let (backend, local) = (s.dst, s.src);
    a.forward(
        INT,
        &Pkt::tcp(backend, local, SYN | ACK).by_backend().build(),
        EXT,
    );
    a.forward(EXT, &Pkt::tcp(client, vip(), ACK).build(), INT);
    assert_eq!(a.w.pipeline.lb().conntrack().len(), 1);
    (backend, local)
}

fn previous(dir: &std::path::Path) -> Arc<PreviousFlows> {
    let words = layout_words::<FlowRec>();
    let (prev, refused) = PreviousFlows::open_paths(
        std::iter::once(dir.join("old-0")),
        Access::PRIVATE,
        slot_bytes::<FlowRec>(),
        &words,
    );
    assert!(refused.is_empty(), "{refused:?}");
    assert_eq!(prev.regions.len(), 1);
    Arc::new(prev)
}

#[test]
fn a_full_nat_flow_goes_to_the_worker_owning_its_local_port() {
    let dir = scratch("owner");
    let client = sa(CLIENT4, 40_001);
    let (backend, local) = previous_with_a_connection(&dir, client);
    let mut nodes = Setup {
        workers: 2,
        tcp4_weights: vec![1],
        flows: Some((dir.join("new"), Some(previous(&dir)))),
        ..Setup::default()
    }
    .build_polled();
    let owner = usize::from(local.port() & 1);
    assert_eq!(nodes[owner].counter(Counter::FlowsAdopted), 1);
    assert_eq!(nodes[1 - owner].counter(Counter::FlowsAdopted), 0);
    // The backend's data goes on to the client, translated as before.
    let data = Pkt::tcp(backend, local, ACK).by_backend().build();
    let out = nodes[owner].forward(INT, &data, EXT);
    let s = decode(&out);
    assert_eq!((s.src, s.dst), (vip(), client));
    // And the client's to the backend, from the same local tuple.
    let out = nodes[owner].forward(EXT, &Pkt::tcp(client, vip(), ACK).build(), INT);
    let s = decode(&out);
    assert_eq!((s.src, s.dst), (local, backend));
    let _ = std::fs::remove_dir_all(&dir);
}

/// What a one-worker start on `setup` counts adopting the previous flow.
fn adopting(name: &str, setup: Setup) -> Node {
    let dir = scratch(name);
    previous_with_a_connection(&dir, sa(CLIENT4, 40_002));
    let n = Setup {
        tcp4_weights: vec![1],
        flows: Some((dir.join("new"), Some(previous(&dir)))),
        ..setup
    }
    .node();
    let _ = std::fs::remove_dir_all(&dir);
    n
}

#[test]
fn a_flow_whose_vip_is_gone_is_dropped_as_no_vip() {
    let n = adopting(
        "novip",
        Setup {
            edit: Some((
                "address = \"10.1.0.100\"\nport = 80",
                "address = \"10.1.0.100\"\nport = 81",
            )),
            ..Setup::default()
        },
    );
    assert_eq!(n.counter(Counter::FlowsAdopted), 0);
    assert_eq!(n.counter(Counter::AdoptDroppedNoVip), 1);
}

#[test]
fn a_flow_whose_backend_is_gone_is_dropped_as_no_backend() {
    let n = adopting(
        "nobackend",
        Setup {
            edit: Some(("port = 8080\n", "port = 8081\n")),
            ..Setup::default()
        },
    );
    assert_eq!(n.counter(Counter::FlowsAdopted), 0);
    assert_eq!(n.counter(Counter::AdoptDroppedNoBackend), 1);
}

#[test]
fn a_flow_whose_local_tuple_left_the_pools_is_dropped_as_not_owned() {
    let n = adopting(
        "notowned",
        Setup {
            pool: (40_000, 40_100),
            ..Setup::default()
        },
    );
    assert_eq!(n.counter(Counter::FlowsAdopted), 0);
    assert_eq!(n.counter(Counter::AdoptDroppedNotOwned), 1);
}

#[test]
fn the_same_tables_adopt_the_flow() {
    let n = adopting("same", Setup::default());
    assert_eq!(n.counter(Counter::FlowsAdopted), 1);
    assert_eq!(n.w.pipeline.lb().conntrack().len(), 1);
}

/// A records region of one ring, in `dir` (leaked with the workers).
fn records_in(dir: &std::path::Path, name: &str) -> &'static RecordsRegion {
    let r = RecordsRegion::create(&dir.join(name), 1, 64, Access::PRIVATE).unwrap();
    Box::leak(Box::new(r))
}

fn drained(r: &RecordsRegion) -> Vec<ConnRecord> {
    let mut out = Vec::new();
    r.drain(0, usize::MAX, |x| {
        out.push(x.expect("a well-formed record"))
    });
    out
}

/// Packets and IP bytes sent each way, as a record counts them.
#[derive(Default)]
struct Sent([u64; 2], [u64; 2]);

impl Sent {
    fn forward_out(&mut self, n: &mut Node, p: Pkt) -> Seen {
        self.0[0] += 1;
        self.1[0] += p.ip_bytes().len() as u64;
        decode(&n.forward(EXT, &p.build(), INT))
    }

    fn forward_back(&mut self, n: &mut Node, p: Pkt) {
        self.0[1] += 1;
        self.1[1] += p.ip_bytes().len() as u64;
        n.forward(INT, &p.build(), EXT);
    }
}

fn seg(src: SocketAddr, dst: SocketAddr, flags: u8, seq: u32, ack: u32, data: &[u8]) -> Pkt {
    Pkt {
        seq,
        ack,
        ..Pkt::tcp(src, dst, flags).payload(data)
    }
}

#[test]
fn a_record_spanning_a_restart_counts_the_traffic_of_both_processes() {
    let dir = scratch("meters");
    let (client, v) = (sa(CLIENT4, 40_010), vip());
    let mut sent = Sent::default();
    let mut a = Setup {
        tcp4_weights: vec![1],
        flows: Some((dir.join("old"), None)),
        records: Some((records_in(&dir, "rec-old"), false)),
        ..Setup::default()
    }
    .node();
    a.advance_ms(5_000);
    let s = sent.forward_out(&mut a, seg(client, v, SYN, 1000, 0, b""));
    let (backend, local) = (s.dst, s.src);
    let back =
        |flags, seq, ack, data: &[u8]| seg(backend, local, flags, seq, ack, data).by_backend();
    sent.forward_back(&mut a, back(SYN | ACK, 7000, 1001, b""));
    sent.forward_out(&mut a, seg(client, v, ACK, 1001, 7001, b""));
    sent.forward_out(&mut a, seg(client, v, ACK | PSH, 1001, 7001, &[1; 100]));
    sent.forward_back(&mut a, back(ACK | PSH, 7001, 1101, &[2; 300]));

    // The next process, one second later: its clock has moved on.
    let prev = {
        let words = layout_words::<FlowRec>();
        let (p, refused) = PreviousFlows::open_paths(
            std::iter::once(dir.join("old-0")),
            Access::PRIVATE,
            slot_bytes::<FlowRec>(),
            &words,
        );
        assert!(refused.is_empty(), "{refused:?}");
        Arc::new(p)
    };
    let recs = records_in(&dir, "rec-new");
    let mut b = Setup {
        tcp4_weights: vec![1],
        flows: Some((dir.join("new"), Some(prev))),
        records: Some((recs, false)),
        ..Setup::default()
    }
    .build()
    .pop()
    .unwrap();
    b.advance_ms(6_000);
    b.poll();
    assert_eq!(b.counter(Counter::FlowsAdopted), 1);
    sent.forward_out(&mut b, seg(client, v, ACK | PSH, 1101, 7301, &[3; 50]));
    sent.forward_back(&mut b, back(ACK | PSH, 7301, 1151, &[4; 500]));
    b.advance_ms(40);
    sent.forward_out(&mut b, seg(client, v, ACK | FIN, 1151, 7801, b""));
    sent.forward_back(&mut b, back(ACK | FIN, 7801, 1152, b""));
    sent.forward_out(&mut b, seg(client, v, ACK, 1152, 7802, b""));
    b.advance_ms(10_001);
    for _ in 0..64 {
        b.poll();
    }
    let got = drained(recs);
    assert_eq!(got.len(), 1, "{got:?}");
    let r = got[0];
    assert_eq!(r.packets, sent.0, "packets of both processes");
    assert_eq!(r.octets, sent.1, "bytes of both processes");
    assert_eq!(
        (r.start_ms, r.end_ms),
        (5_000, 6_040),
        "started before the restart"
    );
    assert_eq!(r.flags & REC_PAYLOAD, REC_PAYLOAD);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_region_of_the_previous_layout_is_adopted() {
    let dir = scratch("v1");
    let mut a = Setup {
        tcp4_weights: vec![1],
        flows: Some((dir.join("old"), None)),
        flows_layout: Some(dataplane::flows_region::PREVIOUS),
        ..Setup::default()
    }
    .node();
    a.advance_ms(1_000);
    let (_, int) = a.exchange(EXT, &Pkt::tcp(sa(CLIENT4, 40_003), vip(), SYN).build());
    assert_eq!(int.len(), 1);
    let prev = previous(&dir);
    assert_eq!(prev.regions[0].layout, dataplane::flows_region::PREVIOUS);
    assert_eq!(prev.regions[0].generation, 0);
    let n = Setup {
        tcp4_weights: vec![1],
        flows: Some((dir.join("new"), Some(prev))),
        ..Setup::default()
    }
    .node();
    assert_eq!(n.counter(Counter::FlowsAdopted), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// tcp4 with `[vip.limits] max_connections = 2`.
const CAPPED: (&str, &str) = (
    "\n[[vip]]\nname = \"udp4\"",
    "[vip.limits]\nmax_connections = 2\n\n[[vip]]\nname = \"udp4\"",
);

/// A handshake from `client`; the local tuple the backend saw, `None` if
/// the SYN was refused.
fn connect(n: &mut Node, client: SocketAddr) -> Option<SocketAddr> {
    let (_, int) = n.exchange(EXT, &seg(client, vip(), SYN, 1000, 0, b"").build());
    let s = decode(int.first()?);
    let synack = seg(s.dst, s.src, SYN | ACK, 7000, 1001, b"").by_backend();
    n.forward(INT, &synack.build(), EXT);
    n.forward(EXT, &seg(client, vip(), ACK, 1001, 7001, b"").build(), INT);
    Some(s.src)
}

/// Both FINs of a connection from [`connect`].
fn close(n: &mut Node, client: SocketAddr, local: SocketAddr) {
    let fin = seg(client, vip(), FIN | ACK, 1001, 7001, b"");
    n.forward(EXT, &fin.build(), INT);
    let backend = sa(fnat_backend4(0), 8080);
    let fin = seg(backend, local, FIN | ACK, 7001, 1002, b"").by_backend();
    n.forward(INT, &fin.build(), EXT);
}

#[test]
fn adopted_connections_hold_their_places_under_a_cap() {
    let dir = scratch("limits");
    let mut a = Setup {
        tcp4_weights: vec![1],
        flows: Some((dir.join("old"), None)),
        edit: Some(CAPPED),
        ..Setup::default()
    }
    .node();
    let (c1, c2, c3) = (
        sa(CLIENT4, 41_001),
        sa(CLIENT4, 41_002),
        sa(CLIENT4, 41_003),
    );
    let l1 = connect(&mut a, c1).expect("first");
    connect(&mut a, c2).expect("second");
    assert!(connect(&mut a, c3).is_none(), "the cap holds before");
    let mut b = Setup {
        tcp4_weights: vec![1],
        flows: Some((dir.join("new"), Some(previous(&dir)))),
        edit: Some(CAPPED),
        ..Setup::default()
    }
    .node();
    assert_eq!(b.counter(Counter::FlowsAdopted), 2);
    // The two adopted connections fill the cap: a third is refused.
    assert!(connect(&mut b, c3).is_none(), "the cap holds after");
    assert_eq!(b.counter(Counter::DropVipMaxConnections), 1);
    // One closes: its place is given back.
    close(&mut b, c1, l1);
    assert!(connect(&mut b, c3).is_some(), "a place after a close");
    assert!(connect(&mut b, sa(CLIENT4, 41_004)).is_none(), "full again");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_crash_during_adoption_leaves_every_flow_to_the_next_start() {
    let dir = scratch("crash");
    let words = layout_words::<FlowRec>();
    let take =
        || PreviousFlows::take_over(&dir, "x", Access::PRIVATE, slot_bytes::<FlowRec>(), &words);
    let prefix = dir.join("border-x-flows");
    let mut a = Setup {
        tcp4_weights: vec![1],
        flows: Some((prefix.clone(), None)),
        ..Setup::default()
    }
    .node();
    let clients: Vec<SocketAddr> = (0..3).map(|i| sa(CLIENT4, 42_000 + i)).collect();
    let locals: Vec<SocketAddr> = clients
        .iter()
        .map(|&c| connect(&mut a, c).expect("connected"))
        .collect();

    // A start takes over generation 1 (renamed out of the way), writes
    // generation 2, and dies after adopting one entry.
    let (prev, refused, generation) = take();
    assert!(refused.is_empty(), "{refused:?}");
    assert_eq!(generation, 2);
    assert!(dir.join("border-x-flows-0.g1").exists());
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let crashed = Setup {
        tcp4_weights: vec![1],
        flows: Some((prefix.clone(), Some(Arc::new(prev)))),
        flows_generation: 2,
        halt_after: Some(1),
        adopt_done: Some(done.clone()),
        ..Setup::default()
    }
    .node();
    assert_eq!(crashed.counter(Counter::FlowsAdopted), 1);
    assert_eq!(done.load(std::sync::atomic::Ordering::Relaxed), 0);
    drop(crashed);

    // The next start finds both sets, newest first, and adopts all three
    // flows, the one adopted twice without a count.
    let (prev, refused, generation) = take();
    assert!(refused.is_empty(), "{refused:?}");
    assert_eq!(generation, 3);
    let gens: Vec<u64> = prev.regions.iter().map(|r| r.generation).collect();
    assert_eq!(gens, [2, 1]);
    let prev = Arc::new(prev);
    let mut n = Setup {
        tcp4_weights: vec![1],
        flows: Some((prefix.clone(), Some(prev.clone()))),
        flows_generation: 3,
        adopt_done: Some(done.clone()),
        ..Setup::default()
    }
    .node();
    assert_eq!(n.counter(Counter::FlowsAdopted), 3);
    assert_eq!(n.counter(Counter::AdoptDroppedDuplicate), 0);
    assert_eq!(n.w.pipeline.lb().conntrack().len(), 3);
    assert_eq!(done.load(std::sync::atomic::Ordering::Relaxed), 1);
    // Every worker adopted: the old sets go, the new one stays.
    assert_eq!(prev.remove_files(), 2);
    let left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|d| d.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("border-x-"))
        .collect();
    assert_eq!(left, ["border-x-flows-0"]);
    // The connections go on.
    for (&c, &l) in clients.iter().zip(&locals) {
        let back = seg(sa(fnat_backend4(0), 8080), l, ACK, 7001, 1001, b"").by_backend();
        let s = decode(&n.forward(INT, &back.build(), EXT));
        assert_eq!(s.dst, c);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
