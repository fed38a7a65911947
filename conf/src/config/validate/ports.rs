//! `[[port]]`: each port's device, addresses, gateway, kernel twin, MAC and
//! full-NAT local addresses and ports, and the rules between ports.

use std::collections::HashMap;
use std::net::IpAddr;

use toml::Spanned as S;

use super::super::net::{format_mac, parse_mac};
use super::super::raw::RawPort;
use super::super::{
    device_name, IpNet, Port, DEFAULT_LOCAL_PORT_RANGE, DEFAULT_MTU, MAX_IFNAME_LEN, MAX_MTU,
    MIN_MTU,
};
use super::{at, nets, pos, List, Validator, MAX_NAME};

/// Everything about one port that cross-port and VIP checks need.
struct PortInfo {
    range_at: usize,
    range_default: bool,
}

impl Validator {
    pub(super) fn ports(&mut self, list: Option<&List<RawPort>>) -> Vec<Port> {
        let items: &[S<RawPort>] = list.map_or(&[], |l| l.get_ref());
        if items.is_empty() {
            self.err(
                list.map_or(0, at),
                "port",
                "at least one [[port]] is required",
            );
        }
        if items.len() > crate::config::MAX_PORTS {
            self.err(
                at(&items[crate::config::MAX_PORTS]),
                "port",
                format!(
                    "has {} entries (expected at most {}: DPDK 22.11 holds 32 devices, a port and its kernel twin take two)",
                    items.len(),
                    crate::config::MAX_PORTS
                ),
            );
        }
        let mut ports = Vec::new();
        let mut names: HashMap<String, usize> = HashMap::new();
        let mut devices: HashMap<String, usize> = HashMap::new();
        let mut ifnames: HashMap<String, usize> = HashMap::new();
        let mut macs: HashMap<[u8; 6], usize> = HashMap::new();
        for (i, sp) in items.iter().enumerate() {
            let key = format!("port[{i}]");
            let (port, info) = self.port(sp, &key);
            let dup_name = names.contains_key(&port.name);
            if let Some(j) = names.get(&port.name) {
                self.err(
                    at(&sp.get_ref().name),
                    format!("{key}.name"),
                    format!(
                        "{:?} is already the name of port[{j}] (expected unique port names)",
                        port.name
                    ),
                );
            } else {
                names.insert(port.name.clone(), i);
            }
            let dev = port.device_name().to_owned();
            if let Some(j) = devices.get(&dev) {
                let other = ports.get(*j).map_or("", |p: &Port| p.name.as_str());
                self.err(
                    at(&sp.get_ref().devargs),
                    format!("{key}.devargs"),
                    format!("device {dev:?} is already used by port {other:?} (port[{j}])"),
                );
            } else if !dev.is_empty() {
                devices.insert(dev, i);
            }
            if dup_name {
                // Same name, same default host_interface: one error is enough.
            } else if let Some(j) = ifnames.get(&port.host_interface) {
                self.err(
                    pos(&sp.get_ref().host_interface, at(sp)),
                    format!("{key}.host_interface"),
                    format!(
                        "{:?} is already the host_interface of port[{j}] (expected unique names)",
                        port.host_interface
                    ),
                );
            } else {
                ifnames.insert(port.host_interface.clone(), i);
            }
            if let (Some(mac), Some(smac)) = (port.mac, &sp.get_ref().mac) {
                if let Some(j) = macs.get(&mac) {
                    self.err(
                        at(smac),
                        format!("{key}.mac"),
                        format!(
                            "{} is already the mac of port[{j}] (expected unique MAC addresses)",
                            format_mac(&mac)
                        ),
                    );
                } else {
                    macs.insert(mac, i);
                }
            }
            // Full-NAT port ranges must not overlap on a shared local address.
            if let Some((lo, hi)) = port.local_port_range {
                for (j, other) in ports.iter().enumerate() {
                    let Some((olo, ohi)) = other.local_port_range else {
                        continue;
                    };
                    let shared = port
                        .local_addresses
                        .iter()
                        .find(|a| other.local_addresses.contains(a));
                    if let Some(shared) = shared {
                        if lo <= ohi && olo <= hi {
                            self.err(
                                info.range_at,
                                format!("{key}.local_port_range"),
                                format!(
                                    "[{lo}, {hi}]{} overlaps [{olo}, {ohi}] of port {:?} (port[{j}]), which shares local address {shared} (expected disjoint ranges)",
                                    if info.range_default { " (the default)" } else { "" },
                                    other.name
                                ),
                            );
                        }
                    }
                }
            }
            ports.push(port);
        }
        ports
    }

