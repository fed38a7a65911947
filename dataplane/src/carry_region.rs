//! The carry regions: one file per worker in the region directory,
//! `border-<instance>-carry-<worker>`, holding what a worker knows about
//! the hosts around it besides its flows: its resolved neighbour bindings
//! and its persistence pins (`persistence_timeout`), so the next
//! border-dp of the instance starts with them (`crate::neigh`,
//! `crate::persist`, `lb/adopt.rs`) instead of asking again.
//!
//! A header of [`HEADER_LEN`] bytes, then three sections, each
//! page-aligned:
//!
//! | offset | field                                                      |
//! |--------|------------------------------------------------------------|
//! | 0      | magic `BRDCARRY`                                           |
//! | 8      | layout version (u32)                                       |
//! | 12     | worker index, 16: workers (u32 each)                       |
//! | 20     | bytes per neighbour record (u32)                           |
//! | 24     | neighbour records (u64)                                    |
//! | 32     | geometry checksum (u64): version, header, record layouts   |
//! | 40     | wall clock minus workers' clock, ms (i64, kept current)    |
//! | 48     | bytes per pin (u32), 52: VIP names (u32)                   |
//! | 56     | pid of the writer (u32), 60: header length (u32)           |
//! | 64     | generation (u64)                                           |
//! | 72     | pins (u64)                                                 |
//! | 80     | neighbour records offset (u64)                             |
//! | 88     | VIP names offset (u64)                                     |
//! | 96     | pins offset (u64)                                          |
//! | 104    | the pins' hash key (4 x u64; all zero: none recorded)      |
//!
//! - Neighbour records ([`crate::neigh::NeighRecord`]): one per entry of
//!   the worker's table, written by the worker whenever an entry learns,
//!   changes or loses its MAC (never per packet), sealed so that a kill
//!   in the middle of a write leaves a record that fails its check.
//! - VIP names: for each VIP statistics slot of the worker, the VIP's
//!   statistics key (a hash of its name; 0: none). A pin names its VIP by
//!   slot, and slots are this process's: the next one finds the VIP by key.
//! - Pins: the worker's persistence table itself
//!   ([`crate::persist::Persist`] works in this memory, so keeping the
//!   pins costs no store beyond the ones it makes anyway), and its hash
//!   key in the header: the next process hashes with the same key, so
//!   every pin finds room in the bucket it had (a region of version 1
//!   written before the key was recorded has zeros there: its pins are
//!   placed under a new key, and those a full bucket cannot take are
//!   dropped and counted).
//!
//! Generations, as for the flows regions (`crate::flows_region`): a start
//! renames the regions it adopts from `….g<generation>` and removes them
//! once every worker has adopted; a crash in between leaves them for the
//! next start, which reads them newest generation first.
//!
//! Upgrades: a build reads its own layout version and the one before it
//! (there is none before version 1); a region of another version, or
//! whose geometry checksum differs, is not adopted (logged): neighbours
//! are then asked for again and clients pinned anew.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use core::ptr::NonNull;

use conf::os::files::{self, Access};
use memmap2::{Mmap, MmapOptions, MmapRaw};

use crate::conntrack::slab::Mapped;
use crate::conntrack::Slab;
use crate::neigh::{self, NeighRecord};
use crate::persist::{self, Pin};

/// The layout version border-dp writes.
pub const CARRY_LAYOUT_VERSION: u32 = 1;

/// Versions this build reads: its own (and the one before, once there
/// is one).
pub const READABLE: &[u32] = &[CARRY_LAYOUT_VERSION];

const MAGIC: [u8; 8] = *b"BRDCARRY";

/// Where the first section starts.
pub const HEADER_LEN: usize = 4096;

/// VIP names a region keeps: one per VIP statistics slot.
pub const VIP_NAMES: usize = conf::state::MAX_VIPS;

const PAGE: usize = 4096;

fn page_up(n: usize) -> usize {
    n.div_ceil(PAGE) * PAGE
}

/// The path of worker `w`'s region.
pub fn carry_path(instance: &str, w: usize) -> PathBuf {
    crate::region_names::live_path(instance, "carry", w)
}

/// The name of worker `w`'s region of `generation` while a start adopts
/// from it.
pub fn pending_path(dir: &Path, instance: &str, w: usize, generation: u64) -> PathBuf {
    crate::region_names::pending_path(dir, instance, "carry", w, generation)
}

/// Every carry region file of `instance` in `dir`:
/// path, worker, and the generation of its name (`None`: the live name).
pub fn carry_files(dir: &Path, instance: &str) -> Vec<(PathBuf, usize, Option<u64>)> {
    crate::region_names::region_files(dir, instance, "carry")
}

