//! border-gw: the gateway that appliances in agent mode (`[mgmt.agent]`)
//! dial out to, and that routes control-plane calls to them over those
//! tunnels (docs/fleet.md).
//!
//! [`agents`] accepts tunnels, [`tunnels`] holds them per appliance,
//! [`api`] accepts calls and [`forward`] routes each one: to a local
//! tunnel, or through the gateway that holds one ([`peers`]), found in the
//! Redis [`registry`]. [`drain`] closes tunnels cleanly on the way out.
//! [`metrics`] exports what [`stats`], the tunnels and the registry count.
//! [`proxied`] reads an optional PROXY v2 header on both listeners.
#![deny(unsafe_code)]

pub mod admission;
pub mod agents;
pub mod api;
pub mod audit;
pub mod config;
pub mod dial;
pub mod drain;
pub mod forward;
pub mod grpc;
pub mod limits;
pub mod metrics;
pub mod peers;
pub mod proxied;
pub mod redis_conn;
pub mod registry;
pub mod run;
pub mod stats;
pub mod tls;
pub mod tunnels;

/// The metadata naming the target appliance of a call.
pub const APPLIANCE_HEADER: &str = "border-appliance";
/// Set on a call one gateway forwards to another: it is not forwarded again.
pub const HOP_HEADER: &str = "border-gw-hop";
/// The probe a gateway sends to the gateways the registry names: OK when
/// the answering gateway holds a tunnel of the appliance.
pub const HAS_TUNNEL_PATH: &str = "/border.gw.v1.Gateway/HasTunnel";
