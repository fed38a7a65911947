//! What border-dp tells its service manager (`conf::os::notify`): `READY=1`
//! once every worker polls its ports on the published table generation,
//! `WATCHDOG=1` only while every worker's heartbeat advances (a wedged
//! worker stops the pings, and systemd's `WatchdogSec=` restarts the
//! process), `STOPPING=1` when it stops. The main thread looks once per
//! loop; nothing is sent without `NOTIFY_SOCKET`.

use std::time::{Duration, Instant};

use conf::os::notify::ServiceNotify;
use conf::state::StateRegion;
use tracing::{error, info, warn};

/// How long polling workers may take to apply the published tables before
/// border-dp says it is ready anyway (a refused generation is never applied).
const ADOPT_GRACE: Duration = Duration::from_secs(5);

/// The main thread's view of readiness and worker liveness.
pub(super) struct Readiness {
    notify: ServiceNotify,
    ready: bool,
    /// When every worker was first seen polling.
    polling_since: Option<Instant>,
    /// Every worker's heartbeat at the last watchdog ping.
    beats: Vec<u64>,
    /// Workers whose heartbeat stood still when a ping was due (logged once).
    stuck: Vec<usize>,
}

impl Readiness {
    pub(super) fn from_env() -> Readiness {
        Readiness {
            notify: ServiceNotify::from_env(),
            ready: false,
            polling_since: None,
            beats: Vec::new(),
            stuck: Vec::new(),
        }
    }

    /// One look: `READY=1` when every worker has polled and applied
    /// `published` (0: no tables yet, forwarding only the host's traffic),
    /// then a watchdog ping when due and every heartbeat moved.
    pub(super) fn tick(&mut self, state: &StateRegion, published: u64) {
        if !self.notify.enabled() {
            return;
        }
        let workers: Vec<(u64, u64)> = (0..state.n_workers())
            .filter_map(|i| state.worker(i))
            .map(|w| (w.heartbeat(), w.applied_generation()))
            .collect();
        if !self.ready {
            let all_polling = workers.iter().all(|&(beat, _)| beat > 0);
            let all_applied = workers.iter().all(|&(_, applied)| applied >= published);
            if !all_polling {
                return;
            }
            let polling_since = *self.polling_since.get_or_insert_with(Instant::now);
            // Workers that refused the published generation forward on
            // what they have: say so rather than never becoming ready
            // (systemd would fail the start and restart into the same).
            let status = if all_applied {
                format!(
                    "forwarding: {} workers, tables generation {published}",
                    workers.len()
                )
            } else if polling_since.elapsed() >= ADOPT_GRACE {
                warn!(
                    generation = published,
                    "workers have not applied the published tables; ready anyway (they forward on what they have)"
                );
                format!(
                    "forwarding: {} workers, tables generation {published} not applied by every worker",
                    workers.len()
                )
            } else {
                return;
            };
            self.ready = true;
            self.beats = workers.iter().map(|&(beat, _)| beat).collect();
            self.notify.ready(&status);
            info!(generation = published, "told the service manager: ready");
            return;
        }
        if !self.notify.ping_due() {
            return;
        }
        let stuck: Vec<usize> = workers
            .iter()
            .zip(&self.beats)
            .enumerate()
            .filter(|(_, (&(now, _), &then))| now == then)
            .map(|(i, _)| i)
            .collect();
        if stuck.is_empty() {
            if !self.stuck.is_empty() {
                info!("every worker's heartbeat advances again: watchdog pings resume");
                self.notify.status(&format!(
                    "forwarding: {} workers, tables generation {published}",
                    workers.len()
                ));
                self.stuck.clear();
            }
            self.beats = workers.iter().map(|&(beat, _)| beat).collect();
            self.notify.ping();
        } else if stuck != self.stuck {
            error!(
                workers = ?stuck,
                "worker heartbeat stopped: withholding the watchdog ping (systemd restarts border-dp after WatchdogSec)"
            );
            self.notify
                .status(&format!("wedged: heartbeat of workers {stuck:?} stopped"));
            self.stuck = stuck;
        }
    }

    /// `STOPPING=1`: the workers are being stopped.
    pub(super) fn stopping(&mut self) {
        self.notify.stopping("stopping workers");
    }
}
