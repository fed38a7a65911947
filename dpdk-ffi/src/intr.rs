//! Rx queue interrupts: an epoll set a worker sleeps on until a frame
//! arrives on one of its rx queues or another watched descriptor (a
//! doorbell eventfd) becomes readable, the pattern of DPDK's l3fwd-power.
//!
//! DPDK adds each queue's interrupt descriptor to the set
//! (`rte_eth_dev_rx_intr_ctl_q`, edge-triggered) and `rte_epoll_wait`
//! sleeps on it. PMDs that need it get the interrupt enabled just before
//! the sleep and disabled after (`rte_eth_dev_rx_intr_enable/disable`);
//! PMDs whose descriptor signals every arrival by itself (net_tap: the
//! queue's own TAP file descriptor) have no such operation and need none.
//!
//! net_tap needs one more step. Its rx burst reads a queue only after its
//! signal handler counted an arrival (the queue's descriptor is `O_ASYNC`
//! with a real-time signal, `F_SETSIG`; a process-wide "trigger" that
//! spares empty polls a `readv`), and the kernel may deliver that signal
//! to another thread later than epoll wakes the sleeper: the woken worker
//! would find its queue "empty", and the frame would wait for the next
//! wake-up. So when a queue interrupt ends the wait and a watched
//! descriptor is `O_ASYNC` with a handled signal, the waiter raises that
//! signal in its own thread, which runs the handler before `wait` returns.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use crate::error::DpdkError;
use crate::port::{port_name, PortShared, RxQueue};
use crate::sys;

/// Most descriptors one waiter watches (rx queues plus extra descriptors).
pub const MAX_WATCHED: usize = 64;

struct Watched {
    port_id: u16,
    queue_id: u16,
    /// The PMD wants the interrupt enabled before each sleep.
    arm: bool,
    /// Keeps the port (and its interrupt handle) open while we watch it.
    _port: Arc<PortShared>,
}

/// One worker's epoll set over the Rx interrupts of its queues. Not shared:
/// the worker that polls the queues sleeps on it.
pub struct RxWaiter {
    epfd: OwnedFd,
    queues: Vec<Watched>,
    /// Descriptors watched besides the queues.
    extra: usize,
    /// The signal (with a handler) a watched queue's descriptor raises on
    /// arrival, if any: raised here after a queue interrupt (net_tap).
    kick: Option<i32>,
}

impl std::fmt::Debug for RxWaiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RxWaiter")
            .field("epfd", &self.epfd.as_raw_fd())
            .field("queues", &self.queues.len())
            .field("extra", &self.extra)
            .field("kick", &self.kick)
            .finish()
    }
}

