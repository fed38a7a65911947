//! Frames the pipeline asks its worker to send besides the one it was
//! handed (the rest of a split first segment, header retransmissions), and
//! the per-worker retransmission timers of standalone headers.
//!
//! Both are fixed-size and allocated with the worker; nothing here
//! allocates afterwards.

use conf::counters::Counter;

use crate::counters::Counters;

/// Largest frame the emit queue holds.
pub const EMIT_FRAME: usize = 2048;
/// Frames the emit queue holds.
pub const EMIT_SLOTS: usize = 32;
/// Largest frame a retransmission timer keeps (headers + PPv2 header).
pub const TIMER_FRAME: usize = 1024;
/// Standalone headers awaiting their ACK, per worker.
pub const TIMER_SLOTS: usize = 256;
/// First retransmission after this long; doubled after each one.
pub const RTO_INITIAL_MS: u64 = 200;
/// Retransmissions before giving up on a standalone header.
pub const RTO_TRIES: u8 = 7;

/// A bounded FIFO of frames to send, each with its output port.
pub struct EmitQueue {
    frames: Vec<[u8; EMIT_FRAME]>,
    meta: [(u16, u16); EMIT_SLOTS],
    head: usize,
    len: usize,
}

impl Default for EmitQueue {
    fn default() -> Self {
        EmitQueue {
            frames: vec![[0u8; EMIT_FRAME]; EMIT_SLOTS],
            meta: [(0, 0); EMIT_SLOTS],
            head: 0,
            len: 0,
        }
    }
}

impl EmitQueue {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn is_full(&self) -> bool {
        self.len == EMIT_SLOTS
    }

    /// Queues the frame `write` produces in a free slot (it returns the
    /// frame length, or `None` to queue nothing). False when no slot was
    /// free or nothing was written.
    pub fn push_with(
        &mut self,
        port: usize,
        write: impl FnOnce(&mut [u8]) -> Option<usize>,
    ) -> bool {
        if self.is_full() {
            return false;
        }
        let i = (self.head + self.len) % EMIT_SLOTS;
        match write(&mut self.frames[i][..]) {
            Some(n) if n <= EMIT_FRAME && n > 0 => {
                self.meta[i] = (port as u16, n as u16);
                self.len += 1;
                true
            }
            _ => false,
        }
    }

    /// The oldest queued frame and its port.
    pub fn front(&self) -> Option<(usize, &[u8])> {
        if self.len == 0 {
            return None;
        }
        let (port, n) = self.meta[self.head];
        Some((usize::from(port), &self.frames[self.head][..usize::from(n)]))
    }

