//! The verdict engine with a fake clock: rise/fall, silence (no-data),
//! fail-open, quorum across checkers, unreliable witnesses, the weight
//! header, reconfiguration.

mod common;

use common::engine::{b, engine_config, key, ok, refused, Driver as T, INTERVAL};
use conf::Config;
use mgmt::health::engine::{Change, HealthState, ProbeOutcome, WeightObs};

const HE_LISTEN: &str = "unix:///run/border/he.sock";

fn config(peers: usize, quorum: u32, weight_header: bool) -> Config {
    let mut p = String::new();
    for i in 0..peers {
        p.push_str(&format!(
            "[[mgmt.peer]]\naddress = \"unix:///run/border/peer{i}.sock\"\n"
        ));
    }
    let health = format!("kind = \"http\"\npath = \"/healthz\"\nweight_header = {weight_header}");
    engine_config("he", quorum, &p, &health, "")
}

fn ok_w(w: Option<WeightObs>) -> ProbeOutcome {
    ProbeOutcome {
        ok: true,
        reason: "HTTP 200".into(),
        weight: w,
    }
}

impl T {
    fn idle(&mut self, ms: u64) -> Vec<Change> {
        self.now += ms;
        self.evaluate()
    }
    fn no_data(&self, n: u8) -> bool {
        self.e.verdict("web", b(n)).unwrap().no_data
    }
}

#[test]
fn before_any_result_backends_are_up_without_data() {
    let mut t = T::new(&config(0, 1, false));
    t.idle(0);
    assert_eq!(t.state(1), HealthState::Up);
    assert!(t.no_data(1));
    assert_eq!(t.reason(1), "up (no data: no probe result yet)");
}

#[test]
fn one_failure_is_noise_fall_takes_down_rise_brings_back() {
    let mut t = T::new(&config(0, 1, false));
    t.round(&[(1, ok()), (2, ok())]);
    assert_eq!(
        (t.state(1), t.reason(1).as_str()),
        (HealthState::Up, "up: HTTP 200")
    );
    assert!(!t.no_data(1));

    t.round(&[(1, refused()), (2, ok())]);
    assert_eq!(t.state(1), HealthState::Up, "one failure is noise");
    assert_eq!(
        t.reason(1),
        "up: connect refused (1 of 3 failures to go down)"
    );
    t.round(&[(1, refused()), (2, ok())]);
    assert_eq!(t.state(1), HealthState::Up);
    // A success resets the count.
    t.round(&[(1, ok()), (2, ok())]);
    t.round(&[(1, refused()), (2, ok())]);
    t.round(&[(1, refused()), (2, ok())]);
    assert_eq!(t.state(1), HealthState::Up);
    let ch = t.round(&[(1, refused()), (2, ok())]);
    assert_eq!(
        t.state(1),
        HealthState::Down,
        "fall = 3 consecutive failures"
    );
    assert_eq!(
        t.reason(1),
        "down: connect refused (3 consecutive failures)"
    );
    assert!(ch.contains(&Change::Backend(key(1))));
    let v = t.e.verdict("web", b(1)).unwrap().clone();
    assert_eq!(v.checkers, vec!["me".to_string()]);

    t.round(&[(1, ok()), (2, ok())]);
    assert_eq!(t.state(1), HealthState::Down, "rise = 2");
    assert_eq!(
        t.reason(1),
        "down: connect refused (3 consecutive failures); recovering: 1 of 2 successes"
    );
    t.round(&[(1, ok()), (2, ok())]);
    assert_eq!(
        (t.state(1), t.reason(1).as_str()),
        (HealthState::Up, "up: HTTP 200")
    );
    let after = t.e.verdict("web", b(1)).unwrap();
    assert!(after.since_ms > v.since_ms);
}

