//! `[[vip]]`: each VIP's address on the ports, mode, PROXY protocol,
//! Maglev table and backends (`[vip.health]` in `health.rs`,
//! `[vip.limits]` in `vip_limits.rs`, `syn_proxy` in `syn_proxy.rs`).

use std::collections::HashMap;
use std::net::IpAddr;

use toml::Spanned as S;

use super::super::net::{family, is_prime, next_prime};
use super::super::raw::{RawBackend, RawVip};
use super::super::{
    Backend, FlowHashFields, IpNet, Mode, Port, PpTlv, Protocol, ProxyProtocol, Vip,
    DEFAULT_MAGLEV_TABLE_SIZE, DEFAULT_PROXY_PROTOCOL_MAX_LEN, MAX_MAGLEV_TABLE_SIZE,
    MAX_PROXY_PROTOCOL_MAX_LEN, MAX_TIMEOUT_SECS, MAX_WEIGHT, PPV2_FIXED_LEN,
};
use super::{at, clashes, nets, or, pos, Clash, List, Validator, MAX_NAME, MAX_ZONE};

/// A VIP's PROXY protocol options besides the version.
struct ProxyOptions {
    send_on_connect: bool,
    tlvs: Vec<PpTlv>,
    max_len: u16,
}

impl Validator {
    pub(super) fn vips(
        &mut self,
        list: Option<&List<RawVip>>,
        ports: &[Port],
        ports_ok: bool,
        have_zone: bool,
    ) -> Vec<Vip> {
        let items: &[S<RawVip>] = list.map_or(&[], |l| l.get_ref());
        let vips: Vec<Vip> = items
            .iter()
            .enumerate()
            .map(|(i, sv)| self.vip(sv, &format!("vip[{i}]"), ports, ports_ok, have_zone))
            .collect();
        for clash in clashes(&vips) {
            let (vip, raw) = (&vips[clash.vip], items[clash.vip].get_ref());
            let key = format!("vip[{}]", clash.vip);
            match clash.kind {
                Clash::Name => self.err(
                    at(&raw.name),
                    format!("{key}.name"),
                    format!(
                        "{:?} is already the name of vip[{}] (expected unique VIP names)",
                        vip.name, clash.earlier
                    ),
                ),
                Clash::Listener => self.err(
                    at(&raw.address),
                    format!("{key}.address"),
                    format!(
                        "{} port {}/{} is already served by vip {:?} (vip[{}]) (expected each address, port and protocol once)",
                        vip.address, vip.port, vip.protocol, vips[clash.earlier].name, clash.earlier
                    ),
                ),
            }
        }
        vips
    }

