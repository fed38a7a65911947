//! The health checker inside an in-process border-mgmt: verdicts become table
//! generations and API state (GetStatus, BorderHealth.GetHealth, events),
//! the weight header changes ring shares, every backend down fails open,
//! and three border-mgmt instances exchange observations with quorum 2.
//! Backends are HTTP servers on 127.0.0.1 whose answer the test controls.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::backend::{eventually, Backend};
use common::{Running, TempDir};
use mgmt::pb;

fn config(
    instance: &str,
    socket: &str,
    peers: &[String],
    quorum: u32,
    backends: &[&Backend],
    weight_header: bool,
) -> String {
    let mut t = common::health_config_head(instance, &format!("unix://{socket}"), quorum);
    for p in peers {
        t.push_str(&format!("[[mgmt.peer]]\naddress = \"unix://{p}\"\n"));
    }
    t.push_str(&common::web_vip_checked(
        &format!("weight_header = {weight_header}\n"),
        backends,
    ));
    t
}

async fn start(
    tag: &str,
    peers: &[String],
    quorum: u32,
    backends: &[&Backend],
    weight_header: bool,
) -> Running {
    let dir = TempDir::new(tag);
    let socket = dir.0.join("api.sock");
    let text = config(
        tag,
        &socket.display().to_string(),
        peers,
        quorum,
        backends,
        weight_header,
    );
    Running::start_with(dir, text, socket).await
}

async fn status(r: &Running) -> pb::VipStatus {
    let mut c = r.client().await;
    c.get_status(pb::GetStatusRequest {})
        .await
        .unwrap()
        .into_inner()
        .vips
        .remove(0)
}

async fn health(r: &Running) -> pb::GetHealthResponse {
    let mut c = mgmt::health::service::connect(&conf::Listen::Unix(r.socket.clone()), None)
        .await
        .unwrap();
    c.get_health(pb::GetHealthRequest {})
        .await
        .unwrap()
        .into_inner()
}

