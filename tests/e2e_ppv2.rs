//! PROXY protocol v2 with real receivers as the judges: HAProxy (strict:
//! it checks CRC32c and TLVs and refuses a header split over segments) and
//! nginx behind VIPs of border-dp on TAP ports, IPv4 and IPv6; the authority
//! from a real TLS client (curl with SNI); a server-speaks-first backend
//! with `proxy_protocol_send_on_connect`; and loss made on purpose with
//! nftables (the first data segment, the standalone header, 5% random loss
//! on a multi-megabyte transfer both ways; `numgen random`, since the test
//! machines' kernel has no netem).
//!
//! Each test builds its own namespaces `<tag>-lb`, `<tag>-cli`, `<tag>-bk`
//! (tags `pp4`, `pp6`, `ppa`, `pps`, `ppl`, `ppr`) on subnets 10.81-89.x /
//! fd00:81-89::.

mod common;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::client_backend::{drop_nth_packet, haproxy_echo_config, loss_chain, ClientBackend};
use common::*;
use conf::counters::Counter;

/// One VIP of a test topology and the backend port behind it.
struct VipSpec {
    name: &'static str,
    port: u16,
    backend_port: u16,
    /// Extra `[[vip]]` keys (PROXY protocol settings).
    extra: &'static str,
}

struct Plan {
    tag: &'static str,
    /// Client side subnet 10.n.0.0/24 (fd00:n::/64); backends on n + 1.
    n: u8,
    v6: bool,
    vips: Vec<VipSpec>,
}

impl Plan {
    fn ext(&self, host: u8) -> IpAddr {
        if self.v6 {
            format!("fd00:{}::{host:x}", self.n).parse().unwrap()
        } else {
            format!("10.{}.0.{host}", self.n).parse().unwrap()
        }
    }
    fn int(&self, host: u8) -> IpAddr {
        if self.v6 {
            format!("fd00:{}::{host:x}", self.n + 1).parse().unwrap()
        } else {
            format!("10.{}.0.{host}", self.n + 1).parse().unwrap()
        }
    }
    fn plen(&self) -> u8 {
        if self.v6 {
            64
        } else {
            24
        }
    }
    fn client(&self) -> IpAddr {
        self.ext(2)
    }
    fn vip(&self, port: u16) -> SocketAddr {
        SocketAddr::new(self.ext(100), port)
    }
    fn backend(&self, port: u16) -> SocketAddr {
        SocketAddr::new(self.int(11), port)
    }

    fn config(&self) -> String {
        let t = self.tag;
        let mut c = two_port_config(
            &format!("e2e{t}"),
            t,
            &format!("{}/{}", self.ext(1), self.plen()),
            &format!("{}/{}", self.int(1), self.plen()),
            &format!("unix:///run/border/e2e{t}.sock"),
        );
        for v in &self.vips {
            c += &format!(
                "\n[[vip]]\nname = \"{}\"\naddress = \"{}\"\nport = {}\nmode = \"fullnat\"\nmaglev_table_size = 1021\n{}\n[[vip.backend]]\naddress = \"{}\"\nport = {}\n",
                v.name,
                self.ext(100),
                v.port,
                v.extra,
                self.int(11),
                v.backend_port
            );
        }
        c
    }

    fn start(&self) -> Topo {
        let p = self.plen();
        let topo = ClientBackend::start(
            self.tag,
            &self.config(),
            &format!("{}/{p}", self.client()),
            &format!("{}/{p}", self.int(11)),
        );
        let fam = if self.v6 { "-6" } else { "-4" };
        topo.cli.run(&[
            "ip",
            fam,
            "route",
            "add",
            "default",
            "via",
            &self.ext(1).to_string(),
        ]);
        topo
    }
}

type Topo = ClientBackend;

