//! Capped exponential backoff with full jitter, for calls to gobgpd that
//! fail: the n-th retry waits a uniform random time in `[0, min(cap, base * 2^n)]`
//! (full jitter keeps many border-mgmt instances from retrying in step).
//! Pure: the caller supplies the random draw.

use std::time::Duration;

/// The retry schedule of one peer (gobgpd).
#[derive(Clone, Debug)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    failures: u32,
}

impl Backoff {
    /// Starts at `base`, never exceeds `cap`.
    pub fn new(base: Duration, cap: Duration) -> Backoff {
        Backoff {
            base,
            cap,
            failures: 0,
        }
    }

    /// Consecutive failures so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// The ceiling of the next wait: `min(cap, base * 2^failures)`.
    pub fn ceiling(&self) -> Duration {
        let factor = 1u32.checked_shl(self.failures.min(31)).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// Records a failure; returns how long to wait before the next try,
    /// `unit` (in `[0, 1)`) scaling the ceiling: full jitter.
    pub fn fail(&mut self, unit: f64) -> Duration {
        let wait = self.ceiling().mul_f64(unit.clamp(0.0, 1.0));
        self.failures = self.failures.saturating_add(1);
        wait
    }

    /// Records a success: the next failure starts from `base` again.
    pub fn succeed(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn ceiling_doubles_up_to_the_cap() {
        let mut b = Backoff::new(100 * MS, 5000 * MS);
        let ceilings: Vec<u128> = (0..10)
            .map(|_| {
                let c = b.ceiling().as_millis();
                b.fail(0.5);
                c
            })
            .collect();
        assert_eq!(
            ceilings,
            [100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000, 5000]
        );
    }

    #[test]
    fn wait_is_the_ceiling_scaled_by_the_draw() {
        let mut b = Backoff::new(100 * MS, 5000 * MS);
        assert_eq!(b.fail(0.0), Duration::ZERO);
        assert_eq!(b.fail(0.5), 100 * MS);
        assert_eq!(b.fail(2.0), 400 * MS, "a draw above 1 is clamped");
        assert_eq!(b.failures(), 3);
    }

    #[test]
    fn success_resets_and_many_failures_do_not_overflow() {
        let mut b = Backoff::new(100 * MS, 5000 * MS);
        for _ in 0..1000 {
            b.fail(1.0);
        }
        assert_eq!(b.ceiling(), 5000 * MS);
        b.succeed();
        assert_eq!(b.ceiling(), 100 * MS);
    }
}
