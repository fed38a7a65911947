//! Health checking end to end (docs/design.md §5, docs/health.md): border-dp follows
//! the tables that border-mgmt publishes; border-mgmt runs in the
//! appliance's namespace and probes the backends through the kernel twin.
//!
//! Phase 1 (one border-mgmt, quorum 1):
//! - two VIPs over the same three HTTP backends are probed once per backend;
//! - a backend whose server stops is down after `fall` intervals and new
//!   connections avoid it; started again it is up after `rise`;
//! - a backend answering 503 to the health path is down;
//! - a socat forwarder whose upstream is dead is down for a `tls` probe and
//!   up for a `tcp` probe of the same address;
//! - `X-Load-Balancing-Endpoint-Weight` shifts the traffic share, and a
//!   missing header on one backend falls the VIP back to configured weights;
//! - every backend down (503 on the health path, data still served): the
//!   VIP keeps forwarding to all of them (fail-open) and the status says so.
//!
//! Phase 2 (three border-mgmt instances, quorum 2): the publisher restarts
//! with two peers that live in their own namespaces (other appliances) and
//! reach the backends over veth; one of them is blinded with nftables. It
//! takes no backend down, neither on its own nor through the others, and
//! the others call it an unreliable witness.

mod common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use mgmt::pb;

const INTERVAL_MS: u64 = 300;
const FALL: u64 = 2;
const RISE: u64 = 2;

// ---- backends ---------------------------------------------------------------

/// What one backend does, changeable while it runs.
#[derive(Default)]
struct Ctl {
    /// Listening (false: connections are refused).
    serving: AtomicBool,
    /// Status for GET /healthz (data requests always get 200).
    health: AtomicU16,
    /// X-Load-Balancing-Endpoint-Weight (0: no header).
    weight: AtomicU32,
    /// Health requests seen.
    probes: AtomicU64,
}

