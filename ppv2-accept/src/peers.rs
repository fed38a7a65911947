//! The real peer of an inner connection. When a front end (TLS
//! termination, a relay into an in-process gRPC server) accepts the outside
//! connection and opens its own loopback connection to the server, the
//! server's handlers see the loopback port as their peer. The front end
//! records, under the source port of the connection it opened, who the
//! outside peer was; handlers look their peer's port up. The entry goes when
//! the front end's connection closes (its [`PeerEntry`] is dropped).
//!
//! Where the server accepts the outside connection itself, no table is
//! needed: [`crate::ProxiedStream`] is tonic's `Connected` and carries both
//! addresses to every request.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::stream::PeerInfo;

#[derive(Debug, Default)]
struct Inner {
    by_port: Mutex<HashMap<u16, (u64, PeerInfo)>>,
    next: AtomicU64,
}

/// Inner connections' source ports to their outside peers.
#[derive(Clone, Debug, Default)]
pub struct PeerTable(Arc<Inner>);

/// One entry of a [`PeerTable`]: removed when dropped.
#[derive(Debug)]
pub struct PeerEntry {
    table: PeerTable,
    port: u16,
    id: u64,
}

impl PeerTable {
    fn map(&self) -> MutexGuard<'_, HashMap<u16, (u64, PeerInfo)>> {
        // A panic elsewhere while holding the lock leaves a map that is
        // still whole (every operation is one insert or remove).
        self.0.by_port.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that the inner connection from source port `port` carries
    /// `peer`'s traffic, until the returned entry is dropped. A port
    /// reused before the old entry was dropped takes the place over; the
    /// old entry's drop then leaves the new one alone.
    pub fn insert(&self, port: u16, peer: PeerInfo) -> PeerEntry {
        let id = self.0.next.fetch_add(1, Ordering::Relaxed);
        self.map().insert(port, (id, peer));
        PeerEntry {
            table: self.clone(),
            port,
            id,
        }
    }

    /// The outside peer of the inner connection whose source port is
    /// `port`.
    pub fn get(&self, port: u16) -> Option<PeerInfo> {
        self.map().get(&port).map(|(_, p)| p.clone())
    }

    /// The outside peer of the inner connection a handler sees as
    /// `seen` (its remote address).
    pub fn lookup(&self, seen: SocketAddr) -> Option<PeerInfo> {
        self.get(seen.port())
    }

    /// Entries held now.
    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for PeerEntry {
    fn drop(&mut self) {
        let mut map = self.table.map();
        if map.get(&self.port).is_some_and(|(id, _)| *id == self.id) {
            map.remove(&self.port);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(claimed: &str) -> PeerInfo {
        PeerInfo {
            claimed: Some(claimed.parse().unwrap()),
            claimed_destination: None,
            measured: "10.0.0.1:5000".parse().unwrap(),
            local: "10.0.0.2:443".parse().unwrap(),
            unique_id: None,
        }
    }

    #[test]
    fn an_entry_lives_until_dropped_and_a_reused_port_survives_the_old_drop() {
        let t = PeerTable::default();
        let a = t.insert(40000, peer("192.0.2.1:1"));
        assert_eq!(
            t.lookup("127.0.0.1:40000".parse().unwrap())
                .unwrap()
                .claimed,
            Some("192.0.2.1:1".parse().unwrap())
        );
        let b = t.insert(40000, peer("192.0.2.2:2"));
        drop(a);
        assert_eq!(
            t.get(40000).unwrap().claimed,
            Some("192.0.2.2:2".parse().unwrap())
        );
        drop(b);
        assert!(t.is_empty());
        assert_eq!(t.get(40000), None);
    }
}
