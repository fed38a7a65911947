//! IPFIX (RFC 7011) export of connection records over UDP.
//!
//! [`Encoder`] turns records into messages (pure bytes out); [`IpfixExporter`]
//! sends them to one collector. Each message has the 16-byte header
//! (version 10, length, export time, sequence number = data records sent
//! before it in this observation domain, observation domain id), then sets:
//! a template set (id 2) with the two record templates, or data sets of
//! one template each. Messages stay within [`MAX_MESSAGE_LEN`] bytes so that
//! they are never fragmented on an Ethernet path.
//!
//! Only IANA information elements, and RFC 5103 reverse elements (private
//! enterprise 29305) for the backend-to-client counters:
//! the flow is the client's connection to the VIP (source = client,
//! destination = VIP), its translation is the backend side (post-NAT
//! source = the full-NAT local address, or the client for DNAT; post-NAT
//! destination = the backend). Table in docs/records.md.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant, SystemTime};

use conf::records::{EndReason, BACKEND_TO_CLIENT, CLIENT_TO_BACKEND};
use conf::IpfixCollector;

use super::{Exported, Exporter, Record, VipNames};

/// The largest message sent: an Ethernet MTU less IP and UDP headers, with
/// room for IPv6 and a tunnel.
pub const MAX_MESSAGE_LEN: usize = 1400;
/// Template of records with IPv4 addresses.
pub const TEMPLATE_V4: u16 = 256;
/// Template of records with IPv6 addresses.
pub const TEMPLATE_V6: u16 = 257;

const VERSION: u16 = 10;
const HEADER_LEN: usize = 16;
const SET_HEADER_LEN: usize = 4;
const TEMPLATE_SET_ID: u16 = 2;
/// RFC 5103: the private enterprise number of reverse information elements.
const REVERSE_PEN: u32 = 29305;

/// One field of a template: information element id, length, and whether
/// it is the RFC 5103 reverse of that element.
#[derive(Clone, Copy)]
struct Field {
    id: u16,
    len: u16,
    reverse: bool,
}

const fn ie(id: u16, len: u16) -> Field {
    Field {
        id,
        len,
        reverse: false,
    }
}

const fn reverse(id: u16, len: u16) -> Field {
    Field {
        id,
        len,
        reverse: true,
    }
}

// IANA information element ids.
const OCTET_DELTA_COUNT: u16 = 1;
const PACKET_DELTA_COUNT: u16 = 2;
const PROTOCOL_IDENTIFIER: u16 = 4;
const SOURCE_TRANSPORT_PORT: u16 = 7;
const SOURCE_IPV4_ADDRESS: u16 = 8;
const DESTINATION_TRANSPORT_PORT: u16 = 11;
const DESTINATION_IPV4_ADDRESS: u16 = 12;
const SOURCE_IPV6_ADDRESS: u16 = 27;
const DESTINATION_IPV6_ADDRESS: u16 = 28;
const FLOW_END_REASON: u16 = 136;
const FLOW_ID: u16 = 148;
const FLOW_START_MILLISECONDS: u16 = 152;
const FLOW_END_MILLISECONDS: u16 = 153;
const POST_NAT_SOURCE_IPV4_ADDRESS: u16 = 225;
const POST_NAT_DESTINATION_IPV4_ADDRESS: u16 = 226;
const POST_NAPT_SOURCE_TRANSPORT_PORT: u16 = 227;
const POST_NAPT_DESTINATION_TRANSPORT_PORT: u16 = 228;
const POST_NAT_SOURCE_IPV6_ADDRESS: u16 = 281;
const POST_NAT_DESTINATION_IPV6_ADDRESS: u16 = 282;

/// The fields of a template whose addresses are `addr_len` bytes, in the
/// order [`Encoder`] writes a record.
const fn fields(v6: bool) -> [Field; 17] {
    let (a, src, dst, post_src, post_dst) = if v6 {
        (
            16,
            SOURCE_IPV6_ADDRESS,
            DESTINATION_IPV6_ADDRESS,
            POST_NAT_SOURCE_IPV6_ADDRESS,
            POST_NAT_DESTINATION_IPV6_ADDRESS,
        )
    } else {
        (
            4,
            SOURCE_IPV4_ADDRESS,
            DESTINATION_IPV4_ADDRESS,
            POST_NAT_SOURCE_IPV4_ADDRESS,
            POST_NAT_DESTINATION_IPV4_ADDRESS,
        )
    };
    [
        ie(FLOW_START_MILLISECONDS, 8),
        ie(FLOW_END_MILLISECONDS, 8),
        ie(src, a),
        ie(dst, a),
        ie(SOURCE_TRANSPORT_PORT, 2),
        ie(DESTINATION_TRANSPORT_PORT, 2),
        ie(PROTOCOL_IDENTIFIER, 1),
        ie(post_src, a),
        ie(post_dst, a),
        ie(POST_NAPT_SOURCE_TRANSPORT_PORT, 2),
        ie(POST_NAPT_DESTINATION_TRANSPORT_PORT, 2),
        ie(PACKET_DELTA_COUNT, 8),
        ie(OCTET_DELTA_COUNT, 8),
        reverse(PACKET_DELTA_COUNT, 8),
        reverse(OCTET_DELTA_COUNT, 8),
        ie(FLOW_END_REASON, 1),
        ie(FLOW_ID, 8),
    ]
}