#[test]
fn silence_is_not_a_verdict() {
    let mut t = T::new(&config(0, 1, false));
    for _ in 0..3 {
        t.round(&[(1, refused()), (2, ok())]);
    }
    assert_eq!(t.state(1), HealthState::Down);
    // The probe loop stalls: nothing for a long time.
    t.idle(5 * INTERVAL);
    assert_eq!(
        t.state(1),
        HealthState::Down,
        "no fresh data never changes a state"
    );
    assert!(t.no_data(1));
    assert!(t.reason(1).contains("no data"), "{}", t.reason(1));
    assert_eq!(t.state(2), HealthState::Up);
    assert!(t.no_data(2));
    assert_eq!(
        t.reason(2),
        "up (no data: no fresh probe result; state kept)"
    );
    // Fresh data heals it.
    t.round(&[(1, ok()), (2, ok())]);
    t.round(&[(1, ok()), (2, ok())]);
    assert_eq!(t.state(1), HealthState::Up);
    assert!(!t.no_data(1) && !t.no_data(2));
}

#[test]
fn every_backend_down_fails_open_loudly() {
    let mut t = T::new(&config(0, 1, false));
    t.round(&[(1, refused()), (2, ok())]);
    t.round(&[(1, refused()), (2, refused())]);
    t.round(&[(1, refused()), (2, refused())]);
    assert_eq!(t.state(1), HealthState::Down);
    assert!(!t.e.vip_health()["web"].fail_open);
    let ch = t.round(&[(1, refused()), (2, refused())]);
    assert_eq!(t.state(2), HealthState::Down);
    assert!(t.e.vip_health()["web"].fail_open);
    assert!(
        ch.iter()
            .any(|c| matches!(c, Change::FailOpen { vip, on: true, .. } if vip == "web")),
        "{ch:?}"
    );
    assert!(t
        .reason(1)
        .ends_with("VIP fails open: every backend is down, all stay in the ring"));
    // One comes back: fail-open ends, with an event.
    t.round(&[(1, ok()), (2, refused())]);
    let ch = t.round(&[(1, ok()), (2, refused())]);
    assert_eq!(t.state(1), HealthState::Up);
    assert!(!t.e.vip_health()["web"].fail_open);
    assert!(ch
        .iter()
        .any(|c| matches!(c, Change::FailOpen { on: false, .. })));
    assert!(!t.reason(2).contains("fails open"));
}

#[test]
fn quorum_needs_k_independent_checkers() {
    let mut t = T::new(&config(2, 2, false));
    // Only this checker sees backend 1 fail.
    for _ in 0..3 {
        t.peer(
            0,
            "lb-b",
            &[
                (1, Some(HealthState::Up), true),
                (2, Some(HealthState::Up), true),
            ],
        );
        t.peer(
            1,
            "lb-c",
            &[
                (1, Some(HealthState::Up), true),
                (2, Some(HealthState::Up), true),
            ],
        );
        t.round(&[(1, refused()), (2, ok())]);
    }
    assert_eq!(
        t.state(1),
        HealthState::Up,
        "one checker is not a quorum of 2"
    );
    assert!(
        t.reason(1)
            .contains("1 see it fail, fewer than quorum 2 (me: connect refused)"),
        "{}",
        t.reason(1)
    );
    // A second checker agrees.
    t.peer(
        0,
        "lb-b",
        &[
            (1, Some(HealthState::Down), false),
            (2, Some(HealthState::Up), true),
        ],
    );
    t.round(&[(1, refused()), (2, ok())]);
    assert_eq!(t.state(1), HealthState::Down);
    let v = t.e.verdict("web", b(1)).unwrap();
    assert_eq!(v.checkers, vec!["me".to_string(), "lb-b".to_string()]);
    assert!(
        v.reason.starts_with("down: 2 of 3 checkers see it fail (quorum 2): me: connect refused; lb-b: connect timeout after 500 ms"),
        "{}",
        v.reason
    );
    // The same checker id twice is one checker.
    let mut t2 = T::new(&config(2, 2, false));
    for _ in 0..3 {
        t2.peer(0, "me", &[(1, Some(HealthState::Down), false)]);
        t2.round(&[(1, refused()), (2, ok())]);
    }
    assert_eq!(
        t2.state(1),
        HealthState::Up,
        "a peer claiming our own id is not independent"
    );
}

