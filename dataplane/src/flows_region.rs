//! The flows regions: one file per worker in the region directory,
//! `border-<instance>-flows-<worker>`, holding that worker's connection
//! table slab, so the entries outlive border-dp and the next border-dp of
//! the instance adopts them (`crate::conntrack::adopt`, `lb/adopt.rs`).
//!
//! A header of [`Layout::header_len`] bytes, then the slab:
//!
//! | offset | field                                                     |
//! |--------|-----------------------------------------------------------|
//! | 0      | magic `BRDFLOWS`                                          |
//! | 8      | layout version (u32)                                      |
//! | 12     | worker index, 16: workers (u32 each)                      |
//! | 20     | bytes per slot (u32)                                      |
//! | 24     | capacity in slots (u64)                                   |
//! | 32     | geometry checksum (u64): version, header and entry layout |
//! | 40     | wall clock minus workers' clock, ms (i64, kept current)   |
//! | 48     | high-water mark: slots ever used (u64)                    |
//! | 56     | pid of the writer (u32), 60: header length (u32)          |
//! | 64     | generation (u64), from version 2                          |
//! | 72     | meters offset (u64, 0: no meters), from version 2         |
//! | 80     | bytes per meter (u32), from version 2                     |
//! | 88     | meters in use (u64, the capacity), from version 2         |
//!
//! With `[records]`, each slot's meter (packets and bytes each way) lives
//! after the slab, page-aligned, one per slot: the slot's flow and its
//! meter outlive the process together, so a record of a flow that spans a
//! restart has its whole traffic.
//!
//! Generations: each start writes generation 1 + the highest it adopted
//! from. The regions it adopts from are first renamed
//! `border-<instance>-flows-<worker>.g<generation>` and removed only once
//! every worker has adopted ([`PreviousFlows::remove_files`]): a crash
//! during adoption leaves them, and the next start adopts from them and
//! from the crashed start's own regions, newest generation first.
//!
//! Upgrades: a build reads its own layout version and the one before it
//! ([`readable_layouts`]); a region of any other version, or whose
//! geometry checksum is not the one its version and this build's entry
//! layout give, is not adopted (logged). Version 1 had no generation and
//! no meters (read as generation 0, meters not carried). Debug builds
//! write the next version when `BORDER_FLOWS_LAYOUT_NEXT=1` (its slab
//! starts at 8 KiB instead of 4 KiB) and then read all three: the upgrade
//! test's "next release".

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use conf::os::files::{self, Access};
use memmap2::{Mmap, MmapOptions, MmapRaw};

use core::ptr::NonNull;

use crate::conntrack::adopt::RawValue;
use crate::conntrack::slab::Mapped;
use crate::conntrack::Slab;

/// The layout version border-dp writes (without the debug override).
pub const FLOWS_LAYOUT_VERSION: u32 = 2;

/// The debug-build override that writes the next layout version.
pub const LAYOUT_NEXT_ENV: &str = "BORDER_FLOWS_LAYOUT_NEXT";

const MAGIC: [u8; 8] = *b"BRDFLOWS";

/// One layout version: what differs between versions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub version: u32,
    /// Where the slab starts.
    pub header_len: usize,
}

const CURRENT: Layout = Layout {
    version: FLOWS_LAYOUT_VERSION,
    header_len: 4096,
};

/// The version before: no generation, no meters (header fields from 64
/// on were not written).
pub const PREVIOUS: Layout = Layout {
    version: FLOWS_LAYOUT_VERSION - 1,
    header_len: 4096,
};

impl Layout {
    /// Whether the header has the generation and the meters fields.
    fn has_extras(self) -> bool {
        self.version >= 2
    }
}

/// The debug-only next version (see the module docs).
const NEXT: Layout = Layout {
    version: FLOWS_LAYOUT_VERSION + 1,
    header_len: 8192,
};

fn next_requested() -> bool {
    cfg!(debug_assertions) && std::env::var_os(LAYOUT_NEXT_ENV).is_some_and(|v| v == "1")
}

/// The layout this process writes.
pub fn writing_layout() -> Layout {
    if next_requested() {
        NEXT
    } else {
        CURRENT
    }
}

/// The layouts this process adopts: its own and the one before.
pub fn readable_layouts() -> Vec<Layout> {
    let mut v = vec![CURRENT, PREVIOUS];
    if next_requested() {
        v.push(NEXT);
    }
    v
}

