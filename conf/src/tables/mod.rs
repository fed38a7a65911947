//! The tables region (docs/design.md §3): the shared-memory file through which the
//! publisher (border-mgmt; border-dp itself in standalone mode) hands
//! finished table generations to border-dp's workers, RCU style.
//!
//! * [`Generation`] / [`VipTable`] / [`BackendEntry`] are the plain Rust
//!   model; [`build_generation`] / [`GenerationBuilder`] make one from a
//!   [`Config`](crate::Config) plus health/operator overrides (Maglev per VIP,
//!   fail-open, zone affinity).
//! * [`TablesWriter`] (the only writer) serialises generations into the
//!   region and publishes them; [`TablesReader`] (one per worker, mapped
//!   read-only) validates and reads them in place through [`TablesView`].
//!
//! # Layout
//!
//! One file, `/dev/shm/border-<instance>-tables` ([`tables_path`]), of fixed
//! size. Little endian, every field naturally aligned, offsets (bytes from
//! the start of the file), never pointers.
//!
//! ```text
//! region header (4096 bytes; only the first 64 are used)
//! 0    magic           [u8; 8]  "BRDTABLE"
//! 8    layout_version  u32      TABLES_LAYOUT_VERSION
//! 12   header_len      u32      4096 = start of the arena
//! 16   region_len      u64      bytes of the file (multiple of 64, <= 16 GiB)
//! 24   region_id       u64      new on every create (tells regions apart)
//! 32   published       u64      ATOMIC: generation << 28 | root_offset / 64 (0 = none)
//! 40   high_water      u64      atomic: end of the highest block ever allocated
//! 48   writer_pid      u64      atomic: pid of the last writer to create/attach
//! 56   created_unix_ms u64
//!
//! arena [4096, region_len): blocks, each 64-byte aligned
//!
//! block header (every block)
//! 0    checksum  u64   xxh64 (seed 0) of the block's bytes [8, len)
//! 8    magic     u32   "BRRT" (root) | "BRVP" (VIP)
//! 12   reserved  u32
//! 16   len       u64   bytes of the block, multiple of 8
//! 24   born      u64   generation that first published the block
//!
//! root block (one per generation)                       RootFixed, VipSlot
//! 32   generation     u64   must equal the published word's generation
//! 40   n_vips         u32   len == 64 + 32 * n_vips
//! 44   reserved       u32
//! 48   flow_hash_key  [u8; 16]
//! 64   slots          [VipSlot; n_vips]
//!        offset u64, len u64, checksum u64, vip_id u32, reserved u32
//!
//! VIP block (one per VIP; shared by every generation in which the VIP is
//! unchanged)                                              VipRecord
//! 32   VipRecord (72 bytes): id, flags, addr[16], port, pp_max_len, family,
//!      proto, mode, n_backends, ring_len, backends_off, ring_off,
//!      name_off, name_len, limits_off, n_prefixes (offsets from the
//!      block start), persistence_s, reserved
//! 104  name         UTF-8, padded to 8
//! ..   backends     [BackendRecord; n_backends]   (32 bytes each; the last
//!                   4 hold the backend's max_connections)
//! ..   limits       LimitsRecord                  (32 bytes: [vip.limits])
//! ..   prefixes     [PrefixRecord; n_prefixes]    (24 bytes each: allow, deny)
//! ..   ring         [u32; ring_len]               (indices into backends)
//! ```
//!
//! # Why blocks
//!
//! A generation is a root block listing one block per VIP. A new generation
//! writes a new root and only the VIP blocks that changed; unchanged VIPs
//! keep their block, by offset. A one-backend change among 512 VIPs x 64
//! backends thus writes one ~256 KiB VIP block and a 16 KiB root, not
//! 128 MiB of rings, and a worker adopting it validates only those two (it
//! remembers where the blocks it already validated are and does not even
//! read them again: [`ValidationStats`]). The same holds on both sides of
//! the region: the publisher's [`GenerationBuilder::build_changed`] looks at
//! the changed VIP only and hands every other VIP over as the previous
//! build's [`Arc`](std::sync::Arc) (recognised by pointer, no block
//! compared), and border-dp's workers keep what they derived from every
//! unchanged block ([`VipView::block_id`]: backends, routes, statistics and
//! neighbour slots) and build only the changed VIP. Measured with
//! `border-perf tables` and `border-perf apply`: publishing and adopting
//! such a change costs about the same with 512 VIPs as with 1.
//!
//! # Publication
//!
//! The publisher writes new blocks into free arena space (unreachable from
//! any published root), then publishes with ONE Release store of a u64 that
//! packs the generation (high 36 bits, [`MAX_GENERATION`]) and the root
//! offset in 64-byte units (low 28 bits, so regions up to 16 GiB). Because
//! the pair lives in one word, a reader's single Acquire load
//! ([`TablesReader::current`]) can never combine one generation's number
//! with another's root, and every byte of that root's blocks is visible to
//! it. The root repeats its generation, so a stale or forged word is caught
//! by validation too.
//!
//! # Reclamation (QSBR)
//!
//! A block replaced or dropped by generation `r` is *retired at r*. Each
//! worker records in the state region ([`crate::state`]) the generation it
//! has applied: it switched to it and no longer touches anything older. The
//! publisher passes those values for every live worker to
//! [`TablesWriter::publish`], which frees a block retired at `r` only when
//! all of them are `>= r` — so bytes of a generation a worker may still be
//! reading (or validating: it loaded the word but has not reported yet) are
//! never reused. Which workers are live is the caller's decision (e.g. a
//! worker whose heartbeat has not moved for a grace period of seconds, or
//! whose process is gone, is left out), so a dead worker does not hold back
//! reclamation forever. The arena is bounded: if a publish does not fit even
//! after reclamation it fails with [`TablesError::ArenaFull`] and nothing
//! changes; it never blocks and never touches a block that may be in use.
//!
//! # Validation
//!
//! A reader refuses a generation — with a [`TablesError::Corrupt`] naming
//! the [`Corruption`] — unless: the root offset and every block offset are
//! 64-aligned inside the arena, every block lies inside the region, magics
//! and lengths match, checksums match, the root's generation matches the
//! word, counts are within [`MAX_VIPS`] / [`MAX_BACKENDS`] / [`MAX_RING`],
//! names, backend arrays and rings lie inside their block and are aligned,
//! enum bytes are defined, and every ring entry is a valid backend index.
//! Nothing is dereferenced before the check that makes it safe, and nothing
//! panics. A VIP block that the same reader fully validated in its previous
//! adoption and that the new root lists at the same offset with the same
//! length, checksum and id is not read again (see [`TablesReader::view`]).
//!
//! # Worker contract
//!
//! Per burst: `p = reader.current()`; if `p` differs from the adopted one,
//! `reader.view(p)`: on success switch to the new view, drop the old one,
//! then store `p.generation` as applied in the state region; on error keep
//! the old view, count the refusal, and do not retry the same `p`. Never
//! report a generation before dropping views of older ones, never report one
//! that was not adopted. A worker that restarts reports 0 until its first
//! adoption (which holds back reclamation, conservatively). If the publisher
//! declares a still-running worker dead (stale heartbeat), that worker may
//! read reused bytes: it stays memory-safe (every slice is inside the
//! mapping, `pick` never indexes out of bounds) but may pick wrong backends
//! until it adopts the current generation — so make the grace period long.

