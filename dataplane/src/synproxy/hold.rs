//! Client segments that arrive between the cookie ACK and the backend's
//! SYN-ACK (the ACK itself and data sent with or right after it), held by
//! copy until the backend's handshake completes. Bounded per connection
//! ([`PER_FLOW`]) and per worker ([`SLOTS`]); allocated once, nothing
//! allocates afterwards. A segment that finds no room is dropped and
//! counted: the client retransmits it.

/// Largest frame held.
pub const FRAME: usize = 2048;
/// Frames a worker holds.
pub const SLOTS: usize = 256;
/// Frames one connection holds.
pub const PER_FLOW: usize = 8;
/// A held frame whose backend has not answered after this long goes.
pub const MAX_AGE_MS: u64 = 5_000;

#[derive(Clone, Copy, Debug)]
struct Meta {
    live: bool,
    /// The connection-table slot ([`crate::conntrack::EntryId::index`]).
    entry: u32,
    conn_id: u64,
    order: u64,
    at_ms: u64,
    len: u16,
}

/// Why a frame was not held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotHeld {
    /// Larger than [`FRAME`].
    TooLarge,
    /// The connection holds [`PER_FLOW`] frames, or every slot is taken.
    Full,
}

/// The worker's held frames.
pub struct Hold {
    meta: Box<[Meta]>,
    frames: Box<[[u8; FRAME]]>,
    order: u64,
    live: usize,
}

impl Default for Hold {
    fn default() -> Self {
        Hold {
            meta: vec![
                Meta {
                    live: false,
                    entry: 0,
                    conn_id: 0,
                    order: 0,
                    at_ms: 0,
                    len: 0
                };
                SLOTS
            ]
            .into_boxed_slice(),
            frames: vec![[0u8; FRAME]; SLOTS].into_boxed_slice(),
            order: 0,
            live: 0,
        }
    }
}

impl Hold {
    /// Frames held now.
    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Holds a copy of `frame` for connection (`entry`, `conn_id`) at `now`.
    /// First drops frames older than [`MAX_AGE_MS`] if the worker is full
    /// (their number is returned with the outcome).
    pub fn put(
        &mut self,
        entry: u32,
        conn_id: u64,
        frame: &[u8],
        now: u64,
    ) -> (Result<(), NotHeld>, usize) {
        if frame.len() > FRAME {
            return (Err(NotHeld::TooLarge), 0);
        }
        let mine = self.of(entry, conn_id).count();
        if mine >= PER_FLOW {
            return (Err(NotHeld::Full), 0);
        }
        let expired = if self.live == SLOTS {
            self.expire(now)
        } else {
            0
        };
        let Some(i) = self.meta.iter().position(|m| !m.live) else {
            return (Err(NotHeld::Full), expired);
        };
        self.frames[i][..frame.len()].copy_from_slice(frame);
        self.order += 1;
        self.meta[i] = Meta {
            live: true,
            entry,
            conn_id,
            order: self.order,
            at_ms: now,
            len: frame.len() as u16,
        };
        self.live += 1;
        (Ok(()), expired)
    }

    fn of(&self, entry: u32, conn_id: u64) -> impl Iterator<Item = usize> + '_ {
        self.meta
            .iter()
            .enumerate()
            .filter(move |(_, m)| m.live && m.entry == entry && m.conn_id == conn_id)
            .map(|(i, _)| i)
    }

    /// Drops every frame older than [`MAX_AGE_MS`]; returns how many.
    pub fn expire(&mut self, now: u64) -> usize {
        let mut n = 0;
        for m in self.meta.iter_mut() {
            if m.live && now.saturating_sub(m.at_ms) >= MAX_AGE_MS {
                m.live = false;
                n += 1;
            }
        }
        self.live -= n;
        n
    }

    /// Takes the oldest frame held for the connection, copied into `out`:
    /// its length, or `None` when none is left.
    pub fn take_next(&mut self, entry: u32, conn_id: u64, out: &mut [u8]) -> Option<usize> {
        let i = self
            .of(entry, conn_id)
            .min_by_key(|&i| self.meta[i].order)?;
        let n = usize::from(self.meta[i].len);
        self.meta[i].live = false;
        self.live -= 1;
        let dst = out.get_mut(..n)?;
        dst.copy_from_slice(&self.frames[i][..n]);
        Some(n)
    }

    /// Drops every frame of the connection; returns how many.
    pub fn drop_flow(&mut self, entry: u32, conn_id: u64) -> usize {
        let mut n = 0;
        for m in self.meta.iter_mut() {
            if m.live && m.entry == entry && m.conn_id == conn_id {
                m.live = false;
                n += 1;
            }
        }
        self.live -= n;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u32) -> u32 {
        n
    }

    #[test]
    fn frames_come_back_in_order_per_flow_and_bounded() {
        let mut h = Hold::default();
        for i in 0..PER_FLOW as u8 {
            assert_eq!(h.put(id(1), 7, &[i; 10], 0).0, Ok(()));
            assert_eq!(h.put(id(2), 9, &[100 + i; 3], 0).0, Ok(()));
        }
        assert_eq!(h.put(id(1), 7, &[0; 10], 0).0, Err(NotHeld::Full));
        assert_eq!(
            h.put(id(1), 7, &[0; FRAME + 1], 0).0,
            Err(NotHeld::TooLarge)
        );
        // Another connection in the same slot (conn_id differs) has none.
        let mut out = [0u8; FRAME];
        assert_eq!(h.take_next(id(1), 8, &mut out), None);
        for i in 0..PER_FLOW as u8 {
            assert_eq!(h.take_next(id(1), 7, &mut out), Some(10));
            assert_eq!(out[0], i);
        }
        assert_eq!(h.take_next(id(1), 7, &mut out), None);
        assert_eq!(h.drop_flow(id(2), 9), PER_FLOW);
        assert!(h.is_empty());
    }

    #[test]
    fn a_full_worker_gives_up_old_frames_only() {
        let mut h = Hold::default();
        for i in 0..SLOTS as u32 {
            assert_eq!(h.put(id(i), 1, &[1], 10).0, Ok(()));
        }
        assert_eq!(
            h.put(id(9999), 1, &[1], 10 + MAX_AGE_MS - 1),
            (Err(NotHeld::Full), 0)
        );
        assert_eq!(h.put(id(9999), 1, &[1], 10 + MAX_AGE_MS), (Ok(()), SLOTS));
        assert_eq!(h.len(), 1);
    }
}