/// The geometry checksum of layout `version`: the header length and the
/// size and field offsets of a neighbour record, a VIP name and a pin.
pub fn geometry_sum(version: u32) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    let mut mix = |x: u64| {
        for b in x.to_le_bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01B3);
        }
    };
    mix(u64::from(version));
    mix(HEADER_LEN as u64);
    neigh::record_layout_words().iter().for_each(|&w| mix(w));
    mix(core::mem::size_of::<u32>() as u64);
    persist::pin_layout_words().iter().for_each(|&w| mix(w));
    h
}

/// Where the sections of a region with `pins` pins lie: (neighbour
/// records, VIP names, pins, file length).
fn sections(pins: usize) -> (usize, usize, usize, usize) {
    let neigh_at = HEADER_LEN;
    let names_at = page_up(neigh_at + neigh::CAPACITY * core::mem::size_of::<NeighRecord>());
    let pins_at = page_up(names_at + VIP_NAMES * core::mem::size_of::<u32>());
    let len = pins_at + pins * core::mem::size_of::<Pin>();
    (neigh_at, names_at, pins_at, len)
}

/// The header word the main loop keeps current.
#[derive(Clone)]
pub struct CarryClock(Arc<MmapRaw>);

impl CarryClock {
    /// Records the offset from the workers' clock to the wall clock.
    pub fn set(&self, offset_ms: i64) {
        // SAFETY: the header is 4 KiB and page-aligned, so offset 40 is
        // inside it and aligned for an i64; the reference lives no longer
        // than the mapping. Every access to this word is atomic.
        let word = unsafe { &*(self.0.as_mut_ptr().add(40) as *const AtomicI64) };
        word.store(offset_ms, Ordering::Release);
    }
}

/// What a worker works in: its neighbour records, VIP names and pins, in
/// its new region.
pub struct CarryParts {
    pub neigh: Slab<NeighRecord>,
    pub names: Slab<u32>,
    pub pins: Slab<Pin>,
    /// The pins' hash key (four words of the header).
    pub pin_key: Slab<u64>,
}

/// Where the header keeps the pins' hash key.
const PIN_KEY_AT: usize = 104;

/// A worker's new region, before its sections go to the worker.
pub struct CarryRegion {
    map: Arc<MmapRaw>,
    pins: usize,
}

