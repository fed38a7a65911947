//! The run-to-completion poll loop of one worker.
//!
//! Every iteration: look for a new table generation (one check, repeated
//! before every further RX burst, docs/design.md §3), take the full-NAT replies
//! other workers handed over, poll each port's RX queue of this worker, run
//! each frame through the pipeline, batch the results per
//! output port, send what else the pipeline wants sent, flush the
//! batches with one TX burst each, and expire a bounded slice of the
//! connection table. Nothing here allocates: bursts are fixed-size arrays
//! created with the worker, and the handoff queues are bounded.
//!
//! A data port's RX burst goes through the express lane in three passes
//! (see [`Pipeline::express_prepare`]): parse and hash every
//! frame and prefetch its connection-table index bucket; prefetch the
//! entries those buckets point to; then run each frame in order, prepared
//! ones through the lane (the general path when the lane declines). A SYN
//! to a VIP gets its new flow's loads started the same way, in an array of
//! its own beside the preparations: its Maglev ring slot in the first
//! pass, the bucket of the reply key it will most likely get in the second
//! (see `lb/early.rs`). A
//! packet costs two dependent cache misses (bucket, then entry) when the
//! table is larger than the caches; this way the misses of a whole burst
//! are in flight together instead of one after the other. While a port
//! delivers full bursts (up to [`MAX_BURSTS_PER_POLL`] per iteration), the
//! next burst is received and prepared between the entry prefetches of a
//! burst and its run, so those loads have a burst's time to land (what
//! that saves: docs/performance.md#worker-loop-figures). The passes change
//! nothing before the third, which looks
//! every frame up again, so a frame sees what the frames before it did,
//! in its own burst and in the one before.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use conf::counters::Counter;
use conf::state::CounterBlock;
use crossbeam_queue::ArrayQueue;

use crate::doorbell::Doorbell;
use crate::io::{Burst, Frame, PortIo, BURST};
use crate::lb::{Adopted, EarlyOut, NewFlows, Prepared, IDLE_EXPIRE_BUDGET, IDLE_EXPORT_BUDGET};
use crate::neigh_queue::{Fate, NeighQueue};
use crate::pipeline::{Lane, Pipeline};
use crate::verdict::Verdict;
use crate::wire::NicChecksum;

// `poll_once` marks the prepared frames of a burst in a `u32`.
const _: () = assert!(BURST <= 32);

/// How a worker waits when there is nothing to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Poll {
    /// Spin forever: lowest latency, one full core per worker.
    Busy,
    /// After a run of empty polls, sleep until a frame arrives: on the Rx
    /// interrupts of every rx queue of the worker and its doorbell when the
    /// ports have them ([`PortIo::can_wait`]), with a bounded timeout
    /// ([`IDLE_WAIT`]) for the housekeeping; otherwise back off with
    /// growing sleeps (the first packet after idling then waits up to
    /// `MAX_IDLE_SLEEP`).
    Adaptive,
}

/// Empty iterations before an adaptive worker starts sleeping.
const SPIN_BEFORE_SLEEP: u32 = 512;
/// The longest an adaptive worker sleeps on its Rx interrupts. Nothing
/// that needs it sooner comes without waking it (frames; handed-over
/// replies, neighbour bindings, new table generations and stop ring its
/// doorbell), so this bounds only what runs on the worker's clock: PROXY
/// header retransmissions (first after 200 ms) and parked frames' timeouts
/// fire at most this late, and the connection table keeps expiring. What
/// 100 wake-ups a second cost: docs/performance.md#worker-loop-figures.
pub const IDLE_WAIT: Duration = Duration::from_millis(10);
const MIN_IDLE_SLEEP: Duration = Duration::from_micros(10);
const MAX_IDLE_SLEEP: Duration = Duration::from_millis(1);
/// Full RX bursts a port may deliver in one poll iteration before the
/// worker moves on to the next port: enough for the two-burst overlap of
/// `poll_once` to pay, few enough that every port is polled often.
const MAX_BURSTS_PER_POLL: usize = 4;
/// Frames in each worker's handoff queue.
pub const HANDOFF_DEPTH: usize = 1024;

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
    /// Whether [`TableSource::poll`] would have something other than
    /// `Nothing` now. Called before every RX burst: one or two loads.
    fn has_news(&self, current: Option<u64>) -> bool;
    /// Called after a generation was adopted (the worker's quiescent state).
    fn adopted(&mut self, _generation: u64) {}
}

