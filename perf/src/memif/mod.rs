//! Packet rate between processes over `net_memif`: `border-perf gen` (the
//! generator) and `border-perf memif` (the runner that puts border-dp, then
//! `dpdk-testpmd`, between the generator's two ports and compares).

pub mod flows;
pub mod frames;
pub mod gen;
pub mod runner;
