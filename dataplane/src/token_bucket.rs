//! A token bucket on the worker's millisecond clock: what the ICMP echo
//! limit of the slow path and the `[vip.limits]` rates of the load balancer
//! both meter with.

/// A token bucket of `rate` tokens per second and depth `burst`, on the
/// worker's millisecond clock. Kept in thousandths of a token, so rates
/// below 1000 per second still refill every millisecond.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TokenBucket {
    milli: u64,
    last_ms: u64,
}

impl TokenBucket {
    /// A full bucket at `now_ms`.
    pub fn full(burst: u32, now_ms: u64) -> Self {
        TokenBucket {
            milli: u64::from(burst) * 1000,
            last_ms: now_ms,
        }
    }

    /// Takes one token if there is one.
    #[inline]
    pub fn take(&mut self, now_ms: u64, rate: u32, burst: u32) -> bool {
        let cap = u64::from(burst.max(1)) * 1000;
        let elapsed = now_ms.saturating_sub(self.last_ms);
        self.last_ms = self.last_ms.max(now_ms);
        self.milli = self
            .milli
            .saturating_add(elapsed.saturating_mul(u64::from(rate)))
            .min(cap);
        if self.milli >= 1000 {
            self.milli -= 1000;
            true
        } else {
            false
        }
    }

    /// Whether the bucket would be full at `now_ms`: it holds nothing a
    /// fresh bucket would not.
    #[inline]
    pub(crate) fn idle(&self, now_ms: u64, rate: u32, burst: u32) -> bool {
        let cap = u64::from(burst.max(1)) * 1000;
        let elapsed = now_ms.saturating_sub(self.last_ms);
        self.milli
            .saturating_add(elapsed.saturating_mul(u64::from(rate)))
            >= cap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_refills_at_its_rate_up_to_its_depth() {
        let mut b = TokenBucket::full(3, 1000);
        assert!(b.take(1000, 10, 3));
        assert!(b.take(1000, 10, 3));
        assert!(b.take(1000, 10, 3));
        assert!(!b.take(1000, 10, 3));
        // 10 per second: one token every 100 ms.
        assert!(!b.take(1099, 10, 3));
        assert!(b.take(1100, 10, 3));
        assert!(!b.take(1100, 10, 3));
        // A long pause fills it to its depth only.
        let n = (0..10).filter(|_| b.take(100_000, 10, 3)).count();
        assert_eq!(n, 3);
    }
}