/// A table source that never has anything (tests, or tables set directly).
pub struct NoTables;

impl TableSource for NoTables {
    fn poll(&mut self, _current: Option<u64>) -> TablePoll {
        TablePoll::Nothing
    }
    fn has_news(&self, _current: Option<u64>) -> bool {
        false
    }
}

/// The queues through which workers pass full-NAT replies to the owner of
/// their local port, and the doorbells that wake a sleeping owner. Queue
/// and doorbell `i` belong to worker `i`.
pub struct Handoff<F> {
    queues: Arc<Vec<ArrayQueue<(usize, F)>>>,
    doorbells: Arc<Vec<Doorbell>>,
}

impl<F> Clone for Handoff<F> {
    fn clone(&self) -> Self {
        Handoff {
            queues: self.queues.clone(),
            doorbells: self.doorbells.clone(),
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
            doorbells: Arc::new((0..workers).map(|_| Doorbell::new()).collect()),
        }
    }

    /// Every worker's doorbell, by worker index (for others that wake them).
    pub fn doorbells(&self) -> Arc<Vec<Doorbell>> {
        self.doorbells.clone()
    }

    /// Worker `worker`'s doorbell (its I/O watches the descriptor).
    pub fn doorbell(&self, worker: usize) -> Option<&Doorbell> {
        self.doorbells.get(worker)
    }

