//! The worker side: map the region read-only, look at the published word
//! once per burst, validate a new generation before adopting it, and read
//! it in place.

use std::cell::RefCell;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use memmap2::{MmapOptions, MmapRaw};
use zerocopy::FromBytes;

use super::layout::*;
use super::{BackendEntry, BackendState, Corruption, Generation, TablesError, VipFlags, VipTable};
use crate::config::{Encap, Mode};
use crate::flowhash::FlowHasher;
use crate::maglev::slot;

/// What the published word says: a generation and the offset of its root
/// block. Generation 0 means nothing has been published yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Published {
    /// Generation number (1, 2, ...; 0 = none).
    pub generation: u64,
    /// Byte offset of the generation's root block.
    pub root: u64,
}

impl Published {
    /// Nothing published.
    pub const NONE: Published = Published {
        generation: 0,
        root: 0,
    };

    /// From the packed word.
    #[inline]
    pub const fn from_word(word: u64) -> Self {
        let (generation, root) = unpack(word);
        Published { generation, root }
    }
}

/// Immutable bytes of a mapping, handed out by bounds-checked range.
#[derive(Clone, Copy)]
pub(crate) struct Region<'a> {
    base: *const u8,
    len: u64,
    _map: PhantomData<&'a [u8]>,
}

impl<'a> Region<'a> {
    /// The first `len` bytes at `base`.
    ///
    /// # Safety
    /// `base..base + len` must be mapped and stay mapped for `'a`, and the
    /// bytes handed out by [`Region::bytes`] must not be written while
    /// borrowed (the publication protocol guarantees that for every block of
    /// a generation the caller has not passed; see the module docs).
    pub(crate) unsafe fn new(base: *const u8, len: u64) -> Self {
        Region {
            base,
            len,
            _map: PhantomData,
        }
    }

    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// `[off, off + len)`, or `None` if it does not lie inside the region.
    #[inline]
    pub(crate) fn bytes(&self, off: u64, len: u64) -> Option<&'a [u8]> {
        let end = off.checked_add(len)?;
        if end > self.len {
            return None;
        }
        // SAFETY: `off + len <= self.len` (checked above, without overflow),
        // so the range is inside the mapping, which `Region::new`'s contract
        // keeps mapped for 'a. Its bytes are not written while borrowed: they
        // belong to the header's write-once fields or to blocks reachable from
        // a root the caller loaded and has not passed, which the publisher
        // leaves untouched until every live reader has passed it (QSBR). A
        // corrupt root can name bytes outside that protection; such a view is
        // refused by its checksum, and the bytes are never written through
        // this reference.
        Some(unsafe { std::slice::from_raw_parts(self.base.add(off as usize), len as usize) })
    }
}

/// Counts of one validation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ValidationStats {
    /// Blocks whose checksum was computed and whose contents were checked
    /// entry by entry (the root always is).
    pub blocks_hashed: u32,
    /// Bytes those checksums covered.
    pub bytes_hashed: u64,
    /// VIP blocks found in the validated-blocks cache (validated in an
    /// earlier generation, unchanged since): not read at all.
    pub blocks_cached: u32,
}

/// A VIP block's identity in its region: where it is, its length and
/// checksum, and the VIP it describes (see [`VipView::block_id`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockId {
    /// Byte offset of the block in the region.
    pub offset: u64,
    /// Bytes of the block.
    pub len: u64,
    /// The block's checksum.
    pub checksum: u64,
    /// The VIP's id.
    pub vip_id: u32,
}

/// Where a block is, and its checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BlockRef {
    pub(crate) offset: u64,
    pub(crate) len: u64,
    pub(crate) checksum: u64,
}

/// Where the parts of a validated VIP block are: enough to rebuild its
/// [`VipView`] without reading the block again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CachedVip {
    block: BlockRef,
    vip_id: u32,
    /// (offset in the block, count) of the name bytes, backends, ring.
    name: (u32, u32),
    backends: (u32, u32),
    ring: (u32, u32),
    /// (offset of the limits record, count of prefixes after it).
    limits: (u32, u32),
}

/// The VIP blocks of the last generation this reader validated, in root
/// order, at most `cap`. A slot whose (offset, length, checksum, vip id)
/// matches an entry was fully validated before and, by the publication
/// protocol, has not changed since: its view is rebuilt from the entry
/// without touching the block.
#[derive(Debug)]
pub(crate) struct BlockCache {
    entries: Vec<CachedVip>,
    /// Being built by the current validation.
    next: Vec<CachedVip>,
    /// offset -> index in `entries`, built on demand when VIPs were added or
    /// removed (positions no longer line up).
    by_off: HashMap<u64, usize>,
    by_off_built: bool,
    /// Positional misses in the current validation.
    misses: u32,
    cap: usize,
}