impl CarryRegion {
    /// Creates (replacing any previous file, which a reader that mapped it
    /// keeps) worker `worker`'s region of `generation` with room for
    /// `pins` pins. Its memory is allocated now: a full tmpfs is an error
    /// here.
    pub fn create(
        path: &Path,
        (worker, workers): (usize, usize),
        pins: usize,
        generation: u64,
        access: Access,
    ) -> io::Result<CarryRegion> {
        let (neigh_at, names_at, pins_at, len) = sections(pins);
        let tmp = files::temp_path_for(path);
        let _ = std::fs::remove_file(&tmp);
        let file = files::create_new(&tmp, access).map_err(|e| match e {
            files::FileError::Io(e) => e,
            other => io::Error::other(other.to_string()),
        })?;
        let made = (|| {
            files::allocate(&file, len as u64)?;
            let map = MmapOptions::new().len(len).map_raw(&file)?;
            let mut h = [0u8; 104];
            h[0..8].copy_from_slice(&MAGIC);
            h[8..12].copy_from_slice(&CARRY_LAYOUT_VERSION.to_le_bytes());
            h[12..16].copy_from_slice(&(worker as u32).to_le_bytes());
            h[16..20].copy_from_slice(&(workers as u32).to_le_bytes());
            h[20..24].copy_from_slice(&(core::mem::size_of::<NeighRecord>() as u32).to_le_bytes());
            h[24..32].copy_from_slice(&(neigh::CAPACITY as u64).to_le_bytes());
            h[32..40].copy_from_slice(&geometry_sum(CARRY_LAYOUT_VERSION).to_le_bytes());
            h[48..52].copy_from_slice(&(core::mem::size_of::<Pin>() as u32).to_le_bytes());
            h[52..56].copy_from_slice(&(VIP_NAMES as u32).to_le_bytes());
            h[56..60].copy_from_slice(&std::process::id().to_le_bytes());
            h[60..64].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
            h[64..72].copy_from_slice(&generation.to_le_bytes());
            h[72..80].copy_from_slice(&(pins as u64).to_le_bytes());
            h[80..88].copy_from_slice(&(neigh_at as u64).to_le_bytes());
            h[88..96].copy_from_slice(&(names_at as u64).to_le_bytes());
            h[96..104].copy_from_slice(&(pins_at as u64).to_le_bytes());
            // SAFETY: the mapping is at least a header long and nothing
            // else accesses it yet (the file is still under its temporary
            // name).
            unsafe { core::ptr::copy_nonoverlapping(h.as_ptr(), map.as_mut_ptr(), h.len()) };
            std::fs::rename(&tmp, path)?;
            Ok(map)
        })();
        match made {
            Ok(map) => Ok(CarryRegion {
                map: Arc::new(map),
                pins,
            }),
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                Err(e)
            }
        }
    }

    pub fn clock(&self) -> CarryClock {
        CarryClock(self.map.clone())
    }

    /// The region's sections as slabs the worker writes in, every slot
    /// zero (an empty record, no name, a free pin), or `None` if the
    /// mapping gives no pointer.
    pub fn into_parts(self) -> Option<CarryParts> {
        let (neigh_at, names_at, pins_at, _) = sections(self.pins);
        let base = self.map.as_mut_ptr();
        // Header words a slab may use as its high-water mark: the header's
        // unused tail (a full slab's length is its capacity, so the words
        // are written once).
        let word = |at: usize| NonNull::new(base.wrapping_add(at).cast::<u64>());
        let neigh = NonNull::new(base.wrapping_add(neigh_at).cast::<NeighRecord>())?;
        let names = NonNull::new(base.wrapping_add(names_at).cast::<u32>())?;
        let pins = NonNull::new(base.wrapping_add(pins_at).cast::<Pin>())?;
        let mapped = |w: NonNull<u64>| Mapped {
            high_water: w,
            keep: Box::new(self.map.clone()),
        };
        // SAFETY: each section starts on a page boundary inside the
        // mapping (so aligned for its type) and is as long as its count
        // of values (`sections`); the mapping was allocated and
        // zero-filled at create, and zero bytes are a valid value of each
        // type (an empty record, name 0, a free pin), so every slot holds
        // a valid value. The high-water words (offsets 2048, 2056, 2064)
        // lie in the header's unused tail, and so does the pin key (offset
        // 104, 8-aligned, four words, zero until written). Only the worker
        // that takes the parts writes them; the main thread writes only
        // the clock word.
        unsafe {
            Some(CarryParts {
                neigh: Slab::mapped(neigh, neigh::CAPACITY, neigh::CAPACITY, mapped(word(2048)?)),
                names: Slab::mapped(names, VIP_NAMES, VIP_NAMES, mapped(word(2056)?)),
                pins: Slab::mapped(pins, self.pins, self.pins, mapped(word(2064)?)),
                pin_key: Slab::mapped(word(PIN_KEY_AT)?, 4, 4, mapped(word(2072)?)),
            })
        }
    }
}

/// A previous process's region, mapped read-only, its header validated.
pub struct PreviousCarryRegion {
    map: Mmap,
    pub path: PathBuf,
    pub worker: usize,
    pub workers: usize,
    pub clock_offset_ms: i64,
    pub generation: u64,
    /// The hash key its pins were placed with (`None`: not recorded).
    pub pin_key: Option<[u64; 4]>,
    neigh_at: usize,
    names_at: usize,
    pins_at: usize,
    pins: usize,
}