    /// Wakes every sleeping worker (stop, new tables).
    pub fn ring_all(&self) {
        for bell in self.doorbells.iter() {
            bell.ring();
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
    /// The burst being run and the next one (see `poll_once`).
    rx: [Burst<P::Frame>; 2],
    /// The express lane's preparation of each frame of `rx[i]`; only those
    /// marked ready mean anything.
    prep: [[Prepared; BURST]; 2],
    /// New flows' picks started in the passes over `rx[i]` (`lb/early.rs`),
    /// apart from `prep` so that established packets' preparations stay
    /// small.
    early: [NewFlows; 2],
    tx: Vec<TxQueue<P::Frame>>,
    /// Frames waiting for their next hop's MAC.
    parked: NeighQueue<P::Frame>,
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
        let me = pipeline.worker();
        Worker {
            io,
            pipeline,
            clock,
            tables,
            handoff,
            me,
            rx: [Burst::new(), Burst::new()],
            prep: [[Prepared::default(); BURST]; 2],
            early: [NewFlows::default(); 2],
            tx: (0..ports).map(|_| TxQueue::new()).collect(),
            parked: NeighQueue::default(),
            poll,
            empty_polls: 0,
            idle_sleep: MIN_IDLE_SLEEP,
        }
    }

    /// Changes how the worker waits when idle.
    pub fn set_poll(&mut self, poll: Poll) {
        self.poll = poll;
    }

    /// The queues and doorbells this worker shares with the others.
    pub fn handoff(&self) -> &Handoff<P::Frame> {
        &self.handoff
    }

    /// One poll iteration. Returns the number of frames that arrived
    /// (received or handed over).
    pub fn poll_once(&mut self) -> usize {
        crate::fault::worker_checkpoint(self.me);
        let now = self.clock.now_ms();
        let Worker {
            io,
            pipeline,
            tables,
            handoff,
            me,
            rx,
            tx,
            prep,
            early,
            parked,
            ..
        } = self;
        check_tables(tables, pipeline);
        pipeline.tick(now);
        let mut received = 0;
        if let Some(q) = handoff.queues.get(*me) {
            while let Some((port, mut frame)) = q.pop() {
                received += 1;
                pipeline.count(Counter::HandoffReceived);
                let len = frame.data().len();
                let nic = frame.nic_l4_checksum();
                let lane = Lane::Unasked;
                let verdict = pipeline.process_in_lane(port, frame.buf_mut(), len, lane, nic);
                dispatch(io, pipeline, tx, (handoff, parked), frame, len, verdict);
                if pipeline.wants_transmit() {
                    transmit(io, pipeline, tx);
                }
            }
        }
        for port in 0..tx.len() {
            let express = pipeline.express_port(port);
            // Two bursts in flight: while one is run (pass 3), the next one
            // is received and prepared (pass 1), which gives the entry loads
            // of the first (pass 2) a whole burst's time to land.
            let mut cur = 0;
            io.rx_burst(port, &mut rx[cur]);
            let mut more = rx[cur].is_full();
            let to = (&mut prep[cur], &mut early[cur]);
            let mut marks = prepare_burst(pipeline, express, &rx[cur], to);
            for burst in 1.. {
                if rx[cur].is_empty() {
                    break;
                }
                received += rx[cur].len();
                prefetch_entries(pipeline, (&mut prep[cur], &mut early[cur]), marks);
                let next = cur ^ 1;
                let mut next_marks = Marks::default();
                // The generation is checked before every burst; a new one
                // is adopted only once the burst prepared under the old
                // one has run, so the next burst waits for the next round.
                let another = more && burst < MAX_BURSTS_PER_POLL;
                let changed = another && tables.has_news(pipeline.generation());
                if another && !changed {
                    io.rx_burst(port, &mut rx[next]);
                    more = rx[next].is_full();
                    let to = (&mut prep[next], &mut early[next]);
                    next_marks = prepare_burst(pipeline, express, &rx[next], to);
                }
                let burst = Prepped {
                    port,
                    frames: &mut rx[cur],
                    prep: &prep[cur],
                    early: &early[cur],
                    marks,
                };
                run_burst(io, pipeline, tx, (handoff, parked), burst);
                if changed {
                    check_tables(tables, pipeline);
                    break;
                }
                cur = next;
                marks = next_marks;
            }
        }
        // After the bursts: an answer that arrived in them sends its
        // waiting frames in this same iteration.
        if !parked.is_empty() {
            settle_parked(io, pipeline, tx, parked);
        }
        transmit(io, pipeline, tx);
        for (port, q) in tx.iter_mut().enumerate() {
            q.flush(io, pipeline, port);
        }
        received
    }

    /// Runs until `stop` is set, publishing counters to `shared`.
    pub fn run(&mut self, shared: &CounterBlock<'_>, stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) {
            let received = self.poll_once();
            shared.beat();
            if received > 0 {
                self.pipeline.counters().publish(shared);
                self.empty_polls = 0;
                self.idle_sleep = MIN_IDLE_SLEEP;
            } else if self.poll == Poll::Adaptive {
                self.empty_polls = self.empty_polls.saturating_add(1);
                if self.empty_polls > SPIN_BEFORE_SLEEP {
                    self.pipeline.counters().publish(shared);
                    if self.io.can_wait() {
                        self.sleep_until_work(shared, stop);
                    } else {
                        std::thread::sleep(self.idle_sleep);
                        self.idle_sleep = (self.idle_sleep * 2).min(MAX_IDLE_SLEEP);
                    }
                }
            }
        }
        self.pipeline.counters().publish(shared);
    }

    /// An idle adaptive worker with Rx interrupts: sleeps on them (and its
    /// doorbell) for up to [`IDLE_WAIT`] at a time until a poll finds
    /// work or `stop` is set. Each round arms the interrupts and announces
    /// the sleep first, then polls once more: whatever arrived before they
    /// were armed is found by that poll, whatever arrives after ends the
    /// wait at once.
    pub fn sleep_until_work(&mut self, shared: &CounterBlock<'_>, stop: &AtomicBool) {
        loop {
            self.io.arm();
            if let Some(bell) = self.handoff.doorbell(self.me) {
                bell.going_to_sleep();
            }
            let received = self.poll_once();
            shared.beat();
            let done = received > 0 || stop.load(Ordering::Relaxed);
            if !done {
                self.pipeline.expire(IDLE_EXPIRE_BUDGET);
                self.pipeline.export_conns(IDLE_EXPORT_BUDGET);
                self.pipeline.counters().publish(shared);
                self.io.wait(IDLE_WAIT);
            }
            if let Some(bell) = self.handoff.doorbell(self.me) {
                bell.awake();
            }
            self.io.disarm();
            if received > 0 {
                self.pipeline.counters().publish(shared);
                self.empty_polls = 0;
                self.idle_sleep = MIN_IDLE_SLEEP;
            }
            if done {
                return;
            }
        }
    }
}