impl Topo {
    /// HAProxy echoing what it parsed from the PROXY header (HTTP, or
    /// HTTPS with a self-signed certificate when `tls`).
    fn haproxy(&mut self, listen: SocketAddr, tls: bool) {
        let ssl = if tls {
            let key = self.dir.path("site.key");
            let crt = self.dir.path("site.crt");
            run(&[
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-subj",
                "/CN=shop.example.test",
                "-keyout",
                key.to_str().unwrap(),
                "-out",
                crt.to_str().unwrap(),
            ]);
            let pem = self.dir.path("site.pem");
            let mut both = std::fs::read(&crt).unwrap();
            both.extend(std::fs::read(&key).unwrap());
            std::fs::write(&pem, both).unwrap();
            format!(" ssl crt {}", pem.display())
        } else {
            String::new()
        };
        let cfg = haproxy_echo_config(
            &[format!("{}:{} accept-proxy{ssl}", listen.ip(), listen.port())],
            "src=%[src] sport=%[src_port] dst=%[dst] dport=%[dst_port] uid=%[fc_pp_unique_id] authority=%[fc_pp_authority]",
        );
        self.start_haproxy(&cfg, &[listen]);
    }

    /// nginx 1.22 answering with what it parsed from the PROXY header.
    fn nginx(&mut self, listen: SocketAddr) {
        let d = self.dir.0.display().to_string();
        let cfg = format!(
            r#"daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/nginx-error.log info;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {d}/cb;
    proxy_temp_path {d}/px;
    fastcgi_temp_path {d}/fc;
    uwsgi_temp_path {d}/uw;
    scgi_temp_path {d}/sc;
    server {{
        listen {listen} proxy_protocol;
        return 200 "$proxy_protocol_addr $proxy_protocol_port $proxy_protocol_server_addr $proxy_protocol_server_port\n";
    }}
}}
"#
        );
        let path = self.dir.path("nginx.conf");
        std::fs::write(&path, cfg).unwrap();
        let log = self.spawn_bk(
            "nginx",
            &[
                "nginx",
                "-c",
                path.to_str().unwrap(),
                "-e",
                &format!("{d}/nginx-stderr.log"),
            ],
        );
        self.wait_listening(listen, &log);
    }
}

/// One HTTP/1.0 request from namespace `ns` to `vip`; returns (local
/// address of the client socket, response body).
fn http_get(ns: &str, vip: SocketAddr) -> (SocketAddr, String) {
    in_netns(ns, move || {
        let mut s = connect_retry(vip, Duration::from_secs(15))
            .unwrap_or_else(|e| panic!("connect {vip}: {e}"));
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let me = s.local_addr().unwrap();
        s.write_all(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
        let mut r = String::new();
        s.read_to_string(&mut r)
            .unwrap_or_else(|e| panic!("read from {vip}: {e}"));
        let body = r.split("\r\n\r\n").nth(1).unwrap_or("").trim().to_string();
        (me, body)
    })
    .join()
    .unwrap()
}

/// Parses `key=value` words of an HAProxy echo line.
fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
}

fn check_haproxy_line(line: &str, client: SocketAddr, vip: SocketAddr) -> String {
    assert_eq!(field(line, "src"), client.ip().to_string(), "{line}");
    assert_eq!(field(line, "sport"), client.port().to_string(), "{line}");
    assert_eq!(field(line, "dst"), vip.ip().to_string(), "{line}");
    assert_eq!(field(line, "dport"), vip.port().to_string(), "{line}");
    let uid = field(line, "uid").to_string();
    assert_eq!(
        uid.len(),
        16,
        "unique id is the 16-hex-digit connection id: {line}"
    );
    assert!(uid.bytes().all(|b| b.is_ascii_hexdigit()), "{line}");
    uid
}

