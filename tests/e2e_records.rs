//! Connection records end to end (docs/records.md): real TCP and UDP connections
//! through border-dp on net_tap, one record each when they end, exported by
//! border-mgmt to a real collector (Debian's nfcapd, read back with
//! `nfdump -r`) and as JSON lines. A connection without payload (a probe of
//! a closed port) is only counted. With border-mgmt gone the worker's ring
//! fills and the rest is counted as lost; border-mgmt, back, exports what
//! the ring held. Namespaces `rc-*`, subnet 10.103.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use common::nfcapd::{Flow, Nfcapd};
use common::*;
use conf::counters::Counter;
use serde_json::Value;

const INSTANCE: &str = "e2ercrec";
const CLIENT: &str = "10.103.1.2";
const BACKEND: &str = "10.103.2.11";
const LOCAL: &str = "10.103.2.1";
const TCP_CONNS: usize = 5;
const UDP_QUERIES: usize = 3;
const RING_SLOTS: usize = 1024;

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn config(listen: &str, collector: SocketAddr, json: &std::path::Path) -> String {
    let base = two_port_config(INSTANCE, "rc", "10.103.1.1/24", "10.103.2.1/24", listen);
    // Closed TCP connections and idle UDP flows end within seconds.
    let base = base.replacen(
        "\n[[port]]",
        "[dataplane.timeouts]\ntcp_closing = 1\nudp = 2\n\n[[port]]",
        1,
    );
    format!(
        r#"{base}
[[vip]]
name = "web"
address = "10.103.1.100"
port = 80
protocol = "tcp"
mode = "fullnat"
maglev_table_size = 251
[[vip.backend]]
address = "{BACKEND}"
port = 8080

[[vip]]
name = "closed"
address = "10.103.1.100"
port = 81
protocol = "tcp"
mode = "fullnat"
maglev_table_size = 251
[[vip.backend]]
address = "{BACKEND}"
port = 9

[[vip]]
name = "dns"
address = "10.103.1.100"
port = 53
protocol = "udp"
mode = "fullnat"
maglev_table_size = 251
[[vip.backend]]
address = "{BACKEND}"
port = 5353

[records]
ring_slots = {RING_SLOTS}
[[records.ipfix]]
collector = "{collector}"
template_interval_s = 5
[records.json]
path = "{}"
"#,
        json.display()
    )
}

/// `n` connections to the web VIP, each: greeting, 1000 bytes echoed, close.
fn tcp_exchanges(ns: &str, n: usize) {
    in_netns(ns, move || {
        for i in 0..n {
            let mut s = connect_retry(sa("10.103.1.100:80"), Duration::from_secs(10))
                .unwrap_or_else(|e| panic!("connection {i}: {e}"));
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let greeting = read_greeting(&mut s).unwrap();
            assert!(greeting.starts_with("web "), "{greeting}");
            let data = vec![b'a' + i as u8; 1000];
            s.write_all(&data).unwrap();
            let mut echo = vec![0; data.len()];
            s.read_exact(&mut echo).unwrap();
            assert_eq!(echo, data);
            s.shutdown(std::net::Shutdown::Write).unwrap();
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).unwrap();
        }
    })
    .join()
    .unwrap();
}

/// One datagram each from source ports `first_port..first_port + n` (one
/// flow each) to the dns VIP, waiting for each answer when `answered`.
fn udp_queries(ns: &str, first_port: u16, n: usize, answered: bool) {
    in_netns(ns, move || {
        for i in 0..n {
            let s = UdpSocket::bind((CLIENT, first_port + i as u16)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let q = format!("query-{i}");
            s.send_to(q.as_bytes(), sa("10.103.1.100:53")).unwrap();
            if answered {
                let mut buf = [0u8; 256];
                let (len, _) = s.recv_from(&mut buf).unwrap();
                assert_eq!(&buf[..len], format!("dns:{q}").as_bytes());
            }
        }
    })
    .join()
    .unwrap();
}

fn json_lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn u(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("no number {key} in {v}"))
}

