//! A client forging the PROXY header a backend trusts (docs/security.md),
//! judged by Debian's HAProxy with `accept-proxy` (strict, CRC32c checked)
//! behind PROXY VIPs of border-dp on TAP ports. The client is
//! `tests/scapy/ppv2_forge.py` (python3-scapy) sending hand-built segments
//! from the client namespace, where an nftables rule drops the client
//! kernel's own RSTs. In every case the client's data starts with
//! `PROXY TCP4 6.6.6.6 ...`; HAProxy must log the real client, or the
//! connection must be reset. Never 6.6.6.6.
//!
//! - a second SYN with another ISN before any data (full-NAT);
//! - our first segment lost between border and the backend (nftables in the
//!   backend namespace), then the forged data starting one byte early and
//!   at the first byte (full-NAT);
//! - a flow picked up mid-stream, its entry expired (DNAT);
//! - a DNAT flow while the connection table is full (no stateless fallback).
//!
//! One topology per case, namespaces `pxs-*`, `pxl-*` (full-NAT), `pxm-*`,
//! `pxf-*` (DNAT) on 10.92.0.0/24 .. 10.92.7.0/24 (client subnet even,
//! backends on the next one).

mod common;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use common::client_backend::{drop_nth_packet, haproxy_echo_config, ClientBackend};
use common::*;
use conf::counters::Counter;

const SCRIPT: &str = include_str!("scapy/ppv2_forge.py");

/// One topology: border-dp between a client and a backend namespace.
struct Topo {
    /// Client subnet 10.92.n.0/24, backends on 10.92.(n+1).0/24.
    n: u8,
    net: ClientBackend,
}

/// One `[[vip]]` of a topology.
struct Vip {
    port: u16,
    backend_port: u16,
    protocol: &'static str,
    proxy: bool,
}

impl Topo {
    fn client_ip(n: u8) -> String {
        format!("10.92.{n}.2")
    }
    fn vip_ip(n: u8) -> String {
        format!("10.92.{n}.100")
    }
    fn backend_ip(n: u8) -> String {
        format!("10.92.{}.11", n + 1)
    }

    fn start(tag: &'static str, n: u8, mode: &str, timeouts: &str, vips: &[Vip]) -> Topo {
        let mut cfg = two_port_config(
            &format!("e2e{tag}"),
            tag,
            &format!("10.92.{n}.1/24"),
            &format!("10.92.{}.1/24", n + 1),
            &format!("unix:///run/border/e2e{tag}.sock"),
        );
        // The smallest table: the DNAT case fills it.
        cfg = cfg.replace(
            "conntrack_per_worker = 16384",
            "conntrack_per_worker = 1024",
        );
        cfg = cfg.replace("[mgmt]", &format!("{timeouts}\n[mgmt]"));
        for (i, v) in vips.iter().enumerate() {
            let pp = if v.proxy {
                "proxy_protocol = \"v2\"\nproxy_protocol_tlvs = [\"unique_id\", \"crc32c\"]\n"
            } else {
                ""
            };
            cfg += &format!(
                "\n[[vip]]\nname = \"v{i}\"\naddress = \"{}\"\nport = {}\nprotocol = \"{}\"\nmode = \"{mode}\"\nmaglev_table_size = 1021\n{pp}\n[[vip.backend]]\naddress = \"{}\"\nport = {}\n",
                Self::vip_ip(n),
                v.port,
                v.protocol,
                Self::backend_ip(n),
                v.backend_port
            );
        }
        let net = ClientBackend::start(
            tag,
            &cfg,
            &format!("{}/24", Self::client_ip(n)),
            &format!("{}/24", Self::backend_ip(n)),
        );
        let cli = &net.cli;
        cli.run(&[
            "ip",
            "route",
            "add",
            "default",
            "via",
            &format!("10.92.{n}.1"),
        ]);
        // DNAT: the backend answers the client through border.
        net.bk.run(&[
            "ip",
            "route",
            "add",
            &format!("10.92.{n}.0/24"),
            "via",
            &format!("10.92.{}.1", n + 1),
        ]);
        // The client kernel has no socket for scapy's connections: its RSTs
        // would end them.
        cli.run(&["nft", "add", "table", "inet", "px"]);
        cli.run(&[
            "nft",
            "add",
            "chain",
            "inet",
            "px",
            "out",
            "{ type filter hook output priority 0; }",
        ]);
        cli.run(&[
            "nft", "add", "rule", "inet", "px", "out", "tcp", "flags", "&", "rst", "==", "rst",
            "drop",
        ]);
        Topo { n, net }
    }

