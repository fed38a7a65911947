//! Test-only fault injection: makes one worker panic inside its poll loop,
//! or wedges one (it stops polling), or empties the mbuf pool for a while, so the end-to-end and chaos tests
//! can show what border-dp does then (docs/reliability.md, "A worker that
//! panics", "An empty mbuf pool"). Only debug builds (the
//! ones `cargo test` and `scripts/chaos.sh` run) compile the trigger; in a
//! release build [`worker_checkpoint`] is empty and [`poll_trigger`] reads
//! nothing.
//!
//! The trigger: border-dp started with `BORDER_TEST_PANIC_FILE=PATH` looks
//! for PATH from its main thread (never from a worker: the fast path makes
//! no system calls). When PATH appears holding a worker index (`0`), the
//! file is removed and that worker panics at its next poll.

/// The environment variable naming the trigger file.
pub const PANIC_FILE_ENV: &str = "BORDER_TEST_PANIC_FILE";

/// The environment variable naming the trigger file of an empty mbuf pool:
/// when it appears holding a number of milliseconds, the workers take every
/// mbuf they can get and hold them that long, then give them back
/// (`run/supervise.rs` `PoolHold`, `io_dpdk.rs`).
pub const HOLD_MBUFS_FILE_ENV: &str = "BORDER_TEST_HOLD_MBUFS_FILE";

/// The environment variable naming the trigger file of a wedged worker:
/// when it appears holding a worker index, that worker stops at its next
/// poll without beating its heartbeat (a stuck worker, for the watchdog),
/// until border-dp is asked to stop.
pub const STALL_FILE_ENV: &str = "BORDER_TEST_STALL_FILE";

#[cfg(debug_assertions)]
mod armed {
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// The worker asked to panic; `usize::MAX`: none.
    static PANIC_WORKER: AtomicUsize = AtomicUsize::new(usize::MAX);

    /// The worker asked to stall; `usize::MAX`: none.
    static STALL_WORKER: AtomicUsize = AtomicUsize::new(usize::MAX);

