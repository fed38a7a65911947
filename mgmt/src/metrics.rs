//! Prometheus text exposition format (version 0.0.4) at
//! `metrics_listen`/metrics: a small hyper HTTP/1.1 handler. Everything is
//! rendered from the same GetStatus / GetStats values the gRPC API returns.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::manager::Manager;
use crate::pb;

/// Content type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

fn esc(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

fn help_esc(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

struct Out(String);

impl Out {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {}", help_esc(help));
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], v: u64) {
        self.0.push_str(name);
        if !labels.is_empty() {
            self.0.push('{');
            for (i, (k, val)) in labels.iter().enumerate() {
                if i > 0 {
                    self.0.push(',');
                }
                let _ = write!(self.0, "{k}=\"{}\"", esc(val));
            }
            self.0.push('}');
        }
        let _ = writeln!(self.0, " {v}");
    }
}

/// Suffix, type, help and accessor of one flow statistic family.
type FlowFamily = (
    &'static str,
    &'static str,
    &'static str,
    fn(&pb::FlowStats) -> u64,
);

/// Renders every metric from a status and a stats snapshot.
pub fn render(status: &pb::GetStatusResponse, stats: &pb::GetStatsResponse) -> String {
    let mut o = Out(String::with_capacity(16 << 10));

    // Publisher.
    let p = status.publisher.clone().unwrap_or_default();
    o.family(
        "border_tables_published_generation",
        "gauge",
        "table generation border-mgmt has published (0: none)",
    );
    o.sample(
        "border_tables_published_generation",
        &[],
        p.published_generation,
    );
    o.family(
        "border_tables_arena_bytes",
        "gauge",
        "bytes of the tables region's arena",
    );
    o.sample("border_tables_arena_bytes", &[], p.arena_bytes);
    o.family(
        "border_tables_arena_free_bytes",
        "gauge",
        "free bytes of the tables arena (retired blocks not yet reclaimed are not free)",
    );
    o.sample("border_tables_arena_free_bytes", &[], p.arena_free_bytes);
    o.family(
        "border_tables_publish_pending",
        "gauge",
        "1 while a publish waits for workers to pass older generations",
    );
    o.sample(
        "border_tables_publish_pending",
        &[],
        u64::from(!p.pending.is_empty()),
    );

    // Dataplane and workers.
    let dp = status.dataplane.clone().unwrap_or_default();
    let running = dp.present && dp.pid_alive && dp.run_state == "running";
    o.family(
        "border_dataplane_up",
        "gauge",
        "1 when border-dp runs (state region present, marked running, process alive)",
    );
    o.sample("border_dataplane_up", &[], u64::from(running));
    let wl: Vec<(String, String)> = dp
        .workers
        .iter()
        .map(|w| (w.index.to_string(), w.lcore.to_string()))
        .collect();
    o.family(
        "border_worker_applied_generation",
        "gauge",
        "table generation the worker has adopted (its quiescent state)",
    );
    for (w, (i, l)) in dp.workers.iter().zip(&wl) {
        o.sample(
            "border_worker_applied_generation",
            &[("worker", i), ("lcore", l)],
            w.applied_generation,
        );
    }
    o.family(
        "border_worker_alive",
        "gauge",
        "1 when the worker's heartbeat moved within the liveness grace period",
    );
    for (w, (i, l)) in dp.workers.iter().zip(&wl) {
        o.sample(
            "border_worker_alive",
            &[("worker", i), ("lcore", l)],
            u64::from(w.alive),
        );
    }

    o.family(
        "border_findings",
        "gauge",
        "problems borderctl status names, by kind and worker (1 while present)",
    );
    for f in &dp.findings {
        let w = f.worker.to_string();
        o.sample(
            "border_findings",
            &[("kind", f.kind.as_str()), ("worker", &w)],
            1,
        );
    }

    // Counters, per worker.
    let sl: Vec<(String, String)> = stats
        .workers
        .iter()
        .map(|w| (w.index.to_string(), w.lcore.to_string()))
        .collect();
    for (ci, c) in stats.counters.iter().enumerate() {
        let (name, kind) = if c.gauge {
            (format!("border_{}", c.name), "gauge")
        } else {
            (format!("border_{}_total", c.name), "counter")
        };
        o.family(&name, kind, &c.help);
        for (w, (i, l)) in stats.workers.iter().zip(&sl) {
            let v = w.values.get(ci).copied().unwrap_or(0);
            o.sample(&name, &[("worker", i), ("lcore", l)], v);
        }
    }
    o.family(
        "border_drops_total",
        "counter",
        "packets dropped, by reason (the drop_<reason> counters; drop_malformed, their parse-error sum, is left out)",
    );
    for (ci, c) in stats.counters.iter().enumerate() {
        let Some(reason) = c.name.strip_prefix("drop_") else {
            continue;
        };
        if !c.drop || reason == "malformed" {
            continue;
        }
        for (w, (i, l)) in stats.workers.iter().zip(&sl) {
            let v = w.values.get(ci).copied().unwrap_or(0);
            o.sample(
                "border_drops_total",
                &[("worker", i), ("lcore", l), ("reason", reason)],
                v,
            );
        }
    }

    // Per VIP and per backend flow statistics.
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
            let f = v.stats.unwrap_or_default();
            o.sample(&name, &[("vip", &v.name)], get(&f));
        }
    }
    for (suffix, kind, help, get) in flows {
        let name = format!("border_backend_{suffix}");
        o.family(&name, kind, &format!("per backend: {help}"));
        for v in &stats.vips {
            for b in &v.backends {
                let f = b.stats.unwrap_or_default();
                o.sample(&name, &[("vip", &v.name), ("backend", &b.address)], get(&f));
            }
        }
    }

    // VIP and backend state.
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
        "1 for the backend's current state (up, down, draining), 0 for the others",
    );
    for v in &status.vips {
        for b in &v.backends {
            let cur = pb::BackendState::try_from(b.state).unwrap_or(pb::BackendState::Unspecified);
            for (s, name) in [
                (pb::BackendState::Up, "up"),
                (pb::BackendState::Down, "down"),
                (pb::BackendState::Draining, "draining"),
            ] {
                o.sample(
                    "border_backend_state",
                    &[("vip", &v.name), ("backend", &b.address), ("state", name)],
                    u64::from(cur == s),
                );
            }
        }
    }
    o.family(
        "border_backend_weight",
        "gauge",
        "effective backend weight (operator override, else configured)",
    );
    for v in &status.vips {
        for b in &v.backends {
            o.sample(
                "border_backend_weight",
                &[("vip", &v.name), ("backend", &b.address)],
                u64::from(b.weight),
            );
        }
    }
    o.family(
        "border_backend_ring_slots",
        "gauge",
        "slots of the VIP's Maglev ring that point at the backend in the published tables",
    );
    for v in &status.vips {
        for b in &v.backends {
            o.sample(
                "border_backend_ring_slots",
                &[("vip", &v.name), ("backend", &b.address)],
                u64::from(b.ring_slots),
            );
        }
    }
    o.0.push_str(&crate::bgp::metrics::render(status.bgp.as_ref()));
    o.0
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

