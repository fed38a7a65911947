//! The frame that the records region ([`crate::records`]) and the
//! connections region ([`crate::conns`]) share: a shared-memory file with
//! one ring per border-dp worker. Each kind brings its magic, its layout
//! version, its control block and its slot size; what a slot holds and how
//! the two sides hand slots over is the kind's own.
//!
//! Header (offsets in bytes, little endian, the file mapped page-aligned):
//!
//! ```text
//! 0    magic            [u8; 8]  the kind's
//! 8    layout_version   u32      the kind's
//! 12   n_workers        u32
//! 16   ring_slots       u32      a power of two
//! 20   slot_len         u32      the kind's
//! 24   dp_pid           u32
//! 28   (the kind's, zero at creation, up to HEADER_LEN)
//! ring i at HEADER_LEN + i * (control_len + ring_slots * slot_len)
//! ```

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::MmapMut;

use crate::os::files::{self, Access};

/// Bytes before the first ring.
pub(crate) const HEADER_LEN: usize = 128;
const MAX_WORKERS: u32 = 1024;

/// What one kind of ring region is.
pub(crate) struct RingsKind {
    /// As it appears in errors: "records", "connections".
    pub name: &'static str,
    pub magic: [u8; 8],
    pub layout_version: u32,
    /// Bytes of each ring's control block, before its slots.
    pub control_len: usize,
    pub slot_len: usize,
    /// The most slots per ring a reader accepts from a header.
    pub max_slots: u32,
}

impl RingsKind {
    fn stride(&self, ring_slots: usize) -> usize {
        self.control_len + ring_slots * self.slot_len
    }
}

/// Why a ring region could not be created or opened.
#[derive(Debug, thiserror::Error)]
pub enum RegionError {
    #[error("{kind} region {path}: {source}")]
    Io {
        kind: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("{kind} region {untrusted}")]
    Untrusted {
        kind: &'static str,
        untrusted: files::Untrusted,
    },
    #[error("{kind} region {path}: {what}")]
    Corrupt {
        kind: &'static str,
        path: PathBuf,
        what: String,
    },
}

/// A mapped ring region, created by border-dp or opened by a reader.
pub(crate) struct WorkerRings {
    /// Keeps the mapping alive; every access goes through `base`.
    _map: MmapMut,
    /// The mapping's first byte, taken once from `as_mut_ptr`: rings are
    /// written through it by several workers at once.
    base: *mut u8,
    len: usize,
    path: PathBuf,
    n_workers: usize,
    ring_slots: usize,
    kind: &'static RingsKind,
}

// SAFETY: `base` points into the mapping `_map` owns for the region's life;
// shared words are accessed through atomics and slots through each kind's
// hand-over protocol (one writer per ring).
unsafe impl Send for WorkerRings {}
// SAFETY: as for Send: `&WorkerRings` gives out atomics and raw slot
// pointers whose use each kind's protocol orders.
unsafe impl Sync for WorkerRings {}

impl std::fmt::Debug for WorkerRings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(self.kind.name)
            .field("path", &self.path)
            .field("n_workers", &self.n_workers)
            .field("ring_slots", &self.ring_slots)
            .finish()
    }
}

impl WorkerRings {
    /// Creates (replacing any previous one) the region for `n_workers`
    /// rings of `ring_slots` slots, preallocated: a full tmpfs is an error
    /// here, never a SIGBUS later. `init_control` fills each ring's
    /// control block before a reader can map the file.
    pub fn create(
        kind: &'static RingsKind,
        path: &Path,
        n_workers: usize,
        ring_slots: u32,
        access: Access,
        init_control: impl Fn(&mut [u8]),
    ) -> Result<WorkerRings, RegionError> {
        let io_err = |source| RegionError::Io {
            kind: kind.name,
            path: path.to_owned(),
            source,
        };
        if n_workers as u64 > u64::from(MAX_WORKERS) {
            return Err(corrupt(kind, path, format!("{n_workers} workers")));
        }
        if !ring_slots.is_power_of_two() || ring_slots > kind.max_slots {
            return Err(corrupt(
                kind,
                path,
                format!(
                    "{ring_slots} slots is not a power of two up to {}",
                    kind.max_slots
                ),
            ));
        }
        let slots = ring_slots as usize;
        let len = HEADER_LEN + n_workers * kind.stride(slots);
        // Built under a temporary name and renamed, so a reader of the
        // previous region keeps valid memory.
        let tmp = files::temp_path_for(path);
        let file = files::create_new(&tmp, access).map_err(|e| untrusted_or(kind, e, io_err))?;
        if let Err(e) = files::allocate(&file, len as u64) {
            let _ = std::fs::remove_file(&tmp);
            return Err(io_err(e));
        }
        // SAFETY: the file was just created with `len` bytes under a name
        // only this process uses; once renamed, a reader maps it too and
        // both sides follow the kind's protocol.
        let mut map = unsafe { MmapMut::map_mut(&file) }.map_err(io_err)?;
        map[0..8].copy_from_slice(&kind.magic);
        map[8..12].copy_from_slice(&kind.layout_version.to_le_bytes());
        map[12..16].copy_from_slice(&(n_workers as u32).to_le_bytes());
        map[16..20].copy_from_slice(&ring_slots.to_le_bytes());
        map[20..24].copy_from_slice(&(kind.slot_len as u32).to_le_bytes());
        map[24..28].copy_from_slice(&std::process::id().to_le_bytes());
        for w in 0..n_workers {
            let at = HEADER_LEN + w * kind.stride(slots);
            init_control(&mut map[at..at + kind.control_len]);
        }
        if let Err(e) = std::fs::rename(&tmp, path) {
            let _ = std::fs::remove_file(&tmp);
            return Err(io_err(e));
        }
        Ok(WorkerRings::of(kind, map, path, n_workers, slots))
    }

