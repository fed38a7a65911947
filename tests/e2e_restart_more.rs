//! Flows across restarts of border-dp that change the number of workers,
//! and across a start that dies while adopting, on `net_af_packet` ports
//! over veth pairs (the veths, and so the kernel side, stay while
//! border-dp is gone): long-lived full-NAT and DNAT TCP streams,
//! echo-checked byte for byte, keep going while border-dp goes from two
//! workers (one queue each: `qpairs=2`, the kernel's fanout spreads the
//! flows by hash) to one and back, and when a start is killed (SIGKILL,
//! `BORDER_ADOPT_HALT_AFTER`) after adopting one entry: the next start
//! adopts every flow, from the regions the dead start left, and removes
//! them once adopted.
//!
//! Why not `net_af_xdp`: DPDK 22.11's af_xdp takes the queues a device has
//! from its combined channels, and veth has separate rx and tx channels
//! and no combined ones, so it binds queue 0 only (`queue_count=2` or
//! `start_queue=1`: "Specified queue count 2 is larger than combined queue
//! count 1"); two workers need two queues per port.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::echo_lines::{tcp_stream, Shared};
use common::*;
use conf::counters::Counter;

const TAG: &str = "fr";
const INSTANCE: &str = "e2efr";
const VIP: &str = "10.168.0.100";
const CLIENT: &str = "10.168.0.2";
const BACKEND: &str = "10.169.0.11";
/// Full-NAT streams (port 80), then DNAT streams (port 81).
const FULLNAT: u8 = 6;
const DNAT: u8 = 2;

/// The config for `workers` workers (1 or 2), each port with as many
/// af_packet queues.
fn config(workers: usize) -> String {
    let mut c = two_port_config_on(
        PortKind::AfXdp,
        INSTANCE,
        TAG,
        "10.168.0.1/24",
        "10.169.0.1/24",
        &format!("unix:///run/border/{INSTANCE}.sock"),
    );
    for (i, dev) in ["ext", "int"].iter().enumerate() {
        let xdp = PortKind::AfXdp.devargs(i, &format!("{TAG}-{dev}"));
        let packet = format!("net_af_packet{i},iface={TAG}-{dev},qpairs={workers}");
        assert!(c.contains(&xdp));
        c = c.replace(&xdp, &packet);
    }
    if workers == 2 {
        c = c.replace(
            "worker_lcores = [1]",
            "worker_lcores = [1, 2]\nlcore_cpus = [0, 1, 1]",
        );
        assert!(c.contains("lcore_cpus"));
    }
    for (name, port, mode, to) in [("fullnat", 80, "fullnat", 7000), ("dnat", 81, "dnat", 7001)] {
        c += &format!(
            r#"
[[vip]]
name = "{name}"
address = "{VIP}"
port = {port}
protocol = "tcp"
mode = "{mode}"
[[vip.backend]]
address = "{BACKEND}"
port = {to}
"#
        );
    }
    c
}

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
}