/// The path of worker `w`'s region.
pub fn flows_path(instance: &str, w: usize) -> PathBuf {
    crate::region_names::live_path(instance, "flows", w)
}

/// The name of worker `w`'s region of `generation` while a start adopts
/// from it.
pub fn pending_path(dir: &Path, instance: &str, w: usize, generation: u64) -> PathBuf {
    crate::region_names::pending_path(dir, instance, "flows", w, generation)
}

/// Every flows region file of `instance` in `dir` (the region directory):
/// path, worker, and the generation of its name (`None`: the live name).
pub fn flows_files(dir: &Path, instance: &str) -> Vec<(PathBuf, usize, Option<u64>)> {
    crate::region_names::region_files(dir, instance, "flows")
}

/// The geometry checksum of `layout` with entries described by `words`
/// (`conntrack::adopt::layout_words`).
pub fn geometry_sum(layout: Layout, words: &[u64]) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    let mut mix = |x: u64| {
        for b in x.to_le_bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01B3);
        }
    };
    mix(u64::from(layout.version));
    mix(layout.header_len as u64);
    words.iter().for_each(|&w| mix(w));
    h
}

/// A worker's new region, before its slab goes to the worker.
pub struct FlowsRegion {
    map: Arc<MmapRaw>,
    layout: Layout,
    capacity: usize,
    /// Where the meters start (0: none).
    meters_at: usize,
}

/// What a new region holds.
#[derive(Clone, Copy, Debug)]
pub struct Spec<'a> {
    pub worker: usize,
    pub workers: usize,
    /// Slots.
    pub capacity: usize,
    pub slot_bytes: usize,
    /// The entry layout (`conntrack::adopt::layout_words`).
    pub words: &'a [u64],
    /// Bytes of each slot's meter (`[records]`); 0: no meters.
    pub meter_bytes: usize,
    /// See the module docs: 1 + the highest adopted from.
    pub generation: u64,
}

/// What the main thread keeps of a region: the header word it keeps
/// current.
#[derive(Clone)]
pub struct ClockWord(Arc<MmapRaw>);

impl ClockWord {
    /// Records the offset from the workers' clock to the wall clock.
    pub fn set(&self, offset_ms: i64) {
        clock_word(&self.0).store(offset_ms, Ordering::Release);
    }
}

fn clock_word(map: &MmapRaw) -> &AtomicI64 {
    // SAFETY: the header is at least 4 KiB and page-aligned, so offset 40
    // is inside it and aligned for an i64; the reference lives no longer
    // than the mapping. Every access to this word is atomic.
    unsafe { &*(map.as_mut_ptr().add(40) as *const AtomicI64) }
}

const PAGE: usize = 4096;

fn page_up(n: usize) -> usize {
    n.div_ceil(PAGE) * PAGE
}

impl FlowsRegion {
    /// Creates (replacing any previous file, which a reader that mapped it
    /// keeps) worker `worker`'s region for `capacity` slots of `slot_bytes`,
    /// without meters, generation 1.
    pub fn create(
        path: &Path,
        (worker, workers): (usize, usize),
        capacity: usize,
        (slot_bytes, words): (usize, &[u64]),
        access: Access,
    ) -> io::Result<FlowsRegion> {
        let spec = Spec {
            worker,
            workers,
            capacity,
            slot_bytes,
            words,
            meter_bytes: 0,
            generation: 1,
        };
        Self::create_as(path, &spec, access, writing_layout())
    }

    /// Creates the region `spec` describes at `path` (as
    /// [`FlowsRegion::create`]). Its memory is allocated now: a full
    /// tmpfs is an error here.
    pub fn create_spec(path: &Path, spec: &Spec<'_>, access: Access) -> io::Result<FlowsRegion> {
        Self::create_as(path, spec, access, writing_layout())
    }

