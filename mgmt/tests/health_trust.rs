//! The verdict engine with a fake clock: trusted checkers, splits without a
//! majority, and the backend's own agent (HAProxy agent-check answers).

mod common;

use common::engine::{b, engine_config, key, ok, refused, Driver as T, INTERVAL};
use conf::Config;
use mgmt::health::agent::{parse_answer, AgentResult};
use mgmt::health::engine::{HealthState, ProbeOutcome};

/// VIP web with backends 10.0.1.1 and .2; `peers` lists (trusted) per peer;
/// `health_extra` adds lines to `[vip.health]`, whose kind is `kind`.
fn config(peers: &[bool], quorum: u32, kind: &str, health_extra: &str) -> Config {
    let mut p = String::new();
    for (i, trusted) in peers.iter().enumerate() {
        p.push_str(&format!(
            "[[mgmt.peer]]\naddress = \"unix:///run/border/peer{i}.sock\"\ntrusted = {trusted}\n"
        ));
    }
    let path = if kind == "http" {
        "path = \"/healthz\"\n"
    } else {
        ""
    };
    let health = format!("kind = \"{kind}\"\n{path}{health_extra}");
    engine_config("tr", quorum, &p, &health, "weight = 10")
}

impl T {
    /// One round where the agent of backend 1 answers `answer` (and 2 says "up").
    fn agent_round(&mut self, answer: &[u8]) {
        self.agent_result(parse_answer(answer));
    }
    fn agent_result(&mut self, r: AgentResult) {
        self.now += INTERVAL;
        let out = match &r {
            Ok(a) => ProbeOutcome {
                ok: true,
                reason: format!("agent says {:?}", a.text),
                weight: None,
            },
            Err(e) => ProbeOutcome {
                ok: false,
                reason: e.clone(),
                weight: None,
            },
        };
        self.e.local_result(&[key(1)], &out, self.now);
        self.e.agent_result(&[key(1)], &r);
        self.e.local_result(&[key(2)], &ok(), self.now);
        self.e.agent_result(&[key(2)], &parse_answer(b"up"));
        self.evaluate();
    }
    /// Peer `i` (id `id`) reports backend n -> down (true) or up.
    fn peer_down(&mut self, i: usize, id: &str, views: &[(u8, bool)]) {
        let views: Vec<(u8, Option<HealthState>, bool)> = views
            .iter()
            .map(|&(n, down)| {
                (
                    n,
                    Some(if down {
                        HealthState::Down
                    } else {
                        HealthState::Up
                    }),
                    !down,
                )
            })
            .collect();
        self.peer(i, id, &views);
    }
}

#[test]
fn a_trusted_checker_takes_a_backend_down_whatever_the_quorum() {
    // quorum 2 of 3: the trusted peer alone sees backend 1 fail.
    let mut t = T::new(&config(&[true, false], 2, "http", ""));
    for _ in 0..3 {
        t.peer_down(0, "lb-t", &[(1, true), (2, false)]);
        t.peer_down(1, "lb-c", &[(1, false), (2, false)]);
        t.round(&[(1, ok()), (2, ok())]);
    }
    assert_eq!(t.state(1), HealthState::Down, "{}", t.reason(1));
    assert_eq!(
        t.reason(1),
        "down: trusted checker lb-t sees it fail, whatever the quorum: lb-t: connect timeout after 500 ms; me, lb-c see it pass"
    );
    assert_eq!(
        t.e.verdict("web", b(1)).unwrap().checkers,
        vec!["lb-t".to_string()]
    );
    assert_eq!(t.state(2), HealthState::Up);

    // The same view from an untrusted peer is one vote, fewer than quorum 2.
    let mut u = T::new(&config(&[false, false], 2, "http", ""));
    for _ in 0..3 {
        u.peer_down(0, "lb-b", &[(1, true), (2, false)]);
        u.peer_down(1, "lb-c", &[(1, false), (2, false)]);
        u.round(&[(1, ok()), (2, ok())]);
    }
    assert_eq!(u.state(1), HealthState::Up, "{}", u.reason(1));
}

