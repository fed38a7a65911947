//! The records region: connection records on their way from the workers
//! of border-dp to border-mgmt, one single-producer single-consumer ring
//! per worker in a shared-memory file (docs/records.md).
//!
//! A worker writes a record when a connection ends, with plain stores into
//! a slot and a release store of its `head`; border-mgmt reads the slots up
//! to `head` and gives them back with a release store of `tail`. Neither
//! side waits: a worker whose ring is full drops the record and counts it
//! (`conn_records_ring_full`), so no record costs the fast path more than
//! a 192-byte copy, and none a system call.
//!
//! Layout (offsets in bytes, little endian, the file mapped page-aligned):
//!
//! The header is [`crate::worker_rings`]'s, with magic "BRDRECS1" and
//! slot_len RECORD_LEN, and one word of this kind's own:
//!
//! ```text
//! 32   clock_offset_ms  u64      atomic; unix ms minus the workers' clock ms
//! ring i (offsets from its start):
//! 0    head             u64      atomic; records written (the worker's)
//! 64   tail             u64      atomic; records read (border-mgmt's)
//! 128  slots            [[u8; RECORD_LEN]; ring_slots]
//! ```

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::os::files::Access;
use crate::worker_rings::{RegionError, RingsKind, WorkerRings};

/// Bumped whenever the byte layout of the region or of a record changes.
pub const RECORDS_LAYOUT_VERSION: u32 = 1;

const RING_CONTROL: usize = 128;

/// Bytes of one encoded [`ConnRecord`].
pub const RECORD_LEN: usize = 192;

/// Where the records region of an instance lives:
/// `/dev/shm/border-<instance>-records` ([`crate::os::region_dir`] moves it).
pub fn records_path(instance: &str) -> PathBuf {
    crate::os::region_dir().join(format!("border-{instance}-records"))
}

/// Why a connection ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum EndReason {
    /// Its deadline passed without a packet (idle timeout; also a
    /// handshake that never completed).
    #[default]
    Timeout = 0,
    /// FINs: it closed (its `tcp_closing` time then ran out, or a new SYN
    /// reused the tuple).
    Fin = 1,
    /// A RST ended it.
    Rst = 2,
    /// Removed to make room: a half-open entry evicted from a full table.
    Evicted = 3,
    /// Ended by border: its backend went down and the VIP resets such flows.
    Reset = 4,
}

impl EndReason {
    pub const ALL: [EndReason; 5] = [
        EndReason::Timeout,
        EndReason::Fin,
        EndReason::Rst,
        EndReason::Evicted,
        EndReason::Reset,
    ];

    /// The name in JSON records and docs.
    pub const fn name(self) -> &'static str {
        match self {
            EndReason::Timeout => "timeout",
            EndReason::Fin => "fin",
            EndReason::Rst => "rst",
            EndReason::Evicted => "evicted",
            EndReason::Reset => "reset",
        }
    }

    fn from_raw(v: u8) -> Option<EndReason> {
        EndReason::ALL.get(usize::from(v)).copied()
    }
}

/// The direction of a connection's traffic, as a record counts it.
pub const CLIENT_TO_BACKEND: usize = 0;
pub const BACKEND_TO_CLIENT: usize = 1;

/// `ConnRecord::flags`: the VIP is full-NAT (else DNAT).
pub const REC_FULL_NAT: u8 = 1;
/// A PROXY protocol v2 header was sent to the backend.
pub const REC_PROXY_SENT: u8 = 2;
/// Some packet of the connection carried payload.
pub const REC_PAYLOAD: u8 = 4;
const REC_FLAGS_KNOWN: u8 = REC_FULL_NAT | REC_PROXY_SENT | REC_PAYLOAD;

