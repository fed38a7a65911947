//! The run-to-completion poll loop of one worker.
//!
//! Every iteration: look for a new table generation (one check), take the
//! full-NAT replies other workers handed over, poll each port's RX queue of
//! this worker, run each frame through the pipeline, batch the results per
//! output port, send the neighbour requests the pipeline asked for, flush the
//! batches with one TX burst each, and expire a bounded slice of the
//! connection table. Nothing here allocates: bursts are fixed-size arrays
//! created with the worker, and the handoff queues are bounded.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arrayvec::ArrayVec;
use conf::counters::Counter;
use conf::state::CounterBlock;
use crossbeam_queue::ArrayQueue;

use crate::io::{Burst, Frame, PortIo, BURST};
use crate::lb::{Adopted, Prepared};
use crate::neigh;
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
/// Frames in each worker's handoff queue.
pub const HANDOFF_DEPTH: usize = 1024;
/// Room for a generated ARP request or neighbour solicitation.
const REQUEST_FRAME_LEN: usize = 86;

/// Milliseconds on a monotonic clock, read once per poll iteration.
pub trait Clock: Send {
    fn now_ms(&self) -> u64;
}

/// What a [`TableSource`] has for the worker.
pub enum TablePoll {
    /// Nothing new.
    Nothing,
    /// A validated generation to adopt.
    New(Box<Adopted<'static>>),
    /// A new generation was published but failed validation; the worker
    /// keeps its tables and counts the refusal.
    Refused,
}

/// Where a worker finds table generations.
pub trait TableSource: Send {
    /// A generation other than `current`, validated and ready to adopt, if
    /// there is one. Called once per poll iteration: must be cheap when
    /// nothing changed.
    fn poll(&mut self, current: Option<u64>) -> TablePoll;
    /// Called after a generation was adopted (the worker's quiescent state).
    fn adopted(&mut self, _generation: u64) {}
}

/// A table source that never has anything (tests, or tables set directly).
pub struct NoTables;

impl TableSource for NoTables {
    fn poll(&mut self, _current: Option<u64>) -> TablePoll {
        TablePoll::Nothing
    }
}

/// The queues through which workers pass full-NAT replies to the owner of
/// their local port. Queue `i` is drained only by worker `i`.
pub struct Handoff<F> {
    queues: Arc<Vec<ArrayQueue<(usize, F)>>>,
}

impl<F> Clone for Handoff<F> {
    fn clone(&self) -> Self {
        Handoff {
            queues: self.queues.clone(),
        }
    }
}

impl<F> Handoff<F> {
    pub fn new(workers: usize) -> Self {
        Handoff {
            queues: Arc::new(
                (0..workers)
                    .map(|_| ArrayQueue::new(HANDOFF_DEPTH))
                    .collect(),
            ),
        }
    }
}

pub struct Worker<P: PortIo, C: Clock, T: TableSource> {
    pub io: P,
    pub pipeline: Pipeline,
    clock: C,
    tables: T,
    handoff: Handoff<P::Frame>,
    me: usize,
    rx: Burst<P::Frame>,
    /// The express lane's preparation of each frame of `rx` (see `poll_once`).
    prep: ArrayVec<Option<Prepared>, BURST>,
    tx: Vec<Burst<P::Frame>>,
    poll: Poll,
    empty_polls: u32,
    idle_sleep: Duration,
}

impl<P: PortIo, C: Clock, T: TableSource> Worker<P, C, T> {
    pub fn new(
        io: P,
        pipeline: Pipeline,
        poll: Poll,
        clock: C,
        tables: T,
        handoff: Handoff<P::Frame>,
    ) -> Self {
        let ports = io.port_count();
        let me = pipeline.lb.worker;
        Worker {
            io,
            pipeline,
            clock,
            tables,
            handoff,
            me,
            rx: Burst::new(),
            prep: ArrayVec::new(),
            tx: (0..ports).map(|_| Burst::new()).collect(),
            poll,
            empty_polls: 0,
            idle_sleep: MIN_IDLE_SLEEP,
        }
    }

