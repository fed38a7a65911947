//! The `dns` and `udp` probes against real UDP sockets on 127.0.0.1: a
//! DNS responder that answers well or badly, an echo server, a silent one
//! and a closed port. Every bad target costs at most one timeout and ends
//! in a reason; good ones pass. And the probe `port` of every kind.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use conf::{Config, DnsProbe, DnsRcode, DnsType, UdpExpect, UdpProbe};
use mgmt::health::engine::ProbeOutcome;
use mgmt::health::probe::{probe, KindKey, ProbeSpec, ProbeTls};
use tokio::net::UdpSocket;

const TIMEOUT_MS: u32 = 300;

fn dns_spec(addr: SocketAddr, query: &str) -> ProbeSpec {
    ProbeSpec {
        addr,
        kind: KindKey::Dns,
        path: String::new(),
        expect_status: Vec::new(),
        interval_ms: 1000,
        timeout_ms: TIMEOUT_MS,
        send_proxy_v2: false,
        sni: None,
        agent_port: None,
        dns: Some(DnsProbe {
            query: query.into(),
            query_type: DnsType::A,
            expect_rcode: vec![DnsRcode::NoError, DnsRcode::NxDomain],
        }),
        udp: None,
    }
}

fn udp_spec(addr: SocketAddr, send: &[u8], expect: Option<UdpExpect>) -> ProbeSpec {
    ProbeSpec {
        kind: KindKey::Udp,
        dns: None,
        udp: Some(UdpProbe {
            send: send.to_vec(),
            expect,
        }),
        ..dns_spec(addr, ".")
    }
}

/// A UDP server on 127.0.0.1 answering each datagram with what `f` returns
/// (several datagrams, or none).
async fn serve_udp(f: impl Fn(&[u8]) -> Vec<Vec<u8>> + Send + 'static) -> SocketAddr {
    let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = s.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65535];
        while let Ok((n, from)) = s.recv_from(&mut buf).await {
            for reply in f(&buf[..n]) {
                let _ = s.send_to(&reply, from).await;
            }
        }
    });
    addr
}

/// The response a DNS server would send to `query`: the query with QR,
/// RA and `rcode` set, and one A record (owner: a pointer to the question)
/// when the code is NOERROR.
fn dns_answer(query: &[u8], rcode: u8) -> Vec<u8> {
    let mut m = query.to_vec();
    m[2] |= 0x80;
    m[3] = 0x80 | rcode;
    if rcode == 0 {
        m[7] = 1;
        m.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 10, 0, 0, 7]);
    }
    m
}

/// A closed UDP port on 127.0.0.1 (bound, then released).
async fn closed_port() -> SocketAddr {
    let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    s.local_addr().unwrap()
}

async fn run(spec: &ProbeSpec) -> (ProbeOutcome, Duration) {
    let t = Instant::now();
    let out = probe(spec, &ProbeTls::new()).await;
    let took = t.elapsed();
    assert!(
        took < Duration::from_millis(u64::from(TIMEOUT_MS) + 200),
        "{spec:?} took {took:?}"
    );
    (out, took)
}

fn passes(out: &ProbeOutcome, reason: &str) {
    assert_eq!((out.ok, out.reason.as_str()), (true, reason));
}

fn fails(out: &ProbeOutcome, reason: &str) {
    assert_eq!((out.ok, out.reason.as_str()), (false, reason));
}

#[tokio::test]
async fn dns_probe_passes_on_the_response_to_its_query() {
    let a = serve_udp(|q| vec![dns_answer(q, 0)]).await;
    let (out, _) = run(&dns_spec(a, "health.test")).await;
    passes(&out, "DNS NOERROR (1 answer)");

    let a = serve_udp(|q| vec![dns_answer(q, 3)]).await;
    let (out, _) = run(&dns_spec(a, "nowhere.test")).await;
    passes(&out, "DNS NXDOMAIN (0 answers)");

    // A late answer with another ID first: ignored; the right one counts.
    let a = serve_udp(|q| {
        let mut late = dns_answer(q, 2);
        late[0] ^= 0xff;
        vec![late, dns_answer(q, 0)]
    })
    .await;
    let (out, _) = run(&dns_spec(a, "health.test")).await;
    passes(&out, "DNS NOERROR (1 answer)");
}

#[tokio::test]
async fn dns_probe_fails_on_error_codes_echoes_and_other_questions() {
    let a = serve_udp(|q| vec![dns_answer(q, 2)]).await;
    let (out, _) = run(&dns_spec(a, "health.test")).await;
    fails(&out, "DNS SERVFAIL (expected NOERROR or NXDOMAIN)");

    let a = serve_udp(|q| vec![dns_answer(q, 5)]).await;
    let mut spec = dns_spec(a, "health.test");
    let (out, _) = run(&spec).await;
    fails(&out, "DNS REFUSED (expected NOERROR or NXDOMAIN)");
    // ... unless REFUSED is what the operator accepts.
    spec.dns.as_mut().unwrap().expect_rcode = vec![DnsRcode::Refused];
    let (out, _) = run(&spec).await;
    passes(&out, "DNS REFUSED (0 answers)");

    // An echo server on the DNS port: the query comes back as it went.
    let a = serve_udp(|q| vec![q.to_vec()]).await;
    let (out, took) = run(&dns_spec(a, "health.test")).await;
    fails(
        &out,
        "not a DNS response: the QR bit is clear (the query came back: an echo, not a DNS server)",
    );
    assert!(
        took < Duration::from_millis(100),
        "failed at once: {took:?}"
    );

    // The answer to another name.
    let a = serve_udp(|q| {
        let mut m = dns_answer(q, 0);
        m[13] = b'w';
        vec![m]
    })
    .await;
    let (out, _) = run(&dns_spec(a, "health.test")).await;
    fails(
        &out,
        "DNS response to another question: \"wealth.test.\" (expected \"health.test.\")",
    );

    let a = serve_udp(|_| vec![b"garbage".to_vec()]).await;
    let (out, _) = run(&dns_spec(a, "health.test")).await;
    fails(
        &out,
        "not a DNS message: 7 bytes, shorter than a DNS header",
    );
}

