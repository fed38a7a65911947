//! The settings of the UDP health probes (`kind = "dns"` and `kind =
//! "udp"` in `[vip.health]`): what is sent and which answers pass.

use super::HealthKind;

/// Compiled size limit of `expect_regex` (the regex crate's own measure):
/// a pattern that needs more is refused rather than built.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// `kind = "dns"`: one query over UDP; the backend passes when it answers
/// with a DNS response to that query (same ID, the question echoed) whose
/// response code is in `expect_rcode`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DnsProbe {
    /// The name asked for, as configured (default `"."`, the root).
    pub query: String,
    /// The record type asked for (default NS).
    pub query_type: DnsType,
    /// Response codes that pass (default NOERROR and NXDOMAIN: the server
    /// answered from its data, whether or not the name exists).
    pub expect_rcode: Vec<DnsRcode>,
}

/// The record types a DNS probe may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DnsType {
    /// IPv4 address.
    A,
    /// Name server.
    Ns,
    /// Canonical name.
    Cname,
    /// Start of authority.
    Soa,
    /// Pointer (reverse lookups).
    Ptr,
    /// Mail exchanger.
    Mx,
    /// Text.
    Txt,
    /// IPv6 address.
    Aaaa,
    /// Service locator.
    Srv,
}

impl DnsType {
    /// Every type with its spelling in the config file.
    pub const ALL: [(&'static str, DnsType); 9] = [
        ("A", DnsType::A),
        ("NS", DnsType::Ns),
        ("CNAME", DnsType::Cname),
        ("SOA", DnsType::Soa),
        ("PTR", DnsType::Ptr),
        ("MX", DnsType::Mx),
        ("TXT", DnsType::Txt),
        ("AAAA", DnsType::Aaaa),
        ("SRV", DnsType::Srv),
    ];

    /// The TYPE value on the wire (RFC 1035, RFC 3596, RFC 2782).
    pub fn code(self) -> u16 {
        match self {
            DnsType::A => 1,
            DnsType::Ns => 2,
            DnsType::Cname => 5,
            DnsType::Soa => 6,
            DnsType::Ptr => 12,
            DnsType::Mx => 15,
            DnsType::Txt => 16,
            DnsType::Aaaa => 28,
            DnsType::Srv => 33,
        }
    }

    /// The spelling used in the config file.
    pub fn as_str(self) -> &'static str {
        DnsType::ALL
            .iter()
            .find(|(_, t)| *t == self)
            .map_or("?", |(n, _)| n)
    }
}

/// The response codes a DNS probe may accept (RFC 1035 §4.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DnsRcode {
    /// 0: no error.
    NoError,
    /// 1: the server could not read the query.
    FormErr,
    /// 2: the server failed (a resolver that cannot reach its upstreams).
    ServFail,
    /// 3: the name does not exist.
    NxDomain,
    /// 4: the server does not do this kind of query.
    NotImp,
    /// 5: the server will not answer this query (policy).
    Refused,
}

impl DnsRcode {
    /// Every code with its spelling in the config file.
    pub const ALL: [(&'static str, DnsRcode); 6] = [
        ("NOERROR", DnsRcode::NoError),
        ("FORMERR", DnsRcode::FormErr),
        ("SERVFAIL", DnsRcode::ServFail),
        ("NXDOMAIN", DnsRcode::NxDomain),
        ("NOTIMP", DnsRcode::NotImp),
        ("REFUSED", DnsRcode::Refused),
    ];

    /// The RCODE value on the wire.
    pub fn code(self) -> u8 {
        match self {
            DnsRcode::NoError => 0,
            DnsRcode::FormErr => 1,
            DnsRcode::ServFail => 2,
            DnsRcode::NxDomain => 3,
            DnsRcode::NotImp => 4,
            DnsRcode::Refused => 5,
        }
    }

    /// The spelling used in the config file.
    pub fn as_str(self) -> &'static str {
        DnsRcode::ALL
            .iter()
            .find(|(_, r)| *r == self)
            .map_or("?", |(n, _)| n)
    }
}

/// `kind = "udp"`: one datagram out, the first datagram back must match.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UdpProbe {
    /// The datagram's payload (`send`, or `send_hex` decoded).
    pub send: Vec<u8>,
    /// What the reply must match; `None`: any reply passes.
    pub expect: Option<UdpExpect>,
}

/// What a `udp` probe's reply must match.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UdpExpect {
    /// `expect`: the reply contains these bytes.
    Contains(Vec<u8>),
    /// `expect_regex`: the reply matches this regular expression (Rust
    /// `regex` syntax, over bytes; checked when the config is read).
    Regex(String),
}

impl HealthKind {
    /// True for the kinds that probe over UDP (dns, udp); the others
    /// connect over TCP.
    pub fn is_udp(self) -> bool {
        matches!(self, HealthKind::Dns | HealthKind::Udp)
    }
}

/// The matcher of `expect_regex`, or why `pattern` is not one (one line).
pub fn compile_expect_regex(pattern: &str) -> Result<regex::bytes::Regex, String> {
    regex::bytes::RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| {
            let why = match &e {
                regex::Error::CompiledTooBig(_) => {
                    format!("compiles to more than {REGEX_SIZE_LIMIT} bytes")
                }
                // The syntax error's last line says what is wrong; the
                // lines above draw a caret under the pattern.
                _ => e
                    .to_string()
                    .lines()
                    .rev()
                    .find_map(|l| l.strip_prefix("error: "))
                    .unwrap_or("invalid syntax")
                    .to_string(),
            };
            format!("{pattern:?} is not a regular expression: {why} (expected Rust regex syntax, e.g. \"^PONG\")")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regex_errors_are_one_line() {
        let e = compile_expect_regex("(PONG").unwrap_err();
        assert!(!e.contains('\n'), "{e}");
        assert!(e.contains("unclosed group"), "{e}");
        assert!(compile_expect_regex("^PONG [0-9]+$").is_ok());
        let big = compile_expect_regex(r"\w{1000}\w{1000}").unwrap_err();
        assert!(big.contains("compiles to more than"), "{big}");
    }
}
