//! `syn_proxy = "auto"`: a worker answers with cookies while its
//! connection table is under half-open pressure, and goes back to passing
//! SYNs on once the pressure is gone for a while.
//!
//! Looked at every [`WINDOW_MS`]:
//! - off -> on when the window saw [`EVICTIONS_ON`] half-open entries
//!   evicted (or new flows refused for a table full of young half-open
//!   entries), the table is 7/8 full, or the worker holds more half-open
//!   entries than [`half_open_on`] allows (a flood long before the table
//!   fills: the backends' SYN queues are what overflow first; this one is
//!   checked at every tick, not only at a window's end);
//! - on -> off after [`CALM_WINDOWS`] calm windows in a row: no eviction,
//!   the table under 3/4 full, and the cookies that got no ACK in the
//!   window, had each become a half-open entry living `tcp_syn`, would
//!   fill less than 1/8 of the table. While on, spoofed SYNs make no
//!   entries, so this last signal is what keeps a flood from switching
//!   cookies off and on again.

/// Length of one observation window.
pub const WINDOW_MS: u64 = 250;
/// Evictions in one window that switch cookies on.
pub const EVICTIONS_ON: u64 = 8;
/// Calm windows in a row that switch cookies off (5 s).
pub const CALM_WINDOWS: u32 = 20;

/// Half-open entries of one worker that switch cookies on: Linux's default
/// listen backlog (`somaxconn`), or 1/8 of a smaller table.
pub fn half_open_on(capacity: usize) -> u64 {
    (capacity as u64 / 8).clamp(1, 4096)
}

/// What the worker's table looks like at a window's end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pressure {
    /// Running total of half-open entries evicted and new flows refused
    /// for a table full of young half-open entries.
    pub evicted_total: u64,
    pub entries: usize,
    /// Entries whose handshake has not completed.
    pub half_open: usize,
    pub capacity: usize,
    /// `tcp_syn`: how long a half-open entry would live.
    pub syn_timeout_ms: u64,
}

/// The switch of one worker.
#[derive(Clone, Copy, Debug, Default)]
pub struct Auto {
    on: bool,
    window_end: u64,
    evicted_seen: u64,
    unanswered: u64,
    calm: u32,
}

impl Auto {
    pub fn is_on(&self) -> bool {
        self.on
    }

    /// A cookie SYN-ACK went out for an auto VIP.
    #[inline]
    pub fn cookie_sent(&mut self) {
        self.unanswered += 1;
    }

    /// A cookie of an auto VIP came back proved.
    #[inline]
    pub fn cookie_accepted(&mut self) {
        self.unanswered = self.unanswered.saturating_sub(1);
    }

    /// Once per poll iteration: at a window's end, decides. `Some(on)`
    /// when the switch moved.
    #[inline]
    pub fn tick(&mut self, now: u64, p: Pressure) -> Option<bool> {
        // Too many half-open entries switch on at once, not at the
        // window's end: a flood fills a backend's SYN queue within it.
        if !self.on && p.half_open as u64 >= half_open_on(p.capacity) {
            self.on = true;
            self.calm = 0;
            return Some(true);
        }
        if now < self.window_end {
            return None;
        }
        self.window_end = now + WINDOW_MS;
        let evicted = p.evicted_total.wrapping_sub(self.evicted_seen);
        self.evicted_seen = p.evicted_total;
        let unanswered = std::mem::take(&mut self.unanswered);
        let cap = p.capacity.max(1) as u64;
        let entries = p.entries as u64;
        if !self.on {
            if evicted >= EVICTIONS_ON
                || entries * 8 >= cap * 7
                || p.half_open as u64 >= half_open_on(p.capacity)
            {
                self.on = true;
                self.calm = 0;
                return Some(true);
            }
            return None;
        }
        let would_hold = unanswered.saturating_mul(p.syn_timeout_ms.max(WINDOW_MS) / WINDOW_MS);
        let calm = evicted == 0
            && entries * 4 < cap * 3
            && would_hold * 8 < cap
            && would_hold < half_open_on(p.capacity);
        self.calm = if calm { self.calm + 1 } else { 0 };
        if self.calm >= CALM_WINDOWS {
            self.on = false;
            return Some(false);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(evicted_total: u64, entries: usize) -> Pressure {
        Pressure {
            evicted_total,
            entries,
            half_open: 0,
            capacity: 1024,
            syn_timeout_ms: 3_000,
        }
    }

    #[test]
    fn evictions_switch_on_and_a_flood_of_unanswered_cookies_keeps_it_on() {
        let mut a = Auto::default();
        let mut t = 0;
        assert_eq!(a.tick(t, p(0, 10)), None);
        t += WINDOW_MS;
        assert_eq!(
            a.tick(t, p(7, 10)),
            None,
            "7 evictions: below the threshold"
        );
        t += WINDOW_MS;
        assert_eq!(a.tick(t, p(15, 10)), Some(true));
        assert!(a.is_on());
        // A flood goes on: 100 cookies a window never answered would hold
        // 100 * 12 entries: not calm, however long.
        for _ in 0..4 * CALM_WINDOWS {
            t += WINDOW_MS;
            for _ in 0..100 {
                a.cookie_sent();
            }
            assert_eq!(a.tick(t, p(15, 10)), None);
        }
        // Real clients answer their cookies: calm; off after CALM_WINDOWS.
        for i in 1..=CALM_WINDOWS {
            t += WINDOW_MS;
            for _ in 0..100 {
                a.cookie_sent();
                a.cookie_accepted();
            }
            let want = (i == CALM_WINDOWS).then_some(false);
            assert_eq!(a.tick(t, p(15, 10)), want, "{i}");
        }
        assert!(!a.is_on());
    }

    #[test]
    fn a_nearly_full_table_switches_on_and_must_drain_to_switch_off() {
        let mut a = Auto::default();
        assert_eq!(a.tick(0, p(0, 896)), Some(true));
        let mut t = 0;
        for _ in 0..3 * CALM_WINDOWS {
            t += WINDOW_MS;
            assert_eq!(a.tick(t, p(0, 800)), None, "above 3/4");
        }
        // Within a window nothing is decided.
        assert_eq!(a.tick(t + 1, p(0, 0)), None);
        for i in 1..=CALM_WINDOWS {
            t += WINDOW_MS;
            let want = (i == CALM_WINDOWS).then_some(false);
            assert_eq!(a.tick(t, p(0, 700)), want);
        }
    }

    #[test]
    fn many_half_open_entries_switch_on_before_the_table_fills() {
        let mut a = Auto::default();
        let cap = 1 << 20;
        let with = |half_open| Pressure {
            evicted_total: 0,
            entries: half_open,
            half_open,
            capacity: cap,
            syn_timeout_ms: 3_000,
        };
        assert_eq!(a.tick(0, with(4095)), None);
        assert_eq!(a.tick(1, with(4096)), Some(true), "within the window");
        assert_eq!(half_open_on(1024), 128, "a small table: 1/8 of it");
    }
}