#[test]
fn a_silent_trusted_checker_means_nothing_and_keeps_what_it_decided() {
    let mut t = T::new(&config(&[true], 2, "http", ""));
    // Never heard from: the usual rules apply (this checker alone is fewer than quorum 2).
    for _ in 0..3 {
        t.round(&[(1, refused()), (2, ok())]);
    }
    assert_eq!(t.state(1), HealthState::Up, "{}", t.reason(1));
    // It speaks: backend 1 is down.
    t.peer_down(0, "lb-t", &[(1, true), (2, false)]);
    t.round(&[(1, ok()), (2, ok())]);
    assert_eq!(t.state(1), HealthState::Down);
    // It goes silent: its verdict stands without data, even though this
    // checker sees the backend pass.
    for _ in 0..6 {
        t.round(&[(1, ok()), (2, ok())]);
    }
    let v = t.e.verdict("web", b(1)).unwrap();
    assert_eq!(v.state, HealthState::Down, "{}", v.reason);
    assert!(v.no_data, "{}", v.reason);
    assert!(v.reason.contains("no data"), "{}", v.reason);
    // It comes back and sees it pass: up.
    t.peer_down(0, "lb-t", &[(1, false), (2, false)]);
    t.round(&[(1, ok()), (2, ok())]);
    assert_eq!(t.state(1), HealthState::Up, "{}", t.reason(1));
}

#[test]
fn a_trusted_checker_is_believed_even_when_it_looks_blind() {
    // It fails both backends the others see pass: an unreliable witness by
    // the usual rule, but trusted. Both go down: the VIP fails open.
    let mut t = T::new(&config(&[true, false], 2, "http", ""));
    for _ in 0..3 {
        t.peer_down(0, "lb-t", &[(1, true), (2, true)]);
        t.peer_down(1, "lb-c", &[(1, false), (2, false)]);
        t.round(&[(1, ok()), (2, ok())]);
    }
    assert_eq!(
        (t.state(1), t.state(2)),
        (HealthState::Down, HealthState::Down)
    );
    assert!(t.e.vip_health()["web"].fail_open, "fail-open still holds");
    assert!(t.reason(1).ends_with("all stay in the ring"));
}

#[test]
fn a_split_without_majority_keeps_the_state_and_names_both_sides() {
    // Two checkers, quorum 1: this one sees backend 1 fail, the peer sees it pass.
    let mut t = T::new(&config(&[false], 1, "http", ""));
    for _ in 0..3 {
        t.peer_down(0, "lb-b", &[(1, false), (2, false)]);
        t.round(&[(1, refused()), (2, ok())]);
    }
    assert_eq!(
        t.state(1),
        HealthState::Up,
        "nothing leaves the ring on a split"
    );
    assert_eq!(
        t.reason(1),
        "split: me see it fail (me: connect refused); lb-b see it pass; no majority either way, state kept (up) until a trusted checker decides"
    );
    // Already down and then split: it stays down.
    let mut d = T::new(&config(&[false], 1, "http", ""));
    for _ in 0..3 {
        d.peer_down(0, "lb-b", &[(1, true), (2, false)]);
        d.round(&[(1, refused()), (2, ok())]);
    }
    assert_eq!(d.state(1), HealthState::Down);
    d.peer_down(0, "lb-b", &[(1, false), (2, false)]);
    d.round(&[(1, refused()), (2, ok())]);
    assert_eq!(d.state(1), HealthState::Down, "{}", d.reason(1));
    assert!(d.reason(1).starts_with("split: "), "{}", d.reason(1));
    assert!(d.reason(1).contains("state kept (down)"), "{}", d.reason(1));

    // A trusted checker decides the split either way.
    let mut u = T::new(&config(&[true, false], 1, "http", ""));
    for _ in 0..3 {
        u.peer_down(0, "lb-t", &[(1, false), (2, false)]);
        u.peer_down(1, "lb-c", &[(1, true), (2, false)]);
        u.round(&[(1, refused()), (2, ok())]);
    }
    // me and lb-c see it fail, lb-t passes: 2 down > 1 up is a majority.
    assert_eq!(u.state(1), HealthState::Down, "{}", u.reason(1));
    let mut s = T::new(&config(&[true, false, false], 1, "http", ""));
    for _ in 0..3 {
        s.peer_down(0, "lb-t", &[(1, false), (2, false)]);
        s.peer_down(1, "lb-c", &[(1, true), (2, false)]);
        s.peer_down(2, "lb-d", &[(1, false), (2, false)]);
        s.round(&[(1, refused()), (2, ok())]);
    }
    // me and lb-c fail, lb-t and lb-d pass: a split the trusted one decides.
    assert_eq!(s.state(1), HealthState::Up, "{}", s.reason(1));
    assert!(
        s.reason(1)
            .starts_with("up: trusted checker lb-t sees it pass, deciding a split"),
        "{}",
        s.reason(1)
    );
}

