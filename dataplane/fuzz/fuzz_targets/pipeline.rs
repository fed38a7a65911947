//! The whole pipeline (parse, slow path, VIP lookup, conntrack, Maglev,
//! NAT, ICMP errors, handoff) over arbitrary frames, on every port of a
//! two-worker appliance that has tables adopted and live flows in its
//! connection table (the fixtures of `dataplane/tests/support/`).
//!
//! Input: one control byte, then the rest.
//! - control < 0x80: the rest is a raw frame received on port `control % 3`
//!   (port 2 does not exist);
//! - control >= 0x80: one of the valid frames of a live flow (SYNs, backend
//!   replies, ICMP errors quoting them, ARP, echo; chosen by `control &
//!   0x7f`) with the rest applied as (offset, xor) byte pairs; an odd last
//!   byte truncates the frame to that length.
//!
//! Checked: no panic; a `Send` is no longer than the input, leaves by an
//! existing port and parses again; a `Drop` names a drop counter; a
//! `Handoff` goes to the other worker. The frame then also goes through
//! the worker loop (worker 1, handing replies over to worker 0).
#![no_main]

#[path = "../../tests/support/mod.rs"]
mod support;

use libfuzzer_sys::fuzz_target;
use support::lb::*;

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, rest)) = data.split_first() else {
        return;
    };
    let (mut nodes, seeds) = fuzz_rig();
    let (port, frame) = if ctl < 0x80 {
        (usize::from(ctl % 3), rest.to_vec())
    } else {
        let (port, seed) = &seeds[usize::from(ctl & 0x7f) % seeds.len()];
        let mut f = seed.clone();
        let mut pairs = rest.chunks_exact(2);
        for p in &mut pairs {
            let n = f.len();
            if n > 0 {
                f[usize::from(p[0]) % n] ^= p[1];
            }
        }
        if let [cut] = pairs.remainder() {
            f.truncate(usize::from(*cut));
        }
        (*port, f)
    };
    for n in &mut nodes {
        check_verdict(&mut n.w.pipeline, port, frame.clone());
    }
    if port < 2 {
        nodes[1].w.io.inject(port, &frame);
        nodes[1].poll();
        nodes[0].poll();
        for n in &mut nodes {
            for p in 0..2 {
                for f in n.w.io.take_tx(p) {
                    assert!(dataplane::wire::parse_frame(&f).is_ok(), "sent {f:02x?}");
                }
            }
        }
    }
});