/// The instance's flows region files (live and left by a start).
fn region_files() -> Vec<String> {
    dataplane::flows_region::flows_files(&conf::os::region_dir(), INSTANCE)
        .into_iter()
        .map(|(p, _, _)| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn flows_survive_a_change_of_workers_and_a_crash_during_adoption() {
    clean_instance(INSTANCE);
    let lb = Netns::new(&format!("{TAG}-lb"));
    let cli = Netns::new(&format!("{TAG}-cli"));
    let bk = Netns::new(&format!("{TAG}-bk"));
    let (ext, int) = (format!("{TAG}-ext"), format!("{TAG}-int"));
    PortKind::AfXdp.prepare(&lb, &cli, &ext);
    PortKind::AfXdp.prepare(&lb, &bk, &int);
    // af_packet gets a copy of each frame and the kernel keeps its own
    // (XDP took it): border-dp's kernel, which has the local addresses on
    // the twins, would answer the backend's segments with RSTs. Its copy
    // is dropped after the packet sockets have had theirs.
    let dir = TempDir::new(TAG);
    let nft = dir.path("ingress.nft");
    std::fs::write(
        &nft,
        format!(
            "table netdev {TAG}dp {{\n\
             chain ext {{ type filter hook ingress device \"{ext}\" priority 0; policy drop; }}\n\
             chain int {{ type filter hook ingress device \"{int}\" priority 0; policy drop; }}\n\
             }}\n"
        ),
    )
    .unwrap();
    lb.run(&["nft", "-f", nft.to_str().unwrap()]);
    let start = |workers: usize, env: &[(&str, &str)]| {
        BorderDp::start_with_env(&lb, &dir, INSTANCE, &config(workers), env)
    };
    let mut dp = start(2, &[]);
    PortKind::AfXdp.connect(&lb, &cli, &ext, &[&format!("{CLIENT}/24")]);
    PortKind::AfXdp.connect(&lb, &bk, &int, &[&format!("{BACKEND}/24")]);
    cli.run(&["ip", "route", "add", "default", "via", "10.168.0.1"]);
    bk.run(&["ip", "route", "add", "default", "via", "10.169.0.1"]);
    echo_servers();
    std::thread::sleep(Duration::from_millis(200));

    let stop = Arc::new(AtomicBool::new(false));
    let flows: Vec<(String, Shared)> = (0..FULLNAT + DNAT)
        .map(|f| {
            let port = if f < FULLNAT { 80 } else { 81 };
            (
                format!("flow {f} (port {port})"),
                tcp_stream(&format!("{TAG}-cli"), VIP, f, port, stop.clone()),
            )
        })
        .collect();
    let progressed = |since: Instant| -> Vec<bool> {
        flows
            .iter()
            .map(|(_, s)| s.lock().unwrap().echoes.iter().any(|&t| t > since))
            .collect()
    };
    let check_errors = |dp: &BorderDp| {
        for (name, s) in &flows {
            if let Some(e) = &s.lock().unwrap().error {
                panic!("{name} lost: {e}\nborder-dp log:\n{}", dp.log_text());
            }
        }
    };
    let t0 = Instant::now();
    while !progressed(t0).iter().all(|&p| p) {
        if t0.elapsed() > Duration::from_secs(10) {
            let errors: Vec<String> = flows
                .iter()
                .map(|(n, s)| format!("{n}: {:?}", s.lock().unwrap().error))
                .collect();
            let counters: Vec<(Counter, u64)> = dp
                .state()
                .totals()
                .into_iter()
                .filter(|(_, v)| *v > 0)
                .collect();
            panic!(
                "not every flow echoes: {errors:?}\ncounters {counters:?}\n{}",
                dp.log_text()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    check_errors(&dp);
    let total = u64::from(FULLNAT + DNAT);
    // How the fanout spread the flows over the two workers.
    let per_worker: Vec<u64> = {
        let s = dp.state();
        (0..s.n_workers())
            .map(|w| s.worker(w).map_or(0, |b| b.get(Counter::NewFlows)))
            .collect()
    };
    eprintln!("flows created per worker with two workers: {per_worker:?}");

    // (workers, how it stops, a start that dies while adopting first)
    let plan: [(usize, &str, bool); 3] = [
        (1, "sigterm", false),
        (2, "kill -9", false),
        (2, "kill -9", true),
    ];
    for (round, &(workers, how, crash)) in plan.iter().enumerate() {
        std::thread::sleep(Duration::from_millis(300));
        let before = Instant::now();
        if how == "sigterm" {
            dp.stop();
        } else {
            dp.kill9();
        }
        drop(dp);
        if crash {
            let mut dying = BorderDp::spawn_with_env(
                &lb,
                &dir,
                INSTANCE,
                &config(workers),
                &[(dataplane::lb::HALT_ENV, "1")],
            );
            let status = dying.wait_exit(Duration::from_secs(30));
            assert!(
                status.is_some_and(|s| !s.success()),
                "the start halted in adoption ends: {status:?}\n{}",
                dying.log_text()
            );
            let log = dying.log_text();
            assert!(log.contains("adoption halted"), "{log}");
            let files = region_files();
            assert!(
                files.iter().any(|f| f.contains(".g")),
                "the regions it adopted from are left: {files:?}"
            );
        }
        dp = start(workers, &[]);
        let running = Instant::now();
        let deadline = running + Duration::from_secs(10);
        while progressed(running).iter().any(|&p| !p) && Instant::now() < deadline {
            check_errors(&dp);
            std::thread::sleep(Duration::from_millis(10));
        }
        check_errors(&dp);
        for ((name, _), p) in flows.iter().zip(progressed(running)) {
            assert!(
                p,
                "round {round} ({workers} workers, {how}, crash {crash}): {name} did not continue within 10 s\n{}",
                dp.log_text()
            );
        }
        let adopted = dp.counter(Counter::FlowsAdopted);
        let dropped: u64 = [
            Counter::AdoptDroppedTorn,
            Counter::AdoptDroppedBadKeys,
            Counter::AdoptDroppedBadState,
            Counter::AdoptDroppedBadValue,
            Counter::AdoptDroppedNoVip,
            Counter::AdoptDroppedNoBackend,
            Counter::AdoptDroppedNotOwned,
            Counter::AdoptDroppedFull,
        ]
        .iter()
        .map(|&c| dp.counter(c))
        .sum();
        // A DNAT flow whose client's frames moved between queues may be
        // held by both workers (then one copy is a duplicate).
        assert!(
            adopted >= total && dropped == 0,
            "round {round}: every flow adopted ({adopted} of {total}), none dropped ({dropped})\n{}",
            dp.log_text()
        );
        wait_until(
            "the previous regions removed once adopted",
            Duration::from_secs(5),
            || region_files().iter().all(|f| !f.contains(".g")),
        );
        let files = region_files();
        assert_eq!(files.len(), workers, "{files:?}");
        eprintln!(
            "round {round}: {workers} worker(s) after {how}{}: {adopted} flows adopted, back after {:?}, neighbour_queued {}",
            if crash { " and a start killed while adopting" } else { "" },
            running.duration_since(before),
            dp.counter(Counter::NeighborQueued),
        );
    }
    check_errors(&dp);
    stop.store(true, Ordering::Relaxed);
    dp.stop();
    forget_flows(INSTANCE);
}
