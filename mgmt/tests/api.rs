//! The gRPC API in-process: a tonic client over a unix socket in a temp dir.

mod common;

use std::time::Duration;

use common::{read_region, Running};
use conf::counters::Counter;
use conf::state::{vip_stat_key, FlowStat, PortRole, PortStat, RunState, StateRegion};
use conf::tables::{backend_ids, build_generation, no_overrides, BackendState};
use conf::Config;
use mgmt::pb::{self, set_backend_request::Action};
use tonic::Code;

fn apply(text: &str) -> pb::ApplyConfigRequest {
    pb::ApplyConfigRequest {
        config_toml: text.to_string(),
        dry_run: false,
    }
}

const EXTRA_BACKEND: &str = r#"
[[vip.backend]]
address = "10.0.1.3"
port = 8080
weight = 2
"#;

#[tokio::test]
async fn apply_valid_config_publishes_a_new_generation_equal_to_the_config() {
    let mut r = Running::start("apply", false).await;
    let mut c = r.client().await;
    let before = c
        .get_config(pb::GetConfigRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(before.generation, 1);
    assert_eq!(before.config_toml, r.text);

    let text = format!("{}{EXTRA_BACKEND}", r.text);
    let out = c.apply_config(apply(&text)).await.unwrap().into_inner();
    assert_eq!(out.generation, 2, "{out:?}");
    assert!(out.changed && out.pending.is_empty());

    // The region holds exactly what the config describes.
    let cfg = Config::from_toml_str(&text, "x").unwrap();
    assert_eq!(
        read_region(&r.paths.tables),
        build_generation(&cfg, &no_overrides).unwrap()
    );
    let now = c
        .get_config(pb::GetConfigRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (
            now.config_toml.as_str(),
            now.origin.as_str(),
            now.generation
        ),
        (text.as_str(), "<api>", 2)
    );

    // The same config again changes nothing.
    let again = c.apply_config(apply(&text)).await.unwrap().into_inner();
    assert_eq!((again.generation, again.changed), (2, false));

    // A dry run validates only.
    let dry = c
        .apply_config(pb::ApplyConfigRequest {
            config_toml: r.text.clone(),
            dry_run: true,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((dry.generation, dry.changed), (0, true));
    assert_eq!(r.m.published_generation(), 2);
    r.stop().await;
    assert!(!r.socket.exists(), "socket removed on stop");
}

#[tokio::test]
async fn invalid_config_is_refused_with_its_position_and_the_old_one_stays() {
    let mut r = Running::start("invalid", false).await;
    let mut c = r.client().await;
    let bad = r.text.replace(
        "port = 8080\n\n[[vip.backend]]",
        "port = 8080\nweigth = 3\n\n[[vip.backend]]",
    );
    assert_ne!(bad, r.text);
    let line = bad.lines().position(|l| l.starts_with("weigth")).unwrap() + 1;
    let e = c.apply_config(apply(&bad)).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert_eq!(
        e.message(),
        format!("<api>:{line}:1: vip[0].backend[0].weigth: unknown key (expected one of `address`, `port`, `weight`, `zone`, `max_connections`)")
    );
    let now = c
        .get_config(pb::GetConfigRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (now.config_toml.as_str(), now.generation),
        (r.text.as_str(), 1)
    );

    // PROXY v2 sent at connect time cannot carry the authority (the
    // client's first data comes later): refused with the validator's
    // position and words, dry run or not.
    let pp = r.text.replace(
        "port = 80\n",
        "port = 80\nproxy_protocol = \"v2\"\nproxy_protocol_send_on_connect = true\nproxy_protocol_tlvs = [\"unique_id\", \"authority\"]\n",
    );
    assert_ne!(pp, r.text);
    let line = pp
        .lines()
        .position(|l| l.starts_with("proxy_protocol_tlvs"))
        .unwrap()
        + 1;
    let want = format!("<api>:{line}:37: vip[0].proxy_protocol_tlvs[1]: authority cannot be sent with proxy_protocol_send_on_connect = true: the header then leaves right after the handshake, before the client's first data that the authority (TLS SNI) is read from (expected proxy_protocol_send_on_connect = false, or remove \"authority\")");
    for dry_run in [false, true] {
        let e = c
            .apply_config(pb::ApplyConfigRequest {
                config_toml: pp.clone(),
                dry_run,
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "dry_run {dry_run}");
        assert_eq!(e.message(), want, "dry_run {dry_run}");
    }
    // Without the authority the same VIP is fine (a dry run says so).
    let ok = pp.replace(", \"authority\"]", "]");
    let dry = c
        .apply_config(pb::ApplyConfigRequest {
            config_toml: ok,
            dry_run: true,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((dry.generation, dry.changed), (0, true));

    // Something only a restart changes.
    let restart = r
        .text
        .replace("worker_lcores = [1]", "worker_lcores = [1, 2]");
    let e = c.apply_config(apply(&restart)).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert!(
        e.message().starts_with("[dataplane] differs"),
        "{}",
        e.message()
    );
    assert_eq!(r.m.published_generation(), 1);
    r.stop().await;
}

#[tokio::test]
async fn drain_takes_the_backend_out_of_the_ring_and_undrain_puts_it_back() {
    let mut r = Running::start("drain", false).await;
    let mut c = r.client().await;
    let set = |action: Action| pb::SetBackendRequest {
        vip: "web".into(),
        backend: "10.0.1.2:8080".into(),
        action: Some(action),
        note: "kernel update".into(),
    };
    let out = c
        .set_backend(set(Action::Drain(pb::Drain {})))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((out.generation, out.changed), (2, true));
    let b = out.backend.unwrap();
    assert_eq!(b.state(), pb::BackendState::Draining);
    assert_eq!(b.reason, "drained by the operator: kernel update");
    assert_eq!(b.ring_slots, 0);

    let g = read_region(&r.paths.tables);
    let vip = &g.vips[0];
    assert_eq!(vip.backends[1].state, BackendState::Draining);
    assert!(
        vip.ring.iter().all(|&i| i == 0),
        "only backend 0 in the ring"
    );

    let st = c
        .get_status(pb::GetStatusRequest {})
        .await
        .unwrap()
        .into_inner();
    let bs = &st.vips[0].backends;
    assert_eq!(bs[1].state(), pb::BackendState::Draining);
    assert!(bs[1].drained);
    assert_eq!(bs[0].state(), pb::BackendState::Up);
    assert_eq!(bs[0].ring_slots, 1009);
    assert_eq!(st.publisher.unwrap().published_generation, 2);

    // Weight override, then undrain and reset.
    let out = c
        .set_backend(set(Action::Weight(3)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(out.backend.unwrap().weight, 3);
    let out = c
        .set_backend(set(Action::Undrain(pb::Undrain {})))
        .await
        .unwrap()
        .into_inner();
    let b = out.backend.unwrap();
    assert_eq!(
        (b.state(), b.weight, b.weight_overridden),
        (pb::BackendState::Up, 3, true)
    );
    assert!(b.ring_slots > 0);
    let out = c
        .set_backend(set(Action::ResetWeight(pb::ResetWeight {})))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(out.backend.unwrap().weight, 1);

    // Errors.
    let mut bad = set(Action::Drain(pb::Drain {}));
    bad.backend = "10.0.1.9:8080".into();
    assert_eq!(
        c.set_backend(bad.clone()).await.unwrap_err().code(),
        Code::NotFound
    );
    bad.backend = "nonsense".into();
    assert_eq!(
        c.set_backend(bad.clone()).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    bad.backend = "10.0.1.2:8080".into();
    bad.vip = "nope".into();
    assert_eq!(
        c.set_backend(bad.clone()).await.unwrap_err().code(),
        Code::NotFound
    );
    bad.vip = "web".into();
    bad.action = None;
    assert_eq!(
        c.set_backend(bad).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    r.stop().await;
}

#[tokio::test]
async fn a_huge_message_is_refused_and_the_server_keeps_serving() {
    let mut r = Running::start("huge", false).await;
    let mut c = r.client().await;
    let huge = format!("{}\n# {}\n", r.text, "x".repeat(5 << 20));
    let e = c.apply_config(apply(&huge)).await.unwrap_err();
    assert_eq!(e.code(), Code::OutOfRange, "{e:?}");
    let mut c = r.client().await;
    let now = c
        .get_config(pb::GetConfigRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(now.generation, 1);
    r.stop().await;
}

#[tokio::test]
async fn watch_events_sees_applies_publishes_and_rejections() {
    let mut r = Running::start("watch", false).await;
    let mut c = r.client().await;
    let mut events = c
        .watch_events(pb::WatchEventsRequest {})
        .await
        .unwrap()
        .into_inner();
    // Give the stream's subscription a moment (it is made before the
    // response is sent, but be safe).
    tokio::time::sleep(Duration::from_millis(50)).await;
    let text = format!("{}{EXTRA_BACKEND}", r.text);
    c.apply_config(apply(&text)).await.unwrap();
    c.apply_config(apply("instance = 3")).await.unwrap_err();

    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while seen.len() < 3 {
        let ev = tokio::time::timeout_at(deadline, events.message())
            .await
            .expect("events arrive")
            .unwrap()
            .expect("stream open");
        match ev.kind {
            Some(pb::event::Kind::Published(p)) => {
                assert_eq!((p.generation, p.cause.as_str()), (2, "config"));
                seen.push("published");
            }
            Some(pb::event::Kind::ConfigApplied(a)) => {
                assert_eq!((a.generation, a.origin.as_str()), (2, "<api>"));
                seen.push("applied");
            }
            Some(pb::event::Kind::ConfigRejected(j)) => {
                assert!(j.error.starts_with("<api>:1:12: instance:"), "{}", j.error);
                seen.push("rejected");
            }
            _ => {}
        }
    }
    assert_eq!(seen, ["published", "applied", "rejected"]);
    // Stopping the server ends the stream.
    r.stop().await;
    let end = tokio::time::timeout(Duration::from_secs(5), async {
        while let Ok(Some(_)) = events.message().await {}
    })
    .await;
    assert!(end.is_ok(), "the stream ends on shutdown");
}

#[tokio::test]
async fn status_and_stats_read_the_dataplane_and_metrics_export_them() {
    let mut r = Running::start("stats", true).await;
    // A dataplane state region with one worker and some counts.
    let state = StateRegion::create(&r.paths.state, &[1]).unwrap();
    state.set_run_state(RunState::Running);
    let w = state.worker(0).unwrap();
    let counters = w.counters();
    counters.add(Counter::RxPackets, 5);
    counters.add(Counter::DropNoBackend, 2);
    counters.beat();
    w.set_applied_generation(1);
    let vs = w.vip_stats();
    let slot = vs.slot_for(vip_stat_key("web")).unwrap();
    vs.add(slot, FlowStat::Packets, 3);
    let ids = backend_ids(
        "web",
        &[
            ("10.0.1.1".parse().unwrap(), 8080),
            ("10.0.1.2".parse().unwrap(), 8080),
        ],
    );
    let bst = w.backend_stats();
    let bslot = bst.slot_for(ids[1]).unwrap();
    bst.add(bslot, FlowStat::NewConnections, 4);
    state.name_ports(&[("ext", PortRole::Data), ("kx-ext", PortRole::Twin)]);
    let mut port_counts = [0u64; PortStat::COUNT];
    port_counts[PortStat::Ipackets as usize] = 11;
    port_counts[PortStat::RxNombuf as usize] = 6;
    state.set_port_stats(0, &port_counts, 1);

    let mut c = r.client().await;
    let st = c
        .get_status(pb::GetStatusRequest {})
        .await
        .unwrap()
        .into_inner();
    let dp = st.dataplane.unwrap();
    assert!(dp.present && dp.pid_alive, "{dp:?}");
    assert_eq!(dp.run_state, "running");
    assert_eq!(dp.workers.len(), 1);
    assert_eq!(
        (dp.workers[0].lcore, dp.workers[0].applied_generation),
        (1, 1)
    );
    assert!(dp.workers[0].alive);

    let stats = c
        .get_stats(pb::GetStatsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(stats.dataplane_present);
    let idx = |name: &str| stats.counters.iter().position(|c| c.name == name).unwrap();
    assert_eq!(stats.workers[0].values[idx("rx_packets")], 5);
    assert_eq!(stats.totals[idx("drop_no_backend")], 2);
    assert!(stats.counters[idx("drop_no_backend")].drop);
    assert_eq!(stats.vips[0].stats.unwrap().packets, 3);
    assert_eq!(stats.vips[0].backends[1].stats.unwrap().new_connections, 4);
    assert_eq!(stats.vips[0].backends[1].id, ids[1]);

    // Prometheus.
    counters.beat();
    let port = r.metrics_port.unwrap();
    let body = http_get(port, "/metrics").await;
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    assert!(
        body.contains("content-type: text/plain; version=0.0.4"),
        "{body}"
    );
    for line in [
        "# HELP border_rx_packets_total frames received from data ports",
        "# TYPE border_rx_packets_total counter",
        "border_rx_packets_total{worker=\"0\",lcore=\"1\"} 5",
        "border_drops_total{worker=\"0\",lcore=\"1\",reason=\"no_backend\"} 2",
        "border_tables_published_generation 1",
        "border_worker_applied_generation{worker=\"0\",lcore=\"1\"} 1",
        "border_worker_alive{worker=\"0\",lcore=\"1\"} 1",
        "border_dataplane_up 1",
        "border_vip_packets_total{vip=\"web\"} 3",
        "border_backend_new_connections_total{vip=\"web\",backend=\"10.0.1.2:8080\"} 4",
        "border_backend_state{vip=\"web\",backend=\"10.0.1.1:8080\",state=\"up\"} 1",
        "border_backend_state{vip=\"web\",backend=\"10.0.1.1:8080\",state=\"draining\"} 0",
        "border_backend_ring_slots{vip=\"web\",backend=\"10.0.1.1:8080\"} 505",
        "# TYPE border_port_rx_nombuf_total counter",
        "border_port_ipackets_total{port=\"ext\",role=\"data\"} 11",
        "border_port_rx_nombuf_total{port=\"ext\",role=\"data\"} 6",
        "border_port_imissed_total{port=\"ext\",role=\"data\"} 0",
        "border_port_opackets_total{port=\"kx-ext\",role=\"twin\"} 0",
    ] {
        assert!(
            body.lines().any(|l| l == line),
            "missing `{line}` in\n{body}"
        );
    }
    assert!(!body.contains("reason=\"malformed\""));
    // Each drop once, under border_drops_total; the parse errors' sum apart.
    assert!(!body.contains("border_drop_"), "{body}");
    assert!(body.contains("\nborder_malformed_drops_total{worker=\"0\",lcore=\"1\"} 0\n"));
    assert!(
        body.contains("\nborder_build_info{daemon=\"border-mgmt\",version=\""),
        "{body}"
    );
    assert!(
        body.lines()
            .any(|l| l.starts_with("process_resident_memory_bytes ")),
        "{body}"
    );
    let nf = http_get(port, "/nope").await;
    assert!(nf.starts_with("HTTP/1.1 404"), "{nf}");
    drop(state);
    r.stop().await;
}

async fn http_get(port: u16, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_string(&mut out))
        .await
        .unwrap()
        .unwrap();
    out
}

#[tokio::test]
async fn a_restart_reattaches_keeps_the_generation_and_the_drain() {
    let mut r = Running::start("restart", false).await;
    let mut c = r.client().await;
    c.set_backend(pb::SetBackendRequest {
        vip: "web".into(),
        backend: "10.0.1.1:8080".into(),
        action: Some(Action::Drain(pb::Drain {})),
        note: String::new(),
    })
    .await
    .unwrap();
    let before = read_region(&r.paths.tables);
    drop(c);
    r.stop().await;
    let opts = r.m.options().clone();
    let weak = std::sync::Arc::downgrade(&r.m);
    let common::Running {
        dir,
        m,
        cfg,
        text,
        paths,
        ..
    } = r;
    drop(m);
    // Tasks the server spawned drop their handles as the runtime gets to them.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while weak.strong_count() > 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(weak.strong_count(), 0, "the old manager is gone");
    let (m2, opened) = mgmt::Manager::new(cfg.clone(), text.clone(), "x".into(), opts).unwrap();
    assert_eq!(opened, mgmt::publisher::Opened::Attached { generation: 2 });
    let out = m2.publish_now("startup").unwrap();
    assert_eq!(
        (out.generation, out.changed),
        (2, false),
        "nothing republished"
    );
    assert_eq!(read_region(&paths.tables), before);
    let st = m2.status();
    assert_eq!(st.vips[0].backends[0].state, BackendState::Draining);

    // While it holds the region, another publisher is refused.
    let e = mgmt::Manager::new(cfg, text, "x".into(), m2.options().clone()).unwrap_err();
    assert!(e.to_string().contains("another publisher holds it"), "{e}");
    drop(dir);
}

#[tokio::test]
async fn reload_file_applies_the_file_and_refuses_a_broken_one() {
    let mut r = Running::start("reload", false).await;
    let file = r.path("border.toml");
    std::fs::write(&file, format!("{}{EXTRA_BACKEND}", r.text)).unwrap();
    let out = r.m.reload_file().unwrap();
    assert_eq!(out.generation, 2);
    std::fs::write(&file, "instance = \"apitest\"\n[dataplane\n").unwrap();
    let e = r.m.reload_file().unwrap_err().to_string();
    assert!(e.starts_with(&format!("{}:2:", file.display())), "{e}");
    assert_eq!(r.m.published_generation(), 2);
    assert_eq!(r.m.config().vips[0].backends.len(), 3);
    r.stop().await;
}
