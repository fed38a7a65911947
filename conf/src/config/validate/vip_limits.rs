//! `[vip.limits]` and a backend's `max_connections` (docs/config.md): what a
//! VIP admits, and the limits that contradict each other or the VIP.

use std::collections::HashMap;
use std::net::IpAddr;

use toml::Spanned as S;

use super::super::net::family;
use super::super::raw::{RawVip, RawVipLimits};
use super::super::{Backend, IpNet, Protocol, VipLimits};
use super::{at, or, Validator};

/// Highest rate and burst of a limit, per second.
pub(crate) const MAX_RATE: u32 = 100_000_000;

/// A key of `[vip.limits]` and its value: `(key, value, spanned)`.
type Keyed<'a> = (&'a str, &'a Option<S<u32>>);

impl Validator {
    /// `[vip.limits]` of the VIP `sv` (its protocol and address), checked
    /// against itself and its `backends`.
    pub(super) fn vip_limits(
        &mut self,
        sv: &S<RawVip>,
        key: &str,
        (protocol, address): (Protocol, Option<IpAddr>),
        backends: &[Backend],
    ) -> VipLimits {
        let v = sv.get_ref();
        let Some(sl) = &v.limits else {
            self.backend_max_above(v, key, 0, backends);
            return VipLimits::default();
        };
        let l = sl.get_ref();
        let lkey = format!("{key}.limits");
        for (k, val) in [
            ("max_connections", &l.max_connections),
            ("new_connections_per_second", &l.new_connections_per_second),
            ("new_connections_burst", &l.new_connections_burst),
            ("syn_per_source_per_second", &l.syn_per_source_per_second),
            (
                "udp_flows_per_source_per_second",
                &l.udp_flows_per_source_per_second,
            ) as Keyed<'_>,
            ("per_source_burst", &l.per_source_burst),
        ] {
            let max = if k == "max_connections" {
                u32::MAX
            } else {
                MAX_RATE
            };
            self.nonzero(
                val,
                &format!("{lkey}.{k}"),
                max,
                "; leave it out for no limit",
            );
        }
        self.burst_needs_rate(
            &lkey,
            ("new_connections_burst", &l.new_connections_burst),
            l.new_connections_per_second.is_some(),
            "new_connections_per_second",
        );
        let per_source = self.per_source_rate(l, &lkey, protocol);
        self.burst_needs_rate(
            &lkey,
            ("per_source_burst", &l.per_source_burst),
            per_source > 0,
            "syn_per_source_per_second or udp_flows_per_source_per_second",
        );
        let source_prefix_v4 = self.prefix_len(&l.source_prefix_v4, &lkey, "source_prefix_v4", 32);
        let source_prefix_v6 = self.prefix_len(&l.source_prefix_v6, &lkey, "source_prefix_v6", 128);
        let source_table_size = self.source_table_size(l, &lkey);
        let allow = self.prefix_list(&l.allow, &lkey, "allow", address);
        let deny = self.prefix_list(&l.deny, &lkey, "deny", address);
        self.allow_and_deny(l, &lkey, &allow, &deny);
        let max_connections = or(&l.max_connections, 0);
        self.backend_max_above(v, key, max_connections, backends);
        let new_rate = or(&l.new_connections_per_second, 0);
        VipLimits {
            max_connections,
            new_connections_per_second: new_rate,
            new_connections_burst: or(&l.new_connections_burst, new_rate),
            per_source_per_second: per_source,
            per_source_burst: or(&l.per_source_burst, per_source),
            source_prefix_v4: source_prefix_v4.unwrap_or(VipLimits::DEFAULT_PREFIX_V4),
            source_prefix_v6: source_prefix_v6.unwrap_or(VipLimits::DEFAULT_PREFIX_V6),
            source_table_size,
            allow: allow.into_iter().map(|(n, _)| n).collect(),
            deny: deny.into_iter().map(|(n, _)| n).collect(),
        }
    }

    /// A burst without its rate limits nothing: refused rather than ignored.
    fn burst_needs_rate(&mut self, lkey: &str, (k, burst): Keyed<'_>, has_rate: bool, rate: &str) {
        if let (Some(b), false) = (burst, has_rate) {
            self.err(
                at(b),
                format!("{lkey}.{k}"),
                format!("is only used with {rate} (expected {rate} too, or remove this key)"),
            );
        }
    }

    /// The per-source rate of the VIP's protocol: SYNs on TCP, new flows on UDP.
    fn per_source_rate(&mut self, l: &RawVipLimits, lkey: &str, protocol: Protocol) -> u32 {
        let (mine, other, other_key, other_proto) = match protocol {
            Protocol::Tcp => (
                &l.syn_per_source_per_second,
                &l.udp_flows_per_source_per_second,
                "udp_flows_per_source_per_second",
                "udp",
            ),
            Protocol::Udp => (
                &l.udp_flows_per_source_per_second,
                &l.syn_per_source_per_second,
                "syn_per_source_per_second",
                "tcp",
            ),
        };
        if let Some(o) = other {
            let mine_key = match protocol {
                Protocol::Tcp => "syn_per_source_per_second",
                Protocol::Udp => "udp_flows_per_source_per_second",
            };
            self.err(
                at(o),
                format!("{lkey}.{other_key}"),
                format!(
                    "is only used on {other_proto} VIPs and this one is {protocol} (expected {mine_key})"
                ),
            );
        }
        or(mine, 0)
    }

