//! Byte layout of the tables region: constants, the `repr(C)` records that
//! readers view in place, the published-word packing and the block checksum.
//!
//! Every multi-byte field is little endian (the native order of every target
//! border runs on; a big-endian build fails to compile, see below), every
//! record is naturally aligned, and nothing is a pointer: blocks refer to
//! each other by byte offset from the start of the region.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

// The records below are read in place with native integer loads.
const _: () = assert!(
    cfg!(target_endian = "little"),
    "the tables region layout is little endian"
);

/// Bumped whenever the byte layout changes. Readers and writers refuse a
/// region of another version.
pub const TABLES_LAYOUT_VERSION: u32 = 4;

/// First 8 bytes of the region.
pub const REGION_MAGIC: [u8; 8] = *b"BRDTABLE";

/// Bytes of the region header; the arena starts here (page aligned).
pub const HEADER_LEN: u64 = 4096;

/// Allocation unit and block alignment.
pub const UNIT: u64 = 64;

/// Bits of the published word that hold the root offset (in [`UNIT`]s).
pub const ROOT_BITS: u32 = 28;

/// Largest region: the root offset must fit [`ROOT_BITS`] units (16 GiB).
pub const MAX_REGION_LEN: u64 = UNIT << ROOT_BITS;

/// Largest generation number: the rest of the published word (2^36 − 1;
/// 21 years at 100 publications per second).
pub const MAX_GENERATION: u64 = (1 << (64 - ROOT_BITS)) - 1;

/// Magic of a root block ("BRRT").
pub const ROOT_MAGIC: u32 = u32::from_le_bytes(*b"BRRT");

/// Magic of a VIP block ("BRVP").
pub const VIP_MAGIC: u32 = u32::from_le_bytes(*b"BRVP");

/// Most VIPs in one generation.
pub const MAX_VIPS: u32 = 1 << 16;

/// Most backends of one VIP.
pub const MAX_BACKENDS: u32 = 1 << 16;

/// Longest ring (the config allows M up to 2^24).
pub const MAX_RING: u32 = 1 << 24;

/// Most `allow` and `deny` prefixes of one VIP.
pub const MAX_PREFIXES: u32 = 1 << 16;

/// Longest `persistence_timeout` in seconds (the config's bound).
pub const MAX_PERSISTENCE_S: u32 = crate::config::MAX_TIMEOUT_SECS;

/// Longest VIP name in bytes.
pub const MAX_NAME_LEN: u32 = 255;

/// Header field offsets.
pub(crate) const H_MAGIC: usize = 0;
pub(crate) const H_VERSION: usize = 8;
pub(crate) const H_HEADER_LEN: usize = 12;
pub(crate) const H_REGION_LEN: usize = 16;
pub(crate) const H_REGION_ID: usize = 24;
pub(crate) const H_PUBLISHED: usize = 32;
pub(crate) const H_HIGH_WATER: usize = 40;
pub(crate) const H_WRITER_PID: usize = 48;
pub(crate) const H_CREATED_MS: usize = 56;

/// Bytes of [`BlockHeader`].
pub const BLOCK_HEADER_LEN: u64 = 32;
/// Bytes of a root block before its slots.
pub const ROOT_FIXED_END: u64 = 64;
/// Bytes of a VIP block before its name.
pub const VIP_FIXED_END: u64 = 104;

/// First 32 bytes of every block.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct BlockHeader {
    /// [`xxh64`] (seed 0) of the block's bytes `[8, len)`.
    pub checksum: u64,
    /// [`ROOT_MAGIC`] or [`VIP_MAGIC`].
    pub magic: u32,
    /// 0.
    pub reserved: u32,
    /// Bytes of the block, a multiple of 8.
    pub len: u64,
    /// Generation that first published the block (informational).
    pub born: u64,
}

