//! The publisher's allocator over the arena: best-fit over free extents,
//! coalescing on free. Lives only in the publisher's memory; after a
//! restart it is rebuilt from the live generation (see
//! [`super::TablesWriter::attach`]).

use std::collections::{BTreeMap, BTreeSet};

/// Free extents of `[start, end)`; every offset and length is a multiple of
/// the caller's unit.
#[derive(Debug, Clone)]
pub(crate) struct Arena {
    /// offset -> length.
    by_off: BTreeMap<u64, u64>,
    /// (length, offset), for best fit.
    by_len: BTreeSet<(u64, u64)>,
    free: u64,
}

impl Arena {
    /// Everything in `[start, end)` free.
    pub(crate) fn new(start: u64, end: u64) -> Self {
        let mut a = Arena {
            by_off: BTreeMap::new(),
            by_len: BTreeSet::new(),
            free: 0,
        };
        a.free(start, end.saturating_sub(start));
        a
    }

    /// Nothing free.
    pub(crate) fn empty() -> Self {
        Arena {
            by_off: BTreeMap::new(),
            by_len: BTreeSet::new(),
            free: 0,
        }
    }

    /// Takes `len` bytes (the smallest extent that fits, lowest offset among
    /// equals); `None` if no extent is large enough.
    pub(crate) fn alloc(&mut self, len: u64) -> Option<u64> {
        if len == 0 {
            return None;
        }
        let &(flen, off) = self.by_len.range((len, 0)..).next()?;
        self.by_len.remove(&(flen, off));
        self.by_off.remove(&off);
        if flen > len {
            self.insert(off + len, flen - len);
        }
        self.free -= len;
        Some(off)
    }

    /// Returns `[off, off + len)`, merging with free neighbours. The range
    /// must not overlap a free extent (checked in debug builds).
    pub(crate) fn free(&mut self, mut off: u64, mut len: u64) {
        if len == 0 {
            return;
        }
        self.free += len;
        if let Some((&poff, &plen)) = self.by_off.range(..=off).next_back() {
            debug_assert!(poff + plen <= off, "double free at {off}");
            if poff + plen == off {
                self.remove(poff, plen);
                off = poff;
                len += plen;
            }
        }
        if let Some((&noff, &nlen)) = self.by_off.range(off..).next() {
            debug_assert!(off + len <= noff, "double free at {off}");
            if off + len == noff {
                self.remove(noff, nlen);
                len += nlen;
            }
        }
        self.insert(off, len);
    }

    #[cfg(test)]
    /// Marks `[off, off + len)` as used, if it lies inside one free extent.
    /// Returns false (and changes nothing) otherwise.
    pub(crate) fn reserve(&mut self, off: u64, len: u64) -> bool {
        let Some((&foff, &flen)) = self.by_off.range(..=off).next_back() else {
            return false;
        };
        if off + len > foff + flen {
            return false;
        }
        self.remove(foff, flen);
        if off > foff {
            self.insert(foff, off - foff);
        }
        if foff + flen > off + len {
            self.insert(off + len, foff + flen - off - len);
        }
        self.free -= len;
        true
    }

    /// Free bytes.
    pub(crate) fn free_bytes(&self) -> u64 {
        self.free
    }

    /// The largest free extent.
    pub(crate) fn largest(&self) -> u64 {
        self.by_len.last().map_or(0, |&(l, _)| l)
    }

    #[cfg(test)]
    /// Free extents as `(offset, len)` in offset order.
    pub(crate) fn extents(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.by_off.iter().map(|(&o, &l)| (o, l))
    }

    fn insert(&mut self, off: u64, len: u64) {
        self.by_off.insert(off, len);
        self.by_len.insert((len, off));
    }

    fn remove(&mut self, off: u64, len: u64) {
        self.by_off.remove(&off);
        self.by_len.remove(&(len, off));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_fit_split_and_coalesce() {
        let mut a = Arena::new(0, 1000);
        let x = a.alloc(100).unwrap();
        let y = a.alloc(200).unwrap();
        let z = a.alloc(300).unwrap();
        assert_eq!((x, y, z), (0, 100, 300));
        assert_eq!(a.free_bytes(), 400);
        a.free(y, 200);
        // Best fit: the 200-byte hole, not the 400-byte tail.
        assert_eq!(a.alloc(150), Some(100));
        a.free(100, 150);
        a.free(x, 100);
        a.free(z, 300);
        assert_eq!(a.extents().collect::<Vec<_>>(), vec![(0, 1000)]);
        assert_eq!(a.largest(), 1000);
        assert_eq!(a.alloc(1001), None);
        assert!(a.reserve(64, 64));
        assert!(!a.reserve(64, 64));
        assert_eq!(a.extents().collect::<Vec<_>>(), vec![(0, 64), (128, 872)]);
        assert_eq!(a.free_bytes(), 936);
    }
}
