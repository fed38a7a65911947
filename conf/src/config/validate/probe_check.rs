//! `[vip.health]` keys of the UDP probes (`kind = "dns"`, `kind = "udp"`)
//! and the probe `port`, and whether the probe kind fits the VIP's
//! protocol.

use toml::Spanned as S;

use super::super::raw::{RawHealth, RawVip};
use super::super::{
    compile_expect_regex, DnsProbe, DnsRcode, DnsType, HealthKind, Protocol, UdpExpect, UdpProbe,
};
use super::{at, Validator};

/// Largest `send` / `send_hex` payload and `expect` substring, in bytes: a
/// probe is one small datagram, never fragmented.
pub(super) const MAX_PROBE_BYTES: usize = 1024;

/// What [`Validator::probe_target`] read: the fields of [`super::super::Health`]
/// that belong to the probe's target and the UDP kinds.
pub(super) struct ProbeTarget {
    pub port: Option<u16>,
    pub dns: Option<DnsProbe>,
    pub udp: Option<UdpProbe>,
}

impl Validator {
    /// `port`, the dns keys (`query`, `query_type`, `expect_rcode`) and the
    /// udp keys (`send`, `send_hex`, `expect`, `expect_regex`) of the
    /// `[vip.health]` table `h` at `table_at`, whose kind is `kind`.
    pub(super) fn probe_target(
        &mut self,
        h: &RawHealth,
        key: &str,
        kind: HealthKind,
        table_at: usize,
    ) -> ProbeTarget {
        let port = h.port.as_ref().and_then(|p| {
            let pkey = format!("{key}.port");
            match *p.get_ref() {
                0 => {
                    self.err(at(p), pkey, "0 is not a port (expected 1..=65535)");
                    None
                }
                _ if kind == HealthKind::Agent => {
                    self.err(at(p), pkey, "kind = \"agent\" asks the agent on agent_port (expected agent_port = N, or remove this key)");
                    None
                }
                n => Some(n),
            }
        });
        if let (Some(pp), true) = (&h.send_proxy_v2, kind.is_udp()) {
            if *pp.get_ref() {
                self.err(at(pp), format!("{key}.send_proxy_v2"), format!("is a header of TCP connections, and kind = \"{kind}\" probes over UDP (expected a TCP check kind, or remove this key)"));
            }
        }
        ProbeTarget {
            port,
            dns: self.dns_probe(h, key, kind),
            udp: self.udp_probe(h, key, kind, table_at),
        }
    }

    fn dns_probe(&mut self, h: &RawHealth, key: &str, kind: HealthKind) -> Option<DnsProbe> {
        if kind != HealthKind::Dns {
            let only = "is only used by dns checks (expected kind = \"dns\", or remove this key)";
            for (name, at_) in [
                ("query", h.query.as_ref().map(at)),
                ("query_type", h.query_type.as_ref().map(at)),
                ("expect_rcode", h.expect_rcode.as_ref().map(at)),
            ] {
                if let Some(a) = at_ {
                    self.err(a, format!("{key}.{name}"), only);
                }
            }
            return None;
        }
        let query = match &h.query {
            Some(q) => {
                if let Some(why) = query_name_problem(q.get_ref()) {
                    self.err(at(q), format!("{key}.query"), why);
                }
                q.get_ref().clone()
            }
            None => ".".to_string(),
        };
        let query_type = self.choice(
            &h.query_type,
            &format!("{key}.query_type"),
            &DnsType::ALL,
            DnsType::Ns,
        );
        let rkey = format!("{key}.expect_rcode");
        let expect_rcode = match &h.expect_rcode {
            Some(list) => {
                if list.get_ref().is_empty() {
                    self.err(
                        at(list),
                        &rkey,
                        "must list at least one response code (expected e.g. [\"NOERROR\"])",
                    );
                }
                let mut codes: Vec<DnsRcode> = list
                    .get_ref()
                    .iter()
                    .enumerate()
                    .map(|(i, s)| {
                        let item: Option<S<String>> = Some(s.clone());
                        self.choice(
                            &item,
                            &format!("{rkey}[{i}]"),
                            &DnsRcode::ALL,
                            DnsRcode::NoError,
                        )
                    })
                    .collect();
                codes.sort();
                codes.dedup();
                codes
            }
            None => vec![DnsRcode::NoError, DnsRcode::NxDomain],
        };
        Some(DnsProbe {
            query,
            query_type,
            expect_rcode,
        })
    }

