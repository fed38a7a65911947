//! The agent's pool of tunnels: which are open, which are busy, how many
//! are being dialled, and the two decisions the pool makes (docs/fleet.md):
//! open `grow_by` more when fewer than `min_idle` are idle (up to
//! `max_tunnels`), and let a tunnel idle for `idle_timeout` close while more
//! than `min_idle` are idle.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// The pool's numbers (`[mgmt.agent]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Open more when fewer than this many are idle.
    pub min_idle: usize,
    /// How many to open at once.
    pub grow_by: usize,
    /// Upper bound of open plus dialling tunnels.
    pub max_tunnels: usize,
    /// An idle tunnel above `min_idle` closes after this long.
    pub idle_timeout: Duration,
}

impl Limits {
    /// How many tunnels to start dialling now, given how many are `idle`,
    /// being `dialing` (they will be idle), and `open`.
    pub fn to_open(&self, idle: usize, dialing: usize, open: usize) -> usize {
        if idle + dialing >= self.min_idle {
            return 0;
        }
        self.grow_by
            .min(self.max_tunnels.saturating_sub(open + dialing))
    }
}

/// One open tunnel's state.
#[derive(Debug)]
pub struct TunnelState {
    active: AtomicUsize,
    idle_since: Mutex<Instant>,
    retiring: AtomicBool,
}

impl TunnelState {
    fn idle(&self) -> bool {
        self.active.load(Ordering::SeqCst) == 0 && !self.retiring.load(Ordering::SeqCst)
    }
}

/// The pool.
#[derive(Debug)]
pub struct Pool {
    /// Its numbers.
    pub limits: Limits,
    tunnels: Mutex<Vec<Arc<TunnelState>>>,
    dialing: AtomicUsize,
    /// Signalled whenever a tunnel opens, closes, turns busy or idle.
    pub changed: Notify,
}

/// What the pool looks like now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    /// Open tunnels.
    pub open: usize,
    /// Open tunnels with no request stream.
    pub idle: usize,
    /// Tunnels being dialled.
    pub dialing: usize,
}

