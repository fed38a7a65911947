//! Shared plumbing of the border binaries (border-dp, border-mgmt, borderctl).
#![deny(unsafe_code)]

pub mod args;
pub mod logging;
pub mod version;

pub use logging::{init_logging, LogArgs, LogFormat};

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use conf::os::{instance_lock_path, process_alive};
use conf::state::{state_path, RunState, StateError, StateRegion};

/// `--check-config FILE`: prints `OK` or the error, exit status to match.
///
/// Besides the file itself it checks what the start checks before anything
/// else: that no full-NAT `local_port_range` meets this network namespace's
/// ephemeral ports. So an OK here means the start will not refuse the
/// config for either reason, when run in the same namespace.
pub fn check_config(path: &Path) -> ExitCode {
    let checked = conf::check_config_file(path)
        .map_err(|e| e.to_string())
        .and_then(|cfg| conf::ephemeral::check_local_ports_here(&cfg).map_err(|e| e.to_string()));
    match checked {
        Ok(()) => {
            println!("OK");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// Prints a one-line fatal error and returns a failing exit code.
pub fn fail(program: &str, e: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("{program}: error: {e}");
    ExitCode::FAILURE
}

/// A flag that SIGINT or SIGTERM sets; a second signal ends the process at once.
pub fn termination_flag() -> io::Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(sig, 1, flag.clone())?;
        signal_hook::flag::register(sig, flag.clone())?;
    }
    Ok(flag)
}

/// Why an instance lock could not be taken. One line each.
#[derive(Debug)]
pub enum LockError {
    /// Another process of the same role and instance holds the lock.
    Held {
        program: String,
        instance: String,
        path: PathBuf,
    },
    /// The lock file could not be created or locked.
    Io { path: PathBuf, source: io::Error },
}

impl std::fmt::Display for LockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockError::Held {
                program,
                instance,
                path,
            } => write!(
                f,
                "another {program} of instance `{instance}` is running (lock {} is held)",
                path.display()
            ),
            LockError::Io { path, source } => {
                write!(f, "cannot take instance lock {}: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for LockError {}

/// An exclusive `flock` on `/run/border/<instance>.<role>.lock`
/// (`conf::os::lock_file`), held while the returned file is open.
/// border-mgmt takes `mgmt` with this function; border-dp takes `dp` in the
/// dataplane crate with the same helper.
pub fn lock_instance(program: &str, instance: &str, role: &str) -> Result<File, LockError> {
    let path = instance_lock_path(instance, role);
    conf::os::lock_file(&path).map_err(|e| match e {
        conf::os::LockError::Held => LockError::Held {
            program: program.to_string(),
            instance: instance.to_string(),
            path,
        },
        conf::os::LockError::Io(source) => LockError::Io { path, source },
        conf::os::LockError::Untrusted(u) => LockError::Io {
            path,
            source: io::Error::other(format!("{}; {}", u.what, u.fix)),
        },
    })
}

/// Why the state region of an instance cannot be read. One line each.
#[derive(Debug)]
pub enum DpStateError {
    /// The region file does not exist: border-dp never ran (or the machine rebooted).
    NotRunning { instance: String, path: PathBuf },
    /// The file exists but is not a usable region.
    Unreadable(StateError),
}

impl std::fmt::Display for DpStateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DpStateError::NotRunning { instance, path } => write!(
                f,
                "border-dp of instance `{instance}` is not running (no {})",
                path.display()
            ),
            DpStateError::Unreadable(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for DpStateError {}

/// Maps the state region that border-dp of `instance` writes, read-only.
///
/// Open it afresh for each look rather than keeping it mapped: a restarted
/// border-dp truncates and re-initialises the same file.
pub fn open_state(instance: &str) -> Result<StateRegion, DpStateError> {
    let path = state_path(instance);
    match StateRegion::open(&path) {
        Ok(r) => Ok(r),
        Err(StateError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            Err(DpStateError::NotRunning {
                instance: instance.to_string(),
                path,
            })
        }
        Err(e) => Err(DpStateError::Unreadable(e)),
    }
}

/// The lower-case word for a run state, as borderctl and border-mgmt print it.
pub fn run_state_name(s: RunState) -> String {
    match s {
        RunState::Starting => "starting".into(),
        RunState::Running => "running".into(),
        RunState::Stopped => "stopped".into(),
        RunState::Unknown(v) => format!("unknown({v})"),
    }
}

/// The dataplane as one look at its state region shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DpView {
    /// pid recorded by border-dp.
    pub pid: u32,
    /// Whether that pid still exists.
    pub pid_alive: bool,
    /// Run state recorded by border-dp.
    pub run_state: RunState,
    /// One entry per worker, in worker order.
    pub workers: Vec<WorkerView>,
}

/// One worker's block at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerView {
    pub lcore: u64,
    pub heartbeat: u64,
    pub applied_generation: u64,
}

impl DpView {
    /// Reads the header and every worker block once.
    pub fn read(region: &StateRegion) -> DpView {
        let pid = region.pid();
        DpView {
            pid,
            pid_alive: process_alive(pid),
            run_state: region.run_state(),
            workers: (0..region.n_workers())
                .filter_map(|i| region.worker(i))
                .map(|w| WorkerView {
                    lcore: w.lcore(),
                    heartbeat: w.heartbeat(),
                    applied_generation: w.applied_generation(),
                })
                .collect(),
        }
    }

    /// Running as far as anyone can tell: marked running and the pid exists.
    pub fn is_running(&self) -> bool {
        self.run_state == RunState::Running && self.pid_alive
    }

    /// Run state in words, saying so when a "running" region has lost its process.
    pub fn describe(&self) -> String {
        let state = run_state_name(self.run_state);
        if self.run_state != RunState::Stopped && !self.pid_alive {
            format!("{state} (stale: pid {} is gone)", self.pid)
        } else {
            state
        }
    }
}

/// Per worker: did its heartbeat move between two looks `window` apart?
/// An adaptive worker beats at least about a thousand times a second even
/// when idle, so a few hundred milliseconds tell a live worker from a stuck one.
pub fn heartbeats_moving(region: &StateRegion, window: Duration) -> Vec<bool> {
    let before = DpView::read(region);
    std::thread::sleep(window);
    let after = DpView::read(region);
    before
        .workers
        .iter()
        .zip(&after.workers)
        .map(|(a, b)| a.heartbeat != b.heartbeat)
        .collect()
}

/// The instance named by `--config FILE` (read and validated) or `--instance NAME`.
pub fn instance_from(
    config: Option<&Path>,
    instance: Option<&str>,
) -> Result<String, Box<dyn std::error::Error>> {
    match (config, instance) {
        (_, Some(name)) => Ok(name.to_string()),
        (Some(path), None) => Ok(conf::Config::from_file(path)?.instance),
        (None, None) => Err("give --config FILE or --instance NAME".into()),
    }
}

/// Where border-mgmt's API of an instance listens, for a client: `server`
/// (`unix:///path` or `tcp://ip:port`) as given, else `[mgmt].listen` of the
/// config file, else the default socket of the named instance
/// (`unix:///run/border/<instance>.sock`). A `tcp://` target also needs
/// client TLS material (see `mgmt::client`).
pub fn api_target(
    server: Option<&str>,
    config: Option<&Path>,
    instance: Option<&str>,
) -> Result<conf::Listen, Box<dyn std::error::Error>> {
    let addr = match (server, config, instance) {
        (Some(s), _, _) => s.to_string(),
        (None, Some(path), _) => conf::Config::from_file(path)?.mgmt.listen,
        (None, None, Some(name)) => conf::Config::default_mgmt_listen(name),
        (None, None, None) => {
            return Err("give --server ADDR, --config FILE or --instance NAME".into())
        }
    };
    Ok(mgmt::client::parse_target(&addr)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_target_prefers_the_server_then_the_config_then_the_instance() {
        assert_eq!(
            api_target(Some("tcp://127.0.0.1:50051"), None, Some("x")).unwrap(),
            conf::Listen::Tcp("127.0.0.1:50051".parse().unwrap())
        );
        assert_eq!(
            api_target(None, None, Some("lab")).unwrap(),
            conf::Listen::Unix(PathBuf::from("/run/border/lab.sock"))
        );
        let e = api_target(Some("http://x"), None, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected unix:///path or tcp://ip:port"), "{e}");
        assert!(api_target(None, None, None).is_err());
    }
}