    fn prefix_len(&mut self, s: &Option<S<u32>>, lkey: &str, k: &str, max: u32) -> Option<u8> {
        let s = s.as_ref()?;
        let n = *s.get_ref();
        if n == 0 || n > max {
            self.err(
                at(s),
                format!("{lkey}.{k}"),
                format!("{n} is out of range (expected a prefix length 1..={max})"),
            );
            return None;
        }
        u8::try_from(n).ok()
    }

    fn source_table_size(&mut self, l: &RawVipLimits, lkey: &str) -> u32 {
        let Some(s) = &l.source_table_size else {
            return VipLimits::DEFAULT_SOURCE_TABLE;
        };
        let n = *s.get_ref();
        let max = VipLimits::MAX_SOURCE_TABLE;
        if !(64..=max).contains(&n) || !n.is_power_of_two() {
            self.err(
                at(s),
                format!("{lkey}.source_table_size"),
                format!("{n} is not a power of two in 64..={max} (expected e.g. 16384)"),
            );
            return VipLimits::DEFAULT_SOURCE_TABLE;
        }
        n
    }

    /// `allow` or `deny`: prefixes of the VIP's family, each once; the
    /// position of each valid one.
    fn prefix_list(
        &mut self,
        list: &Option<S<Vec<S<String>>>>,
        lkey: &str,
        k: &str,
        address: Option<IpAddr>,
    ) -> Vec<(IpNet, usize)> {
        let Some(list) = list else { return Vec::new() };
        let mut out: Vec<(IpNet, usize)> = Vec::new();
        let mut seen: HashMap<IpNet, usize> = HashMap::new();
        if list.get_ref().len() > VipLimits::MAX_PREFIXES {
            self.err(
                at(list),
                format!("{lkey}.{k}"),
                format!(
                    "{} prefixes are too many (expected at most {})",
                    list.get_ref().len(),
                    VipLimits::MAX_PREFIXES
                ),
            );
            return out;
        }
        for (i, s) in list.get_ref().iter().enumerate() {
            let ikey = format!("{lkey}.{k}[{i}]");
            let net = match s.get_ref().parse::<IpNet>() {
                Ok(n) => n,
                Err(e) => {
                    self.err(at(s), ikey, e);
                    continue;
                }
            };
            if let Some(vip) = address {
                if vip.is_ipv4() != net.is_ipv4() {
                    self.err(
                        at(s),
                        ikey,
                        format!(
                            "{net} is {} but the VIP is {} (expected client prefixes of the VIP's family)",
                            family(net.addr),
                            family(vip)
                        ),
                    );
                    continue;
                }
            }
            let net = IpNet {
                addr: net.network(),
                prefix_len: net.prefix_len,
            };
            if let Some(j) = seen.get(&net) {
                self.err(
                    at(s),
                    ikey,
                    format!("{net} is listed twice (also {k}[{j}])"),
                );
                continue;
            }
            seen.insert(net, i);
            out.push((net, i));
        }
        out
    }

    /// A prefix in both lists contradicts itself.
    fn allow_and_deny(
        &mut self,
        l: &RawVipLimits,
        lkey: &str,
        allow: &[(IpNet, usize)],
        deny: &[(IpNet, usize)],
    ) {
        let Some(dlist) = &l.deny else { return };
        for (net, di) in deny {
            if let Some((_, ai)) = allow.iter().find(|(a, _)| a == net) {
                if let Some(s) = dlist.get_ref().get(*di) {
                    self.err(
                        at(s),
                        format!("{lkey}.deny[{di}]"),
                        format!(
                            "{net} is also allow[{ai}] (expected each prefix in one list: the longest matching prefix decides, so a narrower prefix may carve an exception)"
                        ),
                    );
                }
            }
        }
    }

    /// A backend may not admit more connections than its VIP does.
    fn backend_max_above(&mut self, v: &RawVip, key: &str, vip_max: u32, backends: &[Backend]) {
        let raw = v.backend.as_ref().map_or(&[][..], |l| l.get_ref());
        if raw.len() != backends.len() {
            return; // some backend is broken: that error comes first
        }
        for (i, (b, rb)) in backends.iter().zip(raw).enumerate() {
            let Some(s) = &rb.get_ref().max_connections else {
                continue;
            };
            if vip_max > 0 && b.max_connections > vip_max {
                self.err(
                    at(s),
                    format!("{key}.backend[{i}].max_connections"),
                    format!(
                        "{} is above the VIP's limits.max_connections = {vip_max} (expected at most {vip_max})",
                        b.max_connections
                    ),
                );
            }
        }
    }
}