    fn port(&mut self, sp: &S<RawPort>, key: &str) -> (Port, PortInfo) {
        let p = sp.get_ref();
        self.name(&p.name, &format!("{key}.name"), MAX_NAME, false);
        let name = p.name.get_ref().clone();
        let devargs = self.port_devargs(p, key);
        let addresses = self.port_addresses(p, key);
        let gateway = self.port_gateway(p, key, &addresses);
        let host_interface = self.port_host_interface(p, key, &name);
        let local_addresses = self.port_local_addresses(p, key, &addresses);
        let (local_port_range, range_at) = self.port_local_range(sp, key, &local_addresses);
        let mac = self.port_mac(p, key);
        let mtu = self.port_mtu(p, key);
        (
            Port {
                name,
                devargs,
                addresses,
                gateway,
                host_interface,
                local_addresses,
                local_port_range,
                mac,
                mtu,
            },
            PortInfo {
                range_at,
                range_default: p.local_port_range.is_none(),
            },
        )
    }

    /// `devargs`: a device name before the first comma.
    fn port_devargs(&mut self, p: &RawPort, key: &str) -> String {
        let devargs = p.devargs.get_ref().clone();
        let dev = device_name(&devargs);
        if devargs.is_empty() {
            self.err(
                at(&p.devargs),
                format!("{key}.devargs"),
                "must not be empty (expected DPDK devargs, e.g. \"net_tap0,iface=border-ext\" or \"0000:01:00.0\")",
            );
        } else if dev.is_empty() || dev.chars().any(|c| c.is_whitespace() || c.is_control()) {
            self.err(
                at(&p.devargs),
                format!("{key}.devargs"),
                format!("{devargs:?} has no valid device name before the first comma (expected e.g. \"net_tap0,iface=border-ext\")"),
            );
        } else if devargs.contains('\0') {
            self.err(
                at(&p.devargs),
                format!("{key}.devargs"),
                "contains a NUL character",
            );
        }
        devargs
    }

    /// `addresses`: unicast interface addresses with their subnets, once each.
    fn port_addresses(&mut self, p: &RawPort, key: &str) -> Vec<IpNet> {
        let mut addresses: Vec<IpNet> = Vec::new();
        if let Some(list) = &p.addresses {
            for (i, a) in list.get_ref().iter().enumerate() {
                let akey = format!("{key}.addresses[{i}]");
                match a.get_ref().parse::<IpNet>() {
                    Ok(n) if n.addr.is_unspecified() || n.addr.is_multicast() => self.err(
                        at(a),
                        akey,
                        format!(
                            "{} is not a unicast address (expected an interface address)",
                            n.addr
                        ),
                    ),
                    Ok(n) => {
                        if let Some(j) = addresses.iter().position(|o| o.addr == n.addr) {
                            self.err(
                                at(a),
                                akey,
                                format!("{} is listed twice (also addresses[{j}])", n.addr),
                            );
                        } else {
                            addresses.push(n);
                        }
                    }
                    Err(msg) => self.err(at(a), akey, msg),
                }
            }
        }
        addresses
    }

    /// `gateway`: a next hop inside one of the port's subnets.
    fn port_gateway(&mut self, p: &RawPort, key: &str, addresses: &[IpNet]) -> Option<IpAddr> {
        p.gateway.as_ref().and_then(|g| {
            let gkey = format!("{key}.gateway");
            let ip = self.ip(g, &gkey)?;
            if addresses.iter().any(|n| n.addr == ip) {
                self.err(
                    at(g),
                    gkey,
                    format!("{ip} is this port's own address (expected a next hop on the subnet)"),
                );
            } else if !addresses.iter().any(|n| n.contains(ip)) {
                self.err(
                    at(g),
                    gkey,
                    format!(
                        "{ip} is not inside any of this port's subnets (addresses: {})",
                        nets(addresses)
                    ),
                );
            }
            Some(ip)
        })
    }

    /// `host_interface`: a valid interface name (by default `kni-<name>`).
    fn port_host_interface(&mut self, p: &RawPort, key: &str, name: &str) -> String {
        match &p.host_interface {
            Some(h) => {
                let hkey = format!("{key}.host_interface");
                let s = h.get_ref();
                if let Some(msg) = ifname_problem(s) {
                    self.err(at(h), hkey, msg);
                }
                s.clone()
            }
            None => {
                let s = format!("kni-{name}");
                if s.len() > MAX_IFNAME_LEN && !name.is_empty() {
                    self.err(
                        at(&p.name),
                        format!("{key}.name"),
                        format!(
                            "the default host_interface {s:?} is {} bytes, longer than {MAX_IFNAME_LEN} (expected a shorter name, or set host_interface)",
                            s.len()
                        ),
                    );
                }
                s
            }
        }
    }

