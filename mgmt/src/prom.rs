//! The Prometheus side shared by border-mgmt's and border-gw's exporters:
//! the text exposition format (0.0.4) and the HTTP/1.1 endpoint that serves
//! it at `/metrics` with a bound on open connections. What each exports is
//! its own (`crate::metrics`, `gw::metrics`).

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
use tokio::sync::{watch, Semaphore};

use crate::accept::accept_until;

/// Content type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A label value as the text format quotes it.
pub fn esc(v: &str) -> String {
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

/// A scrape's body being written: families, each with its samples.
#[derive(Debug, Default)]
pub struct Exposition(String);

impl Exposition {
    pub fn with_capacity(bytes: usize) -> Exposition {
        Exposition(String::with_capacity(bytes))
    }

    /// `# HELP` and `# TYPE` of a family; its samples follow.
    pub fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {}", help_esc(help));
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
    }

    /// One sample of the family `name` (or of its `_bucket`/`_sum`/`_count`).
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], v: impl std::fmt::Display) {
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

    /// A family of one unlabelled sample.
    pub fn one(&mut self, name: &str, kind: &str, help: &str, v: u64) {
        self.family(name, kind, help);
        self.sample(name, &[], v);
    }

    /// A family of one unlabelled gauge.
    pub fn gauge(&mut self, name: &str, help: &str, v: u64) {
        self.one(name, "gauge", help, v);
    }

    pub fn into_string(self) -> String {
        self.0
    }
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

/// Renders a scrape's body (run on tokio's blocking pool: it may read
/// shared memory or take locks).
pub type Render = Arc<dyn Fn() -> String + Send + Sync>;

async fn handle(
    who: &'static str,
    render: Render,
    req: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    if path != "/metrics" {
        return if path == "/" {
            text(StatusCode::OK, &format!("{who}: metrics at /metrics\n"))
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
    match tokio::task::spawn_blocking(move || render()).await {
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

/// Serves `/metrics` of `who` (named at `/`) on `listener` until `shutdown`
/// turns true, with at most `max_connections` open at once: a connection
/// beyond is closed at once and passed to `refused`.
pub async fn serve(
    who: &'static str,
    listener: TcpListener,
    mut shutdown: watch::Receiver<bool>,
    max_connections: u32,
    render: Render,
    refused: impl Fn() + Send + Sync,
) {
    let slots = Arc::new(Semaphore::new(max_connections as usize));
    while let Some((stream, peer)) = accept_until(&listener, &mut shutdown, "metrics").await {
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            refused();
            tracing::debug!(%peer, "metrics: {max_connections} connections open: connection closed");
            continue;
        };
        let render = render.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let svc = hyper::service::service_fn(move |req| {
                let render = render.clone();
                async move { Ok::<_, Infallible>(handle(who, render, req).await) }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_format_escapes_label_values_and_help() {
        assert_eq!(esc("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        let mut o = Exposition::default();
        o.family("x_total", "counter", "two\nlines \\ here");
        o.sample("x_total", &[("a", "1"), ("b", "q\"")], 7);
        o.gauge("y", "a gauge", 3);
        assert_eq!(
            o.into_string(),
            "# HELP x_total two\\nlines \\\\ here\n# TYPE x_total counter\nx_total{a=\"1\",b=\"q\\\"\"} 7\n\
             # HELP y a gauge\n# TYPE y gauge\ny 3\n"
        );
    }
}
