//! Accepting TCP connections until shutdown, for every listener of
//! border-mgmt (the API, the metrics exporter) and border-gw: one place
//! that decides what a failed accept does. It depends on nothing else of
//! the crate, so the servers that use it need not depend on each other.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The next connection on `listener`, or `None` once `shutdown` turns true.
/// A failed accept (e.g. out of file descriptors) is logged, naming `what`
/// listens, and retried after a pause.
pub async fn accept_until(
    listener: &TcpListener,
    shutdown: &mut watch::Receiver<bool>,
    what: &str,
) -> Option<(TcpStream, SocketAddr)> {
    loop {
        if *shutdown.borrow() {
            return None;
        }
        tokio::select! {
            r = shutdown.changed() => {
                if r.is_err() { return None }
            }
            r = listener.accept() => match r {
                Ok(x) => return Some(x),
                Err(e) => {
                    tracing::warn!(error = %e, "{what}: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
}
