//! `[mgmt.bgp]` and `vip.announce` (docs/bgp.md).

use std::net::SocketAddr;

use toml::Spanned as S;

use super::super::raw::{RawBgp, RawVip};
use super::super::{Announce, Bgp, DEFAULT_BGP_API, MAX_WITHDRAW_GRACE_MS};
use super::{at, or, Validator};

impl Validator {
    pub(super) fn bgp(&mut self, sb: &S<RawBgp>) -> Bgp {
        let b = sb.get_ref();
        let default_api: SocketAddr = DEFAULT_BGP_API.parse().expect("default is an address");
        let api = b.api.as_ref().map_or(default_api, |s| {
            match s.get_ref().parse::<SocketAddr>() {
                Ok(a) if a.port() == 0 => {
                    self.err(at(s), "mgmt.bgp.api", format!("{a} has port 0 (expected gobgpd's gRPC port, e.g. \"127.0.0.1:50051\")"));
                    default_api
                }
                Ok(a) => a,
                Err(_) => {
                    self.err(
                        at(s),
                        "mgmt.bgp.api",
                        format!("{:?} is not ip:port (expected gobgpd's gRPC API, e.g. \"127.0.0.1:50051\" or \"[::1]:50051\")", s.get_ref()),
                    );
                    default_api
                }
            }
        });
        let mut communities = Vec::new();
        for (i, c) in b
            .communities
            .iter()
            .flat_map(|l| l.get_ref().iter().enumerate())
        {
            match parse_community(c.get_ref()) {
                Some(v) => communities.push(v),
                None => self.err(
                    at(c),
                    format!("mgmt.bgp.communities[{i}]"),
                    format!("{:?} is not a community (expected \"asn:value\", each 0..=65535, e.g. \"65000:100\")", c.get_ref()),
                ),
            }
        }
        let withdraw_grace_ms = or(&b.withdraw_grace_ms, 0);
        if withdraw_grace_ms > MAX_WITHDRAW_GRACE_MS {
            let s = b
                .withdraw_grace_ms
                .as_ref()
                .expect("set when above the bound");
            self.err(
                at(s),
                "mgmt.bgp.withdraw_grace_ms",
                format!(
                    "{withdraw_grace_ms} is out of range (expected 0..={MAX_WITHDRAW_GRACE_MS} ms)"
                ),
            );
        }
        Bgp {
            api,
            communities,
            withdraw_grace_ms,
        }
    }

    pub(super) fn announce(&mut self, s: &Option<S<String>>, key: &str) -> Announce {
        self.choice(
            s,
            &format!("{key}.announce"),
            &[
                ("healthy", Announce::Healthy),
                ("always", Announce::Always),
                ("never", Announce::Never),
            ],
            Announce::Healthy,
        )
    }

    /// `announce` means nothing without gobgpd to announce through: an
    /// error rather than a silently ignored key.
    pub(super) fn announce_needs_bgp<'a>(
        &mut self,
        vips: impl IntoIterator<Item = (usize, &'a S<RawVip>)>,
        have_bgp: bool,
    ) {
        if have_bgp {
            return;
        }
        for (i, sv) in vips {
            if let Some(a) = &sv.get_ref().announce {
                self.err(
                    at(a),
                    format!("vip[{i}].announce"),
                    "needs [mgmt.bgp] (gobgpd's API) to announce through (expected a [mgmt.bgp] section, or remove this key)",
                );
            }
        }
    }
}

/// `"asn:value"` as a standard community, `asn << 16 | value`.
fn parse_community(s: &str) -> Option<u32> {
    let (asn, value) = s.split_once(':')?;
    let asn: u16 = asn.parse().ok()?;
    let value: u16 = value.parse().ok()?;
    Some(u32::from(asn) << 16 | u32::from(value))
}

#[cfg(test)]
mod tests {
    use super::parse_community;

    #[test]
    fn communities_are_asn_and_value() {
        assert_eq!(parse_community("65000:100"), Some(65000 << 16 | 100));
        assert_eq!(parse_community("0:0"), Some(0));
        assert_eq!(parse_community("65536:1"), None);
        assert_eq!(parse_community("65000"), None);
        assert_eq!(parse_community("a:1"), None);
    }
}
