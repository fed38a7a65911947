//! border-gw behind a border VIP with `proxy_protocol = "v2"` (full-NAT):
//! its api listener reads border's header, so its log names the client as
//! claimed (the client's own address) and border's local address as
//! measured; a direct connection without a header still works; one that
//! opens and closes without a byte logs nothing; a malformed header closes
//! only its own connection and is counted by reason in /metrics.
//!
//! Namespaces `pg-lb` (border-dp), `pg-cli` (the client, 10.120.0.2),
//! `pg-bk` (border-gw and its Redis, 10.121.0.11).

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::client_backend::ClientBackend;
use common::fleet::Ca;
use common::*;
use conf::counters::Counter;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TAG: &str = "pg";
const CLIENT: &str = "10.120.0.2";
const VIP: &str = "10.120.0.100:7501";
const GW_API: &str = "10.121.0.11:7501";
/// border's full-NAT local address toward the gateway.
const BORDER_LOCAL: &str = "10.121.0.1";
const REDIS_PORT: u16 = 6391;
const METRICS_PORT: u16 = 9119;

fn config() -> String {
    two_port_config(
        &format!("e2e{TAG}"),
        TAG,
        "10.120.0.1/24",
        &format!("{BORDER_LOCAL}/24"),
        &format!("unix:///run/border/e2e{TAG}.sock"),
    ) + r#"
[[vip]]
name = "gw"
address = "10.120.0.100"
port = 7501
mode = "fullnat"
maglev_table_size = 1021
proxy_protocol = "v2"
proxy_protocol_tlvs = ["unique_id", "crc32c"]

[[vip.backend]]
address = "10.121.0.11"
port = 7501
"#
}

/// Starts Redis and border-gw in the backend namespace.
fn start_gateway(topo: &mut ClientBackend) -> std::path::PathBuf {
    let d = topo.dir.0.clone();
    let ca = Ca::new(&d);
    let ctl = ca.issue(&d, "ctl");
    let ams = ca.issue(&d, "ams1");
    ca.issue(&d, "gw1");
    topo.spawn_bk(
        "redis",
        &[
            "redis-server",
            "--port",
            &REDIS_PORT.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            d.to_str().unwrap(),
        ],
    );
    wait_until("redis in pg-bk", Duration::from_secs(10), || {
        let out = topo
            .bk
            .try_run(&["redis-cli", "-p", &REDIS_PORT.to_string(), "PING"]);
        String::from_utf8_lossy(&out.stdout).trim() == "PONG"
    });
    let cfg = d.join("gw1.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"id = "gw1"
agent_listen = "127.0.0.1:7443"
api_listen = "{GW_API}"
metrics_listen = "127.0.0.1:{METRICS_PORT}"
redis = "redis://127.0.0.1:{REDIS_PORT}/0"

[tls]
cert = "{d}/gw1.pem"
key = "{d}/gw1.key"
client_ca = "{d}/ca.pem"
api_fingerprints = ["{ctl}"]

[[appliance]]
id = "ams-1"
fingerprints = ["{ams}"]
"#,
            d = d.display()
        ),
    )
    .unwrap();
    let log = topo.spawn_bk(
        "gw1",
        &[
            "env",
            "RUST_LOG=info,gw::api=debug",
            "NO_COLOR=1",
            env!("CARGO_BIN_EXE_border-gw"),
            "--config",
            cfg.to_str().unwrap(),
        ],
    );
    wait_log(&log, "border-gw running", |_| true);
    log
}

