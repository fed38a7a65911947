//! Connection records (docs/records.md): border-mgmt drains the
//! records border-dp's workers write into the records region
//! ([`conf::records`]) and exports them as IPFIX to collectors and/or as
//! JSON lines to a file.
//!
//! - [`drain`]: the task that attaches to the region and moves records to
//!   the exporters;
//! - [`ipfix`]: the RFC 7011 encoder and its UDP exporter;
//! - [`json`]: the JSON-lines file with size-based rotation;
//! - [`stats`]: the counters behind the `border_records_*` metrics.

pub mod drain;
pub mod ipfix;
pub mod json;
pub mod stats;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use conf::records::ConnRecord;
use conf::{Config, Protocol};

pub use stats::{RecordsReport, RecordsStats};

/// A record as exporters see it: the connection and its times in unix
/// milliseconds (the workers' clock plus the region's offset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    pub conn: ConnRecord,
    pub start_unix_ms: u64,
    pub end_unix_ms: u64,
}

impl Record {
    /// `conn` with its worker-clock times moved by `clock_offset_ms`
    /// ([`conf::records::RecordsRegion::clock_offset_ms`]); a time that
    /// would fall before 1970 is 0.
    pub fn new(conn: ConnRecord, clock_offset_ms: i64) -> Record {
        let unix = |ms: u64| {
            (i128::from(ms) + i128::from(clock_offset_ms)).clamp(0, i128::from(u64::MAX)) as u64
        };
        Record {
            start_unix_ms: unix(conn.start_ms),
            end_unix_ms: unix(conn.end_ms),
            conn,
        }
    }
}

/// The running config's VIP names by (address, port, IP protocol), for
/// the `vip_name` of JSON records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VipNames(HashMap<(IpAddr, u16, u8), Arc<str>>);

impl VipNames {
    /// The VIPs of `cfg`.
    pub fn of(cfg: &Config) -> VipNames {
        VipNames(
            cfg.vips
                .iter()
                .map(|v| {
                    let proto = match v.protocol {
                        Protocol::Tcp => 6,
                        Protocol::Udp => 17,
                    };
                    ((v.address, v.port, proto), Arc::from(v.name.as_str()))
                })
                .collect(),
        )
    }

    /// The name of the VIP the record's connection came to, if the running
    /// config has one at that address, port and protocol.
    pub fn of_record(&self, r: &ConnRecord) -> Option<&str> {
        self.0.get(&(r.vip_ip(), r.vip_port, r.proto)).map(|n| &**n)
    }
}

/// One way out for records. Called on every drain pass, also with no
/// records (an exporter may have periodic work, as IPFIX templates).
pub trait Exporter: Send {
    /// `ipfix` or `json`: the `exporter` label of its metrics.
    fn kind(&self) -> &'static str;
    /// Where it sends: the `target` label (collector address, file path).
    fn target(&self) -> String;
    /// Exports `records`; returns how many went out and how many failed.
    fn export(&mut self, records: &[Record], vips: &VipNames) -> Exported;
}

/// What an [`Exporter::export`] call did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Exported {
    pub sent: u64,
    pub failed: u64,
}

/// Starts the records drain of `m`'s `[records]` (nothing without it),
/// until `shutdown` turns true. The region is `m`'s `paths.records`; the
/// VIP names follow the running config.
pub fn start(
    m: &Arc<crate::Manager>,
    shutdown: tokio::sync::watch::Receiver<bool>,
) -> Option<tokio::task::JoinHandle<()>> {
    let cfg = m.config();
    let records = cfg.records.as_ref()?;
    let stats = m.records_stats()?.clone();
    // Resolved once already when the API socket was bound.
    let access = conf::os::files::Access::for_group_name(cfg.mgmt.operators_group.as_deref())
        .unwrap_or(conf::os::files::Access::PRIVATE);
    let weak = Arc::downgrade(m);
    let names: drain::NamesSource = Arc::new(move || {
        weak.upgrade()
            .map(|m| VipNames::of(&m.config()))
            .unwrap_or_default()
    });
    let path = m.options().paths.records.clone();
    tracing::info!(
        path = %path.display(),
        ipfix_collectors = records.ipfix.len(),
        json = %records.json.as_ref().map_or("off".into(), |j| j.path.display().to_string()),
        "records: exporting connection records"
    );
    let drain = drain::from_config(records, path, access, stats, names);
    Some(drain::spawn(drain, shutdown))
}
