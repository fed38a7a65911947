//! TSC access for timing and adaptive polling.

use crate::sys;

/// The current TSC value (`rdtsc`). Works without EAL.
#[inline]
pub fn tsc_cycles() -> u64 {
    // SAFETY: rdtsc has no preconditions.
    unsafe { sys::border_shim_get_tsc_cycles() }
}

/// TSC ticks per second as measured by EAL; 0 before `Eal::init`.
#[inline]
pub fn tsc_hz() -> u64 {
    // SAFETY: reads a static EAL sets during init; 0 before that.
    unsafe { sys::rte_get_tsc_hz() }
}

/// A CPU spin-wait hint (`pause`), for busy loops.
#[inline]
pub fn pause() {
    // SAFETY: the pause instruction has no preconditions.
    unsafe { sys::border_shim_pause() }
}
