//! The border dataplane: a sans-IO packet pipeline and the poll-mode worker
//! loop that drives it over DPDK ports.
//!
//! Packet logic ([`wire`], [`slowpath`], [`pipeline`]) is pure Rust over
//! bytes and tables; DPDK is reached only through [`io_dpdk`], [`run`] and
//! `telemetry` (its commands on DPDK's telemetry socket) and `capture`
//! (DPDK's packet-capture server).

pub(crate) mod capture;
pub mod carry_region;
pub mod conntrack;
pub mod counters;
pub(crate) mod doorbell;
pub mod encap;
pub mod fault;
pub mod flows_region;
pub(crate) mod host;
pub mod io;
pub(crate) mod io_dpdk;
pub mod lb;
pub(crate) mod local_ports;
pub mod nat;
pub mod neigh;
pub(crate) mod neigh_queue;
pub mod persist;
pub mod pipeline;
pub(crate) mod plan;
pub mod port;
pub(crate) mod port_stats;
pub mod ppv2;
pub mod region_names;
pub(crate) mod reset;
pub mod routes;
pub mod run;
pub mod slowpath;
pub mod standalone;
pub mod synproxy;
pub mod tables_source;
pub(crate) mod telemetry;
pub(crate) mod token_bucket;
pub mod too_big;
pub(crate) mod tstamp;
pub mod verdict;
pub mod wire;
pub mod worker;
