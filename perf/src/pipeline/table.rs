//! The report: one table row per case, its notes (the memory's latency
//! among them) and the goals' verdicts.

use super::cases::{Row, COOKIE_CASE};
use super::memlat::chase;
use super::rig::Vip;
use super::Args;
use crate::report::Table;
use crate::stats::{quartiles, Summary};

/// The table of rows, its notes and the goals' verdicts.
pub(super) fn report(args: &Args, hz: f64, rows: &[Row]) -> Table {
    let mut t = Table::new(
        format!(
            "pipeline: Worker::poll_once over an in-memory port, {} backends per VIP, {} samples, median (TSC {:.3} GHz)",
            args.backends,
            args.samples,
            hz / 1e9
        ),
        &[
            "case",
            "flows",
            "ticks/pkt",
            "min",
            "wall",
            "bare loop",
            "on top",
            "ratio",
            "Mpps",
            "allocs",
            "drops",
        ],
    );
    for r in rows {
        let bare = r.bare.map_or(0.0, |b| b.median);
        t.row(vec![
            r.case.clone(),
            r.flows.clone(),
            format!("{:.1}", r.pipeline.median),
            format!("{:.1}", r.pipeline.min),
            format!("{:.1}", r.wall.median),
            format!("{bare:.1}"),
            format!("{:.1}", r.pipeline.median - bare),
            format!("{:.1}x", r.pipeline.median / bare.max(f64::MIN_POSITIVE)),
            format!("{:.2}", hz / r.pipeline.median / 1e6),
            r.allocs.to_string(),
            r.drops.to_string(),
        ]);
    }
    t.note("ticks/pkt = on-CPU time per packet (thread CPU time x TSC rate, so preemption on a shared box is left out) in TSC ticks (constant-rate reference cycles); wall = TSC ticks per packet including preemption.");
    t.note("\"on top\" = pipeline - bare rx->tx loop over the same port and frames, measured in the same run; ratio = pipeline / bare loop.");
    t.note(
        "Mpps on one core; for new-flow rows that is millions of new flows per second per core.",
    );
    t.note("allocs = heap allocations during the timed pipeline samples (goal 0).");
    if args.memlat_mib > 0 {
        let bytes = args.memlat_mib << 20;
        let one_4k = chase(bytes, 1, false, 1 << 20);
        let one = chase(bytes, 1, true, 1 << 20);
        let par: Vec<String> = [4, 8, 16, 32]
            .iter()
            .map(|&c| format!("{c}: {:.0}", chase(bytes, c, true, (1 << 20) / c)))
            .collect();
        t.note(format!(
            "memory ({} MiB, random lines, pointer chase): one access {one:.0} ticks ({:.0} ns) with huge pages, {one_4k:.0} with 4 KiB pages; ticks per access with N overlapping {}",
            args.memlat_mib,
            one / hz * 1e9,
            par.join(", ")
        ));
    }
    let mut tables: Vec<String> = Vec::new();
    for r in rows {
        let Some(huge) = r.huge else { continue };
        let set = r.case.rsplit_once(", ").map_or(r.case.as_str(), |c| c.0);
        let line = format!("{set}, {} flows: {}", r.flows, huge.describe());
        if !tables.contains(&line) {
            tables.push(line);
        }
    }
    if !tables.is_empty() {
        t.note(format!(
            "transparent huge pages ({}{}): the memory of the tables' mappings that ask for them (MADV_HUGEPAGE: slab, expiry hints, index), resident after setup, and how much of it is on huge pages: {}",
            super::hugepages::settings(),
            if args.no_huge_pages { ", this process opted out with --no-huge-pages" } else { "" },
            tables.join("; ")
        ));
    }
    for r in rows {
        if let Some(note) = &r.note {
            t.note(note.clone());
        }
    }
    // One verdict per flow count: with more flows than the caches hold,
    // the per-packet cost is the memory's (see the memory line), not ours.
    for &n in &args.flows {
        let flows = n.to_string();
        let proxied = |r: &&Row| r.case.contains(Vip::Proxy4.name());
        if let Some(worst) = rows
            .iter()
            .filter(|r| r.case.starts_with("established") && r.flows == flows)
            .filter(|r| !proxied(r) && !r.case.ends_with(super::cases::DURING_WALKS))
            .map(|r| r.pipeline.median - r.bare.map_or(0.0, |b| b.median))
            .max_by(f64::total_cmp)
        {
            t.note(format!(
                "goal established <= 150 ticks/pkt on top of the bare loop, {n} flows: worst case {worst:.1} ({})",
                if worst <= 150.0 { "met" } else { "MISSED" }
            ));
        }
    }
    scaling_notes(&mut t, args, rows);
    // Direct server return: a client packet at most what DNAT's costs.
    for &n in &args.flows {
        let flows = n.to_string();
        let fwd = |vip: Vip| {
            let case = format!("established {}, client->backend", vip.name());
            rows.iter()
                .find(|r| r.case == case && r.flows == flows)
                .map(|r| r.pipeline.median)
        };
        for (dsr, dnat) in [
            (Vip::Dsr4, Vip::Dnat4),
            (Vip::DsrIpip4, Vip::Dnat4),
            (Vip::DsrGue4, Vip::Dnat4),
            (Vip::Dsr6, Vip::Dnat6),
            (Vip::DsrIpip6, Vip::Dnat6),
            (Vip::DsrGue6, Vip::Dnat6),
        ] {
            if let (Some(d), Some(x)) = (fwd(dsr), fwd(dnat)) {
                t.note(format!(
                    "goal established {} client->backend <= {}'s, {n} flows: {d:.1} vs {x:.1} ticks/pkt ({})",
                    dsr.name(),
                    dnat.name(),
                    if d <= x { "met" } else { "MISSED" }
                ));
            }
        }
    }
    if rows.iter().any(|r| r.case.contains(Vip::Proxy4.name())) {
        t.note("PROXY v2 rows: each segment's sequence (client side) or acknowledgement number (backend side) is translated past the header; once the backend has acknowledged past it, these steady flows take the express lane like any established flow; they are reported, not part of the verdicts above.");
    }
    if let Some(worst) = rows
        .iter()
        .filter(|r| r.case.contains("reused table"))
        .map(|r| hz / r.pipeline.median)
        .min_by(f64::total_cmp)
    {
        t.note(format!(
            "goal >= 1 M new flows/s/core (steady state): worst case {:.2} M ({})",
            worst / 1e6,
            if worst >= 1e6 { "met" } else { "MISSED" }
        ));
    }
    let per_s = |case: &str| {
        rows.iter()
            .find(|r| r.case == case)
            .map(|r| hz / r.pipeline.median)
    };
    let stateful = per_s("new flows full-NAT IPv4 (SYN), reused table");
    if let (Some(cookies), Some(stateful)) = (per_s(COOKIE_CASE), stateful) {
        let ratio = cookies / stateful;
        t.note(format!(
            "goal cookie SYN-ACKs >= 2 x stateful new flows (full-NAT IPv4, reused table) per core: {:.2} M/s vs {:.2} M/s, {ratio:.2}x ({})",
            cookies / 1e6,
            stateful / 1e6,
            if ratio >= 2.0 { "met" } else { "MISSED" }
        ));
    }
    t
}

