//! Packet-buffer pools.

use std::ffi::{CStr, CString};
use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::eal::Eal;
use crate::error::DpdkError;
use crate::mbuf::{Mbuf, MbufBurst};
use crate::sys;

/// `SOCKET_ID_ANY`: no NUMA preference.
pub const SOCKET_ID_ANY: i32 = sys::SOCKET_ID_ANY;

/// Default data room per mbuf: 2048 bytes of packet plus the headroom.
pub const DEFAULT_DATA_ROOM: u16 = sys::RTE_MBUF_DEFAULT_BUF_SIZE as u16;

/// Headroom EAL reserves in front of the data of a fresh mbuf.
pub const PKTMBUF_HEADROOM: u16 = sys::RTE_PKTMBUF_HEADROOM as u16;

/// A pktmbuf pool. Clones share the pool; a port configured with it holds a
/// clone too, because its RX rings keep mbufs of the pool.
///
/// The pool is freed when the last clone goes, unless mbufs of it are still
/// out (held by someone, or sitting in a ring): then it is deliberately
/// leaked, with EAL, and a warning goes to stderr, because freeing it would
/// leave those mbufs dangling.
#[derive(Clone)]
pub struct Mempool {
    inner: Arc<MempoolInner>,
}

struct MempoolInner {
    ptr: NonNull<sys::rte_mempool>,
    eal: ManuallyDrop<Eal>,
    /// Bytes per buffer, headroom included, as created.
    data_room: u16,
}

// SAFETY: the pool uses DPDK's default "ring_mp_mc" ops, which are safe for
// concurrent get/put from any thread; the pointer itself is never written.
unsafe impl Send for MempoolInner {}
// SAFETY: as above, every operation we expose through &self is thread-safe.
unsafe impl Sync for MempoolInner {}

impl std::fmt::Debug for Mempool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mempool")
            .field("name", &self.name())
            .field("size", &self.size())
            .field("avail", &self.avail_count())
            .finish()
    }
}

impl Mempool {
    /// Creates a pktmbuf pool of `n` mbufs (best as 2^k - 1), with a
    /// per-lcore cache of `cache` (0..=512), `data_room` bytes per buffer
    /// including headroom (see [`DEFAULT_DATA_ROOM`]), on NUMA `socket`
    /// ([`SOCKET_ID_ANY`], or a port's `socket_id()`).
    ///
    /// `name` must be unique in the process and short (under 26 bytes).
    pub fn pktmbuf(
        name: &str,
        n: u32,
        cache: u32,
        data_room: u16,
        socket: i32,
    ) -> Result<Mempool, DpdkError> {
        let what = || format!("mempool {name:?} create");
        let eal = Eal::current()?;
        let cname = CString::new(name)
            .map_err(|_| DpdkError::with_detail(what(), libc::EINVAL, "name contains NUL"))?;
        // SAFETY: EAL is live (we hold a handle); cname is NUL-terminated and
        // outlives the call (DPDK copies the name).
        let ptr =
            unsafe { sys::rte_pktmbuf_pool_create(cname.as_ptr(), n, cache, 0, data_room, socket) };
        let ptr = NonNull::new(ptr).ok_or_else(|| DpdkError::from_rte_errno(what()))?;
        Ok(Mempool {
            inner: Arc::new(MempoolInner {
                ptr,
                eal: ManuallyDrop::new(eal),
                data_room,
            }),
        })
    }

    /// Takes one mbuf (data_len 0, standard headroom); `None` if empty.
    #[inline]
    pub fn alloc(&self) -> Option<Mbuf> {
        // SAFETY: the pool is live (self holds it); alloc returns an owned,
        // reset mbuf or NULL.
        let m = unsafe { sys::border_shim_pktmbuf_alloc(self.inner.ptr.as_ptr()) };
        // SAFETY: a non-NULL result is a fresh mbuf that nobody else owns.
        NonNull::new(m).map(|p| unsafe { Mbuf::from_non_null(p) })
    }

    /// Appends `count` fresh mbufs to `out`, all or none; false if the pool
    /// has fewer or `out` lacks room.
    #[must_use]
    pub fn alloc_bulk<const N: usize>(&self, out: &mut MbufBurst<N>, count: usize) -> bool {
        let Ok(c) = u32::try_from(count) else {
            return false;
        };
        if count > out.capacity() - out.len() {
            return false;
        }
        let spare = out.spare_ptr();
        // SAFETY: `spare` points at out's unused slots, which have room for
        // `count` pointers (checked above); on success (0) all `count` are
        // fresh owned mbufs, on failure none were written.
        let ok =
            unsafe { sys::border_shim_pktmbuf_alloc_bulk(self.inner.ptr.as_ptr(), spare, c) } == 0;
        if ok {
            // SAFETY: the `count` slots after len were just filled with owned mbufs.
            unsafe { out.set_len(out.len() + count) };
        }
        ok
    }

    /// Number of mbufs in the pool (free ones, including per-lcore caches).
    pub fn avail_count(&self) -> u32 {
        // SAFETY: the pool is live; the call only reads counters.
        unsafe { sys::rte_mempool_avail_count(self.inner.ptr.as_ptr()) }
    }

    /// Number of mbufs out of the pool (held by code or in device rings).
    pub fn in_use_count(&self) -> u32 {
        // SAFETY: the pool is live; the call only reads counters.
        unsafe { sys::rte_mempool_in_use_count(self.inner.ptr.as_ptr()) }
    }

    /// Total number of mbufs.
    pub fn size(&self) -> u32 {
        // SAFETY: the pool is live; `size` is set once at creation.
        unsafe { (*self.inner.ptr.as_ptr()).size }
    }

    /// The pool's name.
    pub fn name(&self) -> String {
        // SAFETY: the pool is live; `name` is a NUL-terminated array inside it.
        unsafe { CStr::from_ptr((*self.inner.ptr.as_ptr()).name.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    /// Bytes per buffer, headroom included (what [`Mempool::pktmbuf`] was given).
    pub fn data_room(&self) -> u16 {
        self.inner.data_room
    }

    /// The raw pool, valid while any clone of `self` lives.
    pub fn as_ptr(&self) -> *mut sys::rte_mempool {
        self.inner.ptr.as_ptr()
    }
}

impl Drop for MempoolInner {
    fn drop(&mut self) {
        // SAFETY: the pool is live until we free it below.
        let in_use = unsafe { sys::rte_mempool_in_use_count(self.ptr.as_ptr()) };
        if in_use != 0 {
            // SAFETY: as above.
            let name = unsafe { CStr::from_ptr((*self.ptr.as_ptr()).name.as_ptr()) };
            eprintln!(
                "border dpdk-ffi: mempool {name:?} dropped with {in_use} mbufs still out; leaking it (and EAL)"
            );
            return;
        }
        // SAFETY: no mbuf of the pool is out (checked above) and no Mempool
        // handle is left, so nothing can reach it after this.
        unsafe { sys::rte_mempool_free(self.ptr.as_ptr()) };
        // SAFETY: dropped exactly once, here, after the pool is gone.
        unsafe { ManuallyDrop::drop(&mut self.eal) };
    }
}
