//! Flows across restarts of border-dp on `net_af_xdp` ports over veth
//! pairs (the veths, and so the kernel side, stay while border-dp is
//! gone): long-lived full-NAT and DNAT TCP streams echo-checked byte for
//! byte, a PROXY v2 stream through HAProxy's `accept-proxy` and a UDP flow
//! keep going across SIGTERM + start, `kill -9` + start, a worker panic
//! (border-dp ends) + start, and an upgrade to the next flows layout version; after each
//! restart 50 of 50 new connections succeed within 0.3 s.
//!
//! `BORDER_RESTART_ROUNDS=n` runs n SIGTERM and n kill -9 rounds (default 2).
//! `BORDER_DP_BIN=target/release/border-dp` runs them on a release build
//! (the gap figures): the worker-panic round is then left out (its
//! trigger is a debug-build hook) and the upgrade round writes this
//! build's layout (so does `BORDER_FLOWS_LAYOUT_NEXT`, debug builds only).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::echo_lines::{line, tcp_stream, Shared, CADENCE, LINE};
use common::*;
use conf::counters::Counter;

const TAG: &str = "rs";
const INSTANCE: &str = "e2ers";
const VIP: &str = "10.140.0.100";
const BACKEND: &str = "10.141.0.11";

fn config() -> String {
    let mut c = two_port_config_on(
        PortKind::AfXdp,
        INSTANCE,
        TAG,
        "10.140.0.1/24",
        "10.141.0.1/24",
        &format!("unix:///run/border/{INSTANCE}.sock"),
    );
    for (name, port, proto, mode, to) in [
        ("fullnat", 80, "tcp", "fullnat", 7000),
        ("dnat", 81, "tcp", "dnat", 7001),
        ("udp", 82, "udp", "fullnat", 7002),
        ("pp", 83, "tcp", "fullnat", 7003),
    ] {
        let pp = if name == "pp" {
            "proxy_protocol = \"v2\"\n"
        } else {
            ""
        };
        c += &format!(
            r#"
[[vip]]
name = "{name}"
address = "{VIP}"
port = {port}
protocol = "{proto}"
mode = "{mode}"
{pp}[[vip.backend]]
address = "{BACKEND}"
port = {to}
"#
        );
    }
    c
}

/// A UDP flow through port 82: a datagram every `CADENCE`; each answer
/// must be exactly one of the datagrams sent (some may be lost while no
/// border-dp runs).
fn udp_flow(stop: Arc<AtomicBool>) -> Shared {
    let seen: Shared = Arc::default();
    let out = seen.clone();
    in_netns(&format!("{TAG}-cli"), move || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        s.connect(format!("{VIP}:82")).unwrap();
        s.set_read_timeout(Some(CADENCE)).unwrap();
        let mut seq = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let l = line(9, seq);
            let _ = s.send(&l);
            let mut back = [0u8; 2 * LINE];
            while let Ok(n) = s.recv(&mut back) {
                let got_seq = String::from_utf8_lossy(&back[..n])
                    .split_whitespace()
                    .nth(3)
                    .and_then(|x| x.parse::<u64>().ok());
                match got_seq {
                    Some(q) if q <= seq && back[..n] == line(9, q) => {
                        out.lock().unwrap().echoes.push(Instant::now())
                    }
                    _ => {
                        out.lock().unwrap().error = Some(format!("bad datagram {:?}", &back[..n]));
                        return;
                    }
                }
            }
            seq += 1;
        }
    });
    seen
}

