//! `borderctl conns` end to end (docs/operations.md, "Live connections"):
//! real TCP connections held open through border-dp on net_tap, to a
//! full-NAT VIP, a DNAT VIP and a PROXY v2 VIP, and a UDP flow; the listing
//! shows each with the client, VIP, backend and local tuple the test's
//! client and backend saw, its state, and its packets and bytes (exact for
//! UDP); the filters keep what they name; --json is one object per line;
//! with border-dp stopped the command fails with exit 1. Namespaces
//! `cn-*`, subnets 10.148 (clients) and 10.149 (backends).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use common::*;
use serde_json::Value;

const INSTANCE: &str = "e2econns";
const CLIENT: &str = "10.148.1.2";
const CLIENT2: &str = "10.148.1.3";
const BACKEND: &str = "10.149.1.11";
const LB_INT: &str = "10.149.1.1";
const VIP: &str = "10.148.1.100";

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn config(listen: &str, records: &std::path::Path) -> String {
    let base = two_port_config(INSTANCE, "cn", "10.148.1.1/24", "10.149.1.1/24", listen);
    let vip = |name: &str, port: u16, proto: &str, mode: &str, bport: u16, extra: &str| {
        format!(
            r#"
[[vip]]
name = "{name}"
address = "{VIP}"
port = {port}
protocol = "{proto}"
mode = "{mode}"
maglev_table_size = 251
{extra}
[[vip.backend]]
address = "{BACKEND}"
port = {bport}
"#
        )
    };
    format!(
        "{base}{}{}{}{}\n[records]\nring_slots = 1024\n[records.json]\npath = \"{}\"\n",
        vip("web", 80, "tcp", "fullnat", 8080, ""),
        vip("direct", 81, "tcp", "dnat", 8081, ""),
        vip(
            "proxied",
            82,
            "tcp",
            "fullnat",
            8082,
            "proxy_protocol = \"v2\""
        ),
        vip("dns", 53, "udp", "fullnat", 5353, ""),
        records.display(),
    )
}

/// A TCP listener in `ns`.
fn listener(ns: &str, at: &str) -> TcpListener {
    let at = sa(at);
    in_netns(ns, move || TcpListener::bind(at).unwrap())
        .join()
        .unwrap()
}

/// A connection from `ns`, from `src`, to `dst`.
fn connect(ns: &str, src: &str, dst: &str) -> TcpStream {
    let (src, dst) = (sa(&format!("{src}:0")), sa(dst));
    in_netns(ns, move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let s = tokio::net::TcpSocket::new_v4().unwrap();
            s.bind(src).unwrap();
            let tried = rt.block_on(async {
                tokio::time::timeout(Duration::from_secs(2), s.connect(dst)).await
            });
            match tried {
                Ok(Ok(stream)) => {
                    let stream = stream.into_std().unwrap();
                    stream.set_nonblocking(false).unwrap();
                    return stream;
                }
                _ if std::time::Instant::now() > deadline => panic!("connect {dst}: {tried:?}"),
                _ => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    })
    .join()
    .unwrap()
}

/// One connection through a VIP, held open: `up` bytes from the client,
/// `down` back. Returns (client stream, the backend's end, the peer the
/// backend saw).
fn exchange(
    l: &TcpListener,
    src: &str,
    vip: &str,
    up: usize,
    down: usize,
    proxied: bool,
) -> (TcpStream, TcpStream, SocketAddr) {
    let mut c = connect("cn-cli", src, vip);
    let (mut b, peer) = l.accept().unwrap();
    for s in [&c, &b] {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    }
    c.write_all(&vec![7; up]).unwrap();
    if proxied {
        // The PROXY v2 header first: 16 bytes, then its length's worth.
        let mut fixed = [0u8; 16];
        b.read_exact(&mut fixed).unwrap();
        assert_eq!(
            &fixed[..12],
            b"\r\n\r\n\0\r\nQUIT\n",
            "a PROXY v2 signature"
        );
        let rest = u16::from_be_bytes([fixed[14], fixed[15]]) as usize;
        b.read_exact(&mut vec![0; rest]).unwrap();
    }
    let mut got = vec![0; up];
    b.read_exact(&mut got).unwrap();
    assert!(got.iter().all(|&x| x == 7));
    b.write_all(&vec![9; down]).unwrap();
    let mut back = vec![0; down];
    c.read_exact(&mut back).unwrap();
    (c, b, peer)
}

fn conns(listen: &str, more: &[&str]) -> Vec<Value> {
    let mut args = vec!["--server", listen, "conns", "--json"];
    args.extend_from_slice(more);
    borderctl_ok(&args)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn u(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("no number {key} in {v}"))
}

