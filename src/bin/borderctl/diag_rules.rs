//! The rules of `borderctl diag`: pure functions from two samples of
//! border-mgmt's answers (GetStatus and GetStats, `window` apart, and
//! GetHealth) to the problems they show, each with its evidence and the
//! next command to run. No I/O here: the unit tests feed fixed samples.

use std::collections::BTreeMap;

use mgmt::findings::{Finding, Severity, Subject};
use mgmt::pb;
use serde::Serialize;

/// Share of a worker's connection table from which diag warns, in percent.
pub const CONNTRACK_HIGH_PCT: u64 = 80;
/// ARP/NDP bindings refused per second (from senders off the port's
/// subnets, or answers nobody asked for) from which diag names spoofing.
pub const NEIGH_SPOOF_PER_S: f64 = 10.0;
/// A backend whose health verdict changed this many times ...
pub const FLAP_CHANGES: usize = 3;
/// ... within this many milliseconds flaps.
pub const FLAP_WINDOW_MS: u64 = 10 * 60 * 1000;

/// What border-mgmt answered at one moment.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    pub status: pb::GetStatusResponse,
    pub stats: pb::GetStatsResponse,
}

/// Everything the rules look at.
#[derive(Debug)]
pub struct Inputs<'a> {
    pub first: &'a Sample,
    pub last: &'a Sample,
    /// Time between the two samples, in milliseconds.
    pub window_ms: u64,
    /// GetHealth at the last sample (absent: not answered).
    pub health: Option<&'a pb::GetHealthResponse>,
    /// Wall clock at the last sample.
    pub now_unix_ms: u64,
}

/// A drop counter that moved during the window.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DropRate {
    pub counter: String,
    pub dropped: u64,
    pub per_second: f64,
}

/// One worker's tables at the last sample.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WorkerLoad {
    pub index: u32,
    pub lcore: u64,
    pub applied_generation: u64,
    pub alive: bool,
    pub heartbeat_age_ms: u64,
    pub conntrack_entries: u64,
    pub conntrack_capacity: u64,
    pub local_tuples: u64,
    /// In use or resting.
    pub local_tuples_used: u64,
}

/// What the rules found.
#[derive(Debug, Default)]
pub struct Diagnosis {
    pub findings: Vec<Finding>,
    pub drops: Vec<DropRate>,
    pub workers: Vec<WorkerLoad>,
}

fn finding(
    kind: &str,
    severity: Severity,
    subject: impl Into<Subject>,
    evidence: String,
    next: &str,
) -> Finding {
    Finding {
        kind: kind.into(),
        severity,
        subject: subject.into(),
        evidence,
        next: next.into(),
    }
}

/// Runs every rule.
pub fn diagnose(i: &Inputs<'_>) -> Diagnosis {
    let mut d = Diagnosis::default();
    let dp_up = dataplane(i.last, &mut d.findings);
    publisher(i.last, &mut d.findings);
    if dp_up {
        d.drops = drop_rates(i);
        drops(&d.drops, &i.last.stats, &mut d.findings);
        d.workers = worker_loads(i.last);
        workers(i, &mut d.findings);
        occupancy(&d.workers, &mut d.findings);
        mgmt_findings(i.last, &mut d.findings);
        port_misses(i, &mut d.findings);
        records_lost(i, &mut d.findings);
        neighbour_spoofing(i, &mut d.findings);
        refusals(i, &mut d.findings);
    }
    vips(i.last, &mut d.findings);
    if let Some(h) = i.health {
        flapping(h, i.now_unix_ms, &mut d.findings);
    }
    bgp(i.last, &mut d.findings);
    d
}

/// `dataplane_down` unless border-dp runs; whether it does.
fn dataplane(s: &Sample, out: &mut Vec<Finding>) -> bool {
    let dp = s.status.dataplane.clone().unwrap_or_default();
    let next = "systemctl status border-dp@INSTANCE (or its log); borderctl status";
    if !dp.problem.is_empty() {
        out.push(finding(
            "dataplane_down",
            Severity::Problem,
            "border-dp",
            format!("its state region is unusable: {}", dp.problem),
            next,
        ));
        return false;
    }
    let why = if !dp.present {
        "no state region: border-dp has not started".to_string()
    } else if !dp.pid_alive {
        format!("pid {} is not running (run state {})", dp.pid, dp.run_state)
    } else if dp.run_state != "running" {
        format!("pid {} is {}", dp.pid, dp.run_state)
    } else {
        return true;
    };
    out.push(finding(
        "dataplane_down",
        Severity::Problem,
        "border-dp",
        why,
        next,
    ));
    false
}

