//! The rules of `borderctl diag` over fixed samples.

use super::*;

const COUNTERS: &[(&str, bool, bool)] = &[
    ("rx_packets", false, false),
    ("conntrack_entries", false, true),
    ("conntrack_capacity", false, true),
    ("local_tuples", false, true),
    ("local_tuples_in_use", false, true),
    ("local_tuples_resting", false, true),
    ("drop_malformed", true, false),
    ("drop_ipv4_bad_checksum", true, false),
    ("drop_no_backend", true, false),
    ("drop_vip_unhandled", true, false),
    ("drop_arp_not_ours", true, false),
    ("drop_added_by_someone_today", true, false),
    ("drop_bad_l4_checksum", true, false),
    ("drop_reply_wrong_port", true, false),
    ("drop_tcp_rst_no_conntrack", true, false),
    ("bad_l4_checksum_ignored", false, false),
    ("tcp_handshake_ack_wrong", false, false),
    ("conn_records_ring_full", false, false),
    ("neigh_learn_refused_off_subnet", false, false),
    ("neigh_learn_refused_unsolicited", false, false),
    ("neigh_learn_refused_overheard", false, false),
    ("drop_vip_acl_denied", true, false),
    ("drop_vip_max_connections", true, false),
    ("icmp_echo_rate_limited", false, false),
];

fn idx(name: &str) -> usize {
    COUNTERS.iter().position(|c| c.0 == name).unwrap()
}

