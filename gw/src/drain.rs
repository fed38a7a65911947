//! The drain control message: the gateway asks the agent to close a tunnel
//! cleanly (a planned reconnect, docs/fleet.md). The agent answers, closes
//! the tunnel with GOAWAY and dials its next gateway without backing off.

use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::http2::SendRequest;

/// Sends [`mgmt::agent::DRAIN_PATH`] on a tunnel's HTTP/2 handle (the
/// tunnel table's `Sender`, named here by its hyper type so that this
/// message depends on nothing of the table); errors mean it is already gone.
pub async fn tell_to_close(mut sender: SendRequest<Full<Bytes>>) {
    let req = hyper::Request::post(format!("http://tunnel{}", mgmt::agent::DRAIN_PATH))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Full::new(Bytes::new()));
    let Ok(req) = req else { return };
    if sender.ready().await.is_ok() {
        let _ =
            tokio::time::timeout(std::time::Duration::from_secs(2), sender.send_request(req)).await;
    }
}