/// Tables border-mgmt could not publish.
fn publisher(s: &Sample, out: &mut Vec<Finding>) {
    let p = s.status.publisher.clone().unwrap_or_default();
    let next = "borderctl status; borderctl events (border-mgmt retries by itself)";
    if !p.pending.is_empty() {
        out.push(finding(
            "tables_pending",
            Severity::Problem,
            "publisher",
            format!(
                "generation {} is published; the next waits: {}",
                p.published_generation, p.pending
            ),
            next,
        ));
    } else if !p.last_error.is_empty() {
        out.push(finding(
            "publish_failed",
            Severity::Problem,
            "publisher",
            p.last_error.clone(),
            next,
        ));
    }
}

/// Every drop counter whose total moved between the samples, with its rate.
/// A total that went down (border-dp restarted) counts from zero.
pub fn drop_rates(i: &Inputs<'_>) -> Vec<DropRate> {
    let before: BTreeMap<&str, u64> = i
        .first
        .stats
        .counters
        .iter()
        .zip(&i.first.stats.totals)
        .map(|(c, v)| (c.name.as_str(), *v))
        .collect();
    i.last
        .stats
        .counters
        .iter()
        .zip(&i.last.stats.totals)
        .filter(|(c, _)| c.drop && !c.gauge)
        .filter_map(|(c, &now)| {
            let was = before.get(c.name.as_str()).copied().unwrap_or(0);
            let dropped = moved(was, now);
            (dropped > 0).then(|| DropRate {
                counter: c.name.clone(),
                dropped,
                per_second: per_second(dropped, i.window_ms),
            })
        })
        .collect()
}

/// The reason group of a drop counter: its finding kind, severity and next step.
fn drop_kind(counter: &str) -> (&'static str, Severity, &'static str) {
    use Severity::{Note, Problem};
    match counter {
        "drop_vip_unhandled" | "drop_not_local" => (
            "drops_no_vip",
            Problem,
            "borderctl status (the configured VIPs: address, port, protocol); clients send to an address or port no VIP serves",
        ),
        "drop_no_backend" => (
            "drops_no_backend",
            Problem,
            "borderctl status (which VIP has no backend in its ring); borderctl undrain / weight, or fix the backends' health",
        ),
        "drop_neighbour_unresolved"
        | "drop_neighbour_queue_full"
        | "drop_neighbour_queue_timeout"
        | "drop_neighbour_gone" => (
            "drops_neighbour_unresolved",
            Problem,
            "check that the backends / next hop answer ARP or NDP on the port's segment (`ip neigh` on them); borderctl stats --all (neighbour_requests)",
        ),
        "drop_no_local_port" => (
            "drops_no_local_port",
            Problem,
            "borderctl stats (local_tuples_*): add [[port]] local_addresses, or lower [dataplane.timeouts] local_port_cooldown",
        ),
        "drop_conntrack_full" | "drop_syn_flood" | "drop_pp_conntrack_full" => (
            "drops_table_full",
            Problem,
            "borderctl stats (conntrack_entries, conntrack_capacity): raise [dataplane] conntrack_per_worker (restart) or add workers",
        ),
        // Segments that would change a flow and do not fit it: forged or
        // corrupted (docs/security.md).
        "drop_bad_l4_checksum"
        | "drop_reply_wrong_port"
        | "drop_dnat_reply_wrong_port"
        | "drop_tcp_rst_no_conntrack"
        | "drop_tcp_rst_out_of_window"
        | "drop_icmp_error_out_of_window" => (
            "drops_spoofed",
            Problem,
            "spoofed or corrupted segments (a bad checksum, a reply from the client side, a RST off any flow or window): an attack or a broken sender; borderctl capture on the port names the senders; docs/security.md",
        ),
        // SYN proxy (docs/reliability.md): ACKs that prove no cookie are a forged-ACK
        // flood or corruption; the clients of the VIP lose nothing.
        "drop_syn_proxy_cookie_bad" | "drop_syn_proxy_bad_checksum" | "drop_syn_proxy_bad_synack" => (
            "drops_syn_proxy_forged",
            Note,
            "nothing for the VIP's clients (segments that prove no SYN cookie: spoofed ACKs, corrupted frames); capture the sender's traffic if it is much",
        ),
        "drop_syn_proxy_hold_full" | "drop_syn_proxy_hold_expired" | "drop_syn_proxy_no_room" => (
            "drops_syn_proxy_hold",
            Problem,
            "the backends answer the SYN proxy's SYNs slowly or not at all: check their health and listen backlog (clients resend what was dropped)",
        ),
        "drop_malformed" => (
            "drops_malformed",
            Problem,
            "borderctl stats --all (the drop_<reason> counters say which check failed); capture the sender's traffic with tcpdump",
        ),
        // Traffic on a shared segment that is for someone else: normal.
        "drop_not_our_mac" | "drop_arp_not_ours" | "drop_nd_not_ours" | "drop_icmp_not_ours"
        | "drop_unknown_ethertype" => (
            "drops_not_ours",
            Note,
            "nothing, unless it is much of the traffic: frames for other hosts reach the port (shared segment, flooding switch)",
        ),
        _ => (
            "drops_other",
            Problem,
            "borderctl stats --all (the counter's help says what it drops); docs/diag.md",
        ),
    }
}

