//! The publisher side: write changed blocks into free arena space, publish
//! with one atomic store, retire replaced blocks and reclaim them once every
//! live reader has passed (QSBR).

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use memmap2::MmapRaw;
use zerocopy::IntoBytes;

use super::alloc::Arena;
use super::layout::*;
use super::reader::{check_header, header_word, validate, Region};
use super::{
    file_error, BackendEntry, Generation, Published, TablesError, VipTable, PROTO_TCP, PROTO_UDP,
};
use crate::config::{Encap, Mode, VipLimits};
use crate::os::files::{self, Access};
use crate::os::LockError;

/// What one [`TablesWriter::publish`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PublishStats {
    /// The generation now published.
    pub generation: u64,
    /// Blocks written (changed or new VIPs, plus the root).
    pub blocks_written: u32,
    /// Bytes of those blocks.
    pub bytes_written: u64,
    /// VIP blocks reused from the previous generation.
    pub blocks_reused: u32,
    /// VIP blocks recognised as unchanged by pointer (an `Arc` shared with
    /// the previous generation), without looking at their contents.
    pub reused_by_pointer: u32,
    /// Retired extents reclaimed (every reader had passed their
    /// retirement) before writing: blocks, or after [`TablesWriter::attach`]
    /// the gaps of unknown history.
    pub blocks_reclaimed: u32,
    /// Bytes reclaimed.
    pub bytes_reclaimed: u64,
    /// Retired blocks still held back by some reader after this publish.
    pub blocks_pending: u32,
    /// Bytes of those.
    pub bytes_pending: u64,
    /// Free arena bytes after this publish.
    pub arena_free: u64,
    /// Arena bytes.
    pub arena_len: u64,
}

/// A block of the published generation.
#[derive(Debug, Clone)]
struct LiveVip {
    /// The VIP's id.
    id: u32,
    off: u64,
    /// Bytes of the block (header `len`).
    len: u64,
    checksum: u64,
    /// The model value it was written from (or last recognised as), for
    /// O(1) reuse; `None` after [`TablesWriter::attach`].
    src: Option<Arc<VipTable>>,
}

#[derive(Debug, Clone, Copy)]
struct Retired {
    /// Generation whose publication retired the block.
    at: u64,
    off: u64,
    /// Allocated bytes (multiple of UNIT).
    len: u64,
}

/// The only writer of a tables region.
///
/// Holds an exclusive `flock` on the file for its lifetime, so a second
/// publisher (another process, or a second writer in this one) is refused
/// with [`TablesError::Busy`]; the lock dies with the process, so a
/// restarted publisher can [`TablesWriter::attach`].
pub struct TablesWriter {
    map: MmapRaw,
    _file: File,
    path: PathBuf,
    region_len: u64,
    region_id: u64,
    arena: Arena,
    /// The published generation (0 = none) and its root block.
    generation: u64,
    root: Option<(u64, u64)>,
    /// VIP blocks of the published generation, in root order.
    live: Vec<LiveVip>,
    /// Blocks no longer published, in order of retirement.
    retired: VecDeque<Retired>,
    /// End of the highest byte ever allocated (mirrored in the header).
    high_water: u64,
    /// Serialisation buffer for a VIP block's head (everything but the ring).
    head: Vec<u8>,
}

impl std::fmt::Debug for TablesWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TablesWriter")
            .field("path", &self.path)
            .field("generation", &self.generation)
            .field("arena_free", &self.arena.free_bytes())
            .finish()
    }
}

