//! `[limits]` of border-gw's config (docs/fleet.md): how much
//! any caller, appliance or stranger may make the gateway hold, and the
//! counters of what each bound refused (`border_gw_limit_refusals_total`).
//!
//! The bounds themselves are enforced where the resource is taken:
//! [`crate::admission`] (handshakes, connections, tunnels),
//! [`crate::api`] (HTTP/2 settings), [`crate::forward`] (body reads and the
//! byte budget, [`mgmt::budget`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use conf::duration::{self, Ms};
use serde::Deserialize;

/// The validated `[limits]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GwLimits {
    /// TLS handshakes (and, on `agent_listen`, prefaces) in progress at once,
    /// on each listener; a connection beyond is closed at once.
    pub handshakes: u32,
    /// The same, per source address (an IPv4 address, an IPv6 /64);
    /// default 16, or `handshakes` if lower.
    pub handshakes_per_source: u32,
    /// How long the TLS handshake and the preface (a tunnel's, or the
    /// HTTP/2 client preface on `api_listen`) may take together.
    pub handshake_timeout: Duration,
    /// Established connections on `api_listen` at once.
    pub api_connections: u32,
    /// Tunnels of all appliances at once.
    pub tunnels: u32,
    /// Tunnels of one appliance at once.
    pub tunnels_per_appliance: u32,
    /// HTTP/2 streams (calls) open at once on one `api_listen` connection.
    pub streams_per_connection: u32,
    /// How long a request body may take to arrive whole.
    pub body_read_timeout: Duration,
    /// Request bytes buffered at once, all callers together (MiB).
    pub request_memory_mib: u32,
    /// Of `request_memory_mib`, what only operators may take (MiB): readers
    /// share the rest.
    pub operator_reserve_mib: u32,
}

impl Default for GwLimits {
    fn default() -> GwLimits {
        GwLimits {
            handshakes: 256,
            handshakes_per_source: 16,
            handshake_timeout: Duration::from_millis(3000),
            api_connections: 1024,
            tunnels: 8192,
            tunnels_per_appliance: 500,
            streams_per_connection: 64,
            body_read_timeout: Duration::from_millis(10_000),
            request_memory_mib: 64,
            operator_reserve_mib: 16,
        }
    }
}

/// `[limits]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    handshakes: Option<u32>,
    handshakes_per_source: Option<u32>,
    #[serde(default, deserialize_with = "duration::plain::<Ms, u32, _>")]
    handshake_timeout_ms: Option<u32>,
    api_connections: Option<u32>,
    tunnels: Option<u32>,
    tunnels_per_appliance: Option<u32>,
    streams_per_connection: Option<u32>,
    #[serde(default, deserialize_with = "duration::plain::<Ms, u32, _>")]
    body_read_timeout_ms: Option<u32>,
    request_memory_mib: Option<u32>,
    operator_reserve_mib: Option<u32>,
}

/// The largest request border-gw forwards, in MiB rounded up: the budget
/// must hold one of them whole.
const MIN_REQUEST_MEMORY_MIB: u32 = 8;

fn ranged(key: &str, v: Option<u32>, default: u32, lo: u32, hi: u32) -> Result<u32, String> {
    let n = v.unwrap_or(default);
    if (lo..=hi).contains(&n) {
        Ok(n)
    } else {
        Err(format!(
            "limits.{key}: {n} is out of range (expected {lo}..={hi})"
        ))
    }
}

