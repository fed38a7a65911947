//! Connection records as JSON lines, one object per record, appended to
//! `[records.json] path`. When the file reaches `rotate_bytes` it becomes
//! `path.1` (`path.1` becomes `path.2`, ... up to `keep`; the oldest is
//! dropped) and a new file is made, mode 0600 (0640 with the operators'
//! group) like border's other files. Write errors (a full disk) are
//! counted and logged once; the records still go to the other exporters.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use conf::os::files::{self, Access};
use conf::records::{BACKEND_TO_CLIENT, CLIENT_TO_BACKEND};
use conf::JsonLog;
use serde::Serialize;
use time::{OffsetDateTime, PrimitiveDateTime};

use super::{Exported, Exporter, Record, VipNames};

/// Bytes gathered before a write.
const MAX_CHUNK: usize = 256 << 10;

/// One line of the file (docs/records.md lists the fields).
#[derive(Serialize)]
struct Line<'a> {
    start: String,
    start_unix_ms: u64,
    end: String,
    end_unix_ms: u64,
    client: SocketAddr,
    vip: SocketAddr,
    #[serde(skip_serializing_if = "Option::is_none")]
    vip_name: Option<&'a str>,
    backend: SocketAddr,
    #[serde(skip_serializing_if = "Option::is_none")]
    local: Option<SocketAddr>,
    proto: &'static str,
    client_to_backend_packets: u64,
    client_to_backend_bytes: u64,
    backend_to_client_packets: u64,
    backend_to_client_bytes: u64,
    end_reason: &'static str,
    proxy_header: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    unique_id: Option<String>,
    payload: bool,
    worker: u16,
}

fn proto_name(p: u8) -> &'static str {
    match p {
        6 => "tcp",
        17 => "udp",
        _ => "other",
    }
}

/// The JSON line of `r`, newline included.
pub fn line(r: &Record, vips: &VipNames) -> Vec<u8> {
    let c = &r.conn;
    let sa = |ip: IpAddr, port| SocketAddr::new(ip, port);
    let l = Line {
        start: rfc3339_ms(r.start_unix_ms),
        start_unix_ms: r.start_unix_ms,
        end: rfc3339_ms(r.end_unix_ms),
        end_unix_ms: r.end_unix_ms,
        client: sa(c.client_ip(), c.client_port),
        vip: sa(c.vip_ip(), c.vip_port),
        vip_name: vips.of_record(c),
        backend: sa(c.backend_ip(), c.backend_port),
        local: c.full_nat().then(|| sa(c.local_ip(), c.local_port)),
        proto: proto_name(c.proto),
        client_to_backend_packets: c.packets[CLIENT_TO_BACKEND],
        client_to_backend_bytes: c.octets[CLIENT_TO_BACKEND],
        backend_to_client_packets: c.packets[BACKEND_TO_CLIENT],
        backend_to_client_bytes: c.octets[BACKEND_TO_CLIENT],
        end_reason: c.end.name(),
        proxy_header: c.proxy_sent(),
        unique_id: c.proxy_sent().then(|| format!("{:016x}", c.conn_id)),
        payload: c.carried_payload(),
        worker: c.worker,
    };
    let mut out = serde_json::to_vec(&l).unwrap_or_default();
    out.push(b'\n');
    out
}