    /// Maps an existing region read-write (readers give slots back by
    /// writing control words) and validates its header. The file must be
    /// this user's and private to it or its group: both kinds carry
    /// clients' addresses.
    pub fn open(
        kind: &'static RingsKind,
        path: &Path,
        access: Access,
    ) -> Result<WorkerRings, RegionError> {
        let io_err = |source| RegionError::Io {
            kind: kind.name,
            path: path.to_owned(),
            source,
        };
        let file =
            files::open_own(path, access, false).map_err(|e| untrusted_or(kind, e, io_err))?;
        // SAFETY: a file of this user's (checked above); its length is
        // validated below before any ring is touched, and the writer only
        // changes control words atomically and slots under the protocol.
        let map = unsafe { MmapMut::map_mut(&file) }.map_err(io_err)?;
        if map.len() < HEADER_LEN {
            let what = format!("{} bytes is shorter than the header", map.len());
            return Err(corrupt(kind, path, what));
        }
        if map[0..8] != kind.magic {
            let what = format!("not a border {} region (bad magic)", kind.name);
            return Err(corrupt(kind, path, what));
        }
        let u32_at = |o: usize| u32::from_le_bytes([map[o], map[o + 1], map[o + 2], map[o + 3]]);
        let version = u32_at(8);
        if version != kind.layout_version {
            let what = format!(
                "layout version {version} is not supported (this build speaks {})",
                kind.layout_version
            );
            return Err(corrupt(kind, path, what));
        }
        let (n_workers, ring_slots, slot_len) = (u32_at(12), u32_at(16), u32_at(20));
        if n_workers > MAX_WORKERS
            || !ring_slots.is_power_of_two()
            || ring_slots > kind.max_slots
            || slot_len as usize != kind.slot_len
        {
            let what = format!("{n_workers} workers, {ring_slots} slots of {slot_len} bytes");
            return Err(corrupt(kind, path, what));
        }
        let need = HEADER_LEN + n_workers as usize * kind.stride(ring_slots as usize);
        if map.len() < need {
            let what = format!("{} bytes, but its rings need {need}", map.len());
            return Err(corrupt(kind, path, what));
        }
        Ok(WorkerRings::of(
            kind,
            map,
            path,
            n_workers as usize,
            ring_slots as usize,
        ))
    }

    fn of(
        kind: &'static RingsKind,
        mut map: MmapMut,
        path: &Path,
        n_workers: usize,
        ring_slots: usize,
    ) -> WorkerRings {
        WorkerRings {
            base: map.as_mut_ptr(),
            len: map.len(),
            _map: map,
            path: path.to_owned(),
            n_workers,
            ring_slots,
            kind,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn n_workers(&self) -> usize {
        self.n_workers
    }

    pub fn ring_slots(&self) -> usize {
        self.ring_slots
    }

    /// The border-dp that created the region.
    pub fn pid(&self) -> u32 {
        // The header's first words are written once, before the rename.
        self.word(24).load(Ordering::Relaxed) as u32
    }

    /// The shared word at `offset` bytes into the file.
    pub fn word(&self, offset: usize) -> &AtomicU64 {
        assert!(offset.is_multiple_of(8) && offset + 8 <= self.len);
        // SAFETY: the mapping is page-aligned and `offset` is a multiple of 8
        // inside it (asserted above), so the pointer is valid and aligned for
        // AtomicU64; the reference lives no longer than `self`, which owns the
        // mapping. The other process accesses these words only atomically.
        unsafe { &*(self.base.add(offset) as *const AtomicU64) }
    }

    /// Offset of worker `worker`'s control block; its slots follow it.
    pub fn ring_base(&self, worker: usize) -> usize {
        HEADER_LEN + worker * self.kind.stride(self.ring_slots)
    }

    /// Worker `worker`'s first slot. The caller keeps to its ring's
    /// `ring_slots * slot_len` bytes and to the kind's hand-over protocol.
    pub fn slots_ptr(&self, worker: usize) -> *mut u8 {
        assert!(worker < self.n_workers);
        let at = self.ring_base(worker) + self.kind.control_len;
        // SAFETY: `at` is the first slot of a ring that create/open checked
        // lies inside the mapping (`len` covers every worker's stride).
        unsafe { self.base.add(at) }
    }
}

fn corrupt(kind: &'static RingsKind, path: &Path, what: String) -> RegionError {
    RegionError::Corrupt {
        kind: kind.name,
        path: path.to_owned(),
        what,
    }
}

fn untrusted_or(
    kind: &'static RingsKind,
    e: files::FileError,
    io_err: impl FnOnce(io::Error) -> RegionError,
) -> RegionError {
    match e {
        files::FileError::Io(source) => io_err(source),
        files::FileError::Untrusted(untrusted) => RegionError::Untrusted {
            kind: kind.name,
            untrusted,
        },
    }
}