/// Validates `raw`; errors are one line naming the key.
pub fn parse(raw: Option<RawLimits>) -> Result<GwLimits, String> {
    let r = raw.unwrap_or_default();
    let d = GwLimits::default();
    let ms = |d: Duration| d.as_millis() as u32;
    let handshakes = ranged("handshakes", r.handshakes, d.handshakes, 1, 65_536)?;
    let handshakes_per_source = ranged(
        "handshakes_per_source",
        r.handshakes_per_source,
        d.handshakes_per_source.min(handshakes),
        1,
        65_536,
    )?;
    if handshakes_per_source > handshakes {
        return Err(format!(
            "limits.handshakes_per_source: {handshakes_per_source} is above limits.handshakes ({handshakes})"
        ));
    }
    let tunnels = ranged("tunnels", r.tunnels, d.tunnels, 1, 1 << 20)?;
    let tunnels_per_appliance = ranged(
        "tunnels_per_appliance",
        r.tunnels_per_appliance,
        d.tunnels_per_appliance,
        1,
        1 << 20,
    )?;
    let request_memory_mib = ranged(
        "request_memory_mib",
        r.request_memory_mib,
        d.request_memory_mib,
        MIN_REQUEST_MEMORY_MIB,
        16_384,
    )?;
    let operator_reserve_mib = ranged(
        "operator_reserve_mib",
        r.operator_reserve_mib,
        d.operator_reserve_mib,
        0,
        16_384,
    )?;
    if operator_reserve_mib >= request_memory_mib {
        return Err(format!(
            "limits.operator_reserve_mib: {operator_reserve_mib} leaves readers nothing of limits.request_memory_mib ({request_memory_mib})"
        ));
    }
    Ok(GwLimits {
        handshakes,
        handshakes_per_source,
        handshake_timeout: Duration::from_millis(
            ranged(
                "handshake_timeout_ms",
                r.handshake_timeout_ms,
                ms(d.handshake_timeout),
                100,
                600_000,
            )?
            .into(),
        ),
        api_connections: ranged(
            "api_connections",
            r.api_connections,
            d.api_connections,
            1,
            1 << 20,
        )?,
        tunnels,
        tunnels_per_appliance,
        streams_per_connection: ranged(
            "streams_per_connection",
            r.streams_per_connection,
            d.streams_per_connection,
            1,
            10_000,
        )?,
        body_read_timeout: Duration::from_millis(
            ranged(
                "body_read_timeout_ms",
                r.body_read_timeout_ms,
                ms(d.body_read_timeout),
                100,
                600_000,
            )?
            .into(),
        ),
        request_memory_mib,
        operator_reserve_mib,
    })
}

/// A bound of `[limits]` that refused something: the `limit` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// `handshakes`: a connection arrived while that many were in progress.
    Handshakes,
    /// `handshakes_per_source`: the same, from one source.
    HandshakesPerSource,
    /// `handshake_timeout_ms`: TLS and the preface took too long.
    HandshakeTimeout,
    /// `api_connections`: that many calls' connections were open.
    ApiConnections,
    /// `tunnels`: the gateway held that many tunnels.
    Tunnels,
    /// `tunnels_per_appliance`: the gateway held that many of the appliance's.
    TunnelsPerAppliance,
    /// `body_read_timeout_ms`: a request body did not arrive in time.
    BodyReadTimeout,
    /// `request_memory_mib`: the byte budget of all callers was taken.
    RequestMemory,
    /// `request_memory_mib` less `operator_reserve_mib`: the readers' part
    /// of the budget was taken.
    ReaderRequestMemory,
}

/// Where a bound applies: the `listener` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// `agent_listen`: tunnels.
    Agent,
    /// `api_listen`: calls.
    Api,
}

impl Listener {
    /// The `listener` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Listener::Agent => "agent",
            Listener::Api => "api",
        }
    }
}

impl Limit {
    /// Every limit with the listener it refuses on, in rendering order.
    pub const ALL: [(Listener, Limit); 12] = [
        (Listener::Agent, Limit::Handshakes),
        (Listener::Agent, Limit::HandshakesPerSource),
        (Listener::Agent, Limit::HandshakeTimeout),
        (Listener::Agent, Limit::Tunnels),
        (Listener::Agent, Limit::TunnelsPerAppliance),
        (Listener::Api, Limit::Handshakes),
        (Listener::Api, Limit::HandshakesPerSource),
        (Listener::Api, Limit::HandshakeTimeout),
        (Listener::Api, Limit::ApiConnections),
        (Listener::Api, Limit::BodyReadTimeout),
        (Listener::Api, Limit::RequestMemory),
        (Listener::Api, Limit::ReaderRequestMemory),
    ];

