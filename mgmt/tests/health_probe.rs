//! Probes against real local servers on 127.0.0.1: every bad target costs at
//! most one timeout and ends in a reason; good ones pass.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mgmt::health::agent::AgentAdmin;
use mgmt::health::engine::WeightObs;
use mgmt::health::probe::{check, probe, KindKey, ProbeSpec, ProbeTls, PPV2_LOCAL};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const TIMEOUT_MS: u32 = 300;

fn spec(addr: SocketAddr, kind: KindKey) -> ProbeSpec {
    ProbeSpec {
        addr,
        kind,
        path: "/healthz".into(),
        expect_status: vec![200, 204],
        interval_ms: 1000,
        timeout_ms: TIMEOUT_MS,
        send_proxy_v2: false,
        sni: None,
        agent_port: None,
        dns: None,
        udp: None,
    }
}

/// A listener whose connections are handled by `f`.
async fn serve<F, Fut>(f: F) -> SocketAddr
where
    F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let f = Arc::new(f);
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(f(s));
        }
    });
    addr
}

/// Runs a probe; asserts it took at most one timeout (plus slack).
async fn run(spec: &ProbeSpec) -> mgmt::health::ProbeOutcome {
    let start = Instant::now();
    let out = probe(spec, &ProbeTls::new()).await;
    let took = start.elapsed();
    assert!(
        took < Duration::from_millis(u64::from(spec.timeout_ms) + 250),
        "{:?} took {took:?}: {out:?}",
        spec.kind
    );
    out
}

fn http_answer(status: &str, extra: &str) -> Vec<u8> {
    format!("HTTP/1.1 {status}\r\nContent-Length: 2\r\n{extra}\r\nok").into_bytes()
}

async fn read_request(s: &mut (impl AsyncReadExt + Unpin)) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut b = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut b).await {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&b[..n]),
        }
    }
    buf
}

async fn http_server(status: &'static str, extra: &'static str) -> SocketAddr {
    serve(move |mut s| async move {
        read_request(&mut s).await;
        let _ = s.write_all(&http_answer(status, extra)).await;
    })
    .await
}

async fn dead_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = l.local_addr().unwrap();
    drop(l);
    a
}

#[tokio::test]
async fn refused() {
    let a = dead_port().await;
    for kind in [KindKey::Tcp, KindKey::Tls, KindKey::Http, KindKey::Https] {
        let out = run(&spec(a, kind)).await;
        assert!(!out.ok);
        assert_eq!(out.reason, "connect refused");
    }
}

#[tokio::test]
async fn tcp_connect_passes() {
    let a = serve(|_s| async {}).await;
    let out = run(&spec(a, KindKey::Tcp)).await;
    assert!(out.ok, "{out:?}");
    assert_eq!(out.reason, "TCP connect ok");
}

#[tokio::test]
async fn accepts_and_never_answers_costs_one_timeout() {
    let a = serve(|s| async move {
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(s);
    })
    .await;
    let out = run(&spec(a, KindKey::Http)).await;
    assert_eq!(
        (out.ok, out.reason.as_str()),
        (false, "HTTP response timeout after 300 ms")
    );
    let out = run(&spec(a, KindKey::Tls)).await;
    assert_eq!(
        (out.ok, out.reason.as_str()),
        (false, "TLS handshake timeout after 300 ms")
    );
    let out = run(&spec(a, KindKey::Https)).await;
    assert_eq!(out.reason, "TLS handshake timeout after 300 ms");
}

#[tokio::test]
async fn garbage_is_a_reason() {
    let a = serve(|mut s| async move {
        let _ = s.write_all(b"\x00\x01\x02 garbage garbage\r\n\r\n").await;
        tokio::time::sleep(Duration::from_secs(5)).await;
    })
    .await;
    let out = run(&spec(a, KindKey::Http)).await;
    assert!(!out.ok);
    assert!(
        out.reason.starts_with("not an HTTP response: status line"),
        "{}",
        out.reason
    );
    let out = run(&spec(a, KindKey::Tls)).await;
    assert!(!out.ok);
    assert!(
        out.reason.starts_with("TLS handshake failed: "),
        "{}",
        out.reason
    );
}