impl BlockCache {
    fn new(cap: usize) -> Self {
        BlockCache {
            entries: Vec::new(),
            next: Vec::new(),
            by_off: HashMap::new(),
            by_off_built: false,
            misses: 0,
            cap,
        }
    }

    /// The entry for slot `i`, if any.
    #[inline]
    fn lookup(&mut self, i: usize, b: &BlockRef, vip_id: u32) -> Option<CachedVip> {
        let hit = |e: &CachedVip| e.block == *b && e.vip_id == vip_id;
        if let Some(e) = self.entries.get(i).filter(|e| hit(e)) {
            return Some(*e);
        }
        // One miss is most likely the one changed VIP: not worth hashing
        // every entry. From the second on, VIPs were probably added, removed
        // or moved: look them up by offset.
        self.misses += 1;
        if self.misses < 2 {
            return None;
        }
        if !self.by_off_built {
            self.by_off.clear();
            self.by_off.extend(
                self.entries
                    .iter()
                    .enumerate()
                    .map(|(j, e)| (e.block.offset, j)),
            );
            self.by_off_built = true;
        }
        let e = self.entries.get(*self.by_off.get(&b.offset)?)?;
        hit(e).then_some(*e)
    }

    /// Makes the entries recorded by a successful validation current.
    fn commit(&mut self) {
        std::mem::swap(&mut self.entries, &mut self.next);
        self.next.clear();
        self.by_off_built = false;
    }
}

/// One validated VIP, read in place.
#[derive(Clone, Copy)]
pub struct VipView<'a> {
    rec: &'a VipRecord,
    /// UTF-8 (checked when the block was validated).
    name: &'a [u8],
    backends: &'a [BackendRecord],
    ring: &'a [u32],
    limits: &'a LimitsRecord,
    prefixes: &'a [PrefixRecord],
    pub(crate) block: BlockRef,
}

impl std::fmt::Debug for VipView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VipView")
            .field("id", &self.id())
            .field("name", &self.name())
            .field("addr", &self.addr())
            .field("port", &self.port())
            .field("backends", &self.backends.len())
            .field("ring", &self.ring.len())
            .finish()
    }
}

fn ip_of(family: u8, addr: &[u8; 16]) -> IpAddr {
    if family == 4 {
        IpAddr::V4(Ipv4Addr::new(addr[0], addr[1], addr[2], addr[3]))
    } else {
        IpAddr::V6(Ipv6Addr::from(*addr))
    }
}

impl<'a> VipView<'a> {
    /// The raw record.
    pub fn record(&self) -> &'a VipRecord {
        self.rec
    }
    /// Stable id (position in config).
    pub fn id(&self) -> u32 {
        self.rec.id
    }
    /// Config name.
    pub fn name(&self) -> &'a str {
        std::str::from_utf8(self.name).unwrap_or("")
    }
    /// VIP address.
    pub fn addr(&self) -> IpAddr {
        ip_of(self.rec.family, &self.rec.addr)
    }
    /// VIP port.
    pub fn port(&self) -> u16 {
        self.rec.port
    }
    /// IP protocol number (6 or 17).
    pub fn proto(&self) -> u8 {
        self.rec.proto
    }
    /// Forwarding mode.
    pub fn mode(&self) -> Mode {
        mode_of(self.rec.mode).unwrap_or(Mode::FullNat)
    }
    /// Flags (validated: only defined bits).
    pub fn flags(&self) -> VipFlags {
        VipFlags::from_bits(self.rec.flags).unwrap_or_default()
    }
    /// No backend was eligible; the ring covers all of them.
    pub fn fail_open(&self) -> bool {
        self.flags().contains(VipFlags::FAIL_OPEN)
    }
    /// Upper bound of the PPv2 header.
    pub fn pp_max_len(&self) -> u16 {
        self.rec.pp_max_len
    }
    /// Every backend, in config order.
    pub fn backends(&self) -> &'a [BackendRecord] {
        self.backends
    }
    /// The Maglev ring (every entry < `backends().len()`).
    pub fn ring(&self) -> &'a [u32] {
        self.ring
    }
    /// `[vip.limits]`'s values (validated).
    pub fn limits(&self) -> &'a LimitsRecord {
        self.limits
    }
    /// `persistence_timeout` in seconds (0: off; validated: at most
    /// [`super::MAX_PERSISTENCE_S`]).
    pub fn persistence_s(&self) -> u32 {
        self.rec.persistence_s
    }
    /// The `allow` list, then the `deny` list (validated: network
    /// addresses of the VIP's family, lengths in range).
    pub fn prefixes(&self) -> &'a [PrefixRecord] {
        self.prefixes
    }
    /// The backend a flow hash selects: `(index, record)`, or `None` for an
    /// empty ring.
    #[inline]
    pub fn pick(&self, flow_hash: u64) -> Option<(u32, &'a BackendRecord)> {
        let m = u32::try_from(self.ring.len()).ok().filter(|&m| m > 0)?;
        let i = *self.ring.get(slot(flow_hash, m))?;
        Some((i, self.backends.get(i as usize)?))
    }
    /// Byte offset of this VIP's block in the region (for inspection and
    /// tests: equal offsets in two generations mean a shared block).
    pub fn block_offset(&self) -> u64 {
        self.block.offset
    }
    /// Byte length of this VIP's block.
    pub fn block_len(&self) -> u64 {
        self.block.len
    }
    /// Identity of this VIP's block: two views (of the same region, by the
    /// same reader, in consecutive adoptions) with equal identities read the
    /// same bytes, because a block is never written while it is published
    /// and is not reused before every live reader has passed the generation
    /// that retired it. A worker uses it to keep what it derived from an
    /// unchanged VIP instead of deriving it again.
    pub fn block_id(&self) -> BlockId {
        BlockId {
            offset: self.block.offset,
            len: self.block.len,
            checksum: self.block.checksum,
            vip_id: self.rec.id,
        }
    }
    /// Back to the model (copies).
    pub fn to_table(&self) -> VipTable {
        VipTable {
            id: self.id(),
            name: self.name().to_owned(),
            addr: self.addr(),
            port: self.port(),
            proto: self.proto(),
            mode: self.mode(),
            flags: self.flags(),
            pp_max_len: self.pp_max_len(),
            backends: self.backends.iter().map(BackendRecord::to_entry).collect(),
            ring: self.ring.to_vec(),
            limits: self.limits_model(),
            persistence_s: self.persistence_s(),
        }
    }

    /// `[vip.limits]` back as the model.
    fn limits_model(&self) -> crate::config::VipLimits {
        let l = self.limits;
        let nets = |deny: u8| {
            self.prefixes
                .iter()
                .filter(|p| p.deny == deny)
                .map(|p| crate::config::IpNet {
                    addr: ip_of(p.family, &p.addr),
                    prefix_len: p.len,
                })
                .collect()
        };
        crate::config::VipLimits {
            max_connections: l.max_connections,
            new_connections_per_second: l.new_per_second,
            new_connections_burst: l.new_burst,
            per_source_per_second: l.source_per_second,
            per_source_burst: l.source_burst,
            source_prefix_v4: l.source_prefix_v4,
            source_prefix_v6: l.source_prefix_v6,
            source_table_size: l.source_table,
            allow: nets(0),
            deny: nets(1),
        }
    }
}

