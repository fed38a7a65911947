//! border-dp's main thread copies every port's `rte_eth_stats` into the
//! state region about once a second, so `borderctl counters` and
//! border-mgmt's /metrics show what the NIC counted (an empty mbuf pool as
//! `rx_nombuf`, a full Rx ring as `imissed`) without DPDK telemetry.
//! Workers take no part: reading a port's counters is a PMD call the main
//! thread makes between its looks at signals and tables.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use conf::state::{PortRole, PortStat, StateRegion};
use dpdk_ffi::{CaptureStats, PortStats};
use tracing::warn;

/// How often the statistics are copied.
pub const PORT_STATS_PERIOD: Duration = Duration::from_secs(1);

/// A port as the state region names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatPort {
    pub name: String,
    pub role: PortRole,
    pub port_id: u16,
}

/// A port's NIC statistics and, while the capture server runs, its
/// capture statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortReading {
    pub nic: PortStats,
    pub capture: Option<CaptureStats>,
}

/// Reads port `id` through DPDK.
pub fn read_port(id: u16) -> Option<PortReading> {
    Some(PortReading {
        nic: dpdk_ffi::port_stats(id).ok()?,
        capture: dpdk_ffi::capture_stats(id),
    })
}

/// `r` in [`PortStat::ALL`] order (capture statistics 0 without a capture server).
pub fn stat_values(r: &PortReading) -> [u64; PortStat::COUNT] {
    let (s, c) = (&r.nic, r.capture.unwrap_or_default());
    PortStat::ALL.map(|stat| match stat {
        PortStat::Ipackets => s.ipackets,
        PortStat::Opackets => s.opackets,
        PortStat::Ibytes => s.ibytes,
        PortStat::Obytes => s.obytes,
        PortStat::Imissed => s.imissed,
        PortStat::Ierrors => s.ierrors,
        PortStat::Oerrors => s.oerrors,
        PortStat::RxNombuf => s.rx_nombuf,
        PortStat::CaptureAccepted => c.accepted,
        PortStat::CaptureRingfull => c.ringfull,
        PortStat::CaptureNombuf => c.nombuf,
    })
}

/// Copies port statistics into the state region.
pub struct PortStatsCopier {
    state: Arc<StateRegion>,
    port_ids: Vec<u16>,
    last: Option<Instant>,
}

impl PortStatsCopier {
    /// Names the region's port slots after `ports` (in order).
    pub fn new(state: Arc<StateRegion>, ports: &[StatPort]) -> PortStatsCopier {
        let names: Vec<(&str, PortRole)> =
            ports.iter().map(|p| (p.name.as_str(), p.role)).collect();
        let named = state.name_ports(&names);
        if named < ports.len() {
            warn!(
                ports = ports.len(),
                slots = named,
                "the state region has no slot for the statistics of some ports"
            );
        }
        PortStatsCopier {
            state,
            port_ids: ports.iter().take(named).map(|p| p.port_id).collect(),
            last: None,
        }
    }

    /// Copies when [`PORT_STATS_PERIOD`] has passed since the last copy.
    pub fn tick(&mut self, read: impl Fn(u16) -> Option<PortReading>) {
        if self.last.is_none_or(|t| t.elapsed() >= PORT_STATS_PERIOD) {
            self.copy_now(read);
        }
    }

    /// Copies every port's statistics now; a port whose statistics cannot
    /// be read keeps its last copy (and its older `updated_unix_ms`).
    pub fn copy_now(&mut self, read: impl Fn(u16) -> Option<PortReading>) {
        self.last = Some(Instant::now());
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        for (slot, &id) in self.port_ids.iter().enumerate() {
            if let Some(s) = read(id) {
                self.state.set_port_stats(slot, &stat_values(&s), now_ms);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Region(std::path::PathBuf);
    impl Drop for Region {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn values_follow_the_region_order() {
        let s = PortStats {
            ipackets: 1,
            opackets: 2,
            ibytes: 3,
            obytes: 4,
            imissed: 5,
            ierrors: 6,
            oerrors: 7,
            rx_nombuf: 8,
        };
        let r = PortReading {
            nic: s,
            capture: None,
        };
        assert_eq!(stat_values(&r), [1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0]);
        let c = CaptureStats {
            accepted: 9,
            filtered: 99,
            nombuf: 11,
            ringfull: 10,
        };
        let r = PortReading {
            nic: s,
            capture: Some(c),
        };
        assert_eq!(stat_values(&r), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
    }

    #[test]
    fn copies_each_port_into_its_slot_once_a_period() {
        let g = Region(
            std::env::temp_dir().join(format!("border-portstats-{}-state", std::process::id())),
        );
        let state = Arc::new(StateRegion::create(&g.0, &[1]).unwrap());
        let ports = [
            StatPort {
                name: "ext".into(),
                role: PortRole::Data,
                port_id: 4,
            },
            StatPort {
                name: "kps-ext".into(),
                role: PortRole::Twin,
                port_id: 9,
            },
        ];
        let mut c = PortStatsCopier::new(state.clone(), &ports);
        let read = |rx: u64| {
            move |id: u16| {
                (id == 4).then_some(PortReading {
                    nic: PortStats {
                        ipackets: rx,
                        rx_nombuf: 2,
                        ..PortStats::default()
                    },
                    capture: None,
                })
            }
        };
        c.tick(read(10));
        let got = StateRegion::open(&g.0).unwrap().ports();
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].name.as_str(), got[0].role), ("ext", PortRole::Data));
        assert_eq!(got[0].get(PortStat::Ipackets), 10);
        assert_eq!(got[0].get(PortStat::RxNombuf), 2);
        assert!(got[0].updated_unix_ms > 0);
        assert_eq!(got[1].role, PortRole::Twin);
        assert_eq!(got[1].updated_unix_ms, 0, "unreadable: never copied");

        c.tick(read(20));
        assert_eq!(
            state.ports()[0].get(PortStat::Ipackets),
            10,
            "not again within the period"
        );
        c.copy_now(read(20));
        assert_eq!(state.ports()[0].get(PortStat::Ipackets), 20);
    }
}