    /// Removes the oldest queued frame.
    pub fn pop(&mut self) {
        if self.len > 0 {
            self.head = (self.head + 1) % EMIT_SLOTS;
            self.len -= 1;
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Slot<K> {
    live: bool,
    entry: Option<K>,
    conn_id: u64,
    due: u64,
    tries: u8,
    port: u16,
    len: u16,
}

/// Retransmission timers of standalone headers: a copy of the segment that
/// carried the header, re-sent with exponential backoff until the flow says
/// the backend acknowledged it (or is gone).
pub struct Timers<K> {
    slots: Vec<Slot<K>>,
    frames: Vec<[u8; TIMER_FRAME]>,
    active: usize,
}

impl<K: Copy> Default for Timers<K> {
    fn default() -> Self {
        let free = Slot {
            live: false,
            entry: None,
            conn_id: 0,
            due: 0,
            tries: 0,
            port: 0,
            len: 0,
        };
        Timers {
            slots: vec![free; TIMER_SLOTS],
            frames: vec![[0u8; TIMER_FRAME]; TIMER_SLOTS],
            active: 0,
        }
    }
}

/// What a timer asks about its flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pending {
    /// Not acknowledged yet: send again.
    Resend,
    /// Acknowledged, or the flow is closing or gone: forget the timer.
    Done,
}

impl<K: Copy> Timers<K> {
    /// Timers running.
    pub fn active(&self) -> usize {
        self.active
    }

    /// Starts a timer for `frame` (sent on `port`) of flow `entry`/`conn_id`.
    /// False when every slot is taken or the frame is too long.
    pub fn arm(&mut self, entry: K, conn_id: u64, now: u64, port: usize, frame: &[u8]) -> bool {
        if frame.len() > TIMER_FRAME || self.active == TIMER_SLOTS {
            return false;
        }
        let Some(i) = self.slots.iter().position(|s| !s.live) else {
            return false;
        };
        self.frames[i][..frame.len()].copy_from_slice(frame);
        self.slots[i] = Slot {
            live: true,
            entry: Some(entry),
            conn_id,
            due: now + RTO_INITIAL_MS,
            tries: 0,
            port: port as u16,
            len: frame.len() as u16,
        };
        self.active += 1;
        true
    }

    /// Runs the timers due at `now`: asks `check` about each one's flow
    /// (entry, connection id) and queues a copy of the
    /// frame for those still unacknowledged, while `emits` has room.
    pub fn tick(
        &mut self,
        now: u64,
        mut check: impl FnMut(K, u64) -> Pending,
        emits: &mut EmitQueue,
        counters: &mut Counters,
    ) {
        if self.active == 0 {
            return;
        }
        for i in 0..self.slots.len() {
            let s = self.slots[i];
            if !s.live || now < s.due {
                continue;
            }
            let done = match s.entry {
                Some(e) => check(e, s.conn_id) == Pending::Done,
                None => true,
            };
            if done {
                self.slots[i].live = false;
                self.active -= 1;
                continue;
            }
            if s.tries >= RTO_TRIES {
                counters.inc(Counter::PpRetransmitGaveUp);
                self.slots[i].live = false;
                self.active -= 1;
                continue;
            }
            let frame = &self.frames[i][..usize::from(s.len)];
            if !emits.push_with(usize::from(s.port), |out| {
                out.get_mut(..frame.len())?.copy_from_slice(frame);
                Some(frame.len())
            }) {
                // No room now: the next tick tries again.
                return;
            }
            counters.inc(Counter::PpHeadersRetransmitted);
            let slot = &mut self.slots[i];
            slot.tries += 1;
            slot.due = now + (RTO_INITIAL_MS << slot.tries.min(10));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emit_queue_is_a_bounded_fifo() {
        let mut q = EmitQueue::default();
        for i in 0..EMIT_SLOTS {
            assert!(q.push_with(i, |b| {
                b[0] = i as u8;
                Some(1)
            }));
        }
        assert!(!q.push_with(0, |_| Some(1)));
        assert!(!EmitQueue::default().push_with(0, |_| None));
        for i in 0..EMIT_SLOTS {
            let (port, f) = q.front().unwrap();
            assert_eq!((port, f), (i, &[i as u8][..]));
            q.pop();
        }
        assert!(q.front().is_none());
    }

    #[test]
    fn timers_back_off_and_stop() {
        let mut t: Timers<u32> = Timers::default();
        let mut q = EmitQueue::default();
        let mut c = Counters::default();
        assert!(t.arm(3, 9, 0, 1, &[1, 2, 3]));
        t.tick(100, |_, _| Pending::Resend, &mut q, &mut c);
        assert!(q.is_empty());
        t.tick(
            200,
            |e, cid| {
                assert_eq!((e, cid), (3, 9));
                Pending::Resend
            },
            &mut q,
            &mut c,
        );
        assert_eq!(q.front(), Some((1, &[1u8, 2, 3][..])));
        q.pop();
        t.tick(500, |_, _| Pending::Resend, &mut q, &mut c);
        assert!(q.is_empty(), "next one at 600");
        t.tick(600, |_, _| Pending::Done, &mut q, &mut c);
        assert_eq!(t.active(), 0);
        assert_eq!(c.get(Counter::PpHeadersRetransmitted), 1);
    }
}
