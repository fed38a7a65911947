//! The records drain: attaches to border-dp's records region, takes the
//! records out of every worker's ring about every 10 ms (at once again
//! when a pass took a full batch), and hands them to the exporters.
//!
//! border-dp makes the region; until it has, the drain retries every
//! [`OPEN_RETRY`] (a missing region is no error: the
//! `border_records_region_attached` gauge says 0). A border-dp that
//! restarts replaces the file (new inode): the drain maps the new one,
//! empties the old mapping, then drops it. Malformed slots are counted
//! and skipped.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use conf::os::files::Access;
use conf::records::{BadRecord, ConnRecord, RecordsRegion};
use tokio::sync::watch;

use super::{Exporter, Record, RecordsStats, VipNames};

/// Time between passes when the last one did not fill a batch.
pub const PASS_INTERVAL: Duration = Duration::from_millis(10);
/// Time between attempts to open a region that is missing or bad.
pub const OPEN_RETRY: Duration = Duration::from_millis(300);
/// Time between looks at whether the region file was replaced.
const REPLACED_CHECK: Duration = Duration::from_millis(250);
/// Records taken from one ring in one pass.
const BATCH: usize = 1024;
/// How often the VIP names are read again from the running config.
const NAMES_REFRESH: Duration = Duration::from_secs(1);

/// Where the VIP names come from (the manager's running config).
pub type NamesSource = Arc<dyn Fn() -> VipNames + Send + Sync>;

/// A mapped region and the file it came from.
struct Attached {
    region: RecordsRegion,
    /// (device, inode) of the path when it was opened.
    file_id: (u64, u64),
}

/// The drain's state: what it is attached to and where records go.
pub struct Drain {
    path: PathBuf,
    access: Access,
    current: Option<Attached>,
    exporters: Vec<(usize, Box<dyn Exporter>)>,
    stats: Arc<RecordsStats>,
    names_source: NamesSource,
    names: VipNames,
    names_at: Option<Instant>,
    next_open: Option<Instant>,
    next_check: Option<Instant>,
    last_open_error: Option<String>,
    batch: Vec<Record>,
}

