//! `border-perf pipeline`: the load-balancing pipeline in process, no NIC.
//!
//! Prebuilt frames for N flows are replayed through `Worker::poll_once`
//! over [`BenchPorts`], an in-memory port that hands out preallocated
//! buffers and takes them back on TX (zero allocations in the loop; a
//! counting global allocator checks it). It writes each frame from one
//! template and the few bytes that vary per flow, so that producing a
//! frame costs the same at any flow count, as a NIC's Rx does. The same
//! port and frames also run through a bare rx -> tx loop in the same run;
//! the pipeline's cost is reported on top of that loop and as a ratio to it.
//!
//! Cases:
//! - established flows (N = `--flows`, default 1k and 100k; 1M when asked for), client -> VIP
//!   for full-NAT IPv4, DNAT IPv4 and full-NAT IPv6, and backend -> client
//!   replies for full-NAT IPv4: every flow had its handshake first, then
//!   data segments are replayed round-robin over the flows in shuffled order;
//! - new flows: SYNs with fresh source ports, each creating an entry (the
//!   table is sized for them). The first sample fills a never-touched table
//!   (page faults included) and is reported on its own row; the others
//!   reuse a table whose previous flows expired (a running appliance's
//!   steady state);
//! - cookie SYN-ACKs: the same SYNs to a `syn_proxy = "always"` VIP, each
//!   answered with a SYN cookie (no entry); goal: at least twice
//!   the stateful new-flow rate of the same run.
//!
//! Goals (docs/performance.md): established <= 150 cycles/packet on top of the bare
//! loop, and at 100k and 1M flows at most 1.3x and 1.6x the cost at the
//! smallest count; >= 1 M new flows/s per core. Cycles are TSC ticks.
//!
//! A note gives the memory's latency: a pointer chase through 256 MiB
//! (`--memlat-mib`) of randomly linked cache lines, one chase (one random
//! access at a time) and 4 to 32 interleaved (the time per access when
//! that many misses overlap, as the worker's burst prefetching makes them).
//! An established packet of a table larger than the caches reads four
//! random lines (its index bucket, then the entry's three: keys and hot
//! record, the rest of the record, the TCP tracking), so that is its floor.
//!
//! Instruction counts, which a busy machine does not disturb:
//! `valgrind --tool=callgrind --toggle-collect='dataplane::worker::Worker*::poll_once'
//! border-perf pipeline --only "<case>" --samples 1 --packets N --flows 1000`
//! for N = 20000 and 60000; a sample replays 1.25 N packets and one pass
//! over the 1000 flows (a quarter and the pass to warm up), so the
//! difference over 50000 is per packet. The count includes the port's
//! write of each frame (template and per-flow windows): compare counts
//! only between builds with the same port.
//!
//! Files: `cases.rs` runs each case, through the appliance of `rig.rs`
//! over the port of `ports.rs`, with frames from `frames.rs` and flows
//! established by `flows.rs`; `measure.rs` times a replay, `table.rs`
//! writes the report, `memlat.rs` measures the memory's latency for it and
//! `hugepages.rs` reads whether the tables got transparent huge pages.
//! Allocations are counted by `crate::alloc_count`, installed as the global
//! allocator by `main.rs` (and by this crate's own tests).

mod cases;
mod flows;
mod frames;
mod hugepages;
mod measure;
mod memlat;
mod ports;
mod rig;
mod table;

use std::sync::atomic::{AtomicBool, Ordering};

use conf::Config;

use crate::clock;
use crate::report::Table;

pub(crate) use measure::thread_cpu_ns;
pub use ports::{BenchFrame, BenchPorts};

/// Options of the `pipeline` benchmark.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Established-flow counts, comma-separated (add 1000000 for the
    /// 1M-flow verdict: setting up a million flows takes about 10 s of CPU).
    #[arg(long, value_delimiter = ',', default_values_t = [1_000usize, 100_000])]
    pub flows: Vec<usize>,
    /// Packets per established-flow sample.
    #[arg(long, default_value_t = 2_000_000)]
    pub packets: u64,
    /// New flows (SYNs) per new-flow sample.
    #[arg(long, default_value_t = 200_000)]
    pub new_flows: usize,
    /// Samples per case (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub samples: usize,
    /// Backends behind each VIP.
    #[arg(long, default_value_t = 100)]
    pub backends: u32,
    /// Only run cases whose name contains this.
    #[arg(long)]
    pub only: Option<String>,
    /// MiB of memory the random-access latency probe chases pointers
    /// through (0: skip it).
    #[arg(long, default_value_t = 256)]
    pub memlat_mib: usize,
    /// TCP segments carry the timestamps option (NOP, NOP, TS) as Linux
    /// sends them; full-NAT then moves them onto the worker's clock.
    #[arg(long)]
    pub timestamps: bool,
    /// Meter every flow and write connection records (`[records]`) into a
    /// records region in the temporary directory.
    #[arg(long)]
    pub records: bool,
    /// Keep the process off transparent huge pages (`PR_SET_THP_DISABLE`),
    /// whatever its tables ask for: their cost on 4 KiB pages.
    #[arg(long)]
    pub no_huge_pages: bool,
}

