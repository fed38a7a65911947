//! The tunnel registry in Redis (docs/fleet.md): which gateway holds
//! tunnels of which appliance, and how many (the reference count per
//! gateway and appliance). Written only from this gateway's live tunnels,
//! on every change and every third of the TTL, so a Redis restarted empty
//! is whole again within one TTL.
//!
//! ```text
//! border:fleet:appliance:<id>   ZSET  member = gateway api address, score = expiry (unix ms)
//! border:fleet:gateway:<gw id>  HASH  field = appliance id, value = tunnel count
//! ```

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::aio::MultiplexedConnection;
use tokio::sync::watch;

use crate::redis_conn::RedisUrl;
use crate::tunnels::Tunnels;

/// How long one Redis round trip may take.
const REDIS_TIMEOUT: Duration = Duration::from_secs(1);

/// This gateway's view of the registry.
pub struct Registry {
    url: RedisUrl,
    tls: Option<tokio_rustls::TlsConnector>,
    conn: tokio::sync::Mutex<Option<MultiplexedConnection>>,
    gateway: String,
    member: String,
    ttl: Duration,
    /// Failed round trips and what is published (the metrics).
    pub counters: RegistryCounters,
}

/// The registry's side of the metrics.
#[derive(Debug, Default)]
pub struct RegistryCounters {
    /// Lookups (which gateways hold an appliance) that failed.
    pub lookup_errors: AtomicU64,
    /// Publishes of this gateway's tunnels that failed.
    pub publish_errors: AtomicU64,
    /// Appliances this gateway's entries in Redis name (as last published).
    pub entries: AtomicU64,
    /// 1 while the last round trip to Redis succeeded.
    pub up: AtomicU64,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("gateway", &self.gateway)
            .finish()
    }
}

fn appliance_key(id: &str) -> String {
    format!("border:fleet:appliance:{id}")
}

fn gateway_key(id: &str) -> String {
    format!("border:fleet:gateway:{id}")
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Registry {
    /// The registry at `url`, through `tls` for `rediss://` (nothing is
    /// connected yet).
    pub fn new(
        url: &RedisUrl,
        tls: Option<tokio_rustls::TlsConnector>,
        gateway: &str,
        advertise: SocketAddr,
        ttl: Duration,
    ) -> Result<Registry, String> {
        if url.tls && tls.is_none() {
            return Err(format!(
                "redis: {url} needs redis_ca (the CA of Redis's certificate)"
            ));
        }
        Ok(Registry {
            url: url.clone(),
            tls,
            conn: tokio::sync::Mutex::new(None),
            gateway: gateway.to_string(),
            member: advertise.to_string(),
            ttl,
            counters: RegistryCounters::default(),
        })
    }

    /// Runs `cmd` (a pipeline or a command) with a bounded wait; a failed
    /// connection is dropped so the next call connects again.
    async fn query<T: redis::FromRedisValue>(
        &self,
        f: impl FnOnce(&mut redis::Pipeline),
    ) -> Result<T, String> {
        let mut guard = self.conn.lock().await;
        let mut conn = match guard.as_ref() {
            Some(c) => c.clone(),
            None => {
                let c = self.url.connect(self.tls.as_ref(), REDIS_TIMEOUT).await?;
                *guard = Some(c.clone());
                c
            }
        };
        drop(guard);
        let mut p = redis::pipe();
        f(&mut p);
        let r = tokio::time::timeout(REDIS_TIMEOUT, p.query_async::<T>(&mut conn)).await;
        let r = match r {
            Err(_) => Err(format!("no answer within {REDIS_TIMEOUT:?}")),
            Ok(r) => r.map_err(|e| self.url.redact(&e.to_string())),
        };
        if r.is_err() {
            *self.conn.lock().await = None;
        }
        self.counters
            .up
            .store(u64::from(r.is_ok()), Ordering::Relaxed);
        r
    }

    /// The api addresses of the other gateways that hold tunnels of `appliance`.
    pub async fn holders(&self, appliance: &str) -> Result<Vec<SocketAddr>, String> {
        let key = appliance_key(appliance);
        let now = now_ms();
        let (members,): (Vec<String>,) = self
            .query(|p| {
                p.cmd("ZRANGEBYSCORE").arg(&key).arg(now).arg("+inf");
            })
            .await
            .inspect_err(|_| {
                self.counters.lookup_errors.fetch_add(1, Ordering::Relaxed);
            })?;
        Ok(members
            .iter()
            .filter(|m| **m != self.member)
            .filter_map(|m| m.parse().ok())
            .collect())
    }

    /// Writes this gateway's counts; `gone` are appliances it no longer holds.
    async fn publish(
        &self,
        counts: &HashMap<String, usize>,
        gone: &[String],
    ) -> Result<(), String> {
        let ttl = self.ttl.as_millis() as u64;
        let expiry = now_ms() + ttl;
        let gkey = gateway_key(&self.gateway);
        self.query::<()>(|p| {
            for (id, n) in counts {
                let akey = appliance_key(id);
                p.cmd("ZADD")
                    .arg(&akey)
                    .arg(expiry)
                    .arg(&self.member)
                    .ignore();
                p.cmd("ZREMRANGEBYSCORE")
                    .arg(&akey)
                    .arg("-inf")
                    .arg(now_ms())
                    .ignore();
                p.cmd("PEXPIRE").arg(&akey).arg(ttl).ignore();
                p.cmd("HSET").arg(&gkey).arg(id).arg(*n).ignore();
            }
            for id in gone {
                p.cmd("ZREM")
                    .arg(appliance_key(id))
                    .arg(&self.member)
                    .ignore();
                p.cmd("HDEL").arg(&gkey).arg(id).ignore();
            }
            p.cmd("PEXPIRE").arg(&gkey).arg(ttl).ignore();
        })
        .await
    }

    /// Keeps the registry in step with `tunnels` until `shutdown`, then
    /// removes this gateway's entries.
    pub async fn follow(
        self: Arc<Self>,
        tunnels: Arc<Tunnels>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut changed = tunnels.changed.subscribe();
        let mut every = tokio::time::interval(self.ttl / 3);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut published: HashSet<String> = HashSet::new();
        let mut failing = false;
        loop {
            tokio::select! {
                _ = every.tick() => {}
                r = changed.changed() => if r.is_err() { return },
                _ = shutdown.changed() => break,
            }
            let counts = tunnels.counts();
            let gone: Vec<String> = published
                .iter()
                .filter(|a| !counts.contains_key(*a))
                .cloned()
                .collect();
            match self.publish(&counts, &gone).await {
                Ok(()) => {
                    if failing {
                        tracing::info!("registry: Redis answers again; tunnels published");
                        failing = false;
                    }
                    published = counts.keys().cloned().collect();
                    self.counters
                        .entries
                        .store(published.len() as u64, Ordering::Relaxed);
                }
                Err(e) => {
                    self.counters.publish_errors.fetch_add(1, Ordering::Relaxed);
                    if !failing {
                        tracing::warn!(error = %e, "registry: cannot publish the tunnels to Redis (retrying)");
                        failing = true;
                    }
                }
            }
        }
        let all: Vec<String> = published.into_iter().collect();
        match self.publish(&HashMap::new(), &all).await {
            Ok(()) => self.counters.entries.store(0, Ordering::Relaxed),
            Err(e) => {
                self.counters.publish_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "registry: cannot remove this gateway's entries from Redis");
            }
        }
    }
}
