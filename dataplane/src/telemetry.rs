//! border-dp's commands on DPDK's telemetry socket, for `dpdk-telemetry.py`
//! and any other client of it (docs/operations.md#dpdk-telemetry).
//!
//! - `/border/info`: instance, version, pid, run state, workers, ports;
//! - `/border/counters`: every counter summed over workers;
//!   `/border/counters,<worker>`: one worker's, with its lcore, applied
//!   generation and heartbeat;
//! - `/border/ports`: port name -> ethdev port id (data ports by their
//!   `[[port]].name`, kernel twins by their interface);
//! - `/border/port_stats,<name>`: that port's `rte_eth_stats`; without a
//!   name, every port's as `<name>/<stat>`.
//!
//! DPDK 22.11 takes reply names of `A-Za-z0-9_/` only, so other characters
//! of a port name (`kb-ext`) show as `_` (`kb_ext`); a parameter may use
//! either spelling.
//!
//! Handlers run on DPDK's telemetry thread. They read only the state region
//! (atomics the workers publish to, the same ones `borderctl counters`
//! reads from another process) and `rte_eth_stats_get`, never a worker's
//! own state. The registration is dropped before the ports close, so a
//! late request answers `null` instead of reading a closed port.

use std::sync::Arc;

use conf::counters::Counter;
use conf::state::{PortStat, RunState, StateRegion};
use dpdk_ffi::{TelemetryCommand, TelemetryDict};

use crate::port_stats::{read_port, stat_values, PortReading};

/// Where a reply goes: DPDK's dictionary, or a map in tests.
pub trait Reply {
    fn u64(&mut self, name: &str, value: u64);
    fn string(&mut self, name: &str, value: &str);
}

impl Reply for TelemetryDict<'_> {
    fn u64(&mut self, name: &str, value: u64) {
        TelemetryDict::u64(self, name, value)
    }
    fn string(&mut self, name: &str, value: &str) {
        TelemetryDict::string(self, name, value)
    }
}

/// `name` as DPDK accepts it in a reply: characters other than
/// `A-Za-z0-9_/` become `_`.
pub fn reply_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '/' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A port as telemetry names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedPort {
    pub name: String,
    pub port_id: u16,
}

/// What the handlers read.
pub struct Source {
    pub instance: String,
    pub state: Arc<StateRegion>,
    pub ports: Vec<NamedPort>,
}

fn run_state_name(s: RunState) -> String {
    match s {
        RunState::Starting => "starting".into(),
        RunState::Running => "running".into(),
        RunState::Stopped => "stopped".into(),
        RunState::Unknown(v) => format!("unknown({v})"),
    }
}

impl Source {
    /// `/border/info`.
    pub fn info(&self, out: &mut impl Reply) {
        out.string("instance", &self.instance);
        out.string("version", env!("CARGO_PKG_VERSION"));
        out.u64("pid", u64::from(self.state.pid()));
        out.string("run_state", &run_state_name(self.state.run_state()));
        out.u64("workers", self.state.n_workers() as u64);
        out.u64("ports", self.ports.len() as u64);
    }

    /// `/border/counters[,<worker>]`; false for a worker that does not exist.
    pub fn counters(&self, params: &str, out: &mut impl Reply) -> bool {
        let params = params.trim();
        if params.is_empty() {
            for (c, v) in self.state.totals() {
                out.u64(c.name(), v);
            }
            return true;
        }
        let Some(w) = params.parse().ok().and_then(|w| self.state.worker(w)) else {
            return false;
        };
        out.u64("lcore", w.lcore());
        out.u64("applied_generation", w.applied_generation());
        out.u64("heartbeat", w.heartbeat());
        for &c in Counter::ALL {
            out.u64(c.name(), w.get(c));
        }
        true
    }

    /// `/border/ports`.
    pub fn ports(&self, out: &mut impl Reply) {
        for p in &self.ports {
            out.u64(&reply_name(&p.name), u64::from(p.port_id));
        }
    }

    /// `/border/port_stats[,<name>]` with `read` as the stats reader; false
    /// for an unknown port or one whose stats cannot be read.
    pub fn port_stats(
        &self,
        params: &str,
        read: impl Fn(u16) -> Option<PortReading>,
        out: &mut impl Reply,
    ) -> bool {
        let wanted = params.trim();
        let mut found = false;
        for p in self
            .ports
            .iter()
            .filter(|p| wanted.is_empty() || p.name == wanted || reply_name(&p.name) == wanted)
        {
            let Some(s) = read(p.port_id) else {
                return false;
            };
            let prefix = if wanted.is_empty() {
                format!("{}/", reply_name(&p.name))
            } else {
                String::new()
            };
            for (stat, v) in PortStat::ALL.iter().zip(stat_values(&s)) {
                out.u64(&format!("{prefix}{}", stat.name()), v);
            }
            found = true;
        }
        found
    }
}

/// The registered commands; dropping them makes every one answer `null`.
#[derive(Debug)]
pub struct Telemetry {
    _commands: Vec<TelemetryCommand>,
}

