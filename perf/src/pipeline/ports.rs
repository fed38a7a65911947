//! The in-memory port of the benchmark: preallocated buffers handed out
//! on RX and taken back on TX (nothing allocates after construction), and
//! the bare rx -> tx loop the pipeline's cost is reported against.
//!
//! A NIC writes a received frame into a buffer of its Rx ring without the
//! CPU's help: what the CPU pays for is the buffer's lines, whatever the
//! number of flows. The port imitates that at a cost that does not grow
//! with the flow set: a [`Replay`] keeps one template frame and, per flow,
//! only the bytes where that flow's frame differs from it (addresses,
//! ports and the checksums over them, as they were built), read in order
//! from one compact array. The frame handed out is byte for byte the one
//! it was made from.

use std::sync::Arc;

use dataplane::io::{Burst, Frame, PortIo};

/// Room of one frame buffer.
pub(super) const FRAME_ROOM: usize = 256;

pub(super) type Buf = Box<[u8; FRAME_ROOM]>;

/// Bytes of one per-flow window: one 16-byte move, whose offset the
/// template fixes.
const WINDOW: usize = 16;

/// Frames to replay: a template and, per frame, its own bytes in the
/// windows (`windows`) that cover every byte where some frame differs
/// from the template. A window holds the frame's bytes whether they vary
/// or not, so that writing it whole is right.
#[derive(Debug)]
pub struct Replay {
    template: [u8; FRAME_ROOM],
    /// Bytes of the template written per frame: 64, 128 or all (a fixed
    /// size, so the copy is a few vector moves, not a call).
    copy: usize,
    /// The length of every frame, when they all have the same.
    len: u16,
    /// Per frame, when their lengths differ (empty otherwise).
    lens: Vec<u16>,
    /// Offset of each window in the frame.
    windows: Vec<u8>,
    /// `windows.len()` windows per frame, in frame order.
    bytes: Vec<[u8; WINDOW]>,
    count: usize,
}

impl Replay {
    /// The replay of `frames`, each at most [`FRAME_ROOM`] bytes.
    pub fn new(frames: &[Vec<u8>]) -> Replay {
        let mut template = [0u8; FRAME_ROOM];
        let first = frames.first().map_or(&[][..], |f| f.as_slice());
        template[..first.len()].copy_from_slice(first);
        let mut differs = [false; FRAME_ROOM];
        let mut same_len = true;
        let mut longest = 0;
        for f in frames {
            assert!(f.len() <= FRAME_ROOM, "frame of {} bytes", f.len());
            same_len &= f.len() == first.len();
            longest = longest.max(f.len());
            for (i, b) in f.iter().enumerate() {
                differs[i] |= *b != template[i];
            }
        }
        let mut windows: Vec<u8> = Vec::new();
        for i in (0..FRAME_ROOM).filter(|&i| differs[i]) {
            if windows
                .last()
                .is_none_or(|&at| i >= usize::from(at) + WINDOW)
            {
                windows.push(i.min(FRAME_ROOM - WINDOW) as u8);
            }
        }
        let mut bytes = Vec::with_capacity(windows.len() * frames.len());
        for f in frames {
            for &at in &windows {
                let at = usize::from(at);
                // Past a shorter frame's end the template's bytes stand in:
                // the frame's length cuts them off again.
                bytes.push(std::array::from_fn(|k| {
                    f.get(at + k).copied().unwrap_or(template[at + k])
                }));
            }
        }
        Replay {
            template,
            copy: match longest {
                0..=64 => 64,
                65..=128 => 128,
                _ => FRAME_ROOM,
            },
            len: first.len() as u16,
            lens: if same_len {
                Vec::new()
            } else {
                frames.iter().map(|f| f.len() as u16).collect()
            },
            windows,
            bytes,
            count: frames.len(),
        }
    }

    /// Frames in the replay.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes kept per frame besides the template.
    pub fn stride(&self) -> usize {
        self.windows.len() * WINDOW
    }

    /// Writes frame `i` into `buf` and returns its length.
    #[inline]
    fn write(&self, i: usize, buf: &mut [u8; FRAME_ROOM]) -> usize {
        match self.copy {
            64 => buf[..64].copy_from_slice(&self.template[..64]),
            128 => buf[..128].copy_from_slice(&self.template[..128]),
            _ => buf.copy_from_slice(&self.template),
        }
        let n = self.windows.len();
        for (w, &at) in self.bytes[i * n..(i + 1) * n].iter().zip(&self.windows) {
            let at = usize::from(at);
            buf[at..at + WINDOW].copy_from_slice(w);
        }
        match self.lens.get(i) {
            Some(&l) => usize::from(l),
            None => usize::from(self.len),
        }
    }
}

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

/// In-memory ports: `rx_port` receives the frames of a [`Replay`] in
/// order (cyclically, `remaining` of them), each written into a free
/// buffer as a NIC would write it; TX puts buffers back on the free list.
/// Nothing allocates after construction but [`BenchPorts::load`].
pub struct BenchPorts {
    ports: usize,
    free: Vec<Buf>,
    replay: Arc<Replay>,
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
            replay: Arc::new(Replay::new(&[])),
            next: 0,
            rx_port: 0,
            remaining: 0,
            sent: vec![0; ports],
            capture: None,
        }
    }

    /// Replays `frames` on `port`, `count` frames in all (cycling).
    pub fn load(&mut self, port: usize, frames: &[Vec<u8>], count: u64) {
        self.replay(port, &Arc::new(Replay::new(frames)), count);
    }

    /// Replays `replay` on `port`, `count` frames in all (cycling), from
    /// its first frame; allocates nothing.
    pub fn replay(&mut self, port: usize, replay: &Arc<Replay>, count: u64) {
        assert!(count == 0 || !replay.is_empty(), "nothing to replay");
        self.replay = Arc::clone(replay);
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
        let n = self.replay.len();
        while !out.is_full() && self.remaining > 0 {
            let Some(mut buf) = self.free.pop() else {
                break;
            };
            let len = self.replay.write(self.next, &mut buf);
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
