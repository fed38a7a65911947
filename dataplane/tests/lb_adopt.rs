//! A worker adopting the flows a previous process left in its flows
//! regions, on byte fixtures: a full-NAT connection goes on through the
//! worker that owns its local port when the number of workers changed, and
//! an entry that no longer fits the tables (its VIP, its backend, its
//! local tuple) is dropped and counted with its reason.

mod support;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use conf::counters::Counter;
use conf::os::files::Access;
use dataplane::conntrack::adopt::{layout_words, slot_bytes};
use dataplane::flows_region::PreviousFlows;
use dataplane::lb::FlowRec;
use support::lb::flags::{ACK, SYN};
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