/// A root block after its header: one per generation.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct RootFixed {
    /// The generation this root describes (matches the published word).
    pub generation: u64,
    /// Number of [`VipSlot`]s that follow.
    pub n_vips: u32,
    /// 0.
    pub reserved: u32,
    /// SipHash key of the flow hash ([`crate::flowhash`]).
    pub flow_hash_key: [u8; 16],
}

/// One VIP in a root block: where its block is and what its checksum is.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct VipSlot {
    /// Byte offset of the VIP block from the start of the region.
    pub offset: u64,
    /// Bytes of the VIP block (equals its header's `len`).
    pub len: u64,
    /// The VIP block's checksum (equals its header's `checksum`).
    pub checksum: u64,
    /// The VIP's id (equals its record's `id`).
    pub vip_id: u32,
    /// 0.
    pub reserved: u32,
}

/// A VIP block after its header. Offsets are from the start of the block.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct VipRecord {
    /// Stable id: the VIP's position in the config.
    pub id: u32,
    /// [`super::VipFlags`] bits.
    pub flags: u32,
    /// IPv4 in bytes 0..4 (rest zero) or IPv6.
    pub addr: [u8; 16],
    /// VIP port.
    pub port: u16,
    /// Upper bound of the PPv2 header in bytes.
    pub pp_max_len: u16,
    /// 4 or 6.
    pub family: u8,
    /// IP protocol number: 6 (TCP) or 17 (UDP).
    pub proto: u8,
    /// 0 = fullnat, 1 = dnat, 2 = dsr with encap none, 3 = dsr/ipip,
    /// 4 = dsr/gue.
    pub mode: u8,
    /// 0.
    pub reserved0: u8,
    /// Number of [`BackendRecord`]s.
    pub n_backends: u32,
    /// Number of ring entries (the Maglev M; 0 for a VIP without backends).
    pub ring_len: u32,
    /// Offset of the backend array (multiple of 8).
    pub backends_off: u32,
    /// Offset of the ring (multiple of 8).
    pub ring_off: u32,
    /// Offset of the UTF-8 name.
    pub name_off: u32,
    /// Bytes of the name.
    pub name_len: u32,
    /// Offset of the [`LimitsRecord`] (multiple of 8), followed by
    /// `n_prefixes` [`PrefixRecord`]s.
    pub limits_off: u32,
    /// Number of [`PrefixRecord`]s (`allow` and `deny` together).
    pub n_prefixes: u32,
    /// `persistence_timeout` in seconds (0: off; at most
    /// [`MAX_PERSISTENCE_S`]).
    pub persistence_s: u32,
    /// 0.
    pub reserved1: u32,
}

/// A VIP's `[vip.limits]` (32 bytes; 0 = no limit).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct LimitsRecord {
    /// Open connections at most.
    pub max_connections: u32,
    /// New flows per second (per worker's bucket) and the bucket's depth.
    pub new_per_second: u32,
    pub new_burst: u32,
    /// New flows per second per source prefix and the bucket's depth.
    pub source_per_second: u32,
    pub source_burst: u32,
    /// Source prefixes tracked per worker (a power of two).
    pub source_table: u32,
    /// Source prefix lengths of a bucket.
    pub source_prefix_v4: u8,
    pub source_prefix_v6: u8,
    /// 0.
    pub reserved: [u8; 6],
}

/// One entry of a VIP's `allow` or `deny` list (24 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct PrefixRecord {
    /// The network address: IPv4 in bytes 0..4 (rest zero) or IPv6.
    pub addr: [u8; 16],
    /// Prefix length (1..=32 or 1..=128).
    pub len: u8,
    /// 4 or 6.
    pub family: u8,
    /// 0 = allow, 1 = deny.
    pub deny: u8,
    /// 0.
    pub reserved: [u8; 5],
}