/// Waits for a line of `log` containing `needle` that `also` accepts;
/// returns it.
fn wait_log(log: &std::path::Path, needle: &str, also: impl Fn(&str) -> bool) -> String {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(l) = text.lines().find(|l| l.contains(needle) && also(l)) {
            return l.to_string();
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no line with {needle:?} in {}:\n{text}",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// The value of `key=` in a log line.
fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
}

type Send = hyper::client::conn::http2::SendRequest<http_body_util::Empty<bytes::Bytes>>;

/// TLS as the operator `ctl`, HTTP/2, to `to`; the connection's local
/// address and its request sender.
async fn operator_connection(dir: &std::path::Path, to: SocketAddr) -> (SocketAddr, Send) {
    let tls = mgmt::tls::ClientTls {
        server_ca: dir.join("ca.pem"),
        cert: dir.join("ctl.pem"),
        key: dir.join("ctl.key"),
        server_name: None,
    };
    let mut cfg = Arc::unwrap_or_clone(mgmt::tls::client_config(&tls).unwrap());
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let start = Instant::now();
    let tcp = loop {
        match tokio::time::timeout(Duration::from_secs(3), tokio::net::TcpStream::connect(to)).await
        {
            Ok(Ok(t)) => break t,
            r => assert!(
                start.elapsed() < Duration::from_secs(20),
                "connect {to}: {r:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let me = tcp.local_addr().unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let tls = connector.connect(name, tcp).await.unwrap();
    let (send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    (me, send)
}

/// One `GetStatus` call for appliance ams-1 (which has no tunnel here):
/// the gRPC status the gateway answered.
async fn get_status(send: &mut Send) -> String {
    send.ready().await.unwrap();
    let req = hyper::Request::post("http://gw/border.v1.Border/GetStatus")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("border-appliance", "ams-1")
        .body(http_body_util::Empty::new())
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    resp.headers()
        .get("grpc-status")
        .map_or("none".to_string(), |v| v.to_str().unwrap().to_string())
}

/// Runs `f` on a single-threaded runtime in namespace `ns` (its sockets
/// are made there).
fn in_ns<T: std::marker::Send + 'static, F>(
    ns: &str,
    f: impl FnOnce() -> F + std::marker::Send + 'static,
) -> T
where
    F: std::future::Future<Output = T>,
{
    in_netns(ns, move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f())
    })
    .join()
    .unwrap()
}

fn scrape(bk: &str) -> String {
    in_netns(bk, || common::metrics::scrape_metrics(METRICS_PORT))
        .join()
        .unwrap()
}

fn metric(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
        .parse()
        .unwrap()
}

#[test]
fn border_gw_behind_a_proxy_vip_logs_claimed_and_measured_and_still_takes_direct_connections() {
    let mut topo = ClientBackend::start(TAG, &config(), &format!("{CLIENT}/24"), "10.121.0.11/24");
    topo.cli
        .run(&["ip", "-4", "route", "add", "default", "via", "10.120.0.1"]);
    let log = start_gateway(&mut topo);
    let dir = topo.dir.0.clone();
    let (bk, cli) = (topo.bk.name.clone(), topo.cli.name.clone());
    let vip: SocketAddr = VIP.parse().unwrap();
    let gw_api: SocketAddr = GW_API.parse().unwrap();

    // Through the VIP: border writes the header, the gateway reads it.
    let d = dir.clone();
    let (me, status) = in_ns(&cli, move || async move {
        let (me, mut send) = operator_connection(&d, vip).await;
        (me, get_status(&mut send).await)
    });
    assert_eq!(me.ip().to_string(), CLIENT);
    assert_ne!(status, "none", "the gateway answered the call");
    let call = wait_log(&log, " call ", |l| l.contains(&format!("claimed={me}")));
    assert_eq!(field(&call, "client"), me.to_string(), "{call}");
    let measured: SocketAddr = field(&call, "measured").parse().unwrap();
    assert_eq!(measured.ip().to_string(), BORDER_LOCAL, "{call}");
    let conn = wait_log(&log, "api: connection", |l| {
        l.contains(&format!("claimed={me}"))
    });
    assert_eq!(field(&conn, "measured"), measured.to_string(), "{conn}");
    let uid = field(&conn, "uid");
    assert!(
        uid.len() == 16 && uid.bytes().all(|b| b.is_ascii_hexdigit()),
        "border's connection id in the header: {conn}"
    );
    topo.wait_counter(Counter::PpHeadersInserted, 1);

    // Directly, without a header: claimed is empty, the call works.
    let d = dir.clone();
    let (direct, direct_status) = in_ns(&bk, move || async move {
        let (me, mut send) = operator_connection(&d, gw_api).await;
        (me, get_status(&mut send).await)
    });
    assert_eq!(direct_status, status, "the same answer as through the VIP");
    let call = wait_log(&log, " call ", |l| {
        l.contains(&format!("measured={direct}"))
    });
    assert_eq!(field(&call, "claimed"), "-", "{call}");
    assert_eq!(field(&call, "client"), direct.to_string(), "{call}");

    // Opens and closes without a byte: no line.
    let silent = in_ns(&bk, move || async move {
        let s = tokio::net::TcpStream::connect(gw_api).await.unwrap();
        s.local_addr().unwrap()
    });

    // A malformed header (version 1) closes its connection only: an open
    // neighbour answers a call after it.
    let d = dir.clone();
    let (bad, eof, after) = in_ns(&bk, move || async move {
        let (_, mut neighbour) = operator_connection(&d, gw_api).await;
        let mut raw = tokio::net::TcpStream::connect(gw_api).await.unwrap();
        let bad = raw.local_addr().unwrap();
        let mut header = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
        header.extend_from_slice(&[0x11, 0x11, 0, 12]);
        header.extend_from_slice(&[0u8; 12]);
        raw.write_all(&header).await.unwrap();
        let mut rest = Vec::new();
        let eof = tokio::time::timeout(Duration::from_secs(5), raw.read_to_end(&mut rest))
            .await
            .map(|r| r.map_or(0, |n| n) == 0)
            .unwrap_or(false);
        (bad, eof, get_status(&mut neighbour).await)
    });
    assert!(eof, "the malformed connection was closed without an answer");
    assert_eq!(after, status, "the neighbour's call was answered");
    let refused = wait_log(&log, "bad_version", |l| {
        l.contains(&format!("measured={bad}"))
    });
    assert!(refused.contains("WARN"), "{refused}");

    let m = scrape(&bk);
    let api = |kind: &str, label: &str| {
        metric(
            &m,
            &format!("border_gw_proxy_{kind}{{listener=\"api\",{label}}}"),
        )
    };
    assert_eq!(api("header_refusals_total", "reason=\"bad_version\""), 1);
    assert_eq!(api("header_refusals_total", "reason=\"bad_command\""), 0);
    assert_eq!(api("connections_total", "arrival=\"proxied\""), 1);
    assert_eq!(api("connections_total", "arrival=\"direct\""), 2);
    assert_eq!(api("connections_total", "arrival=\"silent\""), 1);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        !text.contains(&silent.to_string()),
        "the silent connection {silent} is in the log:\n{text}"
    );
}
