//! What border-dp carries across a restart besides its flows, on
//! `net_af_xdp` ports over veth pairs: its neighbour bindings and its
//! persistence pins (`/dev/shm/border-<instance>-carry-<worker>`).
//!
//! - Neighbours: the backend namespace stops answering ARP requests just
//!   before a SIGTERM; the new border-dp still forwards at once (it starts
//!   with the backend's MAC), so a full-NAT TCP stream goes on, echoed
//!   byte for byte, and no frame waits in `neighbour_queued`.
//! - Pins: clients of a persistent VIP (`persistence_timeout`) pinned
//!   before the restarts keep their backend after a restart that adds
//!   four backends (Maglev alone would move some): every new connection
//!   is a persistence hit, none a miss.

mod common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::echo_lines::tcp_stream;
use common::*;
use conf::counters::Counter;

const TAG: &str = "nb";
const INSTANCE: &str = "e2enb";
const VIP: &str = "10.180.0.100";
const CLIENT: &str = "10.180.0.2";
/// Clients of the persistent VIP: 10.180.0.20 on.
const PINNED: u8 = 12;

fn backend(i: u8) -> String {
    format!("10.181.0.{}", 11 + i)
}

/// The config with the persistent VIP's `backends` backends.
fn config(backends: u8) -> String {
    let mut c = two_port_config_on(
        PortKind::AfXdp,
        INSTANCE,
        TAG,
        "10.180.0.1/24",
        "10.181.0.1/24",
        &format!("unix:///run/border/{INSTANCE}.sock"),
    );
    c += &format!(
        r#"
[[vip]]
name = "stream"
address = "{VIP}"
port = 80
protocol = "tcp"
mode = "fullnat"
[[vip.backend]]
address = "{}"
port = 7000

[[vip]]
name = "sticky"
address = "{VIP}"
port = 90
protocol = "tcp"
mode = "fullnat"
persistence_timeout = 300
"#,
        backend(0)
    );
    for i in 0..backends {
        c += &format!(
            "[[vip.backend]]\naddress = \"{}\"\nport = 7010\n",
            backend(i)
        );
    }
    c
}

/// In the backend namespace: an echo server on 7000, and on 7010 a
/// server that says which of its addresses a connection reached.
fn servers() {
    in_netns(&format!("{TAG}-bk"), || {
        let l = TcpListener::bind((backend(0).as_str(), 7000)).unwrap();
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
    in_netns(&format!("{TAG}-bk"), || {
        let l = TcpListener::bind("0.0.0.0:7010").unwrap();
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let me = s
                .local_addr()
                .map(|a| a.ip().to_string())
                .unwrap_or_default();
            let _ = s.write_all(format!("{me}\n").as_bytes());
        }
    });
}

fn client(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 180, 0, 20 + i)
}

/// The backend each pinned client's new connection to the persistent
/// VIP reaches (or why it failed).
fn backends_seen() -> Vec<String> {
    in_netns(&format!("{TAG}-cli"), || {
        let to: SocketAddr = format!("{VIP}:90").parse().unwrap();
        (0..PINNED)
            .map(|i| {
                let r = (|| -> std::io::Result<String> {
                    let mut s = connect_from(client(i), to)?;
                    s.set_read_timeout(Some(Duration::from_secs(2)))?;
                    let mut out = String::new();
                    s.read_to_string(&mut out)?;
                    Ok(out.trim().to_string())
                })();
                r.unwrap_or_else(|e| format!("error: {e}"))
            })
            .collect()
    })
    .join()
    .unwrap()
}

