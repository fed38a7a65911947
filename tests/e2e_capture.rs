//! Packet capture on demand from a running border-dp, through DPDK's own
//! framework: border-dp with `capture = true` (hugepages, EAL
//! multi-process), `borderctl capture` driving Debian's `dpdk-dumpcap`
//! during real traffic (ping and full-NAT TCP through a VIP), and the file
//! read back with `tcpdump -r`: the frames are there, on both sides of the
//! rewrite, and the filter, direction and count were honoured.
//!
//! dumpcap attaches as a secondary process, which DPDK 22.11 allows only
//! with hugepage memory: the test reserves the 2 MiB pages it needs (and
//! mounts hugetlbfs if nothing has) and gives the reservation back at the
//! end. Namespaces `cp-*`, subnet 10.101.

mod common;

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use conf::state::PortStat;

const INSTANCE: &str = "e2ecp";
/// border-dp's `-m 256` plus dumpcap's ring and mbufs, in 2 MiB pages.
const HUGEPAGES: u64 = 192;
const NR_HUGEPAGES: &str = "/proc/sys/vm/nr_hugepages";

fn meminfo(key: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap();
    text.lines()
        .find_map(|l| {
            l.strip_prefix(key)?
                .trim_start_matches(':')
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("{key} not in /proc/meminfo"))
}

/// Enough free 2 MiB hugepages and a hugetlbfs mount; the reservation goes
/// back to what it was on drop, and border-dp's page files are removed.
struct Hugepages {
    reserved_before: u64,
}

impl Hugepages {
    fn ensure() -> Hugepages {
        let reserved_before = meminfo("HugePages_Total");
        let free = meminfo("HugePages_Free");
        if free < HUGEPAGES {
            let want = reserved_before + HUGEPAGES - free;
            std::fs::write(NR_HUGEPAGES, want.to_string()).unwrap();
            // Free memory cut into small pieces (page cache) leaves the
            // kernel no 2 MiB runs: give it back and compact, then ask again.
            if meminfo("HugePages_Free") < HUGEPAGES {
                let _ = std::fs::write("/proc/sys/vm/drop_caches", "1");
                let _ = std::fs::write("/proc/sys/vm/compact_memory", "1");
                std::fs::write(NR_HUGEPAGES, want.to_string()).unwrap();
            }
        }
        assert!(
            meminfo("HugePages_Free") >= HUGEPAGES,
            "could not reserve {HUGEPAGES} hugepages of 2 MiB (/proc/meminfo: {} free)",
            meminfo("HugePages_Free")
        );
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
        if !mounts
            .lines()
            .any(|l| l.split(' ').nth(2) == Some("hugetlbfs"))
        {
            std::fs::create_dir_all("/dev/hugepages").unwrap();
            run(&["mount", "-t", "hugetlbfs", "nodev", "/dev/hugepages"]);
        }
        Hugepages { reserved_before }
    }
}

impl Drop for Hugepages {
    fn drop(&mut self) {
        // EAL keeps its page files (a secondary maps them) after it exits.
        remove_page_files();
        let _ = std::fs::write(NR_HUGEPAGES, self.reserved_before.to_string());
    }
}

fn remove_page_files() {
    let prefix = format!("border-{INSTANCE}map_");
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    for dir in mounts
        .lines()
        .filter(|l| l.split(' ').nth(2) == Some("hugetlbfs"))
        .filter_map(|l| l.split(' ').nth(1))
    {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

fn config(capture: bool) -> String {
    let base = two_port_config(
        INSTANCE,
        "cp",
        "10.101.1.1/24",
        "10.101.2.1/24",
        "unix:///run/border/e2ecp.sock",
    );
    let eal = if capture {
        "eal_args = [\"-m\", \"256\", \"--no-pci\"]\ncapture = true"
    } else {
        "eal_args = [\"--no-huge\", \"-m\", \"256\", \"--no-pci\", \"--no-shconf\"]"
    };
    let base = base.replace(
        "eal_args = [\"--no-huge\", \"-m\", \"256\", \"--no-pci\", \"--no-shconf\"]",
        eal,
    );
    base + r#"
[[vip]]
name = "web"
address = "10.101.1.100"
port = 80
protocol = "tcp"
mode = "fullnat"
[[vip.backend]]
address = "10.101.2.11"
port = 8080
"#
}

/// Runs `borderctl capture` in the background while `traffic` runs,
/// until it ends by itself (count or duration).
fn capture_during(args: &[&str], traffic: impl Fn() + Send + 'static) -> Output {
    let child = Command::new(borderctl_bin())
        .arg("capture")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run borderctl capture");
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                traffic();
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let out = child.wait_with_output().unwrap();
    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();
    out
}

/// The traffic a capture sees: from namespace `ns`, one ping of the ext
/// port's address and one connection through `vip`.
fn ping_and_connect(ns: String, vip: SocketAddr) -> impl Fn() + Send + 'static {
    move || {
        let _ = try_run(&[
            "ip",
            "netns",
            "exec",
            &ns,
            "ping",
            "-c",
            "1",
            "-W",
            "1",
            "10.101.1.1",
        ]);
        let _ = tcp_names(&ns, vip, 1);
    }
}

/// `tshark -r` (Debian's Wireshark CLI) of a capture file: per frame, its
/// time (seconds since 1970), interface name and protocol column.
fn tshark(path: &Path) -> Vec<(f64, String, String)> {
    let out = run(&[
        "tshark",
        "-r",
        path.to_str().unwrap(),
        "-T",
        "fields",
        "-E",
        "separator=/t",
        "-e",
        "frame.time_epoch",
        "-e",
        "frame.interface_name",
        "-e",
        "_ws.col.Protocol",
    ]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert_eq!(f.len(), 3, "tshark line {l:?}");
            let t = f[0]
                .parse()
                .unwrap_or_else(|e| panic!("tshark time {:?}: {e}", f[0]));
            (t, f[1].to_string(), f[2].to_string())
        })
        .collect()
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// `tcpdump -r` of a capture file: one line per frame.
fn tcpdump(path: &Path) -> Vec<String> {
    let out = run(&["tcpdump", "-nn", "-r", path.to_str().unwrap()]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

fn text(out: &Output) -> String {
    format!(
        "exit {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn borderctl_capture_writes_pcapng_that_tcpdump_reads_with_filter_direction_and_count() {
    let _pages = Hugepages::ensure();
    clean_instance(INSTANCE);
    let lb = Netns::new("cp-lb");
    let cli = Netns::new("cp-cli");
    let bk = Netns::new("cp-bk");
    let dir = TempDir::new("cp");
    let mut dp = BorderDp::start(&lb, &dir, INSTANCE, &config(true));
    assert!(
        dp.log_text().contains("packet capture: dpdk-dumpcap"),
        "{}",
        dp.log_text()
    );
    cli.adopt(&lb, "cp-ext", &["10.101.1.2/24"]);
    bk.adopt(&lb, "cp-int", &["10.101.2.11/24"]);
    cli.run(&["ip", "route", "add", "default", "via", "10.101.1.1"]);
    let _backend = TcpBackends::start(&bk.name, &[("b1", "10.101.2.11:8080".parse().unwrap())]);
    let vip = "10.101.1.100:80".parse().unwrap();
    assert_eq!(tcp_names(&cli.name, vip, 1)[0], "b1 10.101.2.1");
    let cfg = dp.config.to_str().unwrap().to_string();

    // Both ports, both directions, TCP only, for 4 s of pings and connections.
    // A symlink waits at the output path: it is
    // replaced, its target never written.
    let all = dir.path("tcp.pcapng");
    // SAFETY: umask(2) only sets this process's file-creation mask.
    unsafe { libc::umask(0o022) };
    let victim = dir.path("victim");
    std::fs::write(&victim, b"untouched").unwrap();
    std::os::unix::fs::symlink(&victim, &all).unwrap();
    let started = unix_now();
    let out = capture_during(
        &[
            "--config",
            &cfg,
            "--port",
            "ext",
            "--port",
            "int",
            "--duration",
            "4",
            "-w",
            all.to_str().unwrap(),
            "tcp",
        ],
        ping_and_connect(cli.name.clone(), vip),
    );
    let ended = unix_now();
    assert!(out.status.success(), "{}", text(&out));
    // Shown with --nocapture: the figures of this run.
    println!("{}", text(&out));
    // Every tenant's payload: the owner's only, whatever the umask (022
    // here), and the symlink's target untouched.
    let meta = std::fs::symlink_metadata(&all).unwrap();
    assert!(meta.is_file(), "the capture went through the symlink");
    assert_eq!(
        meta.permissions().mode() & 0o7777,
        0o600,
        "capture file mode"
    );
    assert_eq!(std::fs::read(&victim).unwrap(), b"untouched");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("(stopped by duration)"), "{}", text(&out));
    // dumpcap's report: what pdump took and dropped (ring full, no mbuf).
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Packets received/dropped on interface 'net_tap0'")
            && stderr.contains("Packets received/dropped on interface 'net_tap1'"),
        "{}",
        text(&out)
    );
    let lines = tcpdump(&all);
    let count = |pat: &str| lines.iter().filter(|l| l.contains(pat)).count();
    // border's own account of the capture (rte_pdump_stats, copied into
    // the state region with the ports' statistics): every frame in the file
    // was taken, none lost.
    let capture_stat = |stat: PortStat| -> u64 {
        dp.state()
            .ports()
            .iter()
            .filter(|p| p.name == "ext" || p.name == "int")
            .map(|p| p.get(stat))
            .sum()
    };
    wait_until(
        "the capture's statistics in the state region",
        Duration::from_secs(5),
        || capture_stat(PortStat::CaptureAccepted) >= lines.len() as u64,
    );
    assert_eq!(capture_stat(PortStat::CaptureRingfull), 0);
    assert_eq!(capture_stat(PortStat::CaptureNombuf), 0);
    // Before the rewrite (client to VIP on ext) and after it (appliance's
    // local address to the backend on int).
    assert!(
        lines
            .iter()
            .any(|l| l.contains("IP 10.101.1.2.") && l.contains("> 10.101.1.100.80: Flags [S]")),
        "no SYN to the VIP: {lines:#?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("IP 10.101.2.1.") && l.contains("> 10.101.2.11.8080: Flags [S]")),
        "no rewritten SYN to the backend: {lines:#?}"
    );
    assert_eq!(
        count("ICMP"),
        0,
        "the filter `tcp` let ICMP through: {lines:#?}"
    );
    assert_eq!(count("ARP"), 0, "{lines:#?}");
    // Wireshark reads the file too: the same frames, all TCP, stamped with
    // the wall-clock time they passed (within a second of the capture's
    // run: border-dp and this test read the same clock).
    let frames = tshark(&all);
    assert_eq!(
        frames.len(),
        lines.len(),
        "tshark {frames:#?}\ntcpdump {lines:#?}"
    );
    for (t, _, proto) in &frames {
        assert!(
            *t >= started - 1.0 && *t <= ended + 1.0,
            "frame at {t:.3} s, the capture ran from {started:.3} to {ended:.3} s \
             ({:+.3} s off)",
            if *t < started { t - started } else { t - ended }
        );
        assert_eq!(proto, "TCP", "{frames:#?}");
    }
    // One interface per port (dumpcap names each after the interface that
    // has the TAP device's index in borderctl's namespace), each in order.
    let interfaces: std::collections::BTreeSet<&str> =
        frames.iter().map(|f| f.1.as_str()).collect();
    assert_eq!(interfaces.len(), 2, "{frames:#?}");
    for port in interfaces {
        let times: Vec<f64> = frames.iter().filter(|f| f.1 == port).map(|f| f.0).collect();
        assert!(
            times.windows(2).all(|w| w[0] <= w[1]),
            "{port}'s frames out of time order: {frames:#?}"
        );
    }

    // ext only, received frames only, ICMP only, stop after 3 packets.
    let icmp = dir.path("icmp.pcapng");
    let out = capture_during(
        &[
            "--config",
            &cfg,
            "--port",
            "ext",
            "--direction",
            "rx",
            "--count",
            "3",
            "--json",
            "-w",
            icmp.to_str().unwrap(),
            "icmp",
        ],
        ping_and_connect(cli.name.clone(), vip),
    );
    assert!(out.status.success(), "{}", text(&out));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["packets"], 3, "{summary}");
    assert_eq!(summary["stopped_by"], "count", "{summary}");
    assert_eq!(summary["direction"], "rx", "{summary}");
    let lines = tcpdump(&icmp);
    assert_eq!(lines.len(), 3, "{lines:#?}");
    for l in &lines {
        assert!(
            l.contains("IP 10.101.1.2 > 10.101.1.1: ICMP echo request"),
            "not a received echo request: {l}"
        );
    }

    // A filter libpcap refuses: dumpcap says why, borderctl fails in one
    // line and leaves no file.
    let bad = dir.path("bad.pcapng");
    let out = Command::new(borderctl_bin())
        .args([
            "capture", "--config", &cfg, "--port", "ext", "--count", "1", "-w",
        ])
        .arg(&bad)
        .arg("tcp port")
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("borderctl: error: dpdk-dumpcap failed"),
        "{}",
        text(&out)
    );
    assert!(!bad.exists());

    let status = dp.stop();
    assert!(status.success(), "exit {status}:\n{}", dp.log_text());
}

#[test]
fn capture_needs_the_config_key_and_multi_process() {
    let dir = TempDir::new("cp-cfg");
    let path = dir.path("border.toml");
    std::fs::write(&path, config(false)).unwrap();
    let cfg = path.to_str().unwrap();
    let e = borderctl_err(&[
        "capture",
        "--config",
        cfg,
        "--port",
        "ext",
        "-w",
        "/tmp/x.pcapng",
    ]);
    assert!(
        e.contains("does not serve packet capture: set `capture = true` in [dataplane]"),
        "{e}"
    );
    // capture = true with the tests' usual EAL flags is refused up front.
    std::fs::write(
        &path,
        config(false).replace("flow_hash_key", "capture = true\nflow_hash_key"),
    )
    .unwrap();
    let out = Command::new(border_dp_bin())
        .args(["--check-config", cfg])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("dataplane.capture: needs EAL multi-process and hugepages: remove --no-huge, --no-shconf from eal_args"),
        "{stderr}"
    );
}
