//! Tables-region fixtures shared by the region tests: the VIPs and the
//! three-VIP generation they publish.
#![allow(dead_code)]

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use conf::maglev::{build, BackendId, MaglevBackend};
use conf::tables::{
    BackendEntry, BackendState, Generation, VipFlags, VipTable, PROTO_TCP, PROTO_UDP,
};
use conf::Mode;

/// 10.0.0.`i`.
pub fn v4(i: u8) -> IpAddr {
    IpAddr::from([10, 0, 0, i])
}

/// 2001:db8::`i`.
pub fn v6(i: u16) -> IpAddr {
    IpAddr::from([0x2001, 0xdb8, 0, 0, 0, 0, 0, i])
}

/// VIP `id` (`vip-<id>`, port 80, UDP for DNAT and TCP for full-NAT, PROXY
/// v2 with a unique id) over `backends` on port 80, each of `weight`, the
/// second one draining; its Maglev ring has `ring_size` slots.
pub fn region_vip(
    id: u32,
    addr: IpAddr,
    backends: &[IpAddr],
    ring_size: u32,
    mode: Mode,
    weight: u32,
) -> VipTable {
    let weighted: Vec<MaglevBackend> = backends
        .iter()
        .map(|&a| MaglevBackend {
            id: BackendId::from(SocketAddr::new(a, 80)),
            weight,
        })
        .collect();
    let ring = if weighted.is_empty() {
        Vec::new()
    } else {
        build(&weighted, ring_size).unwrap()
    };
    VipTable {
        id,
        name: format!("vip-{id}"),
        addr,
        port: 80,
        proto: if mode == Mode::Dnat {
            PROTO_UDP
        } else {
            PROTO_TCP
        },
        mode,
        flags: VipFlags::PROXY_V2 | VipFlags::PP_TLV_UNIQUE_ID,
        pp_max_len: 107,
        backends: backends
            .iter()
            .enumerate()
            .map(|(i, &a)| BackendEntry {
                id: 100 + i as u32,
                addr: a,
                port: 80,
                weight,
                state: if i == 1 {
                    BackendState::Draining
                } else {
                    BackendState::Up
                },
                max_connections: 10 * i as u32,
            })
            .collect(),
        ring,
        limits: fixture_limits(addr),
        // Odd VIPs persist: the record's field is covered by every fixture.
        persistence_s: 300 * (id % 2),
    }
}

/// Limits that round-trip every field: a connection cap, both rates and
/// an allow list with a narrower deny inside it, of `addr`'s family.
pub fn fixture_limits(addr: std::net::IpAddr) -> conf::VipLimits {
    let net = |len: u8| {
        let n = conf::IpNet {
            addr,
            prefix_len: len,
        };
        conf::IpNet {
            addr: n.network(),
            prefix_len: len,
        }
    };
    let (wide, narrow) = if addr.is_ipv4() { (8, 24) } else { (32, 64) };
    conf::VipLimits {
        max_connections: 1000,
        new_connections_per_second: 500,
        new_connections_burst: 50,
        per_source_per_second: 20,
        per_source_burst: 40,
        allow: vec![net(wide)],
        deny: vec![net(narrow)],
        ..conf::VipLimits::default()
    }
}

/// The generation the region tests start from: VIP 0 full-NAT on
/// 10.0.0.100 over 10.0.0.1-5 (61 slots), VIP 1 DNAT on 2001:db8::100 over
/// 2001:db8::1-3 (31 slots), VIP 2 full-NAT on 10.0.0.101 without backends;
/// each made by `vip(id, address, backends, ring size, mode)`.
pub fn three_vips(vip: impl Fn(u32, IpAddr, &[IpAddr], u32, Mode) -> Arc<VipTable>) -> Generation {
    let v4_backends: Vec<IpAddr> = (1..=5).map(v4).collect();
    let v6_backends: Vec<IpAddr> = (1..=3).map(v6).collect();
    Generation {
        flow_hash_key: *b"0123456789abcdef",
        vips: vec![
            vip(0, v4(100), &v4_backends, 61, Mode::FullNat),
            vip(1, v6(100), &v6_backends, 31, Mode::Dnat),
            vip(2, v4(101), &[], 0, Mode::FullNat),
        ],
    }
}