impl PreviousCarryRegion {
    /// Maps and checks the region at `path`; `Ok(None)` if there is none.
    /// An error says why it cannot be adopted.
    pub fn open(path: &Path, access: Access) -> Result<Option<PreviousCarryRegion>, String> {
        let file: File = match files::open_own(path, access, false) {
            Ok(f) => f,
            Err(files::FileError::Io(e)) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.to_string()),
        };
        // SAFETY: a file of this user's (checked by `open_own`), mapped
        // read-only; every byte is validated before it is trusted, and no
        // process writes it any more (its writer is gone: the instance lock).
        let map = unsafe { Mmap::map(&file) }.map_err(|e| e.to_string())?;
        Self::from_map(map, path)
    }

    fn from_map(map: Mmap, path: &Path) -> Result<Option<PreviousCarryRegion>, String> {
        if map.len() < HEADER_LEN || map[0..8] != MAGIC {
            return Err("not a carry region (bad magic)".into());
        }
        let u32_at = |o: usize| u32::from_le_bytes([map[o], map[o + 1], map[o + 2], map[o + 3]]);
        let u64_at = |o: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&map[o..o + 8]);
            u64::from_le_bytes(b)
        };
        let version = u32_at(8);
        if !READABLE.contains(&version) {
            return Err(format!(
                "layout version {version} is not one this build reads ({READABLE:?})"
            ));
        }
        if u32_at(60) as usize != HEADER_LEN || u64_at(32) != geometry_sum(version) {
            return Err(format!(
                "geometry checksum of layout version {version} does not match this build's records"
            ));
        }
        let pins = u64_at(72) as usize;
        let (neigh_at, names_at, pins_at, len) = sections(pins);
        let as_written = [u64_at(80), u64_at(88), u64_at(96)].map(|v| v as usize);
        if as_written != [neigh_at, names_at, pins_at]
            || u32_at(20) as usize != core::mem::size_of::<NeighRecord>()
            || u64_at(24) as usize != neigh::CAPACITY
            || u32_at(48) as usize != core::mem::size_of::<Pin>()
            || u32_at(52) as usize != VIP_NAMES
        {
            return Err("its sections are not where this build puts them".into());
        }
        if len > map.len() {
            return Err(format!("{pins} pins in a file too short for them"));
        }
        Ok(Some(PreviousCarryRegion {
            path: path.to_owned(),
            worker: u32_at(12) as usize,
            workers: u32_at(16) as usize,
            clock_offset_ms: u64_at(40) as i64,
            generation: u64_at(64),
            pin_key: Some([0, 1, 2, 3].map(|i| u64_at(PIN_KEY_AT + 8 * i)))
                .filter(|k| k.iter().any(|&w| w != 0)),
            neigh_at,
            names_at,
            pins_at,
            pins,
            map,
        }))
    }

    /// The raw bytes of every neighbour record.
    pub fn neigh_records(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let size = core::mem::size_of::<NeighRecord>();
        self.map[self.neigh_at..self.neigh_at + neigh::CAPACITY * size].chunks_exact(size)
    }

    /// The statistics key of the VIP of statistics slot `slot` (0: none).
    pub fn vip_name(&self, slot: u32) -> u32 {
        let at = self.names_at + slot as usize * 4;
        match self.map.get(at..at + 4) {
            Some(b) if (slot as usize) < VIP_NAMES => u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            _ => 0,
        }
    }

    /// Pins the region holds room for.
    pub fn pin_count(&self) -> usize {
        self.pins
    }

    /// The raw bytes of every pin.
    pub fn pins(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let size = core::mem::size_of::<Pin>();
        self.map[self.pins_at..self.pins_at + self.pins * size].chunks_exact(size)
    }
}

/// Every previous carry region of an instance, shared by the new workers.
#[derive(Default)]
pub struct PreviousCarry {
    /// Newest generation first.
    pub regions: Vec<PreviousCarryRegion>,
}

