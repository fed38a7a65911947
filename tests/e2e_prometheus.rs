//! A real Prometheus (Debian's `prometheus`) scrapes a live border-mgmt
//! beside a running border-dp carrying traffic, with gobgpd and connection
//! records: every query of the Grafana dashboard (deploy/grafana/border.json)
//! returns data, and every rule of deploy/prometheus/border-rules.yml loads,
//! evaluates without error and reads only metrics that have data; the two
//! alerts whose condition the test creates (a kernel twin down, a BGP
//! neighbour that never answers) become active. Each drop is exported once
//! (no `border_drop_*` family), and border-dp's and border-mgmt's process
//! families describe those processes. Namespaces `cm-*`, subnet 10.150.

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::promql::{dashboard_queries, metric_names};
use common::*;
use serde_json::Value;

const INSTANCE: &str = "e2ecm";
const METRICS: &str = "127.0.0.1:9108";
const PROMETHEUS: &str = "127.0.0.1:9090";
const VIP: &str = "10.150.1.100";
/// A BGP neighbour nobody answers for: its session never comes up.
const SILENT_ROUTER: &str = "10.150.1.254";

const GOBGPD: &str = r#"[global.config]
  as = 65000
  router-id = "10.150.1.1"
  port = -1

[[neighbors]]
  [neighbors.config]
    neighbor-address = "10.150.1.254"
    peer-as = 65100
"#;

fn prometheus_config(rules: &str) -> String {
    format!(
        r#"global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - {rules}
scrape_configs:
  - job_name: border
    static_configs:
      - targets: ["{METRICS}"]
"#
    )
}

/// Prometheus's HTTP API in the appliance's namespace: `path` with its
/// form parameters, the answer's `data` (the call must succeed).
fn api(lb: &Netns, path: &str, params: &[(&str, &str)]) -> Value {
    let mut owned: Vec<String> = ["curl", "-sS", "--max-time", "5", "--get"]
        .map(String::from)
        .to_vec();
    for (k, v) in params {
        owned.push("--data-urlencode".into());
        owned.push(format!("{k}={v}"));
    }
    owned.push(format!("http://{PROMETHEUS}{path}"));
    let args: Vec<&str> = owned.iter().map(String::as_str).collect();
    let out = lb.try_run(&args);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let v: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path} {params:?}: {e}: {text}"));
    assert_eq!(v["status"], "success", "{path} {params:?}: {v}");
    v["data"].clone()
}

/// The instant vector of `query` at `time` (Unix seconds).
fn query(lb: &Netns, query: &str, time: f64) -> Vec<Value> {
    let t = format!("{time:.3}");
    let d = api(lb, "/api/v1/query", &[("query", query), ("time", &t)]);
    assert_eq!(d["resultType"], "vector", "{query}: {d}");
    d["result"].as_array().unwrap().clone()
}

