//! Tables built by border-dp itself from its config file, for running
//! without border-mgmt (DESIGN §3 lets the dataplane build its first table
//! through the same builder mgmt uses).

use std::net::SocketAddr;

use conf::maglev::{self, BackendId, MaglevBackend};
use conf::{Config, Protocol};

use crate::lb::{Adopted, Routes, VipInput};
use crate::wire::ip_proto;
use crate::worker::TableSource;

/// Stable backend id: VIP position * 256 + backend position (config order).
pub fn backend_id(vip: usize, backend: usize) -> u32 {
    (vip * 256 + backend) as u32
}

/// Builds every VIP's Maglev ring from the config. Rings are leaked: they
/// live as long as the process, like the generation that refers to them.
pub fn adopted_from_config(
    cfg: &Config,
    generation: u64,
) -> Result<Adopted<'static>, maglev::MaglevError> {
    let mut inputs = Vec::with_capacity(cfg.vips.len());
    for (vi, v) in cfg.vips.iter().enumerate() {
        let members: Vec<MaglevBackend> = v
            .backends
            .iter()
            .map(|b| MaglevBackend {
                id: BackendId::from_socket_addr(SocketAddr::new(b.address, b.port)),
                weight: b.weight,
            })
            .collect();
        let ring: &'static [u32] = if members.iter().any(|m| m.weight > 0) {
            Box::leak(maglev::build(&members, v.maglev_table_size)?.into_boxed_slice())
        } else {
            &[]
        };
        inputs.push(VipInput {
            id: vi as u32,
            addr: v.address,
            port: v.port,
            proto: match v.protocol {
                Protocol::Tcp => ip_proto::TCP,
                Protocol::Udp => ip_proto::UDP,
            },
            mode: v.mode,
            ring,
            backends: v
                .backends
                .iter()
                .enumerate()
                .map(|(bi, b)| (backend_id(vi, bi), b.address, b.port))
                .collect(),
        });
    }
    Ok(Adopted::new(
        generation,
        cfg.dataplane.flow_hash_key,
        inputs,
        Routes::from_config(cfg),
    ))
}

/// Hands one prebuilt generation to the worker, once.
pub struct OneShot(pub Option<Adopted<'static>>);

impl TableSource for OneShot {
    fn poll(&mut self, _current: Option<u64>) -> Option<Adopted<'static>> {
        self.0.take()
    }
}