/// `ms` since 1970 as RFC 3339 UTC with milliseconds:
/// `2026-12-01T22:41:29.123Z`. Instants past the year 9999, which no
/// clock of a running appliance reports, are written as its last millisecond.
pub fn rfc3339_ms(ms: u64) -> String {
    const FORMAT: &[time::format_description::BorrowedFormatItem<'static>] = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    let at = OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or_else(|_| PrimitiveDateTime::MAX.assume_utc());
    at.format(FORMAT)
        .unwrap_or_else(|_| "9999-12-31T23:59:59.999Z".to_string())
}

/// The JSON-lines exporter.
pub struct JsonExporter {
    path: PathBuf,
    rotate_bytes: u64,
    keep: u32,
    access: Access,
    /// The open file and its size; `None` until opened, and after an error.
    file: Option<(File, u64)>,
    error_logged: bool,
}

impl JsonExporter {
    pub fn new(cfg: &JsonLog, access: Access) -> JsonExporter {
        JsonExporter {
            path: cfg.path.clone(),
            rotate_bytes: cfg.rotate_bytes,
            keep: cfg.keep,
            access,
            file: None,
            error_logged: false,
        }
    }

    /// Opens the file to append: an existing one of border's (owner and
    /// mode checked), or a new one. A line an earlier failed write cut
    /// short is ended first, so every line stays whole JSON or is dropped
    /// by a reader as one bad line.
    fn open(&self) -> io::Result<(File, u64)> {
        if let Some(dir) = self.path.parent() {
            files::ensure_dir(dir, self.access)?;
        }
        let (mut file, fresh) = match files::open_own(&self.path, self.access, false) {
            Ok(f) => (f, false),
            Err(e) if e.io_kind() == Some(io::ErrorKind::NotFound) => (
                files::create_new(&self.path, self.access).map_err(io::Error::other)?,
                true,
            ),
            Err(e) => return Err(io::Error::other(e.to_string())),
        };
        let mut size = file.seek(SeekFrom::End(0))?;
        if !fresh && size > 0 {
            let mut last = [0u8];
            file.seek(SeekFrom::End(-1))?;
            file.read_exact(&mut last)?;
            if last[0] != b'\n' {
                file.write_all(b"\n")?;
                size += 1;
            }
        }
        Ok((file, size))
    }

    /// `path.(k-1)` to `path.k` down to `path` to `path.1`, then a new file;
    /// with `keep = 0` the file is emptied instead.
    fn rotate(&mut self) -> io::Result<()> {
        self.file = None;
        if self.keep == 0 {
            std::fs::remove_file(&self.path)?;
        } else {
            for k in (1..self.keep).rev() {
                let from = numbered(&self.path, k);
                match std::fs::rename(&from, numbered(&self.path, k + 1)) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
            }
            std::fs::rename(&self.path, numbered(&self.path, 1))?;
        }
        self.file = Some(self.open()?);
        Ok(())
    }

    /// Writes the whole lines gathered in `chunk` (`n` records), counting
    /// them as sent or failed.
    fn flush(&mut self, chunk: &mut Vec<u8>, n: &mut u64, done: &mut Exported) {
        if chunk.is_empty() {
            return;
        }
        let r = match self.file.as_mut() {
            Some((file, size)) => file.write_all(chunk).map(|()| *size += chunk.len() as u64),
            None => Err(io::Error::other("the file is not open")),
        };
        match r {
            Ok(()) => {
                done.sent += *n;
                if self.error_logged {
                    self.error_logged = false;
                    tracing::info!(path = %self.path.display(), "records: writing the JSON records file again");
                }
            }
            Err(e) => {
                done.failed += *n;
                self.failed(&e);
            }
        }
        chunk.clear();
        *n = 0;
    }

    fn failed(&mut self, e: &io::Error) {
        self.file = None;
        if !self.error_logged {
            self.error_logged = true;
            tracing::warn!(path = %self.path.display(), error = %e, "records: cannot write the JSON records file (counted in border_records_export_errors_total; logged once until a write succeeds)");
        }
    }
}

/// `path.k`.
pub fn numbered(path: &Path, k: u32) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{k}"));
    PathBuf::from(s)
}

