//! Each port's NIC statistics (`rte_eth_stats`) as an operator reads them
//! without DPDK telemetry: border-dp copies them into the state region about
//! once a second, `borderctl counters` shows them (table and --json) and
//! border-mgmt exports them on /metrics. Pings through a net_tap port move
//! the port's ipackets/opackets by at least the number sent, in both.
//! Also: border-mgmt says "health checks configured" only when the probes
//! change, not at every apply or operator change that leaves them as they
//! are. Namespaces `ps-*`, subnet 10.102.

mod common;

use std::time::Duration;

use common::metrics::{free_port, scrape_metrics};
use common::*;
use serde_json::Value;

const INSTANCE: &str = "e2epsport";
const PINGS: u64 = 5;

/// The value of the sample `name{labels}` in a scrape.
fn sample(body: &str, name: &str, labels: &str) -> Option<u64> {
    let prefix = format!("{name}{{{labels}}} ");
    body.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}

fn metric(body: &str, stat: &str, port: &str, role: &str) -> u64 {
    let name = format!("border_port_{stat}_total");
    sample(body, &name, &format!(r#"port="{port}",role="{role}""#))
        .unwrap_or_else(|| panic!("no {name} of port {port} in\n{body}"))
}

fn counters_json() -> Value {
    let out = borderctl_ok(&["counters", "--instance", INSTANCE, "--json"]);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn port_stat(v: &Value, port: &str, stat: &str) -> u64 {
    v["ports"][port][stat]
        .as_u64()
        .unwrap_or_else(|| panic!("no ports.{port}.{stat} in {v}"))
}

fn vip(backends: &[&str]) -> String {
    let mut s = String::from(
        r#"
[[vip]]
name = "web"
address = "10.102.1.100"
port = 80
protocol = "tcp"
mode = "fullnat"
maglev_table_size = 251
[vip.health]
kind = "tcp"
interval_ms = 1000
timeout_ms = 200
"#,
    );
    for b in backends {
        s += &format!("[[vip.backend]]\naddress = \"{b}\"\nport = 8080\n");
    }
    s
}

fn configured_lines(mgmt: &BorderMgmt) -> usize {
    mgmt.log_text()
        .lines()
        .filter(|l| l.contains("health checks configured"))
        .count()
}

#[test]
fn pings_move_port_stats_in_counters_and_metrics() {
    clean_instance(INSTANCE);
    let lb = Netns::new("ps-lb");
    let cli = Netns::new("ps-cli");
    let bk = Netns::new("ps-bk");
    let dir = TempDir::new("psport");
    let metrics_port = free_port();
    let base = two_port_config(
        INSTANCE,
        "ps",
        "10.102.1.1/24",
        "10.102.2.1/24",
        &format!("unix://{}", dir.path("api.sock").display()),
    ) + &format!("metrics_listen = \"127.0.0.1:{metrics_port}\"\n");
    let config = base.clone() + &vip(&["10.102.2.11"]);
    let cfg = dir.path("border.toml");
    std::fs::write(&cfg, &config).unwrap();
    let cfg_arg = cfg.to_str().unwrap();
    let state_dir = dir.path("state");
    let mgmt = BorderMgmt::start_with(
        None,
        &cfg,
        dir.path("mgmt.log"),
        &["--state-dir", state_dir.to_str().unwrap()],
    );
    let mut dp = BorderDp::start_following(&lb, &dir, INSTANCE, &config);
    cli.adopt(&lb, "ps-ext", &["10.102.1.2/24"]);
    bk.adopt(&lb, "ps-int", &["10.102.2.11/24"]);
    dp.wait_applied(1);

    // Every port and twin has a slot, copied at least once.
    let v = counters_json();
    for (port, role) in [
        ("ext", "data"),
        ("int", "data"),
        ("kps-ext", "twin"),
        ("kps-int", "twin"),
    ] {
        assert_eq!(v["ports"][port]["role"], role, "{v}");
        assert!(port_stat(&v, port, "updated_unix_ms") > 0, "{v}");
    }
    let table = borderctl_ok(&["counters", "--instance", INSTANCE]);
    assert!(
        table.lines().any(|l| l.starts_with("PORT ")
            && l.contains("IPACKETS")
            && l.contains("IMISSED")
            && l.contains("RX_NOMBUF")
            && l.ends_with("CAPTURE_NOMBUF")),
        "{table}"
    );
    wait_until(
        "border-mgmt exports port statistics",
        Duration::from_secs(10),
        || {
            let body = scrape_metrics(metrics_port);
            body.contains("border_dataplane_up 1")
                && body.contains(r#"border_port_ipackets_total{port="ext",role="data"}"#)
        },
    );
    let before_json = counters_json();
    let before_metrics = scrape_metrics(metrics_port);
    let rx_before = port_stat(&before_json, "ext", "ipackets");
    let tx_before = port_stat(&before_json, "ext", "opackets");
    let rx_metric_before = metric(&before_metrics, "ipackets", "ext", "data");
    let tx_metric_before = metric(&before_metrics, "opackets", "ext", "data");

    let out = cli.try_run(&["ping", "-c", "5", "-i", "0.2", "-W", "2", "10.102.1.1"]);
    assert!(out.status.success(), "ping: {}", dp.log_text());

    // Copied about once a second: within a few seconds both show them.
    let mut after = Value::Null;
    wait_until(
        "borderctl counters shows the pings",
        Duration::from_secs(5),
        || {
            after = counters_json();
            port_stat(&after, "ext", "ipackets") >= rx_before + PINGS
                && port_stat(&after, "ext", "opackets") >= tx_before + PINGS
        },
    );
    assert!(
        port_stat(&after, "ext", "ibytes") >= port_stat(&before_json, "ext", "ibytes") + PINGS * 98
    );
    assert_eq!(port_stat(&after, "ext", "rx_nombuf"), 0, "{after}");
    let mut body = String::new();
    wait_until("/metrics shows the pings", Duration::from_secs(5), || {
        body = scrape_metrics(metrics_port);
        metric(&body, "ipackets", "ext", "data") >= rx_metric_before + PINGS
            && metric(&body, "opackets", "ext", "data") >= tx_metric_before + PINGS
    });
    for stat in [
        "imissed",
        "ierrors",
        "oerrors",
        "rx_nombuf",
        "ibytes",
        "obytes",
    ] {
        let name = format!("border_port_{stat}_total");
        assert!(
            body.lines().any(|l| l == format!("# TYPE {name} counter")),
            "{name} declared:\n{body}"
        );
        metric(&body, stat, "kps-ext", "twin");
    }
    eprintln!(
        "ext: ipackets {rx_before} -> {}, opackets {tx_before} -> {} after {PINGS} pings",
        port_stat(&after, "ext", "ipackets"),
        port_stat(&after, "ext", "opackets")
    );

    // "health checks configured": once at start; operator weights and an
    // apply that leaves the probes alone say nothing; a new backend (a new
    // probe) says it again.
    mgmt_says_configured_once(&mgmt, 1);
    for w in ["5", "7", "9", "11"] {
        borderctl_ok(&["weight", "web", "10.102.2.11:8080", w, "--config", cfg_arg]);
    }
    let same_probes =
        base.clone() + &vip(&["10.102.2.11"]).replace("port = 8080\n", "port = 8080\nweight = 3\n");
    let same_file = dir.path("same.toml");
    std::fs::write(&same_file, &same_probes).unwrap();
    borderctl_ok(&["apply", same_file.to_str().unwrap(), "--config", cfg_arg]);
    let more = base + &vip(&["10.102.2.11", "10.102.2.12"]);
    let more_file = dir.path("more.toml");
    std::fs::write(&more_file, &more).unwrap();
    borderctl_ok(&["apply", more_file.to_str().unwrap(), "--config", cfg_arg]);
    mgmt_says_configured_once(&mgmt, 2);

    let status = dp.stop();
    assert!(status.success(), "exit {status}:\n{}", dp.log_text());
    // The last run's statistics stay readable; the exit status says that
    // border-dp has stopped (1, docs/api.md's exit codes).
    let (code, out, err) = borderctl(&["counters", "--instance", INSTANCE, "--json"]);
    assert_eq!(code, 1, "stdout: {out}\nstderr: {err}");
    let last: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert!(
        port_stat(&last, "ext", "ipackets") >= rx_before + PINGS,
        "{last}"
    );
}

/// Waits until border-mgmt logged "health checks configured" `n` times,
/// then a little longer to be sure it does not log it again.
fn mgmt_says_configured_once(mgmt: &BorderMgmt, n: usize) {
    wait_until("health checks configured", Duration::from_secs(5), || {
        configured_lines(mgmt) >= n
    });
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(configured_lines(mgmt), n, "{}", mgmt.log_text());
}
