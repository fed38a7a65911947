//! placeholder
pub mod counters;
pub mod state;