/// A healthy appliance: one running worker at generation 7, VIP `web`
/// with one backend up, counters `values` (by name; the rest 0).
fn sample(values: &[(&str, u64)]) -> Sample {
    let mut v = vec![0; COUNTERS.len()];
    v[idx("conntrack_capacity")] = 1000;
    for (n, x) in values {
        v[idx(n)] = *x;
    }
    Sample {
        status: pb::GetStatusResponse {
            instance: "lab".into(),
            publisher: Some(pb::PublisherStatus {
                published_generation: 7,
                ..Default::default()
            }),
            dataplane: Some(pb::DataplaneStatus {
                present: true,
                pid: 42,
                pid_alive: true,
                run_state: "running".into(),
                workers: vec![pb::WorkerStatus {
                    index: 0,
                    lcore: 1,
                    applied_generation: 7,
                    alive: true,
                    heartbeat: 100,
                    heartbeat_age_ms: 3,
                }],
                ..Default::default()
            }),
            vips: vec![pb::VipStatus {
                name: "web".into(),
                backends: vec![pb::BackendStatus {
                    address: "10.0.0.11:80".into(),
                    state: pb::BackendState::Up as i32,
                    weight: 1,
                    ring_slots: 1021,
                    reason: "health: up".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            bgp: None,
            zone: String::new(),
        },
        stats: pb::GetStatsResponse {
            dataplane_present: true,
            local_pools: Vec::new(),
            ports: vec![port_stats("ext", 0, 0)],
            counters: COUNTERS
                .iter()
                .map(|(n, drop, gauge)| pb::CounterInfo {
                    name: n.to_string(),
                    help: format!("help of {n}"),
                    drop: *drop,
                    gauge: *gauge,
                })
                .collect(),
            workers: vec![pb::WorkerCounters {
                index: 0,
                lcore: 1,
                values: v.clone(),
            }],
            totals: v,
            vips: Vec::new(),
        },
    }
}

fn port_stats(name: &str, imissed: u64, rx_nombuf: u64) -> pb::PortStats {
    pb::PortStats {
        name: name.into(),
        role: "data".into(),
        updated_unix_ms: 1,
        stats: [
            ("ipackets", 1000),
            ("imissed", imissed),
            ("rx_nombuf", rx_nombuf),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect(),
    }
}

#[test]
fn nic_misses_during_the_window_are_a_problem_of_their_port() {
    let first = sample(&[]);
    let mut last = sample(&[]);
    last.stats.ports = vec![port_stats("ext", 300, 0)];
    let d = diagnose_pair(&first, &last, None);
    assert_eq!(
        kinds(&d),
        vec![("port_rx_missed", "port ext (data)", Severity::Problem)]
    );
    assert!(
        d.findings[0].evidence.contains("imissed 300 (150/s"),
        "{:?}",
        d.findings[0]
    );
    // Misses from before the window are history, not a finding.
    let d = diagnose_pair(&last, &last, None);
    assert!(d.findings.is_empty(), "{:?}", d.findings);
    let mut nombuf = sample(&[]);
    nombuf.stats.ports = vec![port_stats("ext", 300, 7)];
    let d = diagnose_pair(&last, &nombuf, None);
    assert!(
        d.findings[0].evidence.contains("rx_nombuf 7"),
        "{:?}",
        d.findings
    );
}

#[test]
fn lost_connection_records_are_named() {
    let d = diagnose_pair(
        &sample(&[("conn_records_ring_full", 5)]),
        &sample(&[("conn_records_ring_full", 45)]),
        None,
    );
    assert_eq!(
        kinds(&d),
        vec![("records_lost", "conn_records_ring_full", Severity::Problem)]
    );
    assert!(d.findings[0]
        .evidence
        .starts_with("40 connection records lost"));
}

#[test]
fn arp_spoofing_at_a_high_rate_is_named() {
    let first = sample(&[
        ("neigh_learn_refused_off_subnet", 100),
        ("neigh_learn_refused_unsolicited", 0),
    ]);
    // 2 s window: 15 refusals are 7.5/s, below the threshold.
    let slow = sample(&[
        ("neigh_learn_refused_off_subnet", 110),
        ("neigh_learn_refused_unsolicited", 5),
    ]);
    assert!(diagnose_pair(&first, &slow, None).findings.is_empty());
    let fast = sample(&[
        ("neigh_learn_refused_off_subnet", 2_100),
        ("neigh_learn_refused_unsolicited", 40),
        ("neigh_learn_refused_overheard", 9_000),
    ]);
    let d = diagnose_pair(&first, &fast, None);
    assert_eq!(
        kinds(&d),
        vec![("neighbour_spoofing", "neighbour table", Severity::Problem)]
    );
    assert!(
        d.findings[0]
            .evidence
            .starts_with("2040 ARP/NDP bindings refused in the window (1020/s)"),
        "{:?}",
        d.findings
    );
}

fn diagnose_pair(
    first: &Sample,
    last: &Sample,
    health: Option<&pb::GetHealthResponse>,
) -> Diagnosis {
    diagnose(&Inputs {
        first,
        last,
        window_ms: 2000,
        health,
        now_unix_ms: 1_000_000_000,
    })
}

/// A finding's kind, subject as shown, and severity; compares with
/// `(kind, subject, severity)` literals.
#[derive(Debug)]
struct Shown<'a>(&'a str, String, Severity);

impl PartialEq<(&str, &str, Severity)> for Shown<'_> {
    fn eq(&self, other: &(&str, &str, Severity)) -> bool {
        (self.0, self.1.as_str(), self.2) == *other
    }
}

fn kinds(d: &Diagnosis) -> Vec<Shown<'_>> {
    d.findings
        .iter()
        .map(|f| Shown(f.kind.as_str(), f.subject.to_string(), f.severity))
        .collect()
}

#[test]
fn a_healthy_appliance_has_no_finding() {
    let s = sample(&[("rx_packets", 10)]);
    let d = diagnose_pair(&s, &sample(&[("rx_packets", 500)]), None);
    assert!(d.findings.is_empty(), "{:?}", d.findings);
    assert!(d.drops.is_empty());
    assert_eq!(d.workers.len(), 1);
    assert_eq!(d.workers[0].conntrack_capacity, 1000);
}

#[test]
fn drops_that_moved_are_named_by_reason_with_their_rate() {
    let first = sample(&[("drop_no_backend", 100), ("drop_vip_unhandled", 5)]);
    let last = sample(&[
        ("drop_no_backend", 140),
        ("drop_vip_unhandled", 5),
        ("drop_malformed", 6),
        ("drop_ipv4_bad_checksum", 6),
        ("drop_arp_not_ours", 2),
        ("drop_added_by_someone_today", 1),
    ]);
    let d = diagnose_pair(&first, &last, None);
    assert_eq!(
        d.drops
            .iter()
            .map(|r| (r.counter.as_str(), r.dropped, r.per_second))
            .collect::<Vec<_>>(),
        [
            ("drop_malformed", 6, 3.0),
            ("drop_ipv4_bad_checksum", 6, 3.0),
            ("drop_no_backend", 40, 20.0),
            ("drop_arp_not_ours", 2, 1.0),
            ("drop_added_by_someone_today", 1, 0.5),
        ]
    );
    assert_eq!(
        kinds(&d),
        [
            ("drops_malformed", "drop_malformed", Severity::Problem),
            ("drops_no_backend", "drop_no_backend", Severity::Problem),
            ("drops_not_ours", "drop_arp_not_ours", Severity::Note),
            (
                "drops_other",
                "drop_added_by_someone_today",
                Severity::Problem
            ),
        ],
        "the malformed reasons are evidence of drop_malformed, not findings"
    );
    assert!(
        d.findings[0]
            .evidence
            .ends_with("by reason: drop_ipv4_bad_checksum 6"),
        "{}",
        d.findings[0].evidence
    );
    assert!(d.findings[1]
        .evidence
        .starts_with("40 dropped in the window (20/s): help of drop_no_backend"));
}

#[test]
fn a_counter_that_went_down_counts_from_zero() {
    let d = diagnose_pair(
        &sample(&[("drop_no_backend", 900)]),
        &sample(&[("drop_no_backend", 3)]),
        None,
    );
    assert_eq!(d.drops[0].dropped, 3);
}

#[test]
fn a_dead_worker_and_one_behind_for_the_whole_window_are_named() {
    let mut first = sample(&[]);
    let mut last = sample(&[]);
    for s in [&mut first, &mut last] {
        let dp = s.status.dataplane.as_mut().unwrap();
        dp.workers[0].applied_generation = 6;
        dp.workers[0].alive = false;
        dp.workers[0].heartbeat_age_ms = 4200;
    }
    let d = diagnose_pair(&first, &last, None);
    assert_eq!(
        kinds(&d),
        [
            (
                "worker_heartbeat_old",
                "worker 0 (lcore 1)",
                Severity::Problem
            ),
            (
                "worker_generation_lag",
                "worker 0 (lcore 1)",
                Severity::Problem
            ),
        ]
    );
    assert!(d.findings[0].evidence.contains("4200 ms"));
    assert!(d.findings[1]
        .evidence
        .starts_with("it runs generation 6 while 7 is published"));
    // A publish between the samples that the worker had not adopted at the
    // last one yet is not lag.
    let d = diagnose_pair(&sample(&[]), &last, None);
    assert!(!kinds(&d).iter().any(|k| k.0 == "worker_generation_lag"));
}

#[test]
fn a_connection_table_at_80_percent_is_named() {
    let s = sample(&[("conntrack_entries", 799)]);
    assert!(diagnose_pair(&s, &s, None).findings.is_empty());
    let s = sample(&[("conntrack_entries", 800)]);
    let d = diagnose_pair(&s, &s, None);
    assert_eq!(
        kinds(&d),
        [("conntrack_high", "worker 0 (lcore 1)", Severity::Problem)]
    );
    assert!(d.findings[0]
        .evidence
        .starts_with("connection table 800 of 1000 entries (80%)"));
}

#[test]
fn border_mgmts_own_findings_pass_through_with_their_subject() {
    let mut s = sample(&[]);
    s.status.dataplane.as_mut().unwrap().findings = vec![
        pb::Finding {
            kind: "host_twin_down".into(),
            worker: 0,
            detail: "kernel twin kni-ext is down".into(),
            port: "ext".into(),
        },
        pb::Finding {
            kind: "local_tuples_low".into(),
            worker: 0,
            detail: "800 of 1000".into(),
            port: String::new(),
        },
    ];
    let d = diagnose_pair(&s, &s, None);
    assert_eq!(
        kinds(&d),
        [
            ("host_twin_down", "port ext", Severity::Problem),
            ("local_tuples_low", "worker 0", Severity::Problem),
        ]
    );
}

#[test]
fn vips_without_an_eligible_backend_or_failing_open_are_named() {
    let mut s = sample(&[]);
    s.status.vips[0].backends[0].ring_slots = 0;
    s.status.vips[0].backends[0].drained = true;
    s.status.vips.push(pb::VipStatus {
        name: "api".into(),
        fail_open: true,
        backends: vec![pb::BackendStatus {
            address: "10.0.0.12:80".into(),
            state: pb::BackendState::Down as i32,
            ring_slots: 1021,
            reason: "health: connection refused".into(),
            ..Default::default()
        }],
        ..Default::default()
    });
    let d = diagnose_pair(&s, &s, None);
    assert_eq!(
        kinds(&d),
        [
            ("vip_no_backend", "web", Severity::Problem),
            ("vip_fail_open", "api", Severity::Problem),
        ]
    );
    assert!(d.findings[1]
        .evidence
        .contains("10.0.0.12:80 DOWN weight 0: health: connection refused"));
}

#[test]
fn a_backend_that_changed_three_times_in_ten_minutes_flaps() {
    let now = 1_000_000_000;
    let backend = |changes: Vec<u64>| pb::BackendHealth {
        address: "10.0.0.11:80".into(),
        state: pb::HealthState::Up as i32,
        reason: "tcp connect ok".into(),
        changes_unix_ms: changes,
        ..Default::default()
    };
    let health = pb::GetHealthResponse {
        vips: vec![pb::VipHealth {
            name: "web".into(),
            backends: vec![
                backend(vec![now - 700_000, now - 5_000, now - 3_000, now - 1_000]),
                backend(vec![now - 900_000, now - 800_000, now - 1_000]),
            ],
            ..Default::default()
        }],
        ..Default::default()
    };
    let s = sample(&[]);
    let d = diagnose_pair(&s, &s, Some(&health));
    assert_eq!(
        kinds(&d),
        [("backend_flapping", "web/10.0.0.11:80", Severity::Problem)]
    );
    assert!(d.findings[0]
        .evidence
        .starts_with("health changed 3 times in the last 10 min; now up"));
}

#[test]
fn bgp_sessions_down_and_withdrawn_vips_are_named() {
    let mut s = sample(&[]);
    s.status.bgp = Some(pb::BgpStatus {
        configured: true,
        api: "127.0.0.1:50051".into(),
        connected: false,
        last_error: "connection refused".into(),
        errors: 4,
        neighbours: vec![
            pb::BgpNeighbour {
                address: "10.0.0.254".into(),
                peer_asn: 65000,
                state: "active".into(),
            },
            pb::BgpNeighbour {
                address: "10.0.0.253".into(),
                peer_asn: 65000,
                state: "established".into(),
            },
        ],
        vips: vec![
            pb::VipRoute {
                name: "web".into(),
                prefix: "10.0.0.100/32".into(),
                announced: false,
                reason: "gobgpd unreachable".into(),
                ..Default::default()
            },
            pb::VipRoute {
                name: "api".into(),
                prefix: "10.0.0.101/32".into(),
                announced: false,
                reason: "maintenance".into(),
                ..Default::default()
            },
        ],
        ..Default::default()
    });
    let d = diagnose_pair(&s, &s, None);
    assert_eq!(
        kinds(&d),
        [
            ("bgp_unreachable", "127.0.0.1:50051", Severity::Problem),
            ("bgp_session_down", "10.0.0.254", Severity::Problem),
            ("vip_withdrawn", "web", Severity::Problem),
            ("vip_withdrawn", "api", Severity::Note),
        ]
    );
}

#[test]
fn a_stopped_dataplane_is_one_finding_and_no_counter_rules() {
    let mut s = sample(&[("conntrack_entries", 1000)]);
    let dp = s.status.dataplane.as_mut().unwrap();
    dp.pid_alive = false;
    dp.run_state = "stopped".into();
    let d = diagnose_pair(&s, &s, None);
    assert_eq!(
        kinds(&d),
        [("dataplane_down", "border-dp", Severity::Problem)]
    );
    assert_eq!(
        d.findings[0].evidence,
        "pid 42 is not running (run state stopped)"
    );
    let mut s = sample(&[]);
    s.status.publisher.as_mut().unwrap().pending = "arena held by worker 0".into();
    assert_eq!(
        kinds(&diagnose_pair(&s, &s, None)),
        [("tables_pending", "publisher", Severity::Problem)]
    );
}

#[test]
fn spoofed_segments_refused_are_one_family() {
    let first = sample(&[("drop_bad_l4_checksum", 0), ("drop_reply_wrong_port", 0)]);
    let last = sample(&[
        ("drop_bad_l4_checksum", 5000),
        ("drop_reply_wrong_port", 10),
        ("drop_tcp_rst_no_conntrack", 300),
    ]);
    let d = diagnose_pair(&first, &last, None);
    assert_eq!(
        kinds(&d),
        [
            ("drops_spoofed", "drop_bad_l4_checksum", Severity::Problem),
            ("drops_spoofed", "drop_reply_wrong_port", Severity::Problem),
            (
                "drops_spoofed",
                "drop_tcp_rst_no_conntrack",
                Severity::Problem
            ),
        ]
    );
    assert!(
        d.findings[0]
            .evidence
            .starts_with("5000 dropped in the window (2500/s)"),
        "{}",
        d.findings[0].evidence
    );
}

#[test]
fn limits_refusing_at_a_high_rate_are_one_family() {
    let first = sample(&[
        ("drop_vip_acl_denied", 0),
        ("drop_vip_max_connections", 10),
        ("icmp_echo_rate_limited", 0),
    ]);
    let last = sample(&[
        ("drop_vip_acl_denied", 400),
        // 5 in 2 s: below the finding rate.
        ("drop_vip_max_connections", 15),
        ("icmp_echo_rate_limited", 1000),
    ]);
    let d = diagnose_pair(&first, &last, None);
    assert_eq!(
        kinds(&d),
        [
            ("limits_refusing", "drop_vip_acl_denied", Severity::Note),
            ("limits_refusing", "icmp_echo_rate_limited", Severity::Note),
        ],
        "{:?}",
        d.findings
    );
    assert!(
        d.findings[0]
            .evidence
            .starts_with("400 refused in the window (200/s)"),
        "{}",
        d.findings[0].evidence
    );
    // Still listed among the drops, just not as drops_other.
    assert!(d.drops.iter().any(|r| r.counter == "drop_vip_acl_denied"));
}

#[test]
fn syn_proxy_drops_have_their_own_groups() {
    for c in [
        "drop_syn_proxy_cookie_bad",
        "drop_syn_proxy_bad_checksum",
        "drop_syn_proxy_bad_synack",
    ] {
        assert_eq!(drop_kind(c).0, "drops_syn_proxy_forged", "{c}");
        assert_eq!(drop_kind(c).1, Severity::Note);
    }
    for c in [
        "drop_syn_proxy_hold_full",
        "drop_syn_proxy_hold_expired",
        "drop_syn_proxy_no_room",
    ] {
        assert_eq!(drop_kind(c).0, "drops_syn_proxy_hold", "{c}");
        assert_eq!(drop_kind(c).1, Severity::Problem);
    }
    // Each is a counter the dataplane has.
    for c in ["drop_syn_proxy_cookie_bad", "drop_syn_proxy_hold_full"] {
        assert!(conf::counters::Counter::from_name(c).is_some(), "{c}");
    }
}

#[test]
fn segments_kept_from_changing_a_flow_are_a_note_at_a_high_rate() {
    let first = sample(&[("bad_l4_checksum_ignored", 0)]);
    let last = sample(&[
        ("bad_l4_checksum_ignored", 3000),
        // 5 in 2 s: below the finding rate.
        ("tcp_handshake_ack_wrong", 5),
    ]);
    let d = diagnose_pair(&first, &last, None);
    assert_eq!(
        kinds(&d),
        [(
            "spoofed_segments_ignored",
            "bad_l4_checksum_ignored",
            Severity::Note
        )]
    );
    assert!(
        d.findings[0]
            .evidence
            .starts_with("3000 ignored in the window (1500/s)"),
        "{}",
        d.findings[0].evidence
    );
}
