//! One border-dp per instance: an exclusive `flock` on
//! `/run/border/<instance>.dp.lock`, held for the life of the process.

use std::fs::File;

use super::RunError;

/// An exclusive lock on the instance name, held for the life of the process.
pub(super) struct InstanceLock {
    _file: File,
}

impl InstanceLock {
    pub(super) fn acquire(instance: &str) -> Result<InstanceLock, RunError> {
        let path = conf::os::instance_lock_path(instance, "dp");
        match conf::os::lock_file(&path) {
            Ok(file) => Ok(InstanceLock { _file: file }),
            Err(conf::os::LockError::Held) => Err(RunError::AlreadyRunning {
                instance: instance.to_string(),
                path,
            }),
            Err(conf::os::LockError::Io(source)) => Err(RunError::Lock { path, source }),
            Err(conf::os::LockError::Untrusted(u)) => Err(RunError::Lock {
                path,
                source: std::io::Error::other(format!("{}; {}", u.what, u.fix)),
            }),
        }
    }
}