    /// [`FlowsRegion::create_spec`] in `layout` (tests write the previous
    /// layout with it; a layout without meters gets none).
    pub fn create_as(
        path: &Path,
        spec: &Spec<'_>,
        access: Access,
        layout: Layout,
    ) -> io::Result<FlowsRegion> {
        let slab_end = layout.header_len + spec.capacity * spec.slot_bytes;
        let meter_bytes = if layout.has_extras() {
            spec.meter_bytes
        } else {
            0
        };
        let meters_at = if meter_bytes > 0 {
            page_up(slab_end)
        } else {
            0
        };
        let len = if meter_bytes > 0 {
            meters_at + spec.capacity * meter_bytes
        } else {
            slab_end
        };
        let tmp = files::temp_path_for(path);
        let _ = std::fs::remove_file(&tmp);
        let file = files::create_new(&tmp, access).map_err(file_error)?;
        let made = (|| {
            files::allocate(&file, len as u64)?;
            // Mapped whole now (the pages exist since the allocation): the
            // adoption and the first packets of each slot then take no
            // page fault, a few tens of thousands at a million entries.
            let map = MmapOptions::new().len(len).populate().map_raw(&file)?;
            write_header(&map, layout, spec, meters_at, meter_bytes);
            std::fs::rename(&tmp, path)?;
            Ok(map)
        })();
        match made {
            Ok(map) => Ok(FlowsRegion {
                map: Arc::new(map),
                layout,
                capacity: spec.capacity,
                meters_at,
            }),
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                Err(e)
            }
        }
    }

    pub fn clock_word(&self) -> ClockWord {
        ClockWord(self.map.clone())
    }

    /// The slab of `T` (whose size is the `slot_bytes` of `create`), empty.
    pub fn into_slab<T: Copy>(self) -> Slab<T> {
        self.into_parts::<T, u64>().0
    }

    /// The slab of `T` (whose size is the `slot_bytes` of `create`), empty,
    /// and the region's meters, one `M` per slot (whose size is the
    /// `meter_bytes` of `create`), zero at first, if it has them.
    pub fn into_parts<T: Copy, M: RawValue>(self) -> (Slab<T>, Option<Slab<M>>) {
        assert!(core::mem::align_of::<T>() <= PAGE, "slab alignment");
        assert!(core::mem::align_of::<M>() <= PAGE, "meter alignment");
        let base = self
            .map
            .as_mut_ptr()
            .wrapping_add(self.layout.header_len)
            .cast::<T>();
        let hw = self.map.as_mut_ptr().wrapping_add(48).cast::<u64>();
        let (Some(base), Some(high_water)) = (NonNull::new(base), NonNull::new(hw)) else {
            return (Slab::heap(self.capacity), None);
        };
        let zero_ok = M::bytes_valid(&vec![0u8; core::mem::size_of::<M>()]);
        let meters = (self.meters_at > 0 && zero_ok)
            .then(|| {
                let base = self
                    .map
                    .as_mut_ptr()
                    .wrapping_add(self.meters_at)
                    .cast::<M>();
                let word = self.map.as_mut_ptr().wrapping_add(88).cast::<u64>();
                let (base, word) = (NonNull::new(base)?, NonNull::new(word)?);
                let mapped = Mapped {
                    high_water: word,
                    keep: Box::new(self.map.clone()),
                };
                // SAFETY: the meters are `capacity * size_of::<M>()` bytes
                // from `meters_at`, a page boundary inside the mapping (so
                // aligned for `M`), allocated and zero-filled at create;
                // zero bytes are a valid `M` (checked above), so all
                // `capacity` slots hold valid values. Offset 88 is the
                // header's meters word. Only this slab writes them.
                Some(unsafe { Slab::mapped(base, self.capacity, self.capacity, mapped) })
            })
            .flatten();
        let mapped = Mapped {
            high_water,
            keep: Box::new(self.map),
        };
        // SAFETY: the mapping is `header_len + capacity * size_of::<T>()`
        // bytes at least, page-aligned, so `base` (a multiple of 4 KiB
        // further) is aligned for `T` and valid for `capacity` slots; offset
        // 48 is the header's high-water word. The mapping lives as long as
        // the slab (moved into `keep`); only the slab's worker writes the
        // slab, and the main thread touches only the clock word.
        (
            unsafe { Slab::mapped(base, self.capacity, 0, mapped) },
            meters,
        )
    }
}

fn file_error(e: files::FileError) -> io::Error {
    match e {
        files::FileError::Io(e) => e,
        other => io::Error::other(other.to_string()),
    }
}