/// How an established packet's cost grows with the table (each flow count
/// over the smallest, worst case), against the goals for tables larger
/// than the caches; and what a new flow costs over an established packet.
fn scaling_notes(t: &mut Table, args: &Args, rows: &[Row]) {
    let ticks = |case: &str, flows: usize| {
        let flows = flows.to_string();
        rows.iter()
            .find(|r| r.case == case && r.flows == flows)
            .map(|r| r.pipeline.median)
    };
    let Some(&base) = args.flows.iter().min() else {
        return;
    };
    let at = |case: &str, flows: usize| {
        let flows = flows.to_string();
        rows.iter().find(|r| r.case == case && r.flows == flows)
    };
    for &n in args.flows.iter().filter(|&&n| n > base) {
        // Per case, the ratio of each round's two samples (taken moments
        // apart), then the worst case by the median of those ratios.
        let worst = rows
            .iter()
            .filter(|r| r.case.starts_with("established") && r.flows == base.to_string())
            .filter(|r| !r.case.contains(Vip::Proxy4.name()))
            .filter(|r| !r.case.ends_with(super::cases::DURING_WALKS))
            .filter_map(|r| {
                let big = at(&r.case, n)?;
                let ratios: Vec<f64> = r
                    .rounds
                    .iter()
                    .zip(&big.rounds)
                    .map(|(small, large)| large / small)
                    .collect();
                let s = Summary::of(&ratios)?;
                let (q1, q3) = quartiles(&ratios)?;
                Some((s, q1, q3, big.pipeline.median / r.pipeline.median, &r.case))
            })
            .max_by(|a, b| a.0.median.total_cmp(&b.0.median));
        let Some((ratio, q1, q3, of_medians, case)) = worst else {
            continue;
        };
        let goal = match n {
            100_000 => Some(1.3),
            1_000_000 => Some(1.6),
            _ => None,
        };
        let verdict = goal.map_or(String::new(), |g| {
            format!(
                ", goal <= {g:.1}x ({})",
                if ratio.median <= g { "met" } else { "MISSED" }
            )
        });
        t.note(format!(
            "established at {n} flows over {base} flows (ticks/pkt, the two samples of each round): worst {:.2}x median, IQR {q1:.2}-{q3:.2}, range {:.2}-{:.2} over {} rounds ({case}); ratio of the medians {of_medians:.2}x{verdict}",
            ratio.median, ratio.min, ratio.max, ratio.n
        ));
    }
    let est = ticks("established full-NAT IPv4, client->backend", base);
    let new = rows
        .iter()
        .find(|r| r.case == "new flows full-NAT IPv4 (SYN), reused table")
        .map(|r| r.pipeline.median);
    if let (Some(est), Some(new)) = (est, new) {
        t.note(format!(
            "a new flow (full-NAT IPv4, reused table) costs {:.1}x an established packet ({base} flows): {new:.0} vs {est:.0} ticks",
            new / est
        ));
    }
}