fn backend_of<'a>(v: &'a pb::VipStatus, b: &Backend) -> &'a pb::BackendStatus {
    v.backends
        .iter()
        .find(|x| x.address == b.addr.to_string())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verdicts_become_tables_status_and_events() {
    let (a, b) = (Backend::start().await, Backend::start().await);
    let mut r = start("hm-one", &[], 1, &[&a, &b], false).await;
    let mut events = r
        .client()
        .await
        .watch_events(pb::WatchEventsRequest {})
        .await
        .unwrap()
        .into_inner();
    let within = Duration::from_secs(10);

    eventually("both up with data", within, async || {
        let v = status(&r).await;
        v.backends
            .iter()
            .all(|x| x.reason == "up: HTTP 200")
            .then_some(())
    })
    .await;

    // A answers 503: down after fall = 2 probes, out of the ring.
    let t0 = Instant::now();
    a.set(503);
    let v = eventually("a down", within, async || {
        let v = status(&r).await;
        (backend_of(&v, &a).state == pb::BackendState::Down as i32).then_some(v)
    })
    .await;
    assert!(
        t0.elapsed() >= Duration::from_millis(200),
        "one failure is noise"
    );
    assert_eq!(
        backend_of(&v, &a).reason,
        "down: HTTP 503 (2 consecutive failures)"
    );
    assert_eq!(backend_of(&v, &a).ring_slots, 0);
    assert_eq!(backend_of(&v, &b).ring_slots, 1009);
    assert!(!v.fail_open);
    let g = common::read_region(&r.paths.tables);
    assert_eq!(
        g.vips[0]
            .backends
            .iter()
            .filter(|x| x.state == conf::tables::BackendState::Down)
            .count(),
        1
    );

    // B stops answering too: every backend down, the VIP fails open.
    b.set(0);
    let v = eventually("fail-open", within, async || {
        let v = status(&r).await;
        v.fail_open.then_some(v)
    })
    .await;
    assert!(
        backend_of(&v, &b).reason.starts_with(
            "down: connection closed without an HTTP response (2 consecutive failures)"
        ),
        "{}",
        backend_of(&v, &b).reason
    );
    assert!(backend_of(&v, &a)
        .reason
        .ends_with("VIP fails open: every backend is down, all stay in the ring"));
    assert_eq!(
        backend_of(&v, &a).ring_slots + backend_of(&v, &b).ring_slots,
        1009,
        "all stay in the ring"
    );
    let h = health(&r).await;
    assert!(h.vips[0].fail_open);
    assert_eq!(h.checkers.len(), 1);
    assert_eq!(h.vips[0].backends[0].checkers, vec![h.checker.clone()]);

    // The event stream said so.
    let fail_open = eventually("fail-open event", within, async || {
        while let Ok(Ok(Some(e))) =
            tokio::time::timeout(Duration::from_millis(10), events.message()).await
        {
            if let Some(pb::event::Kind::Health(pb::HealthEvent {
                kind: Some(pb::health_event::Kind::FailOpen(f)),
            })) = e.kind
            {
                return Some(f);
            }
        }
        None
    })
    .await;
    assert!(fail_open.fail_open);
    assert_eq!(fail_open.vip, "web");

    // Both heal: up after rise = 2, fail-open ends.
    a.set(200);
    b.set(200);
    eventually("healed", within, async || {
        let v = status(&r).await;
        (!v.fail_open
            && v.backends
                .iter()
                .all(|x| x.state == pb::BackendState::Up as i32 && x.ring_slots > 0))
        .then_some(())
    })
    .await;
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weight_header_shifts_ring_share_and_falls_back() {
    let (a, b) = (Backend::start().await, Backend::start().await);
    a.weight.store(3, Ordering::Relaxed);
    b.weight.store(1, Ordering::Relaxed);
    let mut r = start("hm-weight", &[], 1, &[&a, &b], true).await;
    let within = Duration::from_secs(10);
    let v = eventually("header weights", within, async || {
        let v = status(&r).await;
        (backend_of(&v, &a).weight == 3 && backend_of(&v, &b).weight == 1).then_some(v)
    })
    .await;
    let (sa, sb) = (backend_of(&v, &a).ring_slots, backend_of(&v, &b).ring_slots);
    assert!(
        sa > 2 * sb,
        "3:1 weights give a 3:1 ring share, got {sa}:{sb}"
    );
    // B drops its header: the VIP falls back to configured weights (1:1).
    b.weight.store(0, Ordering::Relaxed);
    eventually("fallback", within, async || {
        let v = status(&r).await;
        (backend_of(&v, &a).weight == 1 && backend_of(&v, &b).weight == 1).then_some(())
    })
    .await;
    let h = health(&r).await;
    assert!(
        h.vips[0]
            .weight_fallback
            .contains("no X-Load-Balancing-Endpoint-Weight header"),
        "{}",
        h.vips[0].weight_fallback
    );
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_checkers_with_quorum_two() {
    let (a, b) = (Backend::start().await, Backend::start().await);
    let dirs: Vec<TempDir> = (0..3).map(|i| TempDir::new(&format!("hm-q{i}"))).collect();
    let sockets: Vec<String> = dirs
        .iter()
        .map(|d| d.0.join("api.sock").display().to_string())
        .collect();
    let mut rs = Vec::new();
    for (i, dir) in dirs.into_iter().enumerate() {
        let peers: Vec<String> = sockets
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, s)| s.clone())
            .collect();
        let text = config(
            &format!("hm-q{i}"),
            &sockets[i],
            &peers,
            2,
            &[&a, &b],
            false,
        );
        rs.push(Running::start_with(dir, text, sockets[i].clone().into()).await);
    }
    let within = Duration::from_secs(15);
    // Every checker hears the other two.
    for r in &rs {
        eventually("peers fresh", within, async || {
            let h = health(r).await;
            (h.checkers.len() == 3 && h.checkers.iter().all(|c| c.fresh && c.error.is_empty()))
                .then_some(())
        })
        .await;
    }
    // A dies for everyone: down on every instance, decided by at least two checkers.
    a.set(503);
    for r in &rs {
        let v = eventually("a down by quorum", within, async || {
            let v = status(r).await;
            (backend_of(&v, &a).state == pb::BackendState::Down as i32).then_some(v)
        })
        .await;
        assert!(
            backend_of(&v, &a)
                .reason
                .contains("checkers see it fail (quorum 2)"),
            "{}",
            backend_of(&v, &a).reason
        );
        let h = health(r).await;
        let bh = h.vips[0]
            .backends
            .iter()
            .find(|x| x.address == a.addr.to_string())
            .unwrap();
        assert!(bh.checkers.len() >= 2, "{:?}", bh.checkers);
        assert_eq!(backend_of(&v, &b).state, pb::BackendState::Up as i32);
    }
    // One instance stops: the others keep deciding with two fresh checkers.
    let mut last = rs.pop().unwrap();
    last.stop().await;
    a.set(200);
    for r in &rs {
        eventually("a up again", within, async || {
            let v = status(r).await;
            (backend_of(&v, &a).state == pb::BackendState::Up as i32).then_some(())
        })
        .await;
        eventually(
            "the stopped peer reported unreachable",
            within,
            async || {
                let h = health(r).await;
                let gone = h
                    .checkers
                    .iter()
                    .find(|c| c.address.contains("hm-q2"))
                    .unwrap();
                (!gone.error.is_empty()).then_some(())
            },
        )
        .await;
    }
    for r in &mut rs {
        r.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_keeps_down_backends_down() {
    let (a, b) = (Backend::start().await, Backend::start().await);
    let mut r = start("hm-restart", &[], 1, &[&a, &b], false).await;
    let within = Duration::from_secs(10);
    a.set(503);
    eventually("a down", within, async || {
        let v = status(&r).await;
        (backend_of(&v, &a).state == pb::BackendState::Down as i32).then_some(())
    })
    .await;
    r.stop().await;
    let Running {
        dir,
        text,
        socket,
        m,
        ..
    } = r;
    // The old manager (its tables writer) must be gone before a new one opens the region.
    let start = Instant::now();
    while Arc::strong_count(&m) > 1 {
        assert!(
            start.elapsed() < within,
            "the old manager is still referenced"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(m);
    let r = Running::start_with(dir, text, socket).await;
    // From the first look on, and for several intervals: still down.
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(1500) {
        let v = status(&r).await;
        let s = backend_of(&v, &a);
        assert_eq!(s.state, pb::BackendState::Down as i32, "{s:?}");
        assert_eq!(s.ring_slots, 0);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    a.set(200);
    eventually("a up after rise", within, async || {
        let v = status(&r).await;
        (backend_of(&v, &a).state == pb::BackendState::Up as i32).then_some(())
    })
    .await;
    let mut r = r;
    r.stop().await;
}