fn haproxy_and_nginx(plan: Plan) {
    let mut topo = plan.start();
    topo.haproxy(plan.backend(8080), false);
    topo.nginx(plan.backend(8081));
    let mut uids = std::collections::BTreeSet::new();
    for _ in 0..10 {
        let vip = plan.vip(80);
        let (me, line) = http_get(&topo.cli.name, vip);
        assert_eq!(me.ip(), plan.client());
        uids.insert(check_haproxy_line(&line, me, vip));

        let vip = plan.vip(81);
        let (me, line) = http_get(&topo.cli.name, vip);
        let want = format!("{} {} {} {}", me.ip(), me.port(), vip.ip(), vip.port());
        assert_eq!(
            line,
            want,
            "nginx parsed the header:\n{}",
            topo.backend_log("nginx")
        );
    }
    assert_eq!(uids.len(), 10, "every connection has its own id: {uids:?}");
    topo.wait_counter(Counter::PpHeadersInserted, 20);
    assert_eq!(topo.counter(Counter::DropPpBadSegment), 0);
    assert!(topo.counter(Counter::PpMssClamped) >= 20);
}

fn pp_vips() -> Vec<VipSpec> {
    vec![
        VipSpec {
            name: "haproxy",
            port: 80,
            backend_port: 8080,
            extra: "proxy_protocol = \"v2\"\nproxy_protocol_tlvs = [\"unique_id\", \"crc32c\"]",
        },
        VipSpec {
            name: "nginx",
            port: 81,
            backend_port: 8081,
            extra: "proxy_protocol = \"v2\"\nproxy_protocol_tlvs = [\"unique_id\", \"crc32c\"]\nproxy_protocol_max_len = 107",
        },
    ]
}

#[test]
fn haproxy_and_nginx_see_the_client_and_the_vip_ipv4() {
    haproxy_and_nginx(Plan {
        tag: "pp4",
        n: 81,
        v6: false,
        vips: pp_vips(),
    });
}

#[test]
fn haproxy_and_nginx_see_the_client_and_the_vip_ipv6() {
    haproxy_and_nginx(Plan {
        tag: "pp6",
        n: 83,
        v6: true,
        vips: pp_vips(),
    });
}

#[test]
fn haproxy_sees_unique_id_and_authority_from_a_real_tls_client() {
    let plan = Plan {
        tag: "ppa",
        n: 85,
        v6: false,
        vips: vec![
            VipSpec {
                name: "tls",
                port: 443,
                backend_port: 8443,
                extra: "proxy_protocol = \"v2\"\nproxy_protocol_tlvs = [\"unique_id\", \"crc32c\", \"authority\"]\nproxy_protocol_max_len = 200",
            },
            // 28 address bytes + 19 unique id + 7 CRC = 54: no room for
            // the 20-byte authority TLV under 60.
            VipSpec {
                name: "tight",
                port: 444,
                backend_port: 8443,
                extra: "proxy_protocol = \"v2\"\nproxy_protocol_tlvs = [\"unique_id\", \"crc32c\", \"authority\"]\nproxy_protocol_max_len = 60",
            },
        ],
    };
    let mut topo = plan.start();
    topo.haproxy(plan.backend(8443), true);
    for (port, authority) in [
        (443, "shop.example.test"),
        (444, ""),
        (443, "shop.example.test"),
    ] {
        let vip = plan.vip(port);
        let out = topo.cli.try_run(&[
            "curl",
            "-sS",
            "-k",
            "--max-time",
            "20",
            "--retry",
            "3",
            "--retry-connrefused",
            "--resolve",
            &format!("shop.example.test:{port}:{}", vip.ip()),
            &format!("https://shop.example.test:{port}/"),
        ]);
        let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(
            out.status.success(),
            "curl failed: {}\n{line}\nhaproxy: {}",
            String::from_utf8_lossy(&out.stderr),
            topo.backend_log("haproxy")
        );
        assert_eq!(field(&line, "src"), plan.client().to_string(), "{line}");
        assert_eq!(field(&line, "dst"), vip.ip().to_string(), "{line}");
        assert_eq!(field(&line, "dport"), port.to_string(), "{line}");
        assert_eq!(field(&line, "authority"), authority, "{line}");
        assert_eq!(field(&line, "uid").len(), 16, "{line}");
    }
    topo.wait_counter(Counter::PpHeadersInserted, 3);
    assert_eq!(topo.counter(Counter::PpTlvsDroppedForSize), 1);
}