mod alloc;
mod layout;
mod model;
mod notify;
mod reader;
mod writer;

use std::path::PathBuf;

pub use layout::{
    block_checksum, xxh64, BackendRecord, BlockHeader, LimitsRecord, PrefixRecord, RootFixed,
    VipRecord, VipSlot, BLOCK_HEADER_LEN, HEADER_LEN, MAX_BACKENDS, MAX_GENERATION, MAX_NAME_LEN,
    MAX_PERSISTENCE_S, MAX_PREFIXES, MAX_REGION_LEN, MAX_RING, MAX_VIPS, REGION_MAGIC, ROOT_BITS,
    ROOT_FIXED_END, ROOT_MAGIC, TABLES_LAYOUT_VERSION, UNIT, VIP_FIXED_END, VIP_MAGIC,
};
pub use model::{
    backend_ids, build_generation, config_flags, no_overrides, proto_number, BackendEntry,
    BackendState, BuildStats, Generation, GenerationBuilder, Overrides, VipFlags, VipTable,
    PROTO_TCP, PROTO_UDP,
};
pub use reader::{
    view_bytes, BlockId, Published, TablesReader, TablesView, ValidationStats, VipView,
    DEFAULT_CACHE_CAPACITY,
};
pub use writer::{limits_record, prefix_records, PublishStats, TablesWriter};