impl BackendRecord {
    /// Backend address.
    pub fn ip(&self) -> IpAddr {
        ip_of(self.family, &self.addr)
    }
    /// State (validated; an unknown byte would read as down).
    pub fn backend_state(&self) -> BackendState {
        BackendState::from_u8(self.state).unwrap_or(BackendState::Down)
    }
    /// Back to the model.
    pub fn to_entry(&self) -> BackendEntry {
        BackendEntry {
            id: self.id,
            addr: self.ip(),
            port: self.port,
            weight: self.weight,
            state: self.backend_state(),
            max_connections: self.max_connections,
        }
    }
}

/// A validated generation, read in place. Borrows the reader: the mapping
/// stays valid, and the publisher does not reuse the bytes of a generation
/// until this worker has reported a later one as applied (QSBR), so hold a
/// view only until the worker records its next applied generation.
pub struct TablesView<'a> {
    published: Published,
    key: [u8; 16],
    vips: Vec<VipView<'a>>,
    stats: ValidationStats,
    pub(crate) root: BlockRef,
}

impl std::fmt::Debug for TablesView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TablesView")
            .field("generation", &self.published.generation)
            .field("vips", &self.vips.len())
            .finish()
    }
}

impl<'a> TablesView<'a> {
    /// The generation number.
    pub fn generation(&self) -> u64 {
        self.published.generation
    }
    /// The published word this view was validated from.
    pub fn published(&self) -> Published {
        self.published
    }
    /// Key of the flow hash.
    pub fn flow_hash_key(&self) -> [u8; 16] {
        self.key
    }
    /// A hasher with that key.
    pub fn flow_hasher(&self) -> FlowHasher {
        FlowHasher::new(self.key)
    }
    /// Number of VIPs.
    pub fn vip_count(&self) -> usize {
        self.vips.len()
    }
    /// VIP `i` (root order = the generation's order).
    pub fn vip(&self, i: usize) -> Option<VipView<'a>> {
        self.vips.get(i).copied()
    }
    /// All VIPs.
    pub fn vips(&self) -> &[VipView<'a>] {
        &self.vips
    }
    /// Backends of VIP `i`.
    pub fn backends(&self, i: usize) -> Option<&'a [BackendRecord]> {
        self.vips.get(i).map(|v| v.backends)
    }
    /// Ring of VIP `i`.
    pub fn ring(&self, i: usize) -> Option<&'a [u32]> {
        self.vips.get(i).map(|v| v.ring)
    }
    /// What the validation of this view cost.
    pub fn validation(&self) -> ValidationStats {
        self.stats
    }
    /// Back to the model (copies everything).
    pub fn to_generation(&self) -> Generation {
        Generation {
            flow_hash_key: self.key,
            vips: self.vips.iter().map(|v| Arc::new(v.to_table())).collect(),
        }
    }
}

