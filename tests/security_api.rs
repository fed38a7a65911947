//! `[mgmt.limits]` (docs/security.md) against the border-mgmt process: a
//! pinned reader
//! opens 10,000 WatchEvents streams (100 TLS connections x 100), a scraper
//! floods the metrics listener. The excess is refused (RESOURCE_EXHAUSTED,
//! closed connections) and counted, border-mgmt's memory stays bounded
//! and it still answers.
//!
//! No dataplane and no namespaces: instances are prefixed `az-`.
//! `cargo test --test security_api -- --nocapture` prints the RSS measured.

mod common;

#[path = "../mgmt/tests/common/ca.rs"]
#[allow(dead_code)]
mod ca;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use ca::{client, Ca};
use common::metrics::{free_port, scrape_metrics};
use common::{clean_instance, null_port_config, BorderMgmt, TempDir};
use mgmt::pb;
use tonic::Code;

/// A border-mgmt on TCP with mutual TLS pinning `ops` (operator) and
/// `reader`, default `[mgmt.limits]`, metrics on `metrics`.
fn start(dir: &TempDir, instance: &str, api: u16, metrics: u16) -> BorderMgmt {
    let d = &dir.0;
    let ca = Ca::new("border test CA");
    ca.write(d, "ca");
    ca.issue(d, "server", &["127.0.0.1"]);
    let ops = ca.issue(d, "ops", &["ops"]);
    let reader = ca.issue(d, "reader", &["reader"]);
    let mut text = null_port_config(instance, "10.93.0.1", &format!("tcp://127.0.0.1:{api}"));
    text += &format!(
        r#"metrics_listen = "127.0.0.1:{metrics}"
[mgmt.tls]
cert = "server.pem"
key = "server.key"
client_ca = "ca.pem"
client_fingerprints = ["{ops}"]
reader_fingerprints = ["{reader}"]
[[vip]]
name = "web"
address = "10.93.0.100"
port = 80
maglev_table_size = 1009
[[vip.backend]]
address = "10.93.1.1"
port = 8080
"#
    );
    let cfg = d.join("border.toml");
    std::fs::write(&cfg, text).unwrap();
    clean_instance(instance);
    let state = d.join("state");
    BorderMgmt::start_with(
        None,
        &cfg,
        d.join("mgmt.log"),
        &["--state-dir", state.to_str().unwrap()],
    )
}

/// Resident memory of a process, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

fn sample(body: &str, line: &str) -> u64 {
    body.lines()
        .find_map(|l| l.strip_prefix(line)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {line} in\n{body}"))
        .parse()
        .unwrap()
}

async fn connect(dir: &Path, api: SocketAddr, who: &str) -> mgmt::client::Client {
    mgmt::client::connect_tls(api, &client(dir, who))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_watch_streams_are_refused_beyond_the_limits_and_memory_stays_bounded() {
    const CONNECTIONS: usize = 100;
    const PER_CONNECTION: usize = 100;
    let dir = TempDir::new("az-watch");
    let (api, metrics) = (free_port(), free_port());
    let mut m = start(&dir, "az-watch", api, metrics);
    let addr = SocketAddr::from(([127, 0, 0, 1], api));
    let before = rss_kib(m.pid());

    let mut conns = Vec::new();
    for _ in 0..CONNECTIONS {
        conns.push(connect(&dir.0, addr, "reader").await);
    }
    let mut tasks = tokio::task::JoinSet::new();
    for c in &conns {
        for _ in 0..PER_CONNECTION {
            let mut c = c.clone();
            tasks.spawn(async move {
                c.watch_events(pb::WatchEventsRequest {})
                    .await
                    .map(|r| r.into_inner())
            });
        }
    }
    let (mut open, mut exhausted, mut other) = (Vec::new(), 0, Vec::new());
    let started = Instant::now();
    while let Some(r) = tasks.join_next().await {
        match r.unwrap() {
            Ok(s) => open.push(s),
            Err(e) if e.code() == Code::ResourceExhausted => {
                assert!(e.message().contains("mgmt.limits.watch_streams"), "{e:?}");
                exhausted += 1;
            }
            Err(e) => other.push(e),
        }
    }
    let took = started.elapsed();
    let during = rss_kib(m.pid());
    println!(
        "10,000 WatchEvents: {} open, {exhausted} RESOURCE_EXHAUSTED, {} other, in {took:?}; border-mgmt RSS {before} KiB before, {during} KiB with them",
        open.len(),
        other.len()
    );
    assert!(other.is_empty(), "{:?}", &other[..other.len().min(3)]);
    // Defaults: 8 a connection, 64 in total.
    assert_eq!(open.len(), 64);
    assert_eq!(exhausted, CONNECTIONS * PER_CONNECTION - 64);
    assert!(
        during < before + 64 * 1024,
        "RSS grew from {before} KiB to {during} KiB"
    );

    // Still answering, promptly.
    let mut ops = connect(&dir.0, addr, "ops").await;
    let t = Instant::now();
    ops.get_status(pb::GetStatusRequest {}).await.unwrap();
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    let body = tokio::task::spawn_blocking(move || scrape_metrics(metrics))
        .await
        .unwrap();
    assert_eq!(sample(&body, "border_mgmt_watch_streams"), 64);
    let refused = sample(
        &body,
        "border_mgmt_limit_refused_total{limit=\"watch_streams\"}",
    ) + sample(
        &body,
        "border_mgmt_limit_refused_total{limit=\"watch_streams_per_connection\"}",
    );
    assert_eq!(refused as usize, exhausted);

    // Streams a client closes give their places back.
    drop(open);
    drop(conns);
    let mut c = connect(&dir.0, addr, "reader").await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match c.watch_events(pb::WatchEventsRequest {}).await {
            Ok(_) => break,
            Err(e) if Instant::now() < deadline => {
                assert_eq!(e.code(), Code::ResourceExhausted);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("no place freed: {e:?}"),
        }
    }
    assert!(m.stop().success());
    clean_instance("az-watch");
}

#[test]
fn a_metrics_connection_flood_is_bounded_and_counted() {
    use std::io::Read;
    let dir = TempDir::new("az-mflood");
    let (api, metrics) = (free_port(), free_port());
    let mut m = start(&dir, "az-mflood", api, metrics);
    let before = rss_kib(m.pid());
    let mut flood = Vec::new();
    for _ in 0..2000 {
        flood.push(std::net::TcpStream::connect(("127.0.0.1", metrics)).unwrap());
    }
    std::thread::sleep(Duration::from_millis(500));
    let during = rss_kib(m.pid());
    let mut closed = 0;
    for s in &mut flood {
        s.set_read_timeout(Some(Duration::from_millis(5))).unwrap();
        if let Ok(0) = s.read(&mut [0u8; 1]) {
            closed += 1;
        }
    }
    println!("2,000 metrics connections: {closed} closed at once; border-mgmt RSS {before} KiB before, {during} KiB during");
    // Default: 16 held open.
    // At most 16 held open (a held connection idle for 10 s is closed by
    // the header timeout and its place taken by a later one).
    assert!(closed >= 2000 - 16, "{closed}");
    assert!(
        during < before + 32 * 1024,
        "RSS grew from {before} KiB to {during} KiB"
    );
    drop(flood);
    std::thread::sleep(Duration::from_millis(200));
    let body = scrape_metrics(metrics);
    let refused = sample(
        &body,
        "border_mgmt_limit_refused_total{limit=\"metrics_connections\"}",
    );
    assert!((1900..=closed).contains(&(refused as usize)), "{refused}");
    assert!(m.stop().success());
    clean_instance("az-mflood");
}
