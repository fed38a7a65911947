//! The cases: established flows of each VIP kind in each direction, new
//! flows into a cold and a reused table, and cookie SYN-ACKs; one row each.

use conf::counters::Counter;
use conf::Config;

use std::sync::Arc;

use super::flows::{establish, establish_dsr, establish_proxied};
use super::frames::syns;
use super::hugepages::{advised, Advised};
use super::measure::{bare_sample, pipeline_sample, summarize, summarize_wall, Sample};
use super::ports::Replay;
use super::rig::{Rig, Vip, EXT, INT};
use super::{wanted, Args};
use crate::stats::Summary;

pub(super) struct Row {
    pub(super) case: String,
    pub(super) flows: String,
    pub(super) pipeline: Summary,
    pub(super) wall: Summary,
    pub(super) bare: Option<Summary>,
    /// The pipeline's ticks per packet of each sample, in the order taken
    /// (the rounds of [`established_rows`]).
    pub(super) rounds: Vec<f64>,
    pub(super) allocs: u64,
    pub(super) drops: u64,
    /// What the report says of this row besides its numbers.
    pub(super) note: Option<String>,
    /// The huge pages of the row's table, when it was built for the row.
    pub(super) huge: Option<Advised>,
}

/// The suffix of a row measured while walks of the connection table run.
pub(super) const DURING_WALKS: &str = ", during walks";

/// One flow count's appliance of an established case: its table built
/// once and kept for every sample, and its frames each way.
struct FlowSet {
    n: usize,
    rig: Rig,
    fwd: Arc<Replay>,
    rev: Option<Arc<Replay>>,
    /// What the table's memory got (see [`super::hugepages`]).
    huge: Advised,
}

/// Established flows of every VIP kind, each direction against the bare
/// loop. The flow counts of a case are sampled in turn (one sample of
/// each count, then the next round), so that the ratio of two counts
/// compares samples taken moments apart on a machine whose speed moves.
pub(super) fn established_rows(args: &Args, cfg: &Config, hz: f64) -> anyhow::Result<Vec<Row>> {
    let wanted = |name: &str| wanted(args, name);
    let mut rows: Vec<Row> = Vec::new();
    anyhow::ensure!(args.flows.iter().all(|&n| n > 0), "--flows must be above 0");
    for vip in [
        Vip::FullNat4,
        Vip::Dnat4,
        Vip::FullNat6,
        Vip::Proxy4,
        Vip::Dsr4,
        Vip::DsrIpip4,
        Vip::DsrGue4,
        Vip::Dnat6,
        Vip::Dsr6,
        Vip::DsrIpip6,
        Vip::DsrGue6,
    ] {
        let fwd_name = format!("established {}, client->backend", vip.name());
        let rev_name = format!("established {}, backend->client", vip.name());
        // DSR: the backend's packets never pass the appliance.
        let do_rev = vip != Vip::FullNat6 && !vip.is_dsr() && wanted(&rev_name);
        // Only asked for by name: `--only` of the plain case (the
        // callgrind counts) does not run it.
        let walk_name = format!("{fwd_name}{DURING_WALKS}");
        let do_walk = vip == Vip::FullNat4
            && args.only.as_deref().is_none_or(|o| {
                o.contains(DURING_WALKS.trim_start_matches(", ")) && walk_name.contains(o)
            });
        if !wanted(&fwd_name) && !do_rev && !do_walk {
            continue;
        }
        let mut sets = Vec::with_capacity(args.flows.len());
        for &n in &args.flows {
            let before = advised();
            let mut rig = Rig::new(cfg, args.backends, n + 1024, hz)?;
            // The clock stands still while the flows are set up: however
            // long that takes, none of their handshakes times out.
            rig.freeze();
            let (fwd, rev) = match vip {
                Vip::Proxy4 => establish_proxied(&mut rig, n)?,
                _ if vip.is_dsr() => (establish_dsr(&mut rig, vip, n)?, Vec::new()),
                _ => establish(&mut rig, vip, n)?,
            };
            rig.thaw();
            sets.push(FlowSet {
                n,
                rig,
                fwd: Arc::new(Replay::new(&fwd)),
                rev: do_rev.then(|| Arc::new(Replay::new(&rev))),
                huge: advised().since(before),
            });
        }
        let mut cases = vec![(fwd_name, EXT)];
        if do_rev {
            cases.push((rev_name, INT));
        }
        for (name, port) in cases {
            let frames = |set: &FlowSet| -> Arc<Replay> {
                if port == EXT {
                    set.fwd.clone()
                } else {
                    set.rev.clone().expect("replies built")
                }
            };
            if wanted(&name) {
                rows.extend(interleaved(args, hz, &mut sets, &name, port, &frames));
            }
            if do_walk && port == EXT {
                for set in &mut sets {
                    let fwd = frames(set);
                    rows.push(walk_row(args, &mut set.rig, &name, set.n, &fwd)?);
                }
            }
        }
    }
    Ok(rows)
}

