//! The `dns` probe: one query over UDP ([`super::dns_message`]); the
//! backend passes when the response to it arrives within the timeout with
//! a response code in `expect_rcode` (default NOERROR and NXDOMAIN: the
//! server answered from its data, whether or not the name exists; SERVFAIL
//! — a resolver that cannot reach its upstreams — and REFUSED fail).
//!
//! Datagrams with another message ID are ignored while the probe waits (a
//! late answer to an earlier probe); one with the probe's ID that is not
//! the response (an echo of the query, another question, garbage) fails
//! the probe at once, with what was wrong.

use std::net::SocketAddr;

use conf::DnsProbe;
use tokio::time::Instant;

use super::dns_message::{encode_query, rcode_name, read_response, NotTheResponse};
use super::engine::ProbeOutcome;
use super::probe_udp::{receive, send_to, MAX_REPLY_BYTES};

fn fail(reason: impl Into<String>) -> ProbeOutcome {
    ProbeOutcome {
        ok: false,
        reason: reason.into(),
        weight: None,
    }
}

/// Runs one `dns` probe of `target`, ending by `deadline`; `timeout_ms`
/// names that deadline in reasons.
pub async fn probe(
    target: SocketAddr,
    dns: &DnsProbe,
    deadline: Instant,
    timeout_ms: u32,
) -> ProbeOutcome {
    let id = fastrand::u16(..);
    let qtype = dns.query_type.code();
    let query = encode_query(id, &dns.query, qtype);
    let sock = match send_to(target, &query).await {
        Ok(s) => s,
        Err(why) => return fail(format!("DNS query: {why}")),
    };
    let mut buf = vec![0u8; MAX_REPLY_BYTES];
    let mut ignored = 0u32;
    loop {
        let n = match receive(&sock, &mut buf, deadline).await {
            Ok(Some(n)) => n,
            Ok(None) if ignored == 0 => {
                return fail(format!("no DNS response within {timeout_ms} ms"))
            }
            Ok(None) => {
                return fail(format!(
                    "no DNS response within {timeout_ms} ms ({ignored} datagrams with another message ID ignored)"
                ))
            }
            Err(why) => return fail(format!("DNS query: {why}")),
        };
        let r = match read_response(&buf[..n], id, &dns.query, qtype) {
            Ok(r) => r,
            Err(NotTheResponse::OtherId(_)) => {
                ignored += 1;
                continue;
            }
            Err(NotTheResponse::Wrong(why)) => return fail(why),
        };
        let rcode = rcode_name(r.rcode);
        let records = match (r.answers, r.truncated) {
            (_, true) => "truncated".to_string(),
            (1, false) => "1 answer".to_string(),
            (a, false) => format!("{a} answers"),
        };
        if dns.expect_rcode.iter().any(|e| e.code() == r.rcode) {
            return ProbeOutcome {
                ok: true,
                reason: format!("DNS {rcode} ({records})"),
                weight: None,
            };
        }
        let expected: Vec<&str> = dns.expect_rcode.iter().map(|e| e.as_str()).collect();
        return fail(format!("DNS {rcode} (expected {})", expected.join(" or ")));
    }
}