/// What a PPv2-reading test backend learned from the header.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PpSeen {
    src: SocketAddr,
    dst: SocketAddr,
}

/// Reads one PROXY v2 header off `s` (strictly: signature, PROXY, TCP).
fn read_pp(s: &mut TcpStream) -> std::io::Result<PpSeen> {
    let mut fixed = [0u8; 16];
    s.read_exact(&mut fixed)?;
    let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_string());
    if fixed[..12] != dataplane_signature() || fixed[12] != 0x21 {
        return Err(bad("not a PROXY v2 header"));
    }
    let len = usize::from(u16::from_be_bytes([fixed[14], fixed[15]]));
    let mut rest = vec![0u8; len];
    s.read_exact(&mut rest)?;
    let (src, dst) = match fixed[13] {
        0x11 if len >= 12 => {
            let a = |i: usize| IpAddr::from([rest[i], rest[i + 1], rest[i + 2], rest[i + 3]]);
            let p = |i: usize| u16::from_be_bytes([rest[i], rest[i + 1]]);
            (SocketAddr::new(a(0), p(8)), SocketAddr::new(a(4), p(10)))
        }
        0x21 if len >= 36 => {
            let a = |i: usize| IpAddr::from(<[u8; 16]>::try_from(&rest[i..i + 16]).unwrap());
            let p = |i: usize| u16::from_be_bytes([rest[i], rest[i + 1]]);
            (SocketAddr::new(a(0), p(32)), SocketAddr::new(a(16), p(34)))
        }
        _ => return Err(bad("family")),
    };
    Ok(PpSeen { src, dst })
}

fn dataplane_signature() -> [u8; 12] {
    [
        0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A,
    ]
}

