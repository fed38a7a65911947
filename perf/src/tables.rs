//! `border-perf tables`: cost of publishing a one-backend change through the
//! tables region (docs/design.md §3), with `--vips` VIPs (512 by default) against a
//! single VIP, `--backends` backends each, rings of size `--m`.
//!
//! Each timed run flips backend 0 of one VIP between up and down (both rings
//! precomputed, so only the publication is timed, not Maglev), publishes,
//! and lets a reader adopt the new generation (timed separately: that is
//! the worker's cost, a cached validation), then a worker's whole adoption:
//! border-dp's table source ([`ShmTables::poll`]: validation and lookup
//! maps) and [`Lb::adopt`] (backends of the VIPs whose block changed, the
//! others carried over), during which the worker forwards nothing. The
//! region lives in `--dir`
//! (tmpfs, like `/dev/shm` in production). Goal: the 512-VIP publish costs
//! about what the 1-VIP publish costs, because only the changed VIP's block
//! and the root are written.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::Arc;

use crate::clock;
use crate::report::Table;
use crate::stats::Summary;
use conf::maglev::{build_into, is_prime, BackendId, MaglevBackend, MaglevScratch, DEFAULT_M};
use conf::state::FlowStats;
use conf::tables::{
    BackendEntry, BackendState, Generation, TablesReader, TablesWriter, VipFlags, VipTable,
    PROTO_TCP,
};
use conf::Mode;
use dataplane::conntrack::Timeouts;
use dataplane::lb::Lb;
use dataplane::neigh::NeighborSync;
use dataplane::routes::{LocalPool, PortRoute, Routes};
use dataplane::tables_source::{reader_inbox, ShmTables};
use dataplane::worker::{TablePoll, TableSource};

/// Options of the `tables` benchmark.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// VIPs of the large scenario (compared with 1 VIP).
    #[arg(long, default_value_t = 512)]
    pub vips: u32,
    /// Backends per VIP.
    #[arg(long, default_value_t = 64)]
    pub backends: u32,
    /// Ring size (must be prime).
    #[arg(long, default_value_t = DEFAULT_M)]
    pub m: u32,
    /// Timed publications per scenario.
    #[arg(long, default_value_t = 50)]
    pub runs: usize,
    /// Untimed publications per scenario before timing.
    #[arg(long, default_value_t = 3)]
    pub warmup: usize,
    /// Directory for the region file.
    #[arg(long, default_value = "/dev/shm")]
    pub dir: PathBuf,
}

/// VIP `v` with its backends; backend 0 down if `down`.
fn vip(
    v: u32,
    n: u32,
    m: u32,
    down: bool,
    scratch: &mut MaglevScratch,
) -> anyhow::Result<Arc<VipTable>> {
    let addr = |i: u32| {
        let [_, b, c, d] = (i + 1).to_be_bytes();
        IpAddr::V4(Ipv4Addr::new(10, b, c, d))
    };
    let port = 8000 + (v % 50_000) as u16;
    let backends: Vec<BackendEntry> = (0..n)
        .map(|i| BackendEntry {
            id: i,
            addr: addr(i),
            port,
            weight: 1,
            state: if down && i == 0 {
                BackendState::Down
            } else {
                BackendState::Up
            },
            max_connections: 0,
        })
        .collect();
    let members: Vec<MaglevBackend> = backends
        .iter()
        .map(|b| MaglevBackend {
            id: BackendId::from(std::net::SocketAddr::new(b.addr, b.port)),
            weight: u32::from(b.state == BackendState::Up),
        })
        .collect();
    let mut ring = Vec::new();
    build_into(&mut ring, scratch, &members, m)?;
    let [_, _, hi, lo] = (v + 1).to_be_bytes();
    Ok(Arc::new(VipTable {
        id: v,
        name: format!("vip-{v}"),
        addr: IpAddr::V4(Ipv4Addr::new(10, 200, hi, lo)),
        port: 443,
        proto: PROTO_TCP,
        mode: Mode::FullNat,
        flags: VipFlags::EMPTY,
        pp_max_len: 107,
        backends,
        ring,
        limits: Default::default(),
        persistence_s: 0,
    }))
}