fn corrupt(generation: u64, problem: Corruption) -> TablesError {
    TablesError::Corrupt {
        generation,
        problem,
    }
}

/// Validates the generation `p` names in `region`. VIP blocks found in
/// `cache` (validated before, unchanged since) are not read at all; the
/// others are checked in full and recorded in the cache's `next` list
/// (made current by [`BlockCache::commit`] once the whole generation passed).
pub(crate) fn validate<'a>(
    region: &Region<'a>,
    p: Published,
    mut cache: Option<&mut BlockCache>,
) -> Result<TablesView<'a>, TablesError> {
    let g = p.generation;
    if g == 0 {
        return Err(TablesError::NothingPublished);
    }
    let err = |problem| corrupt(g, problem);
    let mut stats = ValidationStats::default();

    let root_off = p.root;
    if root_off < HEADER_LEN || !root_off.is_multiple_of(UNIT) {
        return Err(err(Corruption::RootOffset { offset: root_off }));
    }
    let (root, hdr) = block(region, root_off, ROOT_MAGIC, ROOT_FIXED_END).map_err(err)?;
    let computed = block_checksum(root);
    if computed != hdr.checksum {
        return Err(err(Corruption::Checksum {
            offset: root_off,
            stored: hdr.checksum,
            computed,
        }));
    }
    stats.blocks_hashed += 1;
    stats.bytes_hashed += hdr.len - 8;
    let fixed =
        RootFixed::read_from_bytes(&root[BLOCK_HEADER_LEN as usize..ROOT_FIXED_END as usize])
            .map_err(|_| {
                err(Corruption::BlockLen {
                    offset: root_off,
                    len: hdr.len,
                })
            })?;
    if fixed.generation != g {
        return Err(err(Corruption::Generation {
            published: g,
            root: fixed.generation,
        }));
    }
    let n = fixed.n_vips;
    if n > MAX_VIPS || ROOT_FIXED_END + u64::from(n) * 32 != hdr.len {
        return Err(err(Corruption::VipCount {
            n_vips: n,
            len: hdr.len,
        }));
    }
    let slots = <[VipSlot]>::ref_from_bytes(&root[ROOT_FIXED_END as usize..]).map_err(|_| {
        err(Corruption::BlockLen {
            offset: root_off,
            len: hdr.len,
        })
    })?;

    let mut vips = Vec::with_capacity(slots.len());
    if let Some(c) = cache.as_deref_mut() {
        c.next.clear();
        c.misses = 0;
    }
    for (i, s) in slots.iter().enumerate() {
        let b = BlockRef {
            offset: s.offset,
            len: s.len,
            checksum: s.checksum,
        };
        let hit = cache
            .as_deref_mut()
            .and_then(|c| c.lookup(i, &b, s.vip_id))
            .and_then(|e| Some((e, from_cache(region, &e)?)));
        let (entry, v) = match hit {
            Some((e, v)) => {
                stats.blocks_cached += 1;
                (e, v)
            }
            None => vip(region, i as u32, s, b, &mut stats).map_err(err)?,
        };
        if let Some(c) = cache.as_deref_mut() {
            if c.next.len() < c.cap {
                c.next.push(entry);
            }
        }
        vips.push(v);
    }
    Ok(TablesView {
        published: p,
        key: fixed.flow_hash_key,
        vips,
        stats,
        root: BlockRef {
            offset: root_off,
            len: hdr.len,
            checksum: hdr.checksum,
        },
    })
}

/// The block at `off`: header checks (alignment, bounds, magic, length),
/// no checksum.
fn block<'a>(
    region: &Region<'a>,
    off: u64,
    magic: u32,
    min_len: u64,
) -> Result<(&'a [u8], BlockHeader), Corruption> {
    if off < HEADER_LEN || !off.is_multiple_of(UNIT) {
        return Err(Corruption::BlockOffset { offset: off });
    }
    let head = region
        .bytes(off, BLOCK_HEADER_LEN)
        .ok_or(Corruption::OutOfBounds {
            offset: off,
            len: BLOCK_HEADER_LEN,
            region_len: region.len(),
        })?;
    let hdr =
        BlockHeader::read_from_bytes(head).map_err(|_| Corruption::BlockOffset { offset: off })?;
    if hdr.magic != magic {
        return Err(Corruption::Magic {
            offset: off,
            found: hdr.magic,
            expected: magic,
        });
    }
    if hdr.len < min_len || !hdr.len.is_multiple_of(8) {
        return Err(Corruption::BlockLen {
            offset: off,
            len: hdr.len,
        });
    }
    let bytes = region.bytes(off, hdr.len).ok_or(Corruption::OutOfBounds {
        offset: off,
        len: hdr.len,
        region_len: region.len(),
    })?;
    Ok((bytes, hdr))
}