    /// The `limit` label: the `[limits]` key (`_ms`, `_mib` left out).
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Handshakes => "handshakes",
            Limit::HandshakesPerSource => "handshakes_per_source",
            Limit::HandshakeTimeout => "handshake_timeout",
            Limit::ApiConnections => "api_connections",
            Limit::Tunnels => "tunnels",
            Limit::TunnelsPerAppliance => "tunnels_per_appliance",
            Limit::BodyReadTimeout => "body_read_timeout",
            Limit::RequestMemory => "request_memory",
            Limit::ReaderRequestMemory => "reader_request_memory",
        }
    }
}

/// What each bound refused since the start.
#[derive(Debug, Default)]
pub struct Refusals {
    counts: [AtomicU64; Limit::ALL.len()],
}

impl Refusals {
    fn index(listener: Listener, limit: Limit) -> usize {
        Limit::ALL
            .iter()
            .position(|x| *x == (listener, limit))
            .unwrap_or(0)
    }

    /// Counts one refusal by `limit` on `listener`.
    pub fn count(&self, listener: Listener, limit: Limit) {
        self.counts[Self::index(listener, limit)].fetch_add(1, Ordering::Relaxed);
    }

    /// Refusals by `limit` on `listener`.
    pub fn get(&self, listener: Listener, limit: Limit) -> u64 {
        self.counts[Self::index(listener, limit)].load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Option<RawLimits> {
        Some(toml::from_str(text).unwrap())
    }

    #[test]
    fn defaults_and_overrides() {
        assert_eq!(parse(None).unwrap(), GwLimits::default());
        let l = parse(raw("handshakes = 10\nhandshake_timeout_ms = 500")).unwrap();
        assert_eq!(l.handshakes, 10);
        assert_eq!(
            l.handshakes_per_source, 10,
            "the default, 16, capped at handshakes"
        );
        assert_eq!(l.handshake_timeout, Duration::from_millis(500));
        let l = parse(raw(
            "handshake_timeout_ms = \"2s\"\nbody_read_timeout_ms = \"1m\"",
        ))
        .unwrap();
        assert_eq!(l.handshake_timeout, Duration::from_secs(2));
        assert_eq!(l.body_read_timeout, Duration::from_secs(60));
    }

    #[test]
    fn bad_values_are_one_line_naming_the_key() {
        let e = parse(raw("handshakes = 0")).unwrap_err();
        assert_eq!(
            e,
            "limits.handshakes: 0 is out of range (expected 1..=65536)"
        );
        let e = parse(raw("handshakes = 4\nhandshakes_per_source = 8")).unwrap_err();
        assert!(
            e.starts_with("limits.handshakes_per_source: 8 is above"),
            "{e}"
        );
        let e = parse(raw("request_memory_mib = 4")).unwrap_err();
        assert!(
            e.starts_with("limits.request_memory_mib: 4 is out of range"),
            "{e}"
        );
        let e = parse(raw("request_memory_mib = 16\noperator_reserve_mib = 16")).unwrap_err();
        assert!(
            e.starts_with("limits.operator_reserve_mib: 16 leaves"),
            "{e}"
        );
        let e = parse(raw("body_read_timeout_ms = 1")).unwrap_err();
        assert!(e.starts_with("limits.body_read_timeout_ms: 1 "), "{e}");
    }

    #[test]
    fn each_refusal_counts_under_its_listener() {
        let r = Refusals::default();
        r.count(Listener::Api, Limit::Handshakes);
        r.count(Listener::Api, Limit::Handshakes);
        r.count(Listener::Agent, Limit::Tunnels);
        assert_eq!(r.get(Listener::Api, Limit::Handshakes), 2);
        assert_eq!(r.get(Listener::Agent, Limit::Handshakes), 0);
        assert_eq!(r.get(Listener::Agent, Limit::Tunnels), 1);
    }
}
