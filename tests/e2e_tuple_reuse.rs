//! Full-NAT local tuples with real kernels (docs/design.md): a client namespace
//! reaches a VIP through border-dp (one adaptive worker, TAP ports), and
//! nginx in the backend namespace answers it. The local port range is
//! small (64 ports), so the pool goes round many times in a few seconds.
//!
//! - With TCP timestamps, nginx closes first (HTTP/1.0), so every tuple
//!   sits in TIME_WAIT on the backend for 60 s. Border reuses it after 1 s
//!   anyway: the SYN's timestamp is newer (RFC 6191), so the backend's
//!   kernel must accept it, and the client must never time out.
//! - Without timestamps a tuple rests `local_port_cooldown`; a new
//!   connection that finds every tuple resting is dropped under
//!   `drop_no_local_port`, and once the cooldown is over the tuples serve
//!   again.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::*;
use conf::counters::Counter;

/// The local port range of the backend-side port: 64 tuples, one local
/// address, one worker.
const POOL: (u16, u16) = (1024, 1087);
const POOL_TUPLES: usize = (POOL.1 - POOL.0 + 1) as usize;

struct Plan {
    tag: &'static str,
    /// Second octet of the client-side subnet; the backend side is n + 1.
    n: u8,
}

impl Plan {
    fn ext(&self, host: u8) -> String {
        format!("10.{}.0.{host}", self.n)
    }
    fn int(&self, host: u8) -> String {
        format!("10.{}.0.{host}", self.n + 1)
    }
    fn vip(&self) -> SocketAddr {
        SocketAddr::new(self.ext(100).parse().unwrap(), 80)
    }
    fn backend(&self) -> SocketAddr {
        SocketAddr::new(self.int(11).parse().unwrap(), 8080)
    }
    /// Border's full-NAT local address: what the backend sees as its peer.
    fn local(&self) -> String {
        self.int(1)
    }

    /// One worker, a 64-port pool, `timeouts` as the `[dataplane.timeouts]`
    /// table, and a full-NAT VIP with the one nginx backend.
    fn config(&self, timeouts: &str) -> String {
        let t = self.tag;
        let base = two_port_config(
            &format!("e2e{t}"),
            t,
            &format!("{}/24", self.ext(1)),
            &format!("{}/24", self.int(1)),
            &format!("unix:///run/border/e2e{t}.sock"),
        );
        let wide = "local_port_range = [1024, 32767]";
        assert!(base.contains(wide), "two_port_config changed:\n{base}");
        let mut c = base.replace(
            wide,
            &format!("local_port_range = [{}, {}]", POOL.0, POOL.1),
        );
        c += &format!(
            r#"
[dataplane.timeouts]
{timeouts}

[[vip]]
name = "web"
address = "{vip}"
port = 80
protocol = "tcp"
mode = "fullnat"
maglev_table_size = 101

[[vip.backend]]
address = "{backend}"
port = 8080
"#,
            vip = self.ext(100),
            backend = self.backend().ip(),
        );
        c
    }

    fn start(&self, timeouts: &str) -> Topo {
        let t = self.tag;
        let lb = Netns::new(&format!("{t}-lb"));
        let cli = Netns::new(&format!("{t}-cli"));
        let bk = Netns::new(&format!("{t}-bk"));
        let dir = TempDir::new(t);
        let dp = BorderDp::start(&lb, &dir, &format!("e2e{t}"), &self.config(timeouts));
        wait_iface(&lb, &format!("{t}-ext"));
        wait_iface(&lb, &format!("{t}-int"));
        cli.adopt(&lb, &format!("{t}-ext"), &[&format!("{}/24", self.ext(2))]);
        bk.adopt(
            &lb,
            &format!("{t}-int"),
            &[&format!("{}/24", self.backend().ip())],
        );
        cli.run(&["ip", "route", "add", "default", "via", &self.ext(1)]);
        let nginx = start_nginx(&bk, &dir, self.backend());
        Topo {
            _nginx: nginx,
            config: dp.config.clone(),
            dp,
            cli,
            bk,
            _lb: lb,
            dir,
            vip: self.vip(),
            local: self.local(),
        }
    }
}

