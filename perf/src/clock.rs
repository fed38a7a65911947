//! Time and cycle counters.

use std::time::{Duration, Instant};

/// Reads the time-stamp counter where there is one (x86_64), else `None`.
///
/// These are reference cycles at the TSC's constant rate, not core clock
/// cycles: with turbo or power saving they differ. [`tsc_hz`] gives the rate.
#[inline(always)]
pub fn cycles() -> Option<u64> {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC exists on every x86_64 CPU and only reads a counter;
        // it has no memory effects and no preconditions.
        Some(unsafe { core::arch::x86_64::_rdtsc() })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// Estimated TSC rate in Hz, measured against the monotonic clock over
/// `window`; `None` without a TSC.
pub fn tsc_hz(window: Duration) -> Option<f64> {
    let t0 = Instant::now();
    let c0 = cycles()?;
    while t0.elapsed() < window {
        std::hint::spin_loop();
    }
    let c1 = cycles()?;
    let dt = t0.elapsed().as_secs_f64();
    Some(c1.wrapping_sub(c0) as f64 / dt)
}

/// Runs `f` once and returns its wall time and TSC ticks (0 without a TSC).
#[inline(always)]
pub fn measure<T>(f: impl FnOnce() -> T) -> (T, Duration, u64) {
    let c0 = cycles();
    let t0 = Instant::now();
    let out = f();
    let dt = t0.elapsed();
    let c1 = cycles();
    let ticks = match (c0, c1) {
        (Some(a), Some(b)) => b.wrapping_sub(a),
        _ => 0,
    };
    (out, dt, ticks)
}