    fn vip(&self, port: u16) -> SocketAddr {
        format!("{}:{port}", Self::vip_ip(self.n)).parse().unwrap()
    }

    fn client(&self) -> IpAddr {
        Self::client_ip(self.n).parse().unwrap()
    }

    /// HAProxy echoing what it parsed from the PROXY header on each of
    /// `ports`, logging every request (bad ones too) to `haproxy.log`.
    fn haproxy(&mut self, ports: &[u16]) {
        let backend = Self::backend_ip(self.n);
        let binds: Vec<String> = ports
            .iter()
            .map(|p| format!("{backend}:{p} accept-proxy"))
            .collect();
        let cfg = haproxy_echo_config(
            &binds,
            "src=%[src] sport=%[src_port] dst=%[dst] dport=%[dst_port]",
        );
        let listens: Vec<SocketAddr> = ports
            .iter()
            .map(|p| SocketAddr::new(backend.parse().unwrap(), *p))
            .collect();
        self.net.start_haproxy(&cfg, &listens);
    }

    fn haproxy_log(&self) -> String {
        self.net.backend_log("haproxy")
    }

    /// A real client's request through the VIP (this also makes border
    /// learn the backend's MAC): HAProxy must echo the client's address.
    fn real_request(&self, port: u16) {
        let vip = self.vip(port);
        let (me, body) = in_netns(&self.net.cli.name, move || {
            let mut s = connect_retry(vip, Duration::from_secs(15))
                .unwrap_or_else(|e| panic!("connect {vip}: {e}"));
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let me = s.local_addr().unwrap();
            s.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
            let mut r = String::new();
            s.read_to_string(&mut r).unwrap();
            (me, r)
        })
        .join()
        .unwrap();
        assert!(
            body.contains(&format!("src={} sport={}", me.ip(), me.port())),
            "HAProxy did not see the client: {body}"
        );
    }

    /// Runs a scenario of the forging client from port `sport`.
    fn forge(&self, scenario: &str, port: u16, sport: u16, extra: &[&str]) -> Forged {
        let script = self.net.dir.path("ppv2_forge.py");
        std::fs::write(&script, SCRIPT).unwrap();
        let client = self.client().to_string();
        let vip = self.vip(port);
        let mut args = vec![
            // Debian's interpreter, with Debian's python3-scapy (not a python3
            // some other tool put first on PATH).
            "/usr/bin/python3".to_string(),
            script.display().to_string(),
            scenario.to_string(),
            client,
            vip.ip().to_string(),
            port.to_string(),
            sport.to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let refs: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        let out = self.net.cli.run(&refs);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let line = text.lines().last().unwrap_or_default();
        let field = |k: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(k).and_then(|r| r.strip_prefix('=')))
                .unwrap_or_else(|| panic!("{scenario}: no {k}= in {text:?}"))
                .to_string()
        };
        let hex = field("answer");
        let answer: Vec<u8> = (0..hex.len() / 2)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        Forged {
            scenario: scenario.to_string(),
            sport,
            synack: field("synack") == "1",
            reset: field("reset") == "1",
            answer: String::from_utf8_lossy(&answer).to_string(),
        }
    }

    /// Waits a moment for HAProxy to log, then checks what it and the
    /// client saw: never the forged address; the real client logged by
    /// HAProxy (`real_logged`), or the connection reset.
    fn judge(&self, f: &Forged) {
        std::thread::sleep(Duration::from_millis(500));
        let log = self.haproxy_log();
        let me = format!("{}:{}", self.client(), f.sport);
        let context = format!(
            "{}: {f:?}\nHAProxy log:\n{log}\nborder-dp drops: {:?}",
            f.scenario,
            self.net.dp.drops()
        );
        assert!(!f.answer.contains("6.6.6.6"), "forged: {context}");
        assert!(!log.contains("6.6.6.6"), "forged: {context}");
        let logged = log.lines().any(|l| l.contains(&me));
        assert!(
            logged || f.reset,
            "neither logged with the real client {me} nor reset: {context}"
        );
    }

    fn counter(&self, c: Counter) -> u64 {
        self.net.counter(c)
    }

    fn wait_counter(&self, c: Counter, at_least: u64) {
        self.net.wait_counter(c, at_least);
    }
}

