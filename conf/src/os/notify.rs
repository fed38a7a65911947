//! The service manager's readiness and watchdog protocol (`sd_notify(3)`):
//! one datagram of `KEY=value` lines to the unix socket `NOTIFY_SOCKET`
//! names (a path, or `@name` for an abstract one). border-dp, border-mgmt
//! and border-gw say `READY=1` when they serve, `WATCHDOG=1` while they are
//! healthy and `STOPPING=1` when they stop. Nothing happens without
//! `NOTIFY_SOCKET`: started by hand or by a test, they behave as before.
//!
//! Written here rather than taken from a crate: it is a socket and a few
//! environment variables, and it lives in the crate every process links.

use std::io;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::{Duration, Instant};

/// The socket the service manager listens on.
pub const NOTIFY_SOCKET_ENV: &str = "NOTIFY_SOCKET";
/// The watchdog period, in microseconds, that the manager enforces.
pub const WATCHDOG_USEC_ENV: &str = "WATCHDOG_USEC";
/// The process the watchdog is meant for; another process ignores it.
pub const WATCHDOG_PID_ENV: &str = "WATCHDOG_PID";

/// A sender to the service manager's notification socket.
#[derive(Debug)]
pub struct Notifier {
    socket: UnixDatagram,
    to: SocketAddr,
    watchdog: Option<Duration>,
}

/// Where `NOTIFY_SOCKET`'s value points: `@name` is an abstract socket.
fn socket_addr(name: &str) -> io::Result<SocketAddr> {
    if let Some(abstract_name) = name.strip_prefix('@') {
        use std::os::linux::net::SocketAddrExt;
        SocketAddr::from_abstract_name(abstract_name.as_bytes())
    } else if name.starts_with('/') {
        SocketAddr::from_pathname(name)
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{NOTIFY_SOCKET_ENV}={name} is neither an absolute path nor @abstract"),
        ))
    }
}

/// How often to ping: half of `WATCHDOG_USEC` (as `sd_watchdog_enabled(3)`
/// advises), when the watchdog is set and meant for process `pid`.
pub fn watchdog_interval(usec: Option<&str>, for_pid: Option<&str>, pid: u32) -> Option<Duration> {
    let usec: u64 = usec?.trim().parse().ok().filter(|&u| u > 0)?;
    if let Some(p) = for_pid {
        if p.trim().parse::<u32>().ok()? != pid {
            return None;
        }
    }
    Some(Duration::from_micros(usec / 2))
}

impl Notifier {
    /// The notifier of this process, if `NOTIFY_SOCKET` is set and names a
    /// usable socket address; `Err` says why a set value is unusable.
    pub fn from_env() -> io::Result<Option<Notifier>> {
        let Some(name) = std::env::var_os(NOTIFY_SOCKET_ENV) else {
            return Ok(None);
        };
        let name = name.to_string_lossy();
        if name.is_empty() {
            return Ok(None);
        }
        let to = socket_addr(&name)?;
        let watchdog = watchdog_interval(
            std::env::var(WATCHDOG_USEC_ENV).ok().as_deref(),
            std::env::var(WATCHDOG_PID_ENV).ok().as_deref(),
            std::process::id(),
        );
        Ok(Some(Notifier {
            socket: UnixDatagram::unbound()?,
            to,
            watchdog,
        }))
    }

    /// Sends `state` (newline-separated `KEY=value` lines) in one datagram.
    pub fn send(&self, state: &str) -> io::Result<()> {
        self.socket
            .send_to_addr(state.as_bytes(), &self.to)
            .map(|_| ())
    }

    /// Half the manager's watchdog period, if it wants pings from this process.
    pub fn watchdog(&self) -> Option<Duration> {
        self.watchdog
    }
}

/// The notifier of a process, or nothing: every call is then a no-op.
/// A send that fails is logged once per kind of message, never fatal.
#[derive(Debug, Default)]
pub struct ServiceNotify {
    notifier: Option<Notifier>,
    last_ping: Option<Instant>,
    failed: bool,
}

