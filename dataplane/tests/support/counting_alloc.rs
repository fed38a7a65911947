//! A counting global allocator for the no-allocation tests. A test binary
//! that checks allocations installs it itself, where a reader sees it:
//!
//! ```ignore
//! #[global_allocator]
//! static GLOBAL: support::counting_alloc::Counting = support::counting_alloc::Counting;
//! ```
//!
//! and [`count`] then counts its own thread's allocations and frees around
//! a closure (and panics if the allocator is not installed, rather than
//! reporting zero).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Forwards to [`System`], counting on the threads inside [`count`].
pub struct Counting;

// Per thread, so tests running in parallel do not see each other's counts.
thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
    static FREES: Cell<usize> = const { Cell::new(0) };
}

fn note(counter: &'static std::thread::LocalKey<Cell<usize>>) {
    if COUNTING.try_with(Cell::get).unwrap_or(false) {
        let _ = counter.try_with(|c| c.set(c.get() + 1));
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged, so `System`'s guarantees are ours; the counting touches only a
// const-initialised thread-local `Cell`s, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(&ALLOCS);
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(&ALLOCS);
        // SAFETY: forwarded unchanged; the caller upholds `alloc_zeroed`'s contract.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(&ALLOCS);
        // SAFETY: forwarded unchanged; `ptr` came from this allocator, i.e. from `System`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(&FREES);
        // SAFETY: forwarded unchanged; `ptr` came from this allocator, i.e. from `System`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Runs `f` with this thread's allocations counted; returns (allocs, frees).
/// Panics if [`Counting`] is not the global allocator (every count would
/// be zero).
pub fn count<R>(f: impl FnOnce() -> R) -> (R, usize, usize) {
    COUNTING.with(|c| c.set(true));
    let probe = ALLOCS.with(Cell::get);
    drop(std::hint::black_box(Box::new(0u64)));
    assert_ne!(
        ALLOCS.with(Cell::get),
        probe,
        "the counting allocator is not this binary's #[global_allocator]"
    );
    let (a0, f0) = (ALLOCS.with(Cell::get), FREES.with(Cell::get));
    let r = f();
    COUNTING.with(|c| c.set(false));
    let (a1, f1) = (ALLOCS.with(Cell::get), FREES.with(Cell::get));
    (r, a1 - a0, f1 - f0)
}