/// The case `name` at every flow count of `sets`, sampled in turn: round
/// after round, one bare-loop and one pipeline sample per count. Before
/// each sample one pass over its flows (at most a quarter of a sample)
/// brings back what the other counts' samples evicted from the caches.
fn interleaved(
    args: &Args,
    hz: f64,
    sets: &mut [FlowSet],
    name: &str,
    port: usize,
    frames: &dyn Fn(&FlowSet) -> Arc<Replay>,
) -> Vec<Row> {
    let replays: Vec<Arc<Replay>> = sets.iter().map(frames).collect();
    let drops0: Vec<u64> = sets.iter().map(|s| s.rig.drops()).collect();
    // Warm up (caches, branch predictors, the table's pages).
    for (set, f) in sets.iter_mut().zip(&replays) {
        pipeline_sample(&mut set.rig, port, f, args.packets / 4 + 1);
    }
    let mut p: Vec<Vec<Sample>> = sets.iter().map(|_| Vec::new()).collect();
    let mut b: Vec<Vec<Sample>> = sets.iter().map(|_| Vec::new()).collect();
    for _ in 0..args.samples {
        for (k, (set, f)) in sets.iter_mut().zip(&replays).enumerate() {
            let pass = (set.n as u64).min(args.packets / 4).max(1);
            b[k].push(bare_sample(hz, f, port, args.packets));
            pipeline_sample(&mut set.rig, port, f, pass);
            p[k].push(pipeline_sample(&mut set.rig, port, f, args.packets));
        }
    }
    sets.iter()
        .zip(p.iter().zip(&b))
        .zip(&drops0)
        .map(|((set, (p, b)), drops0)| Row {
            case: name.to_string(),
            flows: set.n.to_string(),
            pipeline: summarize(p),
            wall: summarize_wall(p),
            bare: Some(summarize(b)),
            rounds: p.iter().map(|s| s.ticks).collect(),
            allocs: p.iter().map(|s| s.allocs).sum(),
            drops: set.rig.drops() - drops0,
            note: None,
            huge: Some(set.huge),
        })
        .collect()
}

