//! Commands on DPDK's telemetry socket (`rte_telemetry`), the one
//! `dpdk-telemetry.py` talks to.
//!
//! DPDK 22.11 calls a command's callback with no user pointer, so every
//! command goes through one trampoline that finds the Rust handler by the
//! command's name. Handlers run on DPDK's telemetry thread, one request at a
//! time, under the registry's lock: dropping a [`TelemetryCommand`] waits
//! for a running request and then leaves the command answering `null`
//! (22.11 cannot unregister a command).

use std::ffi::{c_char, c_int, CStr, CString};
use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use crate::eal;
use crate::error::DpdkError;
use crate::sys;

/// Most entries one dictionary reply may hold (`RTE_TEL_MAX_DICT_ENTRIES`).
pub const MAX_DICT_ENTRIES: usize = sys::RTE_TEL_MAX_DICT_ENTRIES as usize;

/// Names and string values must be shorter than this (`RTE_TEL_MAX_STRING_LEN`).
const MAX_STRING: usize = sys::RTE_TEL_MAX_STRING_LEN as usize;

/// What a handler gets: the command's parameters (the text after the first
/// comma, empty when none) and the dictionary to fill. Returning false makes
/// the reply `{"<command>": null}` (unknown parameter, source gone).
type Handler = Box<dyn Fn(&str, &mut TelemetryDict<'_>) -> bool + Send>;

struct Entry {
    cmd: String,
    /// None once its [`TelemetryCommand`] was dropped.
    handler: Option<Handler>,
}

/// Every command registered with DPDK by this process, with its handler.
static REGISTRY: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

fn registry() -> MutexGuard<'static, Vec<Entry>> {
    // A handler that panicked is caught before the lock is released and
    // leaves the Vec intact, so a poisoned lock is still valid.
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// A dictionary reply under construction (`rte_tel_data_start_dict`).
/// Entries DPDK refuses (more than [`MAX_DICT_ENTRIES`], names or values of
/// 128 bytes or more, names with characters other than `A-Za-z0-9_/`) are
/// left out and counted in [`Self::refused`].
pub struct TelemetryDict<'a> {
    data: *mut sys::rte_tel_data,
    refused: usize,
    _reply: PhantomData<&'a mut sys::rte_tel_data>,
}

impl TelemetryDict<'_> {
    /// Adds `name: value`.
    pub fn u64(&mut self, name: &str, value: u64) {
        let Some(name) = c_text(name) else {
            self.refused += 1;
            return;
        };
        // SAFETY: `data` is the reply DPDK handed to this request, started
        // as a dict, valid until the callback returns (the lifetime 'a);
        // name is NUL-terminated and copied by the callee.
        let ret = unsafe { sys::rte_tel_data_add_dict_u64(self.data, name.as_ptr(), value) };
        self.count(ret);
    }

    /// Adds `name: "value"`.
    pub fn string(&mut self, name: &str, value: &str) {
        let (Some(name), Some(value)) = (c_text(name), c_text(value)) else {
            self.refused += 1;
            return;
        };
        // SAFETY: as in `u64`; both strings are NUL-terminated and copied.
        let ret =
            unsafe { sys::rte_tel_data_add_dict_string(self.data, name.as_ptr(), value.as_ptr()) };
        self.count(ret);
    }

    /// How many entries were left out.
    pub fn refused(&self) -> usize {
        self.refused
    }

    fn count(&mut self, ret: c_int) {
        if ret != 0 {
            self.refused += 1;
        }
    }
}

/// `text` as a C string when DPDK can hold it whole.
fn c_text(text: &str) -> Option<CString> {
    if text.len() >= MAX_STRING {
        return None;
    }
    CString::new(text).ok()
}

/// A command on the telemetry socket. Dropping it stops its handler from
/// being called (waiting for a request in progress); the command then
/// answers `null`.
#[derive(Debug)]
pub struct TelemetryCommand {
    cmd: String,
}

