//! Prometheus text exposition format (version 0.0.4) at
//! `metrics_listen`/metrics (served by [`crate::prom`]). Everything is
//! rendered from the manager's own [`Status`] and [`Stats`], the values the
//! gRPC API converts into GetStatus / GetStats: the exporter is a second
//! boundary beside gRPC, not a client of it, so it reads the typed values
//! (backend states as an enum, counters as [`conf::counters::Counter`]s)
//! rather than their protobuf encoding.

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;

use conf::counters::Counter;
use conf::state::PortStat;
use conf::tables::BackendState;

use crate::authz::{ApiCounters, Limit};
use crate::manager::Manager;
use crate::model::{BackendStatus, FlowStats, PublisherStatus, Stats, Status, WorkerSnap};

pub use crate::prom::CONTENT_TYPE;

type Out = crate::prom::Exposition;

/// Suffix, type, help and accessor of one flow statistic family.
type FlowFamily = (
    &'static str,
    &'static str,
    &'static str,
    fn(&FlowStats) -> u64,
);

/// Renders every metric from a status and a stats snapshot, and the API's
/// own counters.
pub fn render(status: &Status, stats: &Stats, api_counters: &ApiCounters) -> String {
    let mut o = Out::with_capacity(16 << 10);
    processes(&mut o, status);
    publisher(&mut o, &status.publisher);
    dataplane(&mut o, status);
    counters(&mut o, stats);
    flows(&mut o, stats);
    local_pools(&mut o, stats);
    ports(&mut o, stats);
    vip_state(&mut o, status);
    api(&mut o, api_counters);
    crate::bgp::metrics::render(&mut o, status.bgp.as_ref());
    crate::records::stats::render(&mut o, status.records.as_ref());
    o.into_string()
}

/// border-mgmt's build and process, and border-dp's process (read from
/// `/proc/<pid>` with the pid border-dp records in the state region, while
/// it runs).
fn processes(o: &mut Out, status: &Status) {
    use crate::process_metrics::{render_build_info, render_process, sample};
    render_build_info(o, "border-mgmt");
    render_process(o, "process", "border-mgmt", sample("self").as_ref());
    let dp = status
        .dataplane_running()
        .then(|| sample(&status.dataplane.pid.to_string()))
        .flatten();
    render_process(o, "border_dp_process", "border-dp", dp.as_ref());
}

/// The publisher: generation, arena, pending publish.
fn publisher(o: &mut Out, p: &PublisherStatus) {
    o.gauge(
        "border_tables_published_generation",
        "table generation border-mgmt has published (0: none)",
        p.published_generation,
    );
    o.gauge(
        "border_tables_arena_bytes",
        "bytes of the tables region's arena",
        p.arena_bytes,
    );
    o.gauge(
        "border_tables_arena_free_bytes",
        "free bytes of the tables arena (retired blocks not yet reclaimed are not free)",
        p.arena_free_bytes,
    );
    o.gauge(
        "border_tables_publish_pending",
        "1 while a publish waits for workers to pass older generations",
        u64::from(p.pending.is_some()),
    );
}

/// The `worker` and `lcore` labels of each worker, by index.
fn worker_labels(lcores: impl Iterator<Item = u64>) -> Vec<(String, String)> {
    lcores
        .enumerate()
        .map(|(i, l)| (i.to_string(), l.to_string()))
        .collect()
}

/// Name, help and value of a per-worker gauge.
type WorkerGauge = (&'static str, &'static str, fn(&WorkerSnap) -> u64);

