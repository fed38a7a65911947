//! Owned packet buffers and fixed-size bursts of them. Nothing here
//! allocates or locks: these are the per-packet calls.

use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;

use crate::sys;

/// Why an in-place length change was refused; the mbuf is unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MbufError {
    /// `prepend` wanted more than the headroom.
    NoHeadroom,
    /// `append` wanted more than the last segment's tailroom.
    NoTailroom,
    /// `adj`/`trim` wanted to remove more than the segment holds.
    TooShort,
}

impl fmt::Display for MbufError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MbufError::NoHeadroom => "not enough headroom in mbuf",
            MbufError::NoTailroom => "not enough tailroom in mbuf",
            MbufError::TooShort => "mbuf segment shorter than requested",
        })
    }
}

impl std::error::Error for MbufError {}

/// One owned packet buffer (`rte_mbuf`, refcnt 1). Dropping it frees it back
/// to its pool.
///
/// `data`/`data_mut` cover the first segment only; check `nb_segs()` (or
/// `is_contiguous()`) for multi-segment packets (`pkt_len() > data_len()`).
#[repr(transparent)]
pub struct Mbuf {
    ptr: NonNull<sys::rte_mbuf>,
    // Mbuf owns the buffer; PhantomData makes drop-check see that.
    _owns: PhantomData<sys::rte_mbuf>,
}

// SAFETY: an Mbuf is the sole owner of its buffer; any thread may read,
// write and free it (pool puts are thread-safe with ring_mp_mc ops).
unsafe impl Send for Mbuf {}
// SAFETY: &Mbuf only permits reads.
unsafe impl Sync for Mbuf {}

impl fmt::Debug for Mbuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mbuf")
            .field("port", &self.port())
            .field("pkt_len", &self.pkt_len())
            .field("data_len", &self.data_len())
            .field("nb_segs", &self.nb_segs())
            .finish()
    }
}

impl Mbuf {
    /// Takes ownership of a raw mbuf.
    ///
    /// # Safety
    /// `ptr` must be a valid, non-NULL mbuf that nobody else owns or will
    /// free, with refcnt 1 and a direct (not attached/indirect) buffer, and
    /// its pool must outlive it.
    #[inline]
    pub unsafe fn from_raw(ptr: *mut sys::rte_mbuf) -> Mbuf {
        debug_assert!(!ptr.is_null());
        // SAFETY: the caller promises ptr is non-NULL.
        unsafe { Self::from_non_null(NonNull::new_unchecked(ptr)) }
    }

    /// # Safety
    /// As for [`Mbuf::from_raw`].
    #[inline]
    pub(crate) unsafe fn from_non_null(ptr: NonNull<sys::rte_mbuf>) -> Mbuf {
        Mbuf {
            ptr,
            _owns: PhantomData,
        }
    }

    /// Gives up ownership without freeing; pair with `from_raw` or free it
    /// through DPDK.
    #[inline]
    #[must_use = "the mbuf leaks unless the pointer is freed or re-wrapped"]
    pub fn into_raw(self) -> *mut sys::rte_mbuf {
        let p = self.ptr.as_ptr();
        std::mem::forget(self);
        p
    }

    /// The raw mbuf, still owned by `self`.
    #[inline]
    pub fn as_ptr(&self) -> *mut sys::rte_mbuf {
        self.ptr.as_ptr()
    }

    #[inline]
    fn raw(&self) -> &sys::rte_mbuf {
        // SAFETY: self owns a valid mbuf for its whole lifetime; the shared
        // borrow of self keeps any &mut access away.
        unsafe { self.ptr.as_ref() }
    }

    /// Bytes in the first segment.
    #[inline]
    pub fn data_len(&self) -> u16 {
        self.raw().data_len
    }

    /// Bytes in the whole packet (all segments).
    #[inline]
    pub fn pkt_len(&self) -> u32 {
        self.raw().pkt_len
    }

    /// Number of segments (1 for a contiguous packet).
    #[inline]
    pub fn nb_segs(&self) -> u16 {
        self.raw().nb_segs
    }

    /// Whether the whole packet is in `data()`.
    #[inline]
    pub fn is_contiguous(&self) -> bool {
        self.nb_segs() == 1
    }

    /// The port it arrived on (or will be sent from, if set).
    #[inline]
    pub fn port(&self) -> u16 {
        self.raw().port
    }

    /// Sets the port field (informational; tx_burst picks the port).
    #[inline]
    pub fn set_port(&mut self, port: u16) {
        // SAFETY: &mut self is the exclusive owner of the mbuf.
        unsafe { (*self.ptr.as_ptr()).port = port };
    }