use crate::maglev::MaglevError;

/// A [`crate::os::files`] error on the region at `path`.
pub(crate) fn file_error(path: &std::path::Path, e: crate::os::files::FileError) -> TablesError {
    match e {
        crate::os::files::FileError::Io(source) => TablesError::Io {
            path: path.to_owned(),
            source,
        },
        crate::os::files::FileError::Untrusted(u) => TablesError::Untrusted(u),
    }
}

/// Where the tables region of an instance lives:
/// `/dev/shm/border-<instance>-tables` ([`crate::os::region_dir`] moves it).
pub fn tables_path(instance: &str) -> PathBuf {
    crate::os::region_dir().join(format!("border-{instance}-tables"))
}

/// Why a tables region could not be created, attached, opened, published
/// to or viewed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TablesError {
    /// A file operation failed.
    #[error("tables region {path}: {source}")]
    Io {
        /// The region's path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not a tables region.
    #[error("tables region {path}: not a border tables region (bad magic)")]
    BadMagic {
        /// The region's path.
        path: PathBuf,
    },
    /// The region was written by a build with another layout.
    #[error("tables region {path}: layout version {found} is not supported (this build speaks {expected})")]
    Version {
        /// The region's path.
        path: PathBuf,
        /// Version in the file.
        found: u32,
        /// [`TABLES_LAYOUT_VERSION`].
        expected: u32,
    },
    /// The region header is inconsistent.
    #[error("tables region {path}: {what}")]
    BadHeader {
        /// The region's path.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// The file at the region's path is not one border made (a symlink,
    /// another user's file, a mode that lets others read the flow hash key).
    #[error("tables region {0}")]
    Untrusted(crate::os::files::Untrusted),
    /// Another writer holds the region.
    #[error("tables region {path}: another publisher holds it (exclusive lock)")]
    Busy {
        /// The region's path.
        path: PathBuf,
    },
    /// The requested arena does not fit the layout.
    #[error("an arena of {requested} bytes is larger than the maximum {max}")]
    TooLarge {
        /// Requested arena bytes.
        requested: u64,
        /// Largest arena.
        max: u64,
    },
    /// Generation 0: nothing has been published yet.
    #[error("no generation has been published yet")]
    NothingPublished,
    /// A published generation failed validation; it must not be used.
    #[error("generation {generation} refused: {problem}")]
    Corrupt {
        /// The generation named by the published word.
        generation: u64,
        /// What is wrong.
        problem: Corruption,
    },
    /// The publisher was handed a generation readers would refuse.
    #[error("invalid generation: {0}")]
    InvalidGeneration(String),
    /// A Maglev ring could not be built.
    #[error("vip {vip}: {source}")]
    Maglev {
        /// VIP name.
        vip: String,
        /// Why.
        source: MaglevError,
    },
    /// The new generation does not fit the arena, even after reclaiming
    /// every block the readers allow. Nothing was published.
    #[error(
        "arena full: a {needed}-byte block does not fit ({free} bytes free, largest free extent {largest_free}; {held_back} bytes of retired blocks held back by readers{})",
        match oldest_reader { Some(g) => format!(", oldest at generation {g}"), None => String::new() }
    )]
    ArenaFull {
        /// Bytes of the block that did not fit.
        needed: u64,
        /// Free bytes.
        free: u64,
        /// Largest free extent.
        largest_free: u64,
        /// Bytes retired but not yet reclaimable.
        held_back: u64,
        /// The smallest quiescent generation passed in, if any.
        oldest_reader: Option<u64>,
    },
    /// The generation counter is exhausted; create a new region.
    #[error("generation numbers exhausted (maximum {max}); re-create the region")]
    GenerationExhausted {
        /// [`MAX_GENERATION`].
        max: u64,
    },
}