    pub(super) fn vip(
        &mut self,
        sv: &S<RawVip>,
        key: &str,
        ports: &[Port],
        ports_ok: bool,
        have_zone: bool,
    ) -> Vip {
        let v = sv.get_ref();
        self.name(&v.name, &format!("{key}.name"), MAX_NAME, false);
        let akey = format!("{key}.address");
        let address = self.ip(&v.address, &akey);
        let port = *v.port.get_ref();
        if port == 0 {
            self.err(
                at(&v.port),
                format!("{key}.port"),
                "0 is not a usable port (expected 1..=65535)",
            );
        }
        let protocol = self.choice(
            &v.protocol,
            &format!("{key}.protocol"),
            &[("tcp", Protocol::Tcp), ("udp", Protocol::Udp)],
            Protocol::Tcp,
        );
        let mode = self.vip_mode(sv, key);
        let proxy_protocol = self.choice(
            &v.proxy_protocol,
            &format!("{key}.proxy_protocol"),
            &[("none", ProxyProtocol::None), ("v2", ProxyProtocol::V2)],
            ProxyProtocol::None,
        );

        if let (Some(ip), true) = (address, ports_ok) {
            self.vip_on_ports(sv, key, ports, ip, mode);
        }
        self.dsr_rules(sv, key, mode, ports);
        let pp = self.vip_proxy_protocol(sv, key, (protocol, proxy_protocol), address);
        let (backends, configured) = self.vip_backends(v, key, address);
        let limits = self.vip_limits(sv, key, (protocol, address), &backends);
        let maglev_table_size = self.maglev_table_size(sv, key, configured);

        let zone_affinity = or(&v.zone_affinity, false);
        if let (true, Some(z)) = (zone_affinity && !have_zone, &v.zone_affinity) {
            self.err(
                at(z),
                format!("{key}.zone_affinity"),
                "true needs the top-level `zone` of this appliance (expected zone = \"...\" at the top of the file, or zone_affinity = false)",
            );
        }

        let health = v
            .health
            .as_ref()
            .map(|h| self.health(h, &format!("{key}.health")));
        self.probe_over_protocol(v, key, protocol);

        Vip {
            name: v.name.get_ref().clone(),
            address: address.unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)),
            port,
            protocol,
            mode,
            proxy_protocol,
            proxy_protocol_send_on_connect: pp.send_on_connect,
            proxy_protocol_tlvs: pp.tlvs,
            proxy_protocol_max_len: pp.max_len,
            maglev_table_size,
            zone_affinity,
            translate_timestamps: or(&v.translate_timestamps, true),
            syn_proxy: self.syn_proxy(v, key, protocol),
            hash: self.choice(
                &v.hash,
                &format!("{key}.hash"),
                &[
                    ("5-tuple", FlowHashFields::FiveTuple),
                    ("source", FlowHashFields::Source),
                ],
                FlowHashFields::FiveTuple,
            ),
            persistence_timeout: self.persistence_timeout(v, key),
            announce: self.announce(&v.announce, key),
            health,
            backends,
            limits,
        }
    }

    /// `persistence_timeout`: 0 (off) up to [`MAX_TIMEOUT_SECS`]. A
    /// persistent VIP's first pick for a client hashes its address alone,
    /// so an explicit `hash = "5-tuple"` contradicts it.
    fn persistence_timeout(&mut self, v: &RawVip, key: &str) -> u32 {
        let Some(t) = &v.persistence_timeout else {
            return 0;
        };
        let n = *t.get_ref();
        if n > MAX_TIMEOUT_SECS {
            self.err(
                at(t),
                format!("{key}.persistence_timeout"),
                format!("{n} is out of range (expected 0..={MAX_TIMEOUT_SECS} seconds, 0 for off)"),
            );
        }
        if let Some(h) = v
            .hash
            .as_ref()
            .filter(|h| h.get_ref() == "5-tuple" && n > 0)
        {
            self.err(
                at(h),
                format!("{key}.hash"),
                format!(
                    "\"5-tuple\" contradicts persistence_timeout = {n} (a persistent VIP picks a new client's backend by its address; remove `hash` or set it to \"source\")"
                ),
            );
        }
        n
    }

    /// A VIP's address `ip` on the ports: on a port's subnet, outside
    /// the ports of the full-NAT pools it belongs to, and with a pool of its
    /// family when `mode` is full-NAT.
    fn vip_on_ports(&mut self, sv: &S<RawVip>, key: &str, ports: &[Port], ip: IpAddr, mode: Mode) {
        let v = sv.get_ref();
        let table_at = at(sv);
        let akey = format!("{key}.address");
        let port = *v.port.get_ref();
        if !ports.iter().any(|p| p.on_link(ip)) {
            let all: Vec<IpNet> = ports
                .iter()
                .flat_map(|p| p.addresses.iter().copied())
                .collect();
            self.err(
                at(&v.address),
                &akey,
                format!(
                    "{ip} is not on any port (expected an address inside the subnet of some port's addresses: {})",
                    nets(&all)
                ),
            );
        }
        // A VIP on a full-NAT source address must stay out of the pool's ports.
        for (j, p) in ports.iter().enumerate() {
            if let Some((lo, hi)) = p.local_port_range {
                if p.local_addresses.contains(&ip) && (lo..=hi).contains(&port) {
                    self.err(
                        at(&v.port),
                        format!("{key}.port"),
                        format!(
                            "{port} is inside local_port_range [{lo}, {hi}] of port {:?} (port[{j}]), whose full-NAT pool includes {ip} (expected a port outside the pool's range)",
                            p.name
                        ),
                    );
                }
            }
        }
        if mode == Mode::FullNat
            && !ports.iter().any(|p| {
                p.local_addresses
                    .iter()
                    .any(|l| l.is_ipv4() == ip.is_ipv4())
            })
        {
            self.err(
                pos(&v.mode, table_at),
                format!("{key}.mode"),
                format!(
                    "fullnat{} needs a full-NAT source pool of {fam}, but no port has {fam} local_addresses (expected local_addresses on some port, or mode = \"dnat\")",
                    if v.mode.is_none() { " (the default)" } else { "" },
                    fam = family(ip)
                ),
            );
        }
    }

    /// The PROXY protocol keys of a VIP of `protocol` whose
    /// `proxy_protocol` is given: only with v2, v2 only on TCP.
    fn vip_proxy_protocol(
        &mut self,
        sv: &S<RawVip>,
        key: &str,
        (protocol, proxy_protocol): (Protocol, ProxyProtocol),
        address: Option<IpAddr>,
    ) -> ProxyOptions {
        let v = sv.get_ref();
        let table_at = at(sv);
        let ppkey = format!("{key}.proxy_protocol");
        if proxy_protocol == ProxyProtocol::V2 && protocol == Protocol::Udp {
            self.err(
                pos(&v.proxy_protocol, table_at),
                &ppkey,
                "v2 is only supported on tcp VIPs (expected \"none\" with protocol = \"udp\")",
            );
        }
        if proxy_protocol == ProxyProtocol::None {
            let set = [
                (
                    "proxy_protocol_send_on_connect",
                    v.proxy_protocol_send_on_connect.as_ref().map(at),
                ),
                (
                    "proxy_protocol_tlvs",
                    v.proxy_protocol_tlvs.as_ref().map(at),
                ),
                (
                    "proxy_protocol_max_len",
                    v.proxy_protocol_max_len.as_ref().map(at),
                ),
            ];
            for (k, a) in set {
                if let Some(a) = a {
                    self.err(
                        a,
                        format!("{key}.{k}"),
                        "is only used with proxy_protocol = \"v2\" (expected proxy_protocol = \"v2\", or remove this key)",
                    );
                }
            }
        }
        let send_on_connect = or(&v.proxy_protocol_send_on_connect, false);
        ProxyOptions {
            send_on_connect,
            tlvs: self.proxy_protocol_tlvs(v, key, proxy_protocol, send_on_connect),
            max_len: self.proxy_protocol_max_len(v, key, address),
        }
    }

    /// `proxy_protocol_tlvs`: known TLVs, once each (default: unique_id with v2).
    fn proxy_protocol_tlvs(
        &mut self,
        v: &RawVip,
        key: &str,
        proxy_protocol: ProxyProtocol,
        proxy_protocol_send_on_connect: bool,
    ) -> Vec<PpTlv> {
        match &v.proxy_protocol_tlvs {
            Some(list) => {
                let mut tlvs: Vec<PpTlv> = Vec::new();
                for (i, t) in list.get_ref().iter().enumerate() {
                    let tkey = format!("{key}.proxy_protocol_tlvs[{i}]");
                    let tlv = self.choice(
                        &Some(t.clone()),
                        &tkey,
                        &[
                            ("unique_id", Some(PpTlv::UniqueId)),
                            ("crc32c", Some(PpTlv::Crc32c)),
                            ("authority", Some(PpTlv::Authority)),
                        ],
                        None,
                    );
                    if let Some(tlv) = tlv {
                        if let Some(j) = tlvs.iter().position(|o| *o == tlv) {
                            self.err(
                                at(t),
                                tkey,
                                format!("{tlv} is listed twice (also proxy_protocol_tlvs[{j}])"),
                            );
                        } else if tlv == PpTlv::Authority && proxy_protocol_send_on_connect {
                            // The authority is the SNI of the client's first
                            // data; a header sent at connect time leaves
                            // before it, so the TLV could never be filled.
                            self.err(
                                at(t),
                                tkey,
                                "authority cannot be sent with proxy_protocol_send_on_connect = true: the header then leaves right after the handshake, before the client's first data that the authority (TLS SNI) is read from (expected proxy_protocol_send_on_connect = false, or remove \"authority\")",
                            );
                        } else {
                            tlvs.push(tlv);
                        }
                    }
                }
                tlvs
            }
            None if proxy_protocol == ProxyProtocol::V2 => vec![PpTlv::UniqueId],
            None => Vec::new(),
        }
    }

    /// `proxy_protocol_max_len`: room for at least the header of the
    /// VIP's address family.
    fn proxy_protocol_max_len(&mut self, v: &RawVip, key: &str, address: Option<IpAddr>) -> u16 {
        let mut proxy_protocol_max_len = DEFAULT_PROXY_PROTOCOL_MAX_LEN;
        if let Some(m) = &v.proxy_protocol_max_len {
            let n = *m.get_ref();
            let v6 = address.is_some_and(|a| a.is_ipv6());
            let min = PPV2_FIXED_LEN + if v6 { 36 } else { 12 };
            if n < u32::from(min) {
                self.err(
                    at(m),
                    format!("{key}.proxy_protocol_max_len"),
                    format!(
                        "{n} is below the smallest header for an {} VIP (expected {min}..={MAX_PROXY_PROTOCOL_MAX_LEN}: 16 fixed + {} address bytes)",
                        if v6 { "IPv6" } else { "IPv4" },
                        min - PPV2_FIXED_LEN
                    ),
                );
            } else if n > u32::from(MAX_PROXY_PROTOCOL_MAX_LEN) {
                self.err(
                    at(m),
                    format!("{key}.proxy_protocol_max_len"),
                    format!("{n} is too large (expected {min}..={MAX_PROXY_PROTOCOL_MAX_LEN})"),
                );
            } else {
                proxy_protocol_max_len = u16::try_from(n).unwrap_or(DEFAULT_PROXY_PROTOCOL_MAX_LEN);
            }
        }
        proxy_protocol_max_len
    }

    /// The VIP's backends, each address and port once, and how many entries
    /// the config lists (valid or not).
    fn vip_backends(
        &mut self,
        v: &RawVip,
        key: &str,
        address: Option<IpAddr>,
    ) -> (Vec<Backend>, usize) {
        let mut backends: Vec<Backend> = Vec::new();
        let mut seen: HashMap<(IpAddr, u16), usize> = HashMap::new();
        let braw: &[S<RawBackend>] = v.backend.as_ref().map_or(&[], |l| l.get_ref());
        for (i, sb) in braw.iter().enumerate() {
            let bkey = format!("{key}.backend[{i}]");
            let Some(b) = self.backend(sb, &bkey, address) else {
                continue;
            };
            if let Some(j) = seen.get(&(b.address, b.port)) {
                self.err(
                    at(&sb.get_ref().address),
                    format!("{bkey}.address"),
                    format!("{}:{} is listed twice (also backend[{j}]; expected unique address and port)", b.address, b.port),
                );
            } else {
                seen.insert((b.address, b.port), i);
            }
            backends.push(b);
        }
        (backends, braw.len())
    }

    /// `maglev_table_size`: a prime of at least 100 slots per configured backend.
    fn maglev_table_size(&mut self, sv: &S<RawVip>, key: &str, configured: usize) -> u32 {
        let v = sv.get_ref();
        let table_at = at(sv);
        let m = or(&v.maglev_table_size, u64::from(DEFAULT_MAGLEV_TABLE_SIZE));
        let mkey = format!("{key}.maglev_table_size");
        let mat = pos(&v.maglev_table_size, table_at);
        let n = configured as u64;
        let need = 100 * n;
        if m > u64::from(MAX_MAGLEV_TABLE_SIZE) {
            self.err(
                mat,
                &mkey,
                format!("{m} is too large (expected a prime >= 100 x backends and <= {MAX_MAGLEV_TABLE_SIZE}, e.g. 65537)"),
            );
        } else if m < need.max(2) || !is_prime(m) {
            let suggestion = next_prime(m.max(need));
            let msg = if m >= need {
                format!("{m} is not prime (expected a prime >= 100 x backends, e.g. {suggestion})")
            } else {
                format!(
                    "{m} is {}less than 100 x {n} backends = {need} (expected a prime >= {need}, e.g. {suggestion})",
                    if is_prime(m) { "" } else { "not prime and " }
                )
            };
            self.err(mat, &mkey, msg);
        }
        u32::try_from(m).unwrap_or(DEFAULT_MAGLEV_TABLE_SIZE)
    }

    fn backend(&mut self, sb: &S<RawBackend>, key: &str, vip: Option<IpAddr>) -> Option<Backend> {
        let b = sb.get_ref();
        let akey = format!("{key}.address");
        let address = self.ip(&b.address, &akey);
        if let Some(ip) = address {
            let broadcast = matches!(ip, IpAddr::V4(a) if a.is_broadcast());
            if ip.is_unspecified() || ip.is_multicast() || broadcast {
                self.err(
                    at(&b.address),
                    &akey,
                    format!("{ip} is not a unicast address (expected a backend host address)"),
                );
            } else if let Some(vip) = vip {
                if vip.is_ipv4() != ip.is_ipv4() {
                    self.err(
                        at(&b.address),
                        &akey,
                        format!(
                            "{ip} is {} but the VIP is {} (expected the VIP's address family: translation between IPv4 and IPv6 is not supported)",
                            family(ip),
                            family(vip)
                        ),
                    );
                }
            }
        }
        let port = *b.port.get_ref();
        if port == 0 {
            self.err(
                at(&b.port),
                format!("{key}.port"),
                "0 is not a usable port (expected 1..=65535)",
            );
        }
        let weight = or(&b.weight, 1);
        if let Some(w) = &b.weight {
            if weight > MAX_WEIGHT {
                self.err(
                    at(w),
                    format!("{key}.weight"),
                    format!("{weight} is too large (expected 0..={MAX_WEIGHT}; 0 drains)"),
                );
            }
        }
        let zone = b.zone.as_ref().map(|z| {
            self.name(z, &format!("{key}.zone"), MAX_ZONE, true);
            z.get_ref().clone()
        });
        self.nonzero(
            &b.max_connections,
            &format!("{key}.max_connections"),
            u32::MAX,
            " connections; leave it out for no limit",
        );
        Some(Backend {
            address: address?,
            port,
            weight,
            zone,
            max_connections: or(&b.max_connections, 0),
        })
    }
}
