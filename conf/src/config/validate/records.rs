//! `[records]`: connection records and their exporters
//! (docs/records.md).

use std::net::SocketAddr;
use std::path::PathBuf;

use toml::Spanned as S;

use super::super::raw::{RawIpfix, RawJsonLog, RawRecords};
use super::super::{IpfixCollector, JsonLog, Records, RECORD_RING_SLOTS};
use super::{at, or, Validator};

const DEFAULT_RING_SLOTS: u32 = 65_536;
const DEFAULT_TEMPLATE_INTERVAL_S: u32 = 60;
const DEFAULT_ROTATE_BYTES: u64 = 100 << 20;
const DEFAULT_KEEP: u32 = 5;
/// A file smaller than this would rotate every few records.
const MIN_ROTATE_BYTES: u64 = 4096;
/// IPFIX collectors one appliance sends to.
const MAX_COLLECTORS: usize = 8;
const MAX_KEEP: u32 = 1000;

impl Validator {
    pub(super) fn records(&mut self, sr: &S<RawRecords>) -> Records {
        let r = sr.get_ref();
        let ring_slots = or(&r.ring_slots, DEFAULT_RING_SLOTS);
        if let Some(s) = &r.ring_slots {
            if !RECORD_RING_SLOTS.contains(&ring_slots) || !ring_slots.is_power_of_two() {
                self.err(
                    at(s),
                    "records.ring_slots",
                    format!(
                        "{ring_slots} is not a power of two in {}..={}",
                        RECORD_RING_SLOTS.start(),
                        RECORD_RING_SLOTS.end()
                    ),
                );
            }
        }
        let raw_ipfix: &[S<RawIpfix>] = r.ipfix.as_ref().map_or(&[], |l| l.get_ref());
        if raw_ipfix.len() > MAX_COLLECTORS {
            let list = r.ipfix.as_ref().map_or(at(sr), at);
            self.err(
                list,
                "records.ipfix",
                format!("{} collectors (at most {MAX_COLLECTORS})", raw_ipfix.len()),
            );
        }
        let mut ipfix: Vec<IpfixCollector> = Vec::new();
        for c in raw_ipfix {
            let Some(parsed) = self.ipfix(c) else {
                continue;
            };
            if ipfix.iter().any(|o| o.collector == parsed.collector) {
                self.err(
                    at(&c.get_ref().collector),
                    "records.ipfix.collector",
                    format!("{} is listed twice", parsed.collector),
                );
            } else {
                ipfix.push(parsed);
            }
        }
        let json = r.json.as_ref().and_then(|j| self.json_log(j));
        if r.ipfix.is_none() && r.json.is_none() {
            self.err(
                at(sr),
                "records",
                "has no exporter (expected [[records.ipfix]] collector = \"ip:port\" and/or [records.json] path = \"/var/log/border/records.jsonl\")",
            );
        }
        Records {
            ring_slots,
            log_empty: or(&r.log_empty, false),
            ipfix,
            json,
        }
    }

    fn ipfix(&mut self, sc: &S<RawIpfix>) -> Option<IpfixCollector> {
        let c = sc.get_ref();
        let collector = match c.collector.get_ref().parse::<SocketAddr>() {
            Ok(a) if a.port() != 0 && !a.ip().is_unspecified() => Some(a),
            _ => {
                self.err(
                    at(&c.collector),
                    "records.ipfix.collector",
                    format!(
                        "{:?} is not a collector address (expected ip:port, e.g. \"192.0.2.50:4739\" or \"[2001:db8::50]:4739\")",
                        c.collector.get_ref()
                    ),
                );
                None
            }
        };
        let template_interval_s = or(&c.template_interval_s, DEFAULT_TEMPLATE_INTERVAL_S);
        if let Some(s) = &c.template_interval_s {
            if !(1..=3600).contains(&template_interval_s) {
                self.err(
                    at(s),
                    "records.ipfix.template_interval_s",
                    format!("{template_interval_s} is out of range (expected 1..=3600 s)"),
                );
            }
        }
        Some(IpfixCollector {
            collector: collector?,
            observation_domain: or(&c.observation_domain, 1),
            template_interval_s,
        })
    }

    fn json_log(&mut self, sj: &S<RawJsonLog>) -> Option<JsonLog> {
        let j = sj.get_ref();
        let path = PathBuf::from(j.path.get_ref());
        let bad_name = path
            .file_name()
            .is_none_or(|n| n.to_string_lossy().is_empty());
        if !path.is_absolute() || bad_name || j.path.get_ref().contains('\0') {
            self.err(
                at(&j.path),
                "records.json.path",
                format!(
                    "{:?} is not an absolute file path (expected e.g. \"/var/log/border/records.jsonl\")",
                    j.path.get_ref()
                ),
            );
        }
        let rotate_bytes = or(&j.rotate_bytes, DEFAULT_ROTATE_BYTES);
        if let Some(s) = &j.rotate_bytes {
            if rotate_bytes < MIN_ROTATE_BYTES {
                self.err(
                    at(s),
                    "records.json.rotate_bytes",
                    format!("{rotate_bytes} is too small (expected at least {MIN_ROTATE_BYTES})"),
                );
            }
        }
        let keep = or(&j.keep, DEFAULT_KEEP);
        if let Some(s) = &j.keep {
            if keep > MAX_KEEP {
                self.err(
                    at(s),
                    "records.json.keep",
                    format!("{keep} is out of range (expected 0..={MAX_KEEP})"),
                );
            }
        }
        Some(JsonLog {
            path,
            rotate_bytes,
            keep,
        })
    }
}
