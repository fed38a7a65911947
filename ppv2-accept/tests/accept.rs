//! The acceptor over real loopback sockets: headers built by an
//! independent encoder (the `ppp` crate), delivered whole or a byte at a
//! time; TLS and HTTP/2 first bytes that must pass untouched; every
//! malformed variant closing its own connection with its reason counted
//! while a neighbour carries on.

use std::net::SocketAddr;
use std::time::Duration;

use ppp::v2;
use ppv2_accept::{AcceptOptions, Acceptor, Arrival, Malformed, PeerInfo, Sniffed};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn proxy_header(src: &str, dst: &str, uid: Option<&[u8]>) -> Vec<u8> {
    let src: SocketAddr = src.parse().unwrap();
    let dst: SocketAddr = dst.parse().unwrap();
    let b = v2::Builder::with_addresses(
        v2::Version::Two | v2::Command::Proxy,
        v2::Protocol::Stream,
        (src, dst),
    );
    let b = match uid {
        Some(u) => b.write_tlv(v2::Type::UniqueId, u).unwrap(),
        None => b,
    };
    b.build().unwrap()
}

fn local_header() -> Vec<u8> {
    v2::Builder::new(
        v2::Version::Two | v2::Command::Local,
        v2::AddressFamily::Unspecified | v2::Protocol::Unspecified,
    )
    .build()
    .unwrap()
}

/// A listener, a client connected to it, and the server side's sniff.
struct Pair {
    client: TcpStream,
    sniffed: tokio::task::JoinHandle<(Result<Sniffed, ppv2_accept::Refused>, SocketAddr)>,
}

async fn connect(acceptor: &Acceptor) -> Pair {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
    // Each write its own segment: split delivery is split on the wire.
    client.set_nodelay(true).unwrap();
    let acceptor = acceptor.clone();
    let sniffed = tokio::spawn(async move {
        let (tcp, peer) = l.accept().await.unwrap();
        (acceptor.accept(tcp).await, peer)
    });
    Pair { client, sniffed }
}

/// Sends `bytes` then `rest`, returns what the server read after the
/// sniff (to EOF) and the peer it reported.
async fn deliver(acceptor: &Acceptor, chunks: &[&[u8]], pause: Duration) -> (Vec<u8>, PeerInfo) {
    let mut p = connect(acceptor).await;
    let me = p.client.local_addr().unwrap();
    for c in chunks {
        p.client.write_all(c).await.unwrap();
        p.client.flush().await.unwrap();
        tokio::time::sleep(pause).await;
    }
    p.client.shutdown().await.unwrap();
    let (r, measured) = p.sniffed.await.unwrap();
    assert_eq!(measured, me);
    let Ok(Sniffed::Ready(mut s)) = r else {
        panic!("not accepted: {r:?}")
    };
    assert_eq!(s.peer().measured, me, "measured is the socket's peer");
    let mut got = Vec::new();
    s.read_to_end(&mut got).await.unwrap();
    (got, s.peer().clone())
}

fn acceptor() -> Acceptor {
    Acceptor::new(AcceptOptions {
        timeout: Duration::from_millis(1500),
        max_len: 512,
    })
}

#[tokio::test]
async fn a_v4_header_gives_the_claimed_peer_and_the_data_after_it_intact() {
    let a = acceptor();
    let h = proxy_header(
        "198.51.100.7:40001",
        "203.0.113.10:443",
        Some(b"00010000000000a1"),
    );
    let mut first = h.clone();
    first.extend_from_slice(b"\x16\x03\x01hello");
    let (data, peer) = deliver(&a, &[&first, b" world"], Duration::ZERO).await;
    assert_eq!(data, b"\x16\x03\x01hello world");
    assert_eq!(peer.claimed, Some("198.51.100.7:40001".parse().unwrap()));
    assert_eq!(
        peer.claimed_destination,
        Some("203.0.113.10:443".parse().unwrap())
    );
    assert_eq!(peer.unique_id.as_deref(), Some("00010000000000a1"));
    assert_eq!(a.stats.snapshot().arrived(Arrival::Proxied), 1);
    // A unique id is the sender's text: it cannot break a log line.
    let h = proxy_header(
        "198.51.100.7:1",
        "203.0.113.10:443",
        Some(b"x\n INFO forged \xff"),
    );
    let (_, peer) = deliver(&a, &[&h], Duration::ZERO).await;
    assert_eq!(peer.unique_id.as_deref(), Some(r"x\n INFO forged \xff"));
    assert_eq!(peer.client(), peer.claimed.unwrap());
}

