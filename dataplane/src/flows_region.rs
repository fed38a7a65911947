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
//!
//! Upgrades: a build reads its own layout version and the one before it
//! ([`readable_layouts`]); a region of any other version, or whose
//! geometry checksum is not the one its version and this build's entry
//! layout give, is not adopted (logged). Debug builds write the next
//! version when `BORDER_FLOWS_LAYOUT_NEXT=1` (its slab starts at 8 KiB
//! instead of 4 KiB) and then read both: the upgrade test's "next release".

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use conf::os::files::{self, Access};
use memmap2::{Mmap, MmapOptions, MmapRaw};

use crate::conntrack::Slab;

/// The layout version border-dp writes (without the debug override).
pub const FLOWS_LAYOUT_VERSION: u32 = 1;

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
    let mut v = vec![CURRENT];
    if next_requested() {
        v.push(NEXT);
    }
    v
}

/// The path of worker `w`'s region.
pub fn flows_path(instance: &str, w: usize) -> PathBuf {
    conf::os::region_dir().join(format!("border-{instance}-flows-{w}"))
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

impl FlowsRegion {
    /// Creates (replacing any previous file, which a reader that mapped it
    /// keeps) worker `worker`'s region for `capacity` slots of `slot_bytes`.
    /// Its memory is allocated now: a full tmpfs is an error here.
    pub fn create(
        path: &Path,
        (worker, workers): (usize, usize),
        capacity: usize,
        (slot_bytes, words): (usize, &[u64]),
        access: Access,
    ) -> io::Result<FlowsRegion> {
        let layout = writing_layout();
        let len = layout.header_len + capacity * slot_bytes;
        let tmp = files::temp_path_for(path);
        let _ = std::fs::remove_file(&tmp);
        let file = files::create_new(&tmp, access).map_err(file_error)?;
        let made = (|| {
            files::allocate(&file, len as u64)?;
            let map = MmapOptions::new().len(len).map_raw(&file)?;
            write_header(&map, layout, (worker, workers), capacity, slot_bytes, words);
            std::fs::rename(&tmp, path)?;
            Ok(map)
        })();
        match made {
            Ok(map) => Ok(FlowsRegion {
                map: Arc::new(map),
                layout,
                capacity,
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
        assert!(core::mem::align_of::<T>() <= 4096, "slab alignment");
        let base = self
            .map
            .as_mut_ptr()
            .wrapping_add(self.layout.header_len)
            .cast::<T>();
        let hw = self.map.as_mut_ptr().wrapping_add(48).cast::<u64>();
        let (Some(base), Some(high_water)) =
            (core::ptr::NonNull::new(base), core::ptr::NonNull::new(hw))
        else {
            return Slab::heap(self.capacity);
        };
        let mapped = crate::conntrack::slab::Mapped {
            high_water,
            keep: Box::new(self.map),
        };
        // SAFETY: the mapping is `header_len + capacity * size_of::<T>()`
        // bytes, page-aligned, so `base` (a multiple of 4 KiB further) is
        // aligned for `T` and valid for `capacity` slots; offset 48 is the
        // header's high-water word. The mapping lives as long as the slab
        // (moved into `keep`); only the slab's worker writes the slab, and
        // the main thread touches only the clock word.
        unsafe { Slab::mapped(base, self.capacity, 0, mapped) }
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
    (worker, workers): (usize, usize),
    capacity: usize,
    slot_bytes: usize,
    words: &[u64],
) {
    let mut h = [0u8; 64];
    h[0..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&layout.version.to_le_bytes());
    h[12..16].copy_from_slice(&(worker as u32).to_le_bytes());
    h[16..20].copy_from_slice(&(workers as u32).to_le_bytes());
    h[20..24].copy_from_slice(&(slot_bytes as u32).to_le_bytes());
    h[24..32].copy_from_slice(&(capacity as u64).to_le_bytes());
    h[32..40].copy_from_slice(&geometry_sum(layout, words).to_le_bytes());
    h[56..60].copy_from_slice(&std::process::id().to_le_bytes());
    h[60..64].copy_from_slice(&(layout.header_len as u32).to_le_bytes());
    // SAFETY: the mapping is at least a header long and nothing else
    // accesses it yet (the file is still under its temporary name).
    unsafe { core::ptr::copy_nonoverlapping(h.as_ptr(), map.as_mut_ptr(), h.len()) };
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
        Ok(Some(PreviousRegion {
            path: path.to_owned(),
            worker: u32_at(12) as usize,
            workers: u32_at(16) as usize,
            layout,
            slot_bytes,
            slots,
            clock_offset_ms: u64_at(40) as i64,
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

    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }

    /// Live-or-not slots across every region (what adoption looks at).
    pub fn slots(&self) -> usize {
        self.regions.iter().map(PreviousRegion::slots).sum()
    }
}