impl Pool {
    /// An empty pool.
    pub fn new(limits: Limits) -> Pool {
        Pool {
            limits,
            tunnels: Mutex::new(Vec::new()),
            dialing: AtomicUsize::new(0),
            changed: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<TunnelState>>> {
        self.tunnels.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts.
    pub fn snapshot(&self) -> Snapshot {
        let t = self.lock();
        Snapshot {
            open: t.len(),
            idle: t.iter().filter(|s| s.idle()).count(),
            dialing: self.dialing.load(Ordering::SeqCst),
        }
    }

    /// Reserves `n` dialling slots when the pool needs them: how many.
    pub fn reserve_dials(&self) -> usize {
        let s = self.snapshot();
        let n = self.limits.to_open(s.idle, s.dialing, s.open);
        self.dialing.fetch_add(n, Ordering::SeqCst);
        n
    }

    /// While the gateways are failing: one dialling slot, only when none is
    /// in use (that dial retries with the backoff until one is accepted),
    /// and only if the pool needs a tunnel. Growing by `grow_by` then would
    /// send `grow_by` dials at a gateway that drops them.
    pub fn reserve_probe(&self) -> usize {
        let s = self.snapshot();
        if s.dialing > 0 {
            return 0;
        }
        let n = self.limits.to_open(s.idle, s.dialing, s.open).min(1);
        self.dialing.fetch_add(n, Ordering::SeqCst);
        n
    }

    /// A dial gave up (shutdown): its slot is free.
    pub fn dial_abandoned(&self) {
        self.dialing.fetch_sub(1, Ordering::SeqCst);
        self.changed.notify_one();
    }

    /// A dial succeeded: the tunnel is open and idle.
    pub fn opened(&self) -> Arc<TunnelState> {
        let s = Arc::new(TunnelState {
            active: AtomicUsize::new(0),
            idle_since: Mutex::new(Instant::now()),
            retiring: AtomicBool::new(false),
        });
        self.lock().push(s.clone());
        self.dialing.fetch_sub(1, Ordering::SeqCst);
        self.changed.notify_one();
        s
    }

    /// The tunnel closed.
    pub fn closed(&self, s: &Arc<TunnelState>) {
        self.lock().retain(|t| !Arc::ptr_eq(t, s));
        self.changed.notify_one();
    }

    /// True when `s` should close now: idle for `idle_timeout` while more
    /// than `min_idle` tunnels are idle. It then counts as busy (retiring).
    pub fn try_retire(&self, s: &TunnelState) -> bool {
        let t = self.lock();
        if !s.idle() {
            return false;
        }
        let idle_for = s
            .idle_since
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed();
        if idle_for < self.limits.idle_timeout {
            return false;
        }
        let idle = t.iter().filter(|x| x.idle()).count();
        if idle <= self.limits.min_idle {
            return false;
        }
        s.retiring.store(true, Ordering::SeqCst);
        true
    }
}

/// A request stream on a tunnel: the tunnel is busy while this lives.
#[derive(Debug)]
pub struct Busy {
    tunnel: Arc<TunnelState>,
    pool: Arc<Pool>,
}

impl Busy {
    /// Marks `tunnel` busy.
    pub fn new(tunnel: Arc<TunnelState>, pool: Arc<Pool>) -> Busy {
        tunnel.active.fetch_add(1, Ordering::SeqCst);
        pool.changed.notify_one();
        Busy { tunnel, pool }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        if self.tunnel.active.fetch_sub(1, Ordering::SeqCst) == 1 {
            *self
                .tunnel
                .idle_since
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = Instant::now();
        }
        self.pool.changed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            min_idle: 2,
            grow_by: 10,
            max_tunnels: 25,
            idle_timeout: Duration::ZERO,
        }
    }

    #[test]
    fn grows_by_ten_when_fewer_than_two_are_idle_up_to_the_maximum() {
        let l = limits();
        assert_eq!(l.to_open(0, 0, 0), 10);
        assert_eq!(l.to_open(2, 0, 10), 0);
        assert_eq!(l.to_open(1, 0, 10), 10);
        assert_eq!(l.to_open(1, 1, 10), 0, "a dial under way will be idle");
        assert_eq!(l.to_open(1, 0, 20), 5, "the maximum caps the step");
        assert_eq!(l.to_open(0, 0, 25), 0);
    }

    #[test]
    fn busy_tunnels_are_not_idle_and_retiring_keeps_the_minimum() {
        let pool = Arc::new(Pool::new(limits()));
        assert_eq!(pool.reserve_dials(), 10);
        let t: Vec<_> = (0..3).map(|_| pool.opened()).collect();
        assert_eq!(
            pool.snapshot(),
            Snapshot {
                open: 3,
                idle: 3,
                dialing: 7
            }
        );
        let busy = Busy::new(t[0].clone(), pool.clone());
        assert_eq!(pool.snapshot().idle, 2);
        assert!(!pool.try_retire(&t[0]), "busy");
        assert!(!pool.try_retire(&t[1]), "only the minimum is idle");
        drop(busy);
        assert!(pool.try_retire(&t[1]));
        assert!(!pool.try_retire(&t[2]), "the minimum stays");
        pool.closed(&t[1]);
        assert_eq!(pool.snapshot().open, 2);
    }

    #[test]
    fn while_failing_one_dial_at_a_time() {
        let pool = Arc::new(Pool::new(limits()));
        assert_eq!(pool.reserve_probe(), 1);
        assert_eq!(pool.reserve_probe(), 0, "one dial in flight already");
        let t = pool.opened();
        assert_eq!(pool.reserve_probe(), 1, "one idle of the two wanted");
        let _u = pool.opened();
        assert_eq!(pool.reserve_probe(), 0, "two idle: nothing needed");
        pool.closed(&t);
        assert_eq!(pool.reserve_dials(), 10, "not failing: grow_by again");
    }
}
