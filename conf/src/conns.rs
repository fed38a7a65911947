//! The connections region: live connections on their way from the
//! workers of border-dp to a reader (border-mgmt for `borderctl conns`),
//! one walk at a time, without stopping or slowing a worker (docs/api.md,
//! "Live connections").
//!
//! A reader asks each worker for a walk by writing a walk id into the
//! worker's `request` word. The worker notices it once per poll iteration
//! (one relaxed load while no walk runs), and from then on copies a
//! bounded number of its connection-table entries per iteration into its
//! export ring, in slot order, until it reaches the end of its table and
//! stores the walk's length in `end`. The ring is single-producer
//! single-consumer with back pressure: the worker writes a slot only once
//! the reader's `tail` is past it, so a slow reader slows the walk, never
//! the worker, and no entry is lost.
//!
//! Every slot also carries a stamp, written last (release) after a zero
//! stamp and the record: the reader takes a slot only when the stamp it
//! reads before and after copying the record is the one this walk and
//! position must have, so a slot being rewritten (a reader of an abandoned
//! walk, a worker restarted over the same memory) is never shown as a
//! record; it is counted as torn instead.
//!
//! What a listing is: each record is one entry as its worker saw it at one
//! instant (the worker copies it between two packets); the records of a
//! walk are not one instant of the table. A connection that lives from the
//! walk's start to its end is listed exactly once; one that starts or ends
//! during the walk may or may not be.
//!
//! Layout (offsets in bytes, little endian, the file mapped page-aligned):
//!
//! The header is [`crate::worker_rings`]'s, with magic "BRDCONN1" and
//! slot_len SLOT_LEN. Each worker's ring (offsets in bytes, little endian):
//!
//! ```text
//! 0    request          u64      atomic; the walk asked for, 0 for none (the reader's)
//! 64   served           u64      atomic; the walk being served (the worker's)
//! 128  head             u64      atomic; records written in this walk (the worker's)
//! 192  end              u64      atomic; the walk's length once complete, else u64::MAX (the worker's)
//! 256  tail             u64      atomic; records read (the reader's)
//! 320  slots            [[u64; SLOT_WORDS]; ring_slots], word 0 the stamp
//! ```

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicU64, Ordering};

use crate::os::files::Access;
use crate::worker_rings::{RegionError, RingsKind, WorkerRings};

/// Bumped whenever the byte layout of the region or of a record changes.
pub const CONNS_LAYOUT_VERSION: u32 = 1;

const CONTROL: usize = 320;
const REQUEST: usize = 0;
const SERVED: usize = 64;
const HEAD: usize = 128;
const END: usize = 192;
const TAIL: usize = 256;

/// Words of one slot: the stamp, then the record.
pub const SLOT_WORDS: usize = 24;
/// Bytes of one slot (three cache lines).
pub const SLOT_LEN: usize = SLOT_WORDS * 8;
const RECORD_WORDS: usize = 19;

/// Slots per worker ring border-dp creates.
pub const RING_SLOTS: u32 = 2048;

/// `end` while a walk runs.
const RUNNING: u64 = u64::MAX;

/// Where the connections region of an instance lives:
/// `/dev/shm/border-<instance>-conns` ([`crate::os::region_dir`] moves it).
pub fn conns_path(instance: &str) -> PathBuf {
    crate::os::region_dir().join(format!("border-{instance}-conns"))
}

/// `LiveConn::flags`: the VIP is full-NAT (else DNAT).
pub const LIVE_FULL_NAT: u8 = 1;
/// The VIP sends a PROXY protocol v2 header to the backend.
pub const LIVE_PROXY: u8 = 2;
/// The header was sent.
pub const LIVE_PROXY_SENT: u8 = 4;
/// The backend acknowledged it.
pub const LIVE_PROXY_ACKED: u8 = 8;
/// `packets` and `octets` are counted (`[records]` is configured).
pub const LIVE_METERED: u8 = 16;
const LIVE_FLAGS_KNOWN: u8 =
    LIVE_FULL_NAT | LIVE_PROXY | LIVE_PROXY_SENT | LIVE_PROXY_ACKED | LIVE_METERED;