/// `Args::timestamps` of this run (read by the frame builders).
static TIMESTAMPS: AtomicBool = AtomicBool::new(false);

/// `Args::records` of this run (read when a rig is built).
static RECORDS: AtomicBool = AtomicBool::new(false);

/// Runs the benchmark.
pub fn run(args: &Args) -> anyhow::Result<Table> {
    TIMESTAMPS.store(args.timestamps, Ordering::Relaxed);
    RECORDS.store(args.records, Ordering::Relaxed);
    anyhow::ensure!(
        crate::alloc_count::installed(),
        "the allocation counter is not this binary's global allocator (see perf::alloc_count)"
    );
    anyhow::ensure!(
        args.samples > 0 && args.packets > 0 && args.new_flows > 0,
        "nothing to measure"
    );
    anyhow::ensure!(
        (1..=1000).contains(&args.backends),
        "--backends must be 1..=1000"
    );
    if args.no_huge_pages {
        hugepages::disable().map_err(|e| anyhow::anyhow!("PR_SET_THP_DISABLE: {e}"))?;
    }
    let hz = clock::tsc_hz(std::time::Duration::from_millis(100))
        .ok_or_else(|| anyhow::anyhow!("no TSC on this architecture"))?;
    let cfg = Config::from_toml_str(&rig::config_text(args.backends), "bench.toml")
        .map_err(|e| anyhow::anyhow!("{e}"))?;

    let mut rows = cases::established_rows(args, &cfg, hz)?;
    rows.extend(cases::new_flow_rows(args, &cfg, hz)?);
    Ok(table::report(args, hz, &rows))
}

/// Whether `--only` selects the case called `name`.
fn wanted(args: &Args, name: &str) -> bool {
    args.only.as_deref().is_none_or(|o| name.contains(o))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[global_allocator]
    static GLOBAL: crate::alloc_count::CountingAlloc = crate::alloc_count::CountingAlloc;

    /// `run` sets process-wide options and the allocation count is the
    /// process's: one run at a time.
    static ONE_RUN: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn small_run_reports_every_case_without_drops() {
        let _one = ONE_RUN.lock().unwrap_or_else(|e| e.into_inner());
        let t = run(&Args {
            flows: vec![50],
            packets: 2000,
            new_flows: 300,
            samples: 2,
            backends: 4,
            only: None,
            timestamps: false,
            records: false,
            memlat_mib: 1,
            no_huge_pages: false,
        })
        .unwrap();
        // 7 established rows (4 VIPs, 3 with their replies), DNAT IPv6
        // and its replies, 6 DSR VIPs (no replies pass), full-NAT IPv4
        // again during walks, 2 rows per new-flow VIP (3, DNAT IPv6, the 6
        // DSR ones and the persistent one), the cookie SYN-ACKs.
        assert_eq!(t.rows.len(), 7 + 2 + 6 + 1 + 6 + 2 + 12 + 2 + 1);
        assert!(
            t.notes
                .iter()
                .any(|n| n.contains("walks of 50 entries completed")),
            "{:?}",
            t.notes
        );
        for r in &t.rows {
            assert_eq!(r[10], "0", "drops in {}", r[0]);
        }
    }

    #[test]
    fn with_records_every_case_runs_without_drops_or_allocations() {
        let _one = ONE_RUN.lock().unwrap_or_else(|e| e.into_inner());
        let t = run(&Args {
            flows: vec![50],
            packets: 2000,
            new_flows: 300,
            samples: 1,
            backends: 4,
            only: None,
            timestamps: false,
            records: true,
            memlat_mib: 1,
            no_huge_pages: false,
        })
        .unwrap();
        assert_eq!(t.rows.len(), 7 + 2 + 6 + 1 + 6 + 2 + 12 + 2 + 1);
        for r in &t.rows {
            assert_eq!(
                (r[9].as_str(), r[10].as_str()),
                ("0", "0"),
                "allocs, drops in {}",
                r[0]
            );
        }
    }
}