/// border-dp, its workers, and the findings read off their counters.
fn dataplane(o: &mut Out, status: &Status) {
    o.gauge(
        "border_dataplane_up",
        "1 when border-dp runs (state region present, marked running, process alive)",
        u64::from(status.dataplane_running()),
    );
    let workers = &status.dataplane.workers;
    let wl = worker_labels(workers.iter().map(|w| w.lcore));
    let gauges: [WorkerGauge; 2] = [
        (
            "border_worker_applied_generation",
            "table generation the worker has adopted (its quiescent state)",
            |w| w.applied_generation,
        ),
        (
            "border_worker_alive",
            "1 when the worker's heartbeat moved within the liveness grace period",
            |w| u64::from(w.alive),
        ),
    ];
    for (name, help, get) in gauges {
        o.family(name, "gauge", help);
        for (w, (i, l)) in workers.iter().zip(&wl) {
            o.sample(name, &[("worker", i), ("lcore", l)], get(w));
        }
    }

    o.family(
        "border_findings",
        "gauge",
        "problems borderctl status names, by kind and worker or port (1 while present)",
    );
    for f in &status.findings {
        let (worker, port) = f.subject.wire();
        let w = worker.to_string();
        let labels: &[(&str, &str)] = if port.is_empty() {
            &[("kind", f.kind.as_str()), ("worker", &w)]
        } else {
            &[("kind", f.kind.as_str()), ("port", port)]
        };
        o.sample("border_findings", labels, 1);
    }
}

