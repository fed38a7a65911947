//! Fixtures the dataplane's integration tests share. A test file includes
//! them with `mod support;`; files under `tests/support/` are no test
//! targets of their own.
//!
//! Each test file is a crate of its own and uses part of these fixtures;
//! what one leaves unused would be dead code there, hence the allowance.
#![allow(dead_code)]

/// A counting global allocator for the no-allocation tests (installed by
/// the test binary that counts, not here).
pub mod counting_alloc;
/// The load-balancer rig: an appliance from a config, workers over
/// in-memory ports, frames built and decoded with etherparse.
pub mod lb;
