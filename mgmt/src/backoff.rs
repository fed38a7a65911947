//! Capped exponential backoff with full jitter (the AWS architecture blog's
//! "Exponential Backoff And Jitter"): after `n` failures in a row the next
//! attempt waits a uniformly random time in `0..=min(cap, base * 2^(n-1))`.
//! Full jitter keeps many border-mgmt instances from retrying in step. The
//! agent's gateway dials and the BGP task's gobgpd calls both space their
//! retries with it; each keeps its own count of failures in a row. Pure:
//! the caller supplies the random draw, so tests are exact.

use std::time::Duration;

/// The backoff's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Ceiling after the first failure.
    pub base: Duration,
    /// Largest ceiling.
    pub cap: Duration,
}

impl Backoff {
    /// The ceiling of the wait after `failures` failures in a row (zero
    /// when there were none).
    pub fn ceiling(&self, failures: u32) -> Duration {
        if failures == 0 {
            return Duration::ZERO;
        }
        let shift = (failures - 1).min(30);
        self.base.saturating_mul(1u32 << shift).min(self.cap)
    }

    /// The wait before the next attempt: `fraction` (a draw in `0.0..=1.0`)
    /// of [`Backoff::ceiling`].
    pub fn wait(&self, failures: u32, fraction: f64) -> Duration {
        self.ceiling(failures).mul_f64(fraction.clamp(0.0, 1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceiling_doubles_from_the_base_and_stops_at_the_cap() {
        let b = Backoff {
            base: Duration::from_millis(100),
            cap: Duration::from_millis(1000),
        };
        let ms = |n| b.ceiling(n).as_millis();
        assert_eq!(
            [ms(0), ms(1), ms(2), ms(3), ms(4), ms(5), ms(1000)],
            [0, 100, 200, 400, 800, 1000, 1000]
        );
    }

    #[test]
    fn full_jitter_spans_zero_to_the_ceiling() {
        let b = Backoff {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(10),
        };
        assert_eq!(b.wait(3, 0.0), Duration::ZERO);
        assert_eq!(b.wait(3, 1.0), Duration::from_millis(400));
        assert_eq!(b.wait(3, 0.5), Duration::from_millis(200));
        assert_eq!(b.wait(3, 7.0), Duration::from_millis(400));
        assert_eq!(b.wait(0, 1.0), Duration::ZERO);
    }

    #[test]
    fn ceilings_double_until_the_cap_then_stay_there() {
        let b = Backoff {
            base: Duration::from_millis(100),
            cap: Duration::from_millis(5000),
        };
        let ceilings: Vec<u128> = (1..=10).map(|n| b.ceiling(n).as_millis()).collect();
        assert_eq!(
            ceilings,
            [100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000, 5000]
        );
    }

    #[test]
    fn many_failures_do_not_overflow() {
        let b = Backoff {
            base: Duration::from_millis(100),
            cap: Duration::from_millis(5000),
        };
        assert_eq!(b.ceiling(u32::MAX), Duration::from_millis(5000));
        assert_eq!(b.wait(u32::MAX, 1.0), Duration::from_millis(5000));
    }
}