#[test]
fn ended_connections_reach_nfcapd_and_the_json_log_and_a_full_ring_counts_its_losses() {
    clean_instance(INSTANCE);
    let lb = Netns::new("rc-lb");
    let cli = Netns::new("rc-cli");
    let bk = Netns::new("rc-bk");
    let dir = TempDir::new("records");
    let nfcapd = Nfcapd::start(&dir.path("nfcapd"), false);
    let json = dir.path("log/records.jsonl");
    let listen = format!("unix://{}", dir.path("api.sock").display());
    let text = config(&listen, nfcapd.addr(), &json);
    let cfg = dir.path("border.toml");
    std::fs::write(&cfg, &text).unwrap();
    let state_dir = dir.path("state");
    let mgmt_args = ["--state-dir", state_dir.to_str().unwrap()];
    let mut mgmt = BorderMgmt::start_with(None, &cfg, dir.path("mgmt.log"), &mgmt_args);
    let dp = BorderDp::start_following(&lb, &dir, INSTANCE, &text);
    cli.adopt(&lb, "rc-ext", &[&format!("{CLIENT}/24")]);
    bk.adopt(&lb, "rc-int", &[&format!("{BACKEND}/24")]);
    dp.wait_applied(1);
    let _tcp = TcpBackends::start("rc-bk", &[("web", sa(&format!("{BACKEND}:8080")))]);
    let _udp = UdpBackends::start("rc-bk", &[("dns", sa(&format!("{BACKEND}:5353")))]);

    tcp_exchanges("rc-cli", TCP_CONNS);
    udp_queries("rc-cli", 20_000, UDP_QUERIES, true);
    // A probe of a port nobody listens on: SYN, then the backend's RST.
    let probe = in_netns("rc-cli", || {
        std::net::TcpStream::connect_timeout(&sa("10.103.1.100:81"), Duration::from_secs(5))
    })
    .join()
    .unwrap();
    assert!(probe.is_err(), "nothing listens behind port 81");

    let want = TCP_CONNS + UDP_QUERIES;
    let mut lines = Vec::new();
    wait_until(
        "a JSON record of every connection",
        Duration::from_secs(20),
        || {
            lines = json_lines(&json);
            lines.len() >= want
        },
    );
    std::thread::sleep(Duration::from_millis(500));
    let lines = json_lines(&json);
    assert_eq!(lines.len(), want, "{lines:#?}");
    assert_eq!(dp.counter(Counter::ConnRecords), want as u64);
    assert_eq!(dp.counter(Counter::ConnRecordsEmpty), 1, "the probe");
    assert_eq!(dp.counter(Counter::ConnRecordsRingFull), 0);

    let tcp: Vec<&Value> = lines.iter().filter(|l| l["proto"] == "tcp").collect();
    assert_eq!(tcp.len(), TCP_CONNS);
    for l in &tcp {
        assert!(
            l["client"]
                .as_str()
                .unwrap()
                .starts_with(&format!("{CLIENT}:")),
            "{l}"
        );
        assert_eq!(l["vip"], "10.103.1.100:80", "{l}");
        assert_eq!(l["vip_name"], "web", "{l}");
        assert_eq!(l["backend"], format!("{BACKEND}:8080"), "{l}");
        assert!(
            l["local"]
                .as_str()
                .unwrap()
                .starts_with(&format!("{LOCAL}:")),
            "{l}"
        );
        assert_eq!(l["end_reason"], "fin", "{l}");
        assert_eq!(l["payload"], true, "{l}");
        assert_eq!(l["proxy_header"], false, "{l}");
        // 1000 bytes each way plus headers; the greeting the other way.
        assert!(u(l, "client_to_backend_bytes") > 1000, "{l}");
        assert!(u(l, "backend_to_client_bytes") > 1000, "{l}");
        assert!(u(l, "client_to_backend_packets") >= 4, "{l}");
        assert!(u(l, "end_unix_ms") >= u(l, "start_unix_ms"), "{l}");
    }
    let udp: Vec<&Value> = lines.iter().filter(|l| l["proto"] == "udp").collect();
    assert_eq!(udp.len(), UDP_QUERIES);
    for l in &udp {
        assert_eq!(l["vip_name"], "dns", "{l}");
        assert_eq!(l["end_reason"], "timeout", "{l}");
        assert_eq!(u(l, "client_to_backend_packets"), 1, "{l}");
        assert_eq!(u(l, "backend_to_client_packets"), 1, "{l}");
        // IPv4 20 + UDP 8 + "query-N" (7), and "dns:" before it back.
        assert_eq!(u(l, "client_to_backend_bytes"), 20 + 8 + 7, "{l}");
        assert_eq!(u(l, "backend_to_client_bytes"), 20 + 8 + 4 + 7, "{l}");
    }

    // The collector got the same flows.
    let flows = nfcapd.stop_and_read();
    assert_eq!(flows.len(), want, "{flows:#?}");
    let by_client: BTreeMap<SocketAddr, &Flow> = flows.iter().map(|f| (f.src, f)).collect();
    for l in &lines {
        let client = sa(l["client"].as_str().unwrap());
        let f = by_client
            .get(&client)
            .unwrap_or_else(|| panic!("no flow from {client} in {flows:#?}"));
        assert_eq!(f.dst, sa(l["vip"].as_str().unwrap()), "{f:?}");
        assert_eq!(
            f.xlate_dst,
            Some(sa(l["backend"].as_str().unwrap())),
            "{f:?}"
        );
        let local = l["local"].as_str().map(sa);
        assert_eq!(f.xlate_src, local, "{f:?}");
        assert_eq!(f.in_packets, u(l, "client_to_backend_packets"), "{f:?}");
        assert_eq!(f.in_bytes, u(l, "client_to_backend_bytes"), "{f:?}");
        assert_eq!(f.out_packets, u(l, "backend_to_client_packets"), "{f:?}");
        assert_eq!(f.out_bytes, u(l, "backend_to_client_bytes"), "{f:?}");
        assert_eq!(f.start_ms, u(l, "start_unix_ms"), "{f:?}");
    }

    // border-mgmt gone: the ring takes RING_SLOTS records, the rest is lost
    // and counted; back, border-mgmt exports what the ring held.
    mgmt.kill9();
    let extra = 100;
    udp_queries("rc-cli", 21_000, RING_SLOTS + extra, false);
    wait_until(
        "the ring full and the rest counted",
        Duration::from_secs(20),
        || dp.counter(Counter::ConnRecordsRingFull) >= extra as u64,
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(dp.counter(Counter::ConnRecordsRingFull), extra as u64);
    let _mgmt = BorderMgmt::start_with(None, &cfg, dir.path("mgmt2.log"), &mgmt_args);
    wait_until(
        "border-mgmt drains the ring it finds",
        Duration::from_secs(20),
        || json_lines(&json).len() >= want + RING_SLOTS,
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(json_lines(&json).len(), want + RING_SLOTS);
}