/// One backend of a VIP, as workers see it (32 bytes, zero-copy).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct BackendRecord {
    /// IPv4 in bytes 0..4 (rest zero) or IPv6.
    pub addr: [u8; 16],
    /// Stable id per (VIP, address, port): keys counters across generations.
    pub id: u32,
    /// Effective weight (after health/operator overrides).
    pub weight: u32,
    /// Backend port.
    pub port: u16,
    /// 4 or 6.
    pub family: u8,
    /// [`super::BackendState`] as u8: 0 up, 1 down, 2 draining, 3 killed.
    pub state: u8,
    /// Open connections at most (0: no limit).
    pub max_connections: u32,
}

const _: () = {
    assert!(core::mem::size_of::<BlockHeader>() == BLOCK_HEADER_LEN as usize);
    assert!(core::mem::size_of::<RootFixed>() == 32);
    assert!(core::mem::size_of::<VipSlot>() == 32);
    assert!(core::mem::size_of::<VipRecord>() == 72);
    assert!(core::mem::size_of::<BackendRecord>() == 32);
    assert!(core::mem::size_of::<LimitsRecord>() == 32);
    assert!(core::mem::size_of::<PrefixRecord>() == 24);
    assert!(BLOCK_HEADER_LEN + 32 == ROOT_FIXED_END);
    assert!(BLOCK_HEADER_LEN + 72 == VIP_FIXED_END);
    assert!(HEADER_LEN.is_multiple_of(UNIT));
};

/// Packs a generation and a root offset into the published word:
/// `generation << ROOT_BITS | root / UNIT`. The caller guarantees
/// `generation <= MAX_GENERATION`, `root % UNIT == 0`, `root < MAX_REGION_LEN`.
#[inline]
pub(crate) const fn pack(generation: u64, root: u64) -> u64 {
    (generation << ROOT_BITS) | (root / UNIT)
}

/// Inverse of [`pack`]: `(generation, root offset)`.
#[inline]
pub(crate) const fn unpack(word: u64) -> (u64, u64) {
    (word >> ROOT_BITS, (word & ((1 << ROOT_BITS) - 1)) * UNIT)
}

/// Rounds up to a multiple of `to` (a power of two).
#[inline]
pub(crate) const fn round_up(n: u64, to: u64) -> u64 {
    (n + to - 1) & !(to - 1)
}

const P1: u64 = 0x9E37_79B1_85EB_CA87;
const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const P3: u64 = 0x1656_67B1_9E37_79F9;
const P4: u64 = 0x85EB_CA77_C2B2_AE63;
const P5: u64 = 0x27D4_EB2F_1656_67C5;

#[inline(always)]
fn xround(acc: u64, input: u64) -> u64 {
    acc.wrapping_add(input.wrapping_mul(P2))
        .rotate_left(31)
        .wrapping_mul(P1)
}

#[inline(always)]
fn xmerge(acc: u64, val: u64) -> u64 {
    (acc ^ xround(0, val)).wrapping_mul(P1).wrapping_add(P4)
}

#[inline(always)]
fn le64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

