//! The connection table's slab storage: a fixed-capacity array that is
//! either private memory or the slab of a flows region (shared memory
//! named by the instance, `crate::flows_region`), so the entries outlive
//! the process and the next border-dp adopts them.
//!
//! It never reallocates: `push` past the capacity is refused, and the
//! memory is reserved up front. In a region, the number of slots ever
//! used (the high-water mark) is written to the region's header on every
//! `push` (an insert that grows the slab, never a packet), so adoption
//! reads only slots that were ever written.

use core::ops::{Deref, DerefMut};
use core::ptr::NonNull;

/// Where a mapped slab records its high-water mark, and what keeps its
/// memory mapped.
pub struct Mapped {
    /// The header word that counts the slots in use (see module docs).
    pub high_water: NonNull<u64>,
    /// Keeps the mapping alive for as long as the slab.
    pub keep: Box<dyn Send>,
}

enum Backing<T> {
    /// Private memory, `Vec::with_capacity`; the Vec stays empty and only
    /// owns the allocation.
    Heap {
        _alloc: Vec<T>,
    },
    Region(Mapped),
}

/// A fixed-capacity array of `T` (see the module docs).
pub struct Slab<T> {
    ptr: NonNull<T>,
    len: usize,
    cap: usize,
    backing: Backing<T>,
}

// SAFETY: the slab owns its memory exclusively (a heap allocation, or a
// mapping no other thread of this process writes); moving it to another
// thread moves that ownership.
unsafe impl<T: Send> Send for Slab<T> {}

impl<T: Copy> Slab<T> {
    /// `cap` slots of private memory, reserved now.
    pub fn heap(cap: usize) -> Slab<T> {
        let mut v: Vec<T> = Vec::with_capacity(cap);
        let ptr = NonNull::new(v.as_mut_ptr()).unwrap_or(NonNull::dangling());
        Slab {
            ptr,
            len: 0,
            cap,
            backing: Backing::Heap { _alloc: v },
        }
    }

    /// `cap` slots at `base`, inside the mapping `mapped` keeps alive, of
    /// which the first `len` hold entries already (adoption passes 0: it
    /// re-inserts what it keeps).
    ///
    /// # Safety
    /// `base` must be aligned for `T`, valid for reads and writes of `cap`
    /// values of `T` for as long as `mapped.keep` lives, and written by
    /// nothing else while the slab lives; `mapped.high_water` likewise for
    /// one `u64`. `len <= cap`, and the first `len` slots must hold valid `T`.
    pub unsafe fn mapped(base: NonNull<T>, cap: usize, len: usize, mapped: Mapped) -> Slab<T> {
        // SAFETY: the caller vouches for the header word.
        unsafe { mapped.high_water.as_ptr().write_volatile(len as u64) };
        Slab {
            ptr: base,
            len,
            cap,
            backing: Backing::Region(mapped),
        }
    }

    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Whether the slots live in a flows region (they outlive the process).
    pub fn is_mapped(&self) -> bool {
        matches!(self.backing, Backing::Region(_))
    }

    /// Appends `v`; `Err(v)` when the slab is at its capacity.
    #[inline]
    pub fn push(&mut self, v: T) -> Result<(), T> {
        if self.len >= self.cap {
            return Err(v);
        }
        // SAFETY: `len < cap`, so the slot is inside the reserved memory.
        unsafe { self.ptr.as_ptr().add(self.len).write(v) };
        self.len += 1;
        if let Backing::Region(m) = &self.backing {
            // SAFETY: `mapped`'s contract: the word is valid while the slab
            // lives. Written after the slot, so a reader never counts a
            // slot that was not written.
            unsafe { m.high_water.as_ptr().write_volatile(self.len as u64) };
        }
        Ok(())
    }
}

impl<T> Deref for Slab<T> {
    type Target = [T];

    #[inline(always)]
    fn deref(&self) -> &[T] {
        // SAFETY: the first `len` slots were written by `push` (or vouched
        // for by `mapped`'s caller) inside memory the slab owns.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> DerefMut for Slab<T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as `deref`, and `&mut self` makes the access exclusive.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}
