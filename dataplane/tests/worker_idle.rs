//! An idle adaptive worker whose ports have Rx interrupts: it sleeps on
//! them with the bounded timeout, but never before one last poll with the
//! interrupts armed, so a frame that came in just before is forwarded
//! instead of waiting; a reply handed over by another worker rings the
//! owner's doorbell. The in-memory ports stand in for the interrupts (the
//! real ones are exercised by `dpdk-ffi/tests/eal_rx_intr.rs` and
//! `tests/e2e_idle.rs`).

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use conf::counters::Counter;
use conf::state::StateRegion;
use dataplane::worker::{Poll, IDLE_WAIT};
use support::lb::flags::{ACK, SYN};
use support::lb::*;

struct Region(std::path::PathBuf, StateRegion);

impl Region {
    fn new(tag: &str) -> Region {
        let path =
            std::env::temp_dir().join(format!("border-worker-idle-{tag}-{}", std::process::id()));
        let r = StateRegion::create(&path, &[1]).expect("state region");
        Region(path, r)
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn waitable_node() -> Node {
    let mut n = node();
    n.w.io.waitable = true;
    n.w.set_poll(Poll::Adaptive);
    n
}

#[test]
fn a_frame_that_came_before_the_interrupts_were_armed_is_forwarded_without_waiting() {
    let mut n = waitable_node();
    let region = Region::new("armed");
    let counters = region.1.worker(0).unwrap().counters();
    let stop = AtomicBool::new(false);
    let syn = Pkt::tcp(sa(CLIENT4, 40000), sa(VIP4, 80), SYN).build();
    n.w.io.inject(EXT, &syn);

    n.w.sleep_until_work(&counters, &stop);

    assert!(n.w.io.waits.is_empty(), "waited: {:?}", n.w.io.waits);
    assert!(!n.w.io.armed, "left the interrupts armed");
    let out = n.w.io.take_tx(INT);
    assert_eq!(out.len(), 1, "the SYN was not forwarded");
    assert_eq!(decode(&out[0]).tcp, Some(SYN));
    assert_eq!(counters.get(Counter::RxPackets), 1, "counters published");
}

#[test]
fn an_idle_worker_sleeps_on_its_interrupts_with_the_bounded_timeout() {
    let mut n = waitable_node();
    let region = Region::new("idle");
    let counters = region.1.worker(0).unwrap().counters();
    let stop = Arc::new(AtomicBool::new(false));
    let stopper = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            stop.store(true, Ordering::Relaxed);
        })
    };
    // The in-memory wait returns at once, so this loops until stopped.
    n.w.run(&counters, &stop);
    stopper.join().unwrap();

    assert!(!n.w.io.waits.is_empty(), "never slept on its interrupts");
    assert!(n.w.io.waits.iter().all(|&t| t == IDLE_WAIT));
    assert!(!n.w.io.armed);
    assert!(!n.w.handoff().doorbell(0).unwrap().is_sleeping());
}

#[test]
fn without_rx_interrupts_an_idle_worker_backs_off_with_sleeps() {
    let mut n = node();
    assert!(!n.w.io.waitable);
    let region = Region::new("backoff");
    let counters = region.1.worker(0).unwrap().counters();
    let stop = Arc::new(AtomicBool::new(false));
    let stopper = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            stop.store(true, Ordering::Relaxed);
        })
    };
    n.w.set_poll(Poll::Adaptive);
    n.w.run(&counters, &stop);
    stopper.join().unwrap();
    assert!(n.w.io.waits.is_empty());
}

#[test]
fn a_reply_handed_to_a_sleeping_owner_rings_its_doorbell() {
    let mut nodes = two_workers();
    // Worker 0 owns even local ports.
    let out = decode(&nodes[0].forward(
        EXT,
        &Pkt::tcp(sa(CLIENT4, 43000), sa(VIP4, 80), SYN).build(),
        INT,
    ));
    assert_eq!(out.src.port() & 1, 0);
    let bell = |nodes: &[Node]| nodes[1].w.handoff().doorbell(0).unwrap().is_sleeping();

    nodes[0].w.handoff().doorbell(0).unwrap().going_to_sleep();
    assert!(bell(&nodes));
    let synack = Pkt::tcp(out.dst, out.src, SYN | ACK).by_backend().build();
    nodes[1].exchange(INT, &synack);
    assert_eq!(nodes[1].counter(Counter::HandoffSent), 1);
    assert!(
        !bell(&nodes),
        "the handoff did not ring the owner's doorbell"
    );
    nodes[0].w.handoff().doorbell(0).unwrap().awake();

    nodes[0].poll();
    assert_eq!(nodes[0].counter(Counter::HandoffReceived), 1);
    assert_eq!(nodes[0].w.io.take_tx(EXT).len(), 1);
}
