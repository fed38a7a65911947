//! `[mgmt.agent]`: agent mode, tunnels dialled out to border-gw
//! (docs/fleet.md).

use toml::Spanned as S;

use super::super::raw::RawAgent;
use super::super::{Agent, GatewayAddr};
use super::{at, or, Validator};

/// Longest appliance id.
const MAX_AGENT_ID: usize = 64;
/// Upper bound of `max_tunnels` (each is one TCP connection and a task).
const MAX_TUNNELS: u32 = 10_000;
/// Upper bound of the timing keys, in milliseconds (one hour).
const MAX_MS: u32 = 3_600_000;

/// `tcp://host:port`: a DNS name or IP address (IPv6 in brackets) and a port.
pub(crate) fn parse_gateway(s: &str) -> Result<GatewayAddr, String> {
    let expected = "expected \"tcp://host:port\", e.g. \"tcp://gw1.example.net:7443\"";
    let Some(rest) = s.strip_prefix("tcp://") else {
        return Err(format!("{s:?} is not a gateway address ({expected})"));
    };
    let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
        let Some((h, p)) = v6.split_once("]:") else {
            return Err(format!("{s:?} has no port ({expected})"));
        };
        if h.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!("{s:?}: `{h}` is not an IPv6 address ({expected})"));
        }
        (h, p)
    } else {
        match rest.rsplit_once(':') {
            Some((h, p)) => (h, p),
            None => return Err(format!("{s:?} has no port ({expected})")),
        }
    };
    let host_ok = !host.is_empty()
        && host.len() <= 253
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == ':');
    if !host_ok {
        return Err(format!(
            "{s:?}: `{host}` is not a host name or IP address ({expected})"
        ));
    }
    match p_port(port) {
        Some(port) => Ok(GatewayAddr {
            host: host.to_string(),
            port,
        }),
        None => Err(format!(
            "{s:?}: `{port}` is not a port 1..=65535 ({expected})"
        )),
    }
}

fn p_port(s: &str) -> Option<u16> {
    s.parse::<u16>().ok().filter(|p| *p != 0)
}

impl Validator {
    pub(super) fn agent(&mut self, sa: &S<RawAgent>, have_tls: bool) -> Agent {
        let a = sa.get_ref();
        self.name(&a.id, "mgmt.agent.id", MAX_AGENT_ID, true);
        if !have_tls {
            self.err(
                at(sa),
                "mgmt.agent",
                "requires [mgmt.tls] (its cert and key are the appliance's identity to the gateways, its client_ca verifies them)",
            );
        }
        let mut gateways: Vec<GatewayAddr> = Vec::new();
        if a.gateways.get_ref().is_empty() {
            self.err(
                at(&a.gateways),
                "mgmt.agent.gateways",
                "must list at least one gateway (expected [\"tcp://host:port\"])",
            );
        }
        for (i, g) in a.gateways.get_ref().iter().enumerate() {
            let key = format!("mgmt.agent.gateways[{i}]");
            match parse_gateway(g.get_ref()) {
                Ok(addr) if gateways.contains(&addr) => self.err(
                    at(g),
                    key,
                    format!(
                        "{:?} is listed twice (expected each gateway once)",
                        g.get_ref()
                    ),
                ),
                Ok(addr) => gateways.push(addr),
                Err(msg) => self.err(at(g), key, msg),
            }
        }
        let mut bounded = |v: &Option<S<u32>>, key: &str, default: u32, lo: u32, hi: u32| {
            let x = or(v, default);
            if let Some(s) = v {
                if x < lo || x > hi {
                    self.err(
                        at(s),
                        format!("mgmt.agent.{key}"),
                        format!("{x} is out of range (expected {lo}..={hi})"),
                    );
                }
            }
            x
        };
        let min_idle = bounded(&a.min_idle, "min_idle", 2, 1, 1000);
        let grow_by = bounded(&a.grow_by, "grow_by", 10, 1, 1000);
        let max_tunnels = bounded(&a.max_tunnels, "max_tunnels", 500, 1, MAX_TUNNELS);
        let idle_timeout_ms = bounded(&a.idle_timeout_ms, "idle_timeout_ms", 60_000, 100, MAX_MS);
        let backoff_min_ms = bounded(&a.backoff_min_ms, "backoff_min_ms", 500, 10, MAX_MS);
        let backoff_max_ms = bounded(&a.backoff_max_ms, "backoff_max_ms", 30_000, 10, MAX_MS);
        let backoff_reset_after_ms = bounded(
            &a.backoff_reset_after_ms,
            "backoff_reset_after_ms",
            5_000,
            0,
            MAX_MS,
        );
        if let Some(s) = &a.max_tunnels {
            if max_tunnels < min_idle {
                self.err(
                    at(s),
                    "mgmt.agent.max_tunnels",
                    format!("{max_tunnels} is below min_idle {min_idle} (expected max_tunnels >= min_idle)"),
                );
            }
        }
        if let Some(s) = &a.backoff_max_ms {
            if backoff_max_ms < backoff_min_ms {
                self.err(
                    at(s),
                    "mgmt.agent.backoff_max_ms",
                    format!("{backoff_max_ms} is below backoff_min_ms {backoff_min_ms} (expected backoff_max_ms >= backoff_min_ms)"),
                );
            }
        }
        let gateway_fingerprints = self.gateway_pins(sa);
        Agent {
            id: a.id.get_ref().clone(),
            gateways,
            min_idle,
            grow_by,
            max_tunnels,
            idle_timeout_ms,
            backoff_min_ms,
            backoff_max_ms,
            gateway_fingerprints,
            backoff_reset_after_ms,
        }
    }