fn write_header(
    map: &MmapRaw,
    layout: Layout,
    spec: &Spec<'_>,
    meters_at: usize,
    meter_bytes: usize,
) {
    let mut h = [0u8; 96];
    h[0..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&layout.version.to_le_bytes());
    h[12..16].copy_from_slice(&(spec.worker as u32).to_le_bytes());
    h[16..20].copy_from_slice(&(spec.workers as u32).to_le_bytes());
    h[20..24].copy_from_slice(&(spec.slot_bytes as u32).to_le_bytes());
    h[24..32].copy_from_slice(&(spec.capacity as u64).to_le_bytes());
    h[32..40].copy_from_slice(&geometry_sum(layout, spec.words).to_le_bytes());
    h[56..60].copy_from_slice(&std::process::id().to_le_bytes());
    h[60..64].copy_from_slice(&(layout.header_len as u32).to_le_bytes());
    let n = if layout.has_extras() {
        h[64..72].copy_from_slice(&spec.generation.to_le_bytes());
        h[72..80].copy_from_slice(&(meters_at as u64).to_le_bytes());
        h[80..84].copy_from_slice(&(meter_bytes as u32).to_le_bytes());
        96
    } else {
        64
    };
    // SAFETY: the mapping is at least a header long and nothing else
    // accesses it yet (the file is still under its temporary name).
    unsafe { core::ptr::copy_nonoverlapping(h.as_ptr(), map.as_mut_ptr(), n) };
}

/// A previous process's region, mapped read-only, its header validated.
pub struct PreviousRegion {
    map: Mmap,
    pub path: PathBuf,
    pub worker: usize,
    pub workers: usize,
    pub layout: Layout,
    slot_bytes: usize,
    /// Slots ever used (at most the capacity).
    slots: usize,
    pub clock_offset_ms: i64,
    /// 0 for layout version 1.
    pub generation: u64,
    /// Where the meters start and their size, if it has them.
    meters: Option<(usize, usize)>,
}

impl PreviousRegion {
    /// Maps and checks the region at `path`; `Ok(None)` if there is none.
    /// An error says why it cannot be adopted.
    pub fn open(
        path: &Path,
        access: Access,
        slot_bytes: usize,
        words: &[u64],
    ) -> Result<Option<PreviousRegion>, String> {
        let file: File = match files::open_own(path, access, false) {
            Ok(f) => f,
            Err(files::FileError::Io(e)) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.to_string()),
        };
        // SAFETY: a file of this user's (checked by `open_own`), mapped
        // read-only; every byte is validated before it is trusted, and no
        // process writes it any more (its writer is gone: the instance lock).
        let map = unsafe { Mmap::map(&file) }.map_err(|e| e.to_string())?;
        if map.len() < 64 || map[0..8] != MAGIC {
            return Err("not a flows region (bad magic)".into());
        }
        let u32_at = |o: usize| u32::from_le_bytes([map[o], map[o + 1], map[o + 2], map[o + 3]]);
        let u64_at = |o: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&map[o..o + 8]);
            u64::from_le_bytes(b)
        };
        let version = u32_at(8);
        let Some(layout) = readable_layouts()
            .into_iter()
            .find(|l| l.version == version)
        else {
            return Err(format!(
                "layout version {version} is not one this build reads ({:?})",
                readable_layouts()
                    .iter()
                    .map(|l| l.version)
                    .collect::<Vec<_>>()
            ));
        };
        if u32_at(60) as usize != layout.header_len || u64_at(32) != geometry_sum(layout, words) {
            return Err(format!(
                "geometry checksum of layout version {version} does not match this build's entries"
            ));
        }
        if u32_at(20) as usize != slot_bytes {
            return Err(format!(
                "{} bytes per slot, this build has {slot_bytes}",
                u32_at(20)
            ));
        }
        let capacity = u64_at(24) as usize;
        let room = map.len().saturating_sub(layout.header_len) / slot_bytes.max(1);
        if capacity > room {
            return Err(format!("{capacity} slots in a file with room for {room}"));
        }
        let slots = (u64_at(48) as usize).min(capacity);
        let (generation, meters) = if layout.has_extras() {
            let (at, bytes) = (u64_at(72) as usize, u32_at(80) as usize);
            let slab_end = layout.header_len + capacity * slot_bytes;
            // Meters that do not fit the file are not read (the entries
            // still are).
            let fits = at >= slab_end
                && bytes > 0
                && capacity
                    .checked_mul(bytes)
                    .and_then(|n| n.checked_add(at))
                    .is_some_and(|end| end <= map.len());
            (u64_at(64), fits.then_some((at, bytes)))
        } else {
            (0, None)
        };
        Ok(Some(PreviousRegion {
            path: path.to_owned(),
            worker: u32_at(12) as usize,
            workers: u32_at(16) as usize,
            layout,
            slot_bytes,
            slots,
            clock_offset_ms: u64_at(40) as i64,
            generation,
            meters,
            map,
        }))
    }

    /// Slots to look at.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// The raw bytes of slot `i`.
    pub fn slot(&self, i: usize) -> &[u8] {
        let at = self.layout.header_len + i * self.slot_bytes;
        self.map.get(at..at + self.slot_bytes).unwrap_or(&[])
    }

    /// The raw bytes of slot `i`'s meter, if the region has meters of
    /// `bytes` bytes.
    pub fn meter(&self, i: usize, bytes: usize) -> Option<&[u8]> {
        let (base, size) = self.meters?;
        if size != bytes || i >= self.slots {
            return None;
        }
        self.map.get(base + i * size..base + (i + 1) * size)
    }

    /// Whether it carries meters of `bytes` bytes.
    pub fn has_meters(&self, bytes: usize) -> bool {
        self.meters.is_some_and(|(_, b)| b == bytes)
    }
}