/// XXH64 (Yann Collet's xxHash, 64-bit variant), bit-exact with the
/// reference implementation: the checksum of every block. Four independent
/// multiply lanes over 32-byte stripes; several GB/s on one core.
pub fn xxh64(input: &[u8], seed: u64) -> u64 {
    let len = input.len() as u64;
    let mut h;
    let stripes = input.chunks_exact(32);
    let mut rest = stripes.remainder();
    if input.len() >= 32 {
        let mut v1 = seed.wrapping_add(P1).wrapping_add(P2);
        let mut v2 = seed.wrapping_add(P2);
        let mut v3 = seed;
        let mut v4 = seed.wrapping_sub(P1);
        for s in stripes {
            v1 = xround(v1, le64(&s[0..8]));
            v2 = xround(v2, le64(&s[8..16]));
            v3 = xround(v3, le64(&s[16..24]));
            v4 = xround(v4, le64(&s[24..32]));
        }
        h = v1
            .rotate_left(1)
            .wrapping_add(v2.rotate_left(7))
            .wrapping_add(v3.rotate_left(12))
            .wrapping_add(v4.rotate_left(18));
        h = xmerge(h, v1);
        h = xmerge(h, v2);
        h = xmerge(h, v3);
        h = xmerge(h, v4);
    } else {
        h = seed.wrapping_add(P5);
    }
    h = h.wrapping_add(len);
    while rest.len() >= 8 {
        h ^= xround(0, le64(rest));
        h = h.rotate_left(27).wrapping_mul(P1).wrapping_add(P4);
        rest = &rest[8..];
    }
    if rest.len() >= 4 {
        let w = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
        h ^= u64::from(w).wrapping_mul(P1);
        h = h.rotate_left(23).wrapping_mul(P2).wrapping_add(P3);
        rest = &rest[4..];
    }
    for &b in rest {
        h ^= u64::from(b).wrapping_mul(P5);
        h = h.rotate_left(11).wrapping_mul(P1);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(P2);
    h ^= h >> 29;
    h = h.wrapping_mul(P3);
    h ^= h >> 32;
    h
}

/// The checksum stored in a block's header: [`xxh64`] of `block[8..]`.
#[inline]
pub fn block_checksum(block: &[u8]) -> u64 {
    xxh64(block.get(8..).unwrap_or(&[]), 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// xxHash's own sanity buffer (xxhsum's `fillTestBuffer`).
    fn sanity_buffer(len: usize) -> Vec<u8> {
        let mut gen: u64 = 2_654_435_761;
        (0..len)
            .map(|_| {
                let b = (gen >> 56) as u8;
                gen = gen.wrapping_mul(11_400_714_785_074_694_797);
                b
            })
            .collect()
    }

    #[test]
    fn xxh64_reference_vectors() {
        const PRIME32: u64 = 2_654_435_761;
        let buf = sanity_buffer(222);
        for (len, seed, want) in [
            (0, 0, 0xEF46_DB37_51D8_E999u64),
            (0, PRIME32, 0xAC75_FDA2_929B_17EF),
            (1, 0, 0xE934_A84A_DB05_2768),
            (1, PRIME32, 0x5014_6076_43A9_B4C3),
            (14, 0, 0x8282_DCC4_994E_35C8),
            (14, PRIME32, 0xC3BD_6BF6_3DEB_6DF0),
            (222, 0, 0xB641_AE8C_B691_C174),
            (222, PRIME32, 0x20CB_8AB7_AE10_C14A),
        ] {
            assert_eq!(xxh64(&buf[..len], seed), want, "len {len} seed {seed}");
        }
        assert_eq!(xxh64(b"abc", 0), 0x44BC_2CF5_AD77_0999);
    }

    /// Low 32 bits of XXH64 as zstd stores them as a frame's content
    /// checksum (`zstd --check`), for input bytes `(7 i + 3) mod 256`.
    #[test]
    fn xxh64_matches_zstd_frame_checksums() {
        for (len, low32) in [
            (0usize, 0x51d8_e999u32),
            (3, 0x52e5_64c9),
            (8, 0xc6f9_0092),
            (31, 0xcc4a_6119),
            (32, 0xf790_fd97),
            (33, 0xba58_8784),
            (100, 0x170f_e531),
            (1000, 0x33f1_a3fb),
            (4099, 0xde85_2967),
        ] {
            let input: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            assert_eq!(xxh64(&input, 0) as u32, low32, "len {len}");
        }
    }

    #[test]
    fn pack_round_trip() {
        for (g, r) in [
            (1, HEADER_LEN),
            (MAX_GENERATION, MAX_REGION_LEN - UNIT),
            (12345, 1 << 30),
        ] {
            assert_eq!(unpack(pack(g, r)), (g, r));
        }
        assert_eq!(unpack(0), (0, 0));
    }
}
