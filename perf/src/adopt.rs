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
    let (pins, kept, pin_cpu, pin_ms, pin_fill) = pins(a)?;
    table.row(vec![
        format!("{pins} pins"),
        kept.to_string(),
        format!("{pin_cpu:.1}"),
        format!("{pin_ms:.1}"),
        format!("{:.0}", pin_cpu * 1e6 / pins.max(1) as f64),
        format!("{pin_fill:.0}"),
    ]);
    table.note("medians; on-CPU: the thread's CPU time (the box is shared); goal: 1 Mi entries in <= 200 ms");
    table.note("pins: the persistence pins of a worker with that connection table (a quarter as many, three quarters used), read from a carry region and re-inserted as `lb/adopt.rs` does, after the entries");
    Ok(table)
}

/// The pins part: a carry region's pin table three quarters full, read
/// and re-inserted into a new table. (pins, adopted, on-CPU ms, wall ms,
/// fill ms).
fn pins(a: &Args) -> anyhow::Result<(usize, usize, f64, f64, f64)> {
    use dataplane::carry_region::{CarryRegion, PreviousCarryRegion};
    use dataplane::persist::{entries_for, read_pin, Persist, PinTarget};
    let path = a
        .dir
        .join(format!("border-perf-adopt-carry-{}", std::process::id()));
    let entries = entries_for(a.entries);
    let region = CarryRegion::create(&path, (0, 1), entries, 1, Access::PRIVATE)?;
    let parts = region
        .into_parts()
        .ok_or_else(|| anyhow::anyhow!("carry region not mapped"))?;
    let mut old = Persist::new(entries);
    old.use_region(parts.pins, parts.names);
    old.prepare();
    old.name_vip(3, 0xfeed);
    let fill = Instant::now();
    let client = |i: usize| {
        let mut c = [0u8; 16];
        c[10] = 0xff;
        c[11] = 0xff;
        c[12..].copy_from_slice(&(0x6400_0000u32 + i as u32).to_be_bytes());
        c
    };
    let to = |i: usize| PinTarget {
        backend_id: (i % 8) as u32,
        backend_slot: (i % 8) as u32,
        index: (i % 8) as u32,
    };
    for i in 0..entries * 3 / 4 {
        old.record(3, &client(i), to(i), 1_000, 300_000);
    }
    let fill_ms = fill.elapsed().as_secs_f64() * 1e3;
    drop(old);
    let prev = PreviousCarryRegion::open(&path, Access::PRIVATE)
        .map_err(anyhow::Error::msg)?
        .ok_or_else(|| anyhow::anyhow!("carry region vanished"))?;
    let _ = std::fs::remove_file(&path);
    let (mut times, mut cpu, mut kept) = (Vec::new(), Vec::new(), 0);
    for _ in 0..a.samples.max(1) {
        let mut new = Persist::new(entries);
        new.prepare();
        let t = Instant::now();
        let c = crate::pipeline::thread_cpu_ns();
        kept = 0;
        for raw in prev.pins() {
            let Some(p) = read_pin(raw) else { continue };
            if prev.vip_name(p.vip) != 0xfeed {
                continue;
            }
            let target = PinTarget {
                backend_id: p.backend_id,
                backend_slot: p.backend_id,
                index: p.hint,
            };
            if new.adopt(7, &p.client, target, (p.deadline, p.timeout_ms), 2_000)
                == dataplane::persist::Adopted::Inserted
            {
                kept += 1;
            }
        }
        cpu.push((crate::pipeline::thread_cpu_ns() - c) as f64 / 1e6);
        times.push(t.elapsed().as_secs_f64() * 1e3);
        std::hint::black_box(&new);
    }
    times.sort_by(f64::total_cmp);
    cpu.sort_by(f64::total_cmp);
    Ok((
        entries,
        kept,
        cpu[cpu.len() / 2],
        times[times.len() / 2],
        fill_ms,
    ))
}
