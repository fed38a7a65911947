//! The SYN proxy (`syn_proxy = "always"`, docs/reliability.md) with real kernels:
//! border-dp on TAP ports between a client namespace and a backend
//! namespace. While hping3 floods the full-NAT VIP with spoofed SYNs from
//! random sources:
//! - real clients (connect, greeting, 2 KiB echoed, close) succeed (at
//!   least 99 %), and curl through a PROXY v2 VIP behind HAProxy
//!   (`accept-proxy`) still shows the real client;
//! - the backend's kernel receives no spoofed SYN: an nftables counter in
//!   its namespace counts the SYNs that arrive, and they are no more than
//!   the real connections; its `SyncookiesSent` stays 0;
//! - border's table holds no entry for the flood (`conntrack_entries`
//!   stays at most the real connections) and `syn_proxy_cookies_sent`
//!   counts the answers.
//!
//! Data sent with the handshake-completing ACK arrives intact (a client
//! that writes right after connect, TCP Fast Open style, is the common
//! case: the request rides the ACK or follows it at once).
//!
//! IPv6 (no flood: hping3 has no IPv6): full-NAT and DNAT cookie
//! connections carry data both ways.
//!
//! Namespaces `sk-lb`, `sk-cli`, `sk-bk`; subnets 10.57.0.0/24 (clients)
//! and 10.58.0.0/24 (backends); `sk6-*` on fd00:57::/64 and fd00:58::/64. SYNPROXY_PACE (hping3 `-i` value or
//! "--flood") and SYNPROXY_SECONDS override the flood.

mod common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::client_backend::{haproxy_echo_config, ClientBackend};
use common::*;
use conf::counters::Counter;

const VIP: &str = "10.57.0.100:80";
const PP_VIP: &str = "10.57.0.100:81";
const BACKEND: &str = "10.58.0.11:8080";
const PP_BACKEND: &str = "10.58.0.11:8081";

fn config() -> String {
    let mut c = two_port_config(
        "e2esk",
        "sk",
        "10.57.0.1/24",
        "10.58.0.1/24",
        "unix:///run/border/e2esk.sock",
    );
    c.push_str(
        "\n[[vip]]\nname = \"web\"\naddress = \"10.57.0.100\"\nport = 80\nmode = \"fullnat\"\n\
         syn_proxy = \"always\"\nmaglev_table_size = 101\n\
         [[vip.backend]]\naddress = \"10.58.0.11\"\nport = 8080\n\
         \n[[vip]]\nname = \"pp\"\naddress = \"10.57.0.100\"\nport = 81\nmode = \"fullnat\"\n\
         syn_proxy = \"always\"\nproxy_protocol = \"v2\"\nmaglev_table_size = 101\n\
         [[vip.backend]]\naddress = \"10.58.0.11\"\nport = 8081\n",
    );
    c
}

fn start() -> (ClientBackend, TcpBackends) {
    let mut t = ClientBackend::start("sk", &config(), "10.57.0.2/24", "10.58.0.11/24");
    t.cli
        .run(&["ip", "route", "add", "default", "via", "10.57.0.1"]);
    let echo = TcpBackends::start("sk-bk", &[("b0", BACKEND.parse().unwrap())]);
    let hcfg = haproxy_echo_config(
        &[format!("{PP_BACKEND} accept-proxy")],
        "src=%[src] sport=%[src_port] dst=%[dst] dport=%[dst_port]",
    );
    t.start_haproxy(&hcfg, &[PP_BACKEND.parse().unwrap()]);
    // Every SYN the backend's kernel receives, counted before it is seen.
    let bk = &t.bk;
    bk.run(&["nft", "add", "table", "inet", "syns"]);
    bk.run(&[
        "nft",
        "add",
        "chain",
        "inet",
        "syns",
        "in",
        "{ type filter hook input priority -300 ; }",
    ]);
    bk.run(&[
        "nft",
        "add",
        "rule",
        "inet",
        "syns",
        "in",
        "tcp",
        "flags",
        "&",
        "(syn|ack)",
        "==",
        "syn",
        "counter",
    ]);
    (t, echo)
}