impl RxWaiter {
    /// An empty set.
    pub fn new() -> Result<RxWaiter, DpdkError> {
        // SAFETY: plain epoll_create1(2); the descriptor is owned below.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            return Err(DpdkError::from_errno("Rx interrupt epoll set", errno));
        }
        Ok(RxWaiter {
            // SAFETY: fd is a new descriptor nobody else owns.
            epfd: unsafe { OwnedFd::from_raw_fd(fd) },
            queues: Vec::new(),
            extra: 0,
            kick: None,
        })
    }

    fn full(&self, what: String) -> Option<DpdkError> {
        (self.queues.len() + self.extra >= MAX_WATCHED).then(|| {
            DpdkError::with_detail(
                what,
                libc::ENOSPC,
                format!("a waiter watches at most {MAX_WATCHED} descriptors"),
            )
        })
    }

    /// Adds the Rx interrupt of `queue`. Fails (changing nothing) when the
    /// port was configured without Rx interrupts or its PMD has none
    /// (net_null, net_ring, net_pcap, ...): poll such a queue without
    /// sleeping on it.
    pub fn watch(&mut self, queue: &RxQueue) -> Result<(), DpdkError> {
        let (port_id, queue_id) = (queue.port_id(), queue.queue_id());
        let what = || {
            let name = port_name(port_id).unwrap_or_else(|_| format!("{port_id}"));
            format!("port {name} rx queue {queue_id} interrupt")
        };
        if let Some(e) = self.full(what()) {
            return Err(e);
        }
        let epfd = self.epfd.as_raw_fd();
        // SAFETY: the port is open (the queue handle keeps it so) and
        // queue_id is one of its configured rx queues; epfd is our epoll
        // set. DPDK stores its own event record in the port's interrupt
        // handle; `data` is not used by us.
        let ret = unsafe {
            sys::rte_eth_dev_rx_intr_ctl_q(
                port_id,
                queue_id,
                epfd,
                sys::RTE_INTR_EVENT_ADD as i32,
                std::ptr::null_mut(),
            )
        };
        if ret != 0 {
            return Err(DpdkError::from_ret(what(), ret));
        }
        // SAFETY: as above; enabling only touches the queue's interrupt state.
        let ret = unsafe { sys::rte_eth_dev_rx_intr_enable(port_id, queue_id) };
        let arm = match ret {
            0 => {
                // SAFETY: as above.
                unsafe { sys::rte_eth_dev_rx_intr_disable(port_id, queue_id) };
                true
            }
            // The descriptor signals every arrival by itself (net_tap).
            r if r == -libc::ENOTSUP => false,
            r => {
                self.unwatch(port_id, queue_id);
                return Err(DpdkError::from_ret(what(), r));
            }
        };
        self.queues.push(Watched {
            port_id,
            queue_id,
            arm,
            _port: Arc::clone(&queue.shared),
        });
        if self.kick.is_none() {
            self.kick = arrival_signal(port_id, queue_id);
        }
        Ok(())
    }

    /// Also wakes when `fd` becomes readable or is written to again
    /// (edge-triggered: the waker never needs to be read). The descriptor
    /// must stay open while this waiter lives.
    pub fn watch_fd(&mut self, fd: BorrowedFd<'_>) -> Result<(), DpdkError> {
        if let Some(e) = self.full("watch descriptor".into()) {
            return Err(e);
        }
        // A zero `u64` is a NULL `data.ptr`: rte_epoll_wait skips such
        // events (no DPDK record) and just returns.
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLET) as u32,
            u64: 0,
        };
        // SAFETY: epfd is our epoll set, fd a live descriptor the caller
        // keeps open, ev a valid epoll_event read by the kernel.
        let ret = unsafe {
            libc::epoll_ctl(
                self.epfd.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                fd.as_raw_fd(),
                &mut ev,
            )
        };
        if ret != 0 {
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            return Err(DpdkError::from_errno("watch descriptor", errno));
        }
        self.extra += 1;
        Ok(())
    }

    /// Rx queues watched.
    pub fn queues(&self) -> usize {
        self.queues.len()
    }

    /// The signal raised after a queue interrupt (see the module
    /// documentation), if a watched queue's PMD counts arrivals with one.
    pub fn arrival_signal(&self) -> Option<i32> {
        self.kick
    }

    /// Enables the interrupts of the queues whose PMD needs it: from now
    /// on an arrival ends the next [`RxWaiter::wait`] at once. Look at the
    /// queues once more after this and before waiting: a frame that came
    /// in before may have raised no interrupt.
    pub fn arm(&mut self) {
        for q in self.queues.iter().filter(|q| q.arm) {
            // SAFETY: the port is open (we hold it) and the queue is ours.
            unsafe { sys::rte_eth_dev_rx_intr_enable(q.port_id, q.queue_id) };
        }
    }

    /// Disables what [`RxWaiter::arm`] enabled (polling needs no interrupts).
    pub fn disarm(&mut self) {
        for q in self.queues.iter().filter(|q| q.arm) {
            // SAFETY: as in `arm`.
            unsafe { sys::rte_eth_dev_rx_intr_disable(q.port_id, q.queue_id) };
        }
    }

    /// Sleeps until an arrival, a watched descriptor, or `timeout_ms`
    /// (negative: no timeout). Returns how many queue interrupts fired.
    pub fn wait(&mut self, timeout_ms: i32) -> usize {
        let mut events = [sys::rte_epoll_event::default(); MAX_WATCHED];
        let max = (self.queues.len() + self.extra).clamp(1, MAX_WATCHED);
        // SAFETY: epfd is our epoll set; `events` has room for `max`
        // records, which DPDK fills (and runs the PMD's interrupt callback
        // on, for interrupt types that must be read to rearm).
        let n = unsafe {
            sys::rte_epoll_wait(
                self.epfd.as_raw_fd(),
                events.as_mut_ptr(),
                max as i32,
                timeout_ms,
            )
        };
        let fired = usize::try_from(n).unwrap_or(0);
        if let (true, Some(sig)) = (fired > 0, self.kick) {
            // See the module documentation: run the PMD's handler here.
            // SAFETY: raise(3) signals this thread; the signal has a
            // handler (checked when the queue was watched), which runs
            // before raise returns.
            unsafe { libc::raise(sig) };
        }
        fired
    }

    fn unwatch(&mut self, port_id: u16, queue_id: u16) {
        // SAFETY: the queue was added to our epoll set and its port is
        // open; DEL only removes DPDK's record from the set.
        unsafe {
            sys::rte_eth_dev_rx_intr_ctl_q(
                port_id,
                queue_id,
                self.epfd.as_raw_fd(),
                sys::RTE_INTR_EVENT_DEL as i32,
                std::ptr::null_mut(),
            )
        };
    }
}

/// `fcntl` command reading the signal an `O_ASYNC` descriptor raises
/// (asm-generic/fcntl.h; the libc crate lacks it for glibc targets).
const F_GETSIG: libc::c_int = 11;

/// The signal the interrupt descriptor of a queue raises on arrival, when
/// it is `O_ASYNC` and the signal has a handler (net_tap's rx trigger).
fn arrival_signal(port_id: u16, queue_id: u16) -> Option<i32> {
    // SAFETY: the port is open and the queue configured (the caller holds
    // its handle); this only looks the descriptor up.
    let fd = unsafe { sys::rte_eth_dev_rx_intr_ctl_q_get_fd(port_id, queue_id) };
    if fd < 0 {
        return None;
    }
    // SAFETY: fcntl(2) reads of flags on a descriptor DPDK keeps open.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 || flags & libc::O_ASYNC == 0 {
        return None;
    }
    // SAFETY: as above.
    let sig = match unsafe { libc::fcntl(fd, F_GETSIG) } {
        0 => libc::SIGIO,
        s if s > 0 => s,
        _ => return None,
    };
    // SAFETY: sigaction with a NULL new action only reads the current one
    // into `sa`, a valid out-pointer; all-zero is a valid sigaction.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let ret = unsafe { libc::sigaction(sig, std::ptr::null(), &mut sa) };
    // Raising a signal without a handler could end the process.
    (ret == 0 && sa.sa_sigaction != libc::SIG_DFL && sa.sa_sigaction != libc::SIG_IGN)
        .then_some(sig)
}

impl Drop for RxWaiter {
    fn drop(&mut self) {
        // Remove DPDK's records before the set closes: closing the port
        // later would otherwise try to delete them from a closed (or
        // reused) descriptor.
        for i in 0..self.queues.len() {
            let (port_id, queue_id) = (self.queues[i].port_id, self.queues[i].queue_id);
            self.unwatch(port_id, queue_id);
        }
    }
}