fn by_client(list: &[Value], client: SocketAddr) -> &Value {
    let found: Vec<&Value> = list
        .iter()
        .filter(|c| c["client"] == client.to_string())
        .collect();
    assert_eq!(found.len(), 1, "one connection from {client} in {list:#?}");
    found[0]
}

/// A TCP connection's IP bytes one way: its payload and 40 to 60 bytes of
/// headers per packet (IPv4 and TCP with or without options).
fn tcp_bytes_fit(c: &Value, dir: &str, payload: u64) {
    let (p, b) = (
        u(c, &format!("packets_to_{dir}")),
        u(c, &format!("bytes_to_{dir}")),
    );
    assert!(
        b >= payload + 40 * p && b <= payload + 60 * p,
        "{dir}: {b} bytes in {p} packets for {payload} bytes of payload: {c}"
    );
}

#[test]
fn conns_lists_what_clients_and_backends_see_with_its_filters() {
    clean_instance(INSTANCE);
    let lb = Netns::new("cn-lb");
    let cli = Netns::new("cn-cli");
    let bk = Netns::new("cn-bk");
    let dir = TempDir::new("conns");
    let listen = format!("unix://{}", dir.path("api.sock").display());
    // Records meter every flow: the listing's packets and bytes.
    let text = config(&listen, &dir.path("records.jsonl"));
    let cfg = dir.path("border.toml");
    std::fs::write(&cfg, &text).unwrap();
    let state_dir = dir.path("state");
    let mgmt_args = ["--state-dir", state_dir.to_str().unwrap()];
    let _mgmt = BorderMgmt::start_with(None, &cfg, dir.path("mgmt.log"), &mgmt_args);
    let mut dp = BorderDp::start_following(&lb, &dir, INSTANCE, &text);
    cli.adopt(
        &lb,
        "cn-ext",
        &[&format!("{CLIENT}/24"), &format!("{CLIENT2}/24")],
    );
    bk.adopt(&lb, "cn-int", &[&format!("{BACKEND}/24")]);
    // DNAT: the backend answers the client itself, through the appliance.
    bk.run(&["ip", "route", "add", "default", "via", LB_INT]);
    dp.wait_applied(1);

    assert_eq!(conns(&listen, &[]), Vec::<Value>::new(), "nothing yet");

    let web = listener("cn-bk", &format!("{BACKEND}:8080"));
    let direct = listener("cn-bk", &format!("{BACKEND}:8081"));
    let proxied = listener("cn-bk", &format!("{BACKEND}:8082"));
    let (c1, _b1, peer1) = exchange(&web, CLIENT, &format!("{VIP}:80"), 1000, 3000, false);
    let (c2, _b2, peer2) = exchange(&web, CLIENT2, &format!("{VIP}:80"), 10, 20, false);
    let (c3, _b3, peer3) = exchange(&direct, CLIENT, &format!("{VIP}:81"), 500, 700, false);
    let (c4, _b4, peer4) = exchange(&proxied, CLIENT, &format!("{VIP}:82"), 100, 100, true);
    // UDP: 3 datagrams of 100 bytes, each answered with 200.
    let udp_b = in_netns("cn-bk", || {
        UdpSocket::bind(sa(&format!("{BACKEND}:5353"))).unwrap()
    })
    .join()
    .unwrap();
    let udp_c = in_netns("cn-cli", || {
        UdpSocket::bind(sa(&format!("{CLIENT}:0"))).unwrap()
    })
    .join()
    .unwrap();
    for s in [&udp_b, &udp_c] {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    }
    let mut udp_peer = None;
    for _ in 0..3 {
        udp_c.send_to(&[1; 100], sa(&format!("{VIP}:53"))).unwrap();
        let mut buf = [0u8; 512];
        let (n, from) = udp_b.recv_from(&mut buf).unwrap();
        assert_eq!(n, 100);
        udp_b.send_to(&[2; 200], from).unwrap();
        assert_eq!(udp_c.recv_from(&mut buf).unwrap().0, 200);
        udp_peer = Some(from);
    }
    // The last ACKs of the exchanges reach border-dp.
    std::thread::sleep(Duration::from_millis(300));

    let all = conns(&listen, &[]);
    assert_eq!(all.len(), 5, "{all:#?}");
    let vip = |port: u16| format!("{VIP}:{port}");

    let w1 = by_client(&all, c1.local_addr().unwrap());
    assert_eq!(w1["vip"], vip(80), "{w1}");
    assert_eq!(w1["backend"], format!("{BACKEND}:8080"), "{w1}");
    assert_eq!(
        w1["local"],
        peer1.to_string(),
        "the backend's peer is the local tuple"
    );
    assert_eq!(peer1.ip().to_string(), LB_INT);
    assert_eq!(w1["mode"], "full_nat");
    assert_eq!(w1["protocol"], "tcp");
    assert_eq!(w1["state"], "established", "{w1}");
    assert_eq!(w1["proxy"], "off");
    assert_eq!(w1["metered"], true);
    tcp_bytes_fit(w1, "backend", 1000);
    tcp_bytes_fit(w1, "client", 3000);
    assert!(u(w1, "age_ms") >= u(w1, "idle_ms"), "{w1}");
    assert!(u(w1, "age_ms") < 60_000, "{w1}");

    let w2 = by_client(&all, c2.local_addr().unwrap());
    assert_eq!(w2["local"], peer2.to_string());
    tcp_bytes_fit(w2, "backend", 10);
    tcp_bytes_fit(w2, "client", 20);

    let d = by_client(&all, c3.local_addr().unwrap());
    assert_eq!(d["mode"], "dnat", "{d}");
    assert_eq!(d["vip"], vip(81));
    assert_eq!(d["backend"], format!("{BACKEND}:8081"));
    assert_eq!(
        d["local"],
        c3.local_addr().unwrap().to_string(),
        "DNAT: the backend sees the client"
    );
    assert_eq!(peer3, c3.local_addr().unwrap());
    assert_eq!(d["state"], "established");
    tcp_bytes_fit(d, "backend", 500);
    tcp_bytes_fit(d, "client", 700);

    let p = by_client(&all, c4.local_addr().unwrap());
    assert_eq!(p["local"], peer4.to_string());
    assert_eq!(
        p["proxy"], "acked",
        "the backend acknowledged the header: {p}"
    );

    let q = by_client(&all, udp_c.local_addr().unwrap());
    assert_eq!(q["protocol"], "udp");
    assert_eq!(q["state"], "udp");
    assert_eq!(q["local"], udp_peer.unwrap().to_string());
    assert_eq!(u(q, "packets_to_backend"), 3);
    assert_eq!(u(q, "packets_to_client"), 3);
    assert_eq!(u(q, "bytes_to_backend"), 3 * (20 + 8 + 100));
    assert_eq!(u(q, "bytes_to_client"), 3 * (20 + 8 + 200));

    // Filters.
    let port80 = conns(&listen, &["--vip", &vip(80)]);
    assert_eq!(port80.len(), 2, "{port80:#?}");
    assert_eq!(conns(&listen, &["--vip", VIP]).len(), 5);
    let second = conns(&listen, &["--client", &format!("{CLIENT2}/32")]);
    assert_eq!(second.len(), 1);
    assert_eq!(second[0]["client"], c2.local_addr().unwrap().to_string());
    assert_eq!(conns(&listen, &["--client", "10.148.1.0/24"]).len(), 5);
    assert_eq!(conns(&listen, &["--client", "10.148.2.0/24"]).len(), 0);
    let b = conns(&listen, &["--backend", &format!("{BACKEND}:8081")]);
    assert_eq!(b.len(), 1);
    assert_eq!(b[0]["mode"], "dnat");
    assert_eq!(
        conns(&listen, &["--vip", &vip(80), "--client", CLIENT]).len(),
        1
    );
    assert_eq!(conns(&listen, &["--limit", "2"]).len(), 2);
    let bad = borderctl_err(&["--server", &listen, "conns", "--vip", "10.148.1.300"]);
    assert!(bad.contains("vip \"10.148.1.300\""), "{bad}");

    // The table.
    let table = borderctl_ok(&["--server", &listen, "conns", "--vip", &vip(81)]);
    assert!(table.starts_with("CLIENT"), "{table}");
    assert!(
        table.contains(&c3.local_addr().unwrap().to_string()),
        "{table}"
    );
    assert!(table.trim_end().ends_with("1 connection"), "{table}");

    // A closed connection leaves the established state.
    drop(c1);
    wait_until(
        "the closed connection's FIN",
        Duration::from_secs(10),
        || {
            let l = conns(
                &listen,
                &["--vip", &vip(80), "--client", &format!("{CLIENT}/32")],
            );
            l.len() == 1 && l[0]["state"] != "established"
        },
    );

    dp.stop();
    let gone = borderctl_err(&["--server", &listen, "conns"]);
    assert!(gone.contains("border-dp"), "{gone}");
    let (code, _, _) = borderctl(&["--server", &listen, "conns"]);
    assert_eq!(code, 1);
}
