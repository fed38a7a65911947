//! Where a worker sends an address: the data port whose subnet holds it, or
//! a gateway of the same family; and the full-NAT local address pools of
//! the data ports. Built from the configuration's ports, adopted with the
//! tables, read by the load balancer and by the local tuple sets.

use std::net::IpAddr;

use conf::IpNet;

/// A full-NAT source pool entry: address, the data port it lives on, port range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalPool {
    pub addr: IpAddr,
    pub port: usize,
    pub range: (u16, u16),
}

/// A data port as routing sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortRoute {
    /// The data port's index.
    pub port: usize,
    /// Its subnets: their addresses are on its link.
    pub nets: Vec<IpNet>,
    /// Its default gateway, if it has one.
    pub gateway: Option<IpAddr>,
}

/// Where to send packets for an address: data port and next hop.
#[derive(Clone, Debug, Default)]
pub struct Routes {
    pub ports: Vec<PortRoute>,
    pub pools: Vec<LocalPool>,
}

impl Routes {
    pub fn from_config(cfg: &conf::Config) -> Routes {
        let mut r = Routes::default();
        for (i, p) in cfg.ports.iter().enumerate() {
            r.ports.push(PortRoute {
                port: i,
                nets: p.addresses.clone(),
                gateway: p.gateway,
            });
            if let Some(range) = p.local_port_range {
                for a in &p.local_addresses {
                    r.pools.push(LocalPool {
                        addr: *a,
                        port: i,
                        range,
                    });
                }
            }
        }
        r
    }

    /// The data port and next hop for `dst`: on-link first, else a gateway of the same family.
    pub fn route(&self, dst: IpAddr) -> Option<(usize, IpAddr)> {
        if let Some(r) = self
            .ports
            .iter()
            .find(|r| r.nets.iter().any(|n| n.contains(dst)))
        {
            return Some((r.port, dst));
        }
        self.ports.iter().find_map(|r| {
            r.gateway
                .filter(|g| g.is_ipv4() == dst.is_ipv4())
                .map(|g| (r.port, g))
        })
    }

    /// Whether `ip` is in a subnet of data port `port`.
    pub fn on_port(&self, port: usize, ip: IpAddr) -> bool {
        self.ports
            .iter()
            .any(|r| r.port == port && r.nets.iter().any(|n| n.contains(ip)))
    }

    /// The full-NAT pool used towards a backend reached through `port`.
    pub fn pool_for(&self, port: usize, v4: bool) -> Option<&LocalPool> {
        self.pools
            .iter()
            .find(|l| l.port == port && l.addr.is_ipv4() == v4)
            .or_else(|| self.pools.iter().find(|l| l.addr.is_ipv4() == v4))
    }
}
