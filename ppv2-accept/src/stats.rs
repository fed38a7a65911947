//! What the acceptor saw, counted: connections by how they arrived, and
//! refused headers by reason. Relaxed atomics, shared by every connection
//! of a listener; an exporter reads them with [`AcceptStats::snapshot`].

use std::sync::atomic::{AtomicU64, Ordering};

use crate::header::Malformed;

/// How a connection that was not refused arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arrival {
    /// A PROXY header with an IPv4 or IPv6 client.
    Proxied,
    /// A PROXY header without a client address (UNSPEC or UNIX family).
    ProxiedWithoutAddress,
    /// A LOCAL header (a health check of the sender).
    Local,
    /// No header: the first bytes were something else, or none came
    /// before the sniff's deadline.
    Direct,
    /// Closed before sending a byte; nothing is logged for it.
    Silent,
}

impl Arrival {
    /// Every arrival, in counter order.
    pub const ALL: [Arrival; 5] = [
        Arrival::Proxied,
        Arrival::ProxiedWithoutAddress,
        Arrival::Local,
        Arrival::Direct,
        Arrival::Silent,
    ];

    /// The arrival as a metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Arrival::Proxied => "proxied",
            Arrival::ProxiedWithoutAddress => "proxied_without_address",
            Arrival::Local => "local",
            Arrival::Direct => "direct",
            Arrival::Silent => "silent",
        }
    }
}

/// Counters of one acceptor (one listener, or several sharing it).
#[derive(Debug, Default)]
pub struct AcceptStats {
    arrivals: [AtomicU64; Arrival::ALL.len()],
    refused: [AtomicU64; Malformed::ALL.len()],
}

/// A copy of the counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AcceptSnapshot {
    /// Indexed like [`Arrival::ALL`].
    pub arrivals: [u64; Arrival::ALL.len()],
    /// Indexed like [`Malformed::ALL`].
    pub refused: [u64; Malformed::ALL.len()],
}

impl AcceptSnapshot {
    /// Connections that arrived as `a`.
    pub fn arrived(&self, a: Arrival) -> u64 {
        self.arrivals[a as usize]
    }

    /// Connections closed for `reason`.
    pub fn refused(&self, reason: Malformed) -> u64 {
        self.refused[reason.index()]
    }

    /// Connections closed for any reason.
    pub fn refused_total(&self) -> u64 {
        self.refused.iter().sum()
    }
}

impl AcceptStats {
    pub(crate) fn arrived(&self, a: Arrival) {
        self.arrivals[a as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn refuse(&self, reason: Malformed) {
        self.refused[reason.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// The counters now.
    pub fn snapshot(&self) -> AcceptSnapshot {
        AcceptSnapshot {
            arrivals: std::array::from_fn(|i| self.arrivals[i].load(Ordering::Relaxed)),
            refused: std::array::from_fn(|i| self.refused[i].load(Ordering::Relaxed)),
        }
    }
}