    /// The NIC's RSS hash, if the PMD provided one.
    #[inline]
    pub fn rss_hash(&self) -> Option<u32> {
        let m = self.raw();
        if m.ol_flags & u64::from(sys::RTE_MBUF_F_RX_RSS_HASH) != 0 {
            // SAFETY: the RSS flag says the `rss` member is the valid one;
            // every bit pattern is a valid u32 anyway.
            Some(unsafe { m.__bindgen_anon_2.hash.rss })
        } else {
            None
        }
    }

    /// What the PMD's Rx checksum offload found of the TCP/UDP checksum:
    /// `Some(true)` good (or valid without a computed value, `L4_CKSUM_NONE`),
    /// `Some(false)` bad, `None` not checked.
    #[inline]
    pub fn rx_l4_checksum_ok(&self) -> Option<bool> {
        let f = self.raw().ol_flags & u64::from(sys::RTE_MBUF_F_RX_L4_CKSUM_MASK);
        match f {
            f if f == u64::from(sys::RTE_MBUF_F_RX_L4_CKSUM_BAD) => Some(false),
            f if f == u64::from(sys::RTE_MBUF_F_RX_L4_CKSUM_GOOD)
                || f == u64::from(sys::RTE_MBUF_F_RX_L4_CKSUM_NONE) =>
            {
                Some(true)
            }
            _ => None,
        }
    }

    /// Offload flags (`RTE_MBUF_F_*`).
    #[inline]
    pub fn ol_flags(&self) -> u64 {
        self.raw().ol_flags
    }

    /// Free bytes in front of the data.
    #[inline]
    pub fn headroom(&self) -> u16 {
        self.raw().data_off
    }

    /// Free bytes after the data of the first segment.
    #[inline]
    pub fn tailroom(&self) -> u16 {
        let m = self.raw();
        m.buf_len
            .saturating_sub(m.data_off)
            .saturating_sub(m.data_len)
    }

    #[inline]
    fn data_ptr(&self) -> *mut u8 {
        let m = self.raw();
        // SAFETY: data_off < buf_len, so the result stays inside the buffer.
        unsafe { m.buf_addr.cast::<u8>().add(usize::from(m.data_off)) }
    }

    /// The first segment's bytes.
    #[inline]
    pub fn data(&self) -> &[u8] {
        // SAFETY: data_ptr..+data_len lies inside the mbuf's buffer, which we
        // own (refcnt 1, direct) and which lives as long as the borrow.
        unsafe { std::slice::from_raw_parts(self.data_ptr(), usize::from(self.data_len())) }
    }

    /// The first segment's bytes, writable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for data(); &mut self makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.data_ptr(), usize::from(self.data_len())) }
    }

    /// The first segment's bytes followed by its tailroom, writable: room to
    /// grow a single-segment packet in place before [`Mbuf::append`] makes
    /// the extra bytes part of it.
    #[inline]
    pub fn data_and_tailroom_mut(&mut self) -> &mut [u8] {
        let len = usize::from(self.data_len()) + usize::from(self.tailroom());
        // SAFETY: data_ptr + data_len + tailroom is the end of the buffer
        // (tailroom = buf_len - data_off - data_len of the first segment for
        // single-segment mbufs, which callers check with is_contiguous), all
        // inside the buffer we own exclusively for the borrow.
        unsafe { std::slice::from_raw_parts_mut(self.data_ptr(), len) }
    }

    /// Makes a chained packet contiguous: copies the later segments into
    /// the first one's tailroom and frees them. Nothing allocates. Returns
    /// false, changing nothing, when the first buffer cannot hold the packet.
    #[inline]
    pub fn linearize(&mut self) -> bool {
        if self.is_contiguous() {
            return true;
        }
        // SAFETY: we own the whole chain exclusively (refcnt 1, direct
        // segments); linearize checks the tailroom first and leaves the
        // chain untouched when it is short.
        unsafe { sys::border_shim_pktmbuf_linearize(self.ptr.as_ptr()) == 0 }
    }

    /// Grows the packet by `n` bytes at the front (into the headroom) and
    /// returns the new bytes (uninitialised contents: whatever was there).
    #[inline]
    pub fn prepend(&mut self, n: usize) -> Result<&mut [u8], MbufError> {
        let len = u16::try_from(n).map_err(|_| MbufError::NoHeadroom)?;
        // SAFETY: we own the mbuf exclusively; prepend checks the headroom
        // and returns NULL without changes if it is short.
        let p = unsafe { sys::border_shim_pktmbuf_prepend(self.ptr.as_ptr(), len) };
        if p.is_null() {
            return Err(MbufError::NoHeadroom);
        }
        // SAFETY: p..p+n is now the start of the first segment's data, inside
        // the buffer we own; the borrow of self bounds the slice's life.
        Ok(unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), n) })
    }

    /// Grows the packet by `n` bytes at the end (last segment's tailroom)
    /// and returns the new bytes.
    #[inline]
    pub fn append(&mut self, n: usize) -> Result<&mut [u8], MbufError> {
        let len = u16::try_from(n).map_err(|_| MbufError::NoTailroom)?;
        // SAFETY: we own the mbuf exclusively; append checks the tailroom
        // and returns NULL without changes if it is short.
        let p = unsafe { sys::border_shim_pktmbuf_append(self.ptr.as_ptr(), len) };
        if p.is_null() {
            return Err(MbufError::NoTailroom);
        }
        // SAFETY: p..p+n is the new tail inside the last segment's buffer,
        // which we own; the borrow of self bounds the slice's life.
        Ok(unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), n) })
    }

    /// Removes `n` bytes from the front of the first segment.
    #[inline]
    pub fn adj(&mut self, n: usize) -> Result<(), MbufError> {
        let len = u16::try_from(n).map_err(|_| MbufError::TooShort)?;
        // SAFETY: we own the mbuf exclusively; adj checks len against
        // data_len and returns NULL without changes if it is too long.
        let p = unsafe { sys::border_shim_pktmbuf_adj(self.ptr.as_ptr(), len) };
        if p.is_null() {
            Err(MbufError::TooShort)
        } else {
            Ok(())
        }
    }

    /// Removes `n` bytes from the end of the last segment.
    #[inline]
    pub fn trim(&mut self, n: usize) -> Result<(), MbufError> {
        let len = u16::try_from(n).map_err(|_| MbufError::TooShort)?;
        // SAFETY: we own the mbuf exclusively; trim checks len against the
        // last segment and returns -1 without changes if it is too long.
        let rc = unsafe { sys::border_shim_pktmbuf_trim(self.ptr.as_ptr(), len) };
        if rc == 0 {
            Ok(())
        } else {
            Err(MbufError::TooShort)
        }
    }
}

