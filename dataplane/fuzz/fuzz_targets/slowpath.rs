//! The responders never panic; refusals leave the buffer alone; replies are
//! no longer than the request and parse again.
#![no_main]

use std::net::{Ipv4Addr, Ipv6Addr};

use dataplane::slowpath::{respond, Outcome, OwnedFn, SlowOutcome};
use dataplane::wire::parse_frame;
use libfuzzer_sys::fuzz_target;

const PORT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 1];

fn check(data: &[u8], f: impl Fn(&mut [u8]) -> SlowOutcome) {
    let mut buf = data.to_vec();
    match f(&mut buf) {
        Outcome::Replied { len, .. } => {
            assert!(len <= data.len());
            assert!(parse_frame(&buf[..len]).is_ok());
            assert_eq!(&buf[6..12], &PORT_MAC);
        }
        _ => assert_eq!(&buf[..], data),
    }
}

fuzz_target!(|data: &[u8]| {
    let all = OwnedFn {
        v4: |_: Ipv4Addr| true,
        v6: |_: &Ipv6Addr| true,
    };
    let none = OwnedFn {
        v4: |_: Ipv4Addr| false,
        v6: |_: &Ipv6Addr| false,
    };
    check(data, |b| respond(b, PORT_MAC, &all));
    check(data, |b| respond(b, PORT_MAC, &none));
});