/// How a dataplane counter is exported.
#[derive(Debug, PartialEq, Eq)]
pub enum CounterExport {
    /// A `drop_<reason>` counter: one series of `border_drops_total`.
    DropReason(&'static str),
    /// A family of its own, `border_<name>_total` (or `border_<name>` for a
    /// gauge), with its type.
    Family(String, &'static str),
}

/// The one place a counter's name becomes a Prometheus name, driven by the
/// counter list alone: a new `drop_<reason>` counter becomes a reason of
/// `border_drops_total`, any other counter a family of its own. A counter
/// that sums others (`drop_malformed`) is no reason, so that
/// `sum(border_drops_total)` counts each dropped frame once; it becomes
/// `border_<what>_drops_total` (`border_malformed_drops_total`), named
/// apart from the drops it sums.
pub fn counter_export(c: Counter) -> CounterExport {
    if let Some(reason) = c.drop_reason() {
        return CounterExport::DropReason(reason);
    }
    if c.is_gauge() {
        return CounterExport::Family(format!("border_{}", c.name()), "gauge");
    }
    match c.name().strip_prefix("drop_") {
        Some(what) => CounterExport::Family(format!("border_{what}_drops_total"), "counter"),
        None => CounterExport::Family(format!("border_{}_total", c.name()), "counter"),
    }
}

/// Every dataplane counter per worker: the drops by reason in one family,
/// every other counter in a family of its own.
fn counters(o: &mut Out, stats: &Stats) {
    let sl = worker_labels(stats.workers.iter().map(|w| w.lcore));
    let value =
        |w: &crate::model::WorkerCounters, ci: usize| w.values.get(ci).copied().unwrap_or(0);
    for (ci, c) in stats.counters().iter().enumerate() {
        let CounterExport::Family(name, kind) = counter_export(*c) else {
            continue;
        };
        let help = if c.sums_others() {
            format!(
                "{} (already in border_drops_total by reason: do not add the two)",
                c.help()
            )
        } else {
            c.help().to_owned()
        };
        o.family(&name, kind, &help);
        for (w, (i, l)) in stats.workers.iter().zip(&sl) {
            o.sample(&name, &[("worker", i), ("lcore", l)], value(w, ci));
        }
    }
    o.family(
        "border_drops_total",
        "counter",
        "packets dropped, by reason (each drop_<reason> counter once; docs/api.md lists them): sum() is every dropped frame",
    );
    for (ci, c) in stats.counters().iter().enumerate() {
        let CounterExport::DropReason(reason) = counter_export(*c) else {
            continue;
        };
        for (w, (i, l)) in stats.workers.iter().zip(&sl) {
            o.sample(
                "border_drops_total",
                &[("worker", i), ("lcore", l), ("reason", reason)],
                value(w, ci),
            );
        }
    }
}

/// Flow statistics per VIP and per backend.
fn flows(o: &mut Out, stats: &Stats) {
    let flows: [FlowFamily; 4] = [
        (
            "packets_total",
            "counter",
            "packets forwarded (both directions)",
            |f| f.packets,
        ),
        (
            "bytes_total",
            "counter",
            "bytes forwarded (both directions)",
            |f| f.bytes,
        ),
        (
            "new_connections_total",
            "counter",
            "connections created",
            |f| f.new_connections,
        ),
        (
            "active_connections",
            "gauge",
            "connections in the workers' tables now",
            |f| f.active_connections,
        ),
    ];
    for (suffix, kind, help, get) in flows {
        let name = format!("border_vip_{suffix}");
        o.family(&name, kind, &format!("per VIP: {help}"));
        for v in &stats.vips {
            o.sample(&name, &[("vip", &v.name)], get(&v.flows));
        }
    }
    for (suffix, kind, help, get) in flows {
        let name = format!("border_backend_{suffix}");
        o.family(&name, kind, &format!("per backend: {help}"));
        for v in &stats.vips {
            for b in &v.backends {
                let addr = b.address.to_string();
                o.sample(
                    &name,
                    &[("vip", &v.name), ("backend", &addr)],
                    get(&b.flows),
                );
            }
        }
    }
}

/// Full-NAT tuple use per local address.
fn local_pools(o: &mut Out, stats: &Stats) {
    type Get = fn(&conf::state::LocalPoolUse) -> u64;
    let families: [(&str, &str, Get); 3] = [
        (
            "border_local_address_tuples",
            "full-NAT local tuples (ports) of the address the workers own",
            |p| p.tuples,
        ),
        (
            "border_local_address_tuples_in_use",
            "full-NAT local tuples of the address held by connections",
            |p| p.in_use,
        ),
        (
            "border_local_address_tuples_resting",
            "full-NAT local tuples of the address free but resting after their last connection",
            |p| p.resting,
        ),
    ];
    for (name, help, get) in families {
        o.family(name, "gauge", &format!("per local address: {help}"));
        for p in &stats.local_pools {
            o.sample(name, &[("address", &p.addr.to_string())], get(p));
        }
    }
}

/// Each port's NIC statistics (`rte_eth_stats`), as border-dp copies them
/// about once a second: `border_port_<stat>_total{port, role}`.
fn ports(o: &mut Out, stats: &Stats) {
    for stat in PortStat::ALL {
        let name = format!("border_port_{}_total", stat.name());
        o.family(&name, "counter", &format!("per port: {}", stat.help()));
        for p in &stats.ports {
            o.sample(
                &name,
                &[("port", &p.name), ("role", p.role.name())],
                p.get(stat),
            );
        }
    }
}

/// VIP fail-open, backend state, weight and ring share.
fn vip_state(o: &mut Out, status: &Status) {
    o.family(
        "border_vip_fail_open",
        "gauge",
        "1 when no backend of the VIP is eligible and every backend serves (never leave a VIP empty)",
    );
    for v in &status.vips {
        o.sample(
            "border_vip_fail_open",
            &[("vip", &v.name)],
            u64::from(v.fail_open),
        );
    }
    o.family(
        "border_backend_state",
        "gauge",
        "1 for the backend's current state (up, down, draining, killed), 0 for the others",
    );
    for v in &status.vips {
        for b in &v.backends {
            let addr = b.address.to_string();
            for (s, name) in [
                (BackendState::Up, "up"),
                (BackendState::Down, "down"),
                (BackendState::Draining, "draining"),
                (BackendState::Killed, "killed"),
            ] {
                o.sample(
                    "border_backend_state",
                    &[("vip", &v.name), ("backend", &addr), ("state", name)],
                    u64::from(b.state == s),
                );
            }
        }
    }
    let gauges: [BackendGauge; 2] = [
        (
            "border_backend_weight",
            "effective backend weight (operator override, else configured)",
            |b| u64::from(b.weight),
        ),
        (
            "border_backend_ring_slots",
            "slots of the VIP's Maglev ring that point at the backend in the published tables",
            |b| u64::from(b.ring_slots),
        ),
    ];
    for (name, help, get) in gauges {
        o.family(name, "gauge", help);
        for v in &status.vips {
            for b in &v.backends {
                let addr = b.address.to_string();
                o.sample(name, &[("vip", &v.name), ("backend", &addr)], get(b));
            }
        }
    }
}

/// Name, help and value of a per-backend gauge.
type BackendGauge = (&'static str, &'static str, fn(&BackendStatus) -> u64);

/// The API's own: calls refused on the unix socket (`crate::peer`) or for
/// the caller's role (`crate::authz`), refusals by `[mgmt.limits]`, and
/// the WatchEvents streams open.
fn api(o: &mut Out, c: &ApiCounters) {
    o.family(
        "border_mgmt_api_refused_total",
        "counter",
        "API calls on the unix socket refused because of the caller's unix credentials (SO_PEERCRED)",
    );
    o.sample("border_mgmt_api_refused_total", &[], c.unix_refused());
    o.family(
        "border_mgmt_api_role_denied_total",
        "counter",
        "API calls refused because the caller's role (of its pinned certificate) does not allow them",
    );
    for (role, n) in c.roles_denied() {
        o.sample(
            "border_mgmt_api_role_denied_total",
            &[("role", role.as_str())],
            n,
        );
    }
    o.family(
        "border_mgmt_limit_refused_total",
        "counter",
        "requests and connections refused by a [mgmt.limits] bound, by limit",
    );
    for l in Limit::ALL {
        o.sample(
            "border_mgmt_limit_refused_total",
            &[("limit", l.as_str())],
            c.limit_refused(l),
        );
    }
    o.gauge(
        "border_mgmt_watch_streams",
        "WatchEvents streams open now",
        c.watch_streams(),
    );
}

/// Serves `/metrics` on `listener` until `shutdown` turns true, with at
/// most `max_connections` open at once: a connection beyond is closed at
/// once and counted ([`Limit::MetricsConnections`]).
pub async fn serve(
    listener: TcpListener,
    m: Arc<Manager>,
    shutdown: watch::Receiver<bool>,
    max_connections: u32,
    counters: Arc<ApiCounters>,
) {
    let refused_counters = counters.clone();
    let render: crate::prom::Render = Arc::new(move || render(&m.status(), &m.stats(), &counters));
    crate::prom::serve(
        "border-mgmt",
        listener,
        shutdown,
        max_connections,
        render,
        move || refused_counters.count(Limit::MetricsConnections),
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_drop_is_exported_once_and_sums_apart() {
        let mut reasons = std::collections::BTreeSet::new();
        let mut families = std::collections::BTreeSet::new();
        for c in Counter::ALL {
            match counter_export(*c) {
                CounterExport::DropReason(r) => {
                    assert!(c.is_drop() && !c.sums_others(), "{c:?}");
                    assert!(reasons.insert(r), "reason {r} twice");
                }
                CounterExport::Family(name, _) => {
                    assert!(
                        !name.starts_with("border_drop_"),
                        "{name}: a drop outside border_drops_total"
                    );
                    assert!(!c.is_drop() || c.sums_others(), "{c:?}");
                    assert!(families.insert(name.clone()), "{name} twice");
                }
            }
        }
        assert!(reasons.contains("no_backend") && !reasons.contains("malformed"));
        assert!(families.contains("border_malformed_drops_total"));
        assert!(families.contains("border_rx_packets_total"));
        assert!(families.contains("border_local_tuples"));
        assert!(families.contains("border_neighbour_requests_total"));
        assert!(!families.iter().any(|f| f.contains("neighbor")));
        assert!(!reasons.iter().any(|r| r.contains("neighbor")));
    }
}