/// Bytes of one data record of the template.
const fn record_len(v6: bool) -> usize {
    let f = fields(v6);
    let mut n = 0;
    let mut i = 0;
    while i < f.len() {
        n += f[i].len as usize;
        i += 1;
    }
    n
}

/// flowEndReason (IANA "flowEndReason" sub-registry).
pub const fn flow_end_reason(r: EndReason) -> u8 {
    match r {
        // idle timeout
        EndReason::Timeout => 1,
        // end of flow detected (FIN or RST)
        EndReason::Fin | EndReason::Rst => 3,
        // lack of resources: evicted from a full table
        EndReason::Evicted => 5,
        // forced end: border reset it (its backend went down)
        EndReason::Reset => 4,
    }
}

/// Builds IPFIX messages for one observation domain, counting the data
/// records it has put in messages (the header's sequence number).
#[derive(Debug, Clone)]
pub struct Encoder {
    domain: u32,
    sequence: u32,
}

impl Encoder {
    pub fn new(observation_domain: u32) -> Encoder {
        Encoder {
            domain: observation_domain,
            sequence: 0,
        }
    }

    /// Data records encoded so far (modulo 2^32).
    pub fn sequence(&self) -> u32 {
        self.sequence
    }

    fn header(&self, out: &mut Vec<u8>, export_time: u32) {
        out.extend_from_slice(&VERSION.to_be_bytes());
        out.extend_from_slice(&[0, 0]); // length, set by `finish`
        out.extend_from_slice(&export_time.to_be_bytes());
        out.extend_from_slice(&self.sequence.to_be_bytes());
        out.extend_from_slice(&self.domain.to_be_bytes());
    }

    fn finish(out: &mut [u8]) {
        let len = out.len() as u16;
        out[2..4].copy_from_slice(&len.to_be_bytes());
    }

    /// A message with the template set: both templates.
    pub fn templates(&self, export_time: u32) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + 4 + 2 * 80);
        self.header(&mut out, export_time);
        let set_at = out.len();
        out.extend_from_slice(&TEMPLATE_SET_ID.to_be_bytes());
        out.extend_from_slice(&[0, 0]);
        for (id, v6) in [(TEMPLATE_V4, false), (TEMPLATE_V6, true)] {
            let f = fields(v6);
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&(f.len() as u16).to_be_bytes());
            for field in f {
                let id = if field.reverse {
                    field.id | 0x8000
                } else {
                    field.id
                };
                out.extend_from_slice(&id.to_be_bytes());
                out.extend_from_slice(&field.len.to_be_bytes());
                if field.reverse {
                    out.extend_from_slice(&REVERSE_PEN.to_be_bytes());
                }
            }
        }
        let set_len = (out.len() - set_at) as u16;
        out[set_at + 2..set_at + 4].copy_from_slice(&set_len.to_be_bytes());
        Encoder::finish(&mut out);
        out
    }

    /// The data messages of `records`, in order, each with how many records
    /// it holds. Consecutive records of one family share a data set.
    pub fn data(&mut self, records: &[Record], export_time: u32) -> Vec<(Vec<u8>, usize)> {
        let mut messages = Vec::new();
        let mut out: Vec<u8> = Vec::new();
        let mut in_message = 0usize;
        // (offset of the open set's header, its template) in `out`
        let mut set: Option<(usize, u16)> = None;
        for r in records {
            let v6 = r.conn.client_v6;
            let template = if v6 { TEMPLATE_V6 } else { TEMPLATE_V4 };
            let same_set = matches!(set, Some((_, t)) if t == template);
            let need = record_len(v6) + if same_set { 0 } else { SET_HEADER_LEN };
            if in_message > 0 && out.len() + need > MAX_MESSAGE_LEN {
                close_set(&mut out, set.take());
                Encoder::finish(&mut out);
                messages.push((std::mem::take(&mut out), in_message));
                in_message = 0;
            }
            if in_message == 0 {
                out.reserve(MAX_MESSAGE_LEN);
                self.header(&mut out, export_time);
            }
            if !matches!(set, Some((_, t)) if t == template) {
                close_set(&mut out, set.take());
                set = Some((out.len(), template));
                out.extend_from_slice(&template.to_be_bytes());
                out.extend_from_slice(&[0, 0]);
            }
            encode_record(&mut out, r);
            in_message += 1;
            self.sequence = self.sequence.wrapping_add(1);
        }
        if in_message > 0 {
            close_set(&mut out, set);
            Encoder::finish(&mut out);
            messages.push((out, in_message));
        }
        messages
    }
}

