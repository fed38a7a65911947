//! Waking whoever waits for a publication: the publisher wakes, after each
//! Release store of the published word, every process blocked in a futex
//! wait on that word (a shared futex: the region is a file both map), so a
//! dataplane whose workers sleep can wake them as soon as there is a new
//! generation instead of at their next timeout. The futex is the word's
//! low 32 bits, which every publication changes (they hold the low bits of
//! the generation, which grows by one each time, and the root offset).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The futex word of `published`: its low 32 bits.
fn futex_addr(published: &AtomicU64) -> *const u32 {
    let base = published.as_ptr() as *const u32;
    if cfg!(target_endian = "little") {
        base
    } else {
        base.wrapping_add(1)
    }
}

/// Wakes every waiter of `published` (after it was stored).
pub(crate) fn wake_all(published: &AtomicU64) {
    // SAFETY: FUTEX_WAKE only uses the address as a key (the word is
    // mapped and 4-aligned inside the 8-aligned published word); the
    // other arguments are ignored for this operation.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            futex_addr(published),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        )
    };
}

/// Blocks until the word is no longer `seen` (a publication), `timeout`
/// passes, or a signal arrives; returns at once if it already changed.
pub(crate) fn wait_change(published: &AtomicU64, seen: u64, timeout: Duration) {
    if published.load(Ordering::Acquire) != seen {
        return;
    }
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: the address is a mapped, 4-aligned word that outlives the
    // call (the caller borrows the mapping); FUTEX_WAIT only reads it and
    // compares it with `seen`'s low half, and `ts` is a valid relative
    // timeout. A shared (non-private) futex: the publisher is another process.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            futex_addr(published),
            libc::FUTEX_WAIT,
            seen as u32,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        )
    };
}