/// SYNs the backend namespace's kernel received so far.
fn backend_syns(bk: &Netns) -> u64 {
    let out = bk.run(&["nft", "list", "chain", "inet", "syns", "in"]);
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .skip_while(|w| *w != "packets")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no counter in {text}"))
}

/// curl through the PROXY VIP: HAProxy's echo of the header it parsed.
fn curl_pp(ns: &Netns) -> Result<String, String> {
    let out = ns.try_run(&[
        "curl",
        "-sS",
        "--max-time",
        "10",
        &format!("http://{PP_VIP}/"),
    ]);
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

#[test]
fn a_spoofed_syn_flood_reaches_no_backend_and_real_clients_get_in() {
    let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_string());
    let pace = env("SYNPROXY_PACE", "u250");
    let seconds: u64 = env("SYNPROXY_SECONDS", "12").parse().unwrap();
    let (t, _echo) = start();
    let vip: SocketAddr = VIP.parse().unwrap();

    // Before the flood: data written right after connect arrives intact,
    // and HAProxy sees the real client through the PROXY header.
    let got = in_netns("sk-cli", move || {
        let mut s = connect_retry(vip, Duration::from_secs(15)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"sent with the handshake\n").unwrap();
        let g = read_greeting(&mut s).unwrap();
        let mut echo = [0u8; 24];
        s.read_exact(&mut echo).unwrap();
        (g, echo)
    })
    .join()
    .unwrap();
    assert!(got.0.starts_with("b0 10.58.0.1"), "greeting: {}", got.0);
    assert_eq!(&got.1, b"sent with the handshake\n");
    let line = curl_pp(&t.cli).expect("curl through the PROXY VIP");
    assert!(line.contains("src=10.57.0.2 "), "{line}");
    assert!(line.contains("dst=10.57.0.100 dport=81"), "{line}");
    assert!(t.counter(Counter::SynProxyCookiesAccepted) >= 2);

    let mib0 = tcp_mib(&t.bk);
    let syns0 = backend_syns(&t.bk);
    let mut args = vec!["hping3", "-q", "-S", "-p", "80", "--rand-source"];
    if pace == "--flood" {
        args.push("--flood");
    } else {
        args.extend(["-i", pace.as_str()]);
    }
    args.push("10.57.0.100");
    let cookies0 = t.counter(Counter::SynProxyCookiesSent);
    let hping = t.cli.spawn(&args);
    wait_until("the flood gets cookies", Duration::from_secs(10), || {
        t.dp.counter(Counter::SynProxyCookiesSent) > cookies0 + 500
    });
    let started = Instant::now();
    let real: Vec<NewConnections> = (0..2)
        .map(|i| NewConnections::start("sk-cli", vip, 2048, 200 + i))
        .collect();
    let (mut curl_ok, mut curl_err) = (0u64, Vec::new());
    let mut max_entries = 0;
    while started.elapsed() < Duration::from_secs(seconds) {
        match curl_pp(&t.cli) {
            Ok(l) if l.contains("src=10.57.0.2 ") => curl_ok += 1,
            Ok(l) => curl_err.push(l),
            Err(e) => curl_err.push(e),
        }
        max_entries = max_entries.max(t.dp.counter(Counter::ConntrackEntries));
        std::thread::sleep(Duration::from_millis(200));
    }
    let (mut ok, mut errors) = (0, Vec::new());
    for r in real {
        let r = r.finish();
        ok += r.ok;
        errors.extend(r.errors);
    }
    drop(hping);
    let cookies = t.counter(Counter::SynProxyCookiesSent) - cookies0;
    let syns = backend_syns(&t.bk) - syns0;
    let mib = tcp_mib(&t.bk);
    let moved = |k: &str| mib.get(k).copied().unwrap_or(0) - mib0.get(k).copied().unwrap_or(0);
    let total = ok + errors.len() as u64;
    println!(
        "synproxy: pace {pace}, {seconds} s: cookies sent {cookies}; real connections {ok}/{total} ok, curl {curl_ok}/{} ok; \
         backend SYNs {syns}, PassiveOpens {}, SyncookiesSent {}, ListenDrops {}; max conntrack_entries {max_entries}",
        curl_ok + curl_err.len() as u64,
        moved("PassiveOpens"),
        moved("SyncookiesSent"),
        moved("ListenDrops"),
    );
    for e in errors.iter().chain(&curl_err).take(5) {
        println!("  error: {e}");
    }
    assert!(total >= 20, "too few real connections tried");
    assert!(
        ok * 100 >= total * 99,
        "{} of {total} failed: {errors:?}",
        errors.len()
    );
    assert!(curl_ok >= 5 && curl_err.is_empty(), "curl: {curl_err:?}");
    // Every SYN the backend saw was a real client's.
    assert!(
        syns <= total + curl_ok + curl_err.len() as u64,
        "{syns} SYNs at the backend"
    );
    assert_eq!(moved("SyncookiesSent"), 0);
    // The flood got its cookies (hping3 sends far more SYNs than the real
    // clients make connections) and no entry: entries are at most the
    // real connections (each until its closing timeout).
    assert!(cookies > total, "the flood was answered: {cookies}");
    let attempts = total + curl_ok + curl_err.len() as u64;
    assert!(
        max_entries <= attempts + 4,
        "the flood made entries: {max_entries}"
    );
}

