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
use dataplane::conntrack::adopt::{
    check_slot, layout_words, prefetch_slot, slot_bytes, AdoptHashes, Ahead, Moved, ADOPT_AHEAD,
};
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
    /// Maps the previous region anew for each sample, so that the faults
    /// that map its pages are inside the time, as in border-dp (which
    /// adopts from a region once); without it the region is mapped once
    /// and only the first sample takes them.
    #[arg(long)]
    pub remap: bool,
    /// Entries checked ahead of the one inserted (4, 8, 16, 32 or 64;
    /// border-dp's, the default, is 8).
    #[arg(long, default_value_t = ADOPT_AHEAD)]
    pub ahead: usize,
    /// Leaves out the prefetches of the previous slots and the new slab's
    /// (the index buckets' stay).
    #[arg(long)]
    pub no_slot_prefetch: bool,
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
    let open = || -> anyhow::Result<PreviousRegion> {
        PreviousRegion::open(&path, Access::PRIVATE, bytes, &words)
            .map_err(anyhow::Error::msg)?
            .ok_or_else(|| anyhow::anyhow!("region vanished"))
    };
    let mut prev = open()?;
    let new_path = a
        .dir
        .join(format!("border-perf-adopt-new-{}", std::process::id()));
    let (mut region_runs, mut heap_runs) = (Vec::new(), Vec::new());
    let (mut adopted, mut table_bytes) = (0, 0);
    for _ in 0..a.samples.max(1) {
        if a.remap {
            prev = open()?;
        }
        // As border-dp: the new table and its meters in a flows region
        // made (allocated, zero-filled) before the adoption starts.
        let (t, c) = (Instant::now(), crate::pipeline::thread_cpu_ns());
        let region = FlowsRegion::create_spec(&new_path, &spec, Access::PRIVATE)?;
        let _ = std::fs::remove_file(&new_path);
        let (slab, meters) = region.into_parts::<_, FlowMeter>();
        let mut meters = meters.ok_or_else(|| anyhow::anyhow!("new region has no meters"))?;
        let mut new = Conntrack::<FlowRec>::on_slab(slab, TIMEOUTS, RandomState::new());
        let made = (
            (crate::pipeline::thread_cpu_ns() - c) as f64 / 1e6,
            t.elapsed().as_secs_f64() * 1e3,
        );
        let (cpu_ms, ms, n) = timed(|| adopt_all(a, &prev, &mut new, &mut meters));
        region_runs.push((cpu_ms, ms, made));
        adopted = n;
        drop((new, meters));
        // Private memory, zero-filled at its first touch, inside the time.
        let mut new = Conntrack::<FlowRec>::new(a.entries, TIMEOUTS);
        table_bytes = new.memory_bytes();
        let mut meters = vec![FlowMeter::default(); a.entries];
        if a.remap {
            prev = open()?;
        }
        let (cpu_ms, ms, _) = timed(|| adopt_all(a, &prev, &mut new, &mut meters));
        heap_runs.push((cpu_ms, ms));
    }
    let _ = std::fs::remove_file(&path);
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
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
    let per = |cpu_ms: f64| format!("{:.0}", cpu_ms * 1e6 / a.entries.max(1) as f64);
    let cpu_ms = median(region_runs.iter().map(|r| r.0).collect());
    table.row(vec![
        a.entries.to_string(),
        adopted.to_string(),
        format!("{cpu_ms:.1}"),
        format!("{:.1}", median(region_runs.iter().map(|r| r.1).collect())),
        per(cpu_ms),
        format!("{fill_ms:.0}"),
    ]);
    let made_cpu = median(region_runs.iter().map(|r| r.2 .0).collect());
    table.row(vec![
        "(region made)".into(),
        String::new(),
        format!("{made_cpu:.1}"),
        format!(
            "{:.1}",
            median(region_runs.iter().map(|r| r.2 .1).collect())
        ),
        per(made_cpu),
        String::new(),
    ]);
    let heap_cpu = median(heap_runs.iter().map(|r| r.0).collect());
    table.row(vec![
        format!("{} on heap", a.entries),
        adopted.to_string(),
        format!("{heap_cpu:.1}"),
        format!("{:.1}", median(heap_runs.iter().map(|r| r.1).collect())),
        per(heap_cpu),
        String::new(),
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
    table.note("first row: into a new table and meters in a flows region, as border-dp (made before, at its start: the `region made` row); `on heap`: into private memory, whose pages the kernel zero-fills at their first touch, inside the time");
    table.note(format!(
        "memory of the table: {:.0} MiB (slab, sweep hints, index, half-open ring), its meters {:.0} MiB",
        table_bytes as f64 / (1 << 20) as f64,
        (a.entries * METER_BYTES) as f64 / (1 << 20) as f64
    ));
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
    old.use_region(parts.pins, parts.names, parts.pin_key);
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
        // As a worker of the same table does: the previous key, so each
        // pin goes back to its bucket.
        if let Some(key) = prev.pin_key {
            new.take_key(key);
        }
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
            if new.adopt(3, &p.client, target, (p.deadline, p.timeout_ms), 2_000)
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

/// Runs `f`, returning (on-CPU ms, wall ms, its result).
fn timed<R>(f: impl FnOnce() -> R) -> (f64, f64, R) {
    let (t, c) = (Instant::now(), crate::pipeline::thread_cpu_ns());
    let r = f();
    (
        (crate::pipeline::thread_cpu_ns() - c) as f64 / 1e6,
        t.elapsed().as_secs_f64() * 1e3,
        r,
    )
}

/// The connection-table part of `lb/adopt.rs` ([`adopt_window`] with
/// `--ahead` entries between an entry's check and its insert).
fn adopt_all(
    a: &Args,
    prev: &PreviousRegion,
    new: &mut Conntrack<FlowRec>,
    meters: &mut [FlowMeter],
) -> usize {
    match a.ahead {
        4 => adopt_window::<4>(a, prev, new, meters),
        16 => adopt_window::<16>(a, prev, new, meters),
        32 => adopt_window::<32>(a, prev, new, meters),
        64 => adopt_window::<64>(a, prev, new, meters),
        _ => adopt_window::<ADOPT_AHEAD>(a, prev, new, meters),
    }
}

/// As `lb/adopt.rs`: each slot checked where it lies, its index buckets
/// prefetched, and the entry checked `N` before it copied out and
/// re-inserted, its meter copied to its new slot. Returns the entries
/// adopted.
fn adopt_window<const N: usize>(
    a: &Args,
    prev: &PreviousRegion,
    new: &mut Conntrack<FlowRec>,
    meters: &mut [FlowMeter],
) -> usize {
    let mut adopted = 0;
    let mut ahead = Ahead::<(usize, Moved, AdoptHashes), N>::default();
    let mut at = 0;
    loop {
        let (slot, c, h) = if at < prev.slots() {
            if !a.no_slot_prefetch {
                prefetch_slot(prev.slot(at + N / 2));
            }
            at += 1;
            let Ok(Some(c)) = check_slot::<FlowRec>(prev.slot(at - 1), 0, 2_000) else {
                continue;
            };
            let h = new.prefetch_keys(&c.keys);
            match ahead.push((at - 1, c.moved, h)) {
                Some(due) => due,
                None => continue,
            }
        } else {
            match ahead.pop() {
                Some(due) => due,
                None => break,
            }
        };
        let mut e = c.entry::<FlowRec>(prev.slot(slot));
        if !a.no_slot_prefetch {
            new.prefetch_slot_ahead(N / 2);
        }
        if let Ok(id) = new.adopt_hashed(&mut e, h, 2_000) {
            adopted += 1;
            if let (Some(m), Some(to)) = (
                prev.meter(slot, METER_BYTES).and_then(FlowMeter::from_raw),
                meters.get_mut(id.index() as usize),
            ) {
                *to = m;
            }
        }
    }
    adopted
}