#[tokio::test]
async fn a_v6_header_is_read_exactly() {
    let a = acceptor();
    let h = proxy_header("[2001:db8::7]:40001", "[2001:db8::100]:8443", None);
    let (data, peer) = deliver(&a, &[&h, b"PRI * HTTP/2.0"], Duration::ZERO).await;
    assert_eq!(data, b"PRI * HTTP/2.0");
    assert_eq!(peer.claimed, Some("[2001:db8::7]:40001".parse().unwrap()));
    assert_eq!(a.stats.snapshot().arrived(Arrival::Proxied), 1);
}

#[tokio::test]
async fn a_local_header_claims_nobody() {
    let a = acceptor();
    let (data, peer) = deliver(&a, &[&local_header(), b"ping"], Duration::ZERO).await;
    assert_eq!(data, b"ping");
    assert_eq!(peer.claimed, None);
    assert_eq!(peer.claimed_text(), "-");
    assert_eq!(a.stats.snapshot().arrived(Arrival::Local), 1);
}

#[tokio::test]
async fn a_header_delivered_one_byte_at_a_time_is_assembled() {
    let a = acceptor();
    let h = proxy_header("192.0.2.9:1234", "192.0.2.100:80", Some(b"abc"));
    let mut chunks: Vec<&[u8]> = h.chunks(1).collect();
    chunks.push(b"after");
    let (data, peer) = deliver(&a, &chunks, Duration::from_millis(5)).await;
    assert_eq!(data, b"after");
    assert_eq!(peer.claimed, Some("192.0.2.9:1234".parse().unwrap()));
}

#[tokio::test]
async fn tls_http2_and_v1_first_bytes_pass_untouched() {
    let a = acceptor();
    let hello: &[u8] = b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03 client hello";
    for first in [
        hello,
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        b"PROXY TCP4 6.6.6.6 1.1.1.1 1 2\r\n",
    ] {
        let (data, peer) = deliver(&a, &[first, b"+more"], Duration::ZERO).await;
        assert_eq!(data, [first, b"+more"].concat());
        assert_eq!(peer.claimed, None);
    }
    assert_eq!(a.stats.snapshot().arrived(Arrival::Direct), 3);
}

#[tokio::test]
async fn a_signature_prefix_that_turns_into_something_else_is_replayed() {
    let a = acceptor();
    // Arrives in pieces, so the sniff has taken "\r\n\r\n" off the socket
    // before it can tell.
    let (data, peer) = deliver(
        &a,
        &[b"\r\n", b"\r\n", b"GET / HTTP/1.1\r\n"],
        Duration::from_millis(20),
    )
    .await;
    assert_eq!(data, b"\r\n\r\nGET / HTTP/1.1\r\n");
    assert_eq!(peer.claimed, None);
    assert_eq!(a.stats.snapshot().arrived(Arrival::Direct), 1);
}

#[tokio::test]
async fn a_client_waiting_for_the_server_passes_after_the_timeout() {
    let a = Acceptor::new(AcceptOptions {
        timeout: Duration::from_millis(200),
        max_len: 512,
    });
    let mut p = connect(&a).await;
    let (r, _) = p.sniffed.await.unwrap();
    let Ok(Sniffed::Ready(mut s)) = r else {
        panic!("{r:?}")
    };
    assert_eq!(s.peer().claimed, None);
    s.write_all(b"220 hello\r\n").await.unwrap();
    let mut got = [0u8; 11];
    p.client.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"220 hello\r\n");
    assert_eq!(a.stats.snapshot().arrived(Arrival::Direct), 1);
}