#[test]
fn silent_peers_keep_the_state() {
    let mut t = T::new(&config(2, 2, false));
    for _ in 0..3 {
        t.peer(
            0,
            "lb-b",
            &[
                (1, Some(HealthState::Down), false),
                (2, Some(HealthState::Up), true),
            ],
        );
        t.peer(
            1,
            "lb-c",
            &[
                (1, Some(HealthState::Up), true),
                (2, Some(HealthState::Up), true),
            ],
        );
        t.round(&[(1, refused()), (2, ok())]);
    }
    assert_eq!(t.state(1), HealthState::Down);
    // Both peers go quiet while this checker sees the backend pass again.
    t.e.peer_error("unix:///run/border/peer0.sock", "connect refused");
    t.idle(6 * INTERVAL);
    assert_eq!(t.state(1), HealthState::Down);
    for _ in 0..3 {
        t.round(&[(1, ok()), (2, ok())]);
    }
    assert_eq!(
        t.state(1),
        HealthState::Down,
        "one fresh vote cannot outvote a silent quorum"
    );
    assert!(t.no_data(1));
    assert!(t.reason(1).contains("no data"), "{}", t.reason(1));
    let w = t.e.witnesses();
    assert_eq!(w[1].error.as_deref(), Some("connect refused"));
    assert!(!w[1].fresh);
    // One peer comes back and sees it up: the down votes cannot reach the quorum.
    t.peer(
        1,
        "lb-c",
        &[
            (1, Some(HealthState::Up), true),
            (2, Some(HealthState::Up), true),
        ],
    );
    t.round(&[(1, ok()), (2, ok())]);
    assert_eq!(t.state(1), HealthState::Up);
    assert!(!t.no_data(1));
}

#[test]
fn an_unreliable_witness_is_not_believed() {
    // quorum 1: without the witness rule, one blinded peer would take every
    // backend down.
    let mut t = T::new(&config(2, 1, false));
    let mut witness_changes = Vec::new();
    for _ in 0..3 {
        t.peer(
            0,
            "lb-b",
            &[
                (1, Some(HealthState::Up), true),
                (2, Some(HealthState::Up), true),
            ],
        );
        t.peer(
            1,
            "blind",
            &[
                (1, Some(HealthState::Down), false),
                (2, Some(HealthState::Down), false),
            ],
        );
        witness_changes.extend(t.round(&[(1, ok()), (2, ok())]));
    }
    assert_eq!(t.state(1), HealthState::Up);
    assert_eq!(t.state(2), HealthState::Up);
    assert!(
        t.reason(1)
            .contains("votes discarded (unreliable witness): blind"),
        "{}",
        t.reason(1)
    );
    let w = t.e.witnesses();
    assert_eq!(w[2].id, "blind");
    assert_eq!(
        w[2].unreliable.as_deref(),
        Some("fails 2 of 2 targets that other checkers see pass")
    );
    assert!(w[0].unreliable.is_none() && w[1].unreliable.is_none());
    assert!(witness_changes.contains(&Change::Witness {
        checker: "blind".into(),
        reason: Some("fails 2 of 2 targets that other checkers see pass".into())
    }));
    // It recovers: its votes count again.
    t.peer(
        1,
        "blind",
        &[
            (1, Some(HealthState::Up), true),
            (2, Some(HealthState::Up), true),
        ],
    );
    let ch = t.round(&[(1, ok()), (2, ok())]);
    assert!(ch.contains(&Change::Witness {
        checker: "blind".into(),
        reason: None
    }));
    assert!(!t.reason(1).contains("discarded"));

    // This checker itself blinded: it discards its own votes.
    let mut t = T::new(&config(2, 2, false));
    for _ in 0..4 {
        t.peer(
            0,
            "lb-b",
            &[
                (1, Some(HealthState::Up), true),
                (2, Some(HealthState::Up), true),
            ],
        );
        t.peer(
            1,
            "lb-c",
            &[
                (1, Some(HealthState::Up), true),
                (2, Some(HealthState::Up), true),
            ],
        );
        t.round(&[(1, refused()), (2, refused())]);
    }
    assert_eq!((t.state(1), t.state(2)), (HealthState::Up, HealthState::Up));
    assert!(t.e.witnesses()[0].unreliable.is_some());
    assert!(!t.e.vip_health()["web"].fail_open);
}

