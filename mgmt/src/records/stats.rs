//! The counters of the records drain and its exporters, shared between the
//! drain task (which counts) and the Prometheus exporter (which reads a
//! [`RecordsReport`] of them): the `border_records_*` families.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::prom::Exposition;

/// Counters of one exporter.
#[derive(Debug)]
struct ExporterCounters {
    kind: &'static str,
    target: String,
    sent: AtomicU64,
    failed: AtomicU64,
}

/// What the drain has done so far. Written by the drain task only.
#[derive(Debug, Default)]
pub struct RecordsStats {
    attached: AtomicBool,
    read: AtomicU64,
    malformed: AtomicU64,
    region_switches: AtomicU64,
    /// Records waiting in each worker's ring at the last pass.
    pending: Mutex<Vec<u64>>,
    exporters: Mutex<Vec<ExporterCounters>>,
}

/// A snapshot of [`RecordsStats`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordsReport {
    /// border-mgmt has the records region mapped.
    pub attached: bool,
    /// Records taken from the rings (malformed ones included).
    pub read: u64,
    /// Slots that held no valid record.
    pub malformed: u64,
    /// Times border-mgmt moved to a new region (border-dp restarted).
    pub region_switches: u64,
    /// Records waiting in each worker's ring.
    pub pending: Vec<u64>,
    /// Each exporter's counts.
    pub exporters: Vec<ExporterReport>,
}

/// The counts of one exporter.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExporterReport {
    /// `ipfix` or `json`.
    pub kind: &'static str,
    /// The collector address or the file path.
    pub target: String,
    /// Records sent or written.
    pub sent: u64,
    /// Records it could not send or write.
    pub failed: u64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl RecordsStats {
    /// Registers an exporter; returns its index for [`Self::count_export`].
    pub fn add_exporter(&self, kind: &'static str, target: String) -> usize {
        let mut e = lock(&self.exporters);
        e.push(ExporterCounters {
            kind,
            target,
            sent: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        });
        e.len() - 1
    }

    pub fn count_export(&self, exporter: usize, sent: u64, failed: u64) {
        if let Some(e) = lock(&self.exporters).get(exporter) {
            e.sent.fetch_add(sent, Ordering::Relaxed);
            e.failed.fetch_add(failed, Ordering::Relaxed);
        }
    }

    pub fn count_read(&self, read: u64, malformed: u64) {
        self.read.fetch_add(read, Ordering::Relaxed);
        self.malformed.fetch_add(malformed, Ordering::Relaxed);
    }

    pub fn count_switch(&self) {
        self.region_switches.fetch_add(1, Ordering::Relaxed);
    }

    pub fn set_attached(&self, attached: bool) {
        self.attached.store(attached, Ordering::Relaxed);
    }

    pub fn set_pending(&self, pending: Vec<u64>) {
        *lock(&self.pending) = pending;
    }

    pub fn report(&self) -> RecordsReport {
        RecordsReport {
            attached: self.attached.load(Ordering::Relaxed),
            read: self.read.load(Ordering::Relaxed),
            malformed: self.malformed.load(Ordering::Relaxed),
            region_switches: self.region_switches.load(Ordering::Relaxed),
            pending: lock(&self.pending).clone(),
            exporters: lock(&self.exporters)
                .iter()
                .map(|e| ExporterReport {
                    kind: e.kind,
                    target: e.target.clone(),
                    sent: e.sent.load(Ordering::Relaxed),
                    failed: e.failed.load(Ordering::Relaxed),
                })
                .collect(),
        }
    }
}

/// Name, help and value of a per-exporter counter.
type ExporterFamily = (&'static str, &'static str, fn(&ExporterReport) -> u64);

/// The `border_records_*` families (nothing without `[records]`).
pub fn render(o: &mut Exposition, r: Option<&RecordsReport>) {
    let Some(r) = r else {
        return;
    };
    let plain: [(&str, &str, &str, u64); 4] = [
        (
            "border_records_region_attached",
            "gauge",
            "1 while border-mgmt has border-dp's records region mapped",
            u64::from(r.attached),
        ),
        (
            "border_records_read_total",
            "counter",
            "connection records taken from the workers' rings (malformed slots included)",
            r.read,
        ),
        (
            "border_records_malformed_total",
            "counter",
            "ring slots that held no valid connection record (dropped)",
            r.malformed,
        ),
        (
            "border_records_region_switches_total",
            "counter",
            "times border-mgmt moved to a new records region (border-dp restarted)",
            r.region_switches,
        ),
    ];
    for (name, kind, help, v) in plain {
        o.one(name, kind, help, v);
    }
    o.family(
        "border_records_pending",
        "gauge",
        "connection records waiting in each worker's ring",
    );
    for (w, n) in r.pending.iter().enumerate() {
        o.sample("border_records_pending", &[("worker", &w.to_string())], n);
    }
    let per_exporter: [ExporterFamily; 2] = [
        (
            "border_records_exported_total",
            "connection records sent by each exporter",
            |e| e.sent,
        ),
        (
            "border_records_export_errors_total",
            "connection records an exporter could not send or write (lost for it)",
            |e| e.failed,
        ),
    ];
    for (name, help, get) in per_exporter {
        o.family(name, "counter", help);
        for e in &r.exporters {
            o.sample(name, &[("exporter", e.kind), ("target", &e.target)], get(e));
        }
    }
}
