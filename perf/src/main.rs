//! `border-perf`: border's benchmarks, one subcommand each.
//!
//! ```text
//! cargo run -p perf --release --bin border-perf -- maglev
//! cargo run -p perf --release --bin border-perf -- flowhash
//! cargo run -p perf --release --bin border-perf -- pipeline
//! cargo run -p perf --release --bin border-perf -- adopt
//! cargo run -p perf --release --bin border-perf -- wake --dp target/release/border-dp
//! cargo run -p perf --release --bin border-perf -- memif   # needs border-dp built, root
//! cargo run -p perf --release --bin border-perf -- all
//! ```

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use std::time::Duration;

/// Counts allocations per thread for `pipeline`'s zero-allocation check
/// (its `allocs` column). It covers every subcommand; the others pay one
/// thread-local increment per allocation, which none of them can measure.
#[global_allocator]
static GLOBAL: perf::alloc_count::CountingAlloc = perf::alloc_count::CountingAlloc;

#[derive(Debug, Parser)]
#[command(name = "border-perf", version, about = "border benchmarks")]
struct Cli {
    #[command(subcommand)]
    cmd: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Maglev ring build time (M = 65537, 1000 backends by default).
    Maglev(perf::maglev::Args),
    /// Stable flow hash cost per hash (ns and TSC ticks).
    Flowhash(perf::flowhash::Args),
    /// Load-balancing pipeline cycles per packet (established and new flows) vs a bare rx->tx loop.
    Pipeline(perf::pipeline::Args),
    /// Tables region: publish time of a one-backend change, 512 VIPs vs 1.
    Tables(perf::tables::Args),
    /// Apply latency: SetBackend/ApplyConfig call -> every worker on the new generation, 1 VIP vs 512.
    Apply(perf::apply::Args),
    /// First packet after idling: ping round trip through a real border-dp, adaptive vs busy poll.
    Wake(perf::wake::Args),
    /// Traffic generator with two memif ports (server side): TCP flows toward VIPs and a responder as every backend.
    Gen(perf::memif::gen::Args),
    /// memif packet rate: the generator through border-dp, then through dpdk-testpmd (io), with ratios.
    Memif(perf::memif::runner::Args),
    /// Adoption of a previous process's connection table (1 Mi entries by default).
    Adopt(perf::adopt::Args),
    /// Every benchmark with its default options.
    All,
}

fn defaults(sub: &str) -> Command {
    Cli::parse_from(["border-perf", sub]).cmd
}

fn run(cmd: &Command) -> anyhow::Result<()> {
    let table = match cmd {
        Command::Maglev(a) => perf::maglev::run(a)?,
        Command::Flowhash(a) => perf::flowhash::run(a)?,
        Command::Pipeline(a) => perf::pipeline::run(a)?,
        Command::Tables(a) => perf::tables::run(a)?,
        Command::Adopt(a) => perf::adopt::run(a)?,
        Command::Apply(a) => perf::apply::run(a)?,
        Command::Wake(a) => perf::wake::run(a)?,
        Command::Gen(a) => {
            perf::memif::gen::run(a)?;
            return Ok(());
        }
        Command::Memif(a) => perf::memif::runner::run(a)?,
        Command::All => {
            for sub in ["maglev", "flowhash"] {
                run(&defaults(sub))?;
            }
            return Ok(());
        }
    };
    println!("{table}");
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cfg!(debug_assertions) {
        eprintln!("warning: debug build; numbers are not meaningful (use --release)");
    }
    match perf::clock::tsc_hz(Duration::from_millis(100)) {
        Some(hz) => println!("TSC rate: {:.3} GHz\n", hz / 1e9),
        None => println!("no TSC on this architecture; tick columns are 0\n"),
    }
    match run(&cli.cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("border-perf: {e:#}");
            ExitCode::FAILURE
        }
    }
}