#[derive(Debug)]
struct Forged {
    scenario: String,
    sport: u16,
    synack: bool,
    reset: bool,
    answer: String,
}

fn tcp_vip(port: u16, backend_port: u16) -> Vip {
    Vip {
        port,
        backend_port,
        protocol: "tcp",
        proxy: true,
    }
}

#[test]
fn a_second_syn_with_another_isn_never_passes_a_forged_header() {
    let mut t = Topo::start("pxs", 0, "fullnat", "", &[tcp_vip(80, 8080)]);
    t.haproxy(&[8080]);
    t.real_request(80);
    // A second SYN with another ISN, then the forged data at the first ISN.
    let f = t.forge("second_syn", 80, 41001, &[]);
    assert!(f.synack, "{f:?}");
    t.judge(&f);
    t.wait_counter(Counter::DropPpSynNewIsn, 1);
}

#[test]
fn a_lost_first_segment_then_data_one_byte_early_never_passes_a_forged_header() {
    let mut t = Topo::start("pxl", 2, "fullnat", "", &[tcp_vip(80, 8080)]);
    t.haproxy(&[8080]);
    t.real_request(80);
    // From now on the segment carrying our header (the backend side's 3rd
    // packet of a connection) is lost once after border.
    drop_nth_packet(&t.net.bk, "input", &["tcp", "dport", "8080"], 3);
    let before = t.counter(Counter::PpHeadersRetransmitted);
    let f = t.forge("first_lost", 80, 41002, &[]);
    assert!(f.synack, "{f:?}");
    t.judge(&f);
    t.wait_counter(Counter::DropPpBeforeHeader, 1);
    t.wait_counter(Counter::PpHeadersRetransmitted, before + 1);
}

/// Established flows are forgotten after 2 s idle.
const SHORT_TIMEOUTS: &str = "[dataplane.timeouts]\ntcp_syn = 2\ntcp_established = 2\n";

#[test]
fn a_dnat_flow_picked_up_mid_stream_never_passes_a_forged_header() {
    let mut t = Topo::start("pxm", 4, "dnat", SHORT_TIMEOUTS, &[tcp_vip(80, 8080)]);
    t.haproxy(&[8080]);
    t.real_request(80);
    // Handshake, 4 s of silence (the entry expires; the backend still has
    // the connection), then the forged data.
    let f = t.forge("mid_stream", 80, 42001, &["4"]);
    assert!(f.synack, "{f:?}");
    t.judge(&f);
    assert!(f.reset, "the client is reset: {f:?}");
    t.wait_counter(Counter::DropPpMidStream, 1);
}

#[test]
fn a_dnat_flow_while_the_table_is_full_never_passes_a_forged_header() {
    let udp = Vip {
        port: 53,
        backend_port: 5353,
        protocol: "udp",
        proxy: false,
    };
    let mut t = Topo::start("pxf", 6, "dnat", "", &[tcp_vip(80, 8080), udp]);
    t.haproxy(&[8080]);
    t.real_request(80);
    // The table filled with UDP flows (their VIP falls back to stateless
    // forwarding): a new PROXY flow is refused, not forwarded statelessly.
    let f = t.forge("table_full", 80, 42002, &["53"]);
    t.judge(&f);
    assert!(!f.synack, "{f:?}");
    t.wait_counter(Counter::ConntrackFullStateless, 1);
    t.wait_counter(Counter::DropPpConntrackFull, 1);
}
