//! PROXY v2 on border-gw's listeners: both sniff for a header
//! ([`ppv2_accept`]), so the gateway can sit behind a border VIP with
//! `proxy_protocol = "v2"` and still take direct connections. The claimed
//! client (from the header) and the measured peer (the socket's) go on
//! every log line about the connection; the audit line records the claimed
//! one where there is one. This module holds the two listeners' acceptors
//! and renders their counters.

use std::time::Duration;

use mgmt::prom::Exposition as Out;
use ppv2_accept::{AcceptOptions, Acceptor, Arrival, Malformed};

use crate::limits::Listener;

/// The sniffing acceptor of each listener.
#[derive(Clone, Debug)]
pub struct ProxyAccept {
    /// `api_listen`.
    pub api: Acceptor,
    /// `agent_listen`.
    pub agent: Acceptor,
}

impl ProxyAccept {
    /// Acceptors that wait for a header at most `handshake_timeout` (the
    /// header counts against the same budget as TLS and the preface).
    pub fn new(handshake_timeout: Duration) -> Self {
        let options = AcceptOptions {
            timeout: handshake_timeout,
            ..AcceptOptions::default()
        };
        ProxyAccept {
            api: Acceptor::new(options),
            agent: Acceptor::new(options),
        }
    }

    fn each(&self) -> [(Listener, &Acceptor); 2] {
        [(Listener::Agent, &self.agent), (Listener::Api, &self.api)]
    }
}

/// `border_gw_proxy_connections_total` and
/// `border_gw_proxy_header_refusals_total`.
pub fn render(o: &mut Out, p: &ProxyAccept) {
    let name = "border_gw_proxy_connections_total";
    o.family(
        name,
        "counter",
        "connections by how they arrived: with a PROXY v2 header (proxied, proxied_without_address, local), without (direct), closed before sending a byte (silent)",
    );
    for (listener, a) in p.each() {
        let s = a.stats.snapshot();
        for arrival in Arrival::ALL {
            o.sample(
                name,
                &[
                    ("listener", listener.as_str()),
                    ("arrival", arrival.as_str()),
                ],
                s.arrived(arrival),
            );
        }
    }
    let name = "border_gw_proxy_header_refusals_total";
    o.family(
        name,
        "counter",
        "connections closed for a malformed PROXY v2 header, by reason",
    );
    for (listener, a) in p.each() {
        let s = a.stats.snapshot();
        for reason in Malformed::ALL {
            o.sample(
                name,
                &[("listener", listener.as_str()), ("reason", reason.as_str())],
                s.refused(reason),
            );
        }
    }
}