/// What makes a published generation unusable. Carries no allocation, so a
/// worker can count refusals on its hot path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Corruption {
    /// The published root offset is misaligned or inside the header.
    RootOffset {
        /// The offset.
        offset: u64,
    },
    /// A block offset is misaligned or inside the header.
    BlockOffset {
        /// The offset.
        offset: u64,
    },
    /// A block extends past the end of the region.
    OutOfBounds {
        /// Block offset.
        offset: u64,
        /// Claimed length.
        len: u64,
        /// Bytes of the region.
        region_len: u64,
    },
    /// A block has the wrong magic.
    Magic {
        /// Block offset.
        offset: u64,
        /// Magic found.
        found: u32,
        /// Magic expected.
        expected: u32,
    },
    /// A block length is too short or not a multiple of 8.
    BlockLen {
        /// Block offset.
        offset: u64,
        /// Claimed length.
        len: u64,
    },
    /// A block's contents do not match its checksum.
    Checksum {
        /// Block offset.
        offset: u64,
        /// Checksum in the header.
        stored: u64,
        /// Checksum of the bytes.
        computed: u64,
    },
    /// The root describes another generation than the published word.
    Generation {
        /// From the word.
        published: u64,
        /// From the root block.
        root: u64,
    },
    /// The root's VIP count is too large or does not match its length.
    VipCount {
        /// Claimed count.
        n_vips: u32,
        /// Root block length.
        len: u64,
    },
    /// A root slot disagrees with the VIP block it points to.
    Slot {
        /// Slot index.
        vip: u32,
        /// The field that differs.
        field: &'static str,
    },
    /// A field holds an undefined or out-of-range value.
    Field {
        /// Block offset.
        offset: u64,
        /// Field name.
        field: &'static str,
        /// The value.
        value: u64,
    },
    /// A name, backend array or ring lies outside its block or is misaligned.
    Section {
        /// Block offset.
        offset: u64,
        /// Which part.
        section: &'static str,
    },
    /// A ring entry is not a backend index.
    RingEntry {
        /// Slot index of the VIP.
        vip: u32,
        /// Ring position.
        index: u32,
        /// The entry.
        entry: u32,
        /// Number of backends.
        backends: u32,
    },
}

impl std::fmt::Display for Corruption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Corruption::RootOffset { offset } => write!(
                f,
                "root offset {offset:#x} is not a 64-aligned arena offset"
            ),
            Corruption::BlockOffset { offset } => write!(
                f,
                "block offset {offset:#x} is not a 64-aligned arena offset"
            ),
            Corruption::OutOfBounds {
                offset,
                len,
                region_len,
            } => write!(
                f,
                "block at {offset:#x} of {len} bytes ends past the region ({region_len} bytes)"
            ),
            Corruption::Magic {
                offset,
                found,
                expected,
            } => write!(
                f,
                "block at {offset:#x}: magic {found:#010x}, expected {expected:#010x}"
            ),
            Corruption::BlockLen { offset, len } => {
                write!(f, "block at {offset:#x}: bad length {len}")
            }
            Corruption::Checksum {
                offset,
                stored,
                computed,
            } => write!(
                f,
                "block at {offset:#x}: checksum mismatch (stored {stored:#018x}, computed {computed:#018x})"
            ),
            Corruption::Generation { published, root } => write!(
                f,
                "root block is for generation {root}, the published word says {published}"
            ),
            Corruption::VipCount { n_vips, len } => write!(
                f,
                "root lists {n_vips} VIPs in {len} bytes (at most {MAX_VIPS}, 64 + 32 each)"
            ),
            Corruption::Slot { vip, field } => {
                write!(f, "root slot {vip}: {field} disagrees with the VIP block")
            }
            Corruption::Field {
                offset,
                field,
                value,
            } => write!(f, "block at {offset:#x}: {field} = {value} is out of range"),
            Corruption::Section { offset, section } => write!(
                f,
                "block at {offset:#x}: {section} lies outside the block or is misaligned"
            ),
            Corruption::RingEntry {
                vip,
                index,
                entry,
                backends,
            } => write!(
                f,
                "vip slot {vip}: ring[{index}] = {entry}, but there are {backends} backends"
            ),
        }
    }
}