/// Drops in field order: nginx and border-dp before their namespaces.
struct Topo {
    _nginx: Spawned,
    dp: BorderDp,
    config: PathBuf,
    cli: Netns,
    bk: Netns,
    _lb: Netns,
    dir: TempDir,
    vip: SocketAddr,
    local: String,
}

/// nginx (Debian's nginx-light) answering every request with 200 on
/// `listen`, in namespace `bk`; waits until it listens.
fn start_nginx(bk: &Netns, dir: &TempDir, listen: SocketAddr) -> Spawned {
    let d = dir.0.display().to_string();
    let cfg = format!(
        r#"daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/nginx-error.log info;
events {{ worker_connections 512; }}
http {{
    log_format peer '$remote_addr $remote_port $msec';
    access_log {d}/access.log peer;
    keepalive_timeout 30s;
    client_body_temp_path {d}/cb;
    proxy_temp_path {d}/px;
    fastcgi_temp_path {d}/fc;
    uwsgi_temp_path {d}/uw;
    scgi_temp_path {d}/sc;
    server {{
        listen {listen};
        return 200 "ok\n";
    }}
}}
"#
    );
    let path = dir.path("nginx.conf");
    std::fs::write(&path, cfg).unwrap();
    let stderr = format!("{d}/nginx-stderr.log");
    let nginx = bk.spawn(&["nginx", "-c", path.to_str().unwrap(), "-e", &stderr]);
    let port = format!(":{} ", listen.port());
    wait_until("nginx listening", Duration::from_secs(20), || {
        String::from_utf8_lossy(&bk.try_run(&["ss", "-Htln"]).stdout).contains(&port)
    });
    nginx
}

/// Who closes an HTTP connection first.
#[derive(Clone, Copy)]
enum Closer {
    /// HTTP/1.0: nginx closes after its answer, so the backend keeps the
    /// tuple in TIME_WAIT.
    Server,
    /// HTTP/1.1 keep-alive: the client closes once it has the answer, so
    /// TIME_WAIT is on the client's own port and the backend's side of
    /// the tuple ends CLOSED.
    Client,
}

/// One GET to `vip`; Err says where it failed. A connect timeout reads
/// "connect: timed out".
fn http_get(vip: SocketAddr, connect_timeout: Duration, closer: Closer) -> Result<(), String> {
    let mut s = TcpStream::connect_timeout(&vip, connect_timeout).map_err(|e| {
        if e.kind() == std::io::ErrorKind::TimedOut {
            "connect: timed out".to_string()
        } else {
            format!("connect: {e}")
        }
    })?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let request: &[u8] = match closer {
        Closer::Server => b"GET / HTTP/1.0\r\nHost: vip\r\n\r\n",
        Closer::Client => b"GET / HTTP/1.1\r\nHost: vip\r\n\r\n",
    };
    s.write_all(request).map_err(|e| format!("send: {e}"))?;
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    // The answer is complete at the server's FIN (HTTP/1.0), or once the
    // 3-byte body is in (HTTP/1.1 keeps the connection open).
    let complete = |got: &[u8]| matches!(closer, Closer::Client) && got.ends_with(b"\r\n\r\nok\n");
    while !complete(&got) {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => return Err(format!("read after {} bytes: {e}", got.len())),
        }
    }
    let text = String::from_utf8_lossy(&got);
    if !text.starts_with("HTTP/1.1 200 ") || !text.ends_with("\r\n\r\nok\n") {
        return Err(format!("answer {text:?}"));
    }
    Ok(())
}