    pub fn worker_checkpoint(me: usize) {
        while STALL_WORKER.load(Ordering::Relaxed) == me {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        if PANIC_WORKER.load(Ordering::Relaxed) == me {
            PANIC_WORKER.store(usize::MAX, Ordering::Relaxed);
            panic!(
                "injected by the test trigger {} (debug builds only)",
                super::PANIC_FILE_ENV
            );
        }
    }

    /// Whether the workers are to hold every mbuf they can take.
    static HOLD_POOL: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

    pub fn set_pool_held(on: bool) {
        HOLD_POOL.store(on, Ordering::Relaxed);
    }

    pub fn pool_held() -> bool {
        HOLD_POOL.load(Ordering::Relaxed)
    }

    pub fn poll_hold_trigger() -> Option<std::time::Duration> {
        let path = std::env::var_os(super::HOLD_MBUFS_FILE_ENV)?;
        let text = std::fs::read_to_string(&path).ok()?;
        let _ = std::fs::remove_file(&path);
        let ms = text.trim().parse::<u64>().ok()?;
        Some(std::time::Duration::from_millis(ms.min(60_000)))
    }

    pub fn poll_stall_trigger() -> Option<usize> {
        let path = std::env::var_os(super::STALL_FILE_ENV)?;
        let text = std::fs::read_to_string(&path).ok()?;
        let _ = std::fs::remove_file(&path);
        let worker = text.trim().parse::<usize>().ok()?;
        STALL_WORKER.store(worker, Ordering::Relaxed);
        Some(worker)
    }

    pub fn release_stall() {
        STALL_WORKER.store(usize::MAX, Ordering::Relaxed);
    }

    pub fn poll_trigger() -> Option<usize> {
        let path = std::env::var_os(super::PANIC_FILE_ENV)?;
        let text = std::fs::read_to_string(&path).ok()?;
        let _ = std::fs::remove_file(&path);
        let worker = text.trim().parse::<usize>().ok()?;
        PANIC_WORKER.store(worker, Ordering::Relaxed);
        Some(worker)
    }
}

/// Called by a worker once per poll: panics if the test trigger named it.
#[inline(always)]
pub fn worker_checkpoint(me: usize) {
    #[cfg(debug_assertions)]
    armed::worker_checkpoint(me);
    #[cfg(not(debug_assertions))]
    let _ = me;
}

/// Whether the test trigger of an empty pool is on: each worker then takes
/// every mbuf it can get (its lcore's cache included, which only it can
/// reach) and holds them until it goes off. Always false in release builds.
#[inline(always)]
pub fn pool_held() -> bool {
    #[cfg(debug_assertions)]
    return armed::pool_held();
    #[cfg(not(debug_assertions))]
    false
}

/// Turns the empty-pool trigger on or off (border-dp's main thread; a no-op
/// in release builds).
pub fn set_pool_held(on: bool) {
    #[cfg(debug_assertions)]
    armed::set_pool_held(on);
    #[cfg(not(debug_assertions))]
    let _ = on;
}

/// Called by border-dp's main thread: how long to hold the pool's free
/// mbufs, if the trigger file of an empty pool appeared (at most 60 s).
pub fn poll_hold_trigger() -> Option<std::time::Duration> {
    #[cfg(debug_assertions)]
    return armed::poll_hold_trigger();
    #[cfg(not(debug_assertions))]
    None
}

/// Called by border-dp's main thread: if the trigger file of a wedged
/// worker exists, stalls the worker it names and returns it.
pub fn poll_stall_trigger() -> Option<usize> {
    #[cfg(debug_assertions)]
    return armed::poll_stall_trigger();
    #[cfg(not(debug_assertions))]
    None
}

/// Lets a stalled worker go on (border-dp's main thread, before it stops
/// the workers).
pub fn release_stall() {
    #[cfg(debug_assertions)]
    armed::release_stall();
}

/// Called by border-dp's main thread: if the trigger file exists, arms the
/// panic of the worker it names and returns that worker (to be woken).
pub fn poll_trigger() -> Option<usize> {
    #[cfg(debug_assertions)]
    return armed::poll_trigger();
    #[cfg(not(debug_assertions))]
    None
}

#[cfg(all(test, debug_assertions))]
mod tests {
    use super::*;

    #[test]
    fn the_trigger_arms_one_panic_of_the_named_worker_and_is_used_up() {
        // An index no other test's worker has: the switch is process-wide.
        let worker = 1_000_003usize;
        let path = std::env::temp_dir().join(format!("border-fault-{}", std::process::id()));
        std::env::set_var(PANIC_FILE_ENV, &path);
        assert_eq!(poll_trigger(), None, "no file, no trigger");
        std::fs::write(&path, format!("{worker}\n")).unwrap();
        assert_eq!(poll_trigger(), Some(worker));
        assert!(!path.exists(), "the trigger file is used up");
        worker_checkpoint(worker - 1);
        let hit = std::panic::catch_unwind(|| worker_checkpoint(worker));
        let msg = hit.expect_err("the named worker panics");
        let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("injected by the test trigger"), "{msg}");
        worker_checkpoint(worker);
        std::env::remove_var(PANIC_FILE_ENV);
    }

    #[test]
    fn the_pool_trigger_says_how_long_and_is_used_up() {
        let path = std::env::temp_dir().join(format!("border-hold-{}", std::process::id()));
        std::env::set_var(HOLD_MBUFS_FILE_ENV, &path);
        assert_eq!(poll_hold_trigger(), None);
        std::fs::write(&path, "250\n").unwrap();
        assert_eq!(
            poll_hold_trigger(),
            Some(std::time::Duration::from_millis(250))
        );
        assert!(!path.exists());
        std::fs::write(&path, "999999").unwrap();
        assert_eq!(
            poll_hold_trigger(),
            Some(std::time::Duration::from_secs(60)),
            "at most a minute"
        );
        std::env::remove_var(HOLD_MBUFS_FILE_ENV);
    }
}
