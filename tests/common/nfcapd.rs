//! A real IPFIX collector for tests: Debian's `nfcapd` (package nfdump)
//! receives on a local UDP port and writes its files into a directory;
//! [`Nfcapd::stop_and_read`] stops it (SIGTERM: it flushes) and reads the
//! flows back with `nfdump -r`. Std only, so both the workspace's e2e
//! tests (`mod nfcapd;` in tests/common) and mgmt's tests
//! (`#[path = "../../tests/common/nfcapd.rs"]`) use it.
#![allow(dead_code)]

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running nfcapd. Killed on drop if not stopped.
pub struct Nfcapd {
    child: Option<Child>,
    dir: PathBuf,
    addr: SocketAddr,
}

/// One flow as nfdump shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flow {
    /// flowStartMilliseconds.
    pub start_ms: u64,
    /// Duration in milliseconds (end - start).
    pub duration_ms: u64,
    pub proto: u8,
    pub src: SocketAddr,
    pub dst: SocketAddr,
    /// The post-NAT (X-late) source and destination; nfdump 1.7.1 reads
    /// only the IPv4 ones (IEs 225-228): `None` when it shows none.
    pub xlate_src: Option<SocketAddr>,
    pub xlate_dst: Option<SocketAddr>,
    pub in_packets: u64,
    pub in_bytes: u64,
    pub out_packets: u64,
    pub out_bytes: u64,
    /// flowEndReason as nfdump names or numbers it.
    pub end_reason: String,
}

/// The nfdump format [`Flow::parse`] reads: fields separated by `|`.
const FORMAT: &str =
    "fmt:%tsr|%td|%pr|%sa|%sp|%da|%dp|%xsa|%xsp|%xda|%xdp|%ipkt|%ibyt|%opkt|%obyt|%end";

impl Flow {
    fn parse(line: &str) -> Option<Flow> {
        let f: Vec<&str> = line.split('|').map(str::trim).collect();
        if f.len() != 16 {
            return None;
        }
        let (secs, ms) = f[0].split_once('.')?;
        let start_ms = secs.parse::<u64>().ok()? * 1000 + ms.parse::<u64>().ok()?;
        let duration_ms = (f[1].parse::<f64>().ok()? * 1000.0).round() as u64;
        let proto = match f[2] {
            "TCP" => 6,
            "UDP" => 17,
            other => other.parse().ok()?,
        };
        let sa = |a: &str, p: &str| -> Option<SocketAddr> {
            Some(SocketAddr::new(a.parse::<IpAddr>().ok()?, p.parse().ok()?))
        };
        let xlate = |a: &str, p: &str| sa(a, p).filter(|s| !s.ip().is_unspecified());
        Some(Flow {
            start_ms,
            duration_ms,
            proto,
            src: sa(f[3], f[4])?,
            dst: sa(f[5], f[6])?,
            xlate_src: xlate(f[7], f[8]),
            xlate_dst: xlate(f[9], f[10]),
            in_packets: count(f[11])?,
            in_bytes: count(f[12])?,
            out_packets: count(f[13])?,
            out_bytes: count(f[14])?,
            end_reason: f[15].to_owned(),
        })
    }
}

/// nfdump's counts: plain numbers, or scaled (`1.2 M`) past 100000.
fn count(s: &str) -> Option<u64> {
    let s = s.trim();
    if let Ok(n) = s.parse() {
        return Some(n);
    }
    let (num, unit) = s.split_once(' ')?;
    let scale = match unit {
        "K" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        _ => return None,
    };
    Some((num.parse::<f64>().ok()? * scale) as u64)
}

/// A free local UDP port (bound and released: another process may take it
/// in between, which the start check notices).
fn free_udp_port(ip: IpAddr) -> u16 {
    UdpSocket::bind((ip, 0))
        .and_then(|s| s.local_addr())
        .expect("bind a UDP socket")
        .port()
}

impl Nfcapd {
    /// Starts nfcapd on 127.0.0.1 (or ::1 with `v6`), writing into `dir`
    /// (created). Panics if it does not come up within 5 s.
    pub fn start(dir: &Path, v6: bool) -> Nfcapd {
        std::fs::create_dir_all(dir).expect("nfcapd directory");
        let ip: IpAddr = if v6 {
            "::1".parse().unwrap()
        } else {
            "127.0.0.1".parse().unwrap()
        };
        let port = free_udp_port(ip);
        let mut cmd = Command::new("nfcapd");
        cmd.args(["-b", &ip.to_string(), "-p", &port.to_string(), "-t", "3600"])
            .arg("-w")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if v6 {
            cmd.arg("-6");
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run nfcapd (install package nfdump): {e}"));
        let mut n = Nfcapd {
            child: Some(child),
            dir: dir.to_owned(),
            addr: SocketAddr::new(ip, port),
        };
        // Listening once the port cannot be bound any more.
        let deadline = Instant::now() + Duration::from_secs(5);
        while UdpSocket::bind(n.addr).is_ok() {
            if let Some(Ok(Some(st))) = n.child.as_mut().map(|c| c.try_wait()) {
                panic!("nfcapd exited at start: {st}");
            }
            assert!(
                Instant::now() < deadline,
                "nfcapd did not listen on {}",
                n.addr
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        n
    }

    /// Where it listens (`[[records.ipfix]] collector`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops it with SIGTERM (it writes its file out) and returns every
    /// flow of every file it wrote, in file order.
    pub fn stop_and_read(mut self) -> Vec<Flow> {
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill(2) on the pid of a child this process started
            // and has not reaped yet.
            let rc = unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
            assert_eq!(rc, 0, "SIGTERM to nfcapd");
            let status = c.wait().expect("wait for nfcapd");
            assert!(
                status.success() || status.code().is_none(),
                "nfcapd: {status}"
            );
        }
        read_flows(&self.dir)
    }
}

impl Drop for Nfcapd {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The flows of every `nfcapd.*` file under `dir`, via `nfdump -r`.
pub fn read_flows(dir: &Path) -> Vec<Flow> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("nfcapd directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("nfcapd.") && !n.contains("current"))
        })
        .collect();
    files.sort();
    let mut flows = Vec::new();
    for f in files {
        let out = Command::new("nfdump")
            .env("TZ", "UTC")
            .args(["-q", "-N", "-o", FORMAT, "-r"])
            .arg(&f)
            .output()
            .expect("run nfdump");
        assert!(
            out.status.success(),
            "nfdump -r {}: {}",
            f.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let flow =
                Flow::parse(line).unwrap_or_else(|| panic!("nfdump line not understood: {line:?}"));
            flows.push(flow);
        }
    }
    flows
}
