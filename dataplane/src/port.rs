//! The ports a worker knows: data ports and their kernel twins, with the
//! addresses each answers for. Built once from the configuration; read by
//! the pipeline (which port a frame came from) and the load balancer (which
//! port a frame leaves by, with which MAC).

use std::net::{Ipv4Addr, Ipv6Addr};

use conf::Config;

use crate::slowpath::OwnedAddrs;

/// What a port is to the pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortRole {
    /// A data port (NIC, TAP, pcap); `twin` is the index of its kernel twin.
    Data { twin: Option<usize> },
    /// The kernel twin of data port `data`: what the kernel sends leaves there.
    Twin { data: usize },
}

/// A port as the packet path knows it: name, MAC, role, and the addresses
/// a data port answers for. (`dpdk_ffi::port::PortInfo` is what DPDK says
/// about a device.)
#[derive(Clone, Debug)]
pub struct PortDesc {
    pub name: String,
    pub mac: [u8; 6],
    pub role: PortRole,
    /// The port's own addresses: answered for ARP/NDP/echo, other traffic goes to the kernel twin.
    pub addrs_v4: Vec<Ipv4Addr>,
    pub addrs_v6: Vec<Ipv6Addr>,
    /// VIP addresses in this port's subnets: answered for ARP/NDP/echo, consumed by the dataplane.
    pub vips_v4: Vec<Ipv4Addr>,
    pub vips_v6: Vec<Ipv6Addr>,
    /// Largest IP packet the port's link carries (`port.mtu`; a twin has
    /// its data port's): encapsulating DSR VIPs keep their outer packets
    /// within it.
    pub mtu: u16,
    /// The port's first subnet of each family (its address and prefix
    /// length): where the outer sources of DSR tunnels are folded into.
    pub subnet_v4: Option<(Ipv4Addr, u8)>,
    pub subnet_v6: Option<(Ipv6Addr, u8)>,
    /// The upper 96 bits every outer IPv6 source folded into `subnet_v6`
    /// shares (`encap::v6_source_high`), worked out once here rather than
    /// for each packet.
    pub source_high_v6: [u8; 12],
    /// The port's subnets (`addresses`), which say which VIPs it answers
    /// for; empty for a twin.
    pub nets: Vec<conf::IpNet>,
}

/// A port's MTU when the config names none: Ethernet's 1500.
pub use conf::DEFAULT_MTU;

/// The IPv6 link-local address a kernel derives from `mac` (modified EUI-64),
/// which the twin, carrying the port's MAC, will have.
pub fn link_local_of(mac: [u8; 6]) -> Ipv6Addr {
    Ipv6Addr::from([
        0xfe,
        0x80,
        0,
        0,
        0,
        0,
        0,
        0,
        mac[0] ^ 0x02,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ])
}

impl PortDesc {
    /// Answers for the VIP addresses among `vips` that lie in this port's
    /// subnets, from now on (at start, and for each adopted table
    /// generation, so that a VIP added at run time is answered for).
    pub fn set_vips(&mut self, vips: impl Iterator<Item = std::net::IpAddr>) {
        self.vips_v4.clear();
        self.vips_v6.clear();
        for ip in vips {
            if !self.nets.iter().any(|net| net.contains(ip)) {
                continue;
            }
            match ip {
                std::net::IpAddr::V4(a) if !self.vips_v4.contains(&a) => self.vips_v4.push(a),
                std::net::IpAddr::V6(a) if !self.vips_v6.contains(&a) => self.vips_v6.push(a),
                _ => {}
            }
        }
    }

    /// Longest frame the port takes: its `mtu`, an Ethernet header and up
    /// to two VLAN tags.
    #[inline]
    pub fn max_frame_len(&self) -> usize {
        usize::from(self.mtu) + 14 + 8
    }

    /// True for the port's own addresses and its VIPs.
    pub fn owns_any(&self, ip: std::net::IpAddr) -> bool {
        match ip {
            std::net::IpAddr::V4(a) => OwnedAddrs::owns_v4(self, a),
            std::net::IpAddr::V6(a) => OwnedAddrs::owns_v6(self, &a),
        }
    }
}

impl OwnedAddrs for PortDesc {
    fn owns_v4(&self, ip: Ipv4Addr) -> bool {
        self.addrs_v4.contains(&ip) || self.vips_v4.contains(&ip)
    }
    fn owns_v6(&self, ip: &Ipv6Addr) -> bool {
        self.addrs_v6.contains(ip) || self.vips_v6.contains(ip)
    }
}

/// Builds the port table a worker uses: data ports in config order
/// (`macs[i]` is the MAC of port i), then one twin per data port when
/// `with_twins` is set.
pub fn ports_from_config(cfg: &Config, macs: &[[u8; 6]], with_twins: bool) -> Vec<PortDesc> {
    let n = cfg.ports.len();
    let mut ports = Vec::with_capacity(n * 2);
    for (i, p) in cfg.ports.iter().enumerate() {
        let mut info = PortDesc {
            name: p.name.clone(),
            mac: macs[i],
            role: PortRole::Data {
                twin: with_twins.then_some(n + i),
            },
            addrs_v4: Vec::new(),
            addrs_v6: Vec::new(),
            vips_v4: Vec::new(),
            vips_v6: Vec::new(),
            mtu: p.mtu,
            subnet_v4: None,
            subnet_v6: None,
            source_high_v6: [0; 12],
            nets: p.addresses.clone(),
        };
        for net in &p.addresses {
            match net.addr {
                std::net::IpAddr::V4(a) => {
                    info.addrs_v4.push(a);
                    info.subnet_v4.get_or_insert((a, net.prefix_len));
                }
                std::net::IpAddr::V6(a) => {
                    info.addrs_v6.push(a);
                    if !a.is_unicast_link_local() {
                        info.subnet_v6.get_or_insert((a, net.prefix_len));
                    }
                }
            }
        }
        if let Some((net, prefix)) = info.subnet_v6 {
            info.source_high_v6 = crate::encap::v6_source_high(net, prefix);
        }
        if with_twins {
            // The twin's link-local address: NDP for it is answered here like
            // for any owned address, and traffic to it goes up to the kernel.
            info.addrs_v6.push(link_local_of(macs[i]));
        }
        info.set_vips(cfg.vips.iter().map(|v| v.address));
        ports.push(info);
    }
    if with_twins {
        for (i, p) in cfg.ports.iter().enumerate() {
            ports.push(PortDesc {
                name: p.host_interface.clone(),
                mac: macs[i],
                role: PortRole::Twin { data: i },
                addrs_v4: Vec::new(),
                addrs_v6: Vec::new(),
                vips_v4: Vec::new(),
                vips_v6: Vec::new(),
                mtu: p.mtu,
                subnet_v4: None,
                subnet_v6: None,
                source_high_v6: [0; 12],
                nets: Vec::new(),
            });
        }
    }
    ports
}