/// A backend in namespace `ns` that reads the PROXY header of every
/// connection and then either speaks first (`banner`: one line with what
/// the header said) or echoes every byte.
struct PpBackend {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl PpBackend {
    fn start(ns: &str, addr: SocketAddr, banner: bool) -> PpBackend {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let st = stop.clone();
        let thread = in_netns(ns, move || {
            let l = TcpListener::bind(addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
            l.set_nonblocking(true).unwrap();
            tx.send(()).unwrap();
            while !st.load(Ordering::Relaxed) {
                let Ok((mut s, _)) = l.accept() else {
                    std::thread::sleep(Duration::from_millis(2));
                    continue;
                };
                std::thread::spawn(move || {
                    s.set_nonblocking(false).unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                    let pp = match read_pp(&mut s) {
                        Ok(pp) => pp,
                        Err(e) => {
                            let _ = s.write_all(format!("ERR {e}\n").as_bytes());
                            return;
                        }
                    };
                    if banner {
                        let _ = s.write_all(format!("220 {} {}\r\n", pp.src, pp.dst).as_bytes());
                    }
                    let mut buf = vec![0u8; 65536];
                    loop {
                        match s.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                if s.write_all(&buf[..n]).is_err() {
                                    break;
                                }
                            }
                        }
                    }
                    let _ = s.shutdown(std::net::Shutdown::Write);
                });
            }
        });
        rx.recv_timeout(Duration::from_secs(10))
            .expect("backend listening");
        PpBackend {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for PpBackend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Connects from `ns` and reads the banner line without sending anything.
fn read_banner(ns: &str, vip: SocketAddr) -> (SocketAddr, String) {
    in_netns(ns, move || {
        let mut s = connect_retry(vip, Duration::from_secs(15)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let me = s.local_addr().unwrap();
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        while !line.ends_with(b"\r\n") {
            match s.read(&mut b) {
                Ok(1) => line.push(b[0]),
                other => panic!("banner from {vip}: {other:?} after {line:?}"),
            }
        }
        // The connection works both ways after the banner.
        s.write_all(b"QUIT\r\n").unwrap();
        let mut echo = [0u8; 6];
        s.read_exact(&mut echo).unwrap();
        assert_eq!(&echo, b"QUIT\r\n");
        (me, String::from_utf8(line).unwrap().trim().to_string())
    })
    .join()
    .unwrap()
}

#[test]
fn server_speaks_first_gets_the_header_on_connect_even_when_it_is_lost() {
    let plan = Plan {
        tag: "pps",
        n: 87,
        v6: false,
        vips: vec![VipSpec {
            name: "smtp",
            port: 25,
            backend_port: 2525,
            extra: "proxy_protocol = \"v2\"\nproxy_protocol_send_on_connect = true\nproxy_protocol_tlvs = [\"unique_id\", \"crc32c\"]",
        }],
    };
    let topo = plan.start();
    let _b = PpBackend::start(&topo.bk.name, plan.backend(2525), true);
    let vip = plan.vip(25);
    for _ in 0..3 {
        let (me, line) = read_banner(&topo.cli.name, vip);
        assert_eq!(line, format!("220 {me} {vip}"));
    }
    topo.wait_counter(Counter::PpHeadersStandalone, 3);
    // Now the segment carrying the header (the handshake's ACK, 2nd packet
    // of each connection on the backend side) is lost once: the
    // appliance's timer sends it again.
    drop_nth_packet(&topo.bk, "input", &["tcp", "dport", "2525"], 2);
    let before = topo.counter(Counter::PpHeadersRetransmitted);
    for _ in 0..3 {
        let (me, line) = read_banner(&topo.cli.name, vip);
        assert_eq!(line, format!("220 {me} {vip}"));
    }
    topo.wait_counter(Counter::PpHeadersRetransmitted, before + 3);
    topo.wait_counter(Counter::PpHeadersStandalone, 6);
}

#[test]
fn a_lost_first_data_segment_still_reaches_haproxy_with_the_header() {
    let plan = Plan {
        tag: "ppl",
        n: 88,
        v6: false,
        vips: vec![VipSpec {
            name: "haproxy",
            port: 80,
            backend_port: 8080,
            extra: "proxy_protocol = \"v2\"\nproxy_protocol_tlvs = [\"unique_id\", \"crc32c\", \"authority\"]",
        }],
    };
    let mut topo = plan.start();
    topo.haproxy(plan.backend(8080), false);
    // Drop the client's 3rd packet of every connection: its first data
    // segment, after SYN and ACK.
    let vip_ip = plan.vip(80).ip().to_string();
    drop_nth_packet(
        &topo.cli,
        "output",
        &["ip", "daddr", &vip_ip, "tcp", "dport", "80"],
        3,
    );
    let vip = plan.vip(80);
    for _ in 0..5 {
        let (me, line) = http_get(&topo.cli.name, vip);
        check_haproxy_line(&line, me, vip);
    }
    // And the same when the segment is lost *after* the appliance: drop the
    // backend side's 3rd packet (the one carrying the header) once.
    drop_nth_packet(&topo.bk, "input", &["tcp", "dport", "8080"], 3);
    for _ in 0..5 {
        let (me, line) = http_get(&topo.cli.name, vip);
        check_haproxy_line(&line, me, vip);
    }
    topo.wait_counter(Counter::PpHeadersInserted, 10);
    topo.wait_counter(Counter::PpHeadersRetransmitted, 5);
    assert_eq!(topo.counter(Counter::DropPpBadSegment), 0);
    let log = topo.backend_log("haproxy");
    assert!(!log.contains("PROXY"), "HAProxy complained:\n{log}");
}

/// Deterministic bytes for the transfer.
fn pattern(n: usize) -> Vec<u8> {
    let mut x: u32 = 0x1234_5678;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

#[test]
fn random_loss_both_ways_on_a_multi_megabyte_transfer_stays_byte_exact() {
    let plan = Plan {
        tag: "ppr",
        n: 89,
        v6: false,
        vips: vec![VipSpec {
            name: "echo",
            port: 80,
            backend_port: 9000,
            extra: "proxy_protocol = \"v2\"\nproxy_protocol_tlvs = [\"unique_id\", \"crc32c\"]",
        }],
    };
    let topo = plan.start();
    let _b = PpBackend::start(&topo.bk.name, plan.backend(9000), true);
    topo.cli.run(&["sysctl", "-qw", "net.ipv4.tcp_sack=1"]);
    topo.bk.run(&["sysctl", "-qw", "net.ipv4.tcp_sack=1"]);
    // 5% random loss of the segments each side receives (nftables' random
    // numbers: this kernel has no netem). Input hooks see single segments
    // as the appliance sent them; output hooks would see the senders' GSO
    // bursts.
    for (ns, hook, dir) in [
        (&topo.cli, "input", "sport 80"),
        (&topo.bk, "input", "dport 9000"),
    ] {
        loss_chain(ns, "c", hook);
        let mut all = vec!["nft", "add", "rule", "inet", "loss", "c", "tcp"];
        all.extend(dir.split(' '));
        all.push("counter");
        ns.run(&all);
        let mut rule = vec!["nft", "add", "rule", "inet", "loss", "c", "tcp"];
        rule.extend(dir.split(' '));
        rule.extend([
            "numgen", "random", "mod", "100", "<", "5", "counter", "drop",
        ]);
        ns.run(&rule);
    }
    let vip = plan.vip(80);
    const N: usize = 4 << 20;
    let data = pattern(N);
    let start = Instant::now();
    let (me, banner, echoed) = in_netns(&topo.cli.name, move || {
        let s = connect_retry(vip, Duration::from_secs(30)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let me = s.local_addr().unwrap();
        let mut w = s.try_clone().unwrap();
        let writer = std::thread::spawn(move || {
            w.write_all(&data).unwrap();
            w.shutdown(std::net::Shutdown::Write).unwrap();
        });
        let mut r = s;
        let mut all = Vec::with_capacity(N + 64);
        r.read_to_end(&mut all).unwrap();
        writer.join().unwrap();
        let nl = all.iter().position(|&b| b == b'\n').expect("banner line") + 1;
        let banner = String::from_utf8_lossy(&all[..nl]).trim().to_string();
        (me, banner, all[nl..].to_vec())
    })
    .join()
    .unwrap();
    assert_eq!(
        banner,
        format!("220 {me} {vip}"),
        "the header came first and right"
    );
    assert_eq!(echoed.len(), N, "every byte came back");
    assert!(echoed == pattern(N), "byte-exact both ways");
    // (sent, dropped) packets of the chain's two counters.
    let counts = |ns: &Netns| -> (u64, u64) {
        let out = ns.run(&["nft", "list", "chain", "inet", "loss", "c"]);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let v: Vec<u64> = text
            .split("packets ")
            .skip(1)
            .map(|t| t.split_whitespace().next().unwrap().parse().unwrap())
            .collect();
        (v[0], v[1])
    };
    let (up, down) = (counts(&topo.cli), counts(&topo.bk));
    eprintln!(
        "4 MiB each way in {:?}; (segments received, lost): client {up:?}, backend {down:?}",
        start.elapsed()
    );
    assert!(
        up.1 > 10 && down.1 > 10,
        "loss happened both ways: {up:?} {down:?}"
    );
    topo.wait_counter(Counter::PpHeadersInserted, 1);
    assert_eq!(topo.counter(Counter::DropPpBadSegment), 0);
}
