//! `border-perf adopt`: how long a new border-dp takes to adopt a
//! previous process's connection table of a million entries (the
//! connection-table part of `lb/adopt.rs`: every slot read as raw bytes,
//! checked, aged and re-inserted, the index rebuilt, and its records meter
//! copied to its new slot).
//!
//! The previous table is filled through a real flows region (a file in
//! `--dir`, /dev/shm by default), then opened as the next process would.

use std::path::PathBuf;
use std::time::Instant;

use ahash::RandomState;
use conf::os::files::Access;
use dataplane::conntrack::adopt::{layout_words, read_slot, slot_bytes, ADOPT_BATCH};
use dataplane::conntrack::{Conntrack, FlowKey, State, Timeouts};
use dataplane::flows_region::{FlowsRegion, PreviousRegion, Spec};
use dataplane::lb::{FlowMeter, FlowRec, METER_BYTES};

use crate::report::Table;

/// Options of the `adopt` benchmark.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Entries in the previous table (and its capacity).
    #[arg(long, default_value_t = 1 << 20)]
    pub entries: usize,
    /// Where the region file goes (removed afterwards).
    #[arg(long, default_value = "/dev/shm")]
    pub dir: PathBuf,
    /// Samples (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub samples: usize,
}

const TIMEOUTS: Timeouts = Timeouts {
    tcp_syn: 30,
    tcp_established: 900,
    tcp_closing: 10,
    udp: 300,
    local_port_cooldown: 60,
};

fn keys(i: usize) -> (FlowKey, FlowKey) {
    let c = (i as u32).to_be_bytes();
    (
        FlowKey::v4(
            [100, c[1], c[2], c[3]],
            [10, 140, 0, 100],
            1024 + (i % 50_000) as u16,
            80,
            6,
        ),
        FlowKey::v4(
            [10, 141, 0, 11],
            [10, 141, c[1], c[2]],
            8080,
            c[3] as u16 | 1024,
            6,
        ),
    )
}

pub fn run(a: &Args) -> anyhow::Result<Table> {
    let path = a
        .dir
        .join(format!("border-perf-adopt-{}", std::process::id()));
    let words = layout_words::<FlowRec>();
    let bytes = slot_bytes::<FlowRec>();
    let spec = Spec {
        worker: 0,
        workers: 1,
        capacity: a.entries,
        slot_bytes: bytes,
        words: &words,
        meter_bytes: METER_BYTES,
        generation: 1,
    };
    let region = FlowsRegion::create_spec(&path, &spec, Access::PRIVATE)?;
    let (slab, _meters) = region.into_parts::<_, FlowMeter>();
    let mut old = Conntrack::<FlowRec>::on_slab(slab, TIMEOUTS, RandomState::new());
    let fill = Instant::now();
    for i in 0..a.entries {
        let (o, r) = keys(i);
        old.insert(
            o,
            r,
            FlowRec::default(),
            State::Established,
            1_000,
            |_, _| {},
        )
        .map_err(|e| anyhow::anyhow!("fill {i}: {e}"))?;
    }
    let fill_ms = fill.elapsed().as_secs_f64() * 1e3;
    drop(old);
    let prev = PreviousRegion::open(&path, Access::PRIVATE, bytes, &words)
        .map_err(anyhow::Error::msg)?
        .ok_or_else(|| anyhow::anyhow!("region vanished"))?;
    let _ = std::fs::remove_file(&path);
    let mut times = Vec::new();
    let mut cpu = Vec::new();
    let mut adopted = 0;
    for _ in 0..a.samples.max(1) {
        let mut new = Conntrack::<FlowRec>::new(a.entries, TIMEOUTS);
        let mut meters = vec![[0u8; METER_BYTES]; a.entries];
        let t = Instant::now();
        let c = crate::pipeline::thread_cpu_ns();
        adopted = 0;
        // As `lb/adopt.rs`: batches whose index buckets are prefetched.
        let mut batch = Vec::with_capacity(ADOPT_BATCH);
        for chunk in (0..prev.slots()).collect::<Vec<_>>().chunks(ADOPT_BATCH) {
            batch.clear();
            for &i in chunk {
                if let Ok(Some(e)) = read_slot::<FlowRec>(prev.slot(i), 0, 2_000) {
                    new.prefetch_for_adopt(&e);
                    batch.push((e, i));
                }
            }
            for (e, i) in batch.drain(..) {
                if let Ok(id) = new.adopt_entry(e, 2_000) {
                    adopted += 1;
                    if let (Some(m), Some(to)) = (
                        prev.meter(i, METER_BYTES),
                        meters.get_mut(id.index() as usize),
                    ) {
                        to.copy_from_slice(m);
                    }
                }
            }
        }
        cpu.push((crate::pipeline::thread_cpu_ns() - c) as f64 / 1e6);
        times.push(t.elapsed().as_secs_f64() * 1e3);
        std::hint::black_box(&meters);
    }
    times.sort_by(f64::total_cmp);
    cpu.sort_by(f64::total_cmp);
    let mut table = Table::new(
        "adoption of a previous connection table (read, check, age, re-insert)",
        &[
            "entries",
            "adopted",
            "on-CPU ms",
            "wall ms",
            "on-CPU ns/entry",
            "fill ms",
        ],
    );
    let (ms, cpu_ms) = (times[times.len() / 2], cpu[cpu.len() / 2]);
    table.row(vec![
        a.entries.to_string(),
        adopted.to_string(),
        format!("{cpu_ms:.1}"),
        format!("{ms:.1}"),
        format!("{:.0}", cpu_ms * 1e6 / a.entries.max(1) as f64),
        format!("{fill_ms:.0}"),
    ]);
    table.note("medians; on-CPU: the thread's CPU time (the box is shared); goal: 1 Mi entries in <= 200 ms");
    Ok(table)
}
