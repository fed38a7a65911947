//! border-gw's Prometheus exporter: text exposition format (0.0.4) at
//! `metrics_listen`/metrics over HTTP/1.1, at most `metrics_connections`
//! connections open at once (docs/fleet.md lists the metrics). Rendered
//! from the gateway's own counters: its tunnels, its calls, its registry.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use mgmt::prom::Exposition as Out;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::forward::Gateway;
use crate::stats::{CallOutcome, LATENCY_BUCKETS};

pub use mgmt::prom::CONTENT_TYPE;

fn load(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

/// Every metric of the gateway; `refused_scrapes` are metrics connections
/// closed for the bound.
pub fn render(gw: &Gateway, refused_scrapes: u64) -> String {
    let mut o = Out::with_capacity(4 << 10);
    o.one("border_gw_up", "gauge", "1 while border-gw runs", 1);
    mgmt::process_metrics::render_build_info(&mut o, "border-gw");
    let me = mgmt::process_metrics::sample("self");
    mgmt::process_metrics::render_process(&mut o, "process", "border-gw", me.as_ref());
    o.family(
        "border_gw_info",
        "gauge",
        "the gateway's id and version (always 1)",
    );
    o.sample(
        "border_gw_info",
        &[
            ("id", gw.cfg.id.as_str()),
            ("version", env!("CARGO_PKG_VERSION")),
        ],
        1,
    );
    tunnels(&mut o, gw);
    calls(&mut o, gw);
    registry(&mut o, gw);
    limits(&mut o, gw);
    crate::proxied::render(&mut o, &gw.proxy);
    o.one(
        "border_gw_metrics_connections_refused_total",
        "counter",
        "connections to metrics_listen closed at once because metrics_connections were open",
        refused_scrapes,
    );
    o.into_string()
}

fn tunnels(o: &mut Out, gw: &Gateway) {
    let mut counts: Vec<(String, usize)> = gw.tunnels.counts().into_iter().collect();
    counts.sort();
    o.family(
        "border_gw_appliance_tunnels",
        "gauge",
        "tunnels this gateway holds, per appliance",
    );
    for (appliance, n) in &counts {
        o.sample(
            "border_gw_appliance_tunnels",
            &[("appliance", appliance)],
            n,
        );
    }
    let all: usize = counts.iter().map(|(_, n)| n).sum();
    o.one(
        "border_gw_tunnels",
        "gauge",
        "tunnels this gateway holds, all appliances",
        all as u64,
    );
    let c = &gw.tunnels.counters;
    o.one(
        "border_gw_tunnel_opens_total",
        "counter",
        "tunnels accepted (certificate pinned for the appliance id, HTTP/2 up)",
        load(&c.opened),
    );
    o.one(
        "border_gw_tunnel_closes_total",
        "counter",
        "accepted tunnels that closed (retired idle, drained, lost)",
        load(&c.closed),
    );
    o.one(
        "border_gw_tunnel_refusals_total",
        "counter",
        "tunnels refused before they opened (TLS, not a preface, certificate not pinned, too slow)",
        load(&c.refused),
    );
    o.one(
        "border_gw_tunnel_bad_ids_total",
        "counter",
        "tunnels refused because their preface's appliance id is not 1..=64 characters from A-Z a-z 0-9 - _ .",
        load(&c.bad_ids),
    );
}

fn calls(o: &mut Out, gw: &Gateway) {
    let s = &gw.stats;
    o.family(
        "border_gw_calls_total",
        "counter",
        "control-plane calls by outcome (HasTunnel probes between gateways are not counted)",
    );
    for outcome in CallOutcome::ALL {
        o.sample(
            "border_gw_calls_total",
            &[("outcome", outcome.as_str())],
            s.calls(outcome),
        );
    }
    o.one(
        "border_gw_peer_forwards_total",
        "counter",
        "calls sent on to the gateway holding a tunnel of the appliance",
        s.peer_forwards(),
    );
    o.one(
        "border_gw_registry_unknown_peers_total",
        "counter",
        "registry entries ignored because they name a gateway that is not a configured [[peer]]",
        s.unknown_holders(),
    );
    let name = "border_gw_forward_seconds";
    o.family(
        name,
        "histogram",
        "forwarded calls (outcome ok or appliance_error): from the call's arrival to its answer's head",
    );
    let cumulative = s.forward_latency.cumulative();
    for (bound, n) in LATENCY_BUCKETS.iter().zip(&cumulative) {
        o.sample(&format!("{name}_bucket"), &[("le", &bound.to_string())], n);
    }
    let count = cumulative.last().copied().unwrap_or(0);
    o.sample(&format!("{name}_bucket"), &[("le", "+Inf")], count);
    o.sample(&format!("{name}_sum"), &[], s.forward_latency.sum_seconds());
    o.sample(&format!("{name}_count"), &[], count);
}

fn registry(o: &mut Out, gw: &Gateway) {
    let c = &gw.registry.counters;
    o.family(
        "border_gw_registry_errors_total",
        "counter",
        "Redis round trips that failed or timed out, by operation (lookup: which gateway holds an appliance; publish: this gateway's tunnels)",
    );
    o.sample(
        "border_gw_registry_errors_total",
        &[("op", "lookup")],
        load(&c.lookup_errors),
    );
    o.sample(
        "border_gw_registry_errors_total",
        &[("op", "publish")],
        load(&c.publish_errors),
    );
    o.one(
        "border_gw_registry_entries",
        "gauge",
        "appliances this gateway's registry entries name, as last published to Redis",
        load(&c.entries),
    );
    o.one(
        "border_gw_registry_up",
        "gauge",
        "1 when the last round trip to Redis succeeded",
        load(&c.up),
    );
}

/// What `[limits]` refused, and the request memory in use.
fn limits(o: &mut Out, gw: &Gateway) {
    let name = "border_gw_limit_refusals_total";
    o.family(
        name,
        "counter",
        "connections closed, tunnels refused and calls refused by a [limits] bound, by listener and limit",
    );
    for (listener, limit) in crate::limits::Limit::ALL {
        o.sample(
            name,
            &[("listener", listener.as_str()), ("limit", limit.as_str())],
            gw.refusals.get(listener, limit),
        );
    }
    o.one(
        "border_gw_request_memory_bytes",
        "gauge",
        "request body bytes buffered now, charged to limits.request_memory_mib",
        gw.budget.in_use() as u64,
    );
}

/// Serves `/metrics` on `listener` until `shutdown`, with at most
/// `max_connections` open at once: one beyond is closed at once and counted.
pub async fn serve(
    listener: TcpListener,
    gw: Arc<Gateway>,
    max_connections: u32,
    shutdown: watch::Receiver<bool>,
) {
    let refused = Arc::new(AtomicU64::new(0));
    let counted = refused.clone();
    let render: mgmt::prom::Render = Arc::new(move || render(&gw, load(&refused)));
    mgmt::prom::serve(
        "border-gw",
        listener,
        shutdown,
        max_connections,
        render,
        move || {
            counted.fetch_add(1, Ordering::Relaxed);
        },
    )
    .await;
}