/// `[off, off + len)` of a block, inside its variable part and `align`ed.
fn section(
    blk: &[u8],
    at: u64,
    off: u32,
    len: u64,
    align: u32,
    name: &'static str,
) -> Result<std::ops::Range<usize>, Corruption> {
    let start = u64::from(off);
    let end = start.checked_add(len);
    match end {
        Some(end)
            if start >= VIP_FIXED_END && end <= blk.len() as u64 && off.is_multiple_of(align) =>
        {
            Ok(start as usize..end as usize)
        }
        _ => Err(Corruption::Section {
            offset: at,
            section: name,
        }),
    }
}

/// Rebuilds a cached VIP's view from its recorded offsets: bounds and
/// alignment are re-checked (pure arithmetic), the block is not read.
fn from_cache<'a>(region: &Region<'a>, e: &CachedVip) -> Option<VipView<'a>> {
    let part = |(off, len): (u32, u32), size: u64| {
        region.bytes(e.block.offset + u64::from(off), u64::from(len) * size)
    };
    Some(VipView {
        rec: VipRecord::ref_from_bytes(region.bytes(e.block.offset + BLOCK_HEADER_LEN, 72)?)
            .ok()?,
        name: part(e.name, 1)?,
        backends: <[BackendRecord]>::ref_from_bytes(part(e.backends, 32)?).ok()?,
        ring: <[u32]>::ref_from_bytes(part(e.ring, 4)?).ok()?,
        limits: LimitsRecord::ref_from_bytes(part((e.limits.0, 1), 32)?).ok()?,
        prefixes: <[PrefixRecord]>::ref_from_bytes(part((e.limits.0 + 32, e.limits.1), 24)?)
            .ok()?,
        block: e.block,
    })
}

/// Full validation of one VIP block.
fn vip<'a>(
    region: &Region<'a>,
    vi: u32,
    s: &VipSlot,
    b: BlockRef,
    stats: &mut ValidationStats,
) -> Result<(CachedVip, VipView<'a>), Corruption> {
    let at = s.offset;
    let (blk, hdr) = block(region, at, VIP_MAGIC, VIP_FIXED_END)?;
    if hdr.len != s.len {
        return Err(Corruption::Slot {
            vip: vi,
            field: "len",
        });
    }
    if hdr.checksum != s.checksum {
        return Err(Corruption::Slot {
            vip: vi,
            field: "checksum",
        });
    }
    let computed = block_checksum(blk);
    if computed != hdr.checksum {
        return Err(Corruption::Checksum {
            offset: at,
            stored: hdr.checksum,
            computed,
        });
    }
    stats.blocks_hashed += 1;
    stats.bytes_hashed += hdr.len - 8;
    let field = |field: &'static str, value: u64| Corruption::Field {
        offset: at,
        field,
        value,
    };
    let rec = VipRecord::ref_from_bytes(&blk[BLOCK_HEADER_LEN as usize..VIP_FIXED_END as usize])
        .map_err(|_| Corruption::BlockOffset { offset: at })?;
    if rec.id != s.vip_id {
        return Err(Corruption::Slot {
            vip: vi,
            field: "vip_id",
        });
    }
    check_addr(rec.family, &rec.addr).map_err(|v| field("vip family/addr", v))?;
    if rec.proto != super::PROTO_TCP && rec.proto != super::PROTO_UDP {
        return Err(field("proto", rec.proto.into()));
    }
    if mode_of(rec.mode).is_none() {
        return Err(field("mode", rec.mode.into()));
    }
    if VipFlags::from_bits(rec.flags).is_none() {
        return Err(field("flags", rec.flags.into()));
    }
    if rec.n_backends > MAX_BACKENDS {
        return Err(field("n_backends", rec.n_backends.into()));
    }
    if rec.ring_len > MAX_RING {
        return Err(field("ring_len", rec.ring_len.into()));
    }
    if rec.name_len > MAX_NAME_LEN {
        return Err(field("name_len", rec.name_len.into()));
    }
    if rec.persistence_s > super::MAX_PERSISTENCE_S {
        return Err(field("persistence_s", rec.persistence_s.into()));
    }
    let r = section(blk, at, rec.name_off, rec.name_len.into(), 1, "name")?;
    let name = &blk[r];
    std::str::from_utf8(name).map_err(|_| field("name (not UTF-8)", 0))?;
    let r = section(
        blk,
        at,
        rec.backends_off,
        u64::from(rec.n_backends) * 32,
        8,
        "backends",
    )?;
    let backends = <[BackendRecord]>::ref_from_bytes(&blk[r]).map_err(|_| Corruption::Section {
        offset: at,
        section: "backends",
    })?;
    let r = section(
        blk,
        at,
        rec.ring_off,
        u64::from(rec.ring_len) * 4,
        8,
        "ring",
    )?;
    let ring = <[u32]>::ref_from_bytes(&blk[r]).map_err(|_| Corruption::Section {
        offset: at,
        section: "ring",
    })?;
    let (limits, prefixes) = limits_of(blk, at, rec)?;
    for be in backends {
        check_addr(be.family, &be.addr).map_err(|v| field("backend family/addr", v))?;
        if BackendState::from_u8(be.state).is_none() {
            return Err(field("backend state", be.state.into()));
        }
    }
    // One branch-free pass (vectorises); find the culprit only on error.
    let max = ring.iter().fold(0u32, |m, &e| m.max(e));
    if !ring.is_empty() && max >= rec.n_backends {
        let index = ring.iter().position(|&e| e >= rec.n_backends).unwrap_or(0);
        return Err(Corruption::RingEntry {
            vip: vi,
            index: index as u32,
            entry: ring[index],
            backends: rec.n_backends,
        });
    }
    let entry = CachedVip {
        block: b,
        vip_id: rec.id,
        name: (rec.name_off, rec.name_len),
        backends: (rec.backends_off, rec.n_backends),
        ring: (rec.ring_off, rec.ring_len),
        limits: (rec.limits_off, rec.n_prefixes),
    };
    Ok((
        entry,
        VipView {
            rec,
            name,
            backends,
            ring,
            limits,
            prefixes,
            block: b,
        },
    ))
}