impl Exporter for JsonExporter {
    fn kind(&self) -> &'static str {
        "json"
    }

    fn target(&self) -> String {
        self.path.display().to_string()
    }

    /// Gathers lines and writes them in chunks, one write per chunk: the
    /// file rotates between chunks, before a line that would take it past
    /// `rotate_bytes`.
    fn export(&mut self, records: &[Record], vips: &VipNames) -> Exported {
        let mut done = Exported::default();
        let mut chunk = Vec::new();
        let mut in_chunk = 0u64;
        for r in records {
            let l = line(r, vips);
            if self.file.is_none() {
                match self.open() {
                    Ok(f) => self.file = Some(f),
                    Err(e) => {
                        done.failed += 1;
                        self.failed(&e);
                        continue;
                    }
                }
            }
            let size = self.file.as_ref().map_or(0, |f| f.1) + chunk.len() as u64;
            if size > 0 && size + l.len() as u64 > self.rotate_bytes {
                self.flush(&mut chunk, &mut in_chunk, &mut done);
                if let Err(e) = self.rotate() {
                    done.failed += 1;
                    self.failed(&e);
                    continue;
                }
            }
            chunk.extend_from_slice(&l);
            in_chunk += 1;
            if chunk.len() >= MAX_CHUNK {
                self.flush(&mut chunk, &mut in_chunk, &mut done);
            }
        }
        self.flush(&mut chunk, &mut in_chunk, &mut done);
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use conf::records::{ConnRecord, EndReason, REC_FULL_NAT, REC_PAYLOAD, REC_PROXY_SENT};

    #[test]
    fn rfc3339_of_known_instants() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(951_782_400_001), "2000-02-29T00:00:00.001Z");
        assert_eq!(rfc3339_ms(1_796_161_289_123), "2026-12-01T21:41:29.123Z");
        assert_eq!(rfc3339_ms(4_102_444_799_999), "2099-12-31T23:59:59.999Z");
    }

    #[test]
    fn instants_past_year_9999_are_its_last_millisecond() {
        assert_eq!(rfc3339_ms(253_402_300_799_999), "9999-12-31T23:59:59.999Z");
        assert_eq!(rfc3339_ms(253_402_300_800_000), "9999-12-31T23:59:59.999Z");
        assert_eq!(rfc3339_ms(u64::MAX), "9999-12-31T23:59:59.999Z");
    }

    fn record() -> Record {
        let v4 = |a: [u8; 4]| std::net::Ipv4Addr::from(a).to_ipv6_mapped().octets();
        Record {
            conn: ConnRecord {
                start_ms: 0,
                end_ms: 0,
                conn_id: 0xabc,
                packets: [3, 2],
                octets: [180, 120],
                client: v4([192, 0, 2, 1]),
                vip: v4([198, 51, 100, 10]),
                backend: v4([10, 0, 1, 1]),
                local: v4([10, 0, 0, 2]),
                client_port: 40000,
                vip_port: 80,
                backend_port: 8080,
                local_port: 1025,
                proto: 6,
                end: EndReason::Rst,
                flags: REC_FULL_NAT | REC_PROXY_SENT | REC_PAYLOAD,
                worker: 1,
                ..ConnRecord::default()
            },
            start_unix_ms: 1000,
            end_unix_ms: 2500,
        }
    }

    #[test]
    fn a_line_names_every_field() {
        let vips = VipNames(std::collections::HashMap::from([(
            ("198.51.100.10".parse().unwrap(), 80, 6),
            std::sync::Arc::from("web"),
        )]));
        let text = String::from_utf8(line(&record(), &vips)).unwrap();
        assert!(text.ends_with('\n'));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["start"], "1970-01-01T00:00:01.000Z");
        assert_eq!(v["end_unix_ms"], 2500);
        assert_eq!(v["client"], "192.0.2.1:40000");
        assert_eq!(v["vip"], "198.51.100.10:80");
        assert_eq!(v["vip_name"], "web");
        assert_eq!(v["backend"], "10.0.1.1:8080");
        assert_eq!(v["local"], "10.0.0.2:1025");
        assert_eq!(v["proto"], "tcp");
        assert_eq!(v["client_to_backend_bytes"], 180);
        assert_eq!(v["backend_to_client_packets"], 2);
        assert_eq!(v["end_reason"], "rst");
        assert_eq!(v["unique_id"], "0000000000000abc");
        assert_eq!(v["worker"], 1);
    }

    #[test]
    fn dnat_records_have_no_local_and_no_header_no_unique_id() {
        let mut r = record();
        r.conn.flags = 0;
        let v: serde_json::Value = serde_json::from_slice(&line(&r, &VipNames::default())).unwrap();
        assert!(v.get("local").is_none());
        assert!(v.get("unique_id").is_none());
        assert!(v.get("vip_name").is_none());
        assert_eq!(v["proxy_header"], false);
        assert_eq!(v["payload"], false);
    }
}