/// `n` GETs one after the other from namespace `ns`, each started at
/// least `every` after the one before (a late one is not made up for, so
/// no window sees more than one per `every`); stops early once `budget`
/// has passed. One result each.
fn paced_gets(
    ns: &str,
    vip: SocketAddr,
    n: usize,
    every: Duration,
    connect_timeout: Duration,
    closer: Closer,
    budget: Duration,
) -> Vec<Result<(), String>> {
    in_netns(ns, move || {
        let start = Instant::now();
        let mut next = start;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            if let Some(wait) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            if start.elapsed() > budget {
                break;
            }
            next = Instant::now() + every;
            out.push(http_get(vip, connect_timeout, closer));
        }
        out
    })
    .join()
    .unwrap()
}

/// `n` GETs at the same time from namespace `ns`.
fn parallel_gets(
    ns: &str,
    vip: SocketAddr,
    n: usize,
    connect_timeout: Duration,
    closer: Closer,
) -> Vec<Result<(), String>> {
    let threads: Vec<_> = (0..n)
        .map(|_| in_netns(ns, move || http_get(vip, connect_timeout, closer)))
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// "#index: error" of every failed result.
fn failures(results: &[Result<(), String>]) -> Vec<String> {
    results
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.as_ref().err().map(|e| format!("#{i}: {e}")))
        .collect()
}

/// `after[k] - before[k]` of a kernel TCP counter.
fn rose(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>, k: &str) -> u64 {
    let get = |m: &BTreeMap<String, u64>| *m.get(k).unwrap_or_else(|| panic!("no TCP counter {k}"));
    get(after) - get(before)
}

impl Topo {
    /// A first connection, which may wait while border resolves the
    /// backend's MAC (its SYN dropped once); later ones must not.
    fn warm_up(&self, closer: Closer) {
        let vip = self.vip;
        let r = in_netns(&self.cli.name, move || {
            let start = Instant::now();
            loop {
                match http_get(vip, Duration::from_secs(3), closer) {
                    Ok(()) => return Ok(()),
                    Err(e) if start.elapsed() > Duration::from_secs(10) => return Err(e),
                    Err(_) => std::thread::sleep(Duration::from_millis(100)),
                }
            }
        })
        .join()
        .unwrap();
        r.unwrap_or_else(|e| panic!("first GET through the VIP: {e}\n{}", self.dp.log_text()));
    }

    /// Every dataplane counter's total, as `borderctl counters --json` reads
    /// them from border-dp's state region.
    fn counters(&self) -> BTreeMap<String, u64> {
        let out = borderctl_ok(&[
            "counters",
            "--json",
            "--config",
            self.config.to_str().unwrap(),
        ]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["counters"]
            .as_object()
            .unwrap_or_else(|| panic!("no counters in {out}"))
            .iter()
            .map(|(k, c)| (k.clone(), c["total"].as_u64().unwrap_or(0)))
            .collect()
    }

    /// Waits until the worker has published at least `n` new flows.
    fn wait_new_flows(&self, n: u64) {
        wait_until(
            &format!("{n} new flows published"),
            Duration::from_secs(5),
            || self.dp.counter(Counter::NewFlows) >= n,
        );
    }

    /// What nginx logged of each request: the peer's port (a local port of
    /// border's) and when, in seconds; checks that every peer is border's
    /// local address.
    fn nginx_requests(&self) -> Vec<(u16, f64)> {
        let log = std::fs::read_to_string(self.dir.path("access.log")).unwrap_or_default();
        log.lines()
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                assert_eq!(f.len(), 3, "access log line {l:?}");
                assert_eq!(
                    f[0], self.local,
                    "nginx saw a peer other than border: {l:?}"
                );
                (f[1].parse().unwrap(), f[2].parse().unwrap())
            })
            .collect()
    }

    /// The local ports of border's tuples the backend holds in TIME_WAIT.
    fn backend_time_wait_ports(&self) -> Vec<u16> {
        let out = self
            .bk
            .run(&["ss", "-Htan", "state", "time-wait", "dst", &self.local]);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().last())
            .filter_map(|peer| peer.rsplit_once(':'))
            .map(|(_, port)| port.parse().unwrap())
            .collect()
    }
}