#[tokio::test]
async fn endless_header_is_capped() {
    let a = serve(|mut s| async move {
        read_request(&mut s).await;
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\n").await;
        let line = format!("X-Pad: {}\r\n", "a".repeat(1000));
        // Endless: until the probe hangs up.
        while s.write_all(line.as_bytes()).await.is_ok() {}
    })
    .await;
    let out = run(&spec(a, KindKey::Http)).await;
    assert_eq!(
        (out.ok, out.reason.as_str()),
        (false, "HTTP response header exceeds 8192 bytes")
    );
    // The same, dripped slowly: the timeout ends it.
    let a = serve(|mut s| async move {
        read_request(&mut s).await;
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\n").await;
        loop {
            if s.write_all(b"X-Slow: 1\r\n").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let out = run(&spec(a, KindKey::Http)).await;
    assert_eq!(out.reason, "HTTP response timeout after 300 ms");
}

#[tokio::test]
async fn closed_before_an_answer() {
    let a = serve(|mut s| async move {
        read_request(&mut s).await;
    })
    .await;
    let out = run(&spec(a, KindKey::Http)).await;
    assert_eq!(out.reason, "connection closed without an HTTP response");
    let a = serve(|mut s| async move {
        read_request(&mut s).await;
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nX-Half: ").await;
    })
    .await;
    let out = run(&spec(a, KindKey::Http)).await;
    assert!(
        out.reason.starts_with("connection closed after 25 bytes"),
        "{}",
        out.reason
    );
}

#[tokio::test]
async fn http_status_decides() {
    let a = http_server("503 Service Unavailable", "").await;
    let out = run(&spec(a, KindKey::Http)).await;
    assert_eq!((out.ok, out.reason.as_str()), (false, "HTTP 503"));
    let a = http_server("204 No Content", "").await;
    let out = run(&spec(a, KindKey::Http)).await;
    assert_eq!((out.ok, out.reason.as_str()), (true, "HTTP 204"));
}

#[tokio::test]
async fn request_names_path_and_host() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let a = serve(move |mut s| {
        let seen = s2.clone();
        async move {
            let req = read_request(&mut s).await;
            seen.lock()
                .unwrap()
                .push(String::from_utf8_lossy(&req).to_string());
            let _ = s.write_all(&http_answer("200 OK", "")).await;
        }
    })
    .await;
    let out = run(&spec(a, KindKey::Http)).await;
    assert!(out.ok);
    let req = seen.lock().unwrap()[0].clone();
    assert!(req.starts_with("GET /healthz HTTP/1.1\r\n"), "{req}");
    assert!(req.contains(&format!("\r\nHost: {a}\r\n")), "{req}");
    assert!(req.contains("\r\nConnection: close\r\n"), "{req}");
}

#[tokio::test]
async fn weight_header() {
    let a = http_server("200 OK", "X-Load-Balancing-Endpoint-Weight: 5\r\n").await;
    let out = run(&spec(a, KindKey::Http)).await;
    assert_eq!(out.weight, Some(WeightObs::Value(5)));
    let a = http_server("200 OK", "x-load-balancing-endpoint-weight: lots\r\n").await;
    let out = run(&spec(a, KindKey::Http)).await;
    assert!(out.ok, "a bad weight does not fail the probe");
    assert!(matches!(out.weight, Some(WeightObs::Invalid(ref w)) if w.contains("is not a weight")));
    let a = http_server("200 OK", "").await;
    let out = run(&spec(a, KindKey::Http)).await;
    assert!(
        matches!(out.weight, Some(WeightObs::Invalid(ref w)) if w.starts_with("no X-Load-Balancing"))
    );
}

#[tokio::test]
async fn proxy_v2_local_header_goes_first() {
    let a = serve(|mut s| async move {
        let mut pp = [0u8; 16];
        if s.read_exact(&mut pp).await.is_err() || pp != PPV2_LOCAL {
            return;
        }
        read_request(&mut s).await;
        let _ = s.write_all(&http_answer("200 OK", "")).await;
    })
    .await;
    let mut sp = spec(a, KindKey::Http);
    let out = run(&sp).await;
    assert!(!out.ok, "without the header the backend hangs up");
    sp.send_proxy_v2 = true;
    let out = run(&sp).await;
    assert!(out.ok, "{out:?}");
}

// ---- TLS ----------------------------------------------------------------

fn tls_acceptor() -> tokio_rustls::TlsAcceptor {
    let ck = rcgen::generate_simple_self_signed(vec!["backend.example".to_string()]).unwrap();
    let cert = ck.cert.der().clone();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(ck.signing_key.serialize_der().into());
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert], key)
    .unwrap();
    tokio_rustls::TlsAcceptor::from(Arc::new(cfg))
}

