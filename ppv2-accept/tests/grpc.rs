//! Both peers reach gRPC handlers: a tonic server fed by the acceptor
//! (`serve_with_incoming`, `ProxiedStream` as its `Connected`), and a tonic
//! server behind a relay over loopback, whose handlers see the relay's
//! port and look the real peer up in a `PeerTable`, emptied when the
//! connection closes.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::rt::{TokioExecutor, TokioIo};
use ppp::v2;
use ppv2_accept::{AcceptOptions, Acceptor, PeerInfo, PeerTable, Sniffed};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tonic::codegen::http;
use tonic::server::NamedService;
use tonic::transport::server::TcpConnectInfo;

/// Answers every call with the peer it found, in response headers.
#[derive(Clone)]
struct WhoAmI {
    /// Where to look the peer up when the connection is a relay's.
    table: Option<PeerTable>,
}

impl NamedService for WhoAmI {
    const NAME: &'static str = "test.WhoAmI";
}

impl tower::Service<http::Request<tonic::body::Body>> for WhoAmI {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let peer = match &self.table {
            None => req.extensions().get::<PeerInfo>().cloned(),
            Some(t) => req
                .extensions()
                .get::<TcpConnectInfo>()
                .and_then(|c| c.remote_addr())
                .and_then(|seen| t.lookup(seen)),
        };
        let (claimed, measured) = peer.map_or(("none".to_string(), "none".to_string()), |p| {
            (p.claimed_text(), p.measured.to_string())
        });
        let resp = http::Response::builder()
            .header("content-type", "application/grpc")
            .header("grpc-status", "0")
            .header("x-claimed", claimed)
            .header("x-measured", measured)
            .body(tonic::body::Body::empty())
            .unwrap();
        Box::pin(async move { Ok(resp) })
    }
}

/// One call over `tcp` after sending `header`; the peer the handler saw.
async fn call(mut tcp: TcpStream, header: &[u8]) -> (String, String) {
    tcp.write_all(header).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = http::Request::post("http://x/test.WhoAmI/Who")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    let h = |k| resp.headers()[k].to_str().unwrap().to_string();
    (h("x-claimed"), h("x-measured"))
}

fn header_from(client: &str) -> Vec<u8> {
    let src: SocketAddr = client.parse().unwrap();
    let dst: SocketAddr = "203.0.113.10:443".parse().unwrap();
    v2::Builder::with_addresses(
        v2::Version::Two | v2::Command::Proxy,
        v2::Protocol::Stream,
        (src, dst),
    )
    .build()
    .unwrap()
}

#[tokio::test]
async fn a_tonic_handler_sees_claimed_and_measured_through_connect_info() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let acceptor = Acceptor::new(AcceptOptions::default());
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let a = acceptor.clone();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = l.accept().await.unwrap();
            if let Ok(Sniffed::Ready(s)) = a.accept(tcp).await {
                let _ = tx.send(Ok::<_, std::io::Error>(*s)).await;
            }
        }
    });
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(WhoAmI { table: None })
            .serve_with_incoming(tokio_stream::wrappers::ReceiverStream::new(rx)),
    );
    let tcp = TcpStream::connect(addr).await.unwrap();
    let me = tcp.local_addr().unwrap();
    let (claimed, measured) = call(tcp, &header_from("198.51.100.7:40001")).await;
    assert_eq!(claimed, "198.51.100.7:40001");
    assert_eq!(measured, me.to_string());

    // Without a header: the same server, nobody claimed.
    let tcp = TcpStream::connect(addr).await.unwrap();
    let me = tcp.local_addr().unwrap();
    let (claimed, measured) = call(tcp, b"").await;
    assert_eq!(claimed, "-");
    assert_eq!(measured, me.to_string());
}

#[tokio::test]
async fn a_handler_behind_a_loopback_relay_finds_the_real_peer_until_the_connection_closes() {
    // The gRPC server: a plain tonic listener on loopback.
    let inner = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let inner_addr = inner.local_addr().unwrap();
    let table = PeerTable::default();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(WhoAmI {
                table: Some(table.clone()),
            })
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(inner)),
    );
    // The front end: sniffs, opens its own connection to the server,
    // records the real peer under that connection's source port.
    let outer = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let outer_addr = outer.local_addr().unwrap();
    let acceptor = Acceptor::new(AcceptOptions::default());
    let t = table.clone();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = outer.accept().await.unwrap();
            let (a, t) = (acceptor.clone(), t.clone());
            tokio::spawn(async move {
                let Ok(Sniffed::Ready(mut outside)) = a.accept(tcp).await else {
                    return;
                };
                let mut inside = TcpStream::connect(inner_addr).await.unwrap();
                let port = inside.local_addr().unwrap().port();
                let _entry = t.insert(port, outside.peer().clone());
                let _ = tokio::io::copy_bidirectional(&mut outside, &mut inside).await;
            });
        }
    });
    let tcp = TcpStream::connect(outer_addr).await.unwrap();
    let me = tcp.local_addr().unwrap();
    let (claimed, measured) = call(tcp, &header_from("192.0.2.44:5555")).await;
    assert_eq!(claimed, "192.0.2.44:5555");
    assert_eq!(measured, me.to_string());
    assert_eq!(table.len(), 1, "held while the connection is open");
    // `call` dropped its connection: the relay ends, the entry goes.
    let start = std::time::Instant::now();
    while !table.is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "entry not cleared"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
