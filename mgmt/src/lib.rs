//! border's management process as a library (docs/design.md §1, §3, §6,
//! §9): the config store with operator overrides, saved as durable intent
//! ([`intent`]), table generation building and publishing into the
//! shared-memory tables region (QSBR over the dataplane's workers), the
//! gRPC API `border.v1`, and the Prometheus exporter. `border-mgmt` is a
//! thin binary over [`server::run`].
//!
//! The manager, the dataplane watcher, the health checker and the exporter
//! speak mgmt's own types ([`model`]); protobuf appears only at the gRPC
//! services, converted in [`proto`].
//!
//! mgmt meets the dataplane only in `conf` (the shared-memory layouts); it
//! never links DPDK.
#![deny(unsafe_code)]

pub mod accept;
pub mod admin;
pub mod agent;
pub mod authz;
pub mod backoff;
pub mod bgp;
pub mod budget;
pub mod client;
pub mod conns;
pub mod dp;
pub mod edit;
pub mod findings;
pub mod health;
pub mod intent;
pub mod manager;
pub mod metrics;
pub mod model;
pub mod netns_findings;
pub mod peer;
pub mod process_metrics;
pub mod prom;
pub mod proto;
pub mod publisher;
pub mod records;
pub mod server;
pub mod service;
pub mod store;
pub mod tls;

/// The generated protobuf types and the tonic client/server of `border.v1`.
#[allow(missing_docs, clippy::all)]
pub mod pb {
    tonic::include_proto!("border.v1");
}

pub use manager::{ChangeOutcome, Manager, Options, Paths};

/// The largest gRPC message accepted or sent, each way.
pub const MAX_MESSAGE_BYTES: usize = 4 << 20;