async fn tls_server(
    answer: Option<&'static str>,
    sni: Arc<Mutex<Vec<Option<String>>>>,
) -> SocketAddr {
    let acc = tls_acceptor();
    serve(move |s| {
        let (acc, sni) = (acc.clone(), sni.clone());
        async move {
            let Ok(mut t) = acc.accept(s).await else {
                return;
            };
            sni.lock()
                .unwrap()
                .push(t.get_ref().1.server_name().map(str::to_string));
            if let Some(status) = answer {
                read_request(&mut t).await;
                let _ = t
                    .write_all(&http_answer(
                        status,
                        "X-Load-Balancing-Endpoint-Weight: 9\r\n",
                    ))
                    .await;
                let _ = t.shutdown().await;
            } else {
                let mut b = [0u8; 16];
                let _ = t.read(&mut b).await;
            }
        }
    })
    .await
}

#[tokio::test]
async fn tls_handshake_with_sni_against_rustls() {
    let sni = Arc::new(Mutex::new(Vec::new()));
    let a = tls_server(None, sni.clone()).await;
    let mut sp = spec(a, KindKey::Tls);
    sp.sni = Some("backend.example".into());
    let out = run(&sp).await;
    assert!(out.ok, "{out:?}");
    assert_eq!(out.reason, "TLS handshake ok (TLS 1.3)");
    sp.sni = None;
    assert!(run(&sp).await.ok, "no SNI is fine too");
    // Give the server tasks a moment to record.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        *sni.lock().unwrap(),
        vec![Some("backend.example".to_string()), None]
    );
}

#[tokio::test]
async fn https_get_over_rustls() {
    let a = tls_server(Some("200 OK"), Arc::new(Mutex::new(Vec::new()))).await;
    let out = run(&spec(a, KindKey::Https)).await;
    assert!(out.ok, "{out:?}");
    assert_eq!(out.weight, Some(WeightObs::Value(9)));
    let a = tls_server(Some("503 Unavailable"), Arc::new(Mutex::new(Vec::new()))).await;
    let out = run(&spec(a, KindKey::Https)).await;
    assert_eq!((out.ok, out.reason.as_str()), (false, "HTTP 503"));
}

#[tokio::test]
async fn tls_fails_where_tcp_passes_accept_and_close() {
    let a = serve(|s| async move { drop(s) }).await;
    assert!(run(&spec(a, KindKey::Tcp)).await.ok);
    let out = run(&spec(a, KindKey::Tls)).await;
    assert!(!out.ok);
    assert!(
        out.reason.starts_with("TLS handshake failed: connection"),
        "{}",
        out.reason
    );
}

#[tokio::test]
async fn reset_mid_handshake() {
    let a = serve(|mut s| async move {
        // Read the ClientHello, then reset.
        let mut b = [0u8; 512];
        let _ = s.read(&mut b).await;
        let _ = s.set_zero_linger();
        drop(s);
    })
    .await;
    let out = run(&spec(a, KindKey::Tls)).await;
    assert_eq!(
        (out.ok, out.reason.as_str()),
        (false, "TLS handshake failed: connection reset")
    );
}