#[test]
fn the_agent_drains_weights_and_takes_down() {
    let mut t = T::new(&config(&[], 1, "agent", "agent_port = 9777"));
    t.agent_round(b"up");
    assert_eq!(t.state(1), HealthState::Up);
    let v = t.e.verdict("web", b(1)).unwrap();
    assert!(!v.drain && v.weight_pct.is_none(), "{v:?}");

    t.agent_round(b"drain");
    let v = t.e.verdict("web", b(1)).unwrap().clone();
    assert_eq!(v.state, HealthState::Up);
    assert!(v.drain);
    assert!(
        v.reason
            .starts_with("draining: the backend's agent says \"drain\""),
        "{}",
        v.reason
    );
    assert!(!t.e.vip_health()["web"].fail_open);

    // The drain sticks until the agent says ready (HAProxy's rule).
    t.agent_round(b"50%");
    let v = t.e.verdict("web", b(1)).unwrap().clone();
    assert!(v.drain, "{}", v.reason);
    assert_eq!(v.weight_pct, Some(50));
    t.agent_round(b"ready");
    let v = t.e.verdict("web", b(1)).unwrap().clone();
    assert!(!v.drain, "{}", v.reason);
    assert_eq!(v.weight_pct, Some(50), "the weight sticks too");
    assert!(v.reason.ends_with("; agent weight 50%"), "{}", v.reason);

    // down: out at once (the backend speaks for itself, no fall to wait for).
    t.agent_round(b"down#disk full");
    let v = t.e.verdict("web", b(1)).unwrap().clone();
    assert_eq!(v.state, HealthState::Down);
    assert_eq!(
        v.reason,
        "down: the backend's agent says \"down#disk full\""
    );
    assert!(!v.drain);
    // up again: back at once, weight still 50%.
    t.agent_round(b"up");
    assert_eq!(t.state(1), HealthState::Up);
    t.agent_round(b"maint");
    assert_eq!(t.state(1), HealthState::Down);
    assert!(t.reason(1).ends_with("(maintenance)"), "{}", t.reason(1));
    t.agent_round(b"ready 100%");
    assert_eq!(t.state(1), HealthState::Up);

    // Every backend's agent says down: the VIP still fails open.
    let mut all = T::new(&config(&[], 1, "agent", ""));
    all.now += INTERVAL;
    for n in [1, 2] {
        all.e.local_result(&[key(n)], &ok(), all.now);
        all.e.agent_result(&[key(n)], &parse_answer(b"down"));
    }
    all.e.evaluate(all.now, 1);
    assert!(all.e.vip_health()["web"].fail_open);
}

#[test]
fn a_malformed_agent_answer_is_a_failed_check_with_the_text() {
    let mut t = T::new(&config(&[], 1, "agent", ""));
    t.agent_round(b"up");
    for _ in 0..3 {
        t.agent_round(b"HTTP/1.1 400 Bad Request");
    }
    let v = t.e.verdict("web", b(1)).unwrap();
    assert_eq!(v.state, HealthState::Down);
    assert_eq!(
        v.reason,
        "down: malformed agent answer \"HTTP/1.1 400 Bad Request\": unknown word \"HTTP/1.1\" (3 consecutive failures)"
    );
}

#[test]
fn beside_an_active_check_an_unreachable_agent_means_nothing() {
    let mut t = T::new(&config(&[], 1, "http", "agent_port = 9777"));
    t.now += INTERVAL;
    t.e.local_result(&[key(1)], &ok(), t.now);
    t.e.agent_result(&[key(1)], &parse_answer(b"drain"));
    t.e.evaluate(t.now, 1);
    assert!(t.e.verdict("web", b(1)).unwrap().drain);
    for _ in 0..4 {
        t.now += INTERVAL;
        t.e.local_result(&[key(1)], &ok(), t.now);
        t.e.agent_result(&[key(1)], &Err("agent connect refused".into()));
        t.e.evaluate(t.now, 1);
    }
    let v = t.e.verdict("web", b(1)).unwrap();
    assert_eq!(v.state, HealthState::Up);
    assert!(v.drain, "the last answer stands: {}", v.reason);
    assert!(
        v.reason
            .ends_with("; agent: agent connect refused (its last answer \"drain\" stands)"),
        "{}",
        v.reason
    );
    // The active check still decides down.
    for _ in 0..3 {
        t.now += INTERVAL;
        t.e.local_result(&[key(1)], &refused(), t.now);
        t.e.agent_result(&[key(1)], &parse_answer(b"ready"));
        t.e.evaluate(t.now, 1);
    }
    assert_eq!(t.state(1), HealthState::Down, "{}", t.reason(1));
}