/// One connection, when it ended. Addresses are 16 bytes, IPv4 mapped
/// (`::ffff:a.b.c.d`) with the family in `client_v6` / `backend_v6`;
/// `local` is the full-NAT local address and port (the client's for DNAT).
/// Times are on the workers' clock in milliseconds (see
/// [`RecordsRegion::clock_offset_ms`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnRecord {
    pub start_ms: u64,
    /// The connection's last packet.
    pub end_ms: u64,
    /// The connection's id (the PPv2 `UNIQUE_ID` when a header carries one).
    pub conn_id: u64,
    /// Packets forwarded, by [`CLIENT_TO_BACKEND`] / [`BACKEND_TO_CLIENT`].
    pub packets: [u64; 2],
    /// Their IP bytes (IP header included, link layer not).
    pub octets: [u64; 2],
    pub client: [u8; 16],
    pub vip: [u8; 16],
    pub backend: [u8; 16],
    pub local: [u8; 16],
    pub client_port: u16,
    pub vip_port: u16,
    pub backend_port: u16,
    pub local_port: u16,
    /// IP protocol number.
    pub proto: u8,
    pub client_v6: bool,
    pub backend_v6: bool,
    pub end: EndReason,
    /// [`REC_FULL_NAT`], [`REC_PROXY_SENT`], [`REC_PAYLOAD`].
    pub flags: u8,
    /// The worker that tracked it.
    pub worker: u16,
}

/// A record slot whose bytes are not a record border-dp writes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed connection record: {0}")]
pub struct BadRecord(&'static str);

impl ConnRecord {
    pub fn client_ip(&self) -> IpAddr {
        ip_of(&self.client, self.client_v6)
    }
    pub fn vip_ip(&self) -> IpAddr {
        ip_of(&self.vip, self.client_v6)
    }
    pub fn backend_ip(&self) -> IpAddr {
        ip_of(&self.backend, self.backend_v6)
    }
    pub fn local_ip(&self) -> IpAddr {
        ip_of(&self.local, self.backend_v6)
    }
    pub fn full_nat(&self) -> bool {
        self.flags & REC_FULL_NAT != 0
    }
    pub fn proxy_sent(&self) -> bool {
        self.flags & REC_PROXY_SENT != 0
    }
    pub fn carried_payload(&self) -> bool {
        self.flags & REC_PAYLOAD != 0
    }

    /// The record's bytes in a slot.
    #[inline]
    pub fn encode(&self, out: &mut [u8; RECORD_LEN]) {
        let mut w = Writer { buf: out, at: 0 };
        w.u64(self.start_ms);
        w.u64(self.end_ms);
        w.u64(self.conn_id);
        for v in self.packets.into_iter().chain(self.octets) {
            w.u64(v);
        }
        for a in [&self.client, &self.vip, &self.backend, &self.local] {
            w.bytes(a);
        }
        for p in [
            self.client_port,
            self.vip_port,
            self.backend_port,
            self.local_port,
            self.worker,
        ] {
            w.bytes(&p.to_le_bytes());
        }
        w.bytes(&[
            self.proto,
            u8::from(self.client_v6),
            u8::from(self.backend_v6),
            self.end as u8,
            self.flags,
        ]);
        let end = w.at;
        out[end..].fill(0);
    }

    /// A record from a slot's bytes, checked: fields with a closed set of
    /// values must hold one of them.
    pub fn decode(b: &[u8; RECORD_LEN]) -> Result<ConnRecord, BadRecord> {
        let mut r = Reader { buf: b, at: 0 };
        let start_ms = r.u64();
        let end_ms = r.u64();
        let conn_id = r.u64();
        let packets = [r.u64(), r.u64()];
        let octets = [r.u64(), r.u64()];
        let (client, vip, backend, local) = (r.addr(), r.addr(), r.addr(), r.addr());
        let (client_port, vip_port, backend_port, local_port, worker) =
            (r.u16(), r.u16(), r.u16(), r.u16(), r.u16());
        let [proto, client_v6, backend_v6, end, flags] = r.array();
        let boolean = |v: u8, what| match v {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(BadRecord(what)),
        };
        if end_ms < start_ms {
            return Err(BadRecord("ends before it starts"));
        }
        if flags & !REC_FLAGS_KNOWN != 0 {
            return Err(BadRecord("unknown flag bits"));
        }
        Ok(ConnRecord {
            start_ms,
            end_ms,
            conn_id,
            packets,
            octets,
            client,
            vip,
            backend,
            local,
            client_port,
            vip_port,
            backend_port,
            local_port,
            proto,
            client_v6: boolean(client_v6, "client family")?,
            backend_v6: boolean(backend_v6, "backend family")?,
            end: EndReason::from_raw(end).ok_or(BadRecord("unknown end reason"))?,
            flags,
            worker,
        })
    }
}

fn ip_of(a: &[u8; 16], v6: bool) -> IpAddr {
    let v6addr = Ipv6Addr::from(*a);
    match v6addr.to_ipv4_mapped() {
        Some(v4) if !v6 => IpAddr::V4(v4),
        _ if !v6 => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        _ => IpAddr::V6(v6addr),
    }
}

struct Writer<'a> {
    buf: &'a mut [u8; RECORD_LEN],
    at: usize,
}

