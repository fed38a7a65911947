//! `[vip.health]`: a VIP's health check.

use std::net::IpAddr;

use toml::Spanned as S;

use super::super::raw::RawHealth;
use super::super::{Health, HealthKind, OnDown};
use super::{at, or, Validator};

/// Longest health probe interval, in milliseconds (one hour).
const MAX_INTERVAL_MS: u32 = 3_600_000;

impl Validator {
    pub(super) fn health(&mut self, sh: &S<RawHealth>, key: &str) -> Health {
        let h = sh.get_ref();
        let table_at = at(sh);
        let kind = self.choice(
            &Some(h.kind.clone()),
            &format!("{key}.kind"),
            &[
                ("tcp", HealthKind::Tcp),
                ("tls", HealthKind::Tls),
                ("http", HealthKind::Http),
                ("https", HealthKind::Https),
                ("agent", HealthKind::Agent),
                ("dns", HealthKind::Dns),
                ("udp", HealthKind::Udp),
            ],
            HealthKind::Tcp,
        );
        let http = kind.is_http();
        let only_http = "is only used by http and https checks (expected kind = \"http\" or \"https\", or remove this key)";

        let pkey = format!("{key}.path");
        let path = match (&h.path, http) {
            (Some(p), true) => {
                let s = p.get_ref();
                if !s.starts_with('/') {
                    self.err(
                        at(p),
                        &pkey,
                        format!("{s:?} does not start with '/' (expected e.g. \"/healthz\")"),
                    );
                } else if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
                    self.err(at(p), &pkey, format!("{s:?} contains spaces or control characters (expected a URL path, e.g. \"/healthz\")"));
                }
                Some(s.clone())
            }
            (None, true) => {
                self.err(
                    table_at,
                    &pkey,
                    format!("missing required key for kind = \"{kind}\" (expected e.g. path = \"/healthz\")"),
                );
                None
            }
            (Some(p), false) => {
                self.err(at(p), &pkey, only_http);
                None
            }
            (None, false) => None,
        };

        let ekey = format!("{key}.expect_status");
        let expect_status = match (&h.expect_status, http) {
            (Some(list), true) => {
                if list.get_ref().is_empty() {
                    self.err(
                        at(list),
                        &ekey,
                        "must list at least one status (expected e.g. [200])",
                    );
                }
                for (i, s) in list.get_ref().iter().enumerate() {
                    let n = *s.get_ref();
                    if !(100..=599).contains(&n) {
                        self.err(
                            at(s),
                            format!("{ekey}[{i}]"),
                            format!("{n} is not an HTTP status (expected 100..=599)"),
                        );
                    }
                }
                list.get_ref().iter().map(|s| *s.get_ref()).collect()
            }
            (None, true) => vec![200],
            (Some(list), false) => {
                self.err(at(list), &ekey, only_http);
                Vec::new()
            }
            (None, false) => Vec::new(),
        };

        let interval_ms = or(&h.interval_ms, 1000);
        let timeout_ms = or(&h.timeout_ms, 500);
        let ms = " milliseconds";
        self.nonzero(
            &h.interval_ms,
            &format!("{key}.interval_ms"),
            MAX_INTERVAL_MS,
            ms,
        );
        self.nonzero(
            &h.timeout_ms,
            &format!("{key}.timeout_ms"),
            MAX_INTERVAL_MS,
            ms,
        );
        if timeout_ms != 0 && interval_ms != 0 && timeout_ms >= interval_ms {
            let (a, which) = match (&h.timeout_ms, &h.interval_ms) {
                (Some(t), _) => (at(t), ""),
                (None, Some(i)) => (at(i), " (the default)"),
                (None, None) => (table_at, ""),
            };
            self.err(
                a,
                format!("{key}.timeout_ms"),
                format!("{timeout_ms}{which} is not less than interval_ms {interval_ms} (expected timeout_ms < interval_ms)"),
            );
        }
        self.nonzero(&h.rise, &format!("{key}.rise"), u32::MAX, "");
        self.nonzero(&h.fall, &format!("{key}.fall"), u32::MAX, "");

        let weight_header = or(&h.weight_header, false);
        if let (Some(w), false) = (&h.weight_header, http) {
            self.err(at(w), format!("{key}.weight_header"), only_http);
        }

        let sni = h.sni.as_ref().map(|s| {
            let name = s.get_ref();
            let skey = format!("{key}.sni");
            if !matches!(kind, HealthKind::Tls | HealthKind::Https) {
                self.err(at(s), &skey, "is only used by tls and https checks (expected kind = \"tls\" or \"https\", or remove this key)");
            } else if let Some(why) = dns_name_problem(name) {
                self.err(at(s), &skey, why);
            }
            name.clone()
        });

        let on_down = self.choice(
            &h.on_down,
            &format!("{key}.on_down"),
            &[("keep", OnDown::Keep), ("reset", OnDown::Reset)],
            OnDown::Keep,
        );

        if let (Some(pp), HealthKind::Agent) = (&h.send_proxy_v2, kind) {
            if *pp.get_ref() {
                self.err(at(pp), format!("{key}.send_proxy_v2"), "is not sent to an agent (expected an active check kind beside agent_port, or remove this key)");
            }
        }
        if let Some(p) = &h.agent_port {
            if *p.get_ref() == 0 {
                self.err(
                    at(p),
                    format!("{key}.agent_port"),
                    "0 is not a port (expected 1..=65535)",
                );
            }
        }

        let target = self.probe_target(h, key, kind, table_at);
        Health {
            kind,
            path,
            expect_status,
            interval_ms,
            timeout_ms,
            rise: or(&h.rise, 2),
            fall: or(&h.fall, 3),
            send_proxy_v2: or(&h.send_proxy_v2, false),
            weight_header,
            sni,
            on_down,
            agent_port: h.agent_port.as_ref().map(|p| *p.get_ref()),
            port: target.port,
            dns: target.dns,
            udp: target.udp,
        }
    }
}

/// Why `s` cannot be a TLS server name (a DNS name, RFC 6066), if it cannot.
fn dns_name_problem(s: &str) -> Option<String> {
    let expected = "expected a DNS name, e.g. \"www.example.com\"";
    if s.is_empty() || s.len() > 253 {
        return Some(format!(
            "{s:?} is {} bytes long ({expected} of 1..=253 bytes)",
            s.len()
        ));
    }
    if s.parse::<IpAddr>().is_ok() {
        return Some(format!(
            "{s:?} is an IP address (TLS sends no SNI for addresses; {expected}, or remove this key)"
        ));
    }
    for label in s.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Some(format!(
                "{s:?} has an empty or longer than 63 bytes label ({expected})"
            ));
        }
        if let Some(c) = label
            .chars()
            .find(|&c| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        {
            return Some(format!("{s:?} contains {c:?} ({expected})"));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Some(format!(
                "{s:?} has a label starting or ending with '-' ({expected})"
            ));
        }
    }
    None
}
