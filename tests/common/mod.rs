//! Shared harness of the end-to-end tests: network namespaces, a border-dp
//! process started inside one, and helpers to run real tools in the others.
//!
//! Every test builds its own namespaces (`<tag>-lb` runs border-dp and holds
//! the kernel twins, `<tag>-cli` and `<tag>-bk` receive the data ports'
//! TAP interfaces), so tests never touch the host's network and never see
//! each other's interfaces. Everything is torn down on drop.
//!
//! Each e2e test file is its own crate that includes this module with
//! `mod common;` and uses a part of it; what one test leaves unused would
//! be dead code in that crate, hence the allowance below. (A single e2e
//! binary, or a harness crate of its own, would not need it: see "Tests"
//! in docs/architecture.md.)
#![allow(dead_code)]

/// border-dp between a client and a backend namespace, with real servers
/// in the backend one (the PROXY protocol tests).
pub mod client_backend;
/// A fleet on 127.0.0.1: a CA, Redis, border-gw processes, appliances.
pub mod fleet;
/// border-mgmt's metrics endpoint: a free port, a scrape.
pub mod metrics;
/// A real IPFIX collector (nfcapd) and its flows read back (nfdump).
pub mod nfcapd;
/// PromQL: the metric names of an expression, the dashboard's queries.
pub mod promql;
/// A small tmpfs to fill up or make read-only.
pub mod small_fs;

/// The configs tests start from and their subnets' addresses.
mod config;
/// border-dp, border-mgmt and borderctl as the tests run them.
mod daemons;
/// Echo streams through a VIP, watched across restarts.
pub mod echo_lines;
/// Namespaces, commands and processes in them, how data ports reach them.
mod netns;
/// Classic pcap files read and written.
mod pcap;
/// scapy programs run in a namespace.
mod scapy;
/// Real traffic: backends, clients, byte-checked streams.
mod traffic;

// The harness's names, flat as the tests import them (`use common::{Netns,
// BorderDp}`). A test that takes nothing from one part leaves that part's
// re-export unused, hence the allowance on each.
#[allow(unused_imports)]
pub use config::*;
#[allow(unused_imports)]
pub use daemons::*;
#[allow(unused_imports)]
pub use netns::*;
#[allow(unused_imports)]
pub use pcap::*;
#[allow(unused_imports)]
pub use scapy::*;
#[allow(unused_imports)]
pub use traffic::*;
