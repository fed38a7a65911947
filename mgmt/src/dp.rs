//! What border-mgmt knows about the dataplane: looks at the state region that
//! border-dp writes (per worker: lcore, applied generation, heartbeat,
//! counters; keyed per-VIP/per-backend statistics), remembers when each
//! worker's heartbeat last moved (liveness), and reports changes as events.
//!
//! The region is mapped afresh for each look: a restarted border-dp
//! re-initialises the same file, and a long-held mapping would outlive it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use conf::counters::Counter;
use conf::os::process_alive;
use conf::state::{FlowStat, RunState, StateError, StateRegion};

use crate::model::{DpSnap, EventKind, WorkerSnap};

#[derive(Clone, Debug)]
struct Track {
    heartbeat: u64,
    moved_at: Instant,
    alive: bool,
    /// Seen moving (or stalled) at least once since first sight.
    judged: bool,
    /// Heartbeat at first sight.
    first_heartbeat: u64,
    refused: u64,
}

/// Watches the state region; keeps the heartbeat history liveness needs.
#[derive(Debug)]
pub struct DpWatcher {
    path: PathBuf,
    grace: Duration,
    /// pid and run state of the dataplane last seen, and whether it was present.
    last: Option<(bool, u32, bool, String)>,
    /// pid the tracks belong to.
    pid: u32,
    tracks: Vec<Track>,
    last_problem: Option<String>,
}