/// One finding per moved drop counter; the reasons `drop_malformed` sums
/// are evidence of its finding, not findings of their own.
fn drops(rates: &[DropRate], stats: &pb::GetStatsResponse, out: &mut Vec<Finding>) {
    let parts: Vec<&str> = dataplane::wire::Malformed::ALL
        .iter()
        .map(|m| m.counter().name())
        .collect();
    let help = |name: &str| {
        stats
            .counters
            .iter()
            .find(|c| c.name == name)
            .map_or(String::new(), |c| c.help.clone())
    };
    for r in rates
        .iter()
        .filter(|r| !parts.contains(&r.counter.as_str()) && !REFUSALS.contains(&r.counter.as_str()))
    {
        let (kind, severity, next) = drop_kind(&r.counter);
        let mut evidence = format!(
            "{} dropped in the window ({}/s): {}",
            r.dropped,
            r.per_second,
            help(&r.counter)
        );
        if r.counter == "drop_malformed" {
            let why: Vec<String> = rates
                .iter()
                .filter(|p| parts.contains(&p.counter.as_str()))
                .map(|p| format!("{} {}", p.counter, p.dropped))
                .collect();
            if !why.is_empty() {
                evidence += &format!("; by reason: {}", why.join(", "));
            }
        }
        out.push(finding(kind, severity, &r.counter, evidence, next));
    }
}

/// A counter's per-worker value at a sample.
fn worker_value(stats: &pb::GetStatsResponse, worker: usize, name: &str) -> u64 {
    let Some(ci) = stats.counters.iter().position(|c| c.name == name) else {
        return 0;
    };
    stats
        .workers
        .get(worker)
        .and_then(|w| w.values.get(ci))
        .copied()
        .unwrap_or(0)
}

/// Each worker's liveness and tables at the last sample.
pub fn worker_loads(s: &Sample) -> Vec<WorkerLoad> {
    let dp = s.status.dataplane.clone().unwrap_or_default();
    dp.workers
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let v = |name: &str| worker_value(&s.stats, i, name);
            WorkerLoad {
                index: w.index,
                lcore: w.lcore,
                applied_generation: w.applied_generation,
                alive: w.alive,
                heartbeat_age_ms: w.heartbeat_age_ms,
                conntrack_entries: v("conntrack_entries"),
                conntrack_capacity: v("conntrack_capacity"),
                local_tuples: v("local_tuples"),
                local_tuples_used: v("local_tuples_in_use") + v("local_tuples_resting"),
            }
        })
        .collect()
}

