//! Following the tables region: attaching to it when it appears or is
//! replaced, handing every worker its own reader, and waking the workers
//! for each publication.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use conf::tables::{Published, TablesReader};
use dpdk_ffi::Mbuf;
use tracing::{info, warn};

use crate::tables_source::{reader_inbox, ReaderInbox};
use crate::worker::Handoff;

/// How long the main thread sleeps between looks at signals and workers.
pub(super) const MAIN_LOOP_PERIOD: Duration = Duration::from_millis(50);
/// How often the main thread looks for a new or replaced tables region.
pub(super) const FOLLOW_PERIOD: Duration = Duration::from_millis(500);

/// Opens one reader per worker and hands them over (a new or replaced region).
pub(super) fn hand_readers(
    path: &std::path::Path,
    inboxes: &[ReaderInbox],
) -> Result<TablesReader, conf::tables::TablesError> {
    let watch = TablesReader::open(path)?;
    for inbox in inboxes {
        let r = TablesReader::open(path)?;
        // The inbox holds one reader; a stale one not yet picked up is replaced.
        let _ = inbox.force_push(r);
    }
    Ok(watch)
}

/// The tables region border-dp follows: border-mgmt's (or its own in
/// standalone mode). It may not exist yet, and may be replaced.
pub(super) struct TablesFollow {
    path: PathBuf,
    /// One inbox per worker, through which it gets its own reader.
    pub(super) inboxes: Vec<ReaderInbox>,
    /// The main thread's own reader, to wait on publications; None while
    /// there is no region.
    watch: Option<TablesReader>,
    /// The last publication the workers were woken for.
    seen: Published,
    followed: Instant,
}

impl TablesFollow {
    pub(super) fn attach(path: PathBuf, workers: usize) -> TablesFollow {
        let inboxes: Vec<ReaderInbox> = (0..workers).map(|_| reader_inbox()).collect();
        let watch = match hand_readers(&path, &inboxes) {
            Ok(r) => Some(r),
            Err(e) => {
                info!(path = %path.display(), reason = %e, "waiting for border-mgmt to publish tables");
                None
            }
        };
        let seen = watch.as_ref().map_or(Published::NONE, |w| w.current());
        TablesFollow {
            path,
            inboxes,
            watch,
            seen,
            followed: Instant::now(),
        }
    }

    /// The generation the workers are to forward on (0: no region).
    pub(super) fn published_generation(&self) -> u64 {
        if self.watch.is_some() {
            self.seen.generation
        } else {
            0
        }
    }

    /// Sleeps up to MAIN_LOOP_PERIOD, but wakes for every publication and
    /// wakes the workers for it: one asleep on its Rx interrupts then
    /// adopts the new generation at once, not at the end of its bounded wait.
    pub(super) fn wait(&mut self, handoff: &Handoff<Mbuf>) {
        match &self.watch {
            Some(w) => {
                w.wait_published(self.seen, MAIN_LOOP_PERIOD);
                let now = w.current();
                if now != self.seen {
                    self.seen = now;
                    handoff.ring_all();
                }
            }
            None => std::thread::sleep(MAIN_LOOP_PERIOD),
        }
    }

    /// Every FOLLOW_PERIOD: attaches to a region that appeared (mgmt
    /// started) or replaced the one followed. Returns whether it looked.
    pub(super) fn follow(&mut self, handoff: &Handoff<Mbuf>) -> bool {
        if self.followed.elapsed() < FOLLOW_PERIOD {
            return false;
        }
        self.followed = Instant::now();
        if !self.watch.as_ref().is_none_or(|w| w.replaced()) {
            return true;
        }
        match hand_readers(&self.path, &self.inboxes) {
            Ok(r) => {
                info!(path = %self.path.display(), generation = r.current().generation, "attached to tables region");
                self.seen = r.current();
                self.watch = Some(r);
                handoff.ring_all();
            }
            Err(_) if self.watch.is_some() => {
                warn!(path = %self.path.display(), "tables region gone; forwarding on the last tables");
                self.watch = None;
            }
            Err(_) => {}
        }
        true
    }
}