/// Writes the length of the set whose header is at `set`'s offset.
fn close_set(out: &mut [u8], set: Option<(usize, u16)>) {
    if let Some((at, _)) = set {
        let len = (out.len() - at) as u16;
        out[at + 2..at + 4].copy_from_slice(&len.to_be_bytes());
    }
}

/// One data record, in the order of [`fields`].
fn encode_record(out: &mut Vec<u8>, r: &Record) {
    let c = &r.conn;
    let addr = |out: &mut Vec<u8>, a: &[u8; 16], v6: bool| {
        if v6 {
            out.extend_from_slice(a);
        } else {
            out.extend_from_slice(&a[12..16]);
        }
    };
    let v6 = c.client_v6;
    out.extend_from_slice(&r.start_unix_ms.to_be_bytes());
    out.extend_from_slice(&r.end_unix_ms.to_be_bytes());
    addr(out, &c.client, v6);
    addr(out, &c.vip, v6);
    out.extend_from_slice(&c.client_port.to_be_bytes());
    out.extend_from_slice(&c.vip_port.to_be_bytes());
    out.push(c.proto);
    // The backend side: `local` is the full-NAT source, or the client's
    // own address and port for DNAT.
    addr(out, &c.local, v6);
    addr(out, &c.backend, v6);
    out.extend_from_slice(&c.local_port.to_be_bytes());
    out.extend_from_slice(&c.backend_port.to_be_bytes());
    out.extend_from_slice(&c.packets[CLIENT_TO_BACKEND].to_be_bytes());
    out.extend_from_slice(&c.octets[CLIENT_TO_BACKEND].to_be_bytes());
    out.extend_from_slice(&c.packets[BACKEND_TO_CLIENT].to_be_bytes());
    out.extend_from_slice(&c.octets[BACKEND_TO_CLIENT].to_be_bytes());
    out.push(flow_end_reason(c.end));
    out.extend_from_slice(&c.conn_id.to_be_bytes());
}

/// Seconds since 1970 for the export time field (wraps in 2106).
fn unix_secs(now: SystemTime) -> u32 {
    now.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as u32)
}

/// Sends records to one collector over UDP: the templates first and
/// again every `template_interval_s` (and after a send error, since the
/// collector may have restarted), then data messages.
pub struct IpfixExporter {
    collector: SocketAddr,
    socket: Option<UdpSocket>,
    encoder: Encoder,
    interval: Duration,
    next_template: Option<Instant>,
    error_logged: bool,
}

impl IpfixExporter {
    pub fn new(c: &IpfixCollector) -> IpfixExporter {
        IpfixExporter {
            collector: c.collector,
            socket: None,
            encoder: Encoder::new(c.observation_domain),
            interval: Duration::from_secs(c.template_interval_s.into()),
            next_template: None,
            error_logged: false,
        }
    }

    fn socket(&mut self) -> io::Result<&UdpSocket> {
        if self.socket.is_none() {
            let any: SocketAddr = if self.collector.is_ipv4() {
                (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
            } else {
                (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
            };
            let s = UdpSocket::bind(any)?;
            s.connect(self.collector)?;
            s.set_write_timeout(Some(Duration::from_millis(100)))?;
            self.socket = Some(s);
        }
        Ok(self.socket.as_ref().expect("set above"))
    }

    fn send(&mut self, msg: &[u8]) -> io::Result<()> {
        self.socket()?.send(msg).map(|_| ())
    }

    fn failed(&mut self, e: &io::Error) {
        // Send templates again with the next message: a collector that
        // refused (restarting) has lost them.
        self.next_template = None;
        if !self.error_logged {
            self.error_logged = true;
            tracing::warn!(collector = %self.collector, error = %e, "records: IPFIX send failed (counted in border_records_export_errors_total; logged once until a send succeeds)");
        }
    }

    fn sent(&mut self) {
        if self.error_logged {
            self.error_logged = false;
            tracing::info!(collector = %self.collector, "records: IPFIX sends succeed again");
        }
    }
}

impl Exporter for IpfixExporter {
    fn kind(&self) -> &'static str {
        "ipfix"
    }

    fn target(&self) -> String {
        self.collector.to_string()
    }

    fn export(&mut self, records: &[Record], _vips: &VipNames) -> Exported {
        let now = Instant::now();
        let export_time = unix_secs(SystemTime::now());
        if self.next_template.is_none_or(|t| now >= t) {
            let msg = self.encoder.templates(export_time);
            match self.send(&msg) {
                Ok(()) => self.next_template = Some(now + self.interval),
                Err(e) => self.failed(&e),
            }
        }
        let mut done = Exported::default();
        for (msg, n) in self.encoder.data(records, export_time) {
            match self.send(&msg) {
                Ok(()) => {
                    done.sent += n as u64;
                    self.sent();
                }
                Err(e) => {
                    done.failed += n as u64;
                    self.failed(&e);
                }
            }
        }
        done
    }
}

#[cfg(test)]
mod tests;
