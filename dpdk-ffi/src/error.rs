//! One error type for every fallible DPDK call.

use std::borrow::Cow;
use std::ffi::CStr;
use std::fmt;

use crate::sys;

/// A failed DPDK operation: what was attempted, the errno DPDK reported and
/// its text (`rte_strerror`), and optionally a hint for the operator.
///
/// Displays as one line, e.g.
/// `EAL init failed: Invalid argument (check eal_args/devargs)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DpdkError {
    what: Cow<'static, str>,
    errno: i32,
    detail: String,
    hint: Option<Cow<'static, str>>,
}

impl DpdkError {
    /// An error for `what` with a positive errno; the text comes from
    /// `rte_strerror`, which also knows DPDK's own codes (E_RTE_*).
    pub fn from_errno(what: impl Into<Cow<'static, str>>, errno: i32) -> Self {
        DpdkError {
            what: what.into(),
            errno,
            detail: strerror(errno),
            hint: None,
        }
    }

    /// An error from a DPDK call that returned a negative errno (`-EINVAL`).
    pub fn from_ret(what: impl Into<Cow<'static, str>>, ret: i32) -> Self {
        Self::from_errno(what, ret.saturating_neg())
    }

    /// An error from a DPDK call that signalled failure and set `rte_errno`.
    pub fn from_rte_errno(what: impl Into<Cow<'static, str>>) -> Self {
        Self::from_errno(what, rte_errno())
    }

    /// An error whose text is ours, not `rte_strerror`'s.
    pub fn with_detail(
        what: impl Into<Cow<'static, str>>,
        errno: i32,
        detail: impl Into<String>,
    ) -> Self {
        DpdkError {
            what: what.into(),
            errno,
            detail: detail.into(),
            hint: None,
        }
    }

    /// Adds a parenthesised hint to the message.
    #[must_use]
    pub fn hint(mut self, hint: impl Into<Cow<'static, str>>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// The positive errno (may be one of DPDK's E_RTE_* codes).
    pub fn errno(&self) -> i32 {
        self.errno
    }

    /// The operation that failed, e.g. `EAL init`.
    pub fn what(&self) -> &str {
        &self.what
    }
}

impl fmt::Display for DpdkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {}", self.what, self.detail)?;
        if let Some(hint) = &self.hint {
            write!(f, " ({hint})")?;
        }
        Ok(())
    }
}

impl std::error::Error for DpdkError {}

/// The calling thread's `rte_errno`.
pub fn rte_errno() -> i32 {
    // SAFETY: reads a thread-local int; no preconditions, works before EAL init.
    unsafe { sys::border_shim_errno() }
}

/// Text for an errno, including DPDK's own E_RTE_* codes.
pub fn strerror(errno: i32) -> String {
    // SAFETY: rte_strerror accepts any int and returns a NUL-terminated
    // string that stays valid until the next call on this thread; we copy it
    // before returning.
    let text = unsafe {
        let p = sys::rte_strerror(errno);
        if p.is_null() {
            return format!("error {errno}");
        }
        CStr::from_ptr(p).to_string_lossy().into_owned()
    };
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_one_line_with_hint() {
        let e = DpdkError::from_errno("EAL init", libc::EINVAL).hint("check eal_args/devargs");
        assert_eq!(
            e.to_string(),
            "EAL init failed: Invalid argument (check eal_args/devargs)"
        );
        assert_eq!(e.errno(), libc::EINVAL);
        assert_eq!(
            DpdkError::from_ret("x", -libc::ENODEV).errno(),
            libc::ENODEV
        );
    }

    #[test]
    fn strerror_knows_dpdk_codes() {
        assert_eq!(
            strerror(sys::E_RTE_NO_CONFIG as i32),
            "Missing rte_config structure"
        );
    }
}
