//! Test backends for health checks: an HTTP server on 127.0.0.1 whose
//! answer the test controls, and a poll-until helper.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// An HTTP backend on 127.0.0.1: answers `status` (0: closes without an
/// answer) with `X-Load-Balancing-Endpoint-Weight: weight` (0: no header).
#[derive(Clone)]
pub struct Backend {
    pub addr: SocketAddr,
    pub status: Arc<AtomicU16>,
    pub weight: Arc<AtomicU32>,
}

impl Backend {
    pub async fn start() -> Backend {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let b = Backend {
            addr: l.local_addr().unwrap(),
            status: Arc::new(AtomicU16::new(200)),
            weight: Arc::new(AtomicU32::new(0)),
        };
        let (status, weight) = (b.status.clone(), b.weight.clone());
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let (status, weight) = (
                    status.load(Ordering::Relaxed),
                    weight.load(Ordering::Relaxed),
                );
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut b = [0u8; 512];
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut b).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&b[..n]),
                        }
                    }
                    if status == 0 {
                        return;
                    }
                    let w = if weight == 0 {
                        String::new()
                    } else {
                        format!("X-Load-Balancing-Endpoint-Weight: {weight}\r\n")
                    };
                    let _ = s
                        .write_all(
                            format!("HTTP/1.1 {status} X\r\n{w}Content-Length: 0\r\n\r\n")
                                .as_bytes(),
                        )
                        .await;
                });
            }
        });
        b
    }
    pub fn set(&self, status: u16) {
        self.status.store(status, Ordering::Relaxed);
    }
}

/// Polls `f` every 50 ms until it returns `Some`; panics after `within`.
pub async fn eventually<T>(
    what: &str,
    within: Duration,
    mut f: impl AsyncFnMut() -> Option<T>,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(t) = f().await {
            return t;
        }
        assert!(
            start.elapsed() < within,
            "timed out after {within:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
