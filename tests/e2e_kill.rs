//! `borderctl backend disable --kill` end to end: border-mgmt publishes,
//! border-dp follows, real kernels on both sides, no health check (so
//! `on_down` is the default `keep`: the kill does not depend on it).
//!
//! Two echo backends b0 and b1 and long-lived connections to both, each
//! writing 32 bytes every 100 ms and checking the echo. `backend disable v
//! b1 --kill`: every connection on b1 sees ECONNRESET within about a
//! second, those on b0 go on byte for byte; new connections reach only b0;
//! `flows_killed` (state region, `borderctl counters`, Prometheus) equals
//! the number of b1's connections. The kill outlives a restart of
//! border-mgmt; `backend enable` brings b1 back. Bad input (an unknown
//! backend or VIP) is one line, exit 1, and publishes nothing.
//!
//! Tag `kl`: namespaces `kl-lb|cli|bk`, instance `e2ekl`; client side
//! 10.162.0.0/24, backend side 10.163.0.0/24.

mod common;

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::metrics::{free_port, scrape_metrics};
use common::*;
use conf::counters::Counter;

const TAG: &str = "kl";
const INSTANCE: &str = "e2ekl";
const STREAMS: usize = 12;
const PACE: Duration = Duration::from_millis(100);

fn vip() -> SocketAddr {
    "10.162.0.100:80".parse().unwrap()
}

fn backend(i: u8) -> SocketAddr {
    SocketAddr::new(format!("10.163.0.{}", 11 + i).parse().unwrap(), 8080)
}