/// IPv6 (hping3 has no IPv6: no flood): a full-NAT and a DNAT VIP with
/// `syn_proxy = "always"`, data written right after connect echoed intact,
/// the backend's greeting naming the address it saw. Namespaces `sk6-*`,
/// subnets fd00:57::/64 and fd00:58::/64.
#[test]
fn ipv6_cookie_connections_carry_data_both_ways() {
    let mut c = two_port_config(
        "e2esk6",
        "sk6",
        "fd00:57::1/64",
        "fd00:58::1/64",
        "unix:///run/border/e2esk6.sock",
    );
    for (name, port, mode) in [("web6", 80, "fullnat"), ("dnat6", 81, "dnat")] {
        c.push_str(&format!(
            "\n[[vip]]\nname = \"{name}\"\naddress = \"fd00:57::100\"\nport = {port}\nmode = \"{mode}\"\n\
             syn_proxy = \"always\"\nmaglev_table_size = 101\n\
             [[vip.backend]]\naddress = \"fd00:58::11\"\nport = 8080\n"
        ));
    }
    let t = ClientBackend::start("sk6", &c, "fd00:57::2/64", "fd00:58::11/64");
    t.cli
        .run(&["ip", "-6", "route", "add", "default", "via", "fd00:57::1"]);
    // DNAT: the backend answers the client through border.
    t.bk.run(&["ip", "-6", "route", "add", "default", "via", "fd00:58::1"]);
    let _echo = TcpBackends::start("sk6-bk", &[("b6", "[fd00:58::11]:8080".parse().unwrap())]);
    for (vip, seen) in [
        ("[fd00:57::100]:80", "fd00:58::1"),
        ("[fd00:57::100]:81", "fd00:57::2"),
    ] {
        let vip: SocketAddr = vip.parse().unwrap();
        let (greeting, echo) = in_netns("sk6-cli", move || {
            let mut s = connect_retry(vip, Duration::from_secs(20)).expect("connect");
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s.write_all(b"right after connect\n").unwrap();
            let g = read_greeting(&mut s).unwrap();
            let mut echo = [0u8; 20];
            s.read_exact(&mut echo).unwrap();
            (g, echo)
        })
        .join()
        .unwrap();
        assert_eq!(greeting.trim(), format!("b6 {seen}"), "{vip}");
        assert_eq!(&echo, b"right after connect\n");
    }
    assert!(t.counter(Counter::SynProxyCookiesAccepted) >= 2);
    assert!(t.counter(Counter::SynProxyCookiesSent) >= 2);
}