/// New flows (SYNs) into a cold table, then into the same table reused.
pub(super) fn new_flow_rows(args: &Args, cfg: &Config, hz: f64) -> anyhow::Result<Vec<Row>> {
    let wanted = |name: &str| wanted(args, name);
    let mut rows: Vec<Row> = Vec::new();
    for vip in [
        Vip::FullNat4,
        Vip::Dnat4,
        Vip::FullNat6,
        Vip::Dsr4,
        Vip::DsrIpip4,
        Vip::DsrGue4,
        Vip::Dnat6,
        Vip::Dsr6,
        Vip::DsrIpip6,
        Vip::DsrGue6,
        // One client per sample: its first SYN pins it, the others hit.
        Vip::Persist4,
    ] {
        let name = format!("new flows {} (SYN)", vip.name());
        if !wanted(&name) {
            continue;
        }
        let n = args.new_flows;
        let mut rig = Rig::new(cfg, args.backends, n + 1024, hz)?;
        let drops0 = rig.drops();
        let mut cold = Vec::new();
        let mut warm = Vec::new();
        let mut bare = Vec::new();
        for s in 0..=args.samples {
            let frames = Arc::new(Replay::new(&syns(vip, 1 + s as u32, n)));
            bare.push(bare_sample(hz, &frames, EXT, n as u64));
            let sample = pipeline_sample(&mut rig, EXT, &frames, n as u64);
            if s == 0 {
                cold.push(sample);
            } else {
                warm.push(sample);
            }
            // Expire them all (SYN timeout), sweeping the whole table.
            rig.advance(u64::from(cfg.dataplane.timeouts.tcp_syn) * 1000 + 1);
            for _ in 0..(n / dataplane::lb::EXPIRE_BUDGET + 2) {
                rig.w.poll_once();
            }
            anyhow::ensure!(
                rig.w.pipeline.lb().conntrack().is_empty(),
                "{} entries left after expiry",
                rig.w.pipeline.lb().conntrack().len()
            );
        }
        let drops = rig.drops() - drops0;
        let new = rig.w.pipeline.counters().get(Counter::NewFlows);
        anyhow::ensure!(
            new == (n * (args.samples + 1)) as u64 - drops,
            "new_flows {new} does not match"
        );
        let b = summarize(&bare);
        rows.push(Row {
            case: format!("{name}, reused table"),
            flows: n.to_string(),
            pipeline: summarize(&warm),
            wall: summarize_wall(&warm),
            bare: Some(b),
            rounds: warm.iter().map(|s| s.ticks).collect(),
            allocs: warm.iter().map(|s| s.allocs).sum(),
            drops,
            note: None,
            huge: None,
        });
        rows.push(Row {
            case: format!("{name}, first fill (page faults)"),
            flows: n.to_string(),
            pipeline: summarize(&cold),
            wall: summarize_wall(&cold),
            bare: Some(b),
            rounds: cold.iter().map(|s| s.ticks).collect(),
            allocs: cold.iter().map(|s| s.allocs).sum(),
            drops: 0,
            note: None,
            huge: None,
        });
    }
    if let Some(r) = cookie_row(args, cfg, hz)? {
        rows.push(r);
    }
    Ok(rows)
}

/// The case of [`cookie_row`].
pub(super) const COOKIE_CASE: &str = "cookie SYN-ACKs full-NAT IPv4 + SYN proxy (SYN)";

/// SYNs to a `syn_proxy = "always"` VIP, each answered with a cookie
/// SYN-ACK out of the port it came by: no entry, no state.
pub(super) fn cookie_row(args: &Args, cfg: &Config, hz: f64) -> anyhow::Result<Option<Row>> {
    if !wanted(args, COOKIE_CASE) {
        return Ok(None);
    }
    let n = args.new_flows;
    let mut rig = Rig::new(cfg, args.backends, 1024, hz)?;
    let drops0 = rig.drops();
    let mut samples = Vec::new();
    let mut bare = Vec::new();
    // The first sample warms up.
    for s in 0..=args.samples {
        let frames = Arc::new(Replay::new(&syns(Vip::SynProxy4, 1 + s as u32, n)));
        bare.push(bare_sample(hz, &frames, EXT, n as u64));
        let sample = pipeline_sample(&mut rig, EXT, &frames, n as u64);
        if s > 0 {
            samples.push(sample);
        }
    }
    let drops = rig.drops() - drops0;
    let sent = rig.w.pipeline.counters().get(Counter::SynProxyCookiesSent);
    anyhow::ensure!(
        sent == (n * (args.samples + 1)) as u64 - drops,
        "syn_proxy_cookies_sent {sent} does not match"
    );
    anyhow::ensure!(
        rig.w.pipeline.lb().conntrack().is_empty(),
        "a cookie SYN made an entry"
    );
    Ok(Some(Row {
        case: COOKIE_CASE.to_string(),
        flows: n.to_string(),
        pipeline: summarize(&samples),
        wall: summarize_wall(&samples),
        bare: Some(summarize(&bare[1..])),
        rounds: samples.iter().map(|s| s.ticks).collect(),
        allocs: samples.iter().map(|s| s.allocs).sum(),
        drops,
        note: None,
        huge: None,
    }))
}