impl PreviousCarry {
    /// Every carry region of `instance` in `dir`, for a start to adopt:
    /// the live set renamed `….g<generation>` so that a new set can take
    /// the names, and the sets starts that did not finish adopting left,
    /// newest generation first. A region that cannot be adopted is
    /// returned with the reason and removed.
    pub fn take_over(
        dir: &Path,
        instance: &str,
        access: Access,
    ) -> (PreviousCarry, Vec<(PathBuf, String)>) {
        let mut prev = PreviousCarry::default();
        let mut refused = Vec::new();
        for (path, worker, pending) in carry_files(dir, instance) {
            match PreviousCarryRegion::open(&path, access) {
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
        (prev, refused)
    }

    /// The regions at `paths` (tests), newest generation first.
    pub fn open_paths(
        paths: impl Iterator<Item = PathBuf>,
        access: Access,
    ) -> (PreviousCarry, Vec<(PathBuf, String)>) {
        let mut prev = PreviousCarry::default();
        let mut refused = Vec::new();
        for path in paths {
            match PreviousCarryRegion::open(&path, access) {
                Ok(Some(r)) => prev.regions.push(r),
                Ok(None) => {}
                Err(why) => refused.push((path, why)),
            }
        }
        prev.regions
            .sort_by_key(|r| (core::cmp::Reverse(r.generation), r.worker));
        (prev, refused)
    }

    pub fn newest_generation(&self) -> Option<u64> {
        self.regions.iter().map(|r| r.generation).max()
    }

    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }

    /// Removes the regions' files (once every worker has adopted from
    /// them). The mappings stay until dropped.
    pub fn remove_files(&self) -> usize {
        self.regions
            .iter()
            .filter(|r| std::fs::remove_file(&r.path).is_ok())
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("carry-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// The header as written, byte for byte, and a region of another
    /// version or geometry refused with its reason.
    #[test]
    fn the_header_is_as_documented_and_a_changed_one_is_refused() {
        let dir = scratch("header");
        let path = dir.join("border-t-carry-1");
        let r = CarryRegion::create(&path, (1, 2), 1024, 7, Access::PRIVATE).unwrap();
        r.clock().set(-5);
        let parts = r.into_parts().unwrap();
        assert_eq!(parts.neigh.len(), neigh::CAPACITY);
        assert_eq!(parts.names.len(), VIP_NAMES);
        assert_eq!(parts.pins.len(), 1024);
        let bytes = std::fs::read(&path).unwrap();
        let (neigh_at, names_at, pins_at, len) = sections(1024);
        assert_eq!(
            (neigh_at, names_at, pins_at, len),
            (
                4096,
                4096 + 163_840,
                4096 + 163_840 + 16_384,
                184_320 + 1024 * 48
            )
        );
        assert_eq!(bytes.len(), len);
        let mut want = Vec::new();
        want.extend_from_slice(b"BRDCARRY");
        want.extend_from_slice(&1u32.to_le_bytes());
        want.extend_from_slice(&1u32.to_le_bytes());
        want.extend_from_slice(&2u32.to_le_bytes());
        want.extend_from_slice(&40u32.to_le_bytes());
        want.extend_from_slice(&4096u64.to_le_bytes());
        want.extend_from_slice(&geometry_sum(1).to_le_bytes());
        want.extend_from_slice(&(-5i64).to_le_bytes());
        want.extend_from_slice(&48u32.to_le_bytes());
        want.extend_from_slice(&4096u32.to_le_bytes());
        want.extend_from_slice(&std::process::id().to_le_bytes());
        want.extend_from_slice(&4096u32.to_le_bytes());
        want.extend_from_slice(&7u64.to_le_bytes());
        want.extend_from_slice(&1024u64.to_le_bytes());
        for at in [neigh_at, names_at, pins_at] {
            want.extend_from_slice(&(at as u64).to_le_bytes());
        }
        assert_eq!(bytes[..104], want[..]);
        drop(parts);

        let prev = PreviousCarryRegion::open(&path, Access::PRIVATE)
            .unwrap()
            .unwrap();
        assert_eq!((prev.worker, prev.workers, prev.generation), (1, 2, 7));
        assert_eq!(prev.clock_offset_ms, -5);
        assert_eq!(prev.neigh_records().count(), neigh::CAPACITY);
        assert_eq!(prev.pins().count(), 1024);
        assert_eq!(prev.vip_name(3), 0);
        assert_eq!(prev.vip_name(u32::MAX), 0);

        let refused = |edit: &dyn Fn(&mut Vec<u8>), why: &str| {
            let mut b = bytes.clone();
            edit(&mut b);
            let p = dir.join("edited");
            std::fs::write(&p, &b).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
            let e = PreviousCarryRegion::open(&p, Access::PRIVATE)
                .err()
                .unwrap();
            assert!(e.contains(why), "{e}");
        };
        refused(&|b| b[0] = b'X', "bad magic");
        refused(&|b| b[8] = 9, "layout version 9");
        refused(&|b| b[32] ^= 1, "geometry checksum");
        refused(&|b| b[80] ^= 1, "sections");
        refused(&|b| b.truncate(len - 48), "too short");
        assert!(
            PreviousCarryRegion::open(&dir.join("none"), Access::PRIVATE)
                .unwrap()
                .is_none()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A start takes the live set over under `.g<generation>` names and
    /// reads the sets newest first.
    #[test]
    fn a_start_takes_the_previous_sets_over_newest_first() {
        let dir = scratch("takeover");
        for (name, generation) in [("border-t-carry-0", 3), ("border-t-carry-0.g2", 2)] {
            let r = CarryRegion::create(&dir.join(name), (0, 1), 64, generation, Access::PRIVATE)
                .unwrap();
            drop(r);
        }
        std::fs::write(dir.join("border-t-carry-1"), b"junk").unwrap();
        let (prev, refused) = PreviousCarry::take_over(&dir, "t", Access::PRIVATE);
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(
            !dir.join("border-t-carry-1").exists(),
            "a refused region is removed"
        );
        let gens: Vec<u64> = prev.regions.iter().map(|r| r.generation).collect();
        assert_eq!(gens, [3, 2]);
        assert_eq!(prev.regions[0].path, dir.join("border-t-carry-0.g3"));
        assert_eq!(prev.remove_files(), 2);
        assert!(carry_files(&dir, "t").is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
