//! The tables region as the dataplane finds it in shared memory, after any
//! corruption: validation refuses it with an error or returns a view whose
//! every accessor and pick works. Half of the inputs get their block
//! checksums recomputed after mutation, so validation must look past the
//! checksums at the fields themselves (the seeds in seeds/tables_region are
//! real regions written by `TablesWriter`).
#![no_main]

use conf::tables::{block_checksum, view_bytes, HEADER_LEN, ROOT_BITS, UNIT};
use libfuzzer_sys::fuzz_target;

fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
}

fn put_u64(b: &mut [u8], o: usize, v: u64) {
    if let Some(s) = b.get_mut(o..o + 8) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}

/// Recomputes the checksum of the block at `off` over its stated length
/// (clamped to the input) and returns it.
fn reseal(b: &mut [u8], off: usize) -> Option<u64> {
    let room = b.len().checked_sub(off).filter(|&r| r >= 8)?;
    let len = (u64_at(b, off + 16)? as usize).clamp(8, room);
    let sum = block_checksum(&b[off..off + len]);
    put_u64(b, off, sum);
    Some(sum)
}

/// Reseals every VIP block the root points at, their slots in the root,
/// then the root itself.
fn reseal_all(b: &mut [u8]) -> Option<()> {
    let root = ((u64_at(b, 32)? & ((1 << ROOT_BITS) - 1)) * UNIT) as usize;
    let vips = u32::from_le_bytes(b.get(root + 40..root + 44)?.try_into().ok()?) as usize;
    for i in 0..vips.min(64) {
        let slot = root + 64 + 32 * i;
        let off = u64_at(b, slot)? as usize;
        if off < HEADER_LEN as usize {
            continue;
        }
        if let Some(sum) = reseal(b, off) {
            put_u64(b, slot + 16, sum);
        }
    }
    reseal(b, root).map(|_| ())
}

fuzz_target!(|data: &[u8]| {
    let mut bytes = data.to_vec();
    if data.last().is_some_and(|b| b & 1 == 1) {
        let _ = reseal_all(&mut bytes);
    }
    let Ok(view) = view_bytes(&bytes) else {
        return;
    };
    let _ = (view.generation(), view.flow_hash_key(), view.validation());
    let hasher = view.flow_hasher();
    for (i, v) in view.vips().iter().enumerate() {
        let _ = (v.id(), v.name(), v.addr(), v.port(), v.proto(), v.mode());
        let _ = (v.flags(), v.fail_open(), v.pp_max_len(), v.block_id());
        for b in v.backends() {
            let _ = (b.ip(), b.backend_state(), b.to_entry());
        }
        for h in [
            0u64,
            1,
            u64::MAX,
            hasher.hash_bytes(&(i as u64).to_le_bytes()),
        ] {
            if let Some((idx, b)) = v.pick(h) {
                assert!((idx as usize) < v.backends().len());
                let _ = b.ip();
            }
        }
        assert_eq!(view.ring(i).map(<[u32]>::len), Some(v.ring().len()));
    }
    let _ = view.to_generation();
});