/// The names of the connection-table states, by their number in
/// [`LiveConn::state`] (the dataplane's `conntrack::State`).
pub const STATE_NAMES: [&str; 7] = [
    "syn_sent",
    "syn_recv",
    "established",
    "fin_wait",
    "time_wait",
    "closed",
    "udp",
];

/// One live connection as its worker saw it when it copied the entry.
/// Addresses are 16 bytes, IPv4 mapped, with the family in `client_v6` /
/// `backend_v6`; `local` is the full-NAT local address and port (the
/// client's for DNAT). Times are on the workers' clock in milliseconds;
/// `now_ms` is that clock when the entry was copied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveConn {
    pub conn_id: u64,
    pub created_ms: u64,
    /// The connection's last packet that refreshed its deadline.
    pub last_seen_ms: u64,
    pub expires_ms: u64,
    pub now_ms: u64,
    /// Packets forwarded, client to backend then backend to client (zero
    /// unless [`LIVE_METERED`]).
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
    /// An index into [`STATE_NAMES`].
    pub state: u8,
    /// [`LIVE_FULL_NAT`], [`LIVE_PROXY`], [`LIVE_PROXY_SENT`],
    /// [`LIVE_PROXY_ACKED`], [`LIVE_METERED`].
    pub flags: u8,
    /// The worker that tracks it.
    pub worker: u16,
}