/// Adopts a new table generation if there is one (or counts its refusal).
fn check_tables<T: TableSource>(tables: &mut T, pipeline: &mut Pipeline) {
    match tables.poll(pipeline.generation()) {
        TablePoll::Nothing => {}
        TablePoll::New(t) => {
            let g = t.generation;
            pipeline.adopt(*t);
            tables.adopted(g);
            pipeline.count(Counter::TablesAdopted);
        }
        TablePoll::Refused => pipeline.count(Counter::TablesRefused),
    }
}

/// Which frames of a burst pass 1 prepared (bit i: frame i, in `ready`)
/// and which are addressed to the port but were declined by the lane (in
/// `declined`; a SYN whose new flow's pick it started is marked in its
/// `NewFlows` too).
#[derive(Clone, Copy, Default)]
struct Marks {
    ready: u32,
    declined: u32,
}

/// A received burst of port `port` after passes 1 and 2, ready for pass 3.
struct Prepped<'a, F> {
    port: usize,
    frames: &'a mut Burst<F>,
    /// The lane's preparation of each frame marked ready in `marks`.
    prep: &'a [Prepared; BURST],
    /// The new flows' picks the passes started.
    early: &'a NewFlows,
    marks: Marks,
}

/// Pass 1: parses and hashes every frame the express lane may take and
/// starts the loads of their index buckets. Changes nothing.
#[inline(always)]
fn prepare_burst<F: Frame>(
    pipeline: &Pipeline,
    express: Option<[u8; 6]>,
    rx: &Burst<F>,
    (prep, early): (&mut [Prepared; BURST], &mut NewFlows),
) -> Marks {
    let mut marks = Marks::default();
    early.clear();
    let Some(mac) = express else {
        return marks;
    };
    for (i, (frame, p)) in rx.iter().zip(prep.iter_mut()).enumerate() {
        let d = frame.data();
        let ours = frame.is_contiguous() && d.get(..6) == Some(&mac[..]);
        let e = EarlyOut {
            flows: &mut *early,
            at: i,
        };
        // The lane trusts a steady segment's checksum unless the NIC
        // found it bad: then the general path judges it.
        let ok = ours
            && frame.nic_l4_checksum() != NicChecksum::Bad
            && pipeline.express_prepare(d, p, Some(e));
        marks.ready |= u32::from(ok) << i;
        marks.declined |= u32::from(ours && !ok) << i;
    }
    marks
}

/// Pass 2: with the index buckets (mostly) in, starts the loads of the
/// entries they point to, and for new flows the loads of their reply
/// keys' buckets. Changes nothing but the hints in `prep`, the picks in
/// `early` (and the count of local tuples guessed ahead).
#[inline(always)]
fn prefetch_entries(
    pipeline: &Pipeline,
    (prep, early): (&mut [Prepared; BURST], &mut NewFlows),
    marks: Marks,
) {
    let mut left = marks.ready;
    while left != 0 {
        let i = left.trailing_zeros() as usize;
        left &= left - 1;
        if let Some(p) = prep.get_mut(i) {
            pipeline.express_prefetch(p);
        }
    }
    let mut left = early.marks();
    while left != 0 {
        let i = left.trailing_zeros() as usize;
        left &= left - 1;
        if let Some(e) = early.get_mut(i) {
            pipeline.early_prefetch(e);
        }
    }
}

