//! What the BGP task shares with the rest of border-mgmt: the operator's
//! maintenance switch, the shutdown withdraw handshake, and the view that
//! status, metrics and the API show.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use tokio::sync::{watch, Notify};

/// One neighbour of gobgpd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NeighbourView {
    /// Its address.
    pub address: String,
    /// Its AS.
    pub peer_asn: u32,
    /// Session state in words ("established", "active", ...).
    pub state: String,
}

/// One VIP's route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VipRouteView {
    /// VIP name.
    pub name: String,
    /// `addr/32` or `addr/128`.
    pub prefix: String,
    /// The appliance's address on the VIP's port.
    pub next_hop: String,
    /// gobgpd holds it.
    pub announced: bool,
    /// "announced" or why not.
    pub reason: String,
}

/// The BGP state as shown.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BgpView {
    /// gobgpd's API address.
    pub api: String,
    /// The last call to gobgpd succeeded.
    pub connected: bool,
    /// The last error, while calls fail.
    pub last_error: Option<String>,
    /// Failed calls since start.
    pub errors: u64,
    /// Until the next try, while calls fail.
    pub retry_in_ms: u64,
    /// gobgpd's neighbours.
    pub neighbours: Vec<NeighbourView>,
    /// Every VIP.
    pub vips: Vec<VipRouteView>,
}

/// Shared between the BGP task, the API and the exporter.
#[derive(Debug)]
pub struct BgpShared {
    configured: bool,
    maintenance: AtomicBool,
    stopping: AtomicBool,
    /// Wakes the task at once (maintenance, shutdown, config change).
    pub(super) wake: Notify,
    /// Turned true by the task once every route is withdrawn for shutdown
    /// (or withdrawing failed).
    pub(super) withdrawn: watch::Sender<bool>,
    view: Mutex<BgpView>,
}

impl BgpShared {
    /// For a border-mgmt with (`configured`) or without `[mgmt.bgp]`.
    pub fn new(configured: bool) -> BgpShared {
        BgpShared {
            configured,
            maintenance: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            wake: Notify::new(),
            withdrawn: watch::channel(false).0,
            view: Mutex::new(BgpView::default()),
        }
    }

    /// Whether `[mgmt.bgp]` is set.
    pub fn configured(&self) -> bool {
        self.configured
    }

    /// Sets maintenance; returns whether it changed.
    pub fn set_maintenance(&self, on: bool) -> bool {
        let changed = self.maintenance.swap(on, Ordering::SeqCst) != on;
        self.wake.notify_one();
        changed
    }

    /// `borderctl maintenance on`.
    pub fn maintenance(&self) -> bool {
        self.maintenance.load(Ordering::SeqCst)
    }

    /// Shutdown asked: withdraw everything.
    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Asks the task to withdraw every route and waits until it has (or
    /// `limit` passed). Returns whether it confirmed.
    pub async fn withdraw_for_shutdown(&self, limit: std::time::Duration) -> bool {
        if !self.configured {
            return true;
        }
        self.begin_stop();
        let mut rx = self.withdrawn.subscribe();
        let confirmed = tokio::time::timeout(limit, rx.wait_for(|w| *w)).await;
        confirmed.is_ok()
    }

    /// From now on every route is withdrawn and none announced.
    pub fn begin_stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.wake.notify_one();
    }

    /// The view now.
    pub fn view(&self) -> BgpView {
        self.lock().clone()
    }

    pub(super) fn set_view(&self, v: BgpView) {
        *self.lock() = v;
    }

    fn lock(&self) -> MutexGuard<'_, BgpView> {
        self.view.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// GetStatus's BGP part: the view, the maintenance switch, and the
/// connections border-dp still holds (read while in maintenance).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BgpReport {
    /// Connection, neighbours, routes.
    pub view: BgpView,
    /// `borderctl maintenance on`.
    pub maintenance: bool,
    /// Connections in border-dp's tables (0 unless in maintenance).
    pub active_connections: u64,
}

/// A BGP event (in [`crate::model::EventKind::Bgp`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BgpEvent {
    /// "gobgpd", "neighbour", "vip" or "maintenance".
    pub what: String,
    /// The API address, the neighbour's address, the VIP name, or empty.
    pub subject: String,
    /// "connected"/"unreachable", the session state,
    /// "announced"/"withdrawn", "on"/"off".
    pub state: String,
    /// Why, if there is more to say.
    pub reason: String,
}
