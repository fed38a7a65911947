//! `border-perf maglev`: Maglev ring build time.
//!
//! Builds rings of size `--m` over `--backends` backends, `--runs` times per
//! scenario after `--warmup` untimed builds, and reports min / median / p90 /
//! max. Goal (paper: 1.8 ms on 2016 hardware): M = 65537, 1000 backends in
//! under 2 ms.

use crate::clock;
use crate::report::Table;
use crate::stats::Summary;
use conf::maglev::{
    build, build_into, is_prime, BackendId, MaglevBackend, MaglevScratch, DEFAULT_M,
};

/// Options of the `maglev` benchmark.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Ring size (must be prime).
    #[arg(long, default_value_t = DEFAULT_M)]
    pub m: u32,
    /// Number of backends.
    #[arg(long, default_value_t = 1000)]
    pub backends: u32,
    /// Timed builds per scenario.
    #[arg(long, default_value_t = 50)]
    pub runs: usize,
    /// Untimed builds per scenario before timing.
    #[arg(long, default_value_t = 3)]
    pub warmup: usize,
}

/// Backend `i`: 10.x.y.z:8080 with distinct addresses.
fn backend(i: u32, weight: u32) -> MaglevBackend {
    let [_, b, c, d] = (i + 1).to_be_bytes();
    MaglevBackend {
        id: BackendId::v4([10, b, c, d], 8080),
        weight,
    }
}

/// The weight sets the benchmark builds.
fn scenarios(n: u32) -> Vec<(&'static str, Vec<MaglevBackend>)> {
    vec![
        ("equal weights", (0..n).map(|i| backend(i, 1)).collect()),
        (
            "weights 1..=100",
            // Fixed pseudo-random weights (Knuth multiplicative hash).
            (0..n)
                .map(|i| backend(i, 1 + i.wrapping_mul(2_654_435_761) % 100))
                .collect(),
        ),
        (
            // Many distinct quotas next to a dominant backend (the heap path).
            "distinct 1..N-1 + one 2/3",
            (0..n)
                .map(|i| {
                    let w = if i + 1 == n { n * (n - 1) } else { i + 1 };
                    backend(i, w)
                })
                .collect(),
        ),
        (
            "skewed: one x1000",
            (0..n)
                .map(|i| backend(i, if i == 0 { 1000 } else { 1 }))
                .collect(),
        ),
    ]
}

/// Runs the benchmark.
pub fn run(args: &Args) -> anyhow::Result<Table> {
    anyhow::ensure!(is_prime(args.m), "--m {} is not a prime", args.m);
    anyhow::ensure!(
        args.backends > 0 && args.runs > 0,
        "--backends and --runs must be above 0"
    );
    let mut t = Table::new(
        format!(
            "maglev build: M = {}, {} backends, {} runs (+{} warmup)",
            args.m, args.backends, args.runs, args.warmup
        ),
        &[
            "scenario",
            "min ms",
            "median ms",
            "p90 ms",
            "max ms",
            "median Mticks",
        ],
    );
    let mut table = Vec::new();
    let mut scratch = MaglevScratch::new();
    for (name, backends) in scenarios(args.backends) {
        // Reused memory: what mgmt does on every rebuild.
        let mut ms = Vec::with_capacity(args.runs);
        let mut ticks = Vec::with_capacity(args.runs);
        for i in 0..args.warmup + args.runs {
            let (r, dt, tk) = clock::measure(|| {
                build_into(
                    &mut table,
                    &mut scratch,
                    std::hint::black_box(&backends),
                    args.m,
                )
            });
            r?;
            std::hint::black_box(&table);
            if i >= args.warmup {
                ms.push(dt.as_secs_f64() * 1e3);
                ticks.push(tk as f64 / 1e6);
            }
        }
        push_row(&mut t, &format!("{name}, build_into"), &ms, &ticks);
        if name == "equal weights" {
            // First build into fresh memory (allocation and page faults).
            let mut ms = Vec::with_capacity(args.runs);
            let mut ticks = Vec::with_capacity(args.runs);
            for i in 0..args.warmup + args.runs {
                let (r, dt, tk) = clock::measure(|| build(std::hint::black_box(&backends), args.m));
                std::hint::black_box(r?);
                if i >= args.warmup {
                    ms.push(dt.as_secs_f64() * 1e3);
                    ticks.push(tk as f64 / 1e6);
                }
            }
            push_row(&mut t, &format!("{name}, build (fresh)"), &ms, &ticks);
        }
    }
    t.note("build_into reuses table + scratch (mgmt's rebuild path); build allocates both.");
    t.note("Mticks = millions of TSC ticks (constant-rate reference cycles).");
    Ok(t)
}

fn push_row(t: &mut Table, name: &str, ms: &[f64], ticks: &[f64]) {
    let (Some(s), tk) = (Summary::of(ms), Summary::of(ticks)) else {
        return;
    };
    let tk = tk.map_or("-".to_string(), |x| format!("{:.2}", x.median));
    t.row(vec![
        name.to_string(),
        format!("{:.3}", s.min),
        format!("{:.3}", s.median),
        format!("{:.3}", s.p90),
        format!("{:.3}", s.max),
        tk,
    ]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_run_reports_every_scenario() {
        let args = Args {
            m: 251,
            backends: 10,
            runs: 2,
            warmup: 1,
        };
        let t = run(&args).unwrap();
        assert_eq!(t.rows.len(), 5);
        assert!(run(&Args {
            m: 250,
            ..args.clone()
        })
        .is_err());
        assert!(run(&Args { runs: 0, ..args }).is_err());
    }
}