impl Drop for Mbuf {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: we own the mbuf and nobody touches it after this.
        unsafe { sys::border_shim_pktmbuf_free(self.ptr.as_ptr()) }
    }
}

/// Frees raw mbufs in one call.
///
/// # Safety
/// Every pointer must be an owned mbuf (as for [`Mbuf::from_raw`]) that is
/// not used afterwards. NULL entries are allowed.
#[inline]
unsafe fn free_raw(ptrs: &mut [*mut sys::rte_mbuf]) {
    if ptrs.is_empty() {
        return;
    }
    let n = u32::try_from(ptrs.len()).unwrap_or(u32::MAX);
    // SAFETY: per the caller; free_bulk skips NULLs and frees each entry once.
    unsafe { sys::rte_pktmbuf_free_bulk(ptrs.as_mut_ptr(), n) }
}

/// A fixed-capacity array of owned mbufs, the unit of rx/tx bursts. Lives
/// on the stack or in a worker's state; never allocates. Dropping it (or
/// `clear`) frees the mbufs still in it.
pub struct MbufBurst<const N: usize = 32> {
    len: usize,
    /// Invariant: bufs[..len] are owned, valid, non-NULL mbufs.
    bufs: [*mut sys::rte_mbuf; N],
}

// SAFETY: it owns its mbufs exactly like Vec<Mbuf> would, and Mbuf is Send.
unsafe impl<const N: usize> Send for MbufBurst<N> {}
// SAFETY: &MbufBurst only exposes &Mbuf, and Mbuf is Sync.
unsafe impl<const N: usize> Sync for MbufBurst<N> {}

impl<const N: usize> Default for MbufBurst<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> fmt::Debug for MbufBurst<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

impl<const N: usize> MbufBurst<N> {
    /// An empty burst.
    pub const fn new() -> Self {
        MbufBurst {
            len: 0,
            bufs: [std::ptr::null_mut(); N],
        }
    }

    /// Number of mbufs held.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds none.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// N.
    #[inline]
    pub const fn capacity(&self) -> usize {
        N
    }

    /// Whether `push` would fail.
    #[inline]
    pub fn is_full(&self) -> bool {
        self.len == N
    }

    /// Adds an mbuf at the end; gives it back if full.
    #[inline]
    pub fn push(&mut self, m: Mbuf) -> Result<(), Mbuf> {
        if self.len == N {
            return Err(m);
        }
        self.bufs[self.len] = m.into_raw();
        self.len += 1;
        Ok(())
    }