async fn handle(m: Arc<Manager>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    if path != "/metrics" {
        return if path == "/" {
            text(StatusCode::OK, "border-mgmt: metrics at /metrics\n")
        } else {
            text(
                StatusCode::NOT_FOUND,
                "not found: metrics are at /metrics\n",
            )
        };
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "GET /metrics\n");
        r.headers_mut().insert(
            hyper::header::ALLOW,
            hyper::header::HeaderValue::from_static("GET, HEAD"),
        );
        return r;
    }
    let body = tokio::task::spawn_blocking(move || render(&m.status(), &m.stats())).await;
    match body {
        Ok(body) => {
            let mut r = Response::new(Full::new(Bytes::from(body)));
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static(CONTENT_TYPE),
            );
            r
        }
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e}\n")),
    }
}

/// Serves `/metrics` on `listener` until `shutdown` turns true.
pub async fn serve(listener: TcpListener, m: Arc<Manager>, mut shutdown: watch::Receiver<bool>) {
    loop {
        if *shutdown.borrow() {
            return;
        }
        let (stream, peer) = tokio::select! {
            r = shutdown.changed() => {
                if r.is_err() { return }
                continue;
            }
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "metrics: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let m = m.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let m = m.clone();
                async move { Ok::<_, Infallible>(handle(m, req).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), svc);
            if let Err(e) = conn.await {
                tracing::debug!(%peer, error = %e, "metrics connection ended");
            }
        });
    }
}