/// The limits record and the prefixes of a VIP block, checked: rates and
/// the per-source table in range, prefixes of the VIP's family with no host
/// bits.
fn limits_of<'a>(
    blk: &'a [u8],
    at: u64,
    rec: &VipRecord,
) -> Result<(&'a LimitsRecord, &'a [PrefixRecord]), Corruption> {
    let field = |field: &'static str, value: u64| Corruption::Field {
        offset: at,
        field,
        value,
    };
    if rec.n_prefixes > MAX_PREFIXES {
        return Err(field("n_prefixes", rec.n_prefixes.into()));
    }
    let bad = || Corruption::Section {
        offset: at,
        section: "limits",
    };
    let r = section(blk, at, rec.limits_off, 32, 8, "limits")?;
    let limits = LimitsRecord::ref_from_bytes(&blk[r]).map_err(|_| bad())?;
    let r = section(
        blk,
        at,
        rec.limits_off.checked_add(32).ok_or_else(bad)?,
        u64::from(rec.n_prefixes) * 24,
        8,
        "prefixes",
    )?;
    let prefixes = <[PrefixRecord]>::ref_from_bytes(&blk[r]).map_err(|_| bad())?;
    if limits.source_per_second > 0 {
        let t = limits.source_table;
        if !t.is_power_of_two() || t > crate::config::VipLimits::MAX_SOURCE_TABLE {
            return Err(field("source_table", t.into()));
        }
        if !(1..=32).contains(&limits.source_prefix_v4) {
            return Err(field("source_prefix_v4", limits.source_prefix_v4.into()));
        }
        if !(1..=128).contains(&limits.source_prefix_v6) {
            return Err(field("source_prefix_v6", limits.source_prefix_v6.into()));
        }
    }
    for p in prefixes {
        let max = if p.family == 4 { 32 } else { 128 };
        if p.family != rec.family || p.len == 0 || p.len > max || p.deny > 1 {
            return Err(field("prefix family/len", p.len.into()));
        }
        check_addr(p.family, &p.addr).map_err(|v| field("prefix family/addr", v))?;
        let net = crate::config::IpNet {
            addr: ip_of(p.family, &p.addr),
            prefix_len: p.len,
        };
        if net.network() != net.addr {
            return Err(field("prefix host bits", p.len.into()));
        }
    }
    Ok((limits, prefixes))
}

/// Family 4 with bytes 4..16 zero, or family 6. Err(family) otherwise.
fn check_addr(family: u8, addr: &[u8; 16]) -> Result<(), u64> {
    match family {
        4 if addr[4..].iter().all(|&b| b == 0) => Ok(()),
        6 => Ok(()),
        f => Err(f.into()),
    }
}