    /// Removes the last mbuf.
    #[inline]
    pub fn pop(&mut self) -> Option<Mbuf> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        // SAFETY: the slot was below len, so it is an owned mbuf; len was
        // lowered first, so the burst no longer owns it.
        Some(unsafe { Mbuf::from_raw(self.bufs[self.len]) })
    }

    /// The mbufs, as a slice.
    #[inline]
    pub fn as_slice(&self) -> &[Mbuf] {
        // SAFETY: Mbuf is repr(transparent) over NonNull<rte_mbuf>, which has
        // the layout of *mut rte_mbuf, and bufs[..len] are non-NULL owned mbufs.
        unsafe { std::slice::from_raw_parts(self.bufs.as_ptr().cast::<Mbuf>(), self.len) }
    }

    /// The mbufs, as a mutable slice (swap/sort allowed: ownership stays).
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [Mbuf] {
        // SAFETY: as in as_slice; writing an Mbuf into the slice drops the old
        // one, so ownership stays consistent.
        unsafe { std::slice::from_raw_parts_mut(self.bufs.as_mut_ptr().cast::<Mbuf>(), self.len) }
    }

    /// Iterates over the held mbufs.
    #[inline]
    pub fn iter(&self) -> std::slice::Iter<'_, Mbuf> {
        self.as_slice().iter()
    }

    /// Iterates mutably over the held mbufs.
    #[inline]
    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, Mbuf> {
        self.as_mut_slice().iter_mut()
    }

    /// Moves every mbuf out, front to back; the burst is empty afterwards.
    /// Mbufs the iterator did not yield when dropped are freed.
    #[inline]
    pub fn drain(&mut self) -> Drain<'_, N> {
        let end = self.len;
        // If the Drain is leaked, its mbufs leak too instead of being owned
        // twice.
        self.len = 0;
        Drain {
            burst: self,
            pos: 0,
            end,
        }
    }

    /// Frees every held mbuf.
    #[inline]
    pub fn clear(&mut self) {
        let n = self.len;
        self.len = 0;
        // SAFETY: bufs[..n] were owned and are no longer (len is 0).
        unsafe { free_raw(&mut self.bufs[..n]) }
    }

    /// Raw pointers of the held mbufs (still owned by the burst).
    #[inline]
    pub fn as_raw(&self) -> &[*mut sys::rte_mbuf] {
        &self.bufs[..self.len]
    }

    /// Pointer to the first unused slot, for DPDK calls that fill them.
    #[inline]
    pub(crate) fn spare_ptr(&mut self) -> *mut *mut sys::rte_mbuf {
        // SAFETY: len <= N, so this is in bounds or one past the end.
        unsafe { self.bufs.as_mut_ptr().add(self.len) }
    }

    /// Pointer to the first slot, for DPDK calls that consume the held mbufs.
    #[inline]
    pub(crate) fn base_ptr(&mut self) -> *mut *mut sys::rte_mbuf {
        self.bufs.as_mut_ptr()
    }

    /// # Safety
    /// `new_len <= N`, and if growing, the new slots hold owned mbufs.
    #[inline]
    pub(crate) unsafe fn set_len(&mut self, new_len: usize) {
        debug_assert!(new_len <= N);
        self.len = new_len;
    }

    /// Drops the first `n` entries without freeing them (they were handed
    /// to DPDK) and moves the rest to the front.
    #[inline]
    pub(crate) fn forget_front(&mut self, n: usize) {
        let n = n.min(self.len);
        self.bufs.copy_within(n..self.len, 0);
        self.len -= n;
    }
}

impl<const N: usize> Drop for MbufBurst<N> {
    fn drop(&mut self) {
        self.clear();
    }
}

/// Iterator returned by [`MbufBurst::drain`].
pub struct Drain<'a, const N: usize> {
    burst: &'a mut MbufBurst<N>,
    pos: usize,
    /// Invariant: burst.bufs[pos..end] are owned by this Drain.
    end: usize,
}

impl<const N: usize> Iterator for Drain<'_, N> {
    type Item = Mbuf;

    #[inline]
    fn next(&mut self) -> Option<Mbuf> {
        if self.pos == self.end {
            return None;
        }
        let p = self.burst.bufs[self.pos];
        self.pos += 1;
        // SAFETY: slots in pos..end are owned mbufs; pos moved past this one,
        // so ownership passes to the returned Mbuf alone.
        Some(unsafe { Mbuf::from_raw(p) })
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.end - self.pos;
        (n, Some(n))
    }
}

impl<const N: usize> ExactSizeIterator for Drain<'_, N> {}

impl<const N: usize> Drop for Drain<'_, N> {
    fn drop(&mut self) {
        let (pos, end) = (self.pos, self.end);
        self.pos = end;
        // SAFETY: bufs[pos..end] were owned by the Drain and never yielded.
        unsafe { free_raw(&mut self.burst.bufs[pos..end]) }
    }
}