/// Pass 3: each frame of the burst through the pipeline, in order;
/// prepared ones through the express lane (which looks each up again, so a
/// frame sees what the frames before it did).
#[inline(always)]
fn run_burst<P: PortIo>(
    io: &mut P,
    pipeline: &mut Pipeline,
    tx: &mut [TxQueue<P::Frame>],
    (handoff, parked): (&Handoff<P::Frame>, &mut NeighQueue<P::Frame>),
    burst: Prepped<'_, P::Frame>,
) {
    let Prepped {
        port,
        frames: rx,
        prep,
        early,
        marks,
    } = burst;
    for (i, mut frame) in rx.drain(..).enumerate() {
        if !frame.is_contiguous() && !unchain(&mut frame) {
            let verdict = pipeline.refuse(port, Counter::DropChainTooLong);
            dispatch(io, pipeline, tx, (handoff, parked), frame, 0, verdict);
            continue;
        }
        let len = frame.data().len();
        let verdict = match prep.get(i) {
            Some(p) if marks.ready >> i & 1 != 0 => {
                let nic = frame.nic_l4_checksum();
                pipeline.process_in_lane(port, frame.buf_mut(), len, Lane::Prepared(p), nic)
            }
            _ if marks.declined >> i & 1 != 0 => {
                let nic = frame.nic_l4_checksum();
                let lane = match early.get(i) {
                    Some(e) => Lane::NewFlow(e),
                    None => Lane::Declined,
                };
                pipeline.process_in_lane(port, frame.buf_mut(), len, lane, nic)
            }
            _ if frame.is_contiguous() => {
                let nic = frame.nic_l4_checksum();
                pipeline.process_in_lane(port, frame.buf_mut(), len, Lane::Unasked, nic)
            }
            // Chained frames were made contiguous above.
            _ => pipeline.refuse(port, Counter::DropChainTooLong),
        };
        dispatch(io, pipeline, tx, (handoff, parked), frame, len, verdict);
        if pipeline.wants_transmit() {
            transmit(io, pipeline, tx);
        }
    }
}

/// A frame that arrived in several buffers (scattered Rx of a frame
/// longer than one buffer), made contiguous so that every stage sees the
/// whole packet in one slice: headers, payload for checksums, and the
/// tailroom a PROXY header grows into. False: it does not fit in one buffer.
#[cold]
#[inline(never)]
fn unchain<F: Frame>(frame: &mut F) -> bool {
    frame.linearize()
}

/// Frames queued for one port's next TX burst, with their lengths (for
/// the byte counters of what the port accepts).
struct TxQueue<F> {
    frames: Burst<F>,
    lens: [u32; BURST],
    /// The sum of `lens[..frames.len()]`.
    bytes: usize,
}

impl<F: Frame> TxQueue<F> {
    fn new() -> Self {
        TxQueue {
            frames: Burst::new(),
            lens: [0; BURST],
            bytes: 0,
        }
    }

    /// Queues a frame, sending the queue first when it is full.
    #[inline(always)]
    fn push<P: PortIo<Frame = F>>(
        &mut self,
        io: &mut P,
        pipeline: &mut Pipeline,
        port: usize,
        frame: F,
    ) {
        if self.frames.is_full() {
            self.flush(io, pipeline, port);
        }
        let n = self.frames.len();
        let len = frame.data().len();
        if let Some(l) = self.lens.get_mut(n) {
            *l = len as u32;
        }
        self.bytes += len;
        self.frames.push(frame);
    }

    /// Sends what is queued with one TX burst and counts it.
    fn flush<P: PortIo<Frame = F>>(&mut self, io: &mut P, pipeline: &mut Pipeline, port: usize) {
        let queued = self.frames.len();
        if queued == 0 {
            return;
        }
        let sent = io.tx_burst(port, &mut self.frames);
        let bytes = if sent >= queued {
            self.bytes
        } else {
            self.lens[..sent.min(queued)]
                .iter()
                .map(|&l| l as usize)
                .sum()
        };
        self.bytes = 0;
        pipeline.count_tx(port, sent, queued - sent.min(queued), bytes);
    }
}

