//! Small address types and parsers used by the config model.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// An interface address with its prefix length, e.g. `10.10.0.1/24`.
///
/// Host bits are kept as written (`10.10.0.1/24` is the address `10.10.0.1`
/// on the subnet `10.10.0.0/24`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpNet {
    /// The address itself (host bits kept).
    pub addr: IpAddr,
    /// Prefix length: 1..=32 for IPv4, 1..=128 for IPv6 in a validated config.
    pub prefix_len: u8,
}

impl IpNet {
    /// `None` if `prefix_len` is longer than the address family allows.
    pub fn new(addr: IpAddr, prefix_len: u8) -> Option<IpNet> {
        (prefix_len <= max_prefix_len(addr)).then_some(IpNet { addr, prefix_len })
    }

    /// True if `ip` is of the same family and inside this subnet.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = mask_u32(self.prefix_len);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = mask_u128(self.prefix_len);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }

    /// The network address (host bits cleared).
    pub fn network(&self) -> IpAddr {
        match self.addr {
            IpAddr::V4(a) => IpAddr::V4((u32::from(a) & mask_u32(self.prefix_len)).into()),
            IpAddr::V6(a) => IpAddr::V6((u128::from(a) & mask_u128(self.prefix_len)).into()),
        }
    }

    /// True for an IPv4 address.
    pub fn is_ipv4(&self) -> bool {
        self.addr.is_ipv4()
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix_len)
    }
}

impl FromStr for IpNet {
    type Err = String;

    /// Parses `addr/prefix`; the error text says what was expected.
    fn from_str(s: &str) -> Result<IpNet, String> {
        let Some((addr, prefix)) = s.split_once('/') else {
            return Err(format!(
                "{s:?} has no prefix length (expected an address with prefix length, e.g. \"10.0.0.1/24\" or \"2001:db8::1/64\")"
            ));
        };
        let addr: IpAddr = addr.parse().map_err(|_| {
            format!("{addr:?} is not an IP address (expected e.g. \"10.0.0.1/24\")")
        })?;
        let max = max_prefix_len(addr);
        let fam = family(addr);
        let prefix_len = match prefix.parse::<u8>() {
            Ok(p) if (1..=max).contains(&p) => p,
            _ => {
                return Err(format!(
                    "{s:?} has a bad prefix length {prefix:?} (expected 1..={max} for {fam})"
                ))
            }
        };
        Ok(IpNet { addr, prefix_len })
    }
}

/// "IPv4" or "IPv6".
pub(crate) fn family(ip: IpAddr) -> &'static str {
    if ip.is_ipv4() {
        "IPv4"
    } else {
        "IPv6"
    }
}

fn max_prefix_len(ip: IpAddr) -> u8 {
    if ip.is_ipv4() {
        32
    } else {
        128
    }
}

fn mask_u32(prefix_len: u8) -> u32 {
    u32::MAX
        .checked_shl(32u32.saturating_sub(u32::from(prefix_len)))
        .unwrap_or(0)
}

fn mask_u128(prefix_len: u8) -> u128 {
    u128::MAX
        .checked_shl(128u32.saturating_sub(u32::from(prefix_len)))
        .unwrap_or(0)
}

/// Parses `aa:bb:cc:dd:ee:ff` (hex digits in either case).
pub(crate) fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut parts = s.split(':');
    for byte in &mut out {
        let part = parts.next()?;
        if part.len() != 2 || !part.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        *byte = u8::from_str_radix(part, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

/// Formats a MAC address as `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(mac: &[u8; 6]) -> String {
    let [a, b, c, d, e, f] = *mac;
    format!("{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{f:02x}")
}

/// Decodes exactly `N * 2` hex digits.
pub(crate) fn parse_hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    let bytes = s.as_bytes();
    if bytes.len() != N * 2 {
        return None;
    }
    let mut out = [0u8; N];
    for (i, byte) in out.iter_mut().enumerate() {
        let pair = bytes.get(2 * i..2 * i + 2)?;
        let pair = std::str::from_utf8(pair).ok()?;
        if !pair.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        *byte = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(out)
}

/// Deterministic primality test by trial division (n < 2^32: at most 2^16 steps).
pub fn is_prime(n: u64) -> bool {
    if n < 2 {
        return false;
    }
    if n < 4 {
        return true;
    }
    if n.is_multiple_of(2) {
        return false;
    }
    let mut d = 3u64;
    while d.saturating_mul(d) <= n {
        if n.is_multiple_of(d) {
            return false;
        }
        d += 2;
    }
    true
}

/// The smallest prime `>= n`.
pub fn next_prime(n: u64) -> u64 {
    let mut p = n.max(2);
    while !is_prime(p) {
        p = p.saturating_add(1);
        if p == u64::MAX {
            break;
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipnet_contains() {
        let n: IpNet = "10.10.0.1/24".parse().unwrap();
        assert!(n.contains("10.10.0.200".parse().unwrap()));
        assert!(!n.contains("10.10.1.1".parse().unwrap()));
        assert!(!n.contains("::1".parse().unwrap()));
        assert_eq!(n.network().to_string(), "10.10.0.0");
        let n: IpNet = "2001:db8::1/64".parse().unwrap();
        assert!(n.contains("2001:db8::ffff".parse().unwrap()));
        assert!(!n.contains("2001:db9::1".parse().unwrap()));
        let n: IpNet = "10.0.0.1/32".parse().unwrap();
        assert!(n.contains("10.0.0.1".parse().unwrap()));
        assert!(!n.contains("10.0.0.2".parse().unwrap()));
        assert!("10.0.0.1/33".parse::<IpNet>().is_err());
        assert!("10.0.0.1/0".parse::<IpNet>().is_err());
        assert!("10.0.0.1".parse::<IpNet>().is_err());
        assert!("::1/129".parse::<IpNet>().is_err());
        assert_eq!(IpNet::new("::1".parse().unwrap(), 129), None);
    }

    #[test]
    fn mac_and_hex() {
        assert_eq!(
            parse_mac("02:00:00:AA:bb:01"),
            Some([2, 0, 0, 0xaa, 0xbb, 1])
        );
        assert_eq!(parse_mac("02:00:00:aa:bb"), None);
        assert_eq!(parse_mac("02:00:00:aa:bb:01:02"), None);
        assert_eq!(parse_mac("2:00:00:aa:bb:01"), None);
        assert_eq!(parse_mac("+2:00:00:aa:bb:01"), None);
        assert_eq!(format_mac(&[2, 0, 0, 0xaa, 0xbb, 1]), "02:00:00:aa:bb:01");
        assert_eq!(parse_hex::<2>("0aFf"), Some([0x0a, 0xff]));
        assert_eq!(parse_hex::<2>("0a+f"), None);
        assert_eq!(parse_hex::<2>("é0a"), None);
    }

    #[test]
    fn primes() {
        assert!(is_prime(65537));
        assert!(!is_prime(65536));
        assert!(!is_prime(1));
        assert!(is_prime(2));
        assert!(!is_prime(9));
        assert_eq!(next_prime(65536), 65537);
        assert_eq!(next_prime(300), 307);
        assert!(is_prime(4_294_967_291));
    }
}