/// Opens the state region read-only; `Ok(None)` when it does not exist.
pub fn open_region(path: &Path) -> Result<Option<StateRegion>, StateError> {
    match StateRegion::open(path) {
        Ok(r) => Ok(Some(r)),
        Err(StateError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

impl DpWatcher {
    /// Watches the region at `path`; a worker is stalled when its heartbeat
    /// did not move for `grace`.
    pub fn new(path: PathBuf, grace: Duration) -> DpWatcher {
        DpWatcher {
            path,
            grace,
            last: None,
            pid: 0,
            tracks: Vec::new(),
            last_problem: None,
        }
    }

    /// Path of the state region.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Looks at the region now, updates the liveness history and returns
    /// the snapshot and the events (changes since the last look).
    pub fn sample(&mut self) -> (DpSnap, Vec<EventKind>) {
        let now = Instant::now();
        let mut events = Vec::new();
        let region = match open_region(&self.path) {
            Ok(r) => r,
            Err(e) => {
                let msg = e.to_string();
                if self.last_problem.as_deref() != Some(msg.as_str()) {
                    tracing::warn!("{msg}");
                    self.last_problem = Some(msg.clone());
                }
                let snap = DpSnap {
                    present: false,
                    problem: Some(msg),
                    ..DpSnap::default()
                };
                self.note_dp(&snap, &mut events);
                self.tracks.clear();
                return (snap, events);
            }
        };
        self.last_problem = None;
        let Some(region) = region else {
            let snap = DpSnap::default();
            self.note_dp(&snap, &mut events);
            self.tracks.clear();
            return (snap, events);
        };
        let pid = region.pid();
        let run_state = region.run_state();
        let mut snap = DpSnap {
            present: true,
            problem: None,
            pid,
            pid_alive: process_alive(pid),
            run_state: Some(run_state),
            workers: Vec::with_capacity(region.n_workers()),
        };
        let fresh = pid != self.pid || self.tracks.len() != region.n_workers();
        if fresh {
            self.pid = pid;
            self.tracks.clear();
        }
        let running = snap.has_readers();
        for i in 0..region.n_workers() {
            let Some(w) = region.worker(i) else { break };
            let (heartbeat, applied) = (w.heartbeat(), w.applied_generation());
            let refused = w.get(Counter::TablesRefused);
            if fresh {
                // First sight: presumed alive until a full grace period passes.
                self.tracks.push(Track {
                    heartbeat,
                    moved_at: now,
                    alive: running,
                    judged: false,
                    first_heartbeat: heartbeat,
                    refused,
                });
            }
            let t = &mut self.tracks[i];
            if heartbeat != t.heartbeat {
                t.heartbeat = heartbeat;
                t.moved_at = now;
            }
            let alive = running && now.duration_since(t.moved_at) < self.grace;
            // The first movement after first sight confirms a presumed-live worker.
            let confirm = alive && !t.judged && heartbeat != t.first_heartbeat;
            if alive != t.alive || confirm {
                t.alive = alive;
                t.judged = true;
                if running || !alive {
                    if alive {
                        tracing::info!(
                            worker = i,
                            lcore = w.lcore(),
                            applied_generation = applied,
                            "worker alive: heartbeat moving"
                        );
                    } else {
                        tracing::warn!(
                            worker = i,
                            lcore = w.lcore(),
                            heartbeat,
                            "worker stalled: heartbeat not moving"
                        );
                    }
                    events.push(EventKind::WorkerLiveness {
                        worker: i as u32,
                        lcore: w.lcore(),
                        alive,
                        applied_generation: applied,
                    });
                }
            }
            if refused > t.refused {
                tracing::error!(
                    worker = i,
                    lcore = w.lcore(),
                    refused,
                    "worker refused a published table generation (kept the previous one)"
                );
                events.push(EventKind::TablesRefused {
                    worker: i as u32,
                    lcore: w.lcore(),
                    refused_total: refused,
                });
            }
            t.refused = refused;
            snap.workers.push(WorkerSnap {
                lcore: w.lcore(),
                applied_generation: applied,
                heartbeat,
                alive,
                heartbeat_age: now.duration_since(t.moved_at),
            });
        }
        self.note_dp(&snap, &mut events);
        (snap, events)
    }

    fn note_dp(&mut self, snap: &DpSnap, events: &mut Vec<EventKind>) {
        let key = (
            snap.present,
            snap.pid,
            snap.pid_alive,
            snap.run_state_name(),
        );
        if self.last.as_ref() == Some(&key) {
            return;
        }
        if snap.present {
            if snap.run_state != Some(RunState::Stopped) && !snap.pid_alive {
                tracing::warn!(
                    pid = snap.pid,
                    "border-dp is gone without marking its state region stopped (killed?)"
                );
            } else {
                tracing::info!(
                    pid = snap.pid,
                    workers = snap.workers.len(),
                    "dataplane {}",
                    snap.run_state_name()
                );
            }
        } else if self.last.is_some() || snap.problem.is_none() {
            tracing::info!(
                "border-dp is not running (no {}); waiting for it",
                self.path.display()
            );
        }
        events.push(EventKind::Dataplane {
            present: snap.present,
            pid: snap.pid,
            pid_alive: snap.pid_alive,
            run_state: snap.run_state_name(),
        });
        self.last = Some(key);
    }
}

/// Every counter of every worker, and per VIP / per backend flow statistics
/// summed over workers, read in one look.
#[derive(Clone, Debug, Default)]
pub struct StatsSnap {
    /// Region present.
    pub present: bool,
    /// Per worker: lcore and counter values in [`Counter::ALL`] order.
    pub workers: Vec<(u64, Vec<u64>)>,
    /// Per VIP (config order): totals and per backend (config order).
    pub vips: Vec<([u64; 4], Vec<[u64; 4]>)>,
    /// Full-NAT tuple use per local address, summed over workers.
    pub local_pools: Vec<conf::state::LocalPoolUse>,
    /// Per port, as border-dp last copied its NIC statistics.
    pub ports: Vec<conf::state::PortSnapshot>,
}

/// Stat keys: per VIP its key and its backends' ids.
pub type StatKeys = Vec<(u32, Vec<u32>)>;

/// Reads counters and the flow statistics of `keys` (per VIP its
/// [`conf::state::vip_stat_key`] and its backends' ids).
pub fn read_stats(path: &Path, keys: &StatKeys) -> StatsSnap {
    let Ok(Some(region)) = open_region(path) else {
        return StatsSnap {
            vips: keys
                .iter()
                .map(|(_, b)| ([0; 4], vec![[0; 4]; b.len()]))
                .collect(),
            ..StatsSnap::default()
        };
    };
    let workers: Vec<_> = (0..region.n_workers())
        .filter_map(|i| region.worker(i))
        .collect();
    let flow = |get: &dyn Fn(FlowStat) -> u64| -> [u64; 4] {
        let mut out = [0u64; 4];
        for (i, s) in FlowStat::ALL.iter().enumerate() {
            out[i] = get(*s);
        }
        out
    };
    StatsSnap {
        present: true,
        local_pools: region.local_pool_totals(),
        ports: region.ports(),
        workers: workers
            .iter()
            .map(|w| (w.lcore(), Counter::ALL.iter().map(|&c| w.get(c)).collect()))
            .collect(),
        vips: keys
            .iter()
            .map(|(vk, bks)| {
                let v = flow(&|s| {
                    workers
                        .iter()
                        .map(|w| w.vip_stats().total(*vk, s))
                        .fold(0u64, u64::wrapping_add)
                });
                let b = bks
                    .iter()
                    .map(|bk| {
                        flow(&|s| {
                            workers
                                .iter()
                                .map(|w| w.backend_stats().total(*bk, s))
                                .fold(0u64, u64::wrapping_add)
                        })
                    })
                    .collect();
                (v, b)
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn liveness_follows_the_heartbeat() {
        let p = std::env::temp_dir().join(format!("border-mgmt-dp-{}", std::process::id()));
        let mut w = DpWatcher::new(p.clone(), Duration::from_millis(300));
        let (s, ev) = w.sample();
        assert!(!s.present && !s.has_readers());
        assert_eq!(ev.len(), 1, "{ev:?}");

        let region = StateRegion::create(&p, &[1, 2]).unwrap();
        region.set_run_state(RunState::Running);
        let (s, _) = w.sample();
        assert!(s.has_readers());
        assert!(
            s.workers.iter().all(|w| w.alive),
            "presumed alive at first sight"
        );
        let c0 = region.worker(0).unwrap().counters();
        // Worker 0 beats on every look; worker 1 never does and is judged
        // stalled once the grace period has passed (bounded wait).
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut events = Vec::new();
        let s = loop {
            c0.beat();
            let (s, ev) = w.sample();
            events.extend(ev);
            if !s.workers[1].alive || Instant::now() > deadline {
                break s;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(!s.workers[1].alive, "worker 1 never beat");
        c0.beat();
        let (s, _) = w.sample();
        assert!(s.workers[0].alive);
        assert!(events.iter().any(|e| matches!(
            e,
            EventKind::WorkerLiveness {
                worker: 1,
                alive: false,
                ..
            }
        )));
        assert!(events.iter().any(|e| matches!(
            e,
            EventKind::WorkerLiveness {
                worker: 0,
                alive: true,
                ..
            }
        )));

        c0.add(Counter::TablesRefused, 1);
        let (_, ev) = w.sample();
        assert!(ev.iter().any(|e| matches!(
            e,
            EventKind::TablesRefused {
                refused_total: 1,
                ..
            }
        )));

        region.set_run_state(RunState::Stopped);
        let (s, _) = w.sample();
        assert!(!s.has_readers() && s.workers.iter().all(|w| !w.alive));
        std::fs::remove_file(&p).unwrap();
    }
}
