//! border-mgmt's Prometheus endpoint as the tests reach it.

use std::io::{Read, Write};
use std::time::Duration;

/// A free TCP port on 127.0.0.1 (bound and released: good enough for tests).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The whole HTTP answer (status line, headers, body) of `GET /metrics` on
/// 127.0.0.1:`port`.
pub fn scrape_metrics(port: u16) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}