/// Workers whose heartbeat stopped, and workers that have not adopted the
/// published generation at either sample (a publish in between is not lag).
fn workers(i: &Inputs<'_>, out: &mut Vec<Finding>) {
    let gen = |s: &Sample| {
        s.status
            .publisher
            .as_ref()
            .map_or(0, |p| p.published_generation)
    };
    let first = i.first.status.dataplane.clone().unwrap_or_default().workers;
    let last = i.last.status.dataplane.clone().unwrap_or_default().workers;
    for w in &last {
        let subject = Subject::Worker {
            index: w.index,
            lcore: Some(w.lcore),
        };
        if !w.alive {
            out.push(finding(
                "worker_heartbeat_old",
                Severity::Problem,
                subject.clone(),
                format!(
                    "its heartbeat has not moved for {} ms (stuck or stopped): it forwards nothing",
                    w.heartbeat_age_ms
                ),
                "borderctl status; the log of border-dp (a stuck worker: restart border-dp@INSTANCE)",
            ));
        }
        let lagged_before = first
            .iter()
            .find(|f| f.index == w.index)
            .is_some_and(|f| f.applied_generation < gen(i.first));
        if w.applied_generation < gen(i.last) && lagged_before {
            out.push(finding(
                "worker_generation_lag",
                Severity::Problem,
                subject.clone(),
                format!(
                    "it runs generation {} while {} is published (behind for the whole window): \
                     it forwards with old tables, and border-mgmt cannot reuse their memory",
                    w.applied_generation,
                    gen(i.last)
                ),
                "borderctl status; borderctl stats --all (tables_refused); the log of border-dp",
            ));
        }
    }
}

/// Connection tables at or above [`CONNTRACK_HIGH_PCT`].
fn occupancy(loads: &[WorkerLoad], out: &mut Vec<Finding>) {
    for w in loads {
        let (n, cap) = (w.conntrack_entries, w.conntrack_capacity);
        if cap == 0 || n * 100 < cap * CONNTRACK_HIGH_PCT {
            continue;
        }
        out.push(finding(
            "conntrack_high",
            Severity::Problem,
            Subject::Worker {
                index: w.index,
                lcore: Some(w.lcore),
            },
            format!(
                "connection table {n} of {cap} entries ({}%); when full, a new full-NAT flow \
                 replaces the oldest half-open entry at least 1 s old or is dropped \
                 (drop_syn_flood, drop_conntrack_full) and new DNAT flows go stateless",
                n * 100 / cap
            ),
            "borderctl stats (conntrack_entries); raise [dataplane] conntrack_per_worker \
             (restart) or add workers; a SYN flood shows as many new_flows without traffic",
        ));
    }
}

/// `n` over a window of `window_ms`, per second, to one decimal.
fn per_second(n: u64, window_ms: u64) -> f64 {
    let secs = window_ms.max(1) as f64 / 1000.0;
    (n as f64 / secs * 10.0).round() / 10.0
}

/// A counter's total at a sample (0 when the counter is unknown).
fn total(stats: &pb::GetStatsResponse, name: &str) -> u64 {
    stats
        .counters
        .iter()
        .position(|c| c.name == name)
        .and_then(|i| stats.totals.get(i))
        .copied()
        .unwrap_or(0)
}

/// How much a running total moved between the samples (a total that went
/// down, border-dp restarted, counts from zero).
fn moved(was: u64, now: u64) -> u64 {
    if now >= was {
        now - was
    } else {
        now
    }
}

/// Ports whose NIC dropped received packets during the window: the Rx ring
/// overflowed (`imissed`: the workers polling it are too slow) or the mbuf
/// pool was empty (`rx_nombuf`). Neither shows in border's drop counters:
/// those packets never reached a worker.
fn port_misses(i: &Inputs<'_>, out: &mut Vec<Finding>) {
    let rate = |n: u64| per_second(n, i.window_ms);
    for p in &i.last.stats.ports {
        let before = i.first.stats.ports.iter().find(|f| f.name == p.name);
        let delta = |stat: &str| {
            let was = before.and_then(|b| b.stats.get(stat)).copied().unwrap_or(0);
            moved(was, p.stats.get(stat).copied().unwrap_or(0))
        };
        let (missed, nombuf) = (delta("imissed"), delta("rx_nombuf"));
        if missed + nombuf == 0 {
            continue;
        }
        out.push(finding(
            "port_rx_missed",
            Severity::Problem,
            format!("port {} ({})", p.name, p.role),
            format!(
                "the NIC dropped received packets in the window: imissed {missed} ({}/s: Rx ring \
                 full, the workers polling it fell behind), rx_nombuf {nombuf} ({}/s: mbuf pool empty)",
                rate(missed),
                rate(nombuf)
            ),
            "borderctl counters (PORT table; rx_packets per worker): add workers or cores \
             ([dataplane] worker_lcores, restart), use poll = \"busy\" on dedicated cores, or \
             spread the traffic over more Rx queues",
        ));
    }
}

