//! Who gets a slot (`[limits]`, docs/fleet.md): TLS handshakes in progress, per
//! listener and per source address; established api connections; tunnels,
//! per appliance and in total. Each is taken without waiting (a connection
//! beyond a bound is closed at once, a tunnel beyond is refused with an
//! answer) and given back when its guard drops, so a flood of idle
//! connections holds a bounded number of descriptors.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::limits::Limit;

/// What one source is: an IPv4 address, or an IPv6 /64 (one host's
/// usual allocation, which it can spread over as many addresses as it likes).
fn source_of(peer: SocketAddr) -> IpAddr {
    match peer.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
        ip => ip,
    }
}

/// Counts per key, each below a bound; a [`Counted`] gives its unit back.
#[derive(Debug)]
struct PerKey<K: std::hash::Hash + Eq + Clone> {
    counts: Mutex<HashMap<K, u32>>,
}

impl<K: std::hash::Hash + Eq + Clone> PerKey<K> {
    fn new() -> Arc<PerKey<K>> {
        Arc::new(PerKey {
            counts: Mutex::new(HashMap::new()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, u32>> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn try_take(self: &Arc<Self>, key: K, max: u32) -> Option<Counted<K>> {
        let mut m = self.lock();
        let n = m.entry(key.clone()).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(Counted {
            of: self.clone(),
            key,
        })
    }
}

/// One unit of a [`PerKey`] count.
#[derive(Debug)]
struct Counted<K: std::hash::Hash + Eq + Clone> {
    of: Arc<PerKey<K>>,
    key: K,
}

impl<K: std::hash::Hash + Eq + Clone> Drop for Counted<K> {
    fn drop(&mut self) {
        let mut m = self.of.lock();
        if let Some(n) = m.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.key);
            }
        }
    }
}

/// The TLS handshakes (and prefaces) in progress on one listener.
#[derive(Debug)]
pub struct Handshakes {
    all: Arc<Semaphore>,
    per_source: Arc<PerKey<IpAddr>>,
    max_per_source: u32,
}

/// A handshake's slot, given back when dropped.
#[derive(Debug)]
pub struct HandshakeSlot {
    _all: OwnedSemaphorePermit,
    _source: Counted<IpAddr>,
}

impl Handshakes {
    /// At most `max` at once, `max_per_source` of them from one source.
    pub fn new(max: u32, max_per_source: u32) -> Handshakes {
        Handshakes {
            all: Arc::new(Semaphore::new(max as usize)),
            per_source: PerKey::new(),
            max_per_source,
        }
    }

    /// A slot for a connection from `peer`, or the bound that refused it.
    pub fn try_admit(&self, peer: SocketAddr) -> Result<HandshakeSlot, Limit> {
        let source = self
            .per_source
            .try_take(source_of(peer), self.max_per_source)
            .ok_or(Limit::HandshakesPerSource)?;
        let all = self
            .all
            .clone()
            .try_acquire_owned()
            .map_err(|_| Limit::Handshakes)?;
        Ok(HandshakeSlot {
            _all: all,
            _source: source,
        })
    }
}

/// The tunnels of every appliance, opened or being opened.
#[derive(Debug)]
pub struct TunnelSlots {
    all: Arc<Semaphore>,
    per_appliance: Arc<PerKey<String>>,
    max_per_appliance: u32,
}

/// A tunnel's slot, held for its life.
#[derive(Debug)]
pub struct TunnelSlot {
    _all: OwnedSemaphorePermit,
    _appliance: Counted<String>,
}

impl TunnelSlots {
    /// At most `max` tunnels, `max_per_appliance` of one appliance.
    pub fn new(max: u32, max_per_appliance: u32) -> TunnelSlots {
        TunnelSlots {
            all: Arc::new(Semaphore::new(max as usize)),
            per_appliance: PerKey::new(),
            max_per_appliance,
        }
    }

    /// A slot for one more tunnel of `appliance`, or the bound that refused it.
    pub fn try_take(&self, appliance: &str) -> Result<TunnelSlot, Limit> {
        let one = self
            .per_appliance
            .try_take(appliance.to_string(), self.max_per_appliance)
            .ok_or(Limit::TunnelsPerAppliance)?;
        let all = self
            .all
            .clone()
            .try_acquire_owned()
            .map_err(|_| Limit::Tunnels)?;
        Ok(TunnelSlot {
            _all: all,
            _appliance: one,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn handshakes_are_bounded_per_source_and_in_total_and_given_back() {
        let h = Handshakes::new(3, 2);
        let a1 = h.try_admit(at("10.0.0.1:1000")).unwrap();
        let _a2 = h.try_admit(at("10.0.0.1:1001")).unwrap();
        assert_eq!(
            h.try_admit(at("10.0.0.1:1002")).unwrap_err(),
            Limit::HandshakesPerSource
        );
        let _b1 = h.try_admit(at("10.0.0.2:1000")).unwrap();
        assert_eq!(
            h.try_admit(at("10.0.0.3:1000")).unwrap_err(),
            Limit::Handshakes
        );
        drop(a1);
        let _c1 = h.try_admit(at("10.0.0.3:1000")).unwrap();
        // The refused per-source try left no count behind.
        assert_eq!(
            h.per_source.lock().get(&"10.0.0.3".parse().unwrap()),
            Some(&1)
        );
    }

    #[test]
    fn an_ipv6_64_is_one_source() {
        let h = Handshakes::new(10, 1);
        let _a = h.try_admit(at("[2001:db8:1:2::1]:1")).unwrap();
        assert_eq!(
            h.try_admit(at("[2001:db8:1:2:ffff::9]:1")).unwrap_err(),
            Limit::HandshakesPerSource
        );
        let _b = h.try_admit(at("[2001:db8:1:3::1]:1")).unwrap();
        let _v4 = h.try_admit(at("[::ffff:10.0.0.1]:1")).unwrap();
        assert_eq!(
            h.try_admit(at("10.0.0.1:2")).unwrap_err(),
            Limit::HandshakesPerSource
        );
    }

    #[test]
    fn tunnels_are_bounded_per_appliance_and_in_total() {
        let t = TunnelSlots::new(3, 2);
        let a1 = t.try_take("a").unwrap();
        let _a2 = t.try_take("a").unwrap();
        assert_eq!(t.try_take("a").unwrap_err(), Limit::TunnelsPerAppliance);
        let _b1 = t.try_take("b").unwrap();
        assert_eq!(t.try_take("c").unwrap_err(), Limit::Tunnels);
        drop(a1);
        let _c1 = t.try_take("c").unwrap();
        assert!(t.per_appliance.lock().get("a") == Some(&1));
    }
}
