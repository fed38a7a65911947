//! parse_frame never panics, and what it returns is within the frame.
#![no_main]

use dataplane::wire::{parse_frame, Fragment, L3Kind};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(p) = parse_frame(data) else { return };
    assert!(p.l3_offset == 14 || p.l3_offset == 18);
    assert!(p.l3_offset <= p.l4_offset);
    assert!(p.l4_offset <= p.payload_offset);
    assert!(p.payload_offset <= p.l3_end);
    assert_eq!(p.l4_offset + p.l4_len, p.l3_end);
    assert!(p.l3_end <= data.len());
    if p.fragment == Fragment::NonFirst {
        assert!(p.ports.is_none() && p.tcp_flags.is_none());
    }
    if !matches!(p.l3, L3Kind::Ipv4 | L3Kind::Ipv6) {
        assert!(p.ports.is_none() && p.l4_len == 0);
    }
});