/// The sum of a Prometheus family's samples.
fn metric_sum(body: &str, family: &str) -> u64 {
    body.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[test]
fn kill_resets_the_backend_s_connections_and_enable_brings_it_back() {
    clean_instance(INSTANCE);
    let lb = Netns::new(&format!("{TAG}-lb"));
    let cli = Netns::new(&format!("{TAG}-cli"));
    let bk = Netns::new(&format!("{TAG}-bk"));
    let dir = TempDir::new(TAG);
    let metrics_port = free_port();
    let mut config = two_port_config(
        INSTANCE,
        TAG,
        "10.162.0.1/24",
        "10.163.0.1/24",
        &format!("unix://{}", dir.path("api.sock").display()),
    );
    config += &format!(
        "metrics_listen = \"127.0.0.1:{metrics_port}\"\n\n[[vip]]\nname = \"v\"\naddress = \"{}\"\nport = 80\nmaglev_table_size = 1021\n",
        vip().ip()
    );
    for i in 0..2 {
        config += &format!(
            "\n[[vip.backend]]\naddress = \"{}\"\nport = 8080\n",
            backend(i).ip()
        );
    }
    let cfg = dir.path("border.toml");
    std::fs::write(&cfg, &config).unwrap();
    let cfg_arg = cfg.to_str().unwrap().to_string();
    let ctl = |args: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        a.extend(["--config".into(), cfg_arg.clone()]);
        a
    };
    let run = |args: &[&str]| {
        let a = ctl(args);
        borderctl(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let mut mgmt = BorderMgmt::start(&cfg, dir.path("mgmt.log"));
    let dp = BorderDp::start_following(&lb, &dir, INSTANCE, &config);
    wait_iface(&lb, &format!("{TAG}-ext"));
    wait_iface(&lb, &format!("{TAG}-int"));
    cli.adopt(&lb, &format!("{TAG}-ext"), &["10.162.0.2/24"]);
    let bk_addrs: Vec<String> = (0..2).map(|i| format!("{}/24", backend(i).ip())).collect();
    let refs: Vec<&str> = bk_addrs.iter().map(String::as_str).collect();
    bk.adopt(&lb, &format!("{TAG}-int"), &refs);
    cli.run(&["ip", "route", "add", "default", "via", "10.162.0.1"]);
    dp.wait_applied(1);
    let _servers = TcpBackends::start(&bk.name, &[("b0", backend(0)), ("b1", backend(1))]);

    let streams = EchoStreams::start(&cli.name, vip(), STREAMS, 32, PACE, 1);
    streams.wait_all_moving(&[0; STREAMS]);
    let drops_before = dp.drops();
    assert_eq!(dp.counter(Counter::FlowsKilled), 0);
    let published = || {
        let (code, out, err) = run(&["status", "--json"]);
        assert!(code <= 1, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["publisher"]["published_generation"].as_u64().unwrap()
    };

    // Bad input: one line, exit 1, nothing published.
    let g = published();
    let b9 = "10.163.0.99:8080";
    for (args, want) in [
        (
            ["backend", "disable", "v", b9, "--kill"],
            format!("VIP `v` has no backend {b9}"),
        ),
        (
            [
                "backend",
                "disable",
                "nope",
                &backend(1).to_string(),
                "--kill",
            ],
            "no VIP `nope` in the running config".to_string(),
        ),
    ] {
        let (code, out, err) = run(&args);
        assert_eq!(code, 1, "{args:?}: {out}{err}");
        assert!(out.is_empty(), "{out}");
        assert_eq!(err, format!("borderctl: error: {want}\n"));
        let mut json = args.to_vec();
        json.push("--json");
        let (code, out, err) = run(&json);
        assert_eq!((code, out.as_str()), (1, ""), "{err}");
        let v: serde_json::Value = serde_json::from_str(&err).unwrap();
        assert_eq!(
            (v["code"].as_u64(), v["kind"].as_str()),
            (Some(1), Some("failed"))
        );
        assert_eq!(v["error"], want.as_str());
    }
    assert_eq!(published(), g, "a refused kill published nothing");
    assert_eq!(dp.counter(Counter::FlowsKilled), 0);

    // The kill.
    let b1 = backend(1).to_string();
    let t0 = Instant::now();
    let out = borderctl_ok(
        &ctl(&["backend", "disable", "v", &b1, "--kill", "--json"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    let answered = t0.elapsed();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["backend"]["state"], "KILLED", "{v}");
    assert_eq!(v["backend"]["killed"], true, "{v}");
    assert_eq!(v["backend"]["ring_slots"], 0, "{v}");
    assert_eq!(v["changed"], true, "{v}");
    let g = v["generation"].as_u64().unwrap();
    dp.wait_applied(g);

    // b1's connections are reset, b0's keep moving.
    wait_until("b1's streams reset", Duration::from_secs(5), || {
        let f = streams.failed();
        f.iter().any(|&x| x)
    });
    std::thread::sleep(Duration::from_millis(1500));
    let failed = streams.failed();
    let moving_from = streams.progress();
    wait_until("b0's streams moving", Duration::from_secs(10), || {
        streams
            .progress()
            .iter()
            .zip(&moving_from)
            .zip(&failed)
            .all(|((now, then), &f)| f || *now >= *then + 5 * 32)
    });
    let reports = streams.finish();
    let on = |name: &str| reports.iter().filter(|r| r.backend == name).count() as u64;
    let (n0, n1) = (on("b0"), on("b1"));
    assert_eq!(n0 + n1, STREAMS as u64, "{reports:?}");
    assert!(n0 > 0 && n1 > 0, "streams on both backends: {reports:?}");
    let mut slowest = Duration::ZERO;
    for r in &reports {
        if r.backend == "b1" {
            assert_eq!(r.error_kind, Some(ErrorKind::ConnectionReset), "{r:?}");
            let after = r.failed_at.unwrap().duration_since(t0);
            slowest = slowest.max(after);
        } else {
            assert!(r.error.is_none(), "b0's stream ended: {r:?}");
            assert!(r.bytes >= 10 * 32, "{r:?}");
        }
    }
    eprintln!("kill answered in {answered:?}; the last of {n1} resets {slowest:?} after the call");
    assert!(
        slowest <= Duration::from_millis(1500),
        "the last reset came {slowest:?} after the kill"
    );

    // Counted once per connection: the state region, `counters`, Prometheus.
    wait_until("flows_killed counted", Duration::from_secs(2), || {
        dp.counter(Counter::FlowsKilled) >= n1
    });
    assert_eq!(dp.counter(Counter::FlowsKilled), n1);
    let out = borderctl_ok(
        &ctl(&["counters", "--json"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["counters"]["flows_killed"]["total"], n1, "{out}");
    wait_until("the kill in /metrics", Duration::from_secs(5), || {
        metric_sum(&scrape_metrics(metrics_port), "border_flows_killed_total") == n1
    });
    let body = scrape_metrics(metrics_port);
    assert!(
        body.contains(&format!(
            "border_backend_state{{vip=\"v\",backend=\"{b1}\",state=\"killed\"}} 1"
        )),
        "{body}"
    );
    let rose = drops_rose(&drops_before, &dp.drops());
    assert!(rose.is_empty(), "drop counters rose: {rose:?}");

    // New connections go to b0 only.
    let names = tcp_names(&cli.name, vip(), 30);
    assert!(names.iter().all(|l| l.starts_with("b0 ")), "{names:?}");

    // Durable: a restarted border-mgmt still has b1 killed.
    mgmt.kill9();
    let mut mgmt = BorderMgmt::start(&cfg, dir.path("mgmt2.log"));
    let status = |mgmt: &BorderMgmt| {
        let (code, out, err) = run(&["status", "--json"]);
        assert!(code <= 1, "{err}\n{}", mgmt.log_text());
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let b = v["vips"][0]["backends"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["address"] == b1.as_str())
            .cloned()
            .unwrap();
        b["state"].as_str().unwrap().to_string()
    };
    assert_eq!(status(&mgmt), "KILLED");
    let names = tcp_names(&cli.name, vip(), 20);
    assert!(names.iter().all(|l| l.starts_with("b0 ")), "{names:?}");

    // Enabled: b1 takes new connections again; nothing more is killed.
    let out = borderctl_ok(
        &ctl(&["backend", "enable", "v", &b1])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    assert!(out.starts_with(&format!("v {b1}: UP, weight 1, ")), "{out}");
    let g: u64 = out
        .split("generation ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no generation in {out:?}"));
    dp.wait_applied(g);
    assert_eq!(status(&mgmt), "UP");
    let names = tally(
        &tcp_names(&cli.name, vip(), 40)
            .iter()
            .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
            .collect::<Vec<_>>(),
    );
    assert_eq!(names.keys().collect::<Vec<_>>(), ["b0", "b1"], "{names:?}");
    assert_eq!(dp.counter(Counter::FlowsKilled), n1);
    mgmt.stop();
    clean_instance(INSTANCE);
}
