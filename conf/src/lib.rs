//! placeholder
pub mod counters;
pub mod flowhash;
pub mod maglev;
pub mod state;