impl TelemetryCommand {
    /// Registers `cmd` (e.g. `/border/counters`: a leading `/`, under 56
    /// bytes) with `help` for `/help,<cmd>`. The handler runs on DPDK's
    /// telemetry thread; it must only read state that is safe to read
    /// there (atomics, shared memory, `rte_eth_stats_get`). Registering a
    /// name again replaces its handler. Works before or after EAL init; the
    /// socket exists once EAL started without `--no-telemetry`.
    pub fn register(
        cmd: &str,
        help: &str,
        handler: impl Fn(&str, &mut TelemetryDict<'_>) -> bool + Send + 'static,
    ) -> Result<TelemetryCommand, DpdkError> {
        let what = || format!("telemetry command {cmd:?}");
        let invalid = |why: &str| DpdkError::with_detail(what(), libc::EINVAL, why.to_string());
        if !cmd.starts_with('/') || cmd.contains(',') {
            return Err(invalid("must start with `/` and hold no comma"));
        }
        let c_cmd = CString::new(cmd).map_err(|_| invalid("contains a NUL byte"))?;
        let c_help = c_text(help).ok_or_else(|| invalid("help text too long"))?;
        let mut reg = registry();
        if let Some(e) = reg.iter_mut().find(|e| e.cmd == cmd) {
            e.handler = Some(Box::new(handler));
        } else {
            // SAFETY: both strings are NUL-terminated and copied by the
            // callee; `dispatch` is a valid callback for the process's life.
            let ret = unsafe {
                sys::rte_telemetry_register_cmd(c_cmd.as_ptr(), Some(dispatch), c_help.as_ptr())
            };
            if ret != 0 {
                return Err(DpdkError::from_ret(what(), ret).hint("name under 56 bytes"));
            }
            reg.push(Entry {
                cmd: cmd.to_string(),
                handler: Some(Box::new(handler)),
            });
        }
        Ok(TelemetryCommand {
            cmd: cmd.to_string(),
        })
    }

    /// The command's name.
    pub fn name(&self) -> &str {
        &self.cmd
    }
}

impl Drop for TelemetryCommand {
    fn drop(&mut self) {
        if let Some(e) = registry().iter_mut().find(|e| e.cmd == self.cmd) {
            e.handler = None;
        }
    }
}

/// The callback DPDK calls for every command this process registered.
/// Returns 0 with a dict in `info`, or -1 (DPDK replies `null`).
unsafe extern "C" fn dispatch(
    cmd: *const c_char,
    params: *const c_char,
    info: *mut sys::rte_tel_data,
) -> c_int {
    if cmd.is_null() || info.is_null() {
        return -1;
    }
    // SAFETY: DPDK passes the NUL-terminated command it matched.
    let cmd = unsafe { CStr::from_ptr(cmd) }.to_string_lossy();
    let params = if params.is_null() {
        String::new()
    } else {
        // SAFETY: when not null, DPDK passes the NUL-terminated text after
        // the comma, valid for the call.
        unsafe { CStr::from_ptr(params) }
            .to_string_lossy()
            .into_owned()
    };
    let reg = registry();
    let Some(handler) = reg
        .iter()
        .find(|e| e.cmd == cmd)
        .and_then(|e| e.handler.as_ref())
    else {
        return -1;
    };
    // SAFETY: `info` is DPDK's reply for this request, valid until we return.
    if unsafe { sys::rte_tel_data_start_dict(info) } != 0 {
        return -1;
    }
    let mut dict = TelemetryDict {
        data: info,
        refused: 0,
        _reply: PhantomData,
    };
    // A panic must not unwind into C; the reply is then `null`.
    let answered =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(&params, &mut dict)));
    match answered {
        Ok(true) => 0,
        _ => -1,
    }
}

/// The telemetry socket of this process: `<EAL runtime dir>/dpdk_telemetry.v2`
/// (`/var/run/dpdk/<file-prefix>/` for root, or under `$RUNTIME_DIRECTORY`
/// when systemd sets it). None before EAL init or when EAL runs with
/// `--no-telemetry` (no socket file).
pub fn telemetry_socket_path() -> Option<PathBuf> {
    let path = runtime_dir()?.join("dpdk_telemetry.v2");
    path.exists().then_some(path)
}

/// EAL's runtime directory of this process (`/var/run/dpdk/<file-prefix>`
/// for root); None before EAL init.
pub fn runtime_dir() -> Option<PathBuf> {
    if !eal::initialised() {
        return None;
    }
    // SAFETY: after init EAL returns a pointer to its static, NUL-terminated
    // runtime directory.
    let dir = unsafe { sys::rte_eal_get_runtime_dir() };
    if dir.is_null() {
        return None;
    }
    // SAFETY: non-null, NUL-terminated (above).
    let dir = unsafe { CStr::from_ptr(dir) }
        .to_string_lossy()
        .into_owned();
    Some(PathBuf::from(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_names_are_refused_before_dpdk() {
        let e = TelemetryCommand::register("border/x", "h", |_, _| true).unwrap_err();
        assert!(e.to_string().contains("must start with `/`"), "{e}");
        let e = TelemetryCommand::register("/border/x,y", "h", |_, _| true).unwrap_err();
        assert!(e.to_string().contains("no comma"), "{e}");
        let long = "h".repeat(MAX_STRING);
        let e = TelemetryCommand::register("/border/x", &long, |_, _| true).unwrap_err();
        assert!(e.to_string().contains("help text too long"), "{e}");
    }

    #[test]
    fn long_text_does_not_fit() {
        assert!(c_text(&"n".repeat(MAX_STRING - 1)).is_some());
        assert!(c_text(&"n".repeat(MAX_STRING)).is_none());
        assert!(c_text("a\0b").is_none());
    }
}
