//! A global allocator that counts heap allocations per thread, for the
//! pipeline benchmark's zero-allocation check (a case runs on one thread;
//! other threads, e.g. tests running beside it, must not count).
//!
//! Installed by `border-perf`'s `main.rs`, so it covers every subcommand:
//! the others pay one thread-local increment per allocation (no shared
//! cache line, no lock), which none of their measurements can see. A
//! binary that does not install it makes [`installed`] false and the
//! pipeline benchmark refuses to run rather than report zero allocations.

use std::alloc::{GlobalAlloc, Layout, System};

/// Counts heap allocations per thread (for the zero-allocation check: a
/// case runs on one thread, and other threads, e.g. tests running beside
/// it, must not count).
pub struct CountingAlloc;

thread_local! {
    // `const`, no destructor: using it never allocates nor registers anything.
    static ALLOCATIONS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn count_allocation() {
    // A thread being torn down has no counter left: nothing to count there.
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

// SAFETY: every method forwards to the system allocator with the caller's
// arguments unchanged, so the GlobalAlloc contract is System's; the counter
// is a thread-local cell with no effect on the memory handed out.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_allocation();
        // SAFETY: forwarded unchanged; the caller upholds alloc's contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_allocation();
        // SAFETY: forwarded unchanged; the caller upholds alloc_zeroed's contract.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from System through this allocator with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_allocation();
        // SAFETY: `ptr` came from System with `layout`; the caller upholds realloc's contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Allocations this thread made so far.
pub fn allocations() -> u64 {
    ALLOCATIONS.with(std::cell::Cell::get)
}

/// Whether [`CountingAlloc`] is the global allocator: one allocation moves
/// the count.
pub fn installed() -> bool {
    let before = allocations();
    drop(std::hint::black_box(Box::new(0u64)));
    allocations() != before
}
