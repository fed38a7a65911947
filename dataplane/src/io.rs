//! Port I/O as the worker loop sees it: a trait, an in-memory implementation
//! for tests and benchmarks, and (in [`crate::io_dpdk`]) the DPDK one.
//!
//! A worker owns one RX and one TX queue on every port, so implementations
//! need no synchronisation: `&mut self` is the whole contract.

use arrayvec::ArrayVec;

use crate::wire::NicChecksum;
use std::collections::VecDeque;
use std::time::Duration;

/// Frames per RX/TX burst.
pub const BURST: usize = 32;

/// A burst of owned frames.
pub type Burst<F> = ArrayVec<F, BURST>;

/// One received frame, owned by the worker until it is sent or dropped.
pub trait Frame {
    /// The frame's bytes. Chained (multi-segment) frames expose their first
    /// segment only: the worker makes them contiguous ([`Frame::linearize`])
    /// before the pipeline sees them.
    fn data(&self) -> &[u8];
    fn data_mut(&mut self) -> &mut [u8];
    /// The frame's bytes followed by the room it may grow into in place.
    fn buf_mut(&mut self) -> &mut [u8];
    /// Makes the frame `len` bytes long: shorter, or longer up to the room
    /// [`Frame::buf_mut`] showed (bytes written there become part of it).
    /// Returns false, changing nothing, when there is not enough room.
    fn set_len(&mut self, len: usize) -> bool;
    /// False for frames spread over several buffers (a chain).
    fn is_contiguous(&self) -> bool;
    /// Makes a chained frame contiguous in its first buffer, without
    /// allocating. False, changing nothing, when that buffer cannot hold it.
    fn linearize(&mut self) -> bool {
        self.is_contiguous()
    }
    /// What the port's Rx checksum offload found of the TCP/UDP checksum.
    fn nic_l4_checksum(&self) -> NicChecksum {
        NicChecksum::Unknown
    }
}

/// The ports of one worker, addressed by index (data ports first, then kernel twins).
pub trait PortIo {
    type Frame: Frame;
    /// Number of ports this worker polls and may send on.
    fn port_count(&self) -> usize;
    /// Receives up to `out.remaining_capacity()` frames from `port` into `out`.
    fn rx_burst(&mut self, port: usize, out: &mut Burst<Self::Frame>);
    /// Sends every frame of `frames` (leaving it empty). Returns how many the
    /// port accepted; the rest were released.
    fn tx_burst(&mut self, port: usize, frames: &mut Burst<Self::Frame>) -> usize;
    /// A new frame of `len` zeroed-or-garbage bytes, for frames the worker
    /// generates itself (neighbour requests). None when buffers run out.
    fn alloc(&mut self, len: usize) -> Option<Self::Frame>;

    /// Whether [`PortIo::wait`] sleeps until a frame arrives on any of the
    /// worker's rx queues (Rx interrupts on every one of them). When false,
    /// an idle adaptive worker backs off with short sleeps instead.
    fn can_wait(&self) -> bool {
        false
    }
    /// Arms the wake-ups of [`PortIo::wait`]: from now on an arrival ends
    /// the next wait at once. The worker polls once more before waiting.
    fn arm(&mut self) {}
    /// Sleeps until a frame arrives, the worker's doorbell rings, or
    /// `timeout` passes (whichever is first).
    fn wait(&mut self, _timeout: Duration) {}
    /// Undoes [`PortIo::arm`].
    fn disarm(&mut self) {}
}

/// Room a [`VecFrame`] offers to grow into, like an mbuf's tailroom.
pub const VEC_FRAME_ROOM: usize = 2048;
/// Room of a [`VecFrame`] longer than [`VEC_FRAME_ROOM`]: like an mbuf of
/// a pool sized for the largest MTU (9198 bytes, 26 of Ethernet, 512 to grow).
pub const VEC_FRAME_JUMBO_ROOM: usize = 9198 + 26 + 512;

/// A frame held in plain vectors, for tests and in-process benchmarks:
/// the first segment, then the later segments of a chain (usually none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VecFrame(pub Vec<u8>, pub Vec<Vec<u8>>);

impl VecFrame {
    /// A contiguous frame.
    pub fn new(bytes: Vec<u8>) -> Self {
        VecFrame(bytes, Vec::new())
    }

