//! The Grafana dashboard (deploy/grafana/border.json) queries only metrics
//! that border-mgmt exports: every metric name in every PromQL expression
//! of the dashboard (panels and template variables) is declared in a live
//! border-mgmt's /metrics, beside a running border-dp with a VIP and
//! backends, and has samples there (border_findings only while a problem
//! is present). It covers what a dashboard needs (docs/operations.md): per-VIP connections,
//! drops by reason, backend states, worker lag. Namespaces `op-*`, subnet
//! 10.95.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::metrics::{free_port, scrape_metrics};
use common::promql::{dashboard_queries, metric_names};
use common::*;
use serde_json::Value;

const INSTANCE: &str = "e2eopdash";

#[test]
fn metric_name_parser() {
    let got = metric_names(
        r#"8 * sum by (vip) (rate(border_vip_bytes_total{instance=~"$instance",x="a b"}[$__rate_interval])) - ignoring(worker, lcore) group_right border_b{y="1"} > 0"#,
    );
    let want: BTreeSet<String> = ["border_vip_bytes_total", "border_b"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(got, want);
}

#[test]
fn every_dashboard_metric_is_in_border_mgmt_metrics() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/grafana/border.json");
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).expect("dashboard is JSON");
    let queries = dashboard_queries(&dashboard);
    let wanted: BTreeSet<String> = queries.iter().flat_map(|q| metric_names(q)).collect();
    for must in [
        "border_vip_active_connections",
        "border_drops_total",
        "border_backend_state",
        "border_worker_applied_generation",
        "border_tables_published_generation",
        "border_port_imissed_total",
        "border_port_rx_nombuf_total",
    ] {
        assert!(wanted.contains(must), "the dashboard shows {must}");
    }

    clean_instance(INSTANCE);
    let lb = Netns::new("op-lb");
    let cli = Netns::new("op-cli");
    let bk = Netns::new("op-bk");
    let dir = TempDir::new("opdash");
    let metrics_port = free_port();
    let mut config = two_port_config(
        INSTANCE,
        "op",
        "10.95.1.1/24",
        "10.95.2.1/24",
        &format!("unix://{}", dir.path("api.sock").display()),
    );
    config += &format!(
        r#"metrics_listen = "127.0.0.1:{metrics_port}"

[[vip]]
name = "web"
address = "10.95.1.100"
port = 80
protocol = "tcp"
mode = "fullnat"
maglev_table_size = 251
[[vip.backend]]
address = "10.95.2.11"
port = 8080
[[vip.backend]]
address = "10.95.2.12"
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
    let state_dir = dir.path("state");
    let mut mgmt = BorderMgmt::start_with(
        None,
        &cfg,
        dir.path("mgmt.log"),
        &["--state-dir", state_dir.to_str().unwrap()],
    );
    let mut dp = BorderDp::start_following(&lb, &dir, INSTANCE, &config);
    cli.adopt(&lb, "op-ext", &["10.95.1.2/24"]);
    bk.adopt(&lb, "op-int", &["10.95.2.11/24", "10.95.2.12/24"]);
    dp.wait_applied(1);
    wait_until(
        "border-mgmt sees border-dp",
        Duration::from_secs(10),
        || scrape_metrics(metrics_port).contains("border_dataplane_up 1"),
    );

    let body = scrape_metrics(metrics_port);
    let declared: BTreeSet<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let sampled: BTreeSet<&str> = body
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    for m in &wanted {
        assert!(
            declared.contains(m.as_str()),
            "the dashboard queries {m}, which border-mgmt's /metrics does not export"
        );
        // Findings are series only while a problem is present.
        if m != "border_findings" {
            assert!(sampled.contains(m.as_str()), "{m} has no samples:\n{body}");
        }
    }
    // Backends without health checks are up.
    let up = body
        .lines()
        .filter(|l| l.starts_with("border_backend_state{") && l.contains(r#"vip="web""#))
        .filter(|l| l.contains(r#"state="up""#) && l.ends_with(" 1"))
        .count();
    assert_eq!(up, 2, "{body}");

    // The panels' layout is sound: unique ids, inside Grafana's 24 columns.
    let mut ids = BTreeSet::new();
    for p in dashboard["panels"].as_array().unwrap() {
        assert!(
            ids.insert(p["id"].as_u64().unwrap()),
            "duplicate id {}",
            p["id"]
        );
        let g = &p["gridPos"];
        assert!(
            g["x"].as_u64().unwrap() + g["w"].as_u64().unwrap() <= 24,
            "{}",
            p["title"]
        );
        if p["type"] != "row" {
            assert_eq!(p["datasource"]["uid"], "${datasource}", "{}", p["title"]);
        }
    }
    eprintln!(
        "dashboard: {} queries, {} metrics, all exported",
        queries.len(),
        wanted.len()
    );

    assert!(dp.stop().success(), "{}", dp.log_text());
    assert!(mgmt.stop().success(), "{}", mgmt.log_text());
    clean_instance(INSTANCE);
}