#[test]
fn a_real_failure_seen_by_a_quorum_still_goes_down_beside_a_blind_witness() {
    let mut t = T::new(&config(2, 2, false));
    for _ in 0..3 {
        // Backend 1 is really dead: me and lb-b see it; "blind" sees everything fail.
        t.peer(
            0,
            "lb-b",
            &[
                (1, Some(HealthState::Down), false),
                (2, Some(HealthState::Up), true),
            ],
        );
        t.peer(
            1,
            "blind",
            &[
                (1, Some(HealthState::Down), false),
                (2, Some(HealthState::Down), false),
            ],
        );
        t.round(&[(1, refused()), (2, ok())]);
    }
    assert_eq!(t.state(1), HealthState::Down);
    assert_eq!(t.state(2), HealthState::Up);
    let v = t.e.verdict("web", b(1)).unwrap();
    assert!(v
        .checkers
        .starts_with(&["me".to_string(), "lb-b".to_string()]));
}

#[test]
fn weight_header_applies_only_while_every_answer_is_valid() {
    let mut t = T::new(&config(0, 1, true));
    t.round(&[
        (1, ok_w(Some(WeightObs::Value(3)))),
        (2, ok_w(Some(WeightObs::Value(1)))),
    ]);
    let v1 = t.e.verdict("web", b(1)).unwrap().weight;
    let v2 = t.e.verdict("web", b(2)).unwrap().weight;
    assert_eq!((v1, v2), (Some(3), Some(1)));
    assert_eq!(t.e.vip_health()["web"].weight_fallback, None);
    // Backend 2 sends garbage: the whole VIP falls back to configured weights.
    let ch = t.round(&[
        (1, ok_w(Some(WeightObs::Value(3)))),
        (
            2,
            ok_w(Some(WeightObs::Invalid(
                "X-Load-Balancing-Endpoint-Weight \"x\" is not a weight".into(),
            ))),
        ),
    ]);
    assert_eq!(t.e.verdict("web", b(1)).unwrap().weight, None);
    assert_eq!(t.e.verdict("web", b(2)).unwrap().weight, None);
    let why = t.e.vip_health()["web"].weight_fallback.clone().unwrap();
    assert!(why.starts_with("10.0.1.2:8080: X-Load-Balancing"), "{why}");
    assert!(ch.iter().any(|c| matches!(
        c,
        Change::WeightFallback {
            reason: Some(_),
            ..
        }
    )));
    // A missing header counts as invalid too.
    t.round(&[(1, ok_w(Some(WeightObs::Value(3)))), (2, ok())]);
    assert!(t.e.vip_health()["web"]
        .weight_fallback
        .as_deref()
        .unwrap()
        .contains("no X-Load-Balancing-Endpoint-Weight header"));
    // A backend that fails its probe does not count.
    t.round(&[(1, ok_w(Some(WeightObs::Value(3)))), (2, refused())]);
    assert_eq!(t.e.vip_health()["web"].weight_fallback, None);
    assert_eq!(t.e.verdict("web", b(1)).unwrap().weight, Some(3));
}

#[test]
fn reconfigure_keeps_unchanged_backends() {
    let cfg = config(0, 1, false);
    let mut t = T::new(&cfg);
    for _ in 0..3 {
        t.round(&[(1, refused()), (2, ok())]);
    }
    assert_eq!(t.state(1), HealthState::Down);
    t.e.reconfigure(&cfg);
    t.idle(0);
    assert_eq!(t.state(1), HealthState::Down, "same settings: state kept");
    let changed = Config::from_toml_str(&toml_with_fall(&cfg_text_fall(5)), "he.toml").unwrap();
    t.e.reconfigure(&changed);
    t.idle(0);
    assert_eq!(t.state(1), HealthState::Up, "new settings start over");
    assert!(t.no_data(1));
}