impl ServiceNotify {
    /// From the environment; an unusable `NOTIFY_SOCKET` is logged and ignored.
    pub fn from_env() -> ServiceNotify {
        let notifier = match Notifier::from_env() {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "not notifying the service manager");
                None
            }
        };
        ServiceNotify {
            notifier,
            last_ping: None,
            failed: false,
        }
    }

    /// Whether a service manager listens.
    pub fn enabled(&self) -> bool {
        self.notifier.is_some()
    }

    /// Half the watchdog period, if the manager wants pings.
    pub fn watchdog(&self) -> Option<Duration> {
        self.notifier.as_ref().and_then(Notifier::watchdog)
    }

    fn send(&mut self, state: &str) {
        let Some(n) = &self.notifier else { return };
        match n.send(state) {
            Ok(()) => self.failed = false,
            Err(e) if !self.failed => {
                self.failed = true;
                tracing::warn!(error = %e, "cannot notify the service manager");
            }
            Err(_) => {}
        }
    }

    /// `READY=1` with a status line.
    pub fn ready(&mut self, status: &str) {
        self.send(&format!("READY=1\nSTATUS={status}"));
    }

    /// `STOPPING=1` with a status line.
    pub fn stopping(&mut self, status: &str) {
        self.send(&format!("STOPPING=1\nSTATUS={status}"));
    }

    /// A status line alone.
    pub fn status(&mut self, status: &str) {
        self.send(&format!("STATUS={status}"));
    }

    /// Whether a watchdog ping is due (the watchdog is on and half its
    /// period passed since the last ping).
    pub fn ping_due(&self) -> bool {
        match (self.watchdog(), self.last_ping) {
            (Some(_), None) => true,
            (Some(every), Some(at)) => at.elapsed() >= every,
            (None, _) => false,
        }
    }

    /// `WATCHDOG=1`: the caller checked that the process is healthy.
    pub fn ping(&mut self) {
        if self.watchdog().is_some() {
            self.last_ping = Some(Instant::now());
            self.send("WATCHDOG=1");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watchdog_pings_at_half_its_period_and_only_for_its_process() {
        assert_eq!(
            watchdog_interval(Some("2000000"), None, 7),
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            watchdog_interval(Some("2000000"), Some("7"), 7),
            Some(Duration::from_secs(1))
        );
        assert_eq!(watchdog_interval(Some("2000000"), Some("8"), 7), None);
        assert_eq!(watchdog_interval(Some("0"), None, 7), None);
        assert_eq!(watchdog_interval(Some("soon"), None, 7), None);
        assert_eq!(watchdog_interval(None, Some("7"), 7), None);
    }

    #[test]
    fn a_notifier_sends_to_a_path_and_to_an_abstract_socket() {
        let dir = std::env::temp_dir().join(format!("border-notify-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify.sock");
        let listener = UnixDatagram::bind(&path).unwrap();
        let name = format!("@border-notify-test-{}", std::process::id());
        let abstract_listener = UnixDatagram::bind_addr(&socket_addr(&name).unwrap()).unwrap();
        for (to, l) in [
            (path.to_str().unwrap().to_string(), &listener),
            (name, &abstract_listener),
        ] {
            let n = Notifier {
                socket: UnixDatagram::unbound().unwrap(),
                to: socket_addr(&to).unwrap(),
                watchdog: None,
            };
            let mut s = ServiceNotify {
                notifier: Some(n),
                ..ServiceNotify::default()
            };
            s.ready("serving");
            let mut buf = [0u8; 128];
            let len = l.recv(&mut buf).unwrap();
            assert_eq!(&buf[..len], b"READY=1\nSTATUS=serving", "{to}");
            // No watchdog asked for: no ping sent, none due.
            assert!(!s.ping_due());
            s.ping();
            s.stopping("bye");
            let len = l.recv(&mut buf).unwrap();
            assert_eq!(&buf[..len], b"STOPPING=1\nSTATUS=bye", "{to}");
        }
        assert!(socket_addr("relative.sock").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