/// Timings of one scenario, in microseconds.
struct Outcome {
    publish: Vec<f64>,
    adopt: Vec<f64>,
    worker: Vec<f64>,
    first_worker_ms: f64,
    bytes_written: u64,
    blocks_written: u32,
    first_publish_ms: f64,
    full_validation_ms: f64,
}

fn scenario(args: &Args, n_vips: u32) -> anyhow::Result<Outcome> {
    let mut scratch = MaglevScratch::new();
    let mut vips = Vec::with_capacity(n_vips as usize);
    for v in 0..n_vips {
        vips.push(vip(v, args.backends, args.m, false, &mut scratch)?);
    }
    let k = (n_vips / 2) as usize;
    let up = Arc::clone(&vips[k]);
    let down = vip(k as u32, args.backends, args.m, true, &mut scratch)?;
    let mut gen = Generation {
        flow_hash_key: *b"0123456789abcdef",
        vips,
    };

    let block = 4096 + u64::from(args.backends) * 32 + u64::from(args.m) * 4;
    let arena = 2 * block * u64::from(n_vips) + (16 << 20);
    let path = args.dir.join(format!(
        "border-perf-tables-{}-{n_vips}",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    let result = (|| {
        let mut w = TablesWriter::create(&path, arena)?;
        let r = TablesReader::open(&path)?;
        let (s, dt, _) = clock::measure(|| w.publish(&gen, &[]));
        s?;
        let first_publish_ms = dt.as_secs_f64() * 1e3;
        let (v, dt, _) = clock::measure(|| r.view(r.current()).map(|v| v.generation()));
        let mut applied = v?;
        let full_validation_ms = dt.as_secs_f64() * 1e3;

        // A worker: its own reader, border-dp's table source, an Lb.
        let inbox = reader_inbox();
        let _ = inbox.push(TablesReader::open(&path)?);
        let mut source = ShmTables::new(inbox, routes(), Box::new(|_| {}));
        let mut lb = Lb::new(
            0,
            1,
            1024,
            Timeouts::default(),
            NeighborSync::new(1),
            FlowStats::detached(conf::state::MAX_VIPS),
            FlowStats::detached(conf::state::MAX_BACKENDS),
        );
        let mut worker_adopts = |lb: &mut Lb| -> anyhow::Result<f64> {
            let t0 = std::time::Instant::now();
            match source.poll(lb.generation()) {
                TablePoll::New(t) => lb.adopt(*t),
                _ => anyhow::bail!("the worker found no new generation"),
            }
            Ok(t0.elapsed().as_secs_f64() * 1e6)
        };
        let first_worker_ms = worker_adopts(&mut lb)? / 1e3;

        let mut out = Outcome {
            publish: Vec::with_capacity(args.runs),
            adopt: Vec::with_capacity(args.runs),
            worker: Vec::with_capacity(args.runs),
            first_worker_ms,
            bytes_written: 0,
            blocks_written: 0,
            first_publish_ms,
            full_validation_ms,
        };
        for i in 0..args.warmup + args.runs {
            gen.vips[k] = if i % 2 == 0 {
                Arc::clone(&down)
            } else {
                Arc::clone(&up)
            };
            let (s, dt, _) = clock::measure(|| w.publish(&gen, &[applied]));
            let s = s?;
            let (v, da, _) = clock::measure(|| r.view(r.current()).map(|v| v.generation()));
            applied = v?;
            anyhow::ensure!(
                applied == s.generation,
                "reader did not adopt {}",
                s.generation
            );
            let dw = worker_adopts(&mut lb)?;
            let t = lb.tables().expect("adopted");
            anyhow::ensure!(
                t.generation == s.generation && t.built == 1,
                "the worker built {} VIPs for generation {}",
                t.built,
                t.generation
            );
            if i >= args.warmup {
                out.publish.push(dt.as_secs_f64() * 1e6);
                out.adopt.push(da.as_secs_f64() * 1e6);
                out.worker.push(dw);
                out.bytes_written = s.bytes_written;
                out.blocks_written = s.blocks_written;
            }
        }
        Ok(out)
    })();
    let _ = std::fs::remove_file(&path);
    result
}

/// Every backend (10.0.0.0/8) on-link on data port 0, full-NAT from its
/// pool, as a worker's routes.
fn routes() -> Routes {
    let local = IpAddr::V4(Ipv4Addr::new(10, 255, 255, 254));
    Routes {
        ports: vec![PortRoute {
            port: 0,
            nets: vec![conf::IpNet::new(local, 8).expect("prefix")],
            gateway: None,
        }],
        pools: vec![LocalPool {
            addr: local,
            port: 0,
            range: (1024, 65535),
        }],
    }
}

fn row(t: &mut Table, name: &str, us: &[f64], extra: String) {
    let Some(s) = Summary::of(us) else {
        return;
    };
    t.row(vec![
        name.to_string(),
        format!("{:.1}", s.min),
        format!("{:.1}", s.median),
        format!("{:.1}", s.p90),
        format!("{:.1}", s.max),
        extra,
    ]);
}

/// Runs the benchmark.
pub fn run(args: &Args) -> anyhow::Result<Table> {
    anyhow::ensure!(is_prime(args.m), "--m {} is not a prime", args.m);
    anyhow::ensure!(
        args.vips > 0 && args.backends > 0 && args.runs > 0,
        "--vips, --backends and --runs must be above 0"
    );
    let mut t = Table::new(
        format!(
            "tables: publish a one-backend change, {} backends per VIP, M = {}, {} runs (+{} warmup)",
            args.backends, args.m, args.runs, args.warmup
        ),
        &[
            "scenario",
            "min us",
            "median us",
            "p90 us",
            "max us",
            "written per publish",
        ],
    );
    let mut medians = Vec::new();
    for n in [1, args.vips] {
        let o = scenario(args, n)?;
        let written = format!("{} blocks, {} B", o.blocks_written, o.bytes_written);
        row(&mut t, &format!("{n} VIP(s): publish"), &o.publish, written);
        row(
            &mut t,
            &format!("{n} VIP(s): reader adopts (cached validation)"),
            &o.adopt,
            "-".into(),
        );
        row(
            &mut t,
            &format!("{n} VIP(s): worker adopts (ShmTables::poll + Lb::adopt)"),
            &o.worker,
            "1 VIP built".into(),
        );
        medians.push(Summary::of(&o.publish).map_or(0.0, |s| s.median));
        t.note(format!(
            "{n} VIP(s): first publish (every block) {:.2} ms, first full validation {:.2} ms, first worker adoption (every VIP built) {:.2} ms",
            o.first_publish_ms, o.full_validation_ms, o.first_worker_ms
        ));
        if n == args.vips {
            break;
        }
    }
    if let [one, many] = medians[..] {
        t.note(format!(
            "median publish, {} VIPs / 1 VIP = {:.2}",
            args.vips,
            many / one.max(f64::MIN_POSITIVE)
        ));
    }
    t.note("publish = TablesWriter::publish (serialise + checksum the changed block, new root, one Release store);");
    t.note("adopt = TablesReader::view of the new generation (root + changed block hashed, others from the cache).");
    t.note("worker adopts = border-dp's ShmTables::poll (validation, lookup maps) + Lb::adopt (the changed VIP's backends built, the others carried over): the worker's pause.");
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_run_reports_both_scenarios() {
        let args = Args {
            vips: 4,
            backends: 3,
            m: 307,
            runs: 2,
            warmup: 1,
            dir: std::env::temp_dir(),
        };
        let t = run(&args).unwrap();
        assert_eq!(t.rows.len(), 6);
        assert!(t.rows[0][5].starts_with("2 blocks"));
        assert!(run(&Args { m: 300, ..args }).is_err());
    }
}