    fn room(&self) -> usize {
        if self.0.len() <= VEC_FRAME_ROOM {
            VEC_FRAME_ROOM
        } else {
            VEC_FRAME_JUMBO_ROOM.max(self.0.len())
        }
    }
}

impl Frame for VecFrame {
    fn data(&self) -> &[u8] {
        &self.0
    }
    fn data_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
    fn buf_mut(&mut self) -> &mut [u8] {
        let room = self.room();
        self.0.resize(room, 0);
        &mut self.0
    }
    fn set_len(&mut self, len: usize) -> bool {
        if len > self.room() {
            return false;
        }
        self.0.resize(len, 0);
        true
    }
    fn is_contiguous(&self) -> bool {
        self.1.is_empty()
    }
    fn linearize(&mut self) -> bool {
        let total = self.0.len() + self.1.iter().map(Vec::len).sum::<usize>();
        if total > VEC_FRAME_JUMBO_ROOM {
            return false;
        }
        for seg in std::mem::take(&mut self.1) {
            self.0.extend_from_slice(&seg);
        }
        true
    }
}

/// In-memory ports: tests push frames into `rx[port]` and read what the worker
/// sent from `tx[port]`. `tx_capacity` simulates a full TX ring. With
/// `waitable`, they claim Rx interrupts: `waits` records each wait's
/// timeout (which returns at once) and `armed` whether they are armed.
#[derive(Debug, Default)]
pub struct MemPorts {
    pub rx: Vec<VecDeque<VecFrame>>,
    pub tx: Vec<Vec<VecFrame>>,
    pub tx_capacity: Option<usize>,
    pub waitable: bool,
    pub armed: bool,
    pub waits: Vec<Duration>,
}

impl MemPorts {
    pub fn new(ports: usize) -> Self {
        MemPorts {
            rx: (0..ports).map(|_| VecDeque::new()).collect(),
            tx: (0..ports).map(|_| Vec::new()).collect(),
            tx_capacity: None,
            waitable: false,
            armed: false,
            waits: Vec::new(),
        }
    }

    /// Queues one frame for reception on `port`.
    pub fn inject(&mut self, port: usize, bytes: &[u8]) {
        self.rx[port].push_back(VecFrame::new(bytes.to_vec()));
    }

    /// Queues one chained frame for reception on `port`: `bytes` cut into
    /// segments of at most `seg_len` bytes, as a port with scattered Rx
    /// delivers a frame longer than one buffer.
    pub fn inject_chained(&mut self, port: usize, bytes: &[u8], seg_len: usize) {
        let mut segs = bytes.chunks(seg_len.max(1)).map(<[u8]>::to_vec);
        let first = segs.next().unwrap_or_default();
        self.rx[port].push_back(VecFrame(first, segs.collect()));
    }

    /// Takes everything sent on `port` so far.
    pub fn take_tx(&mut self, port: usize) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.tx[port])
            .into_iter()
            .map(|f| f.0)
            .collect()
    }
}

impl PortIo for MemPorts {
    type Frame = VecFrame;

    fn port_count(&self) -> usize {
        self.rx.len()
    }

    fn rx_burst(&mut self, port: usize, out: &mut Burst<VecFrame>) {
        while !out.is_full() {
            match self.rx[port].pop_front() {
                Some(f) => out.push(f),
                None => break,
            }
        }
    }

    fn alloc(&mut self, len: usize) -> Option<VecFrame> {
        Some(VecFrame::new(vec![0; len]))
    }

    fn tx_burst(&mut self, port: usize, frames: &mut Burst<VecFrame>) -> usize {
        let room = self
            .tx_capacity
            .map_or(usize::MAX, |cap| cap.saturating_sub(self.tx[port].len()));
        let sent = frames.len().min(room);
        self.tx[port].extend(frames.drain(..sent));
        frames.clear();
        sent
    }

    fn can_wait(&self) -> bool {
        self.waitable
    }

    fn arm(&mut self) {
        self.armed = true;
    }

    fn wait(&mut self, timeout: Duration) {
        assert!(self.armed, "wait without arm");
        self.waits.push(timeout);
    }

    fn disarm(&mut self) {
        self.armed = false;
    }
}