/// Every previous region of an instance, shared by the new workers (each
/// takes the entries it owns, wherever they were).
#[derive(Default)]
pub struct PreviousFlows {
    pub regions: Vec<PreviousRegion>,
}

impl PreviousFlows {
    /// Opens `border-<instance>-flows-<w>` for `w` from 0 on, until one is
    /// missing (at most `max` of them). Regions that cannot be adopted are
    /// returned with the reason, for the log.
    pub fn open(
        instance: &str,
        access: Access,
        slot_bytes: usize,
        words: &[u64],
        max: usize,
    ) -> (PreviousFlows, Vec<(PathBuf, String)>) {
        Self::open_paths(
            (0..max).map(|w| flows_path(instance, w)),
            access,
            slot_bytes,
            words,
        )
    }

    /// [`PreviousFlows::open`] over the regions at `paths`, in order, until
    /// one is missing.
    pub fn open_paths(
        paths: impl Iterator<Item = PathBuf>,
        access: Access,
        slot_bytes: usize,
        words: &[u64],
    ) -> (PreviousFlows, Vec<(PathBuf, String)>) {
        let mut prev = PreviousFlows::default();
        let mut refused = Vec::new();
        for path in paths {
            match PreviousRegion::open(&path, access, slot_bytes, words) {
                Ok(Some(r)) => prev.regions.push(r),
                Ok(None) => break,
                Err(why) => refused.push((path, why)),
            }
        }
        (prev, refused)
    }

    /// Every flows region of `instance` in `dir` (the region directory,
    /// where [`flows_path`] puts them), for a
    /// start to adopt: the live set (`border-<instance>-flows-<w>`, renamed
    /// `….g<generation>` here so that a new set can take the names) and
    /// the sets of starts that did not finish adopting (already so
    /// renamed), newest generation first; and the generation of the new
    /// set (see the module docs). A region that cannot be adopted is
    /// returned with the reason and removed.
    pub fn take_over(
        dir: &Path,
        instance: &str,
        access: Access,
        slot_bytes: usize,
        words: &[u64],
    ) -> (PreviousFlows, Vec<(PathBuf, String)>, u64) {
        let mut prev = PreviousFlows::default();
        let mut refused = Vec::new();
        for (path, worker, pending) in flows_files(dir, instance) {
            match PreviousRegion::open(&path, access, slot_bytes, words) {
                Ok(Some(mut r)) => {
                    if pending.is_none() {
                        let to = pending_path(dir, instance, worker, r.generation);
                        match std::fs::rename(&path, &to) {
                            Ok(()) => r.path = to,
                            Err(e) => refused.push((
                                path.clone(),
                                format!(
                                    "kept under its name ({e}): a crash during adoption loses it"
                                ),
                            )),
                        }
                    }
                    prev.regions.push(r);
                }
                Ok(None) => {}
                Err(why) => {
                    let _ = std::fs::remove_file(&path);
                    refused.push((path, why));
                }
            }
        }
        prev.regions
            .sort_by_key(|r| (core::cmp::Reverse(r.generation), r.worker));
        let generation = prev.newest_generation().map_or(1, |g| g + 1);
        (prev, refused, generation)
    }

    /// The highest generation among the regions.
    pub fn newest_generation(&self) -> Option<u64> {
        self.regions.iter().map(|r| r.generation).max()
    }

    /// Removes the regions' files (once every worker has adopted from
    /// them: their flows are in the new regions). The mappings stay until
    /// dropped.
    pub fn remove_files(&self) -> usize {
        self.regions
            .iter()
            .filter(|r| std::fs::remove_file(&r.path).is_ok())
            .count()
    }

    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }

    /// Live-or-not slots across every region (what adoption looks at).
    pub fn slots(&self) -> usize {
        self.regions.iter().map(PreviousRegion::slots).sum()
    }
}