/// Carries out a verdict on a frame.
#[inline(always)]
fn dispatch<P: PortIo>(
    io: &mut P,
    pipeline: &mut Pipeline,
    tx: &mut [TxQueue<P::Frame>],
    (handoff, parked): (&Handoff<P::Frame>, &mut NeighQueue<P::Frame>),
    mut frame: P::Frame,
    received_len: usize,
    verdict: Verdict,
) {
    match verdict {
        Verdict::Send { port: out, len } => {
            let Some(q) = tx.get_mut(out) else {
                pipeline.count(Counter::DropNoRoute);
                return;
            };
            if !frame.set_len(len) {
                pipeline.count(Counter::DropNoAllocation);
                return;
            }
            q.push(io, pipeline, out, frame);
        }
        Verdict::Drop(_) => drop(frame),
        Verdict::Handoff { worker } => hand_off(pipeline, handoff, frame, received_len, worker),
        Verdict::Park { port, len, hop } => park(pipeline, parked, frame, port, len, hop),
    }
}

/// Keeps a frame until its next hop is resolved ([`NeighQueue`]).
#[cold]
#[inline(never)]
fn park<F: Frame>(
    pipeline: &mut Pipeline,
    parked: &mut NeighQueue<F>,
    mut frame: F,
    port: usize,
    len: usize,
    hop: crate::neigh::Slot,
) {
    if !frame.set_len(len) {
        pipeline.count(Counter::DropNoAllocation);
        return;
    }
    match parked.park(frame, port, hop, pipeline.now_ms()) {
        Ok(()) => pipeline.count(Counter::NeighborQueued),
        Err(_) => pipeline.count(Counter::DropNeighborQueueFull),
    }
}

/// Sends the parked frames whose next hop is now known and drops those
/// that waited too long.
#[cold]
#[inline(never)]
fn settle_parked<P: PortIo>(
    io: &mut P,
    pipeline: &mut Pipeline,
    tx: &mut [TxQueue<P::Frame>],
    parked: &mut NeighQueue<P::Frame>,
) {
    let now = pipeline.now_ms();
    let mut ready: arrayvec::ArrayVec<(P::Frame, usize, [u8; 6]), { crate::neigh_queue::TOTAL }> =
        arrayvec::ArrayVec::new();
    let mut expired = 0;
    parked.settle(
        now,
        |hop, port, waited| pipeline.parked_fate(port, hop, waited),
        |frame, port, fate| match fate {
            Fate::Send(mac) => ready.push((frame, port, mac)),
            _ => expired += 1,
        },
    );
    for _ in 0..expired {
        pipeline.count(Counter::DropNeighborQueueTimeout);
    }
    for (mut frame, port, mac) in ready {
        if let (Some(dst), Some(q)) = (frame.data_mut().get_mut(..6), tx.get_mut(port)) {
            dst.copy_from_slice(&mac);
            q.push(io, pipeline, port, frame);
        }
    }
}

/// Passes a full-NAT reply to the worker that owns its local port.
#[cold]
#[inline(never)]
fn hand_off<F: Frame>(
    pipeline: &mut Pipeline,
    handoff: &Handoff<F>,
    mut frame: F,
    received_len: usize,
    worker: usize,
) {
    // The frame goes over unchanged, as it was received.
    frame.set_len(received_len);
    let port = pipeline.last_in_port();
    match handoff.queues.get(worker).map(|q| q.push((port, frame))) {
        Some(Ok(())) => {
            pipeline.count(Counter::HandoffSent);
            if let Some(bell) = handoff.doorbells.get(worker) {
                bell.ring();
            }
        }
        _ => pipeline.count(Counter::DropHandoffFull),
    }
}

/// Queues the frames the pipeline wants sent besides the received ones
/// (neighbour requests, the rest of a split segment, PROXY headers) right
/// behind what it sent, so a split segment's parts leave in order.
/// Cold: most packets have nothing to send after them, and the packet loop
/// stays tight without it (instructions per packet by callgrind:
/// docs/performance.md#instructions-per-packet-callgrind).
#[cold]
#[inline(never)]
fn transmit<P: PortIo>(io: &mut P, pipeline: &mut Pipeline, tx: &mut [TxQueue<P::Frame>]) {
    while let Some((port, frame)) = pipeline.poll_transmit(|len| io.alloc(len)) {
        if let Some(q) = tx.get_mut(port) {
            q.push(io, pipeline, port, frame);
        }
    }
}
