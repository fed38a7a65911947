//! The run-to-completion poll loop of one worker.
//!
//! Every iteration polls each port's RX queue of this worker, runs each frame
//! through the pipeline, batches the results per output port and flushes the
//! batches with one TX burst each. Nothing here allocates: the bursts are
//! fixed-size arrays created with the worker.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use conf::counters::Counter;
use conf::state::CounterBlock;

use crate::io::{Burst, Frame, PortIo};
use crate::pipeline::{Pipeline, Verdict};

/// How a worker waits when there is nothing to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Poll {
    /// Spin forever: lowest latency, one full core per worker.
    Busy,
    /// Back off with growing sleeps after a run of empty polls, so a small box
    /// stays usable. The first packet after idling waits at most `MAX_IDLE_SLEEP`.
    Adaptive,
}

/// Empty iterations before an adaptive worker starts sleeping.
const SPIN_BEFORE_SLEEP: u32 = 512;
const MIN_IDLE_SLEEP: Duration = Duration::from_micros(10);
const MAX_IDLE_SLEEP: Duration = Duration::from_millis(1);

pub struct Worker<P: PortIo> {
    pub io: P,
    pub pipeline: Pipeline,
    rx: Burst<P::Frame>,
    tx: Vec<Burst<P::Frame>>,
    poll: Poll,
    empty_polls: u32,
    idle_sleep: Duration,
}

impl<P: PortIo> Worker<P> {
    pub fn new(io: P, pipeline: Pipeline, poll: Poll) -> Self {
        let ports = io.port_count();
        Worker {
            io,
            pipeline,
            rx: Burst::new(),
            tx: (0..ports).map(|_| Burst::new()).collect(),
            poll,
            empty_polls: 0,
            idle_sleep: MIN_IDLE_SLEEP,
        }
    }

    /// Polls every port once, handles what arrived and flushes all output.
    /// Returns the number of frames received.
    pub fn poll_once(&mut self) -> usize {
        let Worker {
            io,
            pipeline,
            rx,
            tx,
            ..
        } = self;
        let mut received = 0;
        for port in 0..tx.len() {
            io.rx_burst(port, rx);
            received += rx.len();
            for mut frame in rx.drain(..) {
                let verdict = if frame.is_contiguous() {
                    pipeline.process(port, frame.data_mut())
                } else {
                    pipeline.refuse(port, Counter::DropMultiSegment)
                };
                match verdict {
                    Verdict::Send { port: out, len } => {
                        frame.truncate(len);
                        if tx[out].is_full() {
                            flush(io, pipeline, &mut tx[out], out);
                        }
                        tx[out].push(frame);
                    }
                    Verdict::Drop(_) => drop(frame),
                }
            }
        }
        for (port, burst) in tx.iter_mut().enumerate() {
            flush(io, pipeline, burst, port);
        }
        received
    }

    /// Runs until `stop` is set, publishing counters to `shared`.
    pub fn run(&mut self, shared: &CounterBlock<'_>, stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) {
            let received = self.poll_once();
            shared.beat();
            if received > 0 {
                self.pipeline.counters.publish(shared);
                self.empty_polls = 0;
                self.idle_sleep = MIN_IDLE_SLEEP;
            } else if self.poll == Poll::Adaptive {
                self.empty_polls = self.empty_polls.saturating_add(1);
                if self.empty_polls > SPIN_BEFORE_SLEEP {
                    std::thread::sleep(self.idle_sleep);
                    self.idle_sleep = (self.idle_sleep * 2).min(MAX_IDLE_SLEEP);
                }
            }
        }
        self.pipeline.counters.publish(shared);
    }
}

fn flush<P: PortIo>(io: &mut P, pipeline: &mut Pipeline, burst: &mut Burst<P::Frame>, port: usize) {
    let queued = burst.len();
    if queued == 0 {
        return;
    }
    let mut lens = [0usize; crate::io::BURST];
    for (len, frame) in lens.iter_mut().zip(burst.iter()) {
        *len = frame.data().len();
    }
    let sent = io.tx_burst(port, burst);
    let bytes = lens[..sent].iter().sum();
    pipeline.count_tx(port, sent, queued - sent, bytes);
}