#[tokio::test]
async fn a_connection_that_sends_nothing_and_closes_is_silent() {
    let a = acceptor();
    let p = connect(&a).await;
    drop(p.client);
    let (r, _) = p.sniffed.await.unwrap();
    assert!(matches!(r, Ok(Sniffed::Silent)), "{r:?}");
    let s = a.stats.snapshot();
    assert_eq!(s.arrived(Arrival::Silent), 1);
    assert_eq!(s.refused_total(), 0);
}

/// A valid v4 header with byte `at` set to `value`.
fn corrupt(at: usize, value: u8) -> Vec<u8> {
    let mut h = proxy_header("192.0.2.9:1234", "192.0.2.100:80", None);
    h[at] = value;
    h
}

#[tokio::test]
async fn each_malformed_header_closes_only_its_connection_with_its_reason() {
    let a = acceptor();
    let mut too_long = proxy_header("192.0.2.9:1234", "192.0.2.100:80", None);
    too_long[14..16].copy_from_slice(&600u16.to_be_bytes());
    let mut short = proxy_header("192.0.2.9:1234", "192.0.2.100:80", None);
    short[14..16].copy_from_slice(&8u16.to_be_bytes());
    let truncated = proxy_header("192.0.2.9:1234", "192.0.2.100:80", None)[..20].to_vec();
    let cases: Vec<(Vec<u8>, Malformed)> = vec![
        (corrupt(12, 0x11), Malformed::Version),
        (corrupt(12, 0x2f), Malformed::Command),
        (corrupt(13, 0x51), Malformed::Family),
        (short, Malformed::Length),
        (too_long, Malformed::TooLong),
        (truncated, Malformed::Truncated),
    ];
    // A neighbour that is in the middle of its own connection throughout.
    let mut good = connect(&a).await;
    good.client
        .write_all(&proxy_header("198.51.100.1:1", "198.51.100.2:2", None))
        .await
        .unwrap();
    let (r, _) = good.sniffed.await.unwrap();
    let Ok(Sniffed::Ready(mut good_server)) = r else {
        panic!("{r:?}")
    };
    for (bytes, reason) in &cases {
        let mut p = connect(&a).await;
        p.client.write_all(bytes).await.unwrap();
        if *reason == Malformed::Truncated {
            p.client.shutdown().await.unwrap();
        }
        let (r, _) = p.sniffed.await.unwrap();
        let refused = r.expect_err("refused");
        assert_eq!(refused.reason, *reason);
        // The server side is gone: the client reads EOF (or a reset).
        let mut rest = Vec::new();
        let n = tokio::time::timeout(Duration::from_secs(2), p.client.read_to_end(&mut rest))
            .await
            .expect("closed");
        assert!(n.map_or(true, |n| n == 0), "{reason}: nothing answered");
    }
    let s = a.stats.snapshot();
    for (_, reason) in &cases {
        assert_eq!(s.refused(*reason), 1, "{reason}");
    }
    assert_eq!(s.refused(Malformed::Timeout), 0);
    good.client.write_all(b"still here").await.unwrap();
    let mut got = [0u8; 10];
    good_server.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"still here");
}

#[tokio::test]
async fn a_header_that_stops_halfway_times_out() {
    let a = Acceptor::new(AcceptOptions {
        timeout: Duration::from_millis(200),
        max_len: 512,
    });
    let mut p = connect(&a).await;
    let h = proxy_header("192.0.2.9:1234", "192.0.2.100:80", None);
    p.client.write_all(&h[..13]).await.unwrap();
    let (r, _) = p.sniffed.await.unwrap();
    assert_eq!(r.expect_err("refused").reason, Malformed::Timeout);
    assert_eq!(a.stats.snapshot().refused(Malformed::Timeout), 1);
}