fn value(sample: &Value) -> f64 {
    sample["value"][1].as_str().unwrap().parse().unwrap()
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// A dashboard expression as Grafana sends it for appliance `.+` over a
/// 10 s rate window (ten scrapes).
fn as_grafana_sends(expr: &str) -> String {
    expr.replace("$instance", ".+")
        .replace("$__rate_interval", "10s")
}

#[test]
fn prometheus_evaluates_every_dashboard_query_and_alert_rule() {
    let started = Instant::now();
    clean_instance(INSTANCE);
    let lb = Netns::new("cm-lb");
    let cli = Netns::new("cm-cli");
    let bk = Netns::new("cm-bk");
    let dir = TempDir::new("cm");
    let mut config = two_port_config(
        INSTANCE,
        "cm",
        "10.150.1.1/24",
        "10.150.2.1/24",
        &format!("unix://{}", dir.path("api.sock").display()),
    );
    config += &format!(
        r#"metrics_listen = "{METRICS}"

[mgmt.bgp]
api = "127.0.0.1:50051"

[[vip]]
name = "web"
address = "{VIP}"
port = 80
protocol = "tcp"
mode = "fullnat"
maglev_table_size = 251
[[vip.backend]]
address = "10.150.2.11"
port = 8080
[[vip.backend]]
address = "10.150.2.12"
port = 8080

[records]
ring_slots = 1024
[records.json]
path = "{}"
"#,
        dir.path("records.jsonl").display()
    );
    let cfg = dir.path("border.toml");
    std::fs::write(&cfg, &config).unwrap();
    std::fs::write(dir.path("gobgpd.toml"), GOBGPD).unwrap();
    let _gobgpd = lb.spawn(&[
        "gobgpd",
        "-f",
        dir.path("gobgpd.toml").to_str().unwrap(),
        "--api-hosts",
        "127.0.0.1:50051",
        "--pprof-disable",
    ]);
    let mut mgmt = BorderMgmt::start_with(Some(&lb.name), &cfg, dir.path("mgmt.log"), &[]);
    let mut dp = BorderDp::start_following(&lb, &dir, INSTANCE, &config);
    wait_iface(&lb, "cm-ext");
    wait_iface(&lb, "cm-int");
    cli.adopt(&lb, "cm-ext", &["10.150.1.2/24"]);
    bk.adopt(&lb, "cm-int", &["10.150.2.11/24", "10.150.2.12/24"]);
    let _backends = TcpBackends::start(
        &bk.name,
        &[
            ("b1", "10.150.2.11:8080".parse().unwrap()),
            ("b2", "10.150.2.12:8080".parse().unwrap()),
        ],
    );
    dp.wait_applied(1);

    let rules =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/prometheus/border-rules.yml");
    std::fs::write(
        dir.path("prometheus.yml"),
        prometheus_config(rules.to_str().unwrap()),
    )
    .unwrap();
    let _prometheus = lb.spawn(&[
        "sh",
        "-c",
        &format!(
            "exec prometheus --config.file={} --storage.tsdb.path={} --web.listen-address={PROMETHEUS} 2>{}",
            dir.path("prometheus.yml").display(),
            dir.path("tsdb").display(),
            dir.path("prometheus.log").display(),
        ),
    ]);
    let prometheus_log = || std::fs::read_to_string(dir.path("prometheus.log")).unwrap_or_default();
    wait_until(
        "Prometheus scrapes border-mgmt",
        Duration::from_secs(20),
        || {
            let out = lb.try_run(&[
                "curl",
                "-sS",
                "--max-time",
                "2",
                &format!("http://{PROMETHEUS}/api/v1/query?query=up"),
            ]);
            // `up` of the target: `"value":[<time>,"1"]`.
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            text.contains(r#""1"]"#)
        },
    );

    // Traffic: connections through the VIP (both backends), and SYNs to a
    // port of the VIP that no [[vip]] serves (drop reason vip_unhandled).
    let vip: SocketAddr = format!("{VIP}:80").parse().unwrap();
    let names = tcp_names(&cli.name, vip, 20);
    assert_eq!(tally(&names).len(), 2, "{names:?}");
    let conns = NewConnections::start(&cli.name, vip, 4096, 1);
    for _ in 0..3 {
        cli.try_run(&[
            "curl",
            "-s",
            "--max-time",
            "1",
            &format!("http://{VIP}:81/"),
        ]);
    }
    // A finding: the kernel twin of port ext down.
    lb.run(&["ip", "link", "set", "dev", "kcm-ext", "down"]);
    std::thread::sleep(Duration::from_secs(4));
    let report = conns.finish();
    assert!(report.ok > 0 && report.errors.is_empty(), "{report:?}");
    // Two more scrapes after the traffic; rates over 10 s still see it.
    std::thread::sleep(Duration::from_secs(2));
    let at = now();

    // Every dashboard query returns data.
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/grafana/border.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let queries = dashboard_queries(&dashboard);
    assert!(queries.len() >= 30, "{}", queries.len());
    for q in &queries {
        let sent = as_grafana_sends(q);
        let got = query(&lb, &sent, at);
        assert!(
            !got.is_empty(),
            "dashboard query returned no data: {sent}\n{}",
            prometheus_log()
        );
    }
    // The template variable's own query.
    let instances = api(
        &lb,
        "/api/v1/label/instance/values",
        &[("match[]", "border_dataplane_up")],
    );
    assert_eq!(instances, serde_json::json!([METRICS]));

    // Every rule loaded and evaluated without error; the metrics each reads
    // have data.
    let groups = api(&lb, "/api/v1/rules", &[]);
    let file_rules = std::fs::read_to_string(&rules).unwrap();
    let want_alerts = file_rules.matches("- alert: ").count();
    let mut seen = 0;
    let mut read = BTreeSet::new();
    for g in groups["groups"].as_array().unwrap() {
        for r in g["rules"].as_array().unwrap() {
            seen += 1;
            assert_eq!(r["health"], "ok", "{r}");
            assert!(r["lastError"].as_str().unwrap_or("").is_empty(), "{r}");
            read.extend(metric_names(r["query"].as_str().unwrap()));
        }
    }
    assert_eq!(seen, want_alerts, "{groups}");
    for m in &read {
        assert!(
            !query(&lb, &format!("{m}{{instance=~\".+\"}}"), at).is_empty(),
            "an alert reads {m}, which has no data"
        );
    }
    // The conditions this test made are alerts (pending: their `for`).
    wait_until(
        "the alerts of the conditions made",
        Duration::from_secs(10),
        || {
            let alerts = api(&lb, "/api/v1/alerts", &[]);
            let active: BTreeSet<(String, String)> = alerts["alerts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| {
                    let l = &a["labels"];
                    let subject = l["kind"]
                        .as_str()
                        .or(l["neighbour"].as_str())
                        .unwrap_or("")
                        .to_string();
                    (l["alertname"].as_str().unwrap().to_string(), subject)
                })
                .collect();
            active.contains(&("BorderFinding".into(), "host_twin_down".into()))
                && active.contains(&("BorderBgpNeighbourDown".into(), SILENT_ROUTER.into()))
        },
    );

    // Each drop once: no border_drop_* family; the refused SYNs counted
    // under their reason.
    assert!(query(&lb, r#"{__name__=~"border_drop_.+"}"#, at).is_empty());
    let unhandled = query(
        &lb,
        r#"sum(border_drops_total{reason="vip_unhandled"})"#,
        at,
    );
    assert!(value(&unhandled[0]) >= 3.0, "{unhandled:?}");
    assert!(query(&lb, r#"border_drops_total{reason="malformed"}"#, at).is_empty());
    // States are values: one neighbour series, state 3 (active) or 1 (idle).
    let state = query(&lb, "border_bgp_neighbour_state", at);
    assert_eq!(state.len(), 1, "{state:?}");
    assert!([1.0, 2.0, 3.0].contains(&value(&state[0])), "{state:?}");
    // The build and the processes.
    let build = query(&lb, "border_build_info", at);
    assert_eq!(build.len(), 1, "{build:?}");
    let b = &build[0]["metric"];
    assert_eq!(b["daemon"], "border-mgmt");
    assert_eq!(b["version"], env!("CARGO_PKG_VERSION"));
    assert!(b["commit"].as_str().unwrap().len() >= 7, "{b}");
    assert!(b["dpdk"].as_str().unwrap().starts_with("22.11"), "{b}");
    let dp_threads = std::fs::read_to_string(format!("/proc/{}/status", dp.pid()))
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("Threads:")
                .map(|t| t.trim().parse::<f64>().unwrap())
        })
        .unwrap();
    let exported = value(&query(&lb, "border_dp_process_threads", at)[0]);
    assert_eq!(exported, dp_threads, "border-dp's threads");
    let dp_start = value(&query(&lb, "border_dp_process_start_time_seconds", at)[0]);
    let mgmt_start = value(&query(&lb, "process_start_time_seconds", at)[0]);
    assert!(
        (now() - 120.0..=now()).contains(&dp_start)
            && (now() - 120.0..=now()).contains(&mgmt_start),
        "{dp_start} {mgmt_start}"
    );
    for f in [
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "border_dp_process_cpu_seconds_total",
        "border_dp_process_resident_memory_bytes",
        "border_dp_process_open_fds",
    ] {
        assert!(value(&query(&lb, f, at)[0]) > 0.0, "{f}");
    }

    eprintln!(
        "prometheus: {} dashboard queries, {want_alerts} rules ({} metrics) evaluated in {:?}",
        queries.len(),
        read.len(),
        started.elapsed()
    );
    assert!(dp.stop().success(), "{}", dp.log_text());
    assert!(mgmt.stop().success(), "{}", mgmt.log_text());
    clean_instance(INSTANCE);
}