#[test]
fn reused_tuples_are_accepted_by_a_backend_in_time_wait() {
    const CONNECTIONS: usize = 400;
    // 40 connections/s: each tuple comes round every 1.6 s, past its 1 s
    // rest and deep inside the backend's 60 s TIME_WAIT.
    const EVERY: Duration = Duration::from_millis(25);
    let plan = Plan { tag: "ru1", n: 61 };
    // Entries go soon after their connection: border must not rely on
    // holding a tuple for as long as the backend's TIME_WAIT.
    let topo = plan.start("tcp_closing = 1");
    topo.cli
        .run(&["sysctl", "-qw", "net.ipv4.tcp_timestamps=1"]);
    topo.bk.run(&["sysctl", "-qw", "net.ipv4.tcp_timestamps=1"]);
    topo.warm_up(Closer::Server);
    topo.wait_new_flows(1);
    let flows_before = topo.dp.counter(Counter::NewFlows);
    let (cli_before, bk_before) = (tcp_mib(&topo.cli), tcp_mib(&topo.bk));
    let drops_before = topo.dp.drops();

    let start = Instant::now();
    let results = paced_gets(
        &topo.cli.name,
        topo.vip,
        CONNECTIONS,
        EVERY,
        Duration::from_secs(3),
        Closer::Server,
        Duration::from_secs(40),
    );
    let took = start.elapsed();
    let (cli_after, bk_after) = (tcp_mib(&topo.cli), tcp_mib(&topo.bk));
    let failed = failures(&results);
    let syn_retrans = rose(&cli_before, &cli_after, "TCPSynRetrans");
    let retrans = rose(&cli_before, &cli_after, "RetransSegs");
    let client_rsts = rose(&cli_before, &cli_after, "OutRsts");
    let paws_tw = rose(&bk_before, &bk_after, "PAWSTimewait");
    let bk_retrans = rose(&bk_before, &bk_after, "RetransSegs");
    let border_drops = drops_rose(&drops_before, &topo.dp.drops());
    eprintln!(
        "{} of {CONNECTIONS} GETs in {took:?}, {} failed; client: {syn_retrans} SYN \
         retransmits, {retrans} retransmitted segments, {client_rsts} RSTs sent; \
         backend: {paws_tw} SYNs refused by PAWS in TIME_WAIT, {bk_retrans} \
         retransmitted segments; border drops {border_drops:?}",
        results.len(),
        failed.len()
    );
    assert!(
        results.len() == CONNECTIONS && failed.is_empty(),
        "{} of {CONNECTIONS} GETs done in {took:?}, failures: {failed:?}",
        results.len()
    );
    assert!(
        border_drops.iter().all(|(k, _)| *k != "drop_no_local_port"),
        "border found no free tuple: {border_drops:?}"
    );
    assert_eq!(
        syn_retrans, 0,
        "the client retransmitted SYNs (timed out on a reused tuple)"
    );
    assert_eq!(retrans, 0, "the client retransmitted segments");
    // A backend that refuses a SYN on a TIME_WAIT tuple answers with an
    // ACK, which the client in SYN-SENT answers with a RST.
    assert_eq!(client_rsts, 0, "the client sent RSTs");
    assert_eq!(paws_tw, 0, "the backend refused SYNs in TIME_WAIT (PAWS)");

    // Every tuple was reused about six times within the backend's 60 s
    // TIME_WAIT, and the backend still holds each one's last connection.
    assert!(took < Duration::from_secs(50), "{took:?}");
    wait_until(
        "every tuple in TIME_WAIT on the backend",
        Duration::from_secs(5),
        || topo.backend_time_wait_ports().len() == POOL_TUPLES,
    );
    let ports = topo.backend_time_wait_ports();
    assert!(
        ports.iter().all(|p| (POOL.0..=POOL.1).contains(p)),
        "TIME_WAIT on ports outside the pool: {ports:?}"
    );

    // nginx saw each tuple again and again, every time within 60 s of
    // the connection before it on the tuple, which it closed itself.
    let mut uses: BTreeMap<u16, Vec<f64>> = BTreeMap::new();
    for (port, at) in topo.nginx_requests() {
        uses.entry(port).or_default().push(at);
    }
    let gaps: Vec<f64> = uses
        .values()
        .flat_map(|t| t.windows(2).map(|w| w[1] - w[0]))
        .collect();
    let (min_gap, max_gap) = gaps
        .iter()
        .fold((f64::MAX, 0f64), |(lo, hi), g| (lo.min(*g), hi.max(*g)));
    let fewest = uses.values().map(Vec::len).min().unwrap_or(0);
    eprintln!(
        "nginx: {} requests on {} tuples, each used at least {fewest} times, \
         {min_gap:.3} s to {max_gap:.3} s between uses of a tuple",
        gaps.len() + uses.len(),
        uses.len()
    );
    assert_eq!(
        uses.len(),
        POOL_TUPLES,
        "tuples nginx saw: {:?}",
        uses.keys()
    );
    assert!(
        fewest >= CONNECTIONS / POOL_TUPLES,
        "least recently used first: every tuple takes its turn ({fewest} uses)"
    );
    assert!(
        max_gap < 60.0,
        "a tuple came back after the backend's TIME_WAIT"
    );

    topo.wait_new_flows(flows_before + CONNECTIONS as u64);
    let c = topo.counters();
    eprintln!(
        "border: new_flows {}, local_tuples {}, local_tuples_taken_over {}, drop_no_local_port {}",
        c["new_flows"], c["local_tuples"], c["local_tuples_taken_over"], c["drop_no_local_port"]
    );
    assert_eq!(c["drop_no_local_port"], 0);
    assert_eq!(c["local_tuples"], POOL_TUPLES as u64);
    assert!(c["new_flows"] >= flows_before + CONNECTIONS as u64);
}

