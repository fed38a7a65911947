//! The in-memory port of the benchmark: preallocated buffers handed out
//! on RX and taken back on TX (nothing allocates after construction), and
//! the bare rx -> tx loop the pipeline's cost is reported against.

use dataplane::io::{Burst, Frame, PortIo};

/// Room of one frame buffer.
pub(super) const FRAME_ROOM: usize = 256;

pub(super) type Buf = Box<[u8; FRAME_ROOM]>;

/// A frame in one of [`BenchPorts`]' preallocated buffers.
pub struct BenchFrame {
    buf: Buf,
    len: usize,
}

impl Frame for BenchFrame {
    fn data(&self) -> &[u8] {
        &self.buf[..self.len]
    }
    fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buf[..self.len]
    }
    fn buf_mut(&mut self) -> &mut [u8] {
        &mut self.buf[..]
    }
    fn set_len(&mut self, len: usize) -> bool {
        if len > FRAME_ROOM {
            return false;
        }
        self.len = len;
        true
    }
    fn is_contiguous(&self) -> bool {
        true
    }
}

/// In-memory ports: `rx_port` receives the prebuilt frames in order
/// (cyclically, `remaining` of them), each copied into a free buffer as a
/// NIC would write it; TX puts buffers back on the free list. Nothing
/// allocates after construction.
pub struct BenchPorts {
    ports: usize,
    free: Vec<Buf>,
    frames: Vec<[u8; FRAME_ROOM]>,
    lens: Vec<u16>,
    next: usize,
    rx_port: usize,
    remaining: u64,
    /// Frames sent, per port.
    pub sent: Vec<u64>,
    /// Copies of what was sent (setup only: this allocates).
    pub capture: Option<Vec<(usize, Vec<u8>)>>,
}

impl BenchPorts {
    pub fn new(ports: usize, buffers: usize) -> Self {
        BenchPorts {
            ports,
            free: (0..buffers).map(|_| Box::new([0u8; FRAME_ROOM])).collect(),
            frames: Vec::new(),
            lens: Vec::new(),
            next: 0,
            rx_port: 0,
            remaining: 0,
            sent: vec![0; ports],
            capture: None,
        }
    }

    /// Replays `frames` on `port`, `count` frames in all (cycling).
    pub fn load(&mut self, port: usize, frames: &[Vec<u8>], count: u64) {
        self.frames.clear();
        self.lens.clear();
        for f in frames {
            assert!(f.len() <= FRAME_ROOM, "frame of {} bytes", f.len());
            let mut b = [0u8; FRAME_ROOM];
            b[..f.len()].copy_from_slice(f);
            self.frames.push(b);
            self.lens.push(f.len() as u16);
        }
        self.next = 0;
        self.rx_port = port;
        self.remaining = count;
    }

    pub fn remaining(&self) -> u64 {
        self.remaining
    }
}

impl PortIo for BenchPorts {
    type Frame = BenchFrame;

    fn port_count(&self) -> usize {
        self.ports
    }

    #[inline]
    fn rx_burst(&mut self, port: usize, out: &mut Burst<BenchFrame>) {
        if port != self.rx_port {
            return;
        }
        let n = self.frames.len();
        while !out.is_full() && self.remaining > 0 {
            let Some(mut buf) = self.free.pop() else {
                break;
            };
            let len = usize::from(self.lens[self.next]);
            buf[..len].copy_from_slice(&self.frames[self.next][..len]);
            self.next += 1;
            if self.next == n {
                self.next = 0;
            }
            self.remaining -= 1;
            out.push(BenchFrame { buf, len });
        }
    }

    #[inline]
    fn tx_burst(&mut self, port: usize, frames: &mut Burst<BenchFrame>) -> usize {
        let n = frames.len();
        self.sent[port] += n as u64;
        for f in frames.drain(..) {
            if let Some(c) = self.capture.as_mut() {
                c.push((port, f.data().to_vec()));
            }
            self.free.push(f.buf);
        }
        n
    }

    fn alloc(&mut self, len: usize) -> Option<BenchFrame> {
        if len > FRAME_ROOM {
            return None;
        }
        self.free.pop().map(|buf| BenchFrame { buf, len })
    }
}

/// The bare loop: receive a burst on `rx`, send it on `tx`, until the
/// port runs dry. Returns the frames moved.
pub(super) fn bare_loop(io: &mut BenchPorts, rx: usize, tx: usize) -> u64 {
    let mut burst: Burst<BenchFrame> = Burst::new();
    let mut out: Burst<BenchFrame> = Burst::new();
    let mut moved = 0;
    while io.remaining() > 0 {
        io.rx_burst(rx, &mut burst);
        for f in burst.drain(..) {
            out.push(f);
        }
        moved += io.tx_burst(tx, &mut out) as u64;
    }
    moved
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_port_recycles_its_buffers() {
        let mut io = BenchPorts::new(2, 40);
        io.load(0, &[vec![1; 60], vec![2; 70]], 100);
        let mut b = Burst::new();
        io.rx_burst(0, &mut b);
        assert_eq!(b.len(), 32);
        assert_eq!(b[1].data(), &[2; 70][..]);
        assert_eq!(io.tx_burst(1, &mut b), 32);
        assert_eq!(bare_loop(&mut io, 0, 1), 68);
        assert_eq!(io.free.len(), 40);
        assert_eq!(io.sent, vec![0, 100]);
    }
}
