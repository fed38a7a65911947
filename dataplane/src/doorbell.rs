//! A worker's doorbell: how others wake it from an Rx-interrupt sleep when
//! they hand it work that arrives on no rx queue (full-NAT replies from
//! other workers) or ask it to stop.
//!
//! An eventfd in the worker's epoll set (edge-triggered, so it is never
//! read) and a flag saying the worker sleeps or is about to. Ringing costs
//! a fence and a load while the worker is awake; the `write(2)` happens
//! only when it sleeps, once per sleep. The two sides are a Dekker pair:
//! the worker sets the flag, fences, then looks at its queues one last
//! time; a ringer publishes its work, fences, then reads the flag. At
//! least one of them sees the other, so work is never left behind a sleep.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{fence, AtomicBool, Ordering};

/// See the module documentation.
pub struct Doorbell {
    sleeping: AtomicBool,
    /// None when the kernel refused an eventfd: the worker then wakes at
    /// its bounded timeout only.
    fd: Option<OwnedFd>,
}

impl std::fmt::Debug for Doorbell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Doorbell")
            .field("sleeping", &self.sleeping.load(Ordering::Relaxed))
            .field("fd", &self.fd.as_ref().map(|f| f.as_raw_fd()))
            .finish()
    }
}

impl Default for Doorbell {
    fn default() -> Self {
        Self::new()
    }
}

impl Doorbell {
    pub fn new() -> Doorbell {
        // SAFETY: plain eventfd(2); the descriptor is owned right below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        Doorbell {
            sleeping: AtomicBool::new(false),
            // SAFETY: fd is a new descriptor nobody else owns.
            fd: (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) }),
        }
    }

    /// The descriptor to add to the worker's epoll set (edge-triggered).
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.fd.as_ref().map(|f| f.as_fd())
    }

    /// The worker: about to sleep. Look at every source of work once more
    /// after this, then sleep.
    pub fn going_to_sleep(&self) {
        self.sleeping.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
    }

    /// The worker: awake again (whether rung or not).
    pub fn awake(&self) {
        self.sleeping.store(false, Ordering::Relaxed);
    }

    /// Whether the worker sleeps (or is about to) and nobody rang yet.
    pub fn is_sleeping(&self) -> bool {
        self.sleeping.load(Ordering::Relaxed)
    }

    /// Anyone, after publishing work for the worker: wakes it if it sleeps.
    #[inline]
    pub fn ring(&self) {
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::Relaxed) && self.sleeping.swap(false, Ordering::AcqRel) {
            self.write();
        }
    }

    #[cold]
    fn write(&self) {
        let Some(fd) = &self.fd else {
            return;
        };
        let one = 1u64.to_ne_bytes();
        // SAFETY: fd is our open eventfd; we write 8 bytes from a live
        // buffer. A full counter (EAGAIN, after 2^64-2 rings) still leaves
        // the descriptor readable, which is all the sleeper needs.
        unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counter(bell: &Doorbell) -> u64 {
        let mut buf = [0u8; 8];
        let fd = bell.fd().expect("eventfd").as_raw_fd();
        // SAFETY: fd is an open non-blocking eventfd; buf has 8 bytes.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n == 8 {
            u64::from_ne_bytes(buf)
        } else {
            0
        }
    }

    #[test]
    fn rings_only_a_sleeping_worker_and_only_once_per_sleep() {
        let bell = Doorbell::new();
        bell.ring();
        assert_eq!(counter(&bell), 0, "an awake worker is not written to");
        bell.going_to_sleep();
        assert!(bell.is_sleeping());
        bell.ring();
        bell.ring();
        assert_eq!(counter(&bell), 1, "one write per sleep");
        assert!(!bell.is_sleeping());
        bell.awake();
        bell.ring();
        assert_eq!(counter(&bell), 0);
    }
}
