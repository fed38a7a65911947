//! `border-perf flowhash`: cost of the stable flow hash (SipHash-2-4).
//!
//! Throughput rows hash independent flows back to back (what a burst of new
//! flows costs per flow); latency rows feed each hash into the next input,
//! so they measure one hash's dependency chain.

use crate::clock;
use crate::report::Table;
use crate::stats::Summary;
use conf::flowhash::FlowHasher;
use std::hint::black_box;

/// Options of the `flowhash` benchmark.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Hashes per sample.
    #[arg(long, default_value_t = 5_000_000)]
    pub hashes: u64,
    /// Samples per case (the median is reported).
    #[arg(long, default_value_t = 7)]
    pub samples: usize,
}

const FLOWS: usize = 4096;

#[derive(Clone, Copy)]
struct Flow4 {
    src: [u8; 4],
    dst: [u8; 4],
    sport: u16,
    dport: u16,
    proto: u8,
}

#[derive(Clone, Copy)]
struct Flow6 {
    src: [u8; 16],
    dst: [u8; 16],
    sport: u16,
    dport: u16,
    proto: u8,
}

fn flows() -> (Vec<Flow4>, Vec<Flow6>) {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut v4 = Vec::with_capacity(FLOWS);
    let mut v6 = Vec::with_capacity(FLOWS);
    for _ in 0..FLOWS {
        let (a, b, c) = (next(), next(), next());
        v4.push(Flow4 {
            src: (a as u32).to_be_bytes(),
            dst: ((a >> 32) as u32).to_be_bytes(),
            sport: b as u16,
            dport: (b >> 16) as u16,
            proto: if b >> 63 == 0 { 6 } else { 17 },
        });
        let mut src = [0u8; 16];
        let mut dst = [0u8; 16];
        src[..8].copy_from_slice(&a.to_le_bytes());
        src[8..].copy_from_slice(&b.to_le_bytes());
        dst[..8].copy_from_slice(&c.to_le_bytes());
        dst[8..].copy_from_slice(&next().to_le_bytes());
        v6.push(Flow6 {
            src,
            dst,
            sport: c as u16,
            dport: (c >> 16) as u16,
            proto: 6,
        });
    }
    (v4, v6)
}

/// Runs `body(n)` (which must do n hashes) `samples` times; per-hash ns and
/// ticks of each sample.
fn sample(args: &Args, mut body: impl FnMut(u64) -> u64) -> (Vec<f64>, Vec<f64>) {
    let _ = black_box(body(args.hashes / 10 + 1)); // warm up
    let (mut ns, mut ticks) = (Vec::new(), Vec::new());
    for _ in 0..args.samples {
        let (acc, dt, tk) = clock::measure(|| body(args.hashes));
        black_box(acc);
        ns.push(dt.as_secs_f64() * 1e9 / args.hashes as f64);
        ticks.push(tk as f64 / args.hashes as f64);
    }
    (ns, ticks)
}

/// Runs the benchmark.
pub fn run(args: &Args) -> anyhow::Result<Table> {
    anyhow::ensure!(args.hashes > 0 && args.samples > 0, "nothing to measure");
    let h = FlowHasher::new(*b"border-flow-key!");
    let (v4, v6) = flows();
    let (v4, v6) = (black_box(v4), black_box(v6));
    let mask = FLOWS - 1;
    let mut t = Table::new(
        format!(
            "flow hash (SipHash-2-4): {} hashes x {} samples, median",
            args.hashes, args.samples
        ),
        &["case", "ns/hash", "ticks/hash", "min ns/hash"],
    );
    let mut add = |name: &str, (ns, tk): (Vec<f64>, Vec<f64>)| {
        if let (Some(n), Some(k)) = (Summary::of(&ns), Summary::of(&tk)) {
            t.row(vec![
                name.to_string(),
                format!("{:.2}", n.median),
                format!("{:.1}", k.median),
                format!("{:.2}", n.min),
            ]);
        }
    };

    add(
        "hash_v4 (13 B), throughput",
        sample(args, |n| {
            let mut acc = 0u64;
            for i in 0..n as usize {
                let f = &v4[i & mask];
                acc ^= h.hash_v4(f.src, f.dst, f.sport, f.dport, f.proto);
            }
            acc
        }),
    );
    add(
        "hash_v4 (13 B), latency",
        sample(args, |n| {
            let mut acc = 0u64;
            for i in 0..n as usize {
                let f = &v4[i & mask];
                acc = h.hash_v4(f.src, f.dst, f.sport ^ acc as u16, f.dport, f.proto);
            }
            acc
        }),
    );
    add(
        "hash_v6 (37 B), throughput",
        sample(args, |n| {
            let mut acc = 0u64;
            for i in 0..n as usize {
                let f = &v6[i & mask];
                acc ^= h.hash_v6(f.src, f.dst, f.sport, f.dport, f.proto);
            }
            acc
        }),
    );
    add(
        "hash_v6 (37 B), latency",
        sample(args, |n| {
            let mut acc = 0u64;
            for i in 0..n as usize {
                let f = &v6[i & mask];
                acc = h.hash_v6(f.src, f.dst, f.sport ^ acc as u16, f.dport, f.proto);
            }
            acc
        }),
    );
    let enc: Vec<[u8; 13]> = v4
        .iter()
        .map(|f| conf::flowhash::encode_v4(f.src, f.dst, f.sport, f.dport, f.proto))
        .collect();
    let enc = black_box(enc);
    add(
        "hash_bytes(13 B slice), throughput",
        sample(args, |n| {
            let mut acc = 0u64;
            for i in 0..n as usize {
                acc ^= h.hash_bytes(black_box(&enc[i & mask][..]));
            }
            acc
        }),
    );
    t.note("ticks = TSC ticks (constant-rate reference cycles), see the TSC rate above.");
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_run_reports_every_case() {
        let t = run(&Args {
            hashes: 1000,
            samples: 2,
        })
        .unwrap();
        assert_eq!(t.rows.len(), 5);
        assert!(run(&Args {
            hashes: 0,
            samples: 1
        })
        .is_err());
    }
}