#[test]
fn neighbours_and_pins_survive_restarts() {
    clean_instance(INSTANCE);
    let lb = Netns::new(&format!("{TAG}-lb"));
    let cli = Netns::new(&format!("{TAG}-cli"));
    let bk = Netns::new(&format!("{TAG}-bk"));
    let (ext, int) = (format!("{TAG}-ext"), format!("{TAG}-int"));
    PortKind::AfXdp.prepare(&lb, &cli, &ext);
    PortKind::AfXdp.prepare(&lb, &bk, &int);
    let dir = TempDir::new(TAG);
    let mut dp = BorderDp::start(&lb, &dir, INSTANCE, &config(3));
    let mut cli_addrs = vec![format!("{CLIENT}/24")];
    cli_addrs.extend((0..PINNED).map(|i| format!("{}/24", client(i))));
    let cli_addrs: Vec<&str> = cli_addrs.iter().map(String::as_str).collect();
    PortKind::AfXdp.connect(&lb, &cli, &ext, &cli_addrs);
    let bk_addrs: Vec<String> = (0..7).map(|i| format!("{}/24", backend(i))).collect();
    let bk_addrs: Vec<&str> = bk_addrs.iter().map(String::as_str).collect();
    PortKind::AfXdp.connect(&lb, &bk, &int, &bk_addrs);
    cli.run(&["ip", "route", "add", "default", "via", "10.180.0.1"]);
    bk.run(&["ip", "route", "add", "default", "via", "10.181.0.1"]);
    servers();
    std::thread::sleep(Duration::from_millis(200));

    let stop = Arc::new(AtomicBool::new(false));
    let stream = tcp_stream(&format!("{TAG}-cli"), VIP, 1, 80, stop.clone());
    let progressed = |since: Instant| stream.lock().unwrap().echoes.iter().any(|&t| t > since);
    let check = |dp: &BorderDp| {
        if let Some(e) = &stream.lock().unwrap().error {
            panic!(
                "the stream was lost: {e}\nborder-dp log:\n{}",
                dp.log_text()
            );
        }
    };
    wait_until("the stream echoes", Duration::from_secs(10), || {
        progressed(Instant::now() - Duration::from_millis(100))
    });
    let pinned = backends_seen();
    assert!(
        pinned.iter().all(|b| b.starts_with("10.181.0.")),
        "{pinned:?}\n{}",
        dp.log_text()
    );
    assert_eq!(dp.counter(Counter::PersistenceMisses), u64::from(PINNED));

    // Restart 1: the backends answer no ARP request meanwhile.
    let nft = dir.path("arp.nft");
    std::fs::write(
        &nft,
        "table arp nbarp {\n chain in { type filter hook input priority 0; policy accept; arp operation request drop; }\n}\n",
    )
    .unwrap();
    bk.run(&["nft", "-f", nft.to_str().unwrap()]);
    std::thread::sleep(Duration::from_millis(300));
    dp.stop();
    drop(dp);
    dp = BorderDp::start_with_env(&lb, &dir, INSTANCE, &config(3), &[]);
    let running = Instant::now();
    while !progressed(running) && running.elapsed() < Duration::from_secs(10) {
        check(&dp);
        std::thread::sleep(Duration::from_millis(10));
    }
    let back = running.elapsed();
    let queued = dp.counter(Counter::NeighborQueued);
    let adopted = dp.counter(Counter::NeighAdopted);
    bk.run(&["nft", "delete", "table", "arp", "nbarp"]);
    check(&dp);
    assert!(
        progressed(running),
        "the stream did not continue within 10 s with the backend's ARP blocked (neighbour_queued {queued}, neigh_adopted {adopted})\n{}",
        dp.log_text()
    );
    assert_eq!(
        queued,
        0,
        "frames waited for a neighbour (neigh_adopted {adopted})\n{}",
        dp.log_text()
    );
    assert!(adopted >= 1, "neigh_adopted {adopted}");
    eprintln!("restart 1 (ARP blocked): stream back after {back:?}, neigh_adopted {adopted}, neighbour_queued {queued}, persistence_adopted {}", dp.counter(Counter::PersistenceAdopted));

    // Restart 2: four more backends.
    std::thread::sleep(Duration::from_millis(300));
    dp.stop();
    drop(dp);
    dp = BorderDp::start_with_env(&lb, &dir, INSTANCE, &config(7), &[]);
    let running = Instant::now();
    while !progressed(running) && running.elapsed() < Duration::from_secs(10) {
        check(&dp);
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(progressed(running), "{}", dp.log_text());
    let adopted_pins = dp.counter(Counter::PersistenceAdopted);
    let after = backends_seen();
    assert_eq!(after, pinned, "pinned clients moved\n{}", dp.log_text());
    assert_eq!(dp.counter(Counter::PersistenceHits), u64::from(PINNED));
    assert_eq!(dp.counter(Counter::PersistenceMisses), 0);
    assert!(
        adopted_pins >= u64::from(PINNED),
        "persistence_adopted {adopted_pins}"
    );
    eprintln!("restart 2 (7 backends): {PINNED} clients kept their backends, persistence_adopted {adopted_pins}");
    check(&dp);
    stop.store(true, Ordering::Relaxed);
    dp.stop();
    forget_flows(INSTANCE);
}