    fn udp_probe(
        &mut self,
        h: &RawHealth,
        key: &str,
        kind: HealthKind,
        table_at: usize,
    ) -> Option<UdpProbe> {
        if kind != HealthKind::Udp {
            let only = "is only used by udp checks (expected kind = \"udp\", or remove this key)";
            for (name, at_) in [
                ("send", h.send.as_ref().map(at)),
                ("send_hex", h.send_hex.as_ref().map(at)),
                ("expect", h.expect.as_ref().map(at)),
                ("expect_regex", h.expect_regex.as_ref().map(at)),
            ] {
                if let Some(a) = at_ {
                    self.err(a, format!("{key}.{name}"), only);
                }
            }
            return None;
        }
        let send = match (&h.send, &h.send_hex) {
            (Some(_), Some(x)) => {
                self.err(
                    at(x),
                    format!("{key}.send_hex"),
                    "cannot be combined with send (expected one of send and send_hex)",
                );
                Vec::new()
            }
            (Some(s), None) => s.get_ref().as_bytes().to_vec(),
            (None, Some(x)) => match decode_hex(x.get_ref()) {
                Ok(b) => b,
                Err(why) => {
                    self.err(at(x), format!("{key}.send_hex"), why);
                    Vec::new()
                }
            },
            (None, None) => {
                self.err(
                    table_at,
                    format!("{key}.send"),
                    "missing required key for kind = \"udp\" (expected send = \"...\" or send_hex = \"...\": the datagram the probe sends)",
                );
                Vec::new()
            }
        };
        if send.len() > MAX_PROBE_BYTES {
            let (a, name) = match (&h.send, &h.send_hex) {
                (Some(s), _) => (at(s), "send"),
                (None, Some(x)) => (at(x), "send_hex"),
                (None, None) => (table_at, "send"),
            };
            self.err(
                a,
                format!("{key}.{name}"),
                format!(
                    "is {} bytes long (expected at most {MAX_PROBE_BYTES})",
                    send.len()
                ),
            );
        }
        let expect = match (&h.expect, &h.expect_regex) {
            (Some(_), Some(r)) => {
                self.err(
                    at(r),
                    format!("{key}.expect_regex"),
                    "cannot be combined with expect (expected one of expect and expect_regex)",
                );
                None
            }
            (Some(e), None) => {
                let b = e.get_ref().as_bytes();
                let ekey = format!("{key}.expect");
                if b.is_empty() {
                    self.err(at(e), ekey, "must not be empty (expected the bytes the reply must contain, or remove this key: then any reply passes)");
                } else if b.len() > MAX_PROBE_BYTES {
                    self.err(
                        at(e),
                        ekey,
                        format!(
                            "is {} bytes long (expected at most {MAX_PROBE_BYTES})",
                            b.len()
                        ),
                    );
                }
                Some(UdpExpect::Contains(b.to_vec()))
            }
            (None, Some(r)) => {
                if let Err(why) = compile_expect_regex(r.get_ref()) {
                    self.err(at(r), format!("{key}.expect_regex"), why);
                }
                Some(UdpExpect::Regex(r.get_ref().clone()))
            }
            (None, None) => None,
        };
        Some(UdpProbe { send, expect })
    }

    /// A UDP probe kind on a TCP VIP: its backends serve TCP, so a datagram
    /// says nothing about them. (A TCP check of a UDP VIP stays allowed: a
    /// DNS server answers TCP on its port too, and many UDP services have a
    /// TCP or HTTP health endpoint, reached with `port`.)
    pub(super) fn probe_over_protocol(&mut self, v: &RawVip, key: &str, protocol: Protocol) {
        let Some(h) = &v.health else { return };
        let kind = h.get_ref().kind.get_ref();
        if protocol == Protocol::Tcp && (kind == "dns" || kind == "udp") {
            let why = if v.protocol.is_some() {
                "the VIP's protocol is \"tcp\""
            } else {
                "the VIP's protocol is \"tcp\" (the default)"
            };
            self.err(
                at(&h.get_ref().kind),
                format!("{key}.health.kind"),
                format!("{kind:?} probes over UDP but {why} (expected a TCP check kind: \"tcp\", \"tls\", \"http\", \"https\" or \"agent\"; or protocol = \"udp\")"),
            );
        }
    }
}

/// `send_hex`: pairs of hex digits, optionally separated by whitespace.
fn decode_hex(s: &str) -> Result<Vec<u8>, String> {
    let expected = "expected pairs of hex digits, e.g. \"0001ff\" or \"00 01 ff\"";
    let digits: Vec<char> = s.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    if let Some(c) = digits.iter().find(|c| !c.is_ascii_hexdigit()) {
        return Err(format!("{s:?} contains {c:?} ({expected})"));
    }
    if !digits.len().is_multiple_of(2) {
        return Err(format!(
            "{s:?} has an odd number of hex digits ({expected})"
        ));
    }
    Ok(digits
        .chunks(2)
        .map(|p| {
            let hi = p[0].to_digit(16).unwrap_or(0);
            let lo = p[1].to_digit(16).unwrap_or(0);
            (hi * 16 + lo) as u8
        })
        .collect())
}

/// Why `s` cannot be the name a DNS probe asks for, if it cannot.
fn query_name_problem(s: &str) -> Option<String> {
    let expected = "expected a domain name, e.g. \"example.com\", or \".\" for the root";
    if s == "." {
        return None;
    }
    let name = s.strip_suffix('.').unwrap_or(s);
    if name.is_empty() || name.len() > 253 {
        return Some(format!(
            "{s:?} is {} bytes long ({expected}, of 1..=253 bytes)",
            name.len()
        ));
    }
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Some(format!(
                "{s:?} has an empty or longer than 63 bytes label ({expected})"
            ));
        }
        if let Some(c) = label
            .chars()
            .find(|&c| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        {
            return Some(format!("{s:?} contains {c:?} ({expected})"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_payloads() {
        assert_eq!(decode_hex("0001ff").unwrap(), vec![0, 1, 0xff]);
        assert_eq!(decode_hex(" 00 0A\tff ").unwrap(), vec![0, 10, 0xff]);
        assert_eq!(decode_hex("").unwrap(), Vec::<u8>::new());
        assert!(decode_hex("abc").unwrap_err().contains("odd number"));
        assert!(decode_hex("0x01").unwrap_err().contains("'x'"));
    }

    #[test]
    fn query_names() {
        for ok in [
            ".",
            "example.com",
            "example.com.",
            "_dns.resolver.arpa",
            "a",
        ] {
            assert_eq!(query_name_problem(ok), None, "{ok}");
        }
        for bad in [
            "",
            "..",
            "a..b",
            "exa mple.com",
            &"a".repeat(64),
            &"a.".repeat(130),
        ] {
            assert!(query_name_problem(bad).is_some(), "{bad}");
        }
    }
}