/// HTTP servers in a namespace, one per address, each naming itself in an
/// `X-Backend` header.
struct HttpBackends {
    ctl: Vec<Arc<Ctl>>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl HttpBackends {
    fn start(ns: &str, addrs: &[(&str, SocketAddr)]) -> HttpBackends {
        let stop = Arc::new(AtomicBool::new(false));
        let mut ctl = Vec::new();
        let mut threads = Vec::new();
        for (name, addr) in addrs {
            let c = Arc::new(Ctl::default());
            c.serving.store(true, Ordering::Relaxed);
            c.health.store(200, Ordering::Relaxed);
            ctl.push(c.clone());
            let (name, addr, stop) = (name.to_string(), *addr, stop.clone());
            threads.push(in_netns(ns, move || {
                let mut listener: Option<std::net::TcpListener> = None;
                while !stop.load(Ordering::Relaxed) {
                    let serving = c.serving.load(Ordering::Relaxed);
                    if serving && listener.is_none() {
                        let l = std::net::TcpListener::bind(addr)
                            .unwrap_or_else(|e| panic!("bind {addr}: {e}"));
                        l.set_nonblocking(true).unwrap();
                        listener = Some(l);
                    } else if !serving && listener.is_some() {
                        listener = None;
                    }
                    let Some(l) = &listener else {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    };
                    match l.accept() {
                        Ok((s, _)) => {
                            let (c, name) = (c.clone(), name.clone());
                            std::thread::spawn(move || answer(s, &c, &name));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(2)),
                    }
                }
            }));
        }
        HttpBackends { ctl, stop, threads }
    }
}

fn answer(mut s: std::net::TcpStream, c: &Ctl, name: &str) {
    s.set_nonblocking(false).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut req = Vec::new();
    let mut b = [0u8; 1024];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 8192 {
        match s.read(&mut b) {
            Ok(0) | Err(_) => return,
            Ok(n) => req.extend_from_slice(&b[..n]),
        }
    }
    let health = req.starts_with(b"GET /healthz ");
    let status = if health {
        c.probes.fetch_add(1, Ordering::Relaxed);
        c.health.load(Ordering::Relaxed)
    } else {
        200
    };
    let w = c.weight.load(Ordering::Relaxed);
    let wh = if w == 0 {
        String::new()
    } else {
        format!("X-Load-Balancing-Endpoint-Weight: {w}\r\n")
    };
    let _ = s.write_all(
        format!("HTTP/1.1 {status} X\r\nX-Backend: {name}\r\n{wh}Content-Length: 0\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    );
}

impl Drop for HttpBackends {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// `n` HTTP requests to `vip` from `ns`, each on a new connection; the
/// `X-Backend` of each answer.
fn who_answers(ns: &str, vip: SocketAddr, n: usize) -> Vec<String> {
    in_netns(ns, move || {
        (0..n)
            .map(|i| {
                let mut s = connect_retry(vip, Duration::from_secs(10))
                    .unwrap_or_else(|e| panic!("connection {i} to {vip}: {e}"));
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                s.write_all(b"GET / HTTP/1.1\r\nHost: vip\r\n\r\n").unwrap();
                let mut out = String::new();
                let _ = s.read_to_string(&mut out);
                out.lines()
                    .find_map(|l| l.strip_prefix("X-Backend: "))
                    .unwrap_or_else(|| panic!("connection {i} to {vip}: no X-Backend in {out:?}"))
                    .trim()
                    .to_string()
            })
            .collect()
    })
    .join()
    .unwrap()
}

// ---- border-mgmt ------------------------------------------------------------

struct Mgmt {
    process: BorderMgmt,
    socket: PathBuf,
}

impl Mgmt {
    /// Starts border-mgmt on `cfg` in `ns` and waits for its API.
    fn start(ns: &str, cfg: &Path, log: PathBuf, socket: PathBuf) -> Mgmt {
        Mgmt {
            process: BorderMgmt::start_in(Some(ns), cfg, log),
            socket,
        }
    }

    fn text(&self) -> String {
        self.process.log_text()
    }

    fn stop(&mut self) {
        let st = self.process.stop();
        assert!(
            st.success(),
            "border-mgmt exited with {st}:\n{}",
            self.text()
        );
    }

    fn status(&self) -> pb::GetStatusResponse {
        let socket = self.socket.clone();
        rt().block_on(async move {
            let mut c = mgmt::client::connect_unix(socket).await.unwrap();
            c.get_status(pb::GetStatusRequest {})
                .await
                .unwrap()
                .into_inner()
        })
    }

    fn health(&self) -> pb::GetHealthResponse {
        let target = conf::Listen::Unix(self.socket.clone());
        rt().block_on(async move {
            let mut c = mgmt::health::service::connect(&target, None).await.unwrap();
            c.get_health(pb::GetHealthRequest {})
                .await
                .unwrap()
                .into_inner()
        })
    }

    fn vip(&self, name: &str) -> pb::VipStatus {
        self.status()
            .vips
            .into_iter()
            .find(|v| v.name == name)
            .unwrap_or_else(|| panic!("no VIP {name}"))
    }

    fn backend(&self, vip: &str, addr: SocketAddr) -> pb::BackendStatus {
        self.vip(vip)
            .backends
            .into_iter()
            .find(|b| b.address == addr.to_string())
            .unwrap_or_else(|| panic!("no backend {addr} in {vip}"))
    }

    /// Waits (at most `within`) until `cond` holds on the backend; returns it.
    fn wait_backend(
        &self,
        vip: &str,
        addr: SocketAddr,
        within: Duration,
        what: &str,
        cond: impl Fn(&pb::BackendStatus) -> bool,
    ) -> pb::BackendStatus {
        let start = Instant::now();
        loop {
            let b = self.backend(vip, addr);
            if cond(&b) {
                return b;
            }
            if start.elapsed() > within {
                panic!(
                    "{vip} {addr}: timed out after {within:?} waiting for {what}; now {b:?}\n{}",
                    self.text()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

const UP: i32 = pb::BackendState::Up as i32;
const DOWN: i32 = pb::BackendState::Down as i32;

// ---- config -----------------------------------------------------------------

fn backend(i: u8) -> SocketAddr {
    SocketAddr::new(format!("10.82.0.{}", 11 + i).parse().unwrap(), 8080)
}

const FORWARDER: &str = "10.82.0.14:9443";

fn config(instance: &str, socket: &Path, peers: &[&Path], quorum: u32) -> String {
    let mut c = two_port_config(
        instance,
        "hl",
        "10.81.0.1/24",
        "10.82.0.1/24",
        &format!("unix://{}", socket.display()),
    );
    c += &format!("quorum = {quorum}\n");
    for p in peers {
        c += &format!("[[mgmt.peer]]\naddress = \"unix://{}\"\n", p.display());
    }
    let health = |kind: &str, extra: &str| {
        format!(
            "[vip.health]\nkind = \"{kind}\"\ninterval_ms = {INTERVAL_MS}\ntimeout_ms = 200\nrise = {RISE}\nfall = {FALL}\n{extra}"
        )
    };
    for (name, addr, weight_header) in [("web", "10.81.0.100", false), ("wt", "10.81.0.101", true)]
    {
        c += &format!(
            "\n[[vip]]\nname = \"{name}\"\naddress = \"{addr}\"\nport = 80\nmaglev_table_size = 1021\n{}",
            health("http", &format!("path = \"/healthz\"\nweight_header = {weight_header}\n"))
        );
        for i in 0..3 {
            c += &format!(
                "[[vip.backend]]\naddress = \"{}\"\nport = 8080\n",
                backend(i).ip()
            );
        }
    }
    for (name, addr, kind) in [("tls", "10.81.0.102", "tls"), ("tcp", "10.81.0.103", "tcp")] {
        c += &format!(
            "\n[[vip]]\nname = \"{name}\"\naddress = \"{addr}\"\nport = 443\nmaglev_table_size = 1021\n{}[[vip.backend]]\naddress = \"10.82.0.14\"\nport = 9443\n",
            health(kind, "")
        );
    }
    c
}

fn share(names: &[String], who: &str) -> f64 {
    names.iter().filter(|n| *n == who).count() as f64 / names.len() as f64
}

/// How long any awaited state may take.
const WITHIN: Duration = Duration::from_secs(15);

#[test]
fn health_checks_end_to_end() {
    let lb = Netns::new("hl-lb");
    let cli = Netns::new("hl-cli");
    let bk = Netns::new("hl-bk");
    let dir = TempDir::new("health");
    let socket = dir.path("mgmt.sock");
    let cfg_path = dir.path("mgmt.toml");
    std::fs::write(&cfg_path, config("e2ehl", &socket, &[], 1)).unwrap();
    // Nothing left over from an earlier run of this instance.
    let _ = std::fs::remove_file(conf::tables::tables_path("e2ehl"));
    let _ = std::fs::remove_file("/run/border/e2ehl.overrides.json");

    let mut dp = BorderDp::start_following(&lb, &dir, "e2ehl", &config("e2ehl", &socket, &[], 1));
    wait_iface(&lb, "hl-ext");
    wait_iface(&lb, "hl-int");
    cli.adopt(&lb, "hl-ext", &["10.81.0.2/24"]);
    bk.adopt(
        &lb,
        "hl-int",
        &[
            "10.82.0.11/24",
            "10.82.0.12/24",
            "10.82.0.13/24",
            "10.82.0.14/24",
        ],
    );
    cli.run(&["ip", "route", "add", "default", "via", "10.81.0.1"]);

    let names = [("b0", backend(0)), ("b1", backend(1)), ("b2", backend(2))];
    let servers = HttpBackends::start(&bk.name, &names);
    // A TLS "backend" that is only a forwarder to a dead upstream.
    let mut socat = bk.spawn(&[
        "socat",
        "-lf",
        "/dev/null",
        "TCP-LISTEN:9443,bind=10.82.0.14,reuseaddr,fork",
        "TCP:127.0.0.1:1",
    ]);

    let mut m = Mgmt::start(&lb.name, &cfg_path, dir.path("mgmt.log"), socket.clone());

    every_backend_probed_once(&m, &servers, &cli);
    a_stopped_backend_goes_down_and_comes_back(&m, &servers, &cli);
    the_weight_header_shifts_traffic(&m, &servers, &cli);
    every_check_failing_fails_open(&m, &servers, &cli);

    // ---- phase 2: three checkers, quorum 2, one blinded -------------------
    m.stop();
    let peers_ns: Vec<Netns> = (2..=3).map(|i| Netns::new(&format!("hl-m{i}"))).collect();
    for (k, ns) in peers_ns.iter().enumerate() {
        let i = k + 2;
        // Another appliance: reaches the backends over its own link.
        bk.run(&[
            "ip",
            "link",
            "add",
            &format!("m{i}b"),
            "type",
            "veth",
            "peer",
            "name",
            &format!("m{i}a"),
        ]);
        bk.run(&["ip", "link", "set", &format!("m{i}a"), "netns", &ns.name]);
        bk.run(&[
            "ip",
            "addr",
            "add",
            &format!("10.83.{i}.1/24"),
            "dev",
            &format!("m{i}b"),
        ]);
        bk.run(&["ip", "link", "set", &format!("m{i}b"), "up"]);
        ns.run(&[
            "ip",
            "addr",
            "add",
            &format!("10.83.{i}.2/24"),
            "dev",
            &format!("m{i}a"),
        ]);
        ns.run(&["ip", "link", "set", &format!("m{i}a"), "up"]);
        ns.run(&[
            "ip",
            "route",
            "add",
            "10.82.0.0/24",
            "via",
            &format!("10.83.{i}.1"),
        ]);
    }
    let sockets = [socket.clone(), dir.path("m2.sock"), dir.path("m3.sock")];
    let instances = ["e2ehl", "e2ehl2", "e2ehl3"];
    for inst in &instances[1..] {
        let _ = std::fs::remove_file(conf::tables::tables_path(inst));
        let _ = std::fs::remove_file(format!("/run/border/{inst}.overrides.json"));
    }
    let mut ms: Vec<Mgmt> = Vec::new();
    for i in 0..3 {
        let others: Vec<&Path> = (0..3)
            .filter(|j| *j != i)
            .map(|j| sockets[j].as_path())
            .collect();
        let p = dir.path(&format!("mgmt{i}.toml"));
        std::fs::write(&p, config(instances[i], &sockets[i], &others, 2)).unwrap();
        let ns = if i == 0 {
            lb.name.clone()
        } else {
            peers_ns[i - 1].name.clone()
        };
        ms.push(Mgmt::start(
            &ns,
            &p,
            dir.path(&format!("mgmt{i}.log")),
            sockets[i].clone(),
        ));
    }
    everyone_hears_everyone(&ms);
    a_blinded_witness_is_discarded(&ms, &peers_ns[1], &servers, &cli);

    for mm in &mut ms {
        mm.stop();
    }
    let _ = socat.kill();
    let _ = socat.wait();
    let st = dp.stop();
    assert!(st.success(), "border-dp exit {st}:\n{}", dp.log_text());
    for inst in &instances {
        let _ = std::fs::remove_file(conf::tables::tables_path(inst));
    }
}

/// Everything probed, traffic reaches all three, and two VIPs over the same backend probe it once per interval.
fn every_backend_probed_once(m: &Mgmt, servers: &HttpBackends, cli: &Netns) {
    let names = [("b0", backend(0)), ("b1", backend(1)), ("b2", backend(2))];
    // Everything probed; the forwarder is down for TLS, up for TCP.
    for (i, _) in names.iter().enumerate() {
        m.wait_backend("web", backend(i as u8), WITHIN, "up: HTTP 200", |b| {
            b.state == UP && b.reason == "up: HTTP 200"
        });
    }
    let fwd: SocketAddr = FORWARDER.parse().unwrap();
    let t = m.wait_backend("tls", fwd, WITHIN, "tls down", |b| b.state == DOWN);
    assert!(
        t.reason
            .starts_with("down: TLS handshake failed: connection")
            && t.reason
                .ends_with("VIP fails open: every backend is down, all stay in the ring"),
        "{}",
        t.reason
    );
    assert!(
        m.vip("tls").fail_open,
        "a VIP whose only backend is down fails open"
    );
    let t = m.backend("tcp", fwd);
    assert_eq!((t.state, t.reason.as_str()), (UP, "up: TCP connect ok"));

    // Traffic reaches all three.
    let got = who_answers(&cli.name, "10.81.0.100:80".parse().unwrap(), 150);
    assert_eq!(tally(&got).len(), 3, "{:?}", tally(&got));

    // Two VIPs list each backend: it is probed once per interval, not twice.
    let before = servers.ctl[0].probes.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(10 * INTERVAL_MS));
    let probes = servers.ctl[0].probes.load(Ordering::Relaxed) - before;
    assert!(
        (6..=13).contains(&probes),
        "{probes} probes of b0 in 10 intervals (expected about 10: one per interval for both VIPs)"
    );
}

/// A stopped backend is down after `fall`, up after `rise`; 503 on the health path is down too.
fn a_stopped_backend_goes_down_and_comes_back(m: &Mgmt, servers: &HttpBackends, cli: &Netns) {
    // Stop b0: down after `fall` failed probes; new connections avoid it.
    servers.ctl[0].serving.store(false, Ordering::Relaxed);
    let t0 = Instant::now();
    let b = m.wait_backend("web", backend(0), WITHIN, "b0 down", |b| b.state == DOWN);
    let took = t0.elapsed();
    // No lower bound on the time: with full jitter two probes can land
    // milliseconds apart. The reason below shows it took `fall` failures.
    assert!(
        took <= Duration::from_millis((FALL + 2) * 2 * INTERVAL_MS + 2000),
        "down after {took:?}"
    );
    assert_eq!(
        b.reason,
        format!("down: connect refused ({FALL} consecutive failures)")
    );
    assert_eq!(b.ring_slots, 0);
    let got = who_answers(&cli.name, "10.81.0.100:80".parse().unwrap(), 100);
    assert!(!got.contains(&"b0".to_string()), "{:?}", tally(&got));
    assert_eq!(tally(&got).len(), 2);

    // Start it: up after `rise` good probes, traffic again.
    servers.ctl[0].serving.store(true, Ordering::Relaxed);
    let t0 = Instant::now();
    m.wait_backend("web", backend(0), WITHIN, "b0 up", |b| {
        b.state == UP && b.ring_slots > 0
    });
    let took = t0.elapsed();
    assert!(
        took <= Duration::from_millis((RISE + 2) * 2 * INTERVAL_MS + 2000),
        "up after {took:?}"
    );
    let got = who_answers(&cli.name, "10.81.0.100:80".parse().unwrap(), 100);
    assert!(got.contains(&"b0".to_string()), "{:?}", tally(&got));

    // 503 on the health path: down with the status as reason.
    servers.ctl[1].health.store(503, Ordering::Relaxed);
    let b = m.wait_backend("web", backend(1), WITHIN, "b1 down", |b| b.state == DOWN);
    assert_eq!(
        b.reason,
        format!("down: HTTP 503 ({FALL} consecutive failures)")
    );
    servers.ctl[1].health.store(200, Ordering::Relaxed);
    m.wait_backend("web", backend(1), WITHIN, "b1 up", |b| b.state == UP);
}

/// The weight header shifts the share on VIP wt; one missing header falls back to configured weights.
fn the_weight_header_shifts_traffic(m: &Mgmt, servers: &HttpBackends, cli: &Netns) {
    // Weight header on VIP wt: 1, 1, 6.
    for (i, w) in [1, 1, 6].into_iter().enumerate() {
        servers.ctl[i].weight.store(w, Ordering::Relaxed);
    }
    m.wait_backend("wt", backend(2), WITHIN, "weight 6", |b| b.weight == 6);
    for i in 0..2 {
        m.wait_backend("wt", backend(i), WITHIN, "weight 1", |b| b.weight == 1);
    }
    let got = who_answers(&cli.name, "10.81.0.101:80".parse().unwrap(), 200);
    let s2 = share(&got, "b2");
    assert!(
        s2 > 0.6,
        "b2 has weight 6 of 8 but got {s2:.2}: {:?}",
        tally(&got)
    );
    // The web VIP (weight_header = false) keeps its configured weights.
    assert_eq!(m.backend("web", backend(2)).weight, 1);
    // b0 drops its header: VIP wt falls back to the configured 1:1:1.
    servers.ctl[0].weight.store(0, Ordering::Relaxed);
    m.wait_backend("wt", backend(2), WITHIN, "fallback to weight 1", |b| {
        b.weight == 1
    });
    let h = m.health();
    let wt = h.vips.iter().find(|v| v.name == "wt").unwrap();
    assert!(
        wt.weight_fallback.contains(&format!(
            "{}: no X-Load-Balancing-Endpoint-Weight header",
            backend(0)
        )),
        "{}",
        wt.weight_fallback
    );
    assert!(m
        .text()
        .contains("weight header ignored, configured weights apply"));
    let got = who_answers(&cli.name, "10.81.0.101:80".parse().unwrap(), 150);
    let s2 = share(&got, "b2");
    assert!(
        s2 < 0.5,
        "after the fallback b2 got {s2:.2}: {:?}",
        tally(&got)
    );
}

/// Every health check failing: the VIP fails open, says so, and ends it when checks pass again.
fn every_check_failing_fails_open(m: &Mgmt, servers: &HttpBackends, cli: &Netns) {
    // Every backend fails its health check (data still served): the VIP
    // keeps forwarding to all of them, and says so.
    for c in &servers.ctl {
        c.health.store(503, Ordering::Relaxed);
    }
    let start = Instant::now();
    while !m.vip("web").fail_open {
        assert!(
            start.elapsed() < WITHIN,
            "no fail-open: {:?}\n{}",
            m.vip("web"),
            m.text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let v = m.vip("web");
    assert!(v.backends.iter().all(|b| b.state == DOWN), "{v:?}");
    assert_eq!(v.backends.iter().map(|b| b.ring_slots).sum::<u32>(), 1021);
    assert!(
        v.backends[0].reason.contains("VIP fails open"),
        "{}",
        v.backends[0].reason
    );
    let h = m.health();
    assert!(h.vips.iter().find(|x| x.name == "web").unwrap().fail_open);
    let got = who_answers(&cli.name, "10.81.0.100:80".parse().unwrap(), 150);
    assert_eq!(
        tally(&got).len(),
        3,
        "fail-open serves every backend: {:?}",
        tally(&got)
    );
    assert!(m.text().contains("failing open"), "the log says so loudly");
    for c in &servers.ctl {
        c.health.store(200, Ordering::Relaxed);
        c.weight.store(0, Ordering::Relaxed);
    }
    let start = Instant::now();
    while m.vip("web").fail_open {
        assert!(
            start.elapsed() < WITHIN,
            "fail-open does not end\n{}",
            m.text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Each of the three checkers hears the other two.
fn everyone_hears_everyone(ms: &[Mgmt]) {
    // Everyone hears everyone.
    for mm in ms {
        let start = Instant::now();
        loop {
            let h = mm.health();
            if h.checkers.len() == 3 && h.checkers.iter().all(|c| c.fresh && c.error.is_empty()) {
                break;
            }
            assert!(
                start.elapsed() < WITHIN,
                "checkers: {:?}\n{}",
                h.checkers,
                mm.text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A checker blinded by nftables is called unreliable by all, takes no backend down, and a real failure is still seen by the quorum of the others.
fn a_blinded_witness_is_discarded(
    ms: &[Mgmt],
    blinded_ns: &Netns,
    servers: &HttpBackends,
    cli: &Netns,
) {
    let blind_id = ms[2].health().checker;
    // Blind the third: its probes to the backends are dropped.
    blinded_ns.run(&[
        "nft", "add table inet blind; add chain inet blind out { type filter hook output priority 0; }; add rule inet blind out ip daddr 10.82.0.0/24 drop",
    ]);
    // The others call it an unreliable witness ...
    for mm in &ms[..2] {
        let start = Instant::now();
        loop {
            let h = mm.health();
            let c = h.checkers.iter().find(|c| c.id == blind_id).unwrap();
            if !c.unreliable.is_empty() {
                assert!(
                    c.unreliable
                        .contains("targets that other checkers see pass"),
                    "{c:?}"
                );
                break;
            }
            assert!(
                start.elapsed() < WITHIN,
                "not judged unreliable: {:?}\n{}",
                h.checkers,
                mm.text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // ... and so does it, about itself; nobody takes a backend down.
    let start = Instant::now();
    loop {
        let h = ms[2].health();
        if !h.checkers[0].unreliable.is_empty() {
            break;
        }
        assert!(
            start.elapsed() < WITHIN,
            "{:?}\n{}",
            h.checkers,
            ms[2].text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(4 * INTERVAL_MS));
    for mm in ms {
        let v = mm.vip("web");
        assert!(
            v.backends.iter().all(|b| b.state == UP && b.ring_slots > 0),
            "{v:?}\n{}",
            mm.text()
        );
    }
    let blinded = ms[2].vip("web");
    assert!(
        blinded.backends[0]
            .reason
            .contains(&format!("votes discarded (unreliable witness): {blind_id}")),
        "{}",
        blinded.backends[0].reason
    );
    let got = who_answers(&cli.name, "10.81.0.100:80".parse().unwrap(), 100);
    assert_eq!(tally(&got).len(), 3, "{:?}", tally(&got));
    // A real failure is still seen by the quorum of the two others.
    servers.ctl[2].serving.store(false, Ordering::Relaxed);
    let b = ms[0].wait_backend("web", backend(2), WITHIN, "b2 down by quorum", |b| {
        b.state == DOWN
    });
    assert!(
        b.reason.contains("checkers see it fail (quorum 2)"),
        "{}",
        b.reason
    );
    let h = ms[0].health();
    let b2 = h
        .vips
        .iter()
        .find(|v| v.name == "web")
        .unwrap()
        .backends
        .iter()
        .find(|b| b.address == backend(2).to_string())
        .unwrap()
        .clone();
    assert!(
        !b2.checkers.contains(&blind_id),
        "the blind witness is not among {:?}",
        b2.checkers
    );
    assert!(b2.checkers.len() >= 2, "{:?}", b2.checkers);
}