/// The region's single-writer lock: an exclusive `flock` on its file.
fn lock(file: &File, path: &Path) -> Result<(), TablesError> {
    crate::os::try_lock_exclusive(file).map_err(|e| match e {
        LockError::Held => TablesError::Busy {
            path: path.to_owned(),
        },
        LockError::Io(source) => TablesError::Io {
            path: path.to_owned(),
            source,
        },
        LockError::Untrusted(u) => TablesError::Untrusted(u),
    })
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A value that differs between regions: SipHash of the time, the pid and a
/// per-process counter.
fn new_region_id() -> u64 {
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mut msg = [0u8; 28];
    msg[..16].copy_from_slice(&nanos.to_le_bytes());
    msg[16..20].copy_from_slice(&std::process::id().to_le_bytes());
    msg[20..].copy_from_slice(&COUNT.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    crate::flowhash::siphash24(b"border-region-id", &msg)
}

/// Offsets inside a VIP block.
struct VipLayout {
    name_off: u64,
    backends_off: u64,
    limits_off: u64,
    ring_off: u64,
    /// Bytes before the ring (header, record, name, padding, backends).
    head_len: u64,
    len: u64,
}

fn vip_layout(v: &VipTable) -> VipLayout {
    let name_off = VIP_FIXED_END;
    let backends_off = round_up(name_off + v.name.len() as u64, 8);
    let limits_off = backends_off + v.backends.len() as u64 * 32;
    let n_prefixes = (v.limits.allow.len() + v.limits.deny.len()) as u64;
    let ring_off = limits_off + 32 + n_prefixes * 24;
    let len = round_up(ring_off + v.ring.len() as u64 * 4, 8);
    VipLayout {
        name_off,
        backends_off,
        limits_off,
        ring_off,
        head_len: ring_off,
        len,
    }
}

fn addr16(a: std::net::IpAddr) -> (u8, [u8; 16]) {
    match a {
        std::net::IpAddr::V4(v4) => {
            let mut b = [0u8; 16];
            b[..4].copy_from_slice(&v4.octets());
            (4, b)
        }
        std::net::IpAddr::V6(v6) => (6, v6.octets()),
    }
}

/// Checks what a reader would refuse, before anything is written.
fn check_vip(v: &VipTable) -> Result<(), TablesError> {
    let bad = |what: String| {
        Err(TablesError::InvalidGeneration(format!(
            "vip {}: {what}",
            v.id
        )))
    };
    if v.name.len() > MAX_NAME_LEN as usize {
        return bad(format!(
            "name is {} bytes (at most {MAX_NAME_LEN})",
            v.name.len()
        ));
    }
    if v.proto != PROTO_TCP && v.proto != PROTO_UDP {
        return bad(format!("protocol {} (expected 6 or 17)", v.proto));
    }
    if v.backends.len() > MAX_BACKENDS as usize {
        return bad(format!(
            "{} backends (at most {MAX_BACKENDS})",
            v.backends.len()
        ));
    }
    let prefixes = v.limits.allow.len() + v.limits.deny.len();
    if prefixes > MAX_PREFIXES as usize {
        return bad(format!(
            "{prefixes} allow/deny prefixes (at most {MAX_PREFIXES})"
        ));
    }
    let lim = &v.limits;
    for net in lim.allow.iter().chain(&lim.deny) {
        let max = if net.is_ipv4() { 32 } else { 128 };
        if net.is_ipv4() != v.addr.is_ipv4() || net.prefix_len == 0 || net.prefix_len > max {
            return bad(format!("prefix {net} does not fit the VIP {}", v.addr));
        }
    }
    let t = lim.source_table_size;
    if lim.per_source_per_second > 0
        && (!t.is_power_of_two()
            || t > crate::config::VipLimits::MAX_SOURCE_TABLE
            || !(1..=32).contains(&lim.source_prefix_v4)
            || !(1..=128).contains(&lim.source_prefix_v6))
    {
        return bad(format!(
            "per-source table of {t} for /{} and /{} prefixes",
            lim.source_prefix_v4, lim.source_prefix_v6
        ));
    }
    if v.persistence_s > MAX_PERSISTENCE_S {
        return bad(format!(
            "persistence of {} s (at most {MAX_PERSISTENCE_S})",
            v.persistence_s
        ));
    }
    if v.ring.len() > MAX_RING as usize {
        return bad(format!("ring of {} (at most {MAX_RING})", v.ring.len()));
    }
    let n = v.backends.len() as u32;
    // One branch-free pass (vectorises); find the culprit only on error.
    let max = v.ring.iter().fold(0u32, |m, &e| m.max(e));
    if !v.ring.is_empty() && max >= n {
        let i = v.ring.iter().position(|&e| e >= n).unwrap_or(0);
        return bad(format!(
            "ring[{i}] = {} but there are {n} backends",
            v.ring[i]
        ));
    }
    Ok(())
}

/// Serialises everything of a VIP block but the ring into `out` (with a
/// zero checksum), returns the layout.
fn vip_head(v: &VipTable, born: u64, out: &mut Vec<u8>) -> VipLayout {
    let l = vip_layout(v);
    out.clear();
    out.resize(l.head_len as usize, 0);
    let hdr = BlockHeader {
        checksum: 0,
        magic: VIP_MAGIC,
        reserved: 0,
        len: l.len,
        born,
    };
    out[..BLOCK_HEADER_LEN as usize].copy_from_slice(hdr.as_bytes());
    let (family, addr) = addr16(v.addr);
    let rec = VipRecord {
        id: v.id,
        flags: v.flags.bits(),
        addr,
        port: v.port,
        pp_max_len: v.pp_max_len,
        family,
        proto: v.proto,
        mode: mode_byte(v.mode),
        reserved0: 0,
        n_backends: v.backends.len() as u32,
        ring_len: v.ring.len() as u32,
        backends_off: l.backends_off as u32,
        ring_off: l.ring_off as u32,
        name_off: l.name_off as u32,
        name_len: v.name.len() as u32,
        limits_off: l.limits_off as u32,
        n_prefixes: (v.limits.allow.len() + v.limits.deny.len()) as u32,
        persistence_s: v.persistence_s,
        reserved1: 0,
    };
    out[BLOCK_HEADER_LEN as usize..VIP_FIXED_END as usize].copy_from_slice(rec.as_bytes());
    let n = l.name_off as usize;
    out[n..n + v.name.len()].copy_from_slice(v.name.as_bytes());
    let mut o = l.backends_off as usize;
    for b in &v.backends {
        out[o..o + 32].copy_from_slice(backend_record(b).as_bytes());
        o += 32;
    }
    let mut o = l.limits_off as usize;
    out[o..o + 32].copy_from_slice(limits_record(&v.limits).as_bytes());
    o += 32;
    for p in prefix_records(&v.limits) {
        out[o..o + 24].copy_from_slice(p.as_bytes());
        o += 24;
    }
    l
}

/// The limits record of `[vip.limits]`.
pub fn limits_record(lim: &VipLimits) -> LimitsRecord {
    LimitsRecord {
        max_connections: lim.max_connections,
        new_per_second: lim.new_connections_per_second,
        new_burst: lim.new_connections_burst,
        source_per_second: lim.per_source_per_second,
        source_burst: lim.per_source_burst,
        source_table: lim.source_table_size,
        source_prefix_v4: lim.source_prefix_v4,
        source_prefix_v6: lim.source_prefix_v6,
        reserved: [0; 6],
    }
}

/// The prefix records of `[vip.limits]`: `allow`, then `deny`.
pub fn prefix_records(lim: &VipLimits) -> Vec<PrefixRecord> {
    let tagged = lim
        .allow
        .iter()
        .map(|n| (n, 0))
        .chain(lim.deny.iter().map(|n| (n, 1)));
    tagged
        .map(|(net, deny)| {
            let (family, addr) = addr16(net.network());
            PrefixRecord {
                addr,
                len: net.prefix_len,
                family,
                deny,
                reserved: [0; 5],
            }
        })
        .collect()
}

fn backend_record(b: &BackendEntry) -> BackendRecord {
    let (family, addr) = addr16(b.addr);
    BackendRecord {
        addr,
        id: b.id,
        weight: b.weight,
        port: b.port,
        family,
        state: b.state.to_u8(),
        max_connections: b.max_connections,
    }
}

impl TablesWriter {
    /// Creates a fresh region with an arena of (at least) `arena_bytes`
    /// bytes and nothing published. The file is built under a temporary
    /// name and renamed over `path`, so readers that still map an older
    /// region at `path` keep a consistent (if frozen) table until they
    /// re-open ([`super::TablesReader::replaced`]). Refused with
    /// [`TablesError::Busy`] while another writer holds the existing region.
    ///
    /// Generations restart at 1 in a new region: quiescent values that
    /// workers reported for the old region mean nothing for the new one, so
    /// pass only those of workers that have re-opened (compare
    /// [`super::TablesReader::region_id`]).
    pub fn create(path: &Path, arena_bytes: u64) -> Result<TablesWriter, TablesError> {
        let io = |source| TablesError::Io {
            path: path.to_owned(),
            source,
        };
        let arena = round_up(arena_bytes.max(UNIT), UNIT);
        let region_len = HEADER_LEN
            .checked_add(arena)
            .filter(|&l| l <= MAX_REGION_LEN);
        let Some(region_len) = region_len else {
            return Err(TablesError::TooLarge {
                requested: arena_bytes,
                max: MAX_REGION_LEN - HEADER_LEN,
            });
        };
        // Another writer of ours holding the current region refuses this
        // create. A symlink at `path` is not opened and another user's file
        // is not locked (its owner could hold the lock to keep us out): the
        // rename below replaces the name, never what it points to.
        // A FIFO or socket there is not opened either (it would block).
        if let Ok((old, meta)) = files::open_no_follow(path, false) {
            if meta.uid() == files::euid() {
                lock(&old, path)?;
            }
        }
        let region_id = new_region_id();
        // Unique and unpredictable, made with O_EXCL: never an existing
        // file, never through a symlink another user planted. Mode 0600
        // always: the region holds the flow hash key.
        let tmp = files::temp_path_for(path);
        let file = files::create_new(&tmp, Access::PRIVATE).map_err(|e| file_error(path, e))?;
        let result = (|| {
            lock(&file, path)?;
            files::allocate(&file, region_len).map_err(io)?;
            // A raw mapping: this process writes it only through pointers to
            // ranges no reader may be reading (`extent_mut`) and through
            // atomics for header words; no `&mut [u8]` over the file exists.
            let map = MmapRaw::map_raw(&file).map_err(io)?;
            let mut head = [0u8; 64];
            head[H_MAGIC..H_MAGIC + 8].copy_from_slice(&REGION_MAGIC);
            head[H_VERSION..H_VERSION + 4].copy_from_slice(&TABLES_LAYOUT_VERSION.to_le_bytes());
            head[H_HEADER_LEN..H_HEADER_LEN + 4]
                .copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
            head[H_REGION_LEN..H_REGION_LEN + 8].copy_from_slice(&region_len.to_le_bytes());
            head[H_REGION_ID..H_REGION_ID + 8].copy_from_slice(&region_id.to_le_bytes());
            head[H_HIGH_WATER..H_HIGH_WATER + 8].copy_from_slice(&HEADER_LEN.to_le_bytes());
            head[H_CREATED_MS..H_CREATED_MS + 8].copy_from_slice(&now_ms().to_le_bytes());
            // SAFETY: the mapping is `region_len >= HEADER_LEN > 64` bytes and
            // not yet visible to any other process or thread.
            unsafe { std::ptr::copy_nonoverlapping(head.as_ptr(), map.as_mut_ptr(), head.len()) };
            let w = TablesWriter {
                map,
                _file: file,
                path: path.to_owned(),
                region_len,
                region_id,
                arena: Arena::new(HEADER_LEN, region_len),
                generation: 0,
                root: None,
                live: Vec::new(),
                retired: VecDeque::new(),
                high_water: HEADER_LEN,
                head: Vec::new(),
            };
            w.set_pid();
            std::fs::rename(&tmp, path).map_err(io)?;
            Ok(w)
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }

    /// Re-attaches a restarted publisher to an existing region without
    /// disturbing it: the published generation stays published and is
    /// validated in full (a corrupt live generation is refused). The
    /// allocator is rebuilt from it: its blocks are in use; the rest of the
    /// space ever allocated (below the header's high-water mark) may still
    /// be read by a reader that has not passed the current generation, so
    /// it counts as retired by the current generation and is reclaimed by
    /// the first publish at which every live reader has reached it; the
    /// space above the mark is free.
    pub fn attach(path: &Path) -> Result<TablesWriter, TablesError> {
        let io = |source| TablesError::Io {
            path: path.to_owned(),
            source,
        };
        // Only a region this user made, mode 0600, never through a symlink:
        // another user's file could be rewritten under the dataplane.
        let file = files::open_own(path, Access::PRIVATE, true).map_err(|e| file_error(path, e))?;
        lock(&file, path)?;
        let meta = file.metadata().map_err(io)?;
        if meta.len() < HEADER_LEN {
            return Err(TablesError::BadHeader {
                path: path.to_owned(),
                what: format!(
                    "{} bytes is shorter than the {HEADER_LEN}-byte header",
                    meta.len()
                ),
            });
        }
        // We hold the exclusive writer lock, so no other publisher writes the
        // file; readers only read it. Writes go through raw pointers to free
        // ranges and through header atomics only.
        let map = MmapRaw::map_raw(&file).map_err(io)?;
        let (region_len, region_id) = check_header(map.as_ptr(), map.len() as u64, path)?;
        let mut w = TablesWriter {
            map,
            _file: file,
            path: path.to_owned(),
            region_len,
            region_id,
            arena: Arena::empty(),
            generation: 0,
            root: None,
            live: Vec::new(),
            retired: VecDeque::new(),
            high_water: HEADER_LEN,
            head: Vec::new(),
        };
        let p = w.published();
        let hw = w.header(H_HIGH_WATER).load(Ordering::Relaxed);
        let hw = if (HEADER_LEN..=region_len).contains(&hw) && hw.is_multiple_of(UNIT) {
            hw
        } else {
            region_len
        };
        w.high_water = hw;
        if p.generation == 0 {
            // Nothing was ever published, so no reader holds anything.
            w.arena = Arena::new(HEADER_LEN, region_len);
            w.set_pid();
            return Ok(w);
        }
        // SAFETY: the mapping covers region_len bytes (checked) and lives as
        // long as `w`; live blocks are immutable while published.
        let region = unsafe { Region::new(w.map.as_ptr(), region_len) };
        let view = validate(&region, p, None)?;
        let mut used: Vec<(u64, u64)> = Vec::with_capacity(view.vip_count() + 1);
        used.push((view.root.offset, round_up(view.root.len, UNIT)));
        let mut live = Vec::with_capacity(view.vip_count());
        let mut ids = HashSet::with_capacity(view.vip_count());
        for v in view.vips() {
            let b = v.block;
            if !ids.insert(v.id()) {
                return Err(TablesError::Corrupt {
                    generation: p.generation,
                    problem: super::Corruption::Slot {
                        vip: v.id(),
                        field: "duplicate vip_id",
                    },
                });
            }
            live.push(LiveVip {
                id: v.id(),
                off: b.offset,
                len: b.len,
                checksum: b.checksum,
                src: None,
            });
            used.push((b.offset, round_up(b.len, UNIT)));
        }
        let root = view.root;
        drop(view);
        used.sort_unstable();
        used.dedup();
        // Everything below the high-water mark that is not live: retired at
        // the current generation.
        let hw = used
            .iter()
            .map(|&(o, l)| o + l)
            .max()
            .unwrap_or(HEADER_LEN)
            .max(hw)
            .min(region_len);
        let mut retired = VecDeque::new();
        let mut cursor = HEADER_LEN;
        for &(o, l) in &used {
            if o < cursor {
                return Err(TablesError::Corrupt {
                    generation: p.generation,
                    problem: super::Corruption::BlockOffset { offset: o },
                });
            }
            if o > cursor {
                retired.push_back(Retired {
                    at: p.generation,
                    off: cursor,
                    len: o - cursor,
                });
            }
            cursor = o + l;
        }
        if hw > cursor {
            retired.push_back(Retired {
                at: p.generation,
                off: cursor,
                len: hw - cursor,
            });
        }
        // The arena starts with only [hw, end) free; retired extents are
        // freed by `reclaim`. Live extents are never in it.
        w.arena = Arena::new(hw, region_len);
        w.retired = retired;
        w.generation = p.generation;
        w.root = Some((root.offset, round_up(root.len, UNIT)));
        w.live = live;
        w.high_water = hw;
        w.set_pid();
        Ok(w)
    }

    fn header(&self, off: usize) -> &std::sync::atomic::AtomicU64 {
        // SAFETY: the mapping is region_len >= HEADER_LEN bytes, page aligned,
        // and owned by `self`.
        unsafe { header_word(self.map.as_ptr(), off) }
    }

    fn set_pid(&self) {
        self.header(H_WRITER_PID)
            .store(u64::from(std::process::id()), Ordering::Relaxed);
    }

    /// Bytes of a live (published, hence immutable) block.
    fn bytes(&self, off: u64, len: u64) -> Option<&[u8]> {
        // SAFETY: the mapping covers region_len bytes and lives as long as
        // `self`; the range is bounds-checked by `Region::bytes`. Callers ask
        // only for live blocks, which this writer does not write while they
        // are live (it writes only extents it allocated from free space).
        let region = unsafe { Region::new(self.map.as_ptr(), self.region_len) };
        region.bytes(off, len)
    }

    /// A freshly allocated extent, for writing.
    fn extent_mut(&mut self, off: u64, len: u64) -> &mut [u8] {
        assert!(off >= HEADER_LEN && off + len <= self.region_len);
        // SAFETY: in bounds (asserted) of the mapping `self` owns. The extent
        // was just taken from the allocator, so it is no live block and no
        // retired block that a reader could still be reading (QSBR), and no
        // other reference into it exists in this process: `&mut self` is held
        // and `bytes()` is only used for live blocks.
        unsafe {
            std::slice::from_raw_parts_mut(self.map.as_mut_ptr().add(off as usize), len as usize)
        }
    }

    /// The published word, as readers see it.
    pub fn published(&self) -> Published {
        Published::from_word(self.header(H_PUBLISHED).load(Ordering::Acquire))
    }

    /// The published generation (0 = none).
    pub fn published_generation(&self) -> u64 {
        self.generation
    }

    /// Identity of the region (new on every create).
    pub fn region_id(&self) -> u64 {
        self.region_id
    }

    /// Path of the region.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes of the arena.
    pub fn arena_len(&self) -> u64 {
        self.region_len - HEADER_LEN
    }

    /// Free arena bytes (not counting retired blocks not yet reclaimed).
    pub fn arena_free(&self) -> u64 {
        self.arena.free_bytes()
    }

    /// Frees retired blocks whose retiring generation every reader in
    /// `readers_quiescent` has reached.
    fn reclaim(&mut self, min_q: u64, stats: &mut PublishStats) {
        // `retired` is in order of `at`, so stop at the first held back.
        while let Some(r) = self.retired.front().copied() {
            if r.at > min_q {
                break;
            }
            self.retired.pop_front();
            self.arena.free(r.off, r.len);
            stats.blocks_reclaimed += 1;
            stats.bytes_reclaimed += r.len;
        }
    }

    fn full(&self, needed: u64, min_q: u64) -> TablesError {
        TablesError::ArenaFull {
            needed,
            free: self.arena.free_bytes(),
            largest_free: self.arena.largest(),
            held_back: self.retired.iter().map(|r| r.len).sum(),
            oldest_reader: (min_q != u64::MAX).then_some(min_q),
        }
    }

    /// Publishes `gen` as the next generation and returns what it cost.
    ///
    /// `readers_quiescent` holds the applied generation of every *live*
    /// worker (its quiescent state). A block retired when generation `r` was
    /// published is reclaimed only once every value in the slice is `>= r`;
    /// an empty slice means no live reader. The caller decides liveness: a
    /// worker whose heartbeat has not moved for a grace period (or whose
    /// process is gone) is left out, so a dead worker does not hold back
    /// reclamation forever. A worker left out while it is in fact still
    /// reading may then see reused bytes, so the grace period must be far
    /// longer than a burst (seconds, not microseconds).
    ///
    /// Only what changed is written: a VIP whose [`Arc`] is the one
    /// published last time, or whose serialised block is byte-identical to
    /// its current block, keeps that block; every other VIP gets a new block;
    /// then a new root lists them all, and one Release store of the packed
    /// (generation, root) word publishes it. On any error nothing is
    /// published, no live or retained block is touched, and the previous
    /// generation stays readable.
    pub fn publish(
        &mut self,
        gen: &Generation,
        readers_quiescent: &[u64],
    ) -> Result<PublishStats, TablesError> {
        let next = self.generation + 1;
        if next > MAX_GENERATION {
            return Err(TablesError::GenerationExhausted {
                max: MAX_GENERATION,
            });
        }
        if gen.vips.len() > MAX_VIPS as usize {
            return Err(TablesError::InvalidGeneration(format!(
                "{} VIPs (at most {MAX_VIPS})",
                gen.vips.len()
            )));
        }
        // Same VIPs in the same order as last time (the common case: only
        // contents change)? Then ids are unique like last time's, blocks are
        // matched by position, and nothing here hashes.
        let aligned =
            gen.vips.len() == self.live.len()
                && gen.vips.iter().zip(&self.live).all(|(v, p)| {
                    p.src.as_ref().is_some_and(|s| Arc::ptr_eq(s, v)) || p.id == v.id
                });
        if !aligned {
            let mut ids = HashSet::with_capacity(gen.vips.len());
            if let Some(v) = gen.vips.iter().find(|v| !ids.insert(v.id)) {
                return Err(TablesError::InvalidGeneration(format!(
                    "vip id {} is used twice",
                    v.id
                )));
            }
        }
        let mut stats = PublishStats {
            arena_len: self.arena_len(),
            ..PublishStats::default()
        };
        let min_q = readers_quiescent.iter().copied().min().unwrap_or(u64::MAX);
        self.reclaim(min_q, &mut stats);

        let mut fresh: Vec<(u64, u64)> = Vec::new();
        let r = self.write_blocks(
            gen,
            &mut Placement {
                next,
                min_q,
                stats: &mut stats,
                fresh: &mut fresh,
            },
        );
        let (new_live, root_off, root_len) = match r {
            Ok(x) => x,
            Err(e) => {
                for (o, l) in fresh {
                    self.arena.free(o, l);
                }
                return Err(e);
            }
        };

        // Publish: the high-water mark first (bookkeeping for attach), then
        // the word. Release orders every block write above before it.
        let hw = fresh.iter().map(|&(o, l)| o + l).max().unwrap_or(0);
        if hw > self.high_water {
            self.high_water = hw;
            self.header(H_HIGH_WATER).store(hw, Ordering::Release);
        }
        self.header(H_PUBLISHED)
            .store(pack(next, root_off), Ordering::Release);
        super::notify::wake_all(self.header(H_PUBLISHED));

        // Retire what the new generation no longer uses.
        if let Some((o, l)) = self.root.take() {
            self.retired.push_back(Retired {
                at: next,
                off: o,
                len: l,
            });
        }
        let old = std::mem::replace(&mut self.live, new_live);
        let kept: HashSet<u64> = if aligned {
            HashSet::new()
        } else {
            self.live.iter().map(|l| l.off).collect()
        };
        for (i, o) in old.iter().enumerate() {
            let still = if aligned {
                self.live[i].off == o.off
            } else {
                kept.contains(&o.off)
            };
            if !still {
                self.retired.push_back(Retired {
                    at: next,
                    off: o.off,
                    len: round_up(o.len, UNIT),
                });
            }
        }
        self.root = Some((root_off, round_up(root_len, UNIT)));
        self.generation = next;
        stats.generation = next;
        stats.blocks_pending = self.retired.len() as u32;
        stats.bytes_pending = self.retired.iter().map(|r| r.len).sum();
        stats.arena_free = self.arena.free_bytes();
        Ok(stats)
    }

    /// The block for VIP `v` in generation `next`: its current block if
    /// unchanged (same `Arc`, or byte-identical contents), else a new block
    /// in a fresh extent (pushed to `fresh`).
    fn place_vip(
        &mut self,
        i: usize,
        by_id: &mut Option<HashMap<u32, usize>>,
        v: &Arc<VipTable>,
        head: &mut Vec<u8>,
        w: &mut Placement,
    ) -> Result<LiveVip, TablesError> {
        let Placement {
            next,
            min_q,
            ref mut stats,
            ref mut fresh,
        } = *w;
        // The VIP's current block: same position (the common case), else by id.
        let prev = match self.live.get(i).filter(|p| p.id == v.id) {
            Some(p) => Some(p),
            None => {
                let map = by_id.get_or_insert_with(|| {
                    self.live
                        .iter()
                        .enumerate()
                        .map(|(j, p)| (p.id, j))
                        .collect()
                });
                map.get(&v.id).map(|&j| &self.live[j])
            }
        };
        if let Some(p) = prev.filter(|p| p.src.as_ref().is_some_and(|s| Arc::ptr_eq(s, v))) {
            stats.blocks_reused += 1;
            stats.reused_by_pointer += 1;
            return Ok(p.clone());
        }
        check_vip(v)?;
        let l = vip_head(v, next, head);
        let ring = v.ring.as_bytes();
        if let Some(p) = prev {
            // Compare everything after the block header (which holds `born`).
            let same = p.len == l.len
                && self.bytes(p.off, p.len).is_some_and(|old| {
                    let h = BLOCK_HEADER_LEN as usize..l.head_len as usize;
                    let r = l.ring_off as usize..l.ring_off as usize + ring.len();
                    old[h.clone()] == head[h] && old[r] == *ring
                });
            if same {
                stats.blocks_reused += 1;
                let mut p = p.clone();
                p.src = Some(Arc::clone(v));
                return Ok(p);
            }
        }
        let alloc = round_up(l.len, UNIT);
        let off = self
            .arena
            .alloc(alloc)
            .ok_or_else(|| self.full(alloc, min_q))?;
        fresh.push((off, alloc));
        let dst = self.extent_mut(off, l.len);
        let (h, rest) = dst.split_at_mut(l.head_len as usize);
        h.copy_from_slice(head);
        let (r, pad) = rest.split_at_mut(ring.len());
        r.copy_from_slice(ring);
        pad.fill(0);
        let checksum = block_checksum(dst);
        dst[..8].copy_from_slice(&checksum.to_le_bytes());
        stats.blocks_written += 1;
        stats.bytes_written += l.len;
        Ok(LiveVip {
            id: v.id,
            off,
            len: l.len,
            checksum,
            src: Some(Arc::clone(v)),
        })
    }

    /// Writes the changed VIP blocks and the root into fresh extents (listed
    /// in `fresh` so the caller can undo). Returns the new live map and the
    /// root's offset and length.
    #[allow(clippy::type_complexity)]
    fn write_blocks(
        &mut self,
        gen: &Generation,
        w: &mut Placement,
    ) -> Result<(Vec<LiveVip>, u64, u64), TablesError> {
        let mut new_live: Vec<LiveVip> = Vec::with_capacity(gen.vips.len());
        let mut by_id = None;
        let mut slots: Vec<VipSlot> = Vec::with_capacity(gen.vips.len());
        let mut head = std::mem::take(&mut self.head);
        let result = (|| {
            for (i, v) in gen.vips.iter().enumerate() {
                let lv = self.place_vip(i, &mut by_id, v, &mut head, w)?;
                slots.push(slot(&lv, v.id));
                new_live.push(lv);
            }

            // The root.
            let len = ROOT_FIXED_END + slots.len() as u64 * 32;
            let alloc = round_up(len, UNIT);
            let off = self
                .arena
                .alloc(alloc)
                .ok_or_else(|| self.full(alloc, w.min_q))?;
            w.fresh.push((off, alloc));
            let dst = self.extent_mut(off, len);
            let hdr = BlockHeader {
                checksum: 0,
                magic: ROOT_MAGIC,
                reserved: 0,
                len,
                born: w.next,
            };
            let fixed = RootFixed {
                generation: w.next,
                n_vips: slots.len() as u32,
                reserved: 0,
                flow_hash_key: gen.flow_hash_key,
            };
            dst[..BLOCK_HEADER_LEN as usize].copy_from_slice(hdr.as_bytes());
            dst[BLOCK_HEADER_LEN as usize..ROOT_FIXED_END as usize]
                .copy_from_slice(fixed.as_bytes());
            dst[ROOT_FIXED_END as usize..].copy_from_slice(slots.as_bytes());
            let checksum = block_checksum(dst);
            dst[..8].copy_from_slice(&checksum.to_le_bytes());
            w.stats.blocks_written += 1;
            w.stats.bytes_written += len;
            Ok((off, len))
        })();
        self.head = head;
        let (off, len) = result?;
        Ok((new_live, off, len))
    }
}

fn slot(p: &LiveVip, vip_id: u32) -> VipSlot {
    VipSlot {
        offset: p.off,
        len: p.len,
        checksum: p.checksum,
        vip_id,
        reserved: 0,
    }
}

/// What the block writes of one publish share: the generation written,
/// the oldest generation a reader holds (named when the arena is full),
/// the counts, and the extents written (so that a failed publish can
/// free them).
struct Placement<'a> {
    next: u64,
    min_q: u64,
    stats: &'a mut PublishStats,
    fresh: &'a mut Vec<(u64, u64)>,
}

/// [`VipRecord::mode`] of a VIP's mode (the reader's `mode_of` is the inverse).
pub(crate) fn mode_byte(mode: Mode) -> u8 {
    match mode {
        Mode::FullNat => 0,
        Mode::Dnat => 1,
        Mode::Dsr(Encap::None) => 2,
        Mode::Dsr(Encap::Ipip) => 3,
        Mode::Dsr(Encap::Gue) => 4,
    }
}
