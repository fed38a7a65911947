//! The real-time signals that set a daemon's log level to a named level:
//! `SIGRTMIN+1` error ... `SIGRTMIN+5` trace. border-mgmt's SetLogLevel
//! sends one to border-dp (whose pid the state region holds) or to itself;
//! each daemon's logging turns it into the level. Real-time signals, unlike
//! SIGUSR1/SIGUSR2 (one step each), are queued, not merged, and each one
//! names its level, so the outcome does not depend on the level before.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

/// This process turns the signals into levels (its logging said so).
static HANDLED: AtomicBool = AtomicBool::new(false);

/// Says that this process handles the signals: until then, one of them
/// would end it (their default action), so a process does not send one to
/// itself before.
pub fn mark_handled() {
    HANDLED.store(true, Ordering::Relaxed);
}

/// Whether [`mark_handled`] was called in this process.
pub fn handled() -> bool {
    HANDLED.load(Ordering::Relaxed)
}

/// The levels, least verbose first.
pub const LEVELS: [&str; 5] = ["error", "warn", "info", "debug", "trace"];

/// The first real-time signal the C library leaves to applications
/// (glibc keeps the lowest ones for its threads).
fn rtmin() -> i32 {
    libc::SIGRTMIN()
}

/// The signal that sets `level` (one of [`LEVELS`]).
pub fn signal_for(level: &str) -> Option<i32> {
    let at = LEVELS.iter().position(|l| *l == level)?;
    Some(rtmin() + 1 + at as i32)
}

/// Every signal of [`signal_for`], in the order of [`LEVELS`].
pub fn signals() -> [i32; 5] {
    std::array::from_fn(|i| rtmin() + 1 + i as i32)
}

/// The level signal `sig` sets, if it is one of them.
pub fn level_of_signal(sig: i32) -> Option<&'static str> {
    let at = sig.checked_sub(rtmin() + 1)?;
    LEVELS.get(usize::try_from(at).ok()?).copied()
}

/// Asks process `pid` to log at `level`.
pub fn send(pid: u32, level: &str) -> io::Result<()> {
    let sig = signal_for(level).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("unknown log level {level:?}: one of {}", LEVELS.join(", ")),
        )
    })?;
    let pid = i32::try_from(pid)
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no such pid"))?;
    // SAFETY: kill takes two integers and touches no memory of ours; a pid
    // that is gone or not ours is an error it returns.
    if unsafe { libc::kill(pid, sig) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_level_has_its_own_signal_and_back() {
        let sigs = signals();
        for (l, s) in LEVELS.iter().zip(sigs) {
            assert_eq!(signal_for(l), Some(s));
            assert_eq!(level_of_signal(s), Some(*l));
            assert!(s > libc::SIGRTMIN() && s <= libc::SIGRTMAX(), "{s}");
        }
        assert_eq!(signal_for("loud"), None);
        assert_eq!(level_of_signal(libc::SIGUSR1), None);
        assert_eq!(level_of_signal(libc::SIGRTMIN()), None);
        assert!(send(1, "loud").is_err());
        assert!(send(0, "info").is_err(), "pid 0 is the process group");
    }
}
