//! border-gw's config file (TOML, docs/fleet.md): its listeners, its TLS
//! material, the pinned certificates of each appliance and of the
//! control-plane clients, and the Redis registry.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use conf::duration::{self, Ms};
use serde::Deserialize;

/// A validated config.
#[derive(Debug, Clone)]
pub struct GwConfig {
    /// This gateway's name in logs and in the registry.
    pub id: String,
    /// Where agents dial their tunnels.
    pub agent_listen: SocketAddr,
    /// Where control-plane clients (borderctl, other gateways) call.
    pub api_listen: SocketAddr,
    /// `api_listen` as other gateways reach it (default `api_listen`).
    pub advertise: SocketAddr,
    /// Where Prometheus scrapes `/metrics` (none: no exporter).
    pub metrics_listen: Option<SocketAddr>,
    /// Connections open to `metrics_listen` at once; more are closed.
    pub metrics_connections: u32,
    /// `redis://[user:password@]host:port/db`, or `rediss://` (TLS).
    pub redis: crate::redis_conn::RedisUrl,
    /// How long a registry entry lives unless refreshed.
    pub registry_ttl: Duration,
    /// Server certificate chain (PEM) of both listeners; also the client
    /// identity towards other gateways.
    pub cert: PathBuf,
    /// Its key (PEM).
    pub key: PathBuf,
    /// CA of agents', control-plane clients' and other gateways' certificates.
    pub client_ca: PathBuf,
    /// Pinned control-plane clients (`sha256:<hex>`), other gateways
    /// included: operators, every call forwarded.
    pub api_fingerprints: Vec<String>,
    /// Pinned read-only clients: only the calls a reader may make on an
    /// appliance (`mgmt::authz`) are forwarded, the rest refused here.
    pub reader_fingerprints: Vec<String>,
    /// Pinned certificates per appliance id.
    pub appliances: HashMap<String, Vec<String>>,
    /// CA of the Redis server's certificate (`rediss://` only).
    pub redis_ca: Option<PathBuf>,
    /// The other gateways (`[[peer]]`): api address (as they advertise
    /// it) and pinned certificates. Registry entries naming any other
    /// address are ignored; a peer whose certificate is not pinned for its
    /// address gets no call.
    pub peers: HashMap<SocketAddr, Vec<String>>,
    /// `[limits]`: connections, tunnels, streams, body reads, request memory.
    pub limits: crate::limits::GwLimits,
}

