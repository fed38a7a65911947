//! The whole pipeline never panics on arbitrary input: random bytes and
//! mutations of valid load-balancer frames (SYNs to every kind of VIP,
//! backend replies to live flows, ICMP errors quoting them, ARP, echo) go
//! through `Pipeline::process` on every port (and one that does not exist)
//! of a worker with tables adopted and flows in its connection table, and
//! through two workers that hand replies to each other. Whatever is sent is
//! no longer than what came in, leaves by an existing port and parses again.
//!
//! The same property runs under libFuzzer in `dataplane/fuzz` (target
//! `pipeline`); this keeps coverage on stable without it.

mod support;

use dataplane::wire::parse_frame;
use proptest::prelude::*;
use support::lb::*;

#[derive(Clone, Debug)]
enum Edit {
    /// XOR a byte (index modulo the length).
    Flip(usize, u8),
    /// Set a byte.
    Set(usize, u8),
    /// Cut the frame to this length (modulo length + 1).
    Truncate(usize),
    /// Append bytes.
    Extend(Vec<u8>),
}

fn apply(frame: &mut Vec<u8>, e: &Edit) {
    match e {
        Edit::Flip(i, x) if !frame.is_empty() => {
            let n = frame.len();
            frame[i % n] ^= x;
        }
        Edit::Set(i, x) if !frame.is_empty() => {
            let n = frame.len();
            frame[i % n] = *x;
        }
        Edit::Truncate(l) => {
            let n = frame.len();
            frame.truncate(l % (n + 1));
        }
        Edit::Extend(b) => frame.extend_from_slice(b),
        _ => {}
    }
}

fn edit() -> impl Strategy<Value = Edit> {
    // Most edits land in the headers, where the decisions are.
    let idx = prop_oneof![3 => 0usize..80, 1 => any::<usize>()];
    prop_oneof![
        4 => (idx.clone(), 1u8..).prop_map(|(i, x)| Edit::Flip(i, x)),
        2 => (idx, any::<u8>()).prop_map(|(i, x)| Edit::Set(i, x)),
        1 => any::<usize>().prop_map(Edit::Truncate),
        1 => prop::collection::vec(any::<u8>(), 1..16).prop_map(Edit::Extend),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn mutated_frames_never_panic(
        frames in prop::collection::vec(
            (any::<prop::sample::Index>(), 0usize..3, prop::collection::vec(edit(), 0..6)),
            1..12,
        ),
    ) {
        let (mut nodes, seeds) = fuzz_rig();
        for (which, port_pick, edits) in frames {
            let (seed_port, seed) = &seeds[which.index(seeds.len())];
            let mut f = seed.clone();
            for e in &edits {
                apply(&mut f, e);
            }
            // Mostly the seed's own port; sometimes the other one or one that does not exist.
            let port = match port_pick { 0 | 1 => *seed_port, _ => 1 - *seed_port };
            let port = if edits.len() == 5 { 2 } else { port };
            check_verdict(&mut nodes[0].w.pipeline, port, f.clone());
            check_verdict(&mut nodes[1].w.pipeline, port, f);
        }
    }

    #[test]
    fn random_bytes_never_panic(
        frames in prop::collection::vec((prop::collection::vec(any::<u8>(), 0..160), 0usize..2), 1..16),
    ) {
        let (mut nodes, _) = fuzz_rig();
        for (mut f, port) in frames {
            // Address most frames to the port so they get past the MAC filter.
            if f.len() >= 6 && f[0] & 1 == 0 {
                f[..6].copy_from_slice(if port == EXT { &EXT_MAC } else { &INT_MAC });
            }
            check_verdict(&mut nodes[0].w.pipeline, port, f.clone());
            check_verdict(&mut nodes[1].w.pipeline, port, f);
        }
    }

    /// Through the worker loop: handoffs between the two workers, neighbour
    /// requests, TX batching.
    #[test]
    fn mutated_frames_through_two_workers(
        frames in prop::collection::vec(
            (any::<prop::sample::Index>(), any::<bool>(), prop::collection::vec(edit(), 0..4)),
            1..24,
        ),
        ms in 0u64..5_000,
    ) {
        let (mut nodes, seeds) = fuzz_rig();
        for (which, to_first, edits) in &frames {
            let (port, seed) = &seeds[which.index(seeds.len())];
            let mut f = seed.clone();
            for e in edits {
                apply(&mut f, e);
            }
            let w = usize::from(!to_first);
            nodes[w].w.io.inject(*port, &f);
        }
        for n in &nodes {
            n.advance_ms(ms);
        }
        for _ in 0..3 {
            for n in &mut nodes {
                n.poll();
            }
        }
        for n in &mut nodes {
            for port in [EXT, INT] {
                for f in n.w.io.take_tx(port) {
                    prop_assert!(parse_frame(&f).is_ok(), "sent {:02x?}", f);
                }
            }
        }
    }
}
