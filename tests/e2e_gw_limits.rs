//! border-gw under attack (`[limits]`, docs/fleet.md): idle connections by the
//! thousand against both listeners, readers that open streams and never end
//! their bodies, and a registry entry naming a blackholed address. Real
//! border-gw, border-mgmt (agent mode) and redis-server on 127.0.0.1;
//! instances `gl-*`. Each test failed before the limits (docs/security.md).
//!
//! Sizes are scaled down for CI; the full figures of the issue's goals:
//! ```text
//! BORDER_GW_IDLE_CONNECTIONS=65000 BORDER_GW_READER_STREAMS=200 BORDER_GW_READER_BODY_MB=4 \
//!   flock /tmp/border-e2e.lock cargo test --release --test e2e_gw_limits -- --test-threads 1 --nocapture
//! ```

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::fleet::{quantile, registry_count, wait_for, Fleet, Gw};
use hyper_util::rt::{TokioExecutor, TokioIo};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// How long `n` GetStatus calls through `gw` to `appliance` take, each on
/// a new connection (TLS included), as borderctl makes them.
async fn fresh_calls(fleet: &Fleet, gw: &Gw, appliance: &str, n: usize) -> Vec<Duration> {
    let mut took = Vec::with_capacity(n);
    for _ in 0..n {
        let t0 = Instant::now();
        let mut c = fleet.client(gw, "ctl", appliance).await;
        let mut req = tonic::Request::new(mgmt::pb::GetStatusRequest::default());
        req.set_timeout(Duration::from_secs(5));
        c.get_status(req)
            .await
            .expect("GetStatus through the gateway");
        took.push(t0.elapsed());
    }
    took
}

/// Holds idle TCP connections (never a byte sent) in child processes, one
/// per source address 127.0.0.2 .. 127.0.0.9, so no process needs more
/// descriptors than its limit allows; they close when this drops.
struct IdleFlood(Vec<std::process::Child>);

/// One child's job: connect `n` times from `src` to the ports, round
/// robin, print how many connected, hold them until stdin closes.
const HOLDER: &str = r#"
import socket, sys
src, n, ports = sys.argv[1], int(sys.argv[2]), [int(p) for p in sys.argv[3].split(",")]
held = []
for i in range(n):
    s = socket.socket()
    s.bind((src, 0))
    s.settimeout(3)
    try:
        s.connect(("127.0.0.1", ports[i % len(ports)]))
        held.append(s)
    except OSError:
        s.close()
print(len(held), flush=True)
sys.stdin.read()
"#;

impl IdleFlood {
    /// `n` connections to `ports`; returns once all are open (or failed),
    /// with how many are held.
    fn open(ports: &[u16], n: usize) -> (IdleFlood, usize) {
        use std::io::BufRead;
        let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
        let mut children = Vec::new();
        for i in 0..8 {
            let share = n / 8 + usize::from(i < n % 8);
            let child = std::process::Command::new("python3")
                .args([
                    "-c",
                    HOLDER,
                    &format!("127.0.0.{}", 2 + i),
                    &share.to_string(),
                ])
                .arg(ports.join(","))
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("python3");
            children.push(child);
        }
        let mut held = 0;
        for c in &mut children {
            let mut line = String::new();
            std::io::BufReader::new(c.stdout.as_mut().unwrap())
                .read_line(&mut line)
                .unwrap();
            held += line.trim().parse::<usize>().unwrap_or(0);
        }
        (IdleFlood(children), held)
    }
}

