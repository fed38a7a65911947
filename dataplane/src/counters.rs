//! A worker's counters, kept in its own cache and published to the state region.
//!
//! The pipeline bumps plain `u64`s; the worker copies them into its block of
//! the shared state region once per poll iteration that did work, so readers
//! see values at most one burst old and the hot path touches no shared lines.

use conf::counters::Counter;
use conf::state::CounterBlock;

#[derive(Clone, Debug)]
pub struct Counters([u64; Counter::COUNT]);

impl Default for Counters {
    fn default() -> Self {
        Counters([0; Counter::COUNT])
    }
}

impl Counters {
    #[inline]
    pub fn inc(&mut self, c: Counter) {
        self.add(c, 1)
    }

    #[inline]
    pub fn add(&mut self, c: Counter, n: u64) {
        let v = &mut self.0[c.index()];
        *v = v.wrapping_add(n);
    }

    /// Sets a gauge ([`Counter::is_gauge`]).
    #[inline]
    pub fn set(&mut self, c: Counter, v: u64) {
        self.0[c.index()] = v;
    }

    #[inline]
    pub fn get(&self, c: Counter) -> u64 {
        self.0[c.index()]
    }

    /// Writes every counter into the worker's shared block.
    pub fn publish(&self, block: &CounterBlock<'_>) {
        for (&c, &v) in Counter::ALL.iter().zip(self.0.iter()) {
            block.set(c, v);
        }
    }

    /// Non-zero counters by name, for logs and tests.
    pub fn nonzero(&self) -> Vec<(&'static str, u64)> {
        Counter::ALL
            .iter()
            .filter(|c| self.get(**c) != 0)
            .map(|c| (c.name(), self.get(*c)))
            .collect()
    }
}
