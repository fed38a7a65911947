//! Roles and `[mgmt.limits]` (docs/security.md), played by the attacker
//! in-process: a pinned
//! reader certificate calling ApplyConfig, a peer appliance's certificate
//! calling GetStatus, an operator note of megabytes, more WatchEvents
//! streams than the limits, and a metrics connection flood.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::ca::{client, mgmt_tls_section, Ca};
use common::{config_text, free_port, Running, TempDir};
use mgmt::pb::{self, set_backend_request::Action};
use tonic::Code;

/// A TLS border-mgmt pinning `ops` (operator), `reader` and `peer`, with
/// `limits` lines under `[mgmt.limits]`, and its metrics port.
async fn start_tls(tag: &str, limits: &str) -> (Running, SocketAddr, u16) {
    let dir = TempDir::new(tag);
    let d = dir.0.clone();
    let ca = Ca::new("border test CA");
    ca.write(&d, "ca");
    ca.issue(&d, "server", &["127.0.0.1"]);
    let ops = ca.issue(&d, "ops", &["ops"]);
    let reader = ca.issue(&d, "reader", &["reader"]);
    let peer = ca.issue(&d, "peer", &["peer"]);
    let port = free_port();
    let metrics = free_port();
    let tls = format!(
        "{}reader_fingerprints = [\"{reader}\"]\npeer_fingerprints = [\"{peer}\"]\n[mgmt.limits]\n{limits}\n",
        mgmt_tls_section(&d, "server", &d.join("ca.pem"), &[&ops])
    );
    let text = config_text(&format!("tcp://127.0.0.1:{port}"), Some(metrics), &tls);
    let r = Running::start_with(dir, text, d.join("unused.sock")).await;
    (r, SocketAddr::from(([127, 0, 0, 1], port)), metrics)
}

async fn border(r: &Running, addr: SocketAddr, who: &str) -> mgmt::client::Client {
    mgmt::client::connect_tls(addr, &client(&r.dir.0, who))
        .await
        .unwrap()
}

async fn health(
    r: &Running,
    addr: SocketAddr,
    who: &str,
) -> pb::border_health_client::BorderHealthClient<tonic::transport::Channel> {
    let ch = mgmt::client::connect_channel(&conf::Listen::Tcp(addr), Some(&client(&r.dir.0, who)))
        .await
        .unwrap();
    pb::border_health_client::BorderHealthClient::new(ch)
}

async fn scrape(port: u16) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_string(&mut out))
        .await
        .unwrap()
        .unwrap();
    out
}

