//! DPDK's own log lines (EAL, drivers, pdump) handed to a function of the
//! process instead of written to stderr and to syslog, so they take the
//! process's log format (plain text, JSON lines, journald priorities) and
//! reach the journal once, not twice.
//!
//! DPDK writes each message to a stdio stream and flushes it
//! (`rte_vlog`); the stream here is a `fopencookie` one whose write
//! function splits the text into lines and passes each, with the level
//! of the message being written (`rte_log_cur_msg_loglevel`, a per-thread
//! value DPDK sets before it formats the message), to the sink.

use std::io;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::OnceLock;

use crate::sys;

/// A DPDK message's level, folded onto four (rte_log.h: EMERG, ALERT,
/// CRIT and ERR are errors; NOTICE and INFO are information).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogLevel {
    /// EMERG, ALERT, CRIT, ERR.
    Error,
    /// WARNING.
    Warning,
    /// NOTICE, INFO.
    Info,
    /// DEBUG.
    Debug,
}

impl LogLevel {
    /// From `RTE_LOG_EMERG` (1) ... `RTE_LOG_DEBUG` (8).
    pub fn from_rte(level: c_int) -> LogLevel {
        match level {
            ..=4 => LogLevel::Error,
            5 => LogLevel::Warning,
            6 | 7 => LogLevel::Info,
            _ => LogLevel::Debug,
        }
    }
}

/// glibc's `cookie_io_functions_t` (stdio.h); the libc crate has no binding.
#[repr(C)]
struct CookieIoFunctions {
    read: Option<unsafe extern "C" fn(*mut c_void, *mut c_char, usize) -> isize>,
    write: Option<unsafe extern "C" fn(*mut c_void, *const c_char, usize) -> isize>,
    seek: Option<unsafe extern "C" fn(*mut c_void, *mut i64, c_int) -> c_int>,
    close: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
}

extern "C" {
    fn fopencookie(
        cookie: *mut c_void,
        mode: *const c_char,
        functions: CookieIoFunctions,
    ) -> *mut sys::FILE;
}

/// Where DPDK's lines go once [`redirect_log`] ran.
static SINK: OnceLock<fn(LogLevel, &str)> = OnceLock::new();

/// Splits `text` into its non-blank lines, without line ends.
pub fn message_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .map(str::trim_end)
        .filter(|l| !l.trim().is_empty())
}

/// The stream's write function: every byte is taken.
unsafe extern "C" fn write_lines(_cookie: *mut c_void, buf: *const c_char, size: usize) -> isize {
    if let Some(sink) = SINK.get() {
        // SAFETY: stdio passes `size` readable bytes at `buf` for the
        // duration of this call.
        let bytes = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), size) };
        // SAFETY: no preconditions; it reads the calling thread's value,
        // which rte_vlog set for the message it is flushing now.
        let level = LogLevel::from_rte(unsafe { sys::rte_log_cur_msg_loglevel() });
        for line in message_lines(&String::from_utf8_lossy(bytes)) {
            sink(level, line);
        }
    }
    size as isize
}

/// From now on DPDK's log lines go to `sink` (from any thread that logs;
/// it must not panic). Call before EAL starts, so that its first lines go
/// there too. A second call keeps the first sink.
pub fn redirect_log(sink: fn(LogLevel, &str)) -> io::Result<()> {
    if SINK.set(sink).is_err() {
        return Ok(());
    }
    let functions = CookieIoFunctions {
        read: None,
        write: Some(write_lines),
        seek: None,
        close: None,
    };
    // SAFETY: a write-only stream without a cookie (the write function
    // ignores it); `functions` is copied by glibc. The stream is never
    // closed: DPDK may log until the process ends.
    let stream = unsafe { fopencookie(std::ptr::null_mut(), c"w".as_ptr(), functions) };
    if stream.is_null() {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: rte_openlog_stream only stores the pointer, which stays
    // valid (above); it may be called before rte_eal_init.
    unsafe { sys::rte_openlog_stream(stream) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_fold_onto_four() {
        assert_eq!(LogLevel::from_rte(1), LogLevel::Error);
        assert_eq!(LogLevel::from_rte(4), LogLevel::Error);
        assert_eq!(LogLevel::from_rte(5), LogLevel::Warning);
        assert_eq!(LogLevel::from_rte(6), LogLevel::Info);
        assert_eq!(LogLevel::from_rte(7), LogLevel::Info);
        assert_eq!(LogLevel::from_rte(8), LogLevel::Debug);
    }

    #[test]
    fn a_message_is_its_non_blank_lines() {
        let got: Vec<&str> =
            message_lines("EAL: Detected CPU lcores: 2\n\nEAL: Detected NUMA nodes: 1  \n")
                .collect();
        assert_eq!(
            got,
            ["EAL: Detected CPU lcores: 2", "EAL: Detected NUMA nodes: 1"]
        );
    }
}