    /// `mgmt.agent.gateway_fingerprints`: at least one, each
    /// `sha256:<64 hex>`, normalised to lowercase.
    fn gateway_pins(&mut self, sa: &S<RawAgent>) -> Vec<String> {
        let Some(list) = &sa.get_ref().gateway_fingerprints else {
            self.err(
                at(sa),
                "mgmt.agent.gateway_fingerprints",
                "missing: pin the gateways' certificates (expected [\"sha256:<64 hex digits>\", ...]; `border-gw`'s cert fingerprint, see docs/fleet.md)",
            );
            return Vec::new();
        };
        if list.get_ref().is_empty() {
            self.err(
                at(list),
                "mgmt.agent.gateway_fingerprints",
                "must pin at least one gateway certificate",
            );
        }
        let mut pins = Vec::new();
        for (i, f) in list.get_ref().iter().enumerate() {
            let hex = f.get_ref().strip_prefix("sha256:").unwrap_or("");
            if hex.len() == 64 && hex.chars().all(|c| c.is_ascii_hexdigit()) {
                pins.push(f.get_ref().to_ascii_lowercase());
            } else {
                self.err(
                    at(f),
                    format!("mgmt.agent.gateway_fingerprints[{i}]"),
                    format!(
                        "{:?} is not a certificate fingerprint (expected \"sha256:\" followed by 64 hex digits)",
                        f.get_ref()
                    ),
                );
            }
        }
        pins
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"instance = "lab"
[dataplane]
worker_lcores = [1]
flow_hash_key = "00112233445566778899aabbccddeeff"
[[port]]
name = "p0"
devargs = "net_null0"
addresses = ["10.0.0.1/24"]
[mgmt]
"#;

    const TLS: &str = r#"[mgmt.tls]
cert = "c.pem"
key = "k.pem"
client_ca = "ca.pem"
client_fingerprints = ["sha256:0000000000000000000000000000000000000000000000000000000000000000"]
"#;

    const GW_PIN: &str = "sha256:ABababababababababababababababababababababababababababababababab";

    fn parse(agent: &str, tls: bool) -> Result<crate::Config, String> {
        let text = format!(
            "{BASE}{}[mgmt.agent]\ngateway_fingerprints = [\"{GW_PIN}\"]\n{agent}",
            if tls { TLS } else { "" }
        );
        crate::Config::from_toml_str(&text, "t.toml").map_err(|e| e.to_string())
    }

    #[test]
    fn an_agent_table_parses_with_the_seed_defaults() {
        let c = parse("id = \"ams-1\"\ngateways = [\"tcp://gw1:7443\"]\n", true).unwrap();
        let a = c.mgmt.agent.unwrap();
        assert_eq!(
            (a.id.as_str(), a.min_idle, a.grow_by, a.max_tunnels),
            ("ams-1", 2, 10, 500)
        );
        assert_eq!(a.gateways[0].to_string(), "tcp://gw1:7443");
        assert_eq!(a.gateway_fingerprints, vec![GW_PIN.to_ascii_lowercase()]);
        assert_eq!(a.backoff_reset_after_ms, 5_000);
    }

    #[test]
    fn gateways_must_be_pinned() {
        let unpinned = format!("{BASE}{TLS}[mgmt.agent]\nid = \"a\"\ngateways = [\"tcp://g:1\"]\n");
        let e = crate::Config::from_toml_str(&unpinned, "t.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("mgmt.agent.gateway_fingerprints: missing"),
            "{e}"
        );
        let e = crate::Config::from_toml_str(
            &format!("{unpinned}gateway_fingerprints = [\"sha256:12\"]\n"),
            "t.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("mgmt.agent.gateway_fingerprints[0]"), "{e}");
    }

    #[test]
    fn agent_mistakes_are_one_line_naming_the_key() {
        let e = parse("id = \"ams-1\"\ngateways = [\"tcp://gw1:7443\"]\n", false).unwrap_err();
        assert!(e.contains("mgmt.agent: requires [mgmt.tls]"), "{e}");
        let e = parse("id = \"ams 1\"\ngateways = [\"tcp://gw1:7443\"]\n", true).unwrap_err();
        assert!(e.contains("mgmt.agent.id"), "{e}");
        let e = parse("id = \"a\"\ngateways = []\n", true).unwrap_err();
        assert!(
            e.contains("mgmt.agent.gateways: must list at least one"),
            "{e}"
        );
        let e = parse(
            "id = \"a\"\ngateways = [\"tcp://g:1\", \"tcp://g:1\"]\n",
            true,
        )
        .unwrap_err();
        assert!(
            e.contains("mgmt.agent.gateways[1]") && e.contains("twice"),
            "{e}"
        );
        let e = parse(
            "id = \"a\"\ngateways = [\"tcp://g:1\"]\nbackoff_min_ms = 900\nbackoff_max_ms = 100\n",
            true,
        )
        .unwrap_err();
        assert!(e.contains("mgmt.agent.backoff_max_ms"), "{e}");
        let e = parse(
            "id = \"a\"\ngateways = [\"tcp://g:1\"]\nmax_tunnels = 0\n",
            true,
        )
        .unwrap_err();
        assert!(
            e.contains("mgmt.agent.max_tunnels: 0 is out of range"),
            "{e}"
        );
    }

    #[test]
    fn gateway_addresses_parse_names_ips_and_refuse_the_rest() {
        let ok = |s: &str| parse_gateway(s).unwrap();
        assert_eq!(
            ok("tcp://gw1.example.net:7443"),
            GatewayAddr {
                host: "gw1.example.net".into(),
                port: 7443
            }
        );
        assert_eq!(ok("tcp://10.0.0.1:1").host, "10.0.0.1");
        assert_eq!(ok("tcp://[::1]:7443").host, "::1");
        assert_eq!(ok("tcp://[::1]:7443").to_string(), "tcp://[::1]:7443");
        for bad in [
            "gw1:7443",
            "tcp://gw1",
            "tcp://gw1:0",
            "tcp://gw1:70000",
            "tcp://:7443",
            "tcp://g w:1",
            "tcp://[zz]:1",
        ] {
            assert!(parse_gateway(bad).is_err(), "{bad}");
        }
    }
}
