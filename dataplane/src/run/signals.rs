//! The signals border-dp acts on, as flags the main thread polls.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::RunError;

/// SIGINT/SIGTERM ask border-dp to stop (a second one ends the process at
/// once); SIGHUP asks for a reload.
pub(super) struct Signals {
    terminate: Arc<AtomicBool>,
    /// Set by SIGHUP; the main thread clears it when it reloads.
    pub(super) reload: Arc<AtomicBool>,
}

impl Signals {
    pub(super) fn install() -> Result<Signals, RunError> {
        let terminate = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            // A second signal while shutting down ends the process at once.
            signal_hook::flag::register_conditional_shutdown(sig, 1, terminate.clone())
                .map_err(RunError::Signals)?;
            signal_hook::flag::register(sig, terminate.clone()).map_err(RunError::Signals)?;
        }
        let reload = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(signal_hook::consts::SIGHUP, reload.clone())
            .map_err(RunError::Signals)?;
        Ok(Signals { terminate, reload })
    }

    pub(super) fn terminating(&self) -> bool {
        self.terminate.load(Ordering::Relaxed)
    }
}