#[tokio::test]
async fn socat_forwarder_to_a_dead_port() {
    if std::process::Command::new("socat")
        .arg("-V")
        .output()
        .is_err()
    {
        panic!("socat is needed (scripts/install-deps.sh installs it)");
    }
    let dead = dead_port().await;
    let front = dead_port().await;
    let mut child = tokio::process::Command::new("socat")
        .arg(format!(
            "TCP-LISTEN:{},bind=127.0.0.1,reuseaddr,fork",
            front.port()
        ))
        .arg(format!("TCP:{dead}"))
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let start = Instant::now();
    while TcpStream::connect(front).await.is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "socat did not listen"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let out = run(&spec(front, KindKey::Tcp)).await;
    assert!(out.ok, "a TCP probe is fooled by the forwarder: {out:?}");
    let out = run(&spec(front, KindKey::Tls)).await;
    assert!(!out.ok, "the TLS handshake is not: {out:?}");
    assert!(
        out.reason.starts_with("TLS handshake failed"),
        "{}",
        out.reason
    );
    let _ = child.kill().await;
}

/// An agent that writes `answer` to every connection (then closes, unless `hold`).
async fn agent_server(answer: &'static [u8], hold: bool) -> SocketAddr {
    serve(move |mut s| async move {
        let _ = s.write_all(answer).await;
        if hold {
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    })
    .await
}

#[tokio::test]
async fn agent_answers_are_read_and_bounded() {
    // kind agent: the answer is the check.
    let a = agent_server(b"drain 50%\n", true).await;
    let mut sp = spec(a, KindKey::Agent);
    sp.agent_port = Some(a.port());
    let (out, ans) = check(&sp, &ProbeTls::new()).await;
    assert!(out.ok, "{out:?}");
    assert_eq!(out.reason, "agent says \"drain 50%\"");
    let ans = ans.unwrap().unwrap();
    assert_eq!(
        (ans.admin, ans.weight_pct),
        (Some(AgentAdmin::Drain), Some(50))
    );
    // Ended by the close, without a newline.
    let a = agent_server(b"maint", false).await;
    let mut sp = spec(a, KindKey::Agent);
    sp.agent_port = Some(a.port());
    assert!(check(&sp, &ProbeTls::new()).await.0.ok);
    // Garbage: a failed check with the text.
    let a = agent_server(b"SSH-2.0-OpenSSH_9.2\r\n", true).await;
    let mut sp = spec(a, KindKey::Agent);
    sp.agent_port = Some(a.port());
    let out = run(&sp).await;
    assert!(!out.ok);
    assert_eq!(
        out.reason,
        "malformed agent answer \"SSH-2.0-OpenSSH_9.2\": unknown word \"SSH-2.0-OpenSSH_9.2\""
    );
    // Silent, or a line that never ends: one timeout.
    let a = agent_server(b"", true).await;
    let mut sp = spec(a, KindKey::Agent);
    sp.agent_port = Some(a.port());
    assert_eq!(run(&sp).await.reason, "agent answer timeout after 300 ms");
    let a = agent_server(b"up", true).await;
    let mut sp = spec(a, KindKey::Agent);
    sp.agent_port = Some(a.port());
    assert!(run(&sp)
        .await
        .reason
        .starts_with("agent answer \"up\" not ended"));
    // Endless: capped.
    let a = agent_server(&[b'u'; 4096], true).await;
    let mut sp = spec(a, KindKey::Agent);
    sp.agent_port = Some(a.port());
    assert!(run(&sp).await.reason.contains("longer than 512 bytes"));
    // Refused.
    let d = dead_port().await;
    let mut sp = spec(d, KindKey::Agent);
    sp.agent_port = Some(d.port());
    assert_eq!(run(&sp).await.reason, "agent connect refused");

    // Beside an active check: both, the agent's failure apart.
    let web = http_server("200 OK", "").await;
    let mut sp = spec(web, KindKey::Http);
    sp.agent_port = Some(d.port());
    let (out, ans) = check(&sp, &ProbeTls::new()).await;
    assert!(out.ok, "{out:?}");
    assert_eq!(ans, Some(Err("agent connect refused".to_string())));
}