impl GwConfig {
    /// True when `fingerprint` is a pinned peer gateway's: its calls are
    /// forwarded ones, and the original caller it names is believed.
    pub fn is_peer(&self, fingerprint: &str) -> bool {
        self.peers
            .values()
            .any(|pins| pins.iter().any(|p| p == fingerprint))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPeer {
    address: String,
    fingerprints: Vec<String>,
}

/// `[[peer]]`: each address once, not this gateway's own, at least one pin.
fn peers(
    raw: &[RawPeer],
    advertise: SocketAddr,
) -> Result<HashMap<SocketAddr, Vec<String>>, String> {
    let mut out: HashMap<SocketAddr, Vec<String>> = HashMap::new();
    for (i, p) in raw.iter().enumerate() {
        let address = addr(&format!("peer[{i}].address"), &p.address)?;
        if address == advertise {
            return Err(format!(
                "peer[{i}].address: {address} is this gateway's own advertise address"
            ));
        }
        let mut pins = Vec::new();
        for (j, f) in p.fingerprints.iter().enumerate() {
            pins.push(pin(&format!("peer[{i}].fingerprints[{j}]"), f)?);
        }
        if pins.is_empty() {
            return Err(format!(
                "peer[{i}].fingerprints: must pin at least one certificate"
            ));
        }
        if out.insert(address, pins).is_some() {
            return Err(format!(
                "peer[{i}].address: {address} is listed twice (expected each gateway once)"
            ));
        }
    }
    Ok(out)
}

/// `redis` and `redis_ca`: a `rediss://` URL needs the CA. Errors never
/// show the password.
fn redis(
    url: &str,
    ca: Option<PathBuf>,
) -> Result<(crate::redis_conn::RedisUrl, Option<PathBuf>), String> {
    let url = crate::redis_conn::RedisUrl::parse(url).map_err(|e| format!("redis: {e}"))?;
    match (&ca, url.tls) {
        (None, true) => Err(format!(
            "redis_ca: missing: {url} is TLS (rediss://) and needs the CA of Redis's certificate (expected redis_ca = \"/etc/border/redis-ca.pem\")"
        )),
        (Some(_), false) => Err(format!(
            "redis_ca: set, but {url} is not TLS (expected a rediss:// URL)"
        )),
        _ => Ok((url, ca)),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    id: String,
    agent_listen: String,
    api_listen: String,
    advertise: Option<String>,
    metrics_listen: Option<String>,
    metrics_connections: Option<u32>,
    redis: String,
    #[serde(default, deserialize_with = "duration::plain::<Ms, u64, _>")]
    registry_ttl_ms: Option<u64>,
    tls: RawTls,
    #[serde(default)]
    appliance: Vec<RawAppliance>,
    redis_ca: Option<PathBuf>,
    #[serde(default)]
    peer: Vec<RawPeer>,
    // [limits]: see crate::limits.
    limits: Option<crate::limits::RawLimits>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert: PathBuf,
    key: PathBuf,
    client_ca: PathBuf,
    api_fingerprints: Vec<String>,
    #[serde(default)]
    reader_fingerprints: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAppliance {
    id: String,
    fingerprints: Vec<String>,
}

fn addr(key: &str, s: &str) -> Result<SocketAddr, String> {
    s.parse::<SocketAddr>()
        .ok()
        .filter(|a| a.port() != 0)
        .ok_or_else(|| format!("{key}: {s:?} is not ip:port (expected e.g. \"0.0.0.0:7443\")"))
}

fn pin(key: &str, s: &str) -> Result<String, String> {
    let hex = s.strip_prefix("sha256:").unwrap_or("");
    if hex.len() == 64 && hex.chars().all(|c| c.is_ascii_hexdigit()) {
        Ok(s.to_ascii_lowercase())
    } else {
        Err(format!(
            "{key}: {s:?} is not a certificate fingerprint (expected \"sha256:\" and 64 hex digits)"
        ))
    }
}

/// Parses and validates `text`; errors are one line naming the key.
pub fn parse(text: &str) -> Result<GwConfig, String> {
    let raw: Raw = toml::from_str(text).map_err(|e| {
        let msg = e.message().to_string();
        match e.span() {
            Some(s) => {
                let line = text[..s.start].matches('\n').count() + 1;
                format!("line {line}: {msg}")
            }
            None => msg,
        }
    })?;
    let id_ok = |s: &str| {
        !s.is_empty()
            && s.len() <= 64
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    };
    if !id_ok(&raw.id) {
        return Err(format!(
            "id: {:?} is not 1..=64 characters from A-Z a-z 0-9 - _ .",
            raw.id
        ));
    }
    let agent_listen = addr("agent_listen", &raw.agent_listen)?;
    let api_listen = addr("api_listen", &raw.api_listen)?;
    if agent_listen == api_listen {
        return Err("api_listen: is also agent_listen (expected two sockets)".into());
    }
    let advertise = match &raw.advertise {
        Some(a) => addr("advertise", a)?,
        None => api_listen,
    };
    let metrics_listen = match &raw.metrics_listen {
        Some(m) => Some(addr("metrics_listen", m)?),
        None => None,
    };
    if metrics_listen.is_some_and(|m| m == agent_listen || m == api_listen) {
        return Err(
            "metrics_listen: is also agent_listen or api_listen (expected a socket of its own)"
                .into(),
        );
    }
    let metrics_connections = raw.metrics_connections.unwrap_or(16);
    if !(1..=65_536).contains(&metrics_connections) {
        return Err(format!(
            "metrics_connections: {metrics_connections} is out of range (expected 1..=65536)"
        ));
    }
    let (redis_url, redis_ca) = redis(&raw.redis, raw.redis_ca)?;
    let peers = peers(&raw.peer, advertise)?;
    let ttl = raw.registry_ttl_ms.unwrap_or(10_000);
    if !(300..=3_600_000).contains(&ttl) {
        return Err(format!(
            "registry_ttl_ms: {ttl} is out of range (expected 300..=3600000)"
        ));
    }
    let mut api_fingerprints = Vec::new();
    for (i, f) in raw.tls.api_fingerprints.iter().enumerate() {
        api_fingerprints.push(pin(&format!("tls.api_fingerprints[{i}]"), f)?);
    }
    if api_fingerprints.is_empty() {
        return Err("tls.api_fingerprints: must pin at least one control-plane client".into());
    }
    let mut reader_fingerprints = Vec::new();
    for (i, f) in raw.tls.reader_fingerprints.iter().enumerate() {
        let key = format!("tls.reader_fingerprints[{i}]");
        let p = pin(&key, f)?;
        if let Some(j) = api_fingerprints.iter().position(|a| *a == p) {
            return Err(format!(
                "{key}: is also tls.api_fingerprints[{j}] (expected one role per certificate)"
            ));
        }
        reader_fingerprints.push(p);
    }
    let mut appliances: HashMap<String, Vec<String>> = HashMap::new();
    for (i, a) in raw.appliance.iter().enumerate() {
        if !id_ok(&a.id) {
            return Err(format!(
                "appliance[{i}].id: {:?} is not 1..=64 characters from A-Z a-z 0-9 - _ .",
                a.id
            ));
        }
        let mut pins = Vec::new();
        for (j, f) in a.fingerprints.iter().enumerate() {
            pins.push(pin(&format!("appliance[{i}].fingerprints[{j}]"), f)?);
        }
        if pins.is_empty() {
            return Err(format!(
                "appliance[{i}].fingerprints: must pin at least one certificate"
            ));
        }
        if appliances.insert(a.id.clone(), pins).is_some() {
            return Err(format!(
                "appliance[{i}].id: {:?} is listed twice (expected each appliance once)",
                a.id
            ));
        }
    }
    let limits = crate::limits::parse(raw.limits)?;
    Ok(GwConfig {
        id: raw.id,
        agent_listen,
        api_listen,
        advertise,
        metrics_listen,
        metrics_connections,
        redis: redis_url,
        registry_ttl: Duration::from_millis(ttl),
        cert: raw.tls.cert,
        key: raw.tls.key,
        client_ca: raw.tls.client_ca,
        api_fingerprints,
        reader_fingerprints,
        appliances,
        redis_ca,
        peers,
        limits,
    })
}

/// Reads and parses `path`; errors are one line starting with the path.
pub fn load(path: &Path) -> Result<GwConfig, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PIN: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";

    fn text(extra: &str) -> String {
        format!(
            r#"id = "gw1"
agent_listen = "127.0.0.1:7443"
api_listen = "127.0.0.1:7501"
redis = "redis://127.0.0.1:6379/0"
{extra}
[tls]
cert = "gw.pem"
key = "gw.key"
client_ca = "ca.pem"
api_fingerprints = ["{PIN}"]

[[appliance]]
id = "ams-1"
fingerprints = ["{PIN}"]
"#
        )
    }

    #[test]
    fn a_whole_config_parses_with_defaults() {
        let c = parse(&text("")).unwrap();
        assert_eq!(c.advertise, c.api_listen);
        assert_eq!(c.metrics_listen, None);
        assert_eq!(c.metrics_connections, 16);
        assert_eq!(c.registry_ttl, Duration::from_secs(10));
        assert_eq!(c.appliances["ams-1"], vec![PIN.to_string()]);
    }

    #[test]
    fn the_registry_ttl_takes_milliseconds_or_a_duration() {
        let c = parse(&text("registry_ttl_ms = \"30s\"")).unwrap();
        assert_eq!(c.registry_ttl, Duration::from_secs(30));
        let c = parse(&text("registry_ttl_ms = 2500")).unwrap();
        assert_eq!(c.registry_ttl, Duration::from_millis(2500));
        let e = parse(&text("registry_ttl_ms = \"2 fortnights\"")).unwrap_err();
        assert!(e.contains("expected a duration such as 5s"), "{e}");
    }

    #[test]
    fn bad_values_are_one_line_naming_the_key() {
        let e = parse(&text("registry_ttl_ms = 5")).unwrap_err();
        assert!(e.starts_with("registry_ttl_ms: 5 is out of range"), "{e}");
        let e = parse(&text("advertise = \"gw1\"")).unwrap_err();
        assert!(e.starts_with("advertise: "), "{e}");
        let e = parse(&text("metrics_listen = \"127.0.0.1:7501\"")).unwrap_err();
        assert!(e.starts_with("metrics_listen: is also"), "{e}");
        let e = parse(&text("metrics_listen = \"127.0.0.1\"")).unwrap_err();
        assert!(e.starts_with("metrics_listen: "), "{e}");
        let e = parse(&text("metrics_connections = 0")).unwrap_err();
        assert!(
            e.starts_with("metrics_connections: 0 is out of range"),
            "{e}"
        );
        let c = parse(&text("metrics_listen = \"127.0.0.1:9109\"")).unwrap();
        assert_eq!(c.metrics_listen, Some("127.0.0.1:9109".parse().unwrap()));
        let e = parse(&text("bogus = 1")).unwrap_err();
        assert!(e.contains("unknown field `bogus`"), "{e}");
        let e = parse(&text("").replace(PIN, "sha256:zz")).unwrap_err();
        assert!(e.starts_with("tls.api_fingerprints[0]: "), "{e}");
    }

    #[test]
    fn rediss_needs_its_ca_and_the_password_is_never_shown() {
        let with = |url: &str, extra: &str| text(extra).replace("redis://127.0.0.1:6379/0", url);
        let url = "rediss://border-gw:hunter2@127.0.0.1:6380/0";
        let c = parse(&with(url, "redis_ca = \"redis-ca.pem\"")).unwrap();
        assert!(c.redis.tls);
        assert_eq!(c.redis.username.as_deref(), Some("border-gw"));
        assert_eq!(c.redis_ca, Some(PathBuf::from("redis-ca.pem")));
        assert!(!format!("{c:?}").contains("hunter2"));
        let e = parse(&with(url, "")).unwrap_err();
        assert!(e.starts_with("redis_ca: missing"), "{e}");
        assert!(
            !e.contains("hunter2") && e.contains("border-gw:***@"),
            "{e}"
        );
        let e = parse(&with(
            "redis://u:hunter2@127.0.0.1:6379/0",
            "redis_ca = \"x\"",
        ))
        .unwrap_err();
        assert!(e.starts_with("redis_ca: set, but"), "{e}");
        assert!(!e.contains("hunter2"), "{e}");
        let e = parse(&with("http://u:hunter2@h/0", "")).unwrap_err();
        assert!(e.starts_with("redis: "), "{e}");
        assert!(!e.contains("hunter2"), "{e}");
    }

    #[test]
    fn peers_are_pinned_per_address() {
        let peer = format!("sha256:{}", "cd".repeat(32));
        let with = |p: &str| {
            format!(
                "{}\n[[peer]]\naddress = \"127.0.0.2:7501\"\nfingerprints = [{p}]\n",
                text("")
            )
        };
        let c = parse(&with(&format!("{peer:?}"))).unwrap();
        let addr: SocketAddr = "127.0.0.2:7501".parse().unwrap();
        assert_eq!(c.peers[&addr], vec![peer.clone()]);
        assert!(c.is_peer(&peer));
        assert!(!c.is_peer(PIN));
        assert!(parse(&text("")).unwrap().peers.is_empty());
        let e = parse(&with("")).unwrap_err();
        assert!(e.starts_with("peer[0].fingerprints: must pin"), "{e}");
        let e = parse(&with("\"sha256:1\"")).unwrap_err();
        assert!(e.starts_with("peer[0].fingerprints[0]: "), "{e}");
        let own = with(&format!("{peer:?}")).replace("127.0.0.2:7501", "127.0.0.1:7501");
        let e = parse(&own).unwrap_err();
        assert!(e.contains("own advertise address"), "{e}");
    }

    #[test]
    fn readers_are_pinned_apart_from_operators() {
        let reader = format!("sha256:{}", "AB".repeat(32));
        let with = |pins: &str| {
            text("").replace(
                "api_fingerprints = [",
                &format!("reader_fingerprints = [{pins}]\napi_fingerprints = ["),
            )
        };
        let c = parse(&with(&format!("{reader:?}"))).unwrap();
        assert_eq!(c.reader_fingerprints, vec![reader.to_ascii_lowercase()]);
        assert!(parse(&text("")).unwrap().reader_fingerprints.is_empty());
        let e = parse(&with(&format!("{PIN:?}"))).unwrap_err();
        assert_eq!(
            e,
            "tls.reader_fingerprints[0]: is also tls.api_fingerprints[0] (expected one role per certificate)"
        );
        let e = parse(&with("\"sha256:1\"")).unwrap_err();
        assert!(e.starts_with("tls.reader_fingerprints[0]: "), "{e}");
    }

    #[test]
    fn the_limits_table_parses_and_its_errors_name_the_key() {
        let with = |l: &str| text("").replace("[tls]", &format!("[limits]\n{l}\n\n[tls]"));
        let c = parse(&with("handshakes = 8\ntunnels_per_appliance = 3")).unwrap();
        assert_eq!(c.limits.handshakes, 8);
        assert_eq!(c.limits.handshakes_per_source, 8);
        assert_eq!(c.limits.tunnels_per_appliance, 3);
        assert_eq!(
            parse(&text("")).unwrap().limits,
            crate::limits::GwLimits::default()
        );
        let e = parse(&with("tunnels = 0")).unwrap_err();
        assert!(e.starts_with("limits.tunnels: 0 is out of range"), "{e}");
        let e = parse(&with("handshake = 3")).unwrap_err();
        assert!(e.contains("unknown field `handshake`"), "{e}");
    }
}
