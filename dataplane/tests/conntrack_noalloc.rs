//! The connection table allocates nothing after construction: every method
//! the fast path calls runs under a counting global allocator that must see
//! zero allocations (and zero frees) on this thread.

mod support;

use support::counting_alloc::{count, Counting};

use dataplane::conntrack::{
    Conntrack, Dir, Entry, EntryId, FlowKey, InsertError, State, TcpSeg, Timeouts,
};

#[global_allocator]
static GLOBAL: Counting = Counting;

/// A per-flow record shaped like the pipeline's.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Flow {
    backend: u32,
    local_addr: [u8; 16],
    local_port: u16,
    client_mac: [u8; 6],
    seq_delta: u32,
}

const T: Timeouts = Timeouts {
    tcp_syn: 30,
    tcp_established: 900,
    tcp_closing: 10,
    udp: 300,
    local_port_cooldown: 60,
};

fn client(i: u32) -> FlowKey {
    let b = i.to_be_bytes();
    FlowKey::v4(
        [172, b[1], b[2], b[3]],
        [10, 10, 0, 100],
        1024 + (i % 50_000) as u16,
        443,
        6,
    )
}

fn reply(i: u32, round: u32) -> FlowKey {
    let b = (i ^ round << 20).to_be_bytes();
    FlowKey::v6(
        [0xfd; 16],
        [
            0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, b[0], b[1], b[2], b[3],
        ],
        8443,
        1024,
        6,
    )
}

fn flow(i: u32) -> Flow {
    Flow {
        backend: i % 7,
        local_port: i as u16,
        ..Flow::default()
    }
}

#[test]
fn fast_path_methods_do_not_allocate() {
    const CAP: usize = 4096;
    let mut ct = Conntrack::<Flow>::new(CAP, T);
    let mut freed = 0usize;
    let mut on_free = |_: EntryId, e: &Entry<Flow>| {
        freed += 1;
        std::hint::black_box(e.value.local_port);
    };

    let (ok, allocs, frees) = count(|| {
        let mut ok = true;
        let mut now = 1_000u64;
        for round in 0..40u32 {
            // Fill to capacity, half TCP handshakes, half UDP.
            let mut i = 0u32;
            while !ct.is_full() {
                let state = if i.is_multiple_of(2) {
                    State::SynSent
                } else {
                    State::Udp
                };
                match ct.insert(
                    client(i),
                    reply(i, round),
                    flow(i),
                    state,
                    now,
                    &mut on_free,
                ) {
                    Ok(_) | Err(InsertError::OrigInUse(_) | InsertError::ReplyInUse(_)) => {}
                    Err(e) => ok &= e == InsertError::Full,
                }
                i += 1;
            }
            ok &= ct.insert(
                client(1 << 30),
                reply(1 << 30, round),
                flow(0),
                State::SynSent,
                now,
                &mut on_free,
            ) == Err(InsertError::Full);
            ok &= ct.insert(
                client(0),
                client(0),
                flow(0),
                State::SynSent,
                now,
                &mut on_free,
            ) == Err(InsertError::SameKeys);

            // Per-packet work on every entry.
            for i in 0..i {
                if let Some((id, dir)) = ct.lookup(&client(i), now) {
                    ok &= dir == Dir::Original;
                    let seg = |flags| TcpSeg::flags(flags);
                    ok &= ct.update_tcp(id, Dir::Original, &seg(0x02), now).is_ok();
                    ok &= ct.update_tcp(id, Dir::Reply, &seg(0x12), now).is_ok();
                    // The ACK of the SYN-ACK at sequence 0.
                    let ack = TcpSeg {
                        ack: 1,
                        ..seg(0x10)
                    };
                    ok &= ct.update_tcp(id, Dir::Original, &ack, now).is_ok();
                    ct.touch(id, now);
                    ct.get_mut(id).value.seq_delta += 1;
                    ok &= ct.get(id).value.backend == i % 7;
                    ok &= !ct.is_closing(id);
                    if i % 5 == 0 {
                        // At the client's next expected number (it acked
                        // the SYN-ACK at 0).
                        let rst = TcpSeg {
                            seq: 1,
                            ..seg(0x14)
                        };
                        let closed = ct
                            .update_tcp(id, Dir::Reply, &rst, now)
                            .unwrap_or(State::Udp);
                        ok &= ct.is_closing(id) == (closed == State::Closed);
                        ok &= (closed == State::Closed) == (i % 2 == 0);
                    }
                    if i % 3 == 0 {
                        ok &= ct.lookup(&reply(i, round), now) == Some((id, Dir::Reply));
                    }
                }
                ok &= ct.lookup(&client(i).reversed(), now).is_none();
            }
            // Remove a third by hand, then refill: slots come off the free list.
            for i in (0..i).step_by(3) {
                if let Some((id, _)) = ct.lookup(&client(i), now) {
                    ok &= ct.remove(id).is_some();
                }
            }
            for i in (0..i).step_by(3) {
                let _ = ct.insert(
                    client(i),
                    reply(i, round + 1000),
                    flow(i),
                    State::Udp,
                    now,
                    &mut on_free,
                );
            }
            // Time passes: RST'd/closing entries, then everything expires.
            now += 11_000;
            while ct.expire(now, 64, &mut on_free) > 0 {}
            // Stale 5-tuples reused: inserts reclaim expired holders.
            now += 900_000;
            for i in 0..64 {
                let _ = ct.insert(
                    client(i),
                    reply(i, round + 2000),
                    flow(i),
                    State::SynSent,
                    now,
                    &mut on_free,
                );
            }
            let mut budget_calls = 0;
            while !ct.is_empty() {
                ct.expire(now + 1_000_000, 100, &mut on_free);
                budget_calls += 1;
            }
            ok &= budget_calls <= CAP.div_ceil(100) + 1;
            now += 1_000_000;
        }
        ok
    });
    assert!(ok, "a table operation returned an unexpected result");
    assert!(freed > 40 * CAP, "freed {freed}");
    assert_eq!(
        (allocs, frees),
        (0, 0),
        "allocations, frees after construction"
    );
}

#[test]
fn the_counter_sees_allocations() {
    let (v, allocs, _) = count(|| vec![1u8; 64]);
    assert_eq!(v.len(), 64);
    assert!(allocs >= 1);
}