impl Writer<'_> {
    #[inline(always)]
    fn bytes(&mut self, b: &[u8]) {
        self.buf[self.at..self.at + b.len()].copy_from_slice(b);
        self.at += b.len();
    }
    #[inline(always)]
    fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }
}

struct Reader<'a> {
    buf: &'a [u8; RECORD_LEN],
    at: usize,
}

impl Reader<'_> {
    fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0; N];
        out.copy_from_slice(&self.buf[self.at..self.at + N]);
        self.at += N;
        out
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.array())
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.array())
    }
    fn addr(&mut self) -> [u8; 16] {
        self.array()
    }
}

/// Why a records region could not be created or opened.
pub type RecordsError = RegionError;

const KIND: RingsKind = RingsKind {
    name: "records",
    magic: *b"BRDRECS1",
    layout_version: RECORDS_LAYOUT_VERSION,
    control_len: RING_CONTROL,
    slot_len: RECORD_LEN,
    max_slots: 1 << 24,
};

/// A mapped records region: border-dp creates it, border-mgmt opens it.
#[derive(Debug)]
pub struct RecordsRegion {
    rings: WorkerRings,
}

impl RecordsRegion {
    /// Creates (replacing any previous one) the region for `n_workers`
    /// rings of `ring_slots` records, preallocated: a full tmpfs is an
    /// error here, never a SIGBUS later. Only border-dp calls this.
    pub fn create(
        path: &Path,
        n_workers: usize,
        ring_slots: u32,
        access: Access,
    ) -> Result<RecordsRegion, RecordsError> {
        let rings = WorkerRings::create(&KIND, path, n_workers, ring_slots, access, |_| {})?;
        Ok(RecordsRegion { rings })
    }

    /// Maps an existing region read-write (border-mgmt writes the tails)
    /// and validates its header. The file must be this user's and private
    /// to it or its group: its records become collector traffic and log lines.
    pub fn open(path: &Path, access: Access) -> Result<RecordsRegion, RecordsError> {
        let rings = WorkerRings::open(&KIND, path, access)?;
        Ok(RecordsRegion { rings })
    }

    pub fn path(&self) -> &Path {
        self.rings.path()
    }

    pub fn n_workers(&self) -> usize {
        self.rings.n_workers()
    }

    pub fn ring_slots(&self) -> usize {
        self.rings.ring_slots()
    }

    /// The border-dp that created the region.
    pub fn pid(&self) -> u32 {
        self.rings.pid()
    }

    fn word(&self, offset: usize) -> &AtomicU64 {
        self.rings.word(offset)
    }

    /// Unix time in milliseconds minus the workers' clock: a record's
    /// times plus this are wall-clock times. border-dp's main thread keeps
    /// it current ([`RecordsRegion::set_clock_offset_ms`]).
    pub fn clock_offset_ms(&self) -> i64 {
        self.word(32).load(Ordering::Acquire) as i64
    }

    pub fn set_clock_offset_ms(&self, offset: i64) {
        self.word(32).store(offset as u64, Ordering::Release);
    }

    fn ring_base(&self, worker: usize) -> usize {
        self.rings.ring_base(worker)
    }