/// Reads the write-once header fields and checks magic, version and sizes.
/// Returns `(region_len, region_id)`.
pub(crate) fn check_header(
    map_base: *const u8,
    map_len: u64,
    path: &Path,
) -> Result<(u64, u64), TablesError> {
    let bad = |what: String| TablesError::BadHeader {
        path: path.to_owned(),
        what,
    };
    if map_len < HEADER_LEN {
        return Err(bad(format!(
            "{map_len} bytes is shorter than the {HEADER_LEN}-byte header"
        )));
    }
    // SAFETY: the caller maps at least `map_len >= HEADER_LEN` bytes at
    // `map_base` for the duration of this call; the first 32 bytes are
    // written once, before the region is renamed into place, and never again.
    let region = unsafe { Region::new(map_base, map_len) };
    let head = region
        .bytes(0, 32)
        .ok_or_else(|| bad("no header".to_owned()))?;
    let u32_at = |o: usize| u32::from_le_bytes([head[o], head[o + 1], head[o + 2], head[o + 3]]);
    let u64_at = |o: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&head[o..o + 8]);
        u64::from_le_bytes(a)
    };
    if head[H_MAGIC..H_MAGIC + 8] != REGION_MAGIC {
        return Err(TablesError::BadMagic {
            path: path.to_owned(),
        });
    }
    let version = u32_at(H_VERSION);
    if version != TABLES_LAYOUT_VERSION {
        return Err(TablesError::Version {
            path: path.to_owned(),
            found: version,
            expected: TABLES_LAYOUT_VERSION,
        });
    }
    let header_len = u64::from(u32_at(H_HEADER_LEN));
    let region_len = u64_at(H_REGION_LEN);
    if header_len != HEADER_LEN {
        return Err(bad(format!(
            "header_len {header_len} (layout version {version} has {HEADER_LEN})"
        )));
    }
    if region_len > map_len || region_len < HEADER_LEN || !region_len.is_multiple_of(UNIT) {
        return Err(bad(format!(
            "region_len {region_len} does not fit the {map_len}-byte file"
        )));
    }
    if region_len > MAX_REGION_LEN {
        return Err(bad(format!(
            "region_len {region_len} is above the maximum {MAX_REGION_LEN}"
        )));
    }
    Ok((region_len, u64_at(H_REGION_ID)))
}

/// Validates the generation a region's own published word names, over a
/// copy of the region's bytes (a file read whole, a fuzzer's input). The
/// checks are those of [`TablesReader::open`] and
/// [`TablesReader::view_uncached`]: the dataplane trusts nothing it reads
/// from shared memory, and this is how that claim is fuzzed without a file.
pub fn view_bytes(bytes: &[u8]) -> Result<TablesView<'_>, TablesError> {
    let (region_len, _) = check_header(bytes.as_ptr(), bytes.len() as u64, Path::new("<bytes>"))?;
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[H_PUBLISHED..H_PUBLISHED + 8]);
    let published = Published::from_word(u64::from_le_bytes(word));
    // SAFETY: `check_header` accepted `region_len <= bytes.len()`, so the
    // region lies inside the slice, which is borrowed immutably for the
    // view's lifetime: nothing writes those bytes while they are read.
    let region = unsafe { Region::new(bytes.as_ptr(), region_len) };
    validate(&region, published, None)
}

/// A header word accessed atomically.
///
/// # Safety
/// `base` must point to a live mapping of at least [`HEADER_LEN`] bytes that
/// outlives `'a`, page aligned.
pub(crate) unsafe fn header_word<'a>(base: *const u8, offset: usize) -> &'a AtomicU64 {
    debug_assert!(offset.is_multiple_of(8) && offset + 8 <= HEADER_LEN as usize);
    // SAFETY: per the contract the mapping covers the header and is page
    // aligned, so `base + offset` (offset a multiple of 8 inside the header)
    // is valid and aligned for AtomicU64, which has the layout of u64. Every
    // process accesses these words only atomically.
    unsafe { &*(base.add(offset) as *const AtomicU64) }
}

/// Default capacity of the validated-blocks cache.
pub const DEFAULT_CACHE_CAPACITY: usize = MAX_VIPS as usize;

/// A worker's read-only mapping of the tables region.
///
/// Per burst: [`TablesReader::current`] (one atomic load); when it differs
/// from what the worker uses, [`TablesReader::view`] validates the new
/// generation (cheaply, see [`ValidationStats`]); on success the worker
/// switches to the new view and records the generation as applied in its
/// state slot; on error it keeps the old view, counts the refusal and does
/// not retry the same [`Published`] value.
pub struct TablesReader {
    map: MmapRaw,
    path: PathBuf,
    region_len: u64,
    region_id: u64,
    dev_ino: (u64, u64),
    cache: RefCell<BlockCache>,
}

impl std::fmt::Debug for TablesReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TablesReader")
            .field("path", &self.path)
            .field("region_len", &self.region_len)
            .finish()
    }
}