#[tokio::test]
async fn dns_probe_silence_and_a_closed_port() {
    let a = serve_udp(|_| Vec::new()).await;
    let (out, took) = run(&dns_spec(a, "health.test")).await;
    fails(&out, "no DNS response within 300 ms");
    assert!(
        took >= Duration::from_millis(u64::from(TIMEOUT_MS)),
        "{took:?}"
    );

    // Only answers with another ID: still silence, and said so.
    let a = serve_udp(|q| {
        let mut m = dns_answer(q, 0);
        m[1] ^= 0x55;
        vec![m]
    })
    .await;
    let (out, _) = run(&dns_spec(a, "health.test")).await;
    fails(
        &out,
        "no DNS response within 300 ms (1 datagrams with another message ID ignored)",
    );

    let a = closed_port().await;
    let (out, took) = run(&dns_spec(a, "health.test")).await;
    fails(&out, "DNS query: port unreachable (ICMP)");
    assert!(
        took < Duration::from_millis(100),
        "failed at once: {took:?}"
    );
}

#[tokio::test]
async fn udp_probe_matches_the_reply() {
    let echo = serve_udp(|d| vec![d.to_vec()]).await;
    let contains = |s: &str| Some(UdpExpect::Contains(s.as_bytes().to_vec()));
    let regex = |s: &str| Some(UdpExpect::Regex(s.to_string()));

    let (out, _) = run(&udp_spec(echo, b"PING 7\n", contains("NG 7"))).await;
    passes(&out, "UDP reply contains \"NG 7\"");
    let (out, _) = run(&udp_spec(echo, b"PING 7\n", contains("PONG"))).await;
    fails(&out, "UDP reply \"PING 7\\n\" does not contain \"PONG\"");
    let (out, _) = run(&udp_spec(echo, b"PING 7\n", regex(r"^PING \d+$"))).await;
    // (?m) is not set: $ is the end of the reply, after the newline.
    fails(
        &out,
        "UDP reply \"PING 7\\n\" does not match \"^PING \\\\d+$\"",
    );
    let (out, _) = run(&udp_spec(echo, b"PING 7\n", regex(r"^PING \d+\n$"))).await;
    passes(&out, "UDP reply matches \"^PING \\\\d+\\\\n$\"");
    // Bytes outside UTF-8, matched with (?-u).
    let (out, _) = run(&udp_spec(echo, &[0xff, 0xff, 0x49], regex(r"(?-u)^\xff+I"))).await;
    assert!(out.ok, "{out:?}");
    let (out, _) = run(&udp_spec(echo, &[0xff, 0x00], None)).await;
    passes(&out, "UDP reply (2 bytes)");

    let silent = serve_udp(|_| Vec::new()).await;
    let (out, _) = run(&udp_spec(silent, b"PING", None)).await;
    fails(&out, "no UDP reply within 300 ms");

    let (out, took) = run(&udp_spec(closed_port().await, b"PING", None)).await;
    fails(&out, "port unreachable (ICMP)");
    assert!(
        took < Duration::from_millis(100),
        "failed at once: {took:?}"
    );
}

#[test]
fn the_probe_port_replaces_the_backends_port_for_every_kind() {
    let config = |protocol: &str, health: &str| {
        let text = format!(
            "instance = \"t\"\n[dataplane]\nworker_lcores = [1]\nflow_hash_key = \"00112233445566778899aabbccddeeff\"\n[[port]]\nname = \"p0\"\ndevargs = \"net_null0\"\naddresses = [\"10.0.0.1/24\"]\nlocal_addresses = [\"10.0.0.1\"]\n[[vip]]\nname = \"v\"\naddress = \"10.0.0.53\"\nport = 53\nprotocol = \"{protocol}\"\n[vip.health]\n{health}\n[[vip.backend]]\naddress = \"10.0.0.11\"\nport = 53\n"
        );
        let c = Config::from_toml_str(&text, "t.toml").unwrap_or_else(|e| panic!("{e}"));
        c.vips[0].health.clone().unwrap()
    };
    let backend: SocketAddr = "10.0.0.11:53".parse().unwrap();
    for (protocol, health, want) in [
        ("udp", "kind = \"dns\"", 53),
        ("udp", "kind = \"dns\"\nport = 5353", 5353),
        ("udp", "kind = \"udp\"\nsend = \"x\"\nport = 7", 7),
        ("udp", "kind = \"tcp\"\nport = 8053", 8053),
        ("tcp", "kind = \"http\"\npath = \"/\"\nport = 8080", 8080),
        ("tcp", "kind = \"tls\"\nport = 853", 853),
        ("tcp", "kind = \"https\"\npath = \"/\"\nport = 8443", 8443),
    ] {
        let spec = ProbeSpec::new(backend, &config(protocol, health));
        assert_eq!(spec.addr, SocketAddr::new(backend.ip(), want), "{health}");
    }
    // An agent keeps its own port; the active probe beside it moves.
    let spec = ProbeSpec::new(
        backend,
        &config("udp", "kind = \"dns\"\nport = 5353\nagent_port = 9777"),
    );
    assert_eq!((spec.addr.port(), spec.agent_port), (5353, Some(9777)));
}