/// `on_down` decides what the dataplane does with established connections;
/// changing it keeps every verdict (a down backend stays down, so the new
/// setting applies to it at once).
#[test]
fn reconfigure_on_down_keeps_verdicts() {
    let cfg = config(0, 1, false);
    let mut t = T::new(&cfg);
    for _ in 0..3 {
        t.round(&[(1, refused()), (2, ok())]);
    }
    assert_eq!(t.state(1), HealthState::Down);
    let reset =
        Config::from_toml_str(&toml_with_fall("fall = 3\non_down = \"reset\""), "he.toml").unwrap();
    assert_eq!(
        reset.vips[0].health.as_ref().unwrap().on_down,
        conf::OnDown::Reset
    );
    t.e.reconfigure(&reset);
    t.idle(0);
    assert_eq!(t.state(1), HealthState::Down, "on_down changed: state kept");
    assert!(!t.no_data(1));
    assert_eq!(t.state(2), HealthState::Up);
}

fn cfg_text_fall(fall: u32) -> String {
    format!("fall = {fall}")
}

fn toml_with_fall(fall_line: &str) -> String {
    let head = common::health_config_head("he", HE_LISTEN, 1);
    format!(
        r#"{head}[[vip]]
name = "web"
address = "10.0.0.100"
port = 80
maglev_table_size = 1009
[vip.health]
kind = "http"
path = "/healthz"
{fall_line}
[[vip.backend]]
address = "10.0.1.1"
port = 8080
[[vip.backend]]
address = "10.0.1.2"
port = 8080
"#
    )
}

#[test]
fn a_restart_keeps_published_down_backends_down_until_rise() {
    let mut t = T::new(&config(0, 1, false));
    t.e.seed_down(
        &key(1),
        "down (no data: kept from the published tables)",
        t.now,
        0,
    );
    t.idle(0);
    assert_eq!(t.state(1), HealthState::Down);
    assert!(t.no_data(1));
    t.idle(10 * INTERVAL);
    assert_eq!(t.state(1), HealthState::Down, "silence keeps it down");
    t.round(&[(1, ok()), (2, ok())]);
    assert_eq!(t.state(1), HealthState::Down, "rise = 2 successes, not one");
    t.round(&[(1, ok()), (2, ok())]);
    assert_eq!(
        (t.state(1), t.reason(1).as_str()),
        (HealthState::Up, "up: HTTP 200")
    );
}

#[test]
fn a_verdict_remembers_its_last_state_changes_for_flap_detection() {
    let mut t = T::new(&config(0, 1, false));
    t.round(&[(1, ok()), (2, ok())]);
    let changes = |t: &T| t.e.verdict("web", b(1)).unwrap().changes_unix_ms.clone();
    assert!(changes(&t).is_empty(), "the first verdict is not a change");
    let mut expected = Vec::new();
    for cycle in 0..6 {
        for _ in 0..3 {
            t.round(&[(1, refused()), (2, ok())]);
        }
        assert_eq!(t.state(1), HealthState::Down, "cycle {cycle}");
        expected.push(1_700_000_000_000 + t.now);
        t.round(&[(1, ok()), (2, ok())]);
        t.round(&[(1, ok()), (2, ok())]);
        assert_eq!(t.state(1), HealthState::Up, "cycle {cycle}");
        expected.push(1_700_000_000_000 + t.now);
    }
    let keep = expected.len() - mgmt::health::engine::RECENT_CHANGES;
    assert_eq!(changes(&t), expected[keep..], "the last 8, oldest first");
    assert!(t.e.verdict("web", b(2)).unwrap().changes_unix_ms.is_empty());
}
