//! Flow ids to client ends and back. Every flow the generator plays gets a
//! fresh id; a bijection scatters consecutive ids over 198.18.0.0/15 (the
//! benchmarking range, RFC 2544) and client ports 1024..=33791, so clients
//! look random to the load balancer's hash and connection table, yet the
//! generator finds a flow from a packet's destination without a lookup table.

use std::net::Ipv4Addr;

/// An odd multiplier: multiplication by it is a bijection on u32.
const SCATTER: u32 = 0x9E37_79B1;
/// Its inverse modulo 2^32.
const GATHER: u32 = inverse(SCATTER);
const NET: u32 = u32::from_be_bytes([198, 18, 0, 0]);
const LOW_PORT: u16 = 1024;

const fn inverse(k: u32) -> u32 {
    // Newton's iteration: each step doubles the correct low bits (k*k = 1 mod 8).
    let mut x = k;
    let mut i = 0;
    while i < 5 {
        x = x.wrapping_mul(2u32.wrapping_sub(k.wrapping_mul(x)));
        i += 1;
    }
    x
}

/// The client address and port of flow `id`.
#[inline]
pub fn client_of(id: u32) -> (Ipv4Addr, u16) {
    let x = id.wrapping_mul(SCATTER);
    let ip = NET | (x & 0x1_ffff);
    (Ipv4Addr::from(ip), LOW_PORT + (x >> 17) as u16)
}

/// The flow id whose client is (`ip`, `port`); `None` if no id maps there.
#[inline]
pub fn id_of(ip: Ipv4Addr, port: u16) -> Option<u32> {
    let ip = u32::from(ip);
    if ip & !0x1_ffff != NET || !(LOW_PORT..LOW_PORT + 0x8000).contains(&port) {
        return None;
    }
    let x = (ip & 0x1_ffff) | (u32::from(port - LOW_PORT) << 17);
    Some(x.wrapping_mul(GATHER))
}

/// The client's initial sequence number of flow `id`.
#[inline]
pub fn client_isn(id: u32) -> u32 {
    id.wrapping_mul(0x0100_0193) ^ 0x1234_5678
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn ids_round_trip_and_spread() {
        assert_eq!(SCATTER.wrapping_mul(GATHER), 1);
        let mut seen = HashSet::new();
        let mut ips = HashSet::new();
        for id in (0..100_000u32).chain([u32::MAX, u32::MAX - 1]) {
            let (ip, port) = client_of(id);
            assert!((1024..=33791).contains(&port));
            assert_eq!(ip.octets()[0..2], [198, 18 + (ip.octets()[1] - 18)]);
            assert_eq!(id_of(ip, port), Some(id));
            assert!(seen.insert((ip, port)));
            ips.insert(ip);
        }
        // Consecutive ids do not share a handful of addresses.
        assert!(ips.len() > 50_000, "{}", ips.len());
        assert_eq!(id_of(Ipv4Addr::new(10, 0, 0, 1), 2000), None);
        assert_eq!(id_of(Ipv4Addr::new(198, 18, 0, 1), 80), None);
    }
}