/// Registers border-dp's commands over `source`.
pub fn register(source: Source) -> Result<Telemetry, dpdk_ffi::DpdkError> {
    // Counters, plus a worker's own fields, fit one reply.
    const { assert!(Counter::COUNT + 3 <= dpdk_ffi::MAX_DICT_ENTRIES) };
    let source = Arc::new(source);
    let s = source.clone();
    let info = TelemetryCommand::register(
        "/border/info",
        "border-dp: instance, version, pid, run state, workers, ports",
        move |_, out| {
            s.info(out);
            true
        },
    )?;
    let s = source.clone();
    let counters = TelemetryCommand::register(
        "/border/counters",
        "border-dp counters summed over workers; parameter: a worker index for one worker's",
        move |p, out| s.counters(p, out),
    )?;
    let s = source.clone();
    let ports = TelemetryCommand::register(
        "/border/ports",
        "border-dp ports (and kernel twins) by name, with their ethdev port id",
        move |_, out| {
            s.ports(out);
            true
        },
    )?;
    let s = source;
    let stats = TelemetryCommand::register(
        "/border/port_stats",
        "border-dp port statistics; parameter: a port name (default: every port, as name/stat)",
        move |p, out| s.port_stats(p, read_port, out),
    )?;
    Ok(Telemetry {
        _commands: vec![info, counters, ports, stats],
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[derive(Default)]
    struct Map(BTreeMap<String, String>);

    impl Reply for Map {
        fn u64(&mut self, name: &str, value: u64) {
            self.0.insert(name.into(), value.to_string());
        }
        fn string(&mut self, name: &str, value: &str) {
            self.0.insert(name.into(), value.into());
        }
    }

    fn source(tag: &str) -> (Source, tempfile_path::Guard) {
        let guard = tempfile_path::Guard::new(tag);
        let state = StateRegion::create(&guard.0, &[3, 5]).expect("state region");
        state.set_run_state(RunState::Running);
        let b = state.worker(1).unwrap().counters();
        b.add(Counter::ALL[0], 7);
        state.worker(0).unwrap().counters().add(Counter::ALL[0], 2);
        let ports = vec![
            NamedPort {
                name: "ext".into(),
                port_id: 0,
            },
            NamedPort {
                name: "bx-ext".into(),
                port_id: 2,
            },
        ];
        let s = Source {
            instance: "t".into(),
            state: Arc::new(state),
            ports,
        };
        (s, guard)
    }

    mod tempfile_path {
        pub struct Guard(pub std::path::PathBuf);
        impl Guard {
            pub fn new(tag: &str) -> Guard {
                Guard(
                    std::env::temp_dir()
                        .join(format!("border-tel-{tag}-{}-state", std::process::id())),
                )
            }
        }
        impl Drop for Guard {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(&self.0);
            }
        }
    }

    #[test]
    fn reply_names_keep_what_dpdk_accepts() {
        assert_eq!(reply_name("kb-ext.0"), "kb_ext_0");
        assert_eq!(reply_name("Ext_1/x"), "Ext_1/x");
        for c in Counter::ALL {
            assert_eq!(reply_name(c.name()), c.name());
        }
    }

    #[test]
    fn counters_sum_workers_or_show_one() {
        let (s, _g) = source("counters");
        let first = Counter::ALL[0].name();
        let mut all = Map::default();
        assert!(s.counters("", &mut all));
        assert_eq!(all.0[first], "9");
        assert_eq!(all.0.len(), Counter::COUNT);
        let mut one = Map::default();
        assert!(s.counters("1", &mut one));
        assert_eq!(one.0[first], "7");
        assert_eq!(one.0["lcore"], "5");
        assert!(!s.counters("2", &mut Map::default()));
        assert!(!s.counters("x", &mut Map::default()));
    }

    #[test]
    fn info_and_ports() {
        let (s, _g) = source("info");
        let mut m = Map::default();
        s.info(&mut m);
        assert_eq!(m.0["instance"], "t");
        assert_eq!(m.0["run_state"], "running");
        assert_eq!(m.0["workers"], "2");
        assert_eq!(m.0["pid"], std::process::id().to_string());
        let mut p = Map::default();
        s.ports(&mut p);
        assert_eq!(p.0["bx_ext"], "2");
    }

    #[test]
    fn port_stats_by_name_or_all() {
        let (s, _g) = source("stats");
        let read = |id: u16| {
            Some(PortReading {
                nic: dpdk_ffi::PortStats {
                    ipackets: 10 + u64::from(id),
                    ..Default::default()
                },
                capture: None,
            })
        };
        let mut one = Map::default();
        assert!(s.port_stats("bx-ext", read, &mut one));
        assert_eq!(one.0["ipackets"], "12");
        assert_eq!(one.0.len(), 11);
        let mut by_reply_name = Map::default();
        assert!(s.port_stats("bx_ext", read, &mut by_reply_name));
        assert_eq!(by_reply_name.0, one.0);
        let mut all = Map::default();
        assert!(s.port_stats("", read, &mut all));
        assert_eq!(all.0["ext/ipackets"], "10");
        assert_eq!(all.0["bx_ext/ipackets"], "12");
        assert!(!s.port_stats("nope", read, &mut Map::default()));
        assert!(!s.port_stats("ext", |_| None, &mut Map::default()));
    }
}
