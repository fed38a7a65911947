//! What a worker carries across a restart besides its flows, on byte
//! fixtures through the adoption path: the neighbour bindings it had (a
//! new process sends its first frames to a backend without asking for
//! its MAC again, so none waits) and its persistence pins (a client
//! pinned before the restart goes to the same backend after it, even when
//! the backend set changed and Maglev alone would move it).

mod support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use conf::counters::Counter;
use conf::os::files::Access;
use dataplane::carry_region::PreviousCarry;
use dataplane::conntrack::adopt::{layout_words, slot_bytes};
use dataplane::flows_region::PreviousFlows;
use dataplane::lb::FlowRec;
use etherparse::{ArpHardwareId, ArpOperation, ArpPacket, EtherType, PacketBuilder};
use support::lb::flags::{ACK, SYN};
use support::lb::*;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lb-carry-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `ip`'s ARP reply to the int port's address.
fn answer(ip: Ipv4Addr, mac: [u8; 6]) -> Vec<u8> {
    let mut f = Vec::new();
    PacketBuilder::ethernet2(mac, INT_MAC)
        .arp(
            ArpPacket::new(
                ArpHardwareId::ETHERNET,
                EtherType::IPV4,
                ArpOperation::REPLY,
                &mac,
                &ip.octets(),
                &INT_MAC,
                &LOCAL4.octets(),
            )
            .unwrap(),
        )
        .write(&mut f)
        .unwrap();
    f
}

/// The targets of the ARP requests among `frames`.
fn asked(frames: &[Vec<u8>]) -> Vec<Ipv4Addr> {
    frames
        .iter()
        .filter(|f| f.len() >= 42 && f[12..14] == [0x08, 0x06])
        .map(|f| Ipv4Addr::new(f[38], f[39], f[40], f[41]))
        .collect()
}

/// The previous process's regions `old-0` (flows) and `oldc-0` (carry).
fn previous(dir: &Path) -> (Arc<PreviousFlows>, Arc<PreviousCarry>) {
    let words = layout_words::<FlowRec>();
    let (flows, refused) = PreviousFlows::open_paths(
        std::iter::once(dir.join("old-0")),
        Access::PRIVATE,
        slot_bytes::<FlowRec>(),
        &words,
    );
    assert!(refused.is_empty(), "{refused:?}");
    let (carry, refused) =
        PreviousCarry::open_paths(std::iter::once(dir.join("oldc-0")), Access::PRIVATE);
    assert!(refused.is_empty(), "{refused:?}");
    assert_eq!(carry.regions.len(), 1);
    (Arc::new(flows), Arc::new(carry))
}

fn old(dir: &Path, setup: Setup) -> Node {
    Setup {
        flows: Some((dir.join("old"), None)),
        carry: Some((dir.join("oldc"), None)),
        ..setup
    }
    .node()
}

fn new(dir: &Path, setup: Setup) -> Node {
    let (flows, carry) = previous(dir);
    Setup {
        flows: Some((dir.join("new"), Some(flows))),
        carry: Some((dir.join("newc"), Some(carry))),
        ..setup
    }
    .node()
}