/// What `[vip.limits]` and `dataplane.icmp_echo_per_second` refuse:
/// one finding family of their own, not `drops_other`.
const REFUSALS: [&str; 8] = [
    "drop_vip_acl_denied",
    "drop_vip_max_connections",
    "drop_backend_max_connections",
    "drop_vip_rate_limited",
    "drop_source_rate_limited",
    "drop_udp_source_rate_limited",
    "source_table_full",
    "icmp_echo_rate_limited",
];

/// Refusals per second from which they are a finding: below it a limit
/// that turns away the odd client is doing its job.
const REFUSAL_FINDING_RATE: f64 = 10.0;

/// Limits refusing at a high rate: a flood being held off, or a limit too
/// tight for the traffic.
fn refusals(i: &Inputs<'_>, out: &mut Vec<Finding>) {
    rate_findings(
        i,
        &REFUSALS,
        ("limits_refusing", "refused"),
        "a flood held off, or a limit too tight for the traffic: borderctl stats --all \
         (drop_vip_*, drop_*source_rate_limited, icmp_echo_rate_limited); raise the VIP's \
         [vip.limits] and borderctl apply (no restart), or \
         [dataplane] icmp_echo_per_second (restart); docs/config.md",
        out,
    );
    rate_findings(
        i,
        &SPOOF_IGNORED,
        ("spoofed_segments_ignored", "ignored"),
        "segments forwarded without changing their flow (a failing checksum, a handshake ACK \
         of no SYN): a spoofing attack or a broken sender; borderctl capture on the port \
         names the senders; docs/security.md",
        out,
    );
}

/// Segments of tracked flows forwarded as they are but kept from changing
/// their flow: not drops, so not in `drops_spoofed`.
const SPOOF_IGNORED: [&str; 2] = ["bad_l4_checksum_ignored", "tcp_handshake_ack_wrong"];

/// A note for each of `names` whose rate reached [`REFUSAL_FINDING_RATE`]:
/// `(kind, verb)` name the finding and what the counter counts.
fn rate_findings(
    i: &Inputs<'_>,
    names: &[&str],
    (kind, verb): (&str, &str),
    next: &str,
    out: &mut Vec<Finding>,
) {
    for &name in names {
        let n = moved(total(&i.first.stats, name), total(&i.last.stats, name));
        let rate = per_second(n, i.window_ms);
        if n == 0 || rate < REFUSAL_FINDING_RATE {
            continue;
        }
        let help = i
            .last
            .stats
            .counters
            .iter()
            .find(|c| c.name == name)
            .map_or(String::new(), |c| c.help.clone());
        out.push(finding(
            kind,
            Severity::Note,
            name,
            format!("{n} {verb} in the window ({rate}/s): {help}"),
            next,
        ));
    }
}

/// Connection records lost because a worker's ring was full: border-mgmt
/// did not drain it in time (or does not run).
fn records_lost(i: &Inputs<'_>, out: &mut Vec<Finding>) {
    let name = "conn_records_ring_full";
    let lost = moved(total(&i.first.stats, name), total(&i.last.stats, name));
    if lost == 0 {
        return;
    }
    out.push(finding(
        "records_lost",
        Severity::Problem,
        name,
        format!(
            "{lost} connection records lost in the window: a worker's records ring was full \
             (border-mgmt not draining it fast enough, or not running)"
        ),
        "systemctl status border-mgmt@INSTANCE; the border_records_* metrics; raise [records] \
         ring_slots (restart); docs/records.md",
    ));
}

/// ARP/NDP that tried to write into the neighbour table and was refused,
/// at a rate no honest segment sends: bindings from senders outside the
/// port's subnets, answers to requests border never sent.
fn neighbour_spoofing(i: &Inputs<'_>, out: &mut Vec<Finding>) {
    let names = [
        "neigh_learn_refused_off_subnet",
        "neigh_learn_refused_unsolicited",
    ];
    let refused: Vec<(&str, u64)> = names
        .iter()
        .map(|n| (*n, moved(total(&i.first.stats, n), total(&i.last.stats, n))))
        .collect();
    let sum: u64 = refused.iter().map(|(_, n)| n).sum();
    let rate = per_second(sum, i.window_ms);
    if sum == 0 || rate < NEIGH_SPOOF_PER_S {
        return;
    }
    let each: Vec<String> = refused.iter().map(|(c, n)| format!("{c} {n}")).collect();
    out.push(finding(
        "neighbour_spoofing",
        Severity::Problem,
        "neighbour table",
        format!(
            "{sum} ARP/NDP bindings refused in the window ({rate}/s): {}; the table kept \
             its entries",
            each.join(", ")
        ),
        "capture ARP/NDP on the ports (borderctl capture, or tcpdump on a mirror) to find \
         the sender; borderctl stats --all (neigh_*)",
    ));
}