#[test]
fn without_timestamps_tuples_rest_and_excess_is_counted() {
    const COOLDOWN: Duration = Duration::from_secs(6);
    const EXCESS: usize = 8;
    let plan = Plan { tag: "ru2", n: 63 };
    // Entries linger 10 s, past the cooldown: a tuple is taken over from
    // its ended connection's entry.
    let topo = plan.start(&format!(
        "local_port_cooldown = {}\ntcp_closing = 10",
        COOLDOWN.as_secs()
    ));
    topo.cli
        .run(&["sysctl", "-qw", "net.ipv4.tcp_timestamps=0"]);
    // The client closes first, so the backend keeps no TIME_WAIT: what
    // holds a tuple back here is border's cooldown alone.
    topo.warm_up(Closer::Client);
    std::thread::sleep(COOLDOWN + Duration::from_millis(500));
    let before = topo.counters();
    let cli_before = tcp_mib(&topo.cli);

    // As many connections as tuples, quickly: each takes one.
    let start = Instant::now();
    let burst = paced_gets(
        &topo.cli.name,
        topo.vip,
        POOL_TUPLES,
        Duration::ZERO,
        Duration::from_secs(2),
        Closer::Client,
        Duration::from_secs(10),
    );
    let burst_took = start.elapsed();
    assert!(
        burst.len() == POOL_TUPLES && failures(&burst).is_empty(),
        "the pool's first {POOL_TUPLES} connections: {:?}",
        failures(&burst)
    );

    // Past the 1 s a connection with timestamps would rest, within the
    // cooldown: every tuple rests, so new connections are dropped.
    std::thread::sleep(Duration::from_millis(1200));
    let excess = parallel_gets(
        &topo.cli.name,
        topo.vip,
        EXCESS,
        Duration::from_millis(500),
        Closer::Client,
    );
    let excess_done = start.elapsed();
    assert!(
        excess_done < COOLDOWN,
        "the excess came {excess_done:?} after the burst's start, not within the {COOLDOWN:?} cooldown: \
         the machine is too slow for this test"
    );
    assert!(
        excess
            .iter()
            .all(|r| matches!(r, Err(e) if e == "connect: timed out")),
        "connections beyond the pool must find no tuple: {excess:?}"
    );
    wait_until(
        "the excess counted as drop_no_local_port",
        Duration::from_secs(5),
        || {
            topo.dp.counter(Counter::DropNoLocalPort)
                >= before["drop_no_local_port"] + EXCESS as u64
        },
    );

    // Once the cooldown is over (counted from each connection's last
    // packet), every tuple serves again.
    let rested = burst_took + COOLDOWN + Duration::from_millis(500);
    if let Some(wait) = rested.checked_sub(start.elapsed()) {
        std::thread::sleep(wait);
    }
    let again = paced_gets(
        &topo.cli.name,
        topo.vip,
        POOL_TUPLES,
        Duration::ZERO,
        Duration::from_secs(2),
        Closer::Client,
        Duration::from_secs(10),
    );
    assert!(
        again.len() == POOL_TUPLES && failures(&again).is_empty(),
        "after the cooldown: {:?}",
        failures(&again)
    );
    let cli_after = tcp_mib(&topo.cli);
    topo.wait_new_flows(before["new_flows"] + 2 * POOL_TUPLES as u64);
    let after = topo.counters();
    let d = |k: &str| after[k] - before[k];
    eprintln!(
        "burst {burst_took:?}; drop_no_local_port +{}, local_tuples_taken_over +{}, new_flows +{}; \
         client: {} RSTs sent, {} SYN retransmits",
        d("drop_no_local_port"),
        d("local_tuples_taken_over"),
        d("new_flows"),
        rose(&cli_before, &cli_after, "OutRsts"),
        rose(&cli_before, &cli_after, "TCPSynRetrans"),
    );
    assert!(d("drop_no_local_port") >= EXCESS as u64);
    // Every tuple was taken over from its last connection's lingering
    // entry: the burst's first from the warm-up connection, the second
    // round's from the burst.
    assert_eq!(d("local_tuples_taken_over"), POOL_TUPLES as u64 + 1);
    assert_eq!(after["local_tuples"], POOL_TUPLES as u64);
    // No backend answered a SYN with a bare ACK (the client would RST it).
    assert_eq!(rose(&cli_before, &cli_after, "OutRsts"), 0);
    assert_eq!(rose(&cli_before, &cli_after, "TCPSynRetrans"), 0);
}