/// Echo servers in the backend namespace: TCP on 7000 and 7001, UDP on 7002.
fn echo_servers() {
    for port in [7000u16, 7001] {
        in_netns(&format!("{TAG}-bk"), move || {
            let l = TcpListener::bind((BACKEND, port)).unwrap();
            for s in l.incoming() {
                let Ok(mut s) = s else { continue };
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = s.read(&mut buf) {
                        if n == 0 || s.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
    }
    in_netns(&format!("{TAG}-bk"), || {
        let s = UdpSocket::bind((BACKEND, 7002)).unwrap();
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = s.recv_from(&mut buf) {
            let _ = s.send_to(&buf[..n], from);
        }
    });
}

/// HAProxy with `accept-proxy` on 7003 in the backend namespace, relaying
/// to the TCP echo server on 7000: the PROXY v2 flow's backend.
fn haproxy(bk: &Netns, dir: &TempDir) -> Spawned {
    let cfg = format!(
        r#"global
defaults
    mode tcp
    timeout connect 5s
    timeout client 60s
    timeout server 60s
frontend pp
    bind {BACKEND}:7003 accept-proxy
    default_backend echo
backend echo
    server e {BACKEND}:7000
"#
    );
    let path = dir.path("haproxy.cfg");
    std::fs::write(&path, cfg).unwrap();
    let path = path.to_str().unwrap();
    bk.run(&["haproxy", "-c", "-q", "-f", path]);
    let h = bk.spawn(&["haproxy", "-db", "-f", path]);
    wait_until("haproxy listening", Duration::from_secs(10), || {
        let out = bk.try_run(&["ss", "-Htln"]);
        String::from_utf8_lossy(&out.stdout).contains(":7003 ")
    });
    h
}

/// 50 new connections to the full-NAT VIP, one after the other: each
/// connects and echoes a line within 0.3 s. Returns the failures.
fn fifty_new_connections() -> Vec<String> {
    in_netns(&format!("{TAG}-cli"), || {
        let addr: SocketAddr = format!("{VIP}:80").parse().unwrap();
        let mut failed = Vec::new();
        for i in 0..50u64 {
            let t = Instant::now();
            let r = (|| -> std::io::Result<()> {
                let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(300))?;
                s.set_read_timeout(Some(Duration::from_millis(300)))?;
                let l = line(7, i);
                s.write_all(&l)?;
                let mut back = [0u8; LINE];
                s.read_exact(&mut back)?;
                if back != l {
                    return Err(std::io::Error::other("wrong bytes"));
                }
                Ok(())
            })();
            match r {
                Ok(()) if t.elapsed() <= Duration::from_millis(300) => {}
                Ok(()) => failed.push(format!("connection {i} took {:?}", t.elapsed())),
                Err(e) => failed.push(format!("connection {i}: {e}")),
            }
        }
        failed
    })
    .join()
    .unwrap()
}

#[derive(Clone, Copy, Debug)]
enum Restart {
    Sigterm,
    Kill9,
    /// A worker panics (the debug builds' test trigger): border-dp ends.
    Panic,
    /// SIGTERM, and a start with another `conntrack_per_worker`.
    Resize,
    Upgrade,
}

#[test]
fn flows_survive_restarts_kills_and_an_upgrade() {
    let rounds: usize = std::env::var("BORDER_RESTART_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    clean_instance(INSTANCE);
    let lb = Netns::new(&format!("{TAG}-lb"));
    let cli = Netns::new(&format!("{TAG}-cli"));
    let bk = Netns::new(&format!("{TAG}-bk"));
    let (ext, int) = (format!("{TAG}-ext"), format!("{TAG}-int"));
    PortKind::AfXdp.prepare(&lb, &cli, &ext);
    PortKind::AfXdp.prepare(&lb, &bk, &int);
    let dir = TempDir::new(TAG);
    let cfg = config();
    let panic_file = dir.path("panic");
    let panic_env = [(
        dataplane::fault::PANIC_FILE_ENV,
        panic_file.to_str().unwrap().to_string(),
    )];
    let resized = cfg.replace(
        "conntrack_per_worker = 16384",
        "conntrack_per_worker = 8192",
    );
    assert_ne!(resized, cfg);
    let start_on = |cfg: &str, env: &[(&str, &str)]| {
        let mut all: Vec<(&str, &str)> = panic_env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        all.extend_from_slice(env);
        BorderDp::start_with_env(&lb, &dir, INSTANCE, cfg, &all)
    };
    let start = |env: &[(&str, &str)]| start_on(&cfg, env);
    let mut dp = start(&[]);
    PortKind::AfXdp.connect(&lb, &cli, &ext, &["10.140.0.2/24"]);
    PortKind::AfXdp.connect(&lb, &bk, &int, &[&format!("{BACKEND}/24")]);
    cli.run(&["ip", "route", "add", "default", "via", "10.140.0.1"]);
    bk.run(&["ip", "route", "add", "default", "via", "10.141.0.1"]);
    echo_servers();
    let _haproxy = haproxy(&bk, &dir);
    std::thread::sleep(Duration::from_millis(200));

    let stop = Arc::new(AtomicBool::new(false));
    let flows = [
        (
            "fullnat tcp",
            tcp_stream(&format!("{TAG}-cli"), VIP, 1, 80, stop.clone()),
        ),
        (
            "dnat tcp",
            tcp_stream(&format!("{TAG}-cli"), VIP, 2, 81, stop.clone()),
        ),
        (
            "proxy v2 tcp",
            tcp_stream(&format!("{TAG}-cli"), VIP, 3, 83, stop.clone()),
        ),
        ("udp", udp_flow(stop.clone())),
    ];
    let progressed = |since: Instant| -> Vec<Option<Instant>> {
        flows
            .iter()
            .map(|(_, s)| {
                s.lock()
                    .unwrap()
                    .echoes
                    .iter()
                    .copied()
                    .find(|&t| t > since)
            })
            .collect()
    };
    let check_errors = |dp: &BorderDp| {
        for (name, s) in &flows {
            if let Some(e) = &s.lock().unwrap().error {
                panic!("{name} flow lost: {e}\nborder-dp log:\n{}", dp.log_text());
            }
        }
    };
    let t0 = Instant::now();
    wait_until("every flow echoes", Duration::from_secs(10), || {
        progressed(t0).iter().all(Option::is_some)
    });
    check_errors(&dp);

    let mut plan: Vec<Restart> = Vec::new();
    for _ in 0..rounds {
        plan.push(Restart::Sigterm);
        plan.push(Restart::Kill9);
    }
    if std::env::var_os("BORDER_DP_BIN").is_none_or(|v| v.is_empty()) {
        plan.push(Restart::Panic);
    } else {
        eprintln!("BORDER_DP_BIN set: no worker-panic round (a debug-build hook)");
    }
    plan.push(Restart::Resize);
    plan.push(Restart::Upgrade);
    let mut gaps = Vec::new();
    let mut tcp_gaps = Vec::new();
    for (i, how) in plan.iter().enumerate() {
        std::thread::sleep(Duration::from_millis(300));
        let before = Instant::now();
        match how {
            Restart::Sigterm | Restart::Upgrade | Restart::Resize => {
                dp.stop();
            }
            Restart::Kill9 => dp.kill9(),
            Restart::Panic => {
                std::fs::write(&panic_file, "0").unwrap();
                let status = dp.wait_exit(Duration::from_secs(10));
                assert!(
                    status.is_some_and(|s| !s.success()),
                    "a worker panic ends border-dp with an error: {status:?}\n{}",
                    dp.log_text()
                );
            }
        }
        drop(dp);
        let stopped = before.elapsed();
        dp = match how {
            Restart::Upgrade => start_on(&resized, &[("BORDER_FLOWS_LAYOUT_NEXT", "1")]),
            Restart::Resize => start_on(&resized, &[]),
            _ => start(&[]),
        };
        let started = before.elapsed();
        // Echoed from now on: through the new process (the old one is gone).
        let running = Instant::now();
        let deadline = running + Duration::from_secs(10);
        while progressed(running).iter().any(Option::is_none) && Instant::now() < deadline {
            check_errors(&dp);
            std::thread::sleep(Duration::from_millis(10));
        }
        check_errors(&dp);
        let after = progressed(running);
        for ((name, _), t) in flows.iter().zip(&after) {
            assert!(
                t.is_some(),
                "restart {i} ({how:?}): the {name} flow did not continue within 10 s\nborder-dp log:\n{}",
                dp.log_text()
            );
        }
        // The gaps: the longest silence of each flow from shortly before
        // the stop to its first echo through the new process. The UDP
        // flow's (a datagram every 20 ms) is the forwarding gap, last
        // packet through the old process to first through the new one; the
        // TCP streams' adds their retransmission backoff.
        let gap_of = |k: usize| {
            let end = after[k].unwrap();
            let from = before - Duration::from_millis(500);
            let seen = flows[k].1.lock().unwrap();
            let times: Vec<Instant> = seen
                .echoes
                .iter()
                .copied()
                .filter(|&e| e >= from && e <= end)
                .collect();
            times
                .windows(2)
                .map(|w| w[1].duration_since(w[0]))
                .max()
                .unwrap_or_default()
        };
        let gap = gap_of(3);
        let tcp_gap = gap_of(0).max(gap_of(1)).max(gap_of(2));
        tcp_gaps.push(tcp_gap);
        gaps.push(gap);
        let adopted = dp.counter(Counter::FlowsAdopted);
        assert!(
            adopted >= 4,
            "restart {i} ({how:?}): {adopted} flows adopted\n{}",
            dp.log_text()
        );
        let failed = fifty_new_connections();
        assert!(
            failed.is_empty(),
            "restart {i} ({how:?}): new connections failed: {failed:?}\n{}",
            dp.log_text()
        );
        eprintln!(
            "restart {i} ({how:?}): forwarding gap {gap:?}, TCP echo gap {tcp_gap:?} (old process gone after {stopped:?}, new one running after {started:?}), {adopted} flows adopted"
        );
    }
    check_errors(&dp);
    stop.store(true, Ordering::Relaxed);
    gaps.sort();
    tcp_gaps.sort();
    let (p50, max) = (gaps[gaps.len() / 2], gaps[gaps.len() - 1]);
    eprintln!(
        "forwarding gaps over {} restarts: p50 {p50:?}, max {max:?}; TCP echo gaps: p50 {:?}, max {:?}",
        gaps.len(),
        tcp_gaps[tcp_gaps.len() / 2],
        tcp_gaps[tcp_gaps.len() - 1]
    );
    assert!(max <= Duration::from_secs(2), "forwarding gaps {gaps:?}");
    dp.stop();
}