    /// `local_addresses`: full-NAT source addresses inside the port's subnets.
    fn port_local_addresses(&mut self, p: &RawPort, key: &str, addresses: &[IpNet]) -> Vec<IpAddr> {
        let mut local_addresses: Vec<IpAddr> = Vec::new();
        if let Some(list) = &p.local_addresses {
            for (i, a) in list.get_ref().iter().enumerate() {
                let lkey = format!("{key}.local_addresses[{i}]");
                let Some(ip) = self.ip(a, &lkey) else {
                    continue;
                };
                if let Some(j) = local_addresses.iter().position(|o| *o == ip) {
                    self.err(
                        at(a),
                        lkey,
                        format!("{ip} is listed twice (also local_addresses[{j}])"),
                    );
                } else if !addresses.iter().any(|n| n.contains(ip)) {
                    self.err(
                        at(a),
                        lkey,
                        format!(
                            "{ip} is not inside any of this port's subnets (addresses: {}; expected a local address on this port)",
                            nets(addresses)
                        ),
                    );
                } else {
                    local_addresses.push(ip);
                }
            }
        }
        local_addresses
    }

    /// `local_port_range` (the default when local addresses are set, none
    /// without), and where it was written (or the port's table).
    fn port_local_range(
        &mut self,
        sp: &S<RawPort>,
        key: &str,
        local_addresses: &[IpAddr],
    ) -> (Option<(u16, u16)>, usize) {
        let p = sp.get_ref();
        let table_at = at(sp);
        let mut range_at = table_at;
        let local_port_range = match &p.local_port_range {
            Some(r) => {
                range_at = at(r);
                let rkey = format!("{key}.local_port_range");
                match r.get_ref().as_slice() {
                    [lo, hi] => {
                        let (l, h) = (*lo.get_ref(), *hi.get_ref());
                        if l == 0 {
                            self.err(
                                at(lo),
                                format!("{rkey}[0]"),
                                "0 is not a usable port (expected 1..=65535)",
                            );
                        } else if l > h {
                            self.err(
                                at(r),
                                rkey.clone(),
                                format!("low {l} is above high {h} (expected [low, high] with low <= high)"),
                            );
                        }
                        if p.local_addresses.is_none() {
                            self.err(
                                at(r),
                                rkey,
                                "is set but local_addresses is not (expected local_addresses for the full-NAT pool)",
                            );
                        }
                        Some((l, h))
                    }
                    other => {
                        self.err(
                            at(r),
                            rkey,
                            format!(
                                "has {} element{} (expected two ports [low, high], e.g. [1024, 32767])",
                                other.len(),
                                if other.len() == 1 { "" } else { "s" }
                            ),
                        );
                        None
                    }
                }
            }
            None => None,
        };
        let local_port_range = if local_addresses.is_empty() {
            None
        } else {
            Some(local_port_range.unwrap_or(DEFAULT_LOCAL_PORT_RANGE))
        };
        (local_port_range, range_at)
    }

    /// `mac`: a unicast MAC address.
    /// `mtu`: the largest IP packet of the port's link, within what
    /// Ethernet jumbo frames carry.
    fn port_mtu(&mut self, p: &RawPort, key: &str) -> u16 {
        let Some(m) = &p.mtu else {
            return DEFAULT_MTU;
        };
        let v = *m.get_ref();
        match u16::try_from(v) {
            Ok(v) if (MIN_MTU..=MAX_MTU).contains(&v) => v,
            _ => {
                self.err(
                    at(m),
                    format!("{key}.mtu"),
                    format!("{v} is out of range (expected {MIN_MTU}..={MAX_MTU} bytes, e.g. 1500 or 9000)"),
                );
                DEFAULT_MTU
            }
        }
    }

    fn port_mac(&mut self, p: &RawPort, key: &str) -> Option<[u8; 6]> {
        p.mac.as_ref().and_then(|m| {
            let mkey = format!("{key}.mac");
            match parse_mac(m.get_ref()) {
                None => {
                    self.err(
                        at(m),
                        mkey,
                        format!("{:?} is not a MAC address (expected six hex pairs, e.g. \"02:00:00:00:00:01\")", m.get_ref()),
                    );
                    None
                }
                Some(mac) if mac[0] & 1 == 1 || mac == [0; 6] => {
                    self.err(
                        at(m),
                        mkey,
                        format!("{} is not a unicast address (expected the first octet even and not all zeros, e.g. \"02:00:00:00:00:01\")", format_mac(&mac)),
                    );
                    None
                }
                Some(mac) => Some(mac),
            }
        })
    }
}

/// Why `s` cannot be a Linux interface name, if it cannot.
fn ifname_problem(s: &str) -> Option<String> {
    if s.is_empty() {
        return Some(
            "must not be empty (expected 1..=15 characters from A-Z a-z 0-9 _ - .)".to_owned(),
        );
    }
    if s.len() > MAX_IFNAME_LEN {
        return Some(format!(
            "{s:?} is {} bytes long (expected at most {MAX_IFNAME_LEN}, the Linux IFNAMSIZ limit)",
            s.len()
        ));
    }
    if s == "." || s == ".." {
        return Some(format!("{s:?} is not a valid interface name"));
    }
    s.chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.'))
        .map(|c| format!("{s:?} contains {c:?} (expected only A-Z a-z 0-9 _ - .)"))
}