/// (device, inode) of `path`, if it exists.
fn file_id(path: &std::path::Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

impl Drain {
    /// A drain of the region at `path` into `exporters`, counting into `stats`.
    pub fn new(
        path: PathBuf,
        access: Access,
        exporters: Vec<Box<dyn Exporter>>,
        stats: Arc<RecordsStats>,
        names_source: NamesSource,
    ) -> Drain {
        let exporters = exporters
            .into_iter()
            .map(|e| (stats.add_exporter(e.kind(), e.target()), e))
            .collect();
        Drain {
            path,
            access,
            current: None,
            exporters,
            stats,
            names_source,
            names: VipNames::default(),
            names_at: None,
            next_open: None,
            next_check: None,
            last_open_error: None,
            batch: Vec::with_capacity(BATCH),
        }
    }

    /// Opens the region if the file is there; a failure is logged when it
    /// differs from the last one.
    fn try_open(&mut self) -> Option<Attached> {
        // The file's identity is taken before it is mapped: if it is
        // replaced in between, the next check sees a new inode and maps
        // again, which costs one extra open, never a missed switch.
        let id = file_id(&self.path)?;
        match RecordsRegion::open(&self.path, self.access) {
            Ok(region) => {
                self.last_open_error = None;
                tracing::info!(path = %self.path.display(), workers = region.n_workers(), ring_slots = region.ring_slots(), dp_pid = region.pid(), "records: attached to the records region");
                Some(Attached {
                    region,
                    file_id: id,
                })
            }
            Err(e) => {
                let msg = e.to_string();
                if self.last_open_error.as_deref() != Some(&msg) {
                    tracing::warn!(error = %msg, "records: cannot open the records region (retrying)");
                    self.last_open_error = Some(msg);
                }
                None
            }
        }
    }

    /// Attaches, or moves to a new file; returns a replaced region to empty.
    fn follow_region(&mut self, now: Instant) -> Option<RecordsRegion> {
        if self.current.is_none() {
            if self.next_open.is_none_or(|t| now >= t) {
                self.next_open = Some(now + OPEN_RETRY);
                self.current = self.try_open();
                self.next_check = Some(now + REPLACED_CHECK);
            }
            return None;
        }
        if self.next_check.is_some_and(|t| now < t) {
            return None;
        }
        self.next_check = Some(now + REPLACED_CHECK);
        let seen = file_id(&self.path);
        let current = self.current.as_ref().map(|a| a.file_id);
        if seen == current {
            return None;
        }
        let old = self.current.take().map(|a| a.region);
        if seen.is_some() {
            self.current = self.try_open();
        }
        if self.current.is_some() {
            self.stats.count_switch();
        } else {
            self.next_open = Some(now + OPEN_RETRY);
        }
        tracing::info!(path = %self.path.display(), "records: the records region was replaced or removed; emptying the old one");
        old
    }

    /// Takes up to `max` records per ring from `region` into the batch;
    /// returns whether some ring had a full batch.
    fn take(&mut self, region: &RecordsRegion, max: usize) -> bool {
        let offset = region.clock_offset_ms();
        let (mut read, mut malformed) = (0u64, 0u64);
        let mut full = false;
        let batch = &mut self.batch;
        for w in 0..region.n_workers() {
            let n = region.drain(w, max, |r: Result<ConnRecord, BadRecord>| match r {
                // Both families are the VIP's (docs/config.md); a record
                // that says otherwise is not one border-dp writes.
                Ok(c) if c.client_v6 == c.backend_v6 => batch.push(Record::new(c, offset)),
                _ => malformed += 1,
            });
            read += n as u64;
            full |= n == max;
        }
        if malformed > 0 {
            tracing::debug!(malformed, "records: malformed ring slots skipped");
        }
        self.stats.count_read(read, malformed);
        full
    }

    fn export(&mut self) {
        for (i, e) in &mut self.exporters {
            let done = e.export(&self.batch, &self.names);
            self.stats.count_export(*i, done.sent, done.failed);
        }
        self.batch.clear();
    }

    /// One pass: follows the region file, empties a replaced region,
    /// drains a batch from every ring and exports it. Returns whether a
    /// ring had a full batch (then the next pass should follow at once).
    pub fn pass(&mut self, now: Instant) -> bool {
        if self.names_at.is_none_or(|t| now >= t) {
            self.names = (self.names_source)();
            self.names_at = Some(now + NAMES_REFRESH);
        }
        if let Some(old) = self.follow_region(now) {
            // Its writer is gone (or going): take everything it left.
            while self.take(&old, BATCH) {
                self.export();
            }
            self.export();
        }
        let full = match self.current.take() {
            Some(a) => {
                let full = self.take(&a.region, BATCH);
                let pending = (0..a.region.n_workers())
                    .map(|w| a.region.pending(w))
                    .collect();
                self.stats.set_pending(pending);
                self.current = Some(a);
                full
            }
            None => {
                self.stats.set_pending(Vec::new());
                false
            }
        };
        self.stats.set_attached(self.current.is_some());
        self.export();
        full
    }
}

/// Runs `drain` until `shutdown` turns true, each pass on the blocking
/// pool (exporters write files and send datagrams); a last pass on the way
/// out takes what the rings still hold.
pub fn spawn(mut drain: Drain, mut shutdown: watch::Receiver<bool>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let stopping = *shutdown.borrow();
            let r = tokio::task::spawn_blocking(move || {
                let full = drain.pass(Instant::now());
                (drain, full)
            })
            .await;
            let Ok((d, full)) = r else {
                tracing::error!("records: the drain pass panicked; records are no longer exported");
                return;
            };
            drain = d;
            if stopping {
                return;
            }
            if !full {
                tokio::select! {
                    _ = tokio::time::sleep(PASS_INTERVAL) => {}
                    r = shutdown.changed() => if r.is_err() { return },
                }
            }
        }
    })
}

/// The drain of `cfg`'s `[records]` for the region at `path`: one IPFIX
/// exporter per collector, and the JSON file.
pub fn from_config(
    records: &conf::Records,
    path: PathBuf,
    access: Access,
    stats: Arc<RecordsStats>,
    names_source: NamesSource,
) -> Drain {
    let mut exporters: Vec<Box<dyn Exporter>> = Vec::new();
    for c in &records.ipfix {
        exporters.push(Box::new(super::ipfix::IpfixExporter::new(c)));
    }
    if let Some(j) = &records.json {
        exporters.push(Box::new(super::json::JsonExporter::new(j, access)));
    }
    Drain::new(path, access, exporters, stats, names_source)
}
