//! lcore identity and launching closures on worker lcores.

use std::any::Any;
use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::eal::Eal;
use crate::error::DpdkError;
use crate::sys;

/// What `wait_lcore` returns for a closure that panicked. The panic was
/// caught at the lcore entry point and reported on stderr.
pub const LCORE_PANICKED: i32 = i32::MIN;

/// `LCORE_ID_ANY`: the lcore id of a thread EAL did not create.
pub const LCORE_ID_ANY: u32 = sys::LCORE_ID_ANY;

type LcoreFn = Box<dyn FnOnce() -> i32 + Send + 'static>;

/// The calling thread's lcore id, or [`LCORE_ID_ANY`] on a non-EAL thread.
#[inline]
pub fn lcore_id() -> u32 {
    // SAFETY: reads a thread-local; valid on any thread, before or after EAL init.
    unsafe { sys::border_shim_lcore_id() }
}

/// The main lcore (the thread that called `Eal::init`).
pub fn main_lcore() -> u32 {
    // SAFETY: reads a field of EAL's static config; no preconditions.
    unsafe { sys::rte_get_main_lcore() }
}

/// Number of lcores EAL runs (main included); 0 before init.
pub fn lcore_count() -> u32 {
    // SAFETY: reads EAL's static config; no preconditions.
    unsafe { sys::rte_lcore_count() }
}

/// Whether `lcore` is one EAL runs (main or worker); false before `Eal::init`.
pub fn lcore_is_enabled(lcore: u32) -> bool {
    if lcore >= sys::RTE_MAX_LCORE || !crate::eal::initialised() {
        return false;
    }
    // SAFETY: lcore < RTE_MAX_LCORE, the bound of EAL's role array.
    unsafe { sys::rte_lcore_is_enabled(lcore) != 0 }
}

/// NUMA socket of `lcore`.
pub fn lcore_socket_id(lcore: u32) -> u32 {
    // rte_lcore_to_socket_id does not bounds-check, so we do.
    if lcore >= sys::RTE_MAX_LCORE {
        return u32::MAX;
    }
    // SAFETY: lcore < RTE_MAX_LCORE, the bound of EAL's lcore_config array.
    unsafe { sys::rte_lcore_to_socket_id(lcore) }
}

/// Worker lcores (every enabled lcore but the main one), ascending; empty
/// before `Eal::init`.
pub fn worker_lcores() -> Vec<u32> {
    let mut out = Vec::new();
    if !crate::eal::initialised() {
        return out;
    }
    let mut i = u32::MAX; // rte_get_next_lcore starts at i + 1
    loop {
        // SAFETY: rte_get_next_lcore bounds its own walk by RTE_MAX_LCORE and
        // returns RTE_MAX_LCORE when done.
        i = unsafe { sys::rte_get_next_lcore(i, 1, 0) };
        if i >= sys::RTE_MAX_LCORE {
            return out;
        }
        out.push(i);
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "non-string panic payload"
    }
}

/// The lcore entry point. Never lets a panic out: unwinding across
/// `extern "C"` would abort the whole process.
extern "C" fn trampoline(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the Box<LcoreFn> that launch_on leaked with
    // Box::into_raw for exactly this call; EAL passes it through unchanged
    // and calls us once, so we own it.
    let f = unsafe { Box::from_raw(arg.cast::<LcoreFn>()) };
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(rc) => rc,
        Err(payload) => {
            eprintln!(
                "border dpdk-ffi: closure on lcore {} panicked: {}; returning LCORE_PANICKED",
                lcore_id(),
                panic_message(&*payload)
            );
            // Dropping the payload runs arbitrary Drop code that could panic
            // again, outside any catch_unwind; leaking a few bytes is safer.
            std::mem::forget(payload);
            LCORE_PANICKED
        }
    }
}

/// Runs `f` on worker lcore `lcore`; collect its return value with
/// [`wait_lcore`]. A panic in `f` is caught, logged to stderr and reported as
/// [`LCORE_PANICKED`].
///
/// Fails if EAL is not running, `lcore` is not an enabled worker (the main
/// lcore is the caller's own thread), or it is still busy (`EBUSY`).
pub fn launch_on<F>(lcore: u32, f: F) -> Result<(), DpdkError>
where
    F: FnOnce() -> i32 + Send + 'static,
{
    let what = || format!("launch on lcore {lcore}");
    Eal::current()?;
    if !lcore_is_enabled(lcore) || lcore == main_lcore() {
        return Err(
            DpdkError::with_detail(what(), libc::EINVAL, "not a worker lcore of this EAL")
                .hint("check -l/--lcores in eal_args"),
        );
    }
    let boxed: Box<LcoreFn> = Box::new(Box::new(f));
    let arg = Box::into_raw(boxed).cast::<c_void>();
    // SAFETY: `lcore` is an enabled worker (checked above, so EAL created its
    // thread and pipes). On success the worker calls trampoline(arg) exactly
    // once and trampoline takes ownership of `arg`.
    let ret = unsafe { sys::rte_eal_remote_launch(Some(trampoline), arg, lcore) };
    if ret != 0 {
        // SAFETY: the launch failed, so the worker never saw `arg`; it is
        // still the unique pointer from Box::into_raw above.
        drop(unsafe { Box::from_raw(arg.cast::<LcoreFn>()) });
        return Err(DpdkError::from_ret(what(), ret));
    }
    Ok(())
}

/// Blocks until `lcore` is idle and returns what its last closure returned
/// ([`LCORE_PANICKED`] if it panicked; 0 if nothing was ever launched).
/// Returns `-EINVAL` if `lcore` is not an enabled lcore.
pub fn wait_lcore(lcore: u32) -> i32 {
    if !lcore_is_enabled(lcore) {
        return -libc::EINVAL;
    }
    // SAFETY: lcore is enabled (in bounds of lcore_config); the call only
    // polls its state.
    unsafe { sys::rte_eal_wait_lcore(lcore) }
}

/// Waits for every worker lcore; returns `(lcore, return value)` for each.
pub fn wait_all() -> Vec<(u32, i32)> {
    worker_lcores()
        .into_iter()
        .map(|l| (l, wait_lcore(l)))
        .collect()
}