    /// One poll iteration. Returns the number of frames that arrived
    /// (received or handed over).
    pub fn poll_once(&mut self) -> usize {
        let now = self.clock.now_ms();
        match self.tables.poll(self.pipeline.lb.generation()) {
            TablePoll::Nothing => {}
            TablePoll::New(t) => {
                let g = t.generation;
                self.pipeline.lb.adopt(*t);
                self.tables.adopted(g);
                self.pipeline.counters.inc(Counter::TablesAdopted);
            }
            TablePoll::Refused => self.pipeline.counters.inc(Counter::TablesRefused),
        }
        let Worker {
            io,
            pipeline,
            handoff,
            me,
            rx,
            tx,
            prep,
            ..
        } = self;
        pipeline.lb.tick(now, &mut pipeline.counters);
        let mut received = 0;
        if let Some(q) = handoff.queues.get(*me) {
            while let Some((port, mut frame)) = q.pop() {
                received += 1;
                pipeline.counters.inc(Counter::HandoffReceived);
                let len = frame.data().len();
                let verdict = pipeline.process_buf(port, frame.buf_mut(), len);
                dispatch(io, pipeline, tx, handoff, frame, len, verdict);
                if !pipeline.lb.pp.emits.is_empty() {
                    send_emits(io, pipeline, tx);
                }
            }
        }
        for port in 0..tx.len() {
            io.rx_burst(port, rx);
            received += rx.len();
            prep.clear();
            if let Some(mac) = pipeline.express_port(port) {
                // Pass 1: parse and hash every frame the express lane may
                // take, starting the loads of their index buckets; pass 2:
                // with the buckets (mostly) in, start the loads of their
                // entries. The misses of the whole burst overlap instead of
                // coming one after the other, two per frame.
                for frame in rx.iter() {
                    let d = frame.data();
                    prep.push(if frame.is_contiguous() && d.get(..6) == Some(&mac[..]) {
                        pipeline.lb.express_prepare(d)
                    } else {
                        None
                    });
                }
                for p in prep.iter().flatten() {
                    pipeline.lb.express_prefetch(p);
                }
            }
            // Pass 3: each frame through the pipeline, in order.
            for (i, mut frame) in rx.drain(..).enumerate() {
                let len = frame.data().len();
                let verdict = if let Some(Some(p)) = prep.get(i) {
                    pipeline.process_prepared(port, frame.buf_mut(), len, p)
                } else if frame.is_contiguous() {
                    pipeline.process_buf(port, frame.buf_mut(), len)
                } else {
                    pipeline.refuse(port, Counter::DropMultiSegment)
                };
                dispatch(io, pipeline, tx, handoff, frame, len, verdict);
                if !pipeline.lb.pp.emits.is_empty() {
                    send_emits(io, pipeline, tx);
                }
            }
        }
        send_requests(io, pipeline, tx);
        send_emits(io, pipeline, tx);
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
                    self.pipeline.counters.publish(shared);
                    std::thread::sleep(self.idle_sleep);
                    self.idle_sleep = (self.idle_sleep * 2).min(MAX_IDLE_SLEEP);
                }
            }
        }
        self.pipeline.counters.publish(shared);
    }
}

fn dispatch<P: PortIo>(
    io: &mut P,
    pipeline: &mut Pipeline,
    tx: &mut [Burst<P::Frame>],
    handoff: &Handoff<P::Frame>,
    mut frame: P::Frame,
    received_len: usize,
    verdict: Verdict,
) {
    match verdict {
        Verdict::Send { port: out, len } => {
            let Some(burst) = tx.get_mut(out) else {
                pipeline.counters.inc(Counter::DropNoRoute);
                return;
            };
            if !frame.set_len(len) {
                pipeline.counters.inc(Counter::DropNoAllocation);
                return;
            }
            if burst.is_full() {
                flush(io, pipeline, burst, out);
            }
            burst.push(frame);
        }
        Verdict::Drop(_) => drop(frame),
        Verdict::Handoff { worker } => {
            // The frame goes over unchanged, as it was received.
            frame.set_len(received_len);
            let port = frame_port_hint(pipeline);
            match handoff.queues.get(worker).map(|q| q.push((port, frame))) {
                Some(Ok(())) => pipeline.counters.inc(Counter::HandoffSent),
                _ => pipeline.counters.inc(Counter::DropHandoffFull),
            }
        }
    }
}

/// The port a handed-over frame is processed as arriving on: the pipeline
/// records it while handling the frame.
fn frame_port_hint(pipeline: &Pipeline) -> usize {
    pipeline.last_in_port()
}

/// Queues the extra frames the pipeline asked for (the rest of a split
/// segment, PROXY header retransmissions) right behind what it sent, so a
/// split segment's parts leave in order.
fn send_emits<P: PortIo>(io: &mut P, pipeline: &mut Pipeline, tx: &mut [Burst<P::Frame>]) {
    while let Some((port, bytes)) = pipeline.lb.pp.emits.front() {
        let Some(burst) = tx.get_mut(port) else {
            pipeline.lb.pp.emits.pop();
            continue;
        };
        let Some(mut frame) = io.alloc(bytes.len()) else {
            pipeline.lb.pp.emits.pop();
            pipeline.counters.inc(Counter::DropNoAllocation);
            continue;
        };
        let n = bytes.len();
        match frame.data_mut().get_mut(..n) {
            Some(d) => d.copy_from_slice(bytes),
            None => {
                pipeline.lb.pp.emits.pop();
                pipeline.counters.inc(Counter::DropNoAllocation);
                continue;
            }
        }
        frame.set_len(n);
        pipeline.lb.pp.emits.pop();
        if burst.is_full() {
            flush(io, pipeline, burst, port);
        }
        burst.push(frame);
    }
}

/// Writes and queues the ARP requests / neighbour solicitations the pipeline asked for.
fn send_requests<P: PortIo>(io: &mut P, pipeline: &mut Pipeline, tx: &mut [Burst<P::Frame>]) {
    while let Some(req) = pipeline.lb.requests.pop() {
        let Some(info) = pipeline.ports().get(req.port) else {
            continue;
        };
        let mac = info.mac;
        let Some(mut frame) = io.alloc(REQUEST_FRAME_LEN) else {
            pipeline.counters.inc(Counter::DropNoAllocation);
            continue;
        };
        let len = match req.target {
            IpAddr::V4(t) => info
                .addrs_v4
                .first()
                .and_then(|s| neigh::write_arp_request(frame.data_mut(), mac, *s, t)),
            IpAddr::V6(t) => info
                .addrs_v6
                .iter()
                .find(|a| !a.is_unicast_link_local())
                .or(info.addrs_v6.first())
                .and_then(|s| neigh::write_neighbor_solicitation(frame.data_mut(), mac, *s, t)),
        };
        let Some(len) = len else {
            continue;
        };
        frame.set_len(len);
        pipeline.counters.inc(Counter::NeighborRequests);
        if let Some(burst) = tx.get_mut(req.port) {
            if burst.is_full() {
                flush(io, pipeline, burst, req.port);
            }
            burst.push(frame);
        }
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