/// Record words that are not a record border-dp writes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed live connection: {0}")]
pub struct BadLiveConn(&'static str);

impl LiveConn {
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
    pub fn state_name(&self) -> &'static str {
        STATE_NAMES[usize::from(self.state)]
    }
    pub fn full_nat(&self) -> bool {
        self.flags & LIVE_FULL_NAT != 0
    }
    pub fn metered(&self) -> bool {
        self.flags & LIVE_METERED != 0
    }
    /// `off`, `pending` (not sent yet), `sent` (not acknowledged yet) or
    /// `acked`.
    pub fn proxy_status(&self) -> &'static str {
        match self.flags & (LIVE_PROXY | LIVE_PROXY_SENT | LIVE_PROXY_ACKED) {
            f if f & LIVE_PROXY == 0 => "off",
            f if f & LIVE_PROXY_ACKED != 0 => "acked",
            f if f & LIVE_PROXY_SENT != 0 => "sent",
            _ => "pending",
        }
    }

    /// The record's words in a slot (after its stamp).
    #[inline]
    pub fn encode(&self) -> [u64; RECORD_WORDS] {
        let addr = |a: &[u8; 16]| {
            let v = u128::from_le_bytes(*a);
            [v as u64, (v >> 64) as u64]
        };
        let [c0, c1] = addr(&self.client);
        let [v0, v1] = addr(&self.vip);
        let [b0, b1] = addr(&self.backend);
        let [l0, l1] = addr(&self.local);
        [
            self.conn_id,
            self.created_ms,
            self.last_seen_ms,
            self.expires_ms,
            self.now_ms,
            self.packets[0],
            self.packets[1],
            self.octets[0],
            self.octets[1],
            c0,
            c1,
            v0,
            v1,
            b0,
            b1,
            l0,
            l1,
            u64::from(self.client_port)
                | u64::from(self.vip_port) << 16
                | u64::from(self.backend_port) << 32
                | u64::from(self.local_port) << 48,
            u64::from(self.proto)
                | u64::from(self.client_v6) << 8
                | u64::from(self.backend_v6) << 16
                | u64::from(self.state) << 24
                | u64::from(self.flags) << 32
                | u64::from(self.worker) << 48,
        ]
    }

    /// A record from a slot's words, checked: fields with a closed set of
    /// values must hold one of them.
    pub fn decode(w: &[u64; RECORD_WORDS]) -> Result<LiveConn, BadLiveConn> {
        let addr = |lo: u64, hi: u64| (u128::from(lo) | u128::from(hi) << 64).to_le_bytes();
        let (ports, misc) = (w[17], w[18]);
        let byte = |shift: u32| (misc >> shift) as u8;
        let boolean = |v: u8, what| match v {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(BadLiveConn(what)),
        };
        let (state, flags) = (byte(24), byte(32));
        if usize::from(state) >= STATE_NAMES.len() {
            return Err(BadLiveConn("unknown state"));
        }
        if flags & !LIVE_FLAGS_KNOWN != 0 || byte(40) != 0 {
            return Err(BadLiveConn("unknown flag bits"));
        }
        if w[2] < w[1] && w[2] != 0 {
            return Err(BadLiveConn("seen before it was created"));
        }
        Ok(LiveConn {
            conn_id: w[0],
            created_ms: w[1],
            last_seen_ms: w[2],
            expires_ms: w[3],
            now_ms: w[4],
            packets: [w[5], w[6]],
            octets: [w[7], w[8]],
            client: addr(w[9], w[10]),
            vip: addr(w[11], w[12]),
            backend: addr(w[13], w[14]),
            local: addr(w[15], w[16]),
            client_port: ports as u16,
            vip_port: (ports >> 16) as u16,
            backend_port: (ports >> 32) as u16,
            local_port: (ports >> 48) as u16,
            proto: byte(0),
            client_v6: boolean(byte(8), "client family")?,
            backend_v6: boolean(byte(16), "backend family")?,
            state,
            flags,
            worker: (misc >> 48) as u16,
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

/// The stamp of the record at position `pos` of walk `walk`: never 0 (the
/// stamp of a slot being written) for a walk id that is not 0.
#[inline(always)]
fn stamp(walk: u64, pos: u64) -> u64 {
    walk << 32 ^ (pos.wrapping_add(1) & 0xFFFF_FFFF)
}

/// Why a connections region could not be created or opened.
pub type ConnsError = RegionError;

const KIND: RingsKind = RingsKind {
    name: "connections",
    magic: *b"BRDCONN1",
    layout_version: CONNS_LAYOUT_VERSION,
    control_len: CONTROL,
    slot_len: SLOT_LEN,
    max_slots: 1 << 20,
};

/// A mapped connections region: border-dp creates it, the reader opens it.
#[derive(Debug)]
pub struct ConnsRegion {
    rings: WorkerRings,
}

impl ConnsRegion {
    /// Creates (replacing any previous one) the region for `n_workers`
    /// rings of `ring_slots` slots, preallocated. Only border-dp calls this.
    pub fn create(
        path: &Path,
        n_workers: usize,
        ring_slots: u32,
        access: Access,
    ) -> Result<ConnsRegion, ConnsError> {
        let rings = WorkerRings::create(&KIND, path, n_workers, ring_slots, access, |control| {
            control[END..END + 8].copy_from_slice(&RUNNING.to_le_bytes())
        })?;
        Ok(ConnsRegion { rings })
    }

    /// Maps an existing region read-write (the reader writes `request`
    /// and `tail`) and validates its header. The file must be this user's
    /// and private to it or its group: it lists every client's address.
    pub fn open(path: &Path, access: Access) -> Result<ConnsRegion, ConnsError> {
        let rings = WorkerRings::open(&KIND, path, access)?;
        Ok(ConnsRegion { rings })
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

    fn worker_base(&self, worker: usize) -> usize {
        self.rings.ring_base(worker)
    }

    fn slot_word(&self, worker: usize, pos: u64, word: usize) -> &AtomicU64 {
        let slot = (pos & (self.ring_slots() as u64 - 1)) as usize;
        self.word(self.worker_base(worker) + CONTROL + slot * SLOT_LEN + word * 8)
    }

    /// Worker `i`'s end of its ring, if the region has one for it. The
    /// exporter borrows the region: keep the region alive (border-dp leaks
    /// it for the process's life) while workers run.
    pub fn exporter(&self, worker: usize) -> Option<ConnsExport<'_>> {
        if worker >= self.n_workers() {
            return None;
        }
        let base = self.worker_base(worker);
        let first = self.rings.slots_ptr(worker) as *const AtomicU64;
        Some(ConnsExport {
            request: self.word(base + REQUEST),
            served: self.word(base + SERVED),
            head: self.word(base + HEAD),
            end: self.word(base + END),
            tail: self.word(base + TAIL),
            slots: first,
            mask: self.ring_slots() as u64 - 1,
            served_local: self.word(base + SERVED).load(Ordering::Relaxed),
            active: false,
            head_local: 0,
            tail_seen: 0,
            cursor: 0,
            _region: std::marker::PhantomData,
        })
    }

    /// Asks worker `i` for walk `walk` (not 0), dropping whatever walk it
    /// served before. Only one reader may walk a worker at a time.
    pub fn request(&self, worker: usize, walk: u64) {
        let base = self.worker_base(worker);
        self.word(base + TAIL).store(0, Ordering::Relaxed);
        self.word(base + REQUEST).store(walk, Ordering::Release);
    }

    /// Tells worker `i` to stop serving any walk (the reader went away).
    pub fn cancel(&self, worker: usize) {
        self.word(self.worker_base(worker) + REQUEST)
            .store(0, Ordering::Release);
    }

    /// Takes up to `max` records of walk `walk` from worker `i`'s ring,
    /// in order, passing each to `each`, and gives their slots back.
    pub fn take(
        &self,
        worker: usize,
        walk: u64,
        max: usize,
        mut each: impl FnMut(Result<LiveConn, BadLiveConn>),
    ) -> Taken {
        let base = self.worker_base(worker);
        if self.word(base + SERVED).load(Ordering::Acquire) != walk {
            return Taken::default();
        }
        let head = self.word(base + HEAD).load(Ordering::Acquire);
        let end = self.word(base + END).load(Ordering::Acquire);
        let tail_w = self.word(base + TAIL);
        let tail = tail_w.load(Ordering::Relaxed);
        // A head more than a ring ahead is not a worker following the
        // protocol: its slots are taken, each checked by its stamp.
        let n = head.wrapping_sub(tail).min(max as u64);
        let mut taken = Taken {
            started: true,
            ..Taken::default()
        };
        for pos in tail..tail.wrapping_add(n) {
            match self.read_slot(worker, walk, pos) {
                Some(words) => {
                    taken.records += 1;
                    each(LiveConn::decode(&words));
                }
                None => taken.torn += 1,
            }
        }
        let tail = tail.wrapping_add(n);
        tail_w.store(tail, Ordering::Release);
        // `end` was read before `head`'s last records were taken: the
        // walk is over once the tail reaches it.
        taken.done = end != RUNNING && tail >= end;
        taken
    }

    /// The record at `pos` of walk `walk`, if its slot holds that record
    /// whole: the stamp before and after the copy is the one it must be.
    fn read_slot(&self, worker: usize, walk: u64, pos: u64) -> Option<[u64; RECORD_WORDS]> {
        let want = stamp(walk, pos);
        if self.slot_word(worker, pos, 0).load(Ordering::Acquire) != want {
            return None;
        }
        let mut words = [0u64; RECORD_WORDS];
        for (i, w) in words.iter_mut().enumerate() {
            *w = self.slot_word(worker, pos, 1 + i).load(Ordering::Relaxed);
        }
        fence(Ordering::Acquire);
        (self.slot_word(worker, pos, 0).load(Ordering::Relaxed) == want).then_some(words)
    }

    /// Overwrites slot `pos` as a writer that ignores the protocol would:
    /// zero stamp, `words` one by one, the stamp of `walk`. Tests only.
    #[doc(hidden)]
    pub fn scribble(&self, worker: usize, walk: u64, pos: u64, words: &[u64; RECORD_WORDS]) {
        self.slot_word(worker, pos, 0).store(0, Ordering::Relaxed);
        fence(Ordering::Release);
        for (i, w) in words.iter().enumerate() {
            self.slot_word(worker, pos, 1 + i)
                .store(*w, Ordering::Relaxed);
        }
        self.slot_word(worker, pos, 0)
            .store(stamp(walk, pos), Ordering::Release);
    }
}

/// What one [`ConnsRegion::take`] got.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Taken {
    /// The worker serves the walk asked for.
    pub started: bool,
    /// Records passed on.
    pub records: usize,
    /// Slots whose stamp was not the one their position must have: skipped.
    pub torn: usize,
    /// The walk ended and every record of it was taken.
    pub done: bool,
}

/// A worker's end of its export ring: no allocation, no lock, no system
/// call. While no walk is asked for, [`ConnsExport::walking`] is one
/// relaxed load.
pub struct ConnsExport<'a> {
    request: &'a AtomicU64,
    served: &'a AtomicU64,
    head: &'a AtomicU64,
    end: &'a AtomicU64,
    tail: &'a AtomicU64,
    /// Slot 0's stamp; slot `i`'s word `k` is `i * SLOT_WORDS + k` words on.
    slots: *const AtomicU64,
    mask: u64,
    served_local: u64,
    /// A walk is being served and has not reached the end of the table.
    active: bool,
    head_local: u64,
    tail_seen: u64,
    /// The next connection-table slot to look at.
    cursor: usize,
    _region: std::marker::PhantomData<&'a ConnsRegion>,
}

// SAFETY: the exporter is its ring's only producer and moves with its
// worker thread; every word it touches is an atomic in a mapping the borrow
// keeps alive.
unsafe impl Send for ConnsExport<'_> {}

impl ConnsExport<'_> {
    /// Whether a walk wants more records (starting one a reader just asked
    /// for, or dropping one it cancelled).
    #[inline(always)]
    pub fn walking(&mut self) -> bool {
        let req = self.request.load(Ordering::Relaxed);
        if req != self.served_local {
            self.switch(req);
        }
        self.active
    }

    #[cold]
    #[inline(never)]
    fn switch(&mut self, req: u64) {
        // Pairs with the reader's release store of `request`: its reset
        // of `tail` is seen from here on.
        fence(Ordering::Acquire);
        self.served_local = req;
        self.active = req != 0;
        self.head_local = 0;
        self.tail_seen = 0;
        self.cursor = 0;
        self.head.store(0, Ordering::Relaxed);
        self.end.store(RUNNING, Ordering::Relaxed);
        self.served.store(req, Ordering::Release);
    }

    /// Slots the reader has given back: how many records may be written now.
    #[inline]
    pub fn room(&mut self) -> usize {
        let capacity = self.mask + 1;
        if self.head_local.wrapping_sub(self.tail_seen) >= capacity {
            self.tail_seen = self.tail.load(Ordering::Acquire);
        }
        capacity.saturating_sub(self.head_local.wrapping_sub(self.tail_seen)) as usize
    }

    /// The next connection-table slot the walk looks at.
    pub fn cursor(&self) -> usize {
        self.cursor
    }

    pub fn set_cursor(&mut self, cursor: usize) {
        self.cursor = cursor;
    }

    fn slot_word(&self, pos: u64, word: usize) -> &AtomicU64 {
        let at = ((pos & self.mask) as usize) * SLOT_WORDS + word;
        // SAFETY: `at` indexes a word of one of the ring's `mask + 1` slots
        // (masked position), all inside the mapping the region checked at
        // create/open and this borrow keeps alive; AtomicU64 has the
        // alignment of the 8-byte-aligned slots.
        unsafe { &*self.slots.add(at) }
    }

    /// Appends a record; the caller checked [`ConnsExport::room`].
    #[inline]
    pub fn push(&mut self, rec: &LiveConn) {
        let pos = self.head_local;
        self.slot_word(pos, 0).store(0, Ordering::Relaxed);
        fence(Ordering::Release);
        for (i, w) in rec.encode().into_iter().enumerate() {
            self.slot_word(pos, 1 + i).store(w, Ordering::Relaxed);
        }
        self.slot_word(pos, 0)
            .store(stamp(self.served_local, pos), Ordering::Release);
        self.head_local = pos.wrapping_add(1);
        self.head.store(self.head_local, Ordering::Release);
    }

    /// The walk reached the end of the table: its length is published.
    pub fn finish(&mut self) {
        self.active = false;
        self.end.store(self.head_local, Ordering::Release);
    }
}

#[cfg(test)]
mod tests;