/// The first connection to a backend border-dp has never talked to: its
/// SYN waits while border resolves the backend's MAC and leaves with the
/// ARP answer, instead of being dropped and retransmitted by the client a
/// second later (no 1 s stall on a cold neighbour table).
#[test]
fn the_first_syn_to_an_unresolved_backend_waits_for_arp_not_for_a_retransmit() {
    let plan = Plan { tag: "ru3", n: 67 };
    // The backend's address appears only after border-dp adopted its
    // tables, so the request sent then went unanswered.
    let topo = plan.start("tcp_closing = 1");
    let mac_known = topo.counters().get("neighbour_queued").copied();
    assert_eq!(mac_known, Some(0), "nothing waited yet");
    let cli_before = tcp_mib(&topo.cli);
    let vip = topo.vip;
    let r = in_netns(&topo.cli.name, move || {
        http_get(vip, Duration::from_secs(5), Closer::Server)
    })
    .join()
    .unwrap();
    let cli_after = tcp_mib(&topo.cli);
    r.unwrap_or_else(|e| panic!("first GET through the VIP: {e}\n{}", topo.dp.log_text()));
    let c = topo.counters();
    assert!(
        c.get("neighbour_queued").copied().unwrap_or(0) >= 1,
        "the SYN did not wait for the backend's MAC: {c:?}"
    );
    assert_eq!(
        rose(&cli_before, &cli_after, "TCPSynRetrans"),
        0,
        "the client had to retransmit its first SYN: {c:?}"
    );
    assert_eq!(c.get("drop_neighbour_unresolved").copied().unwrap_or(0), 0);
    assert_eq!(
        c.get("drop_neighbour_queue_timeout").copied().unwrap_or(0),
        0
    );
}