impl TablesReader {
    /// Maps the region read-only and checks its header (magic, layout
    /// version, sizes).
    pub fn open(path: &Path) -> Result<TablesReader, TablesError> {
        let io = |source| TablesError::Io {
            path: path.to_owned(),
            source,
        };
        // Never through a symlink, and only a file root or this user made
        // that nobody else can write: the dataplane trusts no other source.
        let file = crate::os::files::open_trusted(path).map_err(|e| super::file_error(path, e))?;
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
        // A raw read-only mapping: no `&[u8]` over the whole file ever exists,
        // only bounds-checked slices of immutable blocks (`Region::bytes`) and
        // atomics for the published word. The region never shrinks (a
        // truncation by a third party would raise SIGBUS).
        let map = MmapOptions::new().map_raw_read_only(&file).map_err(io)?;
        let (region_len, region_id) = check_header(map.as_ptr(), map.len() as u64, path)?;
        Ok(TablesReader {
            map,
            path: path.to_owned(),
            region_len,
            region_id,
            dev_ino: (meta.dev(), meta.ino()),
            cache: RefCell::new(BlockCache::new(DEFAULT_CACHE_CAPACITY)),
        })
    }

    fn region(&self) -> Region<'_> {
        // SAFETY: `self.map` covers `region_len` bytes (checked at open) and
        // lives as long as the borrow of `self`; see `Region::new` for the
        // immutability of the bytes handed out.
        unsafe { Region::new(self.map.as_ptr(), self.region_len) }
    }

    /// What is published now: ONE atomic load (Acquire, pairing with the
    /// publisher's Release store, so a generation's blocks are visible once
    /// its word is).
    #[inline]
    pub fn current(&self) -> Published {
        // SAFETY: the mapping holds at least HEADER_LEN bytes (checked at open),
        // is page aligned and lives as long as `self`.
        let w = unsafe { header_word(self.map.as_ptr(), H_PUBLISHED) };
        Published::from_word(w.load(Ordering::Acquire))
    }

    /// Blocks until something other than `seen` is published, `timeout`
    /// passes or a signal arrives (returns at once when it already was):
    /// the publisher wakes every waiter after each publication. For a
    /// thread that sleeps and wakes workers, never for a worker itself.
    pub fn wait_published(&self, seen: Published, timeout: Duration) {
        // SAFETY: as in `current`.
        let w = unsafe { header_word(self.map.as_ptr(), H_PUBLISHED) };
        super::notify::wait_change(w, pack(seen.generation, seen.root), timeout);
    }

    /// Validates the generation `p` (normally [`TablesReader::current`])
    /// and returns a view of it. The root is always checked in full; a VIP
    /// block this reader validated in its last successful `view` (same
    /// offset, length, checksum and VIP id in the root) is not read again —
    /// the publication protocol guarantees it has not changed — so adopting
    /// a generation that changed one VIP costs that VIP's block plus the
    /// root. (Blocks are matched by position first, by offset from the
    /// second mismatch on; so after VIPs were added, removed or reordered,
    /// one unchanged block may be checked again.) A corrupt or
    /// out-of-bounds table is refused with [`TablesError::Corrupt`] naming
    /// the problem; the cache then keeps describing the last good view.
    pub fn view(&self, p: Published) -> Result<TablesView<'_>, TablesError> {
        let mut cache = self.cache.borrow_mut();
        let v = validate(&self.region(), p, Some(&mut cache))?;
        cache.commit();
        Ok(v)
    }

    /// [`TablesReader::view`] of [`TablesReader::current`].
    pub fn view_current(&self) -> Result<TablesView<'_>, TablesError> {
        self.view(self.current())
    }

    /// Like [`TablesReader::view`], but checks every block in full and
    /// leaves the cache alone.
    pub fn view_uncached(&self, p: Published) -> Result<TablesView<'_>, TablesError> {
        validate(&self.region(), p, None)
    }

    /// Caps the validated-blocks cache (0 disables it).
    pub fn set_cache_capacity(&self, cap: usize) {
        let mut c = self.cache.borrow_mut();
        c.cap = cap;
        c.entries.clear();
        c.by_off_built = false;
    }

    /// Path the region was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes of the region.
    pub fn region_len(&self) -> u64 {
        self.region_len
    }

    /// Identity of the region, new on every [`super::TablesWriter::create`].
    pub fn region_id(&self) -> u64 {
        self.region_id
    }

    /// Whether the path now names another file (the publisher re-created
    /// the region): re-open to follow it. Costs a `stat`; call it rarely.
    pub fn replaced(&self) -> bool {
        match std::fs::metadata(&self.path) {
            Ok(m) => (m.dev(), m.ino()) != self.dev_ino,
            Err(_) => true,
        }
    }
}

/// The mode a [`VipRecord::mode`] byte names (`None`: no mode).
fn mode_of(byte: u8) -> Option<Mode> {
    Some(match byte {
        0 => Mode::FullNat,
        1 => Mode::Dnat,
        2 => Mode::Dsr(Encap::None),
        3 => Mode::Dsr(Encap::Ipip),
        4 => Mode::Dsr(Encap::Gue),
        _ => return None,
    })
}