/// The findings border-mgmt made itself (GetStatus): local tuples, kernel
/// twins, the ephemeral range; their next steps are border-mgmt's.
fn mgmt_findings(s: &Sample, out: &mut Vec<Finding>) {
    let dp = s.status.dataplane.clone().unwrap_or_default();
    out.extend(dp.findings.into_iter().map(Finding::from));
}

/// VIPs failing open, and VIPs with no backend in their ring.
fn vips(s: &Sample, out: &mut Vec<Finding>) {
    for v in &s.status.vips {
        let states: Vec<String> = v
            .backends
            .iter()
            .map(|b| {
                let state = crate::status::state_name(b.state);
                format!("{} {state} weight {}: {}", b.address, b.weight, b.reason)
            })
            .collect();
        let evidence = if states.is_empty() {
            "no backend configured".to_string()
        } else {
            states.join("; ")
        };
        if v.fail_open {
            out.push(finding(
                "vip_fail_open",
                Severity::Problem,
                &v.name,
                format!("every backend is down, all serve anyway (fail-open): {evidence}"),
                "borderctl status; fix the backends (or their health check: the reasons say why they are down)",
            ));
        } else if v.backends.iter().all(|b| b.ring_slots == 0) {
            out.push(finding(
                "vip_no_backend",
                Severity::Problem,
                &v.name,
                format!("no backend is eligible (no ring slot): {evidence}"),
                "borderctl status; borderctl undrain VIP BACKEND / borderctl weight VIP BACKEND reset",
            ));
        }
    }
}

/// Backends whose verdict changed at least [`FLAP_CHANGES`] times in the
/// last [`FLAP_WINDOW_MS`].
fn flapping(h: &pb::GetHealthResponse, now_unix_ms: u64, out: &mut Vec<Finding>) {
    let since = now_unix_ms.saturating_sub(FLAP_WINDOW_MS);
    for v in &h.vips {
        for b in &v.backends {
            let recent = b.changes_unix_ms.iter().filter(|&&t| t >= since).count();
            if recent < FLAP_CHANGES {
                continue;
            }
            let state = match pb::HealthState::try_from(b.state) {
                Ok(pb::HealthState::Up) => "up",
                Ok(pb::HealthState::Down) => "down",
                _ => "undecided",
            };
            out.push(finding(
                "backend_flapping",
                Severity::Problem,
                format!("{}/{}", v.name, b.address),
                format!(
                    "health changed {recent} times in the last {} min; now {state}: {}",
                    FLAP_WINDOW_MS / 60_000,
                    b.reason
                ),
                "borderctl events (health changes as they happen); check the backend; \
                 raise the VIP's [vip.health] rise/fall to ride out short failures",
            ));
        }
    }
}

/// gobgpd away, neighbour sessions not established, VIP routes withdrawn.
fn bgp(s: &Sample, out: &mut Vec<Finding>) {
    let Some(b) = s.status.bgp.as_ref().filter(|b| b.configured) else {
        return;
    };
    if !b.connected {
        out.push(finding(
            "bgp_unreachable",
            Severity::Problem,
            &b.api,
            format!(
                "gobgpd does not answer ({} failed calls): {}",
                b.errors, b.last_error
            ),
            "systemctl status gobgpd; borderctl status (bgp)",
        ));
    }
    for n in b.neighbours.iter().filter(|n| n.state != "established") {
        out.push(finding(
            "bgp_session_down",
            Severity::Problem,
            &n.address,
            format!("session with AS {} is {}", n.peer_asn, n.state),
            "gobgp neighbor ADDRESS (why the session is down); check the router's side",
        ));
    }
    for v in b.vips.iter().filter(|v| !v.announced) {
        let severity = match v.reason.as_str() {
            "maintenance" | "announce = never" | "rising" | "announcing" => Severity::Note,
            _ => Severity::Problem,
        };
        out.push(finding(
            "vip_withdrawn",
            severity,
            &v.name,
            format!("route {} is not announced: {}", v.prefix, v.reason),
            "borderctl status (bgp); the reason names what to fix",
        ));
    }
}

#[cfg(test)]
#[path = "diag_rules_tests.rs"]
mod tests;