/// The value of the sample `line` (name with labels) in a scrape.
fn sample(body: &str, line: &str) -> u64 {
    body.lines()
        .find_map(|l| l.strip_prefix(line)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {line} in\n{body}"))
        .parse()
        .unwrap()
}

fn drain(note: &str) -> pb::SetBackendRequest {
    pb::SetBackendRequest {
        vip: "web".into(),
        backend: "10.0.1.1:8080".into(),
        action: Some(Action::Drain(pb::Drain {})),
        note: note.into(),
    }
}

#[tokio::test]
async fn a_pinned_reader_calling_apply_config_is_denied_and_nothing_changes() {
    let (mut r, addr, metrics) = start_tls("reader", "").await;
    let mut reader = border(&r, addr, "reader").await;
    let before = reader
        .get_config(pb::GetConfigRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(before.generation, 1);
    reader.get_status(pb::GetStatusRequest {}).await.unwrap();
    reader.get_stats(pb::GetStatsRequest {}).await.unwrap();
    let mut events = reader
        .watch_events(pb::WatchEventsRequest {})
        .await
        .expect("a reader may watch events")
        .into_inner();

    let bigger = r.text.replace("port = 8080\n", "port = 8080\nweight = 3\n");
    let e = reader
        .apply_config(pb::ApplyConfigRequest {
            config_toml: bigger.clone(),
            dry_run: false,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("reader"), "{}", e.message());
    let e = reader.set_backend(drain("")).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");

    // Nothing changed: same generation, same config, no drain, no event.
    assert_eq!(r.m.published_generation(), 1);
    let after = reader
        .get_config(pb::GetConfigRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (after.generation, after.config_toml),
        (1, before.config_toml)
    );
    let st = reader
        .get_status(pb::GetStatusRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(st.vips[0]
        .backends
        .iter()
        .all(|b| !b.reason.contains("drained")));
    assert!(
        tokio::time::timeout(Duration::from_millis(200), events.message())
            .await
            .is_err(),
        "no event from a refused call"
    );
    let body = scrape(metrics).await;
    assert_eq!(
        sample(&body, "border_mgmt_api_role_denied_total{role=\"reader\"}"),
        2
    );

    // The operator may.
    let mut ops = border(&r, addr, "ops").await;
    let out = ops
        .apply_config(pb::ApplyConfigRequest {
            config_toml: bigger,
            dry_run: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(out.generation, 2);
    r.stop().await;
}

#[tokio::test]
async fn a_peer_certificate_gets_border_health_only() {
    let (mut r, addr, metrics) = start_tls("peer", "").await;
    let mut h = health(&r, addr, "peer").await;
    h.get_observations(pb::GetObservationsRequest {
        from_checker: "lb-b/apitest".into(),
    })
    .await
    .expect("a peer may read observations");
    h.get_health(pb::GetHealthRequest {}).await.unwrap();
    let mut b = border(&r, addr, "peer").await;
    for e in [
        b.get_status(pb::GetStatusRequest {}).await.unwrap_err(),
        b.get_config(pb::GetConfigRequest {}).await.unwrap_err(),
        b.set_backend(drain("")).await.unwrap_err(),
    ] {
        assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    }
    let e = b.watch_events(pb::WatchEventsRequest {}).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert_eq!(r.m.published_generation(), 1);
    let body = scrape(metrics).await;
    assert_eq!(
        sample(&body, "border_mgmt_api_role_denied_total{role=\"peer\"}"),
        4
    );
    // The operator still reads health too.
    let mut h = health(&r, addr, "ops").await;
    h.get_health(pb::GetHealthRequest {}).await.unwrap();
    r.stop().await;
}

#[tokio::test]
async fn a_note_over_the_limit_is_refused_and_nothing_changes() {
    let (mut r, addr, metrics) = start_tls("note", "note_max_bytes = 64").await;
    let mut ops = border(&r, addr, "ops").await;
    let e = ops.set_backend(drain(&"x".repeat(65))).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(
        e.message().contains("65 bytes") && e.message().contains("mgmt.limits.note_max_bytes = 64"),
        "{}",
        e.message()
    );
    // A 3 MiB note (under the 4 MiB message size) too.
    let e = ops
        .set_backend(drain(&"x".repeat(3 << 20)))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert_eq!(r.m.published_generation(), 1);
    ops.set_backend(drain(&"x".repeat(64))).await.unwrap();
    assert_eq!(r.m.published_generation(), 2);
    let body = scrape(metrics).await;
    assert_eq!(
        sample(
            &body,
            "border_mgmt_limit_refused_total{limit=\"note_max_bytes\"}"
        ),
        2
    );
    r.stop().await;
}

#[tokio::test]
async fn watch_streams_are_bounded_per_connection_and_in_total() {
    let (mut r, addr, metrics) = start_tls(
        "watch",
        "watch_streams = 3\nwatch_streams_per_connection = 2",
    )
    .await;
    let mut a = border(&r, addr, "reader").await;
    let mut b = border(&r, addr, "reader").await;
    let w = pb::WatchEventsRequest {};
    let a1 = a.watch_events(w).await.unwrap();
    let a2 = a.watch_events(w).await.unwrap();
    let e = a.watch_events(w).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(
        e.message().contains("watch_streams_per_connection = 2"),
        "{}",
        e.message()
    );
    let b1 = b.watch_events(w).await.unwrap();
    let e = b.watch_events(w).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("watch_streams = 3"), "{}", e.message());
    // Other calls still work on a full connection.
    a.get_status(pb::GetStatusRequest {}).await.unwrap();
    let body = scrape(metrics).await;
    assert_eq!(sample(&body, "border_mgmt_watch_streams"), 3);
    assert_eq!(
        sample(
            &body,
            "border_mgmt_limit_refused_total{limit=\"watch_streams_per_connection\"}"
        ),
        1
    );
    assert_eq!(
        sample(
            &body,
            "border_mgmt_limit_refused_total{limit=\"watch_streams\"}"
        ),
        1
    );
    // A closed stream frees its slot.
    drop(a1);
    let mut again = None;
    for _ in 0..50 {
        if let Ok(s) = b.watch_events(w).await {
            again = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(again.is_some(), "the slot of a closed stream is reused");
    drop((a2, b1, again));
    r.stop().await;
}

#[tokio::test]
async fn a_metrics_connection_flood_is_bounded() {
    use tokio::io::AsyncReadExt;
    let (mut r, _addr, metrics) = start_tls("mflood", "metrics_connections = 4").await;
    let mut held = Vec::new();
    for _ in 0..200 {
        held.push(
            tokio::net::TcpStream::connect(("127.0.0.1", metrics))
                .await
                .unwrap(),
        );
    }
    // Idle connections: the first 4 are held open, the rest closed at once.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut closed = 0;
    for s in &mut held {
        let mut b = [0u8; 1];
        if let Ok(Ok(0)) = tokio::time::timeout(Duration::from_millis(20), s.read(&mut b)).await {
            closed += 1;
        }
    }
    assert!(closed >= 196, "{closed} of 200 closed");
    drop(held);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let body = scrape(metrics).await;
    assert!(
        sample(
            &body,
            "border_mgmt_limit_refused_total{limit=\"metrics_connections\"}"
        ) >= 196
    );
    r.stop().await;
}

#[tokio::test]
async fn tls_handshakes_are_bounded_in_number_and_time() {
    use tokio::io::AsyncReadExt;
    let (mut r, addr, metrics) =
        start_tls("hs", "tls_handshakes = 4\ntls_handshake_timeout_ms = 500").await;
    // 100 connections that never start a handshake.
    let mut idle = Vec::new();
    for _ in 0..100 {
        idle.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut closed = 0;
    for s in &mut idle {
        let mut b = [0u8; 1];
        if let Ok(Ok(0)) = tokio::time::timeout(Duration::from_millis(20), s.read(&mut b)).await {
            closed += 1;
        }
    }
    assert!(closed >= 96, "{closed} of 100 closed at once");
    // The 4 in flight time out; then a real client gets through.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let mut ops = border(&r, addr, "ops").await;
    ops.get_status(pb::GetStatusRequest {}).await.unwrap();
    let body = scrape(metrics).await;
    assert!(
        sample(
            &body,
            "border_mgmt_limit_refused_total{limit=\"tls_handshakes\"}"
        ) >= 96
    );
    assert!(
        sample(
            &body,
            "border_mgmt_limit_refused_total{limit=\"tls_handshake_timeout\"}"
        ) >= 4
    );
    drop(idle);
    r.stop().await;
}

/// A gRPC request body that declares a 4 MiB message, sends `left` bytes
/// of it and never ends (no END_STREAM).
struct Endless {
    head: Option<bytes::Bytes>,
    left: usize,
}

impl hyper::body::Body for Endless {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<bytes::Bytes>, Self::Error>>> {
        if let Some(h) = self.head.take() {
            return std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(h))));
        }
        if self.left == 0 {
            return std::task::Poll::Pending;
        }
        let n = self.left.min(64 << 10);
        self.left -= n;
        std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(vec![0u8; n].into()))))
    }

    fn is_end_stream(&self) -> bool {
        false
    }
}

#[tokio::test]
async fn request_bodies_are_bounded_by_the_byte_budget_and_operators_keep_their_reserve() {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let (mut r, addr, metrics) = start_tls(
        "budget",
        "request_memory_mib = 8\noperator_reserve_mib = 4\nstreams_per_connection = 16",
    )
    .await;
    // A reader: 16 streams, each 1 MiB into a 4 MiB message, never ending.
    let mut cfg = std::sync::Arc::unwrap_or_clone(
        mgmt::tls::client_config(&client(&r.dir.0, "reader")).unwrap(),
    );
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(cfg))
        .connect(
            rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap(),
            tcp,
        )
        .await
        .unwrap();
    let (mut send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut head = vec![0u8];
    head.extend_from_slice(&((4u32 << 20) - 1).to_be_bytes());
    let mut answers = Vec::new();
    for _ in 0..16 {
        send.ready().await.unwrap();
        let req = hyper::Request::post(format!("http://{addr}/border.v1.Border/GetStatus"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(Endless {
                head: Some(head.clone().into()),
                left: 1 << 20,
            })
            .unwrap();
        answers.push(tokio::spawn(tokio::time::timeout(
            Duration::from_secs(3),
            send.send_request(req),
        )));
    }
    // An operator's call answers meanwhile (the operators' reserve).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut ops = border(&r, addr, "ops").await;
    ops.get_status(pb::GetStatusRequest {}).await.unwrap();
    let mut exhausted = 0;
    for a in answers {
        if let Ok(Ok(resp)) = a.await.unwrap() {
            let status = resp.headers().get("grpc-status").cloned();
            let message = resp.headers().get("grpc-message").cloned();
            if status.as_ref().is_some_and(|s| s == "8") {
                exhausted += 1;
                let m = message.unwrap();
                assert!(
                    m.to_str().unwrap().contains("operator_reserve_mib"),
                    "{m:?}"
                );
            }
        }
    }
    // 4 MiB for readers: at most 4 of the 1 MiB streams fit; the rest are refused.
    assert!(exhausted >= 12, "{exhausted} of 16 streams refused");
    let body = scrape(metrics).await;
    assert_eq!(
        sample(
            &body,
            "border_mgmt_limit_refused_total{limit=\"reader_request_memory\"}"
        ),
        exhausted
    );
    r.stop().await;
}
