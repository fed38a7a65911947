//! border benchmark harness.
//!
//! The `border-perf` binary has one subcommand per benchmark; each benchmark
//! is a module here with a `clap::Args` struct and a `run` function that
//! returns a [`report::Table`]. To add one: write the module, add a variant
//! to `Command` in `main.rs`, done. Benchmarks run on stable Rust (no
//! `#[bench]`); build them with `--release`.

pub mod adopt;
pub mod alloc_count;
pub mod apply;
pub mod clock;
pub mod flowhash;
pub mod maglev;
pub mod memif;
pub mod pipeline;
pub mod report;
pub mod stats;
pub mod tables;
pub mod wake;