impl Drop for IdleFlood {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Samples `what` every 20 ms until dropped; the largest value seen.
struct Peak {
    stop: Arc<AtomicBool>,
    max: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Peak {
    fn watch(
        what: impl Fn() -> u64 + Send + 'static,
        on_each: impl Fn(u64) + Send + 'static,
    ) -> Peak {
        let (stop, max) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
        );
        let (s, m) = (stop.clone(), max.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let v = what();
                m.fetch_max(v, Ordering::Relaxed);
                on_each(v);
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Peak {
            stop,
            max,
            thread: Some(thread),
        }
    }

    fn max(&self) -> u64 {
        self.max.load(Ordering::Relaxed)
    }
}

impl Drop for Peak {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Handshakes each listener lets run at once in the idle test: more than
/// the flood's 8 sources may take (16 each), so the operator and the
/// appliances, from another source, always find one free.
const HANDSHAKES: u64 = 160;

#[test]
fn idle_connections_by_the_thousand_hold_few_descriptors_and_lock_nobody_out() {
    let n = env_usize("BORDER_GW_IDLE_CONNECTIONS", 3000);
    let fleet = Fleet::new("gl-idle");
    let gw = fleet.gateway(
        "gw1",
        &format!(
            "handshakes = {HANDSHAKES}\nhandshakes_per_source = 16\nhandshake_timeout_ms = 1000"
        ),
    );
    let _ams1 = fleet.appliance("gl-idle1", "ams-1", &[&gw]);
    let port = fleet.redis_port;
    wait_for("10 tunnels of ams-1", Duration::from_secs(10), || {
        registry_count(port, "gw1", "ams-1") == 10
    });
    let rt = runtime();
    let mut idle = rt.block_on(fresh_calls(&fleet, &gw, "ams-1", 200));
    let p99_before = quantile(&mut idle, 0.99);
    let fds_idle = gw.proc.fds() as u64;

    let pid = gw.proc.pid();
    let fds = Peak::watch(
        move || {
            std::fs::read_dir(format!("/proc/{pid}/fd"))
                .map(|d| d.count() as u64)
                .unwrap_or(0)
        },
        |_| {},
    );
    let t0 = Instant::now();
    let (flood, held) = IdleFlood::open(&[gw.agent, gw.api], n);
    let flood_took = t0.elapsed();
    eprintln!("{held} connections held after {flood_took:?}");
    // Held open while an operator calls and another appliance dials in
    // (once the handshakes admitted from the flood have timed out).
    std::thread::sleep(Duration::from_millis(1200));
    let mut during = rt.block_on(fresh_calls(&fleet, &gw, "ams-1", 200));
    let p99_during = quantile(&mut during, 0.99);
    let _ams2 = fleet.appliance("gl-idle2", "ams-2", &[&gw]);
    wait_for(
        "ams-2's tunnels while the connections are held",
        Duration::from_secs(10),
        || registry_count(port, "gw1", "ams-2") >= 2,
    );
    let peak_fds = fds.max();
    drop(fds);
    drop(flood);
    // Idle again: the baseline is the slower of the two idle rounds around
    // the held one (this machine's other load moves a p99 of ~10 ms).
    let mut idle = rt.block_on(fresh_calls(&fleet, &gw, "ams-1", 200));
    let p99_idle = quantile(&mut idle, 0.99).max(p99_before);
    eprintln!(
        "{held} idle connections held ({n} tried in {flood_took:?}); border-gw fds: {fds_idle} idle, peak {peak_fds}; \
         fresh-connection GetStatus p99 {p99_before:?} idle before, {p99_during:?} while held, {p99_idle:?} idle (the slower round)",
    );
    // The bound (docs/fleet.md): what the gateway held idle, plus at most
    // `handshakes` connections in progress on each listener, plus ams-2's
    // tunnels and a few in passing.
    let bound = fds_idle + 2 * HANDSHAKES + 32;
    assert!(
        peak_fds <= bound,
        "border-gw peaked at {peak_fds} fds, bound {bound}"
    );
    assert!(held * 10 >= n * 9, "only {held} of {n} connected");
    // Twice idle plus 250 ms of scheduling noise on a loaded
    // 2-core machine: the failure this guards against is seconds.
    assert!(
        p99_during <= p99_idle * 2 + Duration::from_millis(250),
        "GetStatus p99 {p99_during:?} while held, {p99_idle:?} idle"
    );
    // ams-1 stayed connected: no tunnel of it closed.
    assert_eq!(registry_count(port, "gw1", "ams-1"), 10);
    let m = gw.scrape();
    assert_eq!(m.get("border_gw_tunnel_closes_total"), 0.0);
    eprintln!(
        "refused at once: agent {} + {}, api {} + {}; timed out: agent {}, api {}",
        m.refused("agent", "handshakes_per_source"),
        m.refused("agent", "handshakes"),
        m.refused("api", "handshakes_per_source"),
        m.refused("api", "handshakes"),
        m.refused("agent", "handshake_timeout"),
        m.refused("api", "handshake_timeout"),
    );
    assert!(m.refused("agent", "handshakes_per_source") > 0.0);
    assert!(m.refused("api", "handshakes_per_source") > 0.0);
}

/// A request body that sends `left` bytes and then never ends.
struct Endless {
    left: usize,
    chunk: Bytes,
}

impl hyper::body::Body for Endless {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        if self.left == 0 {
            // No END_STREAM, ever.
            return std::task::Poll::Pending;
        }
        let n = self.left.min(self.chunk.len());
        self.left -= n;
        std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(self.chunk.slice(..n)))))
    }

    fn is_end_stream(&self) -> bool {
        false
    }
}

