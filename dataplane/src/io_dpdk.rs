//! [`PortIo`] over DPDK queues: the only place the worker loop touches DPDK.

use dpdk_ffi::{Mbuf, MbufBurst, Mempool, RxQueue, TxQueue};

use crate::io::{Burst, Frame, PortIo, BURST};

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
}

/// One worker's queues: `rx[i]`/`tx[i]` are this worker's queue on port i.
pub struct DpdkPorts {
    rx: Vec<RxQueue>,
    tx: Vec<TxQueue>,
    staging: MbufBurst<BURST>,
    pool: Mempool,
}

impl DpdkPorts {
    pub fn new(rx: Vec<RxQueue>, tx: Vec<TxQueue>, pool: Mempool) -> Self {
        assert_eq!(rx.len(), tx.len(), "one rx and one tx queue per port");
        DpdkPorts {
            rx,
            tx,
            staging: MbufBurst::new(),
            pool,
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
}