/// The established case `name` again, each sample taken twice in a row:
/// without a walk and while a reader thread walks the connection table
/// without pause (as `borderctl conns` does through border-mgmt), one
/// walk after another. The row's figure is the one during walks; its note
/// compares it with the samples without, taken in between.
fn walk_row(
    args: &Args,
    rig: &mut Rig,
    name: &str,
    n: usize,
    frames: &Arc<Replay>,
) -> anyhow::Result<Row> {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let region = rig.conns;
    let active = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let walks = Arc::new(AtomicU64::new(0));
    let entries = Arc::new(AtomicU64::new(0));
    let reader = {
        let (active, stop, walks, entries) =
            (active.clone(), stop.clone(), walks.clone(), entries.clone());
        std::thread::spawn(move || {
            let mut id = 1;
            while !stop.load(Ordering::Relaxed) {
                if !active.load(Ordering::Relaxed) {
                    std::thread::sleep(std::time::Duration::from_micros(200));
                    continue;
                }
                region.request(0, id);
                while active.load(Ordering::Relaxed) {
                    let t = region.take(0, id, 4096, |_| {});
                    entries.fetch_add(t.records as u64, Ordering::Relaxed);
                    if t.done {
                        walks.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                    if t.records == 0 {
                        std::thread::yield_now();
                    }
                }
                region.cancel(0);
                id += 1;
            }
        })
    };
    let drops0 = rig.drops();
    pipeline_sample(rig, EXT, frames, args.packets / 4 + 1);
    let (mut quiet, mut walking, mut bare) = (Vec::new(), Vec::new(), Vec::new());
    let (mut copied, mut packets) = (0, 0);
    for _ in 0..args.samples {
        bare.push(bare_sample(rig.hz, frames, EXT, args.packets));
        quiet.push(pipeline_sample(rig, EXT, frames, args.packets));
        active.store(true, Ordering::Relaxed);
        // The walk is under way before the clock starts.
        let before = entries.load(Ordering::Relaxed);
        while entries.load(Ordering::Relaxed) == before {
            rig.w.poll_once();
        }
        // A short sample of a small table can pass while the reader waits
        // for a core (a walk of it is one batch): such a sample was not
        // taken during a walk, and is taken again.
        let mut tries = 0;
        let (e0, e1) = loop {
            let e0 = entries.load(Ordering::Relaxed);
            let sample = pipeline_sample(rig, EXT, frames, args.packets);
            let e1 = entries.load(Ordering::Relaxed);
            tries += 1;
            if e1 > e0 || tries == 1000 {
                walking.push(sample);
                break (e0, e1);
            }
        };
        active.store(false, Ordering::Relaxed);
        anyhow::ensure!(e1 > e0, "no entry was copied during {tries} walk samples");
        copied += e1 - e0;
        packets += args.packets;
    }
    stop.store(true, Ordering::Relaxed);
    active.store(false, Ordering::Relaxed);
    reader
        .join()
        .map_err(|_| anyhow::anyhow!("the walk reader panicked"))?;
    let (q, w) = (summarize(&quiet), summarize(&walking));
    let walks = walks.load(Ordering::Relaxed);
    let change = (w.median / q.median - 1.0) * 100.0;
    Ok(Row {
        case: format!("{name}{DURING_WALKS}"),
        flows: n.to_string(),
        pipeline: w,
        wall: summarize_wall(&walking),
        bare: Some(summarize(&bare)),
        rounds: walking.iter().map(|s| s.ticks).collect(),
        allocs: walking.iter().map(|s| s.allocs).sum(),
        drops: rig.drops() - drops0,
        note: Some(format!(
            "goal a walk of the connection table slows forwarding by <= 5 %, {n} flows: {:.1} ticks/pkt during walks vs {:.1} without (samples taken in turn), {change:+.1} % ({}); {walks} walks of {n} entries completed, {copied} entries copied during the {packets} packets timed ({:.3} per packet)",
            w.median,
            q.median,
            if change <= 5.0 { "met" } else { "MISSED" },
            copied as f64 / packets.max(1) as f64,
        )),
        huge: None,
    })
}