/// One reader connection (TLS, HTTP/2) to `gw`'s api listener.
async fn reader_connection(
    fleet: &Fleet,
    gw: &Gw,
) -> hyper::client::conn::http2::SendRequest<Endless> {
    let mut cfg =
        Arc::unwrap_or_clone(mgmt::tls::client_config(&fleet.client_tls("reader")).unwrap());
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", gw.api))
        .await
        .unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let tls = connector.connect(name, tcp).await.unwrap();
    let (send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    send
}

/// What the gateway answered the reader's streams: gRPC status → count.
type Answers = std::collections::BTreeMap<String, usize>;

async fn endless_streams(
    mut send: hyper::client::conn::http2::SendRequest<Endless>,
    streams: usize,
    body: usize,
) -> Answers {
    let chunk = Bytes::from(vec![0u8; 64 << 10]);
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..streams {
        if send.ready().await.is_err() {
            break;
        }
        let req = hyper::Request::post("http://gw/border.v1.Border/GetStatus")
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .header("border-appliance", "ams-1")
            .body(Endless {
                left: body,
                chunk: chunk.clone(),
            })
            .unwrap();
        let answer = send.send_request(req);
        calls.spawn(async move {
            match tokio::time::timeout(Duration::from_secs(60), answer).await {
                Err(_) => "no answer in 60 s".to_string(),
                // Streams beyond streams_per_connection before the client
                // learnt the setting (RFC 9113 §5.1.2).
                Ok(Err(e)) if format!("{e:?}").contains("REFUSED_STREAM") => {
                    "REFUSED_STREAM".to_string()
                }
                Ok(Err(e)) => format!("error: {e:?}"),
                Ok(Ok(r)) => r
                    .headers()
                    .get("grpc-status")
                    .map_or("no grpc-status".into(), |v| {
                        format!("grpc-status {}", v.to_str().unwrap_or("?"))
                    }),
            }
        });
    }
    let mut answers = Answers::new();
    while let Some(a) = calls.join_next().await {
        *answers
            .entry(a.unwrap_or_else(|e| e.to_string()))
            .or_default() += 1;
    }
    answers
}

/// The resident memory border-gw must stay under (docs/security.md).
const RSS_BOUND: u64 = 256 << 20;

#[test]
fn readers_that_never_end_their_bodies_get_bounded_memory_and_operators_still_answer() {
    let conns = env_usize("BORDER_GW_READER_CONNECTIONS", 10);
    let streams = env_usize("BORDER_GW_READER_STREAMS", 200);
    let body = env_usize("BORDER_GW_READER_BODY_MB", 4) << 20;
    let fleet = Fleet::new("gl-mem");
    let gw = fleet.gateway("gw1", "body_read_timeout_ms = 5000");
    let _ams1 = fleet.appliance("gl-mem1", "ams-1", &[&gw]);
    let port = fleet.redis_port;
    wait_for("tunnels of ams-1", Duration::from_secs(10), || {
        registry_count(port, "gw1", "ams-1") >= 2
    });
    let rss_idle = gw.proc.rss();
    let pid = gw.proc.pid() as i32;
    let over = Arc::new(AtomicBool::new(false));
    let seen_over = over.clone();
    let rss = Peak::watch(
        move || {
            let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .map_or(0, |kb| kb * 1024)
        },
        move |v| {
            if v > RSS_BOUND && !seen_over.swap(true, Ordering::Relaxed) {
                // Over the bound: stop it here rather than let it eat the machine.
                // SAFETY: kill(2) on the border-gw child this test started.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        },
    );
    let rt = runtime();
    let t0 = Instant::now();
    let (answers, operator) = rt.block_on(async {
        let mut attack = tokio::task::JoinSet::new();
        for _ in 0..conns {
            let send = reader_connection(&fleet, &gw).await;
            attack.spawn(endless_streams(send, streams, body));
        }
        // An operator calls meanwhile, on its own connection.
        let mut operator = Vec::new();
        let mut answers = Answers::new();
        let mut add = |a: Answers| {
            for (k, v) in a {
                *answers.entry(k).or_default() += v;
            }
        };
        let mut c = fleet.client(&gw, "ctl", "ams-1").await;
        while !attack.is_empty() && !over.load(Ordering::Relaxed) {
            let mut req = tonic::Request::new(mgmt::pb::GetStatusRequest::default());
            req.set_timeout(Duration::from_secs(5));
            let t = Instant::now();
            let r = c.get_status(req).await;
            operator.push((t.elapsed(), r.map(|_| ()).map_err(|s| s.to_string())));
            tokio::time::sleep(Duration::from_millis(100)).await;
            while let Some(done) = attack.try_join_next() {
                add(done.unwrap());
            }
        }
        while let Some(a) = attack.join_next().await {
            add(a.unwrap());
        }
        (answers, operator)
    });
    let took = t0.elapsed();
    let peak = rss.max();
    drop(rss);
    assert!(
        !over.load(Ordering::Relaxed),
        "border-gw's RSS went over {} MiB ({conns} x {streams} x {} MiB): killed",
        RSS_BOUND >> 20,
        body >> 20
    );
    let mut slow: Vec<Duration> = operator.iter().map(|(t, _)| *t).collect();
    eprintln!(
        "{conns} reader connections x {streams} streams x {} MiB without END_STREAM, {took:?}: \
         border-gw RSS {} MiB idle, peak {} MiB; answers {answers:?}; operator GetStatus: {} calls, p99 {:?}",
        body >> 20,
        rss_idle >> 20,
        peak >> 20,
        operator.len(),
        quantile(&mut slow, 0.99),
    );
    assert!(peak <= RSS_BOUND, "{peak}");
    assert!(!operator.is_empty());
    let failed: Vec<_> = operator.iter().filter(|(_, r)| r.is_err()).collect();
    assert!(failed.is_empty(), "operator calls failed: {failed:?}");
    let m = gw.scrape();
    eprintln!(
        "refused: reader_request_memory {}, request_memory {}, body_read_timeout {}",
        m.refused("api", "reader_request_memory"),
        m.refused("api", "request_memory"),
        m.refused("api", "body_read_timeout"),
    );
    assert!(m.refused("api", "reader_request_memory") > 0.0);
    // Every stream got an answer: refused (RESOURCE_EXHAUSTED, or
    // REFUSED_STREAM by HTTP/2) or timed out (DEADLINE_EXCEEDED).
    let answered: usize = answers
        .iter()
        .filter(|(k, _)| ["grpc-status 8", "grpc-status 4", "REFUSED_STREAM"].contains(&k.as_str()))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(answered, conns * streams, "{answers:?}");
    wait_for("the budget given back", Duration::from_secs(5), || {
        gw.scrape().get("border_gw_request_memory_bytes") == 0.0
    });
}

#[test]
fn a_blackholed_registry_entry_costs_only_its_own_appliances_calls() {
    let fleet = Fleet::new("gl-hole");
    let gw1 = fleet.gateway("gw1", "");
    let gw2 = fleet.gateway("gw2", "");
    let _ams1 = fleet.appliance("gl-hole1", "ams-1", &[&gw1]);
    let port = fleet.redis_port;
    wait_for("tunnels of ams-1 on gw1", Duration::from_secs(10), || {
        registry_count(port, "gw1", "ams-1") >= 2
    });
    // A gateway address that never answers: a socket that listens and
    // never accepts (TCP completes, TLS never does), at gw3's address, a
    // configured [[peer]] of gw2 whose host has died (an address no
    // [[peer]] names would get no connection at all).
    let hole = std::net::TcpListener::bind(("127.0.0.1", fleet.api_port("gw3"))).unwrap();
    let hole_addr = hole.local_addr().unwrap().to_string();
    let forever = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 3_600_000)
        .to_string();
    common::fleet::redis_cli(
        port,
        &["ZADD", "border:fleet:appliance:ghost", &forever, &hole_addr],
    );
    let rt = runtime();
    let calls = |n: usize| {
        rt.block_on(async {
            let mut c = fleet.client(&gw2, "ctl", "ams-1").await;
            // Connected, and gw2's connection to gw1 made, before timing.
            c.get_status(mgmt::pb::GetStatusRequest::default())
                .await
                .expect("ams-1 through gw2");
            let mut took = Vec::new();
            for _ in 0..n {
                let t0 = Instant::now();
                c.get_status(mgmt::pb::GetStatusRequest::default())
                    .await
                    .expect("ams-1 through gw2");
                took.push(t0.elapsed());
            }
            took
        })
    };
    let mut base = calls(300);
    let p99_base = quantile(&mut base, 0.99);
    // Callers of the blackholed appliance, all the time.
    let stop = Arc::new(AtomicBool::new(false));
    let ghost_answers = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut callers = Vec::new();
    for _ in 0..8 {
        let (stop, answers) = (stop.clone(), ghost_answers.clone());
        let tls = fleet.client_tls("ctl");
        let api = gw2.api;
        callers.push(rt.spawn(async move {
            let target = conf::Listen::Tcp(format!("127.0.0.1:{api}").parse().unwrap());
            let ch = mgmt::client::connect_channel(&target, Some(&tls))
                .await
                .unwrap();
            let mut c = mgmt::client::routed(ch, mgmt::client::Route::to("ghost").unwrap()).border;
            while !stop.load(Ordering::Relaxed) {
                let mut req = tonic::Request::new(mgmt::pb::GetStatusRequest::default());
                req.set_timeout(Duration::from_secs(5));
                let t0 = Instant::now();
                let r = c.get_status(req).await;
                answers
                    .lock()
                    .unwrap()
                    .push((t0.elapsed(), r.err().map(|s| s.code())));
            }
        }));
    }
    std::thread::sleep(Duration::from_millis(300));
    let mut loaded = calls(300);
    let p99_loaded = quantile(&mut loaded, 0.99);
    stop.store(true, Ordering::Relaxed);
    for c in callers {
        rt.block_on(c).unwrap();
    }
    let ghost = ghost_answers.lock().unwrap().clone();
    let mut ghost_took: Vec<Duration> = ghost.iter().map(|(t, _)| *t).collect();
    eprintln!(
        "ams-1 through gw2: p99 {p99_base:?} alone, {p99_loaded:?} while 8 callers call the blackholed \
         ghost ({} ghost calls, p50 {:?}, max {:?})",
        ghost.len(),
        quantile(&mut ghost_took, 0.5),
        quantile(&mut ghost_took, 1.0),
    );
    assert!(!ghost.is_empty());
    assert!(
        ghost
            .iter()
            .all(|(t, code)| *code == Some(tonic::Code::Unavailable) && *t < Duration::from_secs(3)),
        "{ghost:?}"
    );
    // As above: a stall behind the hole would cost a second or more.
    assert!(
        p99_loaded <= p99_base * 2 + Duration::from_millis(250),
        "ams-1's p99 {p99_loaded:?} with the blackholed entry called, {p99_base:?} without"
    );
    // gw2 did dial the hole as a peer: not ignored as an unknown address.
    let log = gw2.proc.text();
    assert!(
        log.contains(&format!("gateway={hole_addr}")) && !log.contains("not a configured [[peer]]"),
        "{log}"
    );
    drop(hole);
}

#[test]
fn tunnels_beyond_the_per_appliance_bound_are_refused_with_an_answer() {
    let fleet = Fleet::new("gl-tun");
    let gw = fleet.gateway("gw1", "tunnels_per_appliance = 4\ntunnels = 6");
    let ams1 = fleet.appliance("gl-tun1", "ams-1", &[&gw]);
    let port = fleet.redis_port;
    // The agent opens 10 at once: 4 stay, the rest are refused and counted.
    wait_for("the refusals counted", Duration::from_secs(10), || {
        gw.scrape().refused("agent", "tunnels_per_appliance") >= 1.0
    });
    wait_for("the agent told why", Duration::from_secs(10), || {
        ams1.log_text()
            .contains("appliance ams-1 has too many tunnels here (limits.tunnels_per_appliance)")
    });
    assert_eq!(registry_count(port, "gw1", "ams-1"), 4);
    // Another appliance gets the 2 left of the total.
    let _ams2 = fleet.appliance("gl-tun2", "ams-2", &[&gw]);
    wait_for("ams-2 at the total", Duration::from_secs(10), || {
        registry_count(port, "gw1", "ams-2") == 2 && gw.scrape().refused("agent", "tunnels") >= 1.0
    });
    assert_eq!(gw.scrape().get("border_gw_tunnels"), 6.0);
    // Calls still go through the tunnels held.
    let rt = runtime();
    rt.block_on(async {
        let mut c = fleet.client(&gw, "ctl", "ams-1").await;
        c.get_status(mgmt::pb::GetStatusRequest::default())
            .await
            .unwrap();
    });
}
