//! The verdict engine under a fake clock, shared by the engine tests: VIP
//! `web` over backends 10.0.1.1 and 10.0.1.2, probe outcomes, peers'
//! observations and a driver that moves the clock.

use std::net::SocketAddr;

use conf::Config;
use mgmt::health::engine::{Change, Engine, HealthState, Key, Observation, ProbeOutcome};

/// The health check's interval in the engine tests' configs (ms).
pub const INTERVAL: u64 = 1000;

/// The engine tests' config of `instance` (listening on
/// `unix:///run/border/<instance>.sock`, `quorum`): the `[[mgmt.peer]]`
/// tables `peers`, then VIP `web` (10.0.0.100:80) checked every
/// [`INTERVAL`] (timeout 500 ms, rise 2, fall 3) with the `[vip.health]`
/// lines `health`, over 10.0.1.1 (with the lines `first_backend`) and
/// 10.0.1.2, port 8080.
pub fn engine_config(
    instance: &str,
    quorum: u32,
    peers: &str,
    health: &str,
    first_backend: &str,
) -> Config {
    let listen = format!("unix:///run/border/{instance}.sock");
    let mut t = super::health_config_head(instance, &listen, quorum);
    t.push_str(peers);
    t.push_str(&format!(
        r#"[[vip]]
name = "web"
address = "10.0.0.100"
port = 80
maglev_table_size = 1009
[vip.health]
interval_ms = {INTERVAL}
timeout_ms = 500
rise = 2
fall = 3
{health}
[[vip.backend]]
address = "10.0.1.1"
port = 8080
{first_backend}
[[vip.backend]]
address = "10.0.1.2"
port = 8080
"#
    ));
    Config::from_toml_str(&t, &format!("{instance}.toml")).unwrap_or_else(|e| panic!("{e}"))
}

/// Backend `n`: 10.0.1.`n`:8080.
pub fn b(n: u8) -> SocketAddr {
    format!("10.0.1.{n}:8080").parse().unwrap()
}

/// Backend `n` of VIP `web`.
pub fn key(n: u8) -> Key {
    ("web".to_string(), b(n))
}

pub fn ok() -> ProbeOutcome {
    ProbeOutcome {
        ok: true,
        reason: "HTTP 200".into(),
        weight: None,
    }
}

pub fn refused() -> ProbeOutcome {
    ProbeOutcome {
        ok: false,
        reason: "connect refused".into(),
        weight: None,
    }
}

/// A test driver: an engine (`me`) and its fake clock.
pub struct Driver {
    pub e: Engine,
    pub now: u64,
}

impl Driver {
    pub fn new(cfg: &Config) -> Driver {
        Driver {
            e: Engine::new("me", cfg, 2000),
            now: 10_000,
        }
    }

    /// One interval passes; `me` probes every listed backend.
    pub fn round(&mut self, results: &[(u8, ProbeOutcome)]) -> Vec<Change> {
        self.now += INTERVAL;
        for (n, r) in results {
            self.e.local_result(&[key(*n)], r, self.now);
        }
        self.evaluate()
    }

    /// The engine decides at the current time.
    pub fn evaluate(&mut self) -> Vec<Change> {
        self.e.evaluate(self.now, 1_700_000_000_000 + self.now)
    }

    pub fn state(&self, n: u8) -> HealthState {
        self.e.verdict("web", b(n)).unwrap().state
    }

    pub fn reason(&self, n: u8) -> String {
        self.e.verdict("web", b(n)).unwrap().reason.clone()
    }

    /// Peer `i` (id `id`) reports: backend n -> (state, last probe ok),
    /// after a streak of 3.
    pub fn peer(&mut self, i: usize, id: &str, views: &[(u8, Option<HealthState>, bool)]) {
        let obs = views
            .iter()
            .map(|(n, st, last_ok)| {
                (
                    key(*n),
                    Observation {
                        state: *st,
                        last_ok: Some(*last_ok),
                        streak: 3,
                        reason: if *last_ok {
                            "HTTP 200"
                        } else {
                            "connect timeout after 500 ms"
                        }
                        .into(),
                        last_failure: if *last_ok {
                            ""
                        } else {
                            "connect timeout after 500 ms"
                        }
                        .into(),
                        at_ms: self.now,
                        weight: None,
                    },
                )
            })
            .collect();
        self.e
            .peer_update(&format!("unix:///run/border/peer{i}.sock"), id, obs);
    }
}