#[test]
fn the_next_process_sends_to_backends_without_asking_their_mac_again() {
    let dir = scratch("neigh");
    let unresolved = || Setup {
        learn_backends: false,
        ..Setup::default()
    };
    let mut a = old(&dir, unresolved());
    a.w.io.take_tx(INT);
    let tcp4: Vec<Ipv4Addr> = (0..3).map(fnat_backend4).collect();
    for &b in &tcp4 {
        a.exchange(INT, &answer(b, host_mac(b.into())));
        assert_eq!(
            a.w.pipeline.lb().neighbor(b.into()),
            Some(host_mac(b.into()))
        );
    }
    drop(a);

    let mut b = new(&dir, unresolved());
    let requests = asked(&b.w.io.take_tx(INT));
    assert_eq!(b.counter(Counter::NeighAdopted), 3, "{requests:?}");
    for ip in &tcp4 {
        assert!(!requests.contains(ip), "{ip} asked for again: {requests:?}");
    }
    assert!(
        requests.contains(&dnat_backend4(0)),
        "the next hops it never knew are asked for: {requests:?}"
    );
    // A new connection goes straight to its backend's MAC: nothing waits.
    let out = b.forward(
        EXT,
        &Pkt::tcp(sa(CLIENT4, 41_000), sa(VIP4, 80), SYN).build(),
        INT,
    );
    let s = decode(&out);
    let IpAddr::V4(to) = s.dst.ip() else {
        panic!("{s:?}")
    };
    assert!(tcp4.contains(&to));
    assert_eq!(out[..6], host_mac(to.into()));
    assert_eq!(b.counter(Counter::NeighborQueued), 0);
    for c in [
        Counter::NeighAdoptDroppedTorn,
        Counter::NeighAdoptDroppedBadValue,
        Counter::NeighAdoptDroppedExpired,
    ] {
        assert_eq!(b.counter(c), 0, "{c:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

const TCP4_LINE: &str = "name = \"tcp4\"\n";
const PERSISTENT: &str = "name = \"tcp4\"\npersistence_timeout = 300\n";

fn persistent(weights: usize) -> Setup {
    Setup {
        tcp4_weights: vec![1; weights],
        conntrack: 4096,
        edit: Some((TCP4_LINE, PERSISTENT)),
        ..Setup::default()
    }
}

/// The backend a SYN of `client` to the tcp4 VIP goes to.
fn backend_of(n: &mut Node, client: SocketAddr) -> SocketAddr {
    let out = n.forward(EXT, &Pkt::tcp(client, sa(VIP4, 80), SYN).build(), INT);
    decode(&out).dst
}

#[test]
fn a_client_pinned_before_a_restart_keeps_its_backend_after_it() {
    let dir = scratch("pins");
    let clients: Vec<Ipv4Addr> = (0..24).map(|i| Ipv4Addr::new(10, 1, 0, 60 + i)).collect();
    // Three backends: each client pinned by a first connection; the first
    // client's stays open (it holds its pin across the restart).
    let mut a = old(&dir, persistent(3));
    let before: Vec<SocketAddr> = clients
        .iter()
        .map(|&c| backend_of(&mut a, sa(c, 42_000)))
        .collect();
    let first = sa(clients[0], 42_000);
    assert_eq!(a.counter(Counter::PersistenceMisses), clients.len() as u64);
    drop(a);

    // Seven backends after the restart: Maglev alone moves some clients.
    let mut fresh = persistent(7).node();
    let moved = clients
        .iter()
        .zip(&before)
        .filter(|(&c, &b)| backend_of(&mut fresh, sa(c, 42_001)) != b)
        .count();
    assert!(moved > 0, "the new backend set must move some client");

    let mut b = new(&dir, persistent(7));
    assert_eq!(
        b.counter(Counter::PersistenceAdopted),
        clients.len() as u64,
        "{:?}",
        b.drops()
    );
    for c in [
        Counter::PersistenceAdoptDroppedNoVip,
        Counter::PersistenceAdoptDroppedNoBackend,
        Counter::PersistenceAdoptDroppedExpired,
        Counter::PersistenceAdoptDroppedBadValue,
        Counter::PersistenceAdoptDroppedFull,
    ] {
        assert_eq!(b.counter(c), 0, "{c:?}");
    }
    for (&c, &was) in clients.iter().zip(&before) {
        assert_eq!(backend_of(&mut b, sa(c, 42_001)), was, "client {c}");
    }
    assert_eq!(b.counter(Counter::PersistenceHits), clients.len() as u64);
    assert_eq!(b.counter(Counter::PersistenceMisses), 0);
    // The adopted connection holds its client's pin again (and its own
    // new one too).
    let vip_slot = b.w.pipeline.lb().tables().unwrap().vips[VIP_TCP4 as usize].stat_slot;
    let mut key = [0u8; 16];
    key[10] = 0xff;
    key[11] = 0xff;
    key[12..].copy_from_slice(&clients[0].octets());
    assert_eq!(
        b.w.pipeline.lb().persistence().holders(vip_slot, &key),
        Some(2)
    );
    // And the adopted connection goes on to its backend.
    let out = b.forward(EXT, &Pkt::tcp(first, sa(VIP4, 80), ACK).build(), INT);
    assert_eq!(decode(&out).dst, before[0]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn pins_whose_backend_left_the_ring_are_dropped_and_counted() {
    let dir = scratch("pins-gone");
    let mut a = old(&dir, persistent(3));
    let clients: Vec<Ipv4Addr> = (0..12).map(|i| Ipv4Addr::new(10, 1, 0, 60 + i)).collect();
    let before: Vec<SocketAddr> = clients
        .iter()
        .map(|&c| backend_of(&mut a, sa(c, 43_000)))
        .collect();
    drop(a);
    // Backend 2 drained (weight 0): its clients' pins are not adopted.
    let gone = sa(fnat_backend4(2), 8080);
    let on_gone = before.iter().filter(|&&b| b == gone).count() as u64;
    assert!(on_gone > 0, "{before:?}");
    let mut setup = persistent(3);
    setup.tcp4_weights = vec![1, 1, 0];
    let b = new(&dir, setup);
    assert_eq!(
        b.counter(Counter::PersistenceAdoptDroppedNoBackend),
        on_gone
    );
    assert_eq!(
        b.counter(Counter::PersistenceAdopted),
        clients.len() as u64 - on_gone
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_table_of_nearly_full_buckets_is_adopted_whole() {
    let dir = scratch("pins-full");
    // 900 clients in a table of 1024 pins (128 buckets of 8): under a new
    // hash key some buckets would get more than 8 of them.
    let clients: Vec<Ipv4Addr> = (0..900u32)
        .map(|i| Ipv4Addr::from(0x0A02_0000 + i))
        .collect();
    let mut a = old(&dir, persistent(3));
    assert_eq!(a.w.pipeline.lb().persistence().capacity(), 1024);
    for &c in &clients {
        backend_of(&mut a, sa(c, 44_000));
    }
    let pinned = a.counter(Counter::PersistenceMisses) - a.counter(Counter::PersistenceEvictions);
    assert!(pinned > 800, "{pinned}");
    let key = a.w.pipeline.lb().persistence().key();
    drop(a);

    let b = new(&dir, persistent(3));
    assert_eq!(b.w.pipeline.lb().persistence().key(), key);
    assert_eq!(b.counter(Counter::PersistenceAdoptDroppedFull), 0);
    assert_eq!(
        b.counter(Counter::PersistenceAdopted),
        pinned,
        "{:?}",
        b.drops()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