    /// Worker `i`'s end of its ring, if the region has one for it. The
    /// writer borrows the region: keep the region alive (border-dp leaks
    /// it for the process's life) while workers run.
    pub fn writer(&self, worker: usize) -> Option<RecordWriter<'_>> {
        if worker >= self.n_workers() {
            return None;
        }
        let base = self.ring_base(worker);
        Some(RecordWriter {
            head: self.word(base),
            tail: self.word(base + 64),
            // Only this ring's one writer writes these slots, and only
            // those the reader has given back (the protocol of the module docs).
            slots: self.rings.slots_ptr(worker),
            mask: self.ring_slots() as u64 - 1,
            head_local: self.word(base).load(Ordering::Relaxed),
            tail_seen: self.word(base + 64).load(Ordering::Acquire),
            _region: std::marker::PhantomData,
        })
    }

    /// Records waiting in worker `i`'s ring.
    pub fn pending(&self, worker: usize) -> u64 {
        if worker >= self.n_workers() {
            return 0;
        }
        let base = self.ring_base(worker);
        let head = self.word(base).load(Ordering::Acquire);
        head.wrapping_sub(self.word(base + 64).load(Ordering::Relaxed))
    }

    /// Takes up to `max` records from worker `i`'s ring, oldest first,
    /// passing each to `each` (a malformed slot as its error), and gives
    /// their slots back. Returns how many were taken. Only one reader may
    /// drain a ring (border-mgmt holds the instance lock).
    pub fn drain(
        &self,
        worker: usize,
        max: usize,
        mut each: impl FnMut(Result<ConnRecord, BadRecord>),
    ) -> usize {
        if worker >= self.n_workers() {
            return 0;
        }
        let base = self.ring_base(worker);
        let (head_w, tail_w) = (self.word(base), self.word(base + 64));
        let head = head_w.load(Ordering::Acquire);
        let tail = tail_w.load(Ordering::Relaxed);
        // A head more than a ring ahead is not a writer following the
        // protocol: take the last ring's worth.
        let ready = head.wrapping_sub(tail).min(self.ring_slots() as u64);
        let n = ready.min(max as u64);
        let first = head.wrapping_sub(ready);
        let mask = self.ring_slots() as u64 - 1;
        let slots = self.rings.slots_ptr(worker);
        let mut slot = [0u8; RECORD_LEN];
        for k in 0..n {
            let at = ((first.wrapping_add(k) & mask) as usize) * RECORD_LEN;
            // SAFETY: `at + RECORD_LEN` stays inside the ring's slots
            // (masked index), which create/open checked lie in the mapping;
            // the slot lies before `head`, which the writer published after
            // filling it, and it writes the slot again only after `tail`
            // passes it (below).
            unsafe { std::ptr::copy_nonoverlapping(slots.add(at), slot.as_mut_ptr(), RECORD_LEN) };
            each(ConnRecord::decode(&slot));
        }
        tail_w.store(first.wrapping_add(n), Ordering::Release);
        n as usize
    }
}

/// A worker's end of its ring: no allocation, no lock, no system call.
pub struct RecordWriter<'a> {
    head: &'a AtomicU64,
    tail: &'a AtomicU64,
    slots: *mut u8,
    mask: u64,
    /// This writer's `head` (the shared word is only ever written from here).
    head_local: u64,
    /// The last `tail` read: the reader has given back at least this many.
    tail_seen: u64,
    _region: std::marker::PhantomData<&'a RecordsRegion>,
}

// SAFETY: the writer is the ring's only producer and moves with its worker
// thread; the slots pointer is into a mapping the borrow keeps alive, and the
// reader side only touches slots the writer has published.
unsafe impl Send for RecordWriter<'_> {}

impl RecordWriter<'_> {
    /// Appends a record; `false` (nothing written) when the ring is full.
    /// Reads the reader's `tail` only when the ring looks full.
    #[inline]
    pub fn push(&mut self, rec: &ConnRecord) -> bool {
        let capacity = self.mask + 1;
        if self.head_local.wrapping_sub(self.tail_seen) >= capacity {
            self.tail_seen = self.tail.load(Ordering::Acquire);
            if self.head_local.wrapping_sub(self.tail_seen) >= capacity {
                return false;
            }
        }
        let mut bytes = [0u8; RECORD_LEN];
        rec.encode(&mut bytes);
        let off = ((self.head_local & self.mask) as usize) * RECORD_LEN;
        // SAFETY: `off + RECORD_LEN` is inside the ring's slots (masked
        // index), and the slot is free: the reader's tail is past it (checked
        // above) and it reads no slot at or beyond `head`, which moves only
        // after this copy (release store below).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.slots.add(off), RECORD_LEN) };
        self.head_local = self.head_local.wrapping_add(1);
        self.head.store(self.head_local, Ordering::Release);
        true
    }
}

#[cfg(test)]
mod tests;
