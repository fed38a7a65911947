//! [`PortIo`] over DPDK queues: the only place the worker loop touches DPDK.

use std::os::fd::BorrowedFd;
use std::time::Duration;

use dpdk_ffi::{DpdkError, Mbuf, MbufBurst, Mempool, RxQueue, RxWaiter, TxQueue};

use crate::io::{Burst, Frame, PortIo, BURST};
use crate::wire::NicChecksum;

impl Frame for Mbuf {
    #[inline]
    fn data(&self) -> &[u8] {
        Mbuf::data(self)
    }
    #[inline]
    fn data_mut(&mut self) -> &mut [u8] {
        Mbuf::data_mut(self)
    }
    #[inline]
    fn buf_mut(&mut self) -> &mut [u8] {
        self.data_and_tailroom_mut()
    }
    #[inline]
    fn set_len(&mut self, len: usize) -> bool {
        let cur = self.data_len() as usize;
        match len.cmp(&cur) {
            std::cmp::Ordering::Less => self.trim(cur - len).is_ok(),
            std::cmp::Ordering::Greater => self.append(len - cur).is_ok(),
            std::cmp::Ordering::Equal => true,
        }
    }
    #[inline]
    fn is_contiguous(&self) -> bool {
        Mbuf::is_contiguous(self)
    }
    #[inline]
    fn linearize(&mut self) -> bool {
        Mbuf::linearize(self)
    }
    #[inline]
    fn nic_l4_checksum(&self) -> NicChecksum {
        match self.rx_l4_checksum_ok() {
            Some(true) => NicChecksum::Good,
            Some(false) => NicChecksum::Bad,
            None => NicChecksum::Unknown,
        }
    }
}

/// One worker's queues: `rx[i]`/`tx[i]` are this worker's queue on port i.
pub struct DpdkPorts {
    rx: Vec<RxQueue>,
    tx: Vec<TxQueue>,
    staging: MbufBurst<BURST>,
    pool: Mempool,
    /// The Rx interrupts of every queue in `rx` (and the worker's
    /// doorbell), when all of them have one.
    waiter: Option<RxWaiter>,
    /// Mbufs taken while the test trigger of an empty pool is on
    /// ([`crate::fault::pool_held`]); always empty in release builds.
    held: Vec<Mbuf>,
}

impl DpdkPorts {
    /// `waiter` from [`rx_waiter`] over the same queues, or None to never
    /// sleep on Rx interrupts.
    pub fn new(
        rx: Vec<RxQueue>,
        tx: Vec<TxQueue>,
        pool: Mempool,
        waiter: Option<RxWaiter>,
    ) -> Self {
        assert_eq!(rx.len(), tx.len(), "one rx and one tx queue per port");
        DpdkPorts {
            rx,
            tx,
            staging: MbufBurst::new(),
            pool,
            waiter,
            held: Vec::new(),
        }
    }
}

/// An epoll set over the Rx interrupts of every queue of `rx` and the
/// worker's `doorbell`. On failure, the index in `rx` of the first queue
/// without Rx interrupts and why.
pub fn rx_waiter(
    rx: &[RxQueue],
    doorbell: Option<BorrowedFd<'_>>,
) -> Result<RxWaiter, (Option<usize>, DpdkError)> {
    let mut waiter = RxWaiter::new().map_err(|e| (None, e))?;
    for (i, q) in rx.iter().enumerate() {
        waiter.watch(q).map_err(|e| (Some(i), e))?;
    }
    if let Some(fd) = doorbell {
        waiter.watch_fd(fd).map_err(|e| (None, e))?;
    }
    Ok(waiter)
}

impl DpdkPorts {
    /// The test trigger of an empty pool: takes every mbuf this lcore can
    /// get while it is on, gives them back when it goes off.
    #[cold]
    fn hold_for_test(&mut self) {
        if crate::fault::pool_held() {
            while let Some(m) = self.pool.alloc() {
                self.held.push(m);
            }
        } else {
            self.held.clear();
        }
    }
}

impl PortIo for DpdkPorts {
    type Frame = Mbuf;

    fn port_count(&self) -> usize {
        self.rx.len()
    }

    #[inline]
    fn rx_burst(&mut self, port: usize, out: &mut Burst<Mbuf>) {
        if port == 0 && (crate::fault::pool_held() || !self.held.is_empty()) {
            self.hold_for_test();
        }
        self.staging.clear();
        self.rx[port].rx_burst(&mut self.staging);
        for m in self.staging.drain() {
            if let Err(m) = out.try_push(m) {
                drop(m);
            }
        }
    }

    fn alloc(&mut self, len: usize) -> Option<Mbuf> {
        let mut m = self.pool.alloc()?;
        m.append(len).ok()?;
        Some(m)
    }

    #[inline]
    fn tx_burst(&mut self, port: usize, frames: &mut Burst<Mbuf>) -> usize {
        self.staging.clear();
        for m in frames.drain(..) {
            // Both bursts hold at most BURST frames, so this never refuses.
            let _ = self.staging.push(m);
        }
        let sent = self.tx[port].tx_burst(&mut self.staging);
        // What the queue did not take is released here (counted by the caller).
        self.staging.clear();
        sent
    }

    fn can_wait(&self) -> bool {
        self.waiter.is_some()
    }

    fn arm(&mut self) {
        if let Some(w) = &mut self.waiter {
            w.arm();
        }
    }

    fn wait(&mut self, timeout: Duration) {
        if let Some(w) = &mut self.waiter {
            w.wait(i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX));
        }
    }

    fn disarm(&mut self) {
        if let Some(w) = &mut self.waiter {
            w.disarm();
        }
    }
}
