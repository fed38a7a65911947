//! border-mgmt against a gobgpd that is not there, answers garbage, or is
//! real (Debian's gobgpd, no neighbours): the BGP view, retries with
//! backoff, metrics, and SetMaintenance. No dataplane runs here, so nothing
//! is announced (`dataplane down`); announcing is tested end to end in
//! tests/e2e_bgp.rs.

mod common;

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{config_text, free_port, Running, TempDir};
use conf::Listen;
use mgmt::pb;
use tonic::Code;

async fn start(tag: &str, bgp: Option<u16>, metrics: Option<u16>) -> Running {
    let dir = TempDir::new(tag);
    let socket = dir.0.join("api.sock");
    let mut text = config_text(&format!("unix://{}", socket.display()), metrics, "");
    if let Some(port) = bgp {
        text = text.replace(
            "\n[[vip]]",
            &format!(
                "\n[mgmt.bgp]\napi = \"127.0.0.1:{port}\"\ncommunities = [\"65000:7\"]\n\n[[vip]]"
            ),
        );
    }
    Running::start_with(dir, text, socket).await
}

async fn bgp_client(r: &Running) -> mgmt::client::BgpClient {
    let ch = mgmt::client::connect_channel(&Listen::Unix(r.socket.clone()), None)
        .await
        .unwrap();
    mgmt::client::bgp_client(ch)
}

async fn view(c: &mut mgmt::client::BgpClient) -> pb::BgpStatus {
    c.get_bgp(pb::GetBgpRequest {}).await.unwrap().into_inner()
}

/// Polls the view until `cond` holds (5 s at most).
async fn wait_view(
    c: &mut mgmt::client::BgpClient,
    what: &str,
    cond: impl Fn(&pb::BgpStatus) -> bool,
) -> pb::BgpStatus {
    let start = Instant::now();
    loop {
        let v = view(c).await;
        if cond(&v) {
            return v;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "{what}: {v:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A TCP server that answers every connection with bytes that are not
/// HTTP/2, then closes it.
struct Garbage {
    stop: Arc<AtomicBool>,
    port: u16,
}

impl Garbage {
    fn start() -> Garbage {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let port = l.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((mut c, _)) => {
                        let _ = c.write_all(
                            b"HTTP/1.1 418 I'm a teapot\r\n\r\n\x00\xff garbage \xfe\x01",
                        );
                        let mut buf = [0u8; 512];
                        let _ = c.set_read_timeout(Some(Duration::from_millis(50)));
                        let _ = c.read(&mut buf);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Garbage { stop, port }
    }
}

impl Drop for Garbage {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn metrics(port: u16) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[tokio::test]
async fn without_bgp_nothing_is_shown_and_maintenance_is_refused() {
    let mut r = start("nobgp", None, None).await;
    let mut c = bgp_client(&r).await;
    assert_eq!(view(&mut c).await, pb::BgpStatus::default());
    let e = c
        .set_maintenance(pb::SetMaintenanceRequest { on: true })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("[mgmt.bgp]"), "{e:?}");
    let st = r
        .client()
        .await
        .get_status(pb::GetStatusRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(!st.bgp.unwrap_or_default().configured);
    r.stop().await;
}

// Multi-threaded: the exporter is read with a blocking client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gobgpd_that_is_away_or_answers_garbage_is_counted_and_retried() {
    for (what, port, _garbage) in [
        ("nothing listening", free_port(), None),
        ("garbage", 0, Some(Garbage::start())),
    ] {
        let port = _garbage.as_ref().map_or(port, |g| g.port);
        let metrics_port = free_port();
        let mut r = start("away", Some(port), Some(metrics_port)).await;
        let mut c = bgp_client(&r).await;
        let v = wait_view(&mut c, what, |v| v.errors >= 3).await;
        assert!(v.configured && !v.connected, "{what}: {v:?}");
        assert!(
            v.last_error
                .starts_with(&format!("gobgpd 127.0.0.1:{port}: ")),
            "{what}: {v:?}"
        );
        assert_eq!(v.vips.len(), 1, "{what}: {v:?}");
        assert!(!v.vips[0].announced, "{what}: {v:?}");
        assert_eq!(v.vips[0].reason, "dataplane down", "{what}: {v:?}");
        assert_eq!(v.vips[0].prefix, "10.0.0.100/32");
        assert_eq!(v.vips[0].next_hop, "10.0.0.1");
        // Retried with a capped backoff: more failures keep coming.
        let later = wait_view(&mut c, what, |x| x.errors > v.errors).await;
        assert!(later.retry_in_ms <= 5000, "{what}: {later:?}");
        let text = metrics(metrics_port);
        assert!(
            text.contains(&format!(
                "border_bgp_gobgpd_up{{api=\"127.0.0.1:{port}\"}} 0"
            )),
            "{what}: {text}"
        );
        assert!(text.contains("border_bgp_gobgpd_errors_total "), "{text}");
        assert!(
            text.contains("border_bgp_vip_announced{vip=\"web\",prefix=\"10.0.0.100/32\"} 0"),
            "{text}"
        );
        // The API and the manager go on.
        let on = c
            .set_maintenance(pb::SetMaintenanceRequest { on: true })
            .await
            .unwrap()
            .into_inner();
        assert!(on.maintenance && on.changed);
        assert!(view(&mut c).await.maintenance);
        r.stop().await;
    }
}

struct Gobgpd(Child);

impl Drop for Gobgpd {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn a_real_gobgpd_is_connected_and_maintenance_switches() {
    let dir = TempDir::new("gobgpd");
    let cfg = dir.0.join("gobgpd.toml");
    // No neighbours; port -1: gobgpd listens for no BGP peer at all.
    std::fs::write(
        &cfg,
        "[global.config]\n  as = 65001\n  router-id = \"10.0.0.1\"\n  port = -1\n",
    )
    .unwrap();
    let port = free_port();
    let child = Command::new("gobgpd")
        .args(["-f", cfg.to_str().unwrap(), "--api-hosts"])
        .arg(format!("127.0.0.1:{port}"))
        .args(["--pprof-disable", "-p"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("gobgpd is installed (scripts/install-deps.sh)");
    let _gobgpd = Gobgpd(child);
    let mut r = start("real", Some(port), None).await;
    let mut c = bgp_client(&r).await;
    let v = wait_view(&mut c, "connected", |v| v.connected).await;
    assert!(v.last_error.is_empty() && v.neighbours.is_empty(), "{v:?}");
    assert_eq!(v.vips[0].reason, "dataplane down");
    let mut events = r
        .client()
        .await
        .watch_events(pb::WatchEventsRequest {})
        .await
        .unwrap()
        .into_inner();
    for (on, state) in [(true, "on"), (false, "off")] {
        let out = c
            .set_maintenance(pb::SetMaintenanceRequest { on })
            .await
            .unwrap()
            .into_inner();
        assert_eq!((out.maintenance, out.changed), (on, true));
        let again = c
            .set_maintenance(pb::SetMaintenanceRequest { on })
            .await
            .unwrap()
            .into_inner();
        assert!(!again.changed);
        let ev = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                let e = events.message().await.unwrap().unwrap();
                if let Some(pb::event::Kind::Bgp(b)) = e.kind {
                    if b.what == "maintenance" {
                        return b;
                    }
                }
            }
        })
        .await
        .expect("a maintenance event");
        assert_eq!(ev.state, state);
    }
    r.stop().await;
}
