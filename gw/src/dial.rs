//! One connection per address, made outside any shared lock (a peer that
//! never answers holds up only its own callers): at most one connect in flight per address; callers of that
//! address wait for it (and share its error), callers of other addresses
//! never do. A connect that failed is not retried for [`HOLD_DOWN`]: calls
//! to a dead or blackholed address fail at once meanwhile instead of each
//! waiting out a connect timeout.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a failed connect is answered from memory.
pub const HOLD_DOWN: Duration = Duration::from_secs(1);

/// What an address's slot holds: its connection, or its last failure.
struct Slot<C> {
    conn: Option<C>,
    failed: Option<(Instant, String)>,
}

/// Connections by address.
pub struct Dialer<K, C> {
    slots: Mutex<HashMap<K, Arc<tokio::sync::Mutex<Slot<C>>>>>,
}

impl<K, C> std::fmt::Debug for Dialer<K, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Dialer")
    }
}

impl<K, C> Default for Dialer<K, C> {
    fn default() -> Self {
        Dialer {
            slots: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Hash + Eq + Clone, C: Clone + Send + 'static> Dialer<K, C> {
    /// The connection to `addr`: the one held if `usable` says it still
    /// is, else a new one from `connect` (the only connect to `addr` in
    /// flight; others wait for it). The connect runs in a task of its own,
    /// so a caller that gives up does not abort it: its result still
    /// reaches the callers waiting behind.
    pub async fn get<Fut>(
        &self,
        addr: &K,
        usable: impl Fn(&C) -> bool,
        connect: Fut,
    ) -> Result<C, String>
    where
        Fut: Future<Output = Result<C, String>> + Send + 'static,
    {
        let asked = Instant::now();
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            slots.entry(addr.clone()).or_default().clone()
        };
        // Only this address's callers wait here.
        let mut slot = slot.lock_owned().await;
        if let Some(c) = slot.conn.as_ref().filter(|c| usable(c)) {
            return Ok(c.clone());
        }
        if let Some((at, why)) = &slot.failed {
            // Failed while this caller waited, or a moment ago.
            if *at >= asked || at.elapsed() < HOLD_DOWN {
                return Err(why.clone());
            }
        }
        let dialing = tokio::spawn(async move {
            let r = connect.await;
            *slot = match &r {
                Ok(c) => Slot {
                    conn: Some(c.clone()),
                    failed: None,
                },
                Err(why) => Slot {
                    conn: None,
                    failed: Some((Instant::now(), why.clone())),
                },
            };
            r
        });
        dialing
            .await
            .unwrap_or_else(|e| Err(format!("connecting: {e}")))
    }
}

impl<C> Default for Slot<C> {
    fn default() -> Self {
        Slot {
            conn: None,
            failed: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test]
    async fn a_hanging_connect_delays_only_its_own_address() {
        let d: Arc<Dialer<u16, u32>> = Arc::default();
        let connects = Arc::new(AtomicU32::new(0));
        let dead = |d: Arc<Dialer<u16, u32>>, n: Arc<AtomicU32>| async move {
            d.get(&1, |_| true, async move {
                n.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(300)).await;
                Err::<u32, _>("no answer within 2s".to_string())
            })
            .await
        };
        let waiting: Vec<_> = (0..5)
            .map(|_| tokio::spawn(dead(d.clone(), connects.clone())))
            .collect();
        tokio::time::sleep(Duration::from_millis(10)).await;
        // Another address answers at once meanwhile.
        let t0 = tokio::time::Instant::now();
        let ok = d.get(&2, |_| true, async { Ok(7) }).await;
        assert_eq!(ok, Ok(7));
        assert!(
            t0.elapsed() < Duration::from_millis(100),
            "{:?}",
            t0.elapsed()
        );
        for w in waiting {
            assert_eq!(w.await.unwrap(), Err("no answer within 2s".to_string()));
        }
        assert_eq!(connects.load(Ordering::Relaxed), 1, "one connect in flight");
        // Within the hold-down: at once, no connect.
        let t0 = tokio::time::Instant::now();
        assert!(dead(d.clone(), connects.clone()).await.is_err());
        assert!(
            t0.elapsed() < Duration::from_millis(100),
            "{:?}",
            t0.elapsed()
        );
        assert_eq!(connects.load(Ordering::Relaxed), 1);
        // After it: tried again.
        tokio::time::sleep(HOLD_DOWN).await;
        assert!(dead(d.clone(), connects.clone()).await.is_err());
        assert_eq!(connects.load(Ordering::Relaxed), 2);
        // A caller that gives up does not abort the connect: the caller
        // waiting behind it gets its result, with no second connect.
        tokio::time::sleep(HOLD_DOWN).await;
        let impatient =
            tokio::time::timeout(Duration::from_millis(50), dead(d.clone(), connects.clone()));
        let patient = tokio::spawn(dead(d.clone(), connects.clone()));
        assert!(impatient.await.is_err(), "gave up first");
        assert!(patient.await.unwrap().is_err());
        assert_eq!(connects.load(Ordering::Relaxed), 3);
    }

    #[tokio::test]
    async fn a_held_connection_is_reused_until_unusable() {
        let d: Dialer<u16, u32> = Dialer::default();
        assert_eq!(d.get(&1, |_| true, async { Ok(1) }).await, Ok(1));
        assert_eq!(d.get(&1, |_| true, async { Ok(2) }).await, Ok(1));
        assert_eq!(d.get(&1, |c| *c != 1, async { Ok(3) }).await, Ok(3));
    }
}
