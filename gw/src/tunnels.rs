//! The tunnels this gateway holds, per appliance: idle ones ready for a
//! call (last used first out, so long-idle ones can retire), the count of
//! all (the reference count the registry publishes), and the methods each
//! appliance offers. One call per tunnel at a time: a [`Lease`] takes a
//! tunnel out of the idle list and puts it back when the call's response
//! ends.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use http_body_util::Full;
use tokio::sync::{watch, Notify};

/// A tunnel's HTTP/2 client handle.
pub type Sender = hyper::client::conn::http2::SendRequest<Full<Bytes>>;

struct Idle {
    id: u64,
    sender: Sender,
}

struct Appliance {
    idle: Vec<Idle>,
    total: usize,
    methods: Arc<HashSet<String>>,
    freed: Arc<Notify>,
}

/// Every tunnel of this gateway.
pub struct Tunnels {
    inner: Mutex<HashMap<String, Appliance>>,
    /// Bumped on every change of the counts (the registry follows it).
    pub changed: watch::Sender<u64>,
    draining: std::sync::atomic::AtomicBool,
    /// Tunnels opened, closed and refused since the start (the metrics).
    pub counters: TunnelCounters,
}

/// Tunnels opened, closed and refused since the start.
#[derive(Debug, Default)]
pub struct TunnelCounters {
    /// Tunnels accepted (pinned, preface answered, HTTP/2 up).
    pub opened: AtomicU64,
    /// Accepted tunnels that closed since.
    pub closed: AtomicU64,
    /// Tunnels refused (TLS, preface, pin), or that timed out opening.
    pub refused: AtomicU64,
    /// Of those, refused for an appliance id outside `A-Z a-z 0-9 - _ .`
    /// (an id with a newline would forge a log line).
    pub bad_ids: AtomicU64,
}

impl std::fmt::Debug for Tunnels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tunnels")
            .field("counts", &self.counts())
            .finish()
    }
}

/// Why no tunnel was leased.
#[derive(Debug, PartialEq, Eq)]
pub enum Missing {
    /// This gateway holds no tunnel of the appliance.
    NoTunnel,
    /// All are busy and none came free in time.
    AllBusy,
}

/// A tunnel taken for one call; back in the idle list when dropped (unless
/// its connection closed, or the gateway drains: then it is told to close).
pub struct Lease {
    tunnels: Arc<Tunnels>,
    appliance: String,
    id: u64,
    /// The tunnel's client handle.
    pub sender: Option<Sender>,
    /// What the appliance offers.
    pub methods: Arc<HashSet<String>>,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Lease({}#{})", self.appliance, self.id)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(sender) = self.sender.take() {
            if !sender.is_closed() {
                self.tunnels.give_back(&self.appliance, self.id, sender);
            }
        }
    }
}

impl Default for Tunnels {
    fn default() -> Self {
        Tunnels {
            inner: Mutex::new(HashMap::new()),
            changed: watch::channel(0).0,
            draining: std::sync::atomic::AtomicBool::new(false),
            counters: TunnelCounters::default(),
        }
    }
}

impl Tunnels {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Appliance>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn bump(&self) {
        self.changed.send_modify(|v| *v += 1);
    }

    /// A new tunnel of `appliance`, offering `methods`.
    pub fn add(&self, appliance: &str, id: u64, sender: Sender, methods: HashSet<String>) {
        let mut m = self.lock();
        let a = m.entry(appliance.to_string()).or_insert_with(|| Appliance {
            idle: Vec::new(),
            total: 0,
            methods: Arc::new(HashSet::new()),
            freed: Arc::new(Notify::new()),
        });
        a.total += 1;
        a.methods = Arc::new(methods);
        a.idle.push(Idle { id, sender });
        a.freed.notify_one();
        drop(m);
        self.counters.opened.fetch_add(1, Ordering::Relaxed);
        self.bump();
    }

    /// The tunnel closed.
    pub fn remove(&self, appliance: &str, id: u64) {
        let mut m = self.lock();
        if let Some(a) = m.get_mut(appliance) {
            a.total = a.total.saturating_sub(1);
            a.idle.retain(|t| t.id != id);
            if a.total == 0 {
                m.remove(appliance);
            }
        }
        drop(m);
        self.counters.closed.fetch_add(1, Ordering::Relaxed);
        self.bump();
    }

    fn give_back(&self, appliance: &str, id: u64, sender: Sender) {
        if self.draining.load(std::sync::atomic::Ordering::SeqCst) {
            tokio::spawn(crate::drain::tell_to_close(sender));
            return;
        }
        let mut m = self.lock();
        if let Some(a) = m.get_mut(appliance) {
            a.idle.push(Idle { id, sender });
            a.freed.notify_one();
        }
    }

    /// Tunnels per appliance (the reference counts).
    pub fn counts(&self) -> HashMap<String, usize> {
        self.lock()
            .iter()
            .map(|(k, a)| (k.clone(), a.total))
            .collect()
    }

    /// True when this gateway holds a tunnel of `appliance`.
    pub fn has(&self, appliance: &str) -> bool {
        self.lock().contains_key(appliance)
    }

    /// An idle tunnel of `appliance`, waiting until `until` for one to come
    /// free (or to be opened: the agent grows its pool when few are idle).
    pub async fn take(self: &Arc<Self>, appliance: &str, until: Instant) -> Result<Lease, Missing> {
        loop {
            let freed = {
                let mut m = self.lock();
                let Some(a) = m.get_mut(appliance) else {
                    return Err(Missing::NoTunnel);
                };
                while let Some(t) = a.idle.pop() {
                    if !t.sender.is_closed() {
                        return Ok(Lease {
                            tunnels: self.clone(),
                            appliance: appliance.to_string(),
                            id: t.id,
                            sender: Some(t.sender),
                            methods: a.methods.clone(),
                        });
                    }
                }
                a.freed.clone()
            };
            if tokio::time::timeout_at(until.into(), freed.notified())
                .await
                .is_err()
            {
                return Err(Missing::AllBusy);
            }
        }
    }

    /// Drains: every idle tunnel is told to close now, every busy one when
    /// its call ends; no tunnel is leased any more.
    pub fn drain(&self) -> usize {
        self.draining
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let mut m = self.lock();
        let mut n = 0;
        for a in m.values_mut() {
            for t in a.idle.drain(..) {
                n += 1;
                tokio::spawn(crate::drain::tell_to_close(t.sender));
            }
        }
        n
    }
}
