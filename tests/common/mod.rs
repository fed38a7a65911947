//! Shared harness of the end-to-end tests: network namespaces, a border-dp
//! process started inside one, and helpers to run real tools in the others.
//!
//! Every test builds its own namespaces (`<tag>-lb` runs border-dp and holds
//! the kernel twins, `<tag>-cli` and `<tag>-bk` receive the data ports'
//! TAP interfaces), so tests never touch the host's network and never see
//! each other's interfaces. Everything is torn down on drop.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use conf::counters::Counter;
use conf::state::{state_path, RunState, StateRegion};

/// Runs a command, returning its output; panics with everything it printed on failure.
pub fn run(args: &[&str]) -> Output {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {args:?}: {e}"));
    if !out.status.success() {
        panic!(
            "{args:?} failed with {}\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

/// Runs a command and returns its output whatever the exit status.
pub fn try_run(args: &[&str]) -> Output {
    Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {args:?}: {e}"))
}

/// A network namespace, deleted on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(name: &str) -> Netns {
        let _ = try_run(&["ip", "netns", "del", name]);
        run(&["ip", "netns", "add", name]);
        run(&["ip", "-n", name, "link", "set", "lo", "up"]);
        Netns {
            name: name.to_string(),
        }
    }

    /// Runs `args` inside the namespace; panics on failure.
    pub fn run(&self, args: &[&str]) -> Output {
        let mut full = vec!["ip", "netns", "exec", &self.name];
        full.extend_from_slice(args);
        run(&full)
    }

    pub fn try_run(&self, args: &[&str]) -> Output {
        let mut full = vec!["ip", "netns", "exec", &self.name];
        full.extend_from_slice(args);
        try_run(&full)
    }

    /// Starts `args` inside the namespace in the background.
    pub fn spawn(&self, args: &[&str]) -> Child {
        Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(args)
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {args:?} in {}: {e}", self.name))
    }

    /// Moves interface `iface` from namespace `from` into this one and gives it addresses.
    pub fn adopt(&self, from: &Netns, iface: &str, addrs: &[&str]) {
        run(&[
            "ip", "-n", &from.name, "link", "set", iface, "netns", &self.name,
        ]);
        for a in addrs {
            let mut args = vec!["ip", "-n", &self.name, "addr", "add", a, "dev", iface];
            if a.contains(':') {
                args.push("nodad");
            }
            run(&args);
        }
        run(&["ip", "-n", &self.name, "link", "set", iface, "up"]);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = try_run(&["ip", "netns", "del", &self.name]);
    }
}

pub fn wait_until(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn border_dp_bin() -> &'static str {
    env!("CARGO_BIN_EXE_border-dp")
}

/// A scratch directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("border-e2e-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A border-dp process running in a namespace.
pub struct BorderDp {
    child: Option<Child>,
    pub instance: String,
    pub log: PathBuf,
    pub config: PathBuf,
}

impl BorderDp {
    /// Writes `config` to `dir`, starts border-dp in `ns` and waits until its
    /// workers run.
    pub fn start(ns: &Netns, dir: &TempDir, instance: &str, config: &str) -> BorderDp {
        let cfg = dir.path("border.toml");
        std::fs::write(&cfg, config).unwrap();
        let log = dir.path("border-dp.log");
        let logf = std::fs::File::create(&log).unwrap();
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns.name,
                border_dp_bin(),
                "--standalone",
                "--config",
            ])
            .arg(&cfg)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(logf.try_clone().unwrap())
            .stderr(logf)
            .spawn()
            .expect("start border-dp");
        let mut dp = BorderDp {
            child: Some(child),
            instance: instance.to_string(),
            log,
            config: cfg,
        };
        dp.wait_running();
        dp
    }

    fn wait_running(&mut self) {
        let path = state_path(&self.instance);
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("border-dp exited early with {status}:\n{}", self.log_text());
            }
            if let Ok(r) = StateRegion::open(&path) {
                if r.run_state() == RunState::Running && r.pid() == self.pid() {
                    return;
                }
            }
            if start.elapsed() > Duration::from_secs(30) {
                panic!("border-dp did not come up in 30 s:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Rewrites the config file and sends SIGHUP.
    pub fn reload(&mut self, config: &str) {
        std::fs::write(&self.config, config).unwrap();
        // SAFETY: kill(2) on the pid of our live child.
        unsafe { libc::kill(self.pid() as i32, libc::SIGHUP) };
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn state(&self) -> StateRegion {
        StateRegion::open(&state_path(&self.instance)).expect("open state region")
    }

    pub fn counter(&self, c: Counter) -> u64 {
        self.state().total(c)
    }

    /// Sends SIGTERM and waits for the exit status (at most 20 s).
    pub fn stop(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("border-dp already stopped");
        // `ip netns exec` execs border-dp, so the child's pid is border-dp's.
        // SAFETY: kill(2) with a pid we spawned and have not reaped yet.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let start = Instant::now();
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                return st;
            }
            if start.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "border-dp did not exit within 20 s of SIGTERM:\n{}",
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for BorderDp {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Polls `ip link show` in `ns` until `iface` exists.
pub fn wait_iface(ns: &Netns, iface: &str) {
    wait_until(
        &format!("{iface} in {}", ns.name),
        Duration::from_secs(20),
        || ns.try_run(&["ip", "link", "show", iface]).status.success(),
    );
}

/// Reads a classic pcap file (microsecond or nanosecond, little endian) into frames.
pub fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    assert!(b.len() >= 24, "pcap {} too short", path.display());
    let magic = u32::from_le_bytes(b[0..4].try_into().unwrap());
    assert!(
        magic == 0xa1b2_c3d4 || magic == 0xa1b2_3c4d,
        "not a little-endian pcap: {magic:#x}"
    );
    let mut frames = Vec::new();
    let mut off = 24;
    while off + 16 <= b.len() {
        let incl = u32::from_le_bytes(b[off + 8..off + 12].try_into().unwrap()) as usize;
        off += 16;
        frames.push(b[off..off + incl].to_vec());
        off += incl;
    }
    frames
}

/// Writes frames as a classic microsecond pcap (Ethernet link type).
pub fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut b = Vec::new();
    b.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    b.extend_from_slice(&2u16.to_le_bytes());
    b.extend_from_slice(&4u16.to_le_bytes());
    b.extend_from_slice(&0i32.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&65535u32.to_le_bytes());
    b.extend_from_slice(&1u32.to_le_bytes());
    for (i, f) in frames.iter().enumerate() {
        b.extend_from_slice(&(i as u32).to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&(f.len() as u32).to_le_bytes());
        b.extend_from_slice(&(f.len() as u32).to_le_bytes());
        b.extend_from_slice(f);
    }
    std::fs::write(path, b).unwrap();
}

/// Runs `f` on a new thread that has entered network namespace `ns`;
/// sockets it creates live in that namespace.
pub fn in_netns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        use std::os::fd::AsRawFd;
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
        // SAFETY: setns(2) on a namespace fd we hold open; it only changes
        // this thread's network namespace.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
        f()
    })
}

/// TCP servers in a namespace: each answers a connection with its name, the
/// peer address it sees and a newline, then echoes every byte back until the
/// client closes.
pub struct TcpBackends {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl TcpBackends {
    pub fn start(ns: &str, addrs: &[(&str, std::net::SocketAddr)]) -> TcpBackends {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for (name, addr) in addrs {
            let (name, addr, stop) = (name.to_string(), *addr, stop.clone());
            let (ready_tx, ready_rx) = std::sync::mpsc::channel();
            threads.push(in_netns(ns, move || {
                let l = std::net::TcpListener::bind(addr)
                    .unwrap_or_else(|e| panic!("bind {addr}: {e}"));
                l.set_nonblocking(true).unwrap();
                ready_tx.send(()).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    match l.accept() {
                        Ok((mut s, peer)) => {
                            let name = name.clone();
                            std::thread::spawn(move || {
                                use std::io::{Read, Write};
                                s.set_nonblocking(false).unwrap();
                                let _ = s.write_all(format!("{name} {}\n", peer.ip()).as_bytes());
                                let mut buf = [0u8; 65536];
                                loop {
                                    match s.read(&mut buf) {
                                        Ok(0) | Err(_) => break,
                                        Ok(n) => {
                                            if s.write_all(&buf[..n]).is_err() {
                                                break;
                                            }
                                        }
                                    }
                                }
                            });
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(2)),
                    }
                }
            }));
            ready_rx
                .recv_timeout(Duration::from_secs(10))
                .expect("backend listening");
        }
        TcpBackends { stop, threads }
    }
}

impl Drop for TcpBackends {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// UDP servers in a namespace: each answers a datagram with `name:` + payload.
pub struct UdpBackends {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl UdpBackends {
    pub fn start(ns: &str, addrs: &[(&str, std::net::SocketAddr)]) -> UdpBackends {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for (name, addr) in addrs {
            let (name, addr, stop) = (name.to_string(), *addr, stop.clone());
            let (ready_tx, ready_rx) = std::sync::mpsc::channel();
            threads.push(in_netns(ns, move || {
                let s =
                    std::net::UdpSocket::bind(addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
                s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
                ready_tx.send(()).unwrap();
                let mut buf = [0u8; 2048];
                while !stop.load(Ordering::Relaxed) {
                    if let Ok((n, from)) = s.recv_from(&mut buf) {
                        let mut reply = format!("{name}:").into_bytes();
                        reply.extend_from_slice(&buf[..n]);
                        let _ = s.send_to(&reply, from);
                    }
                }
            }));
            ready_rx
                .recv_timeout(Duration::from_secs(10))
                .expect("backend bound");
        }
        UdpBackends { stop, threads }
    }
}

impl Drop for UdpBackends {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Opens `n` TCP connections to `vip` from namespace `ns` (each from a new
/// source port) and returns the name each was answered with.
pub fn tcp_names(ns: &str, vip: std::net::SocketAddr, n: usize) -> Vec<String> {
    in_netns(ns, move || {
        use std::io::{BufRead, BufReader};
        (0..n)
            .map(|i| {
                let s = connect_retry(vip, Duration::from_secs(10))
                    .unwrap_or_else(|e| panic!("connection {i} to {vip}: {e}"));
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let mut line = String::new();
                BufReader::new(s)
                    .read_line(&mut line)
                    .unwrap_or_else(|e| panic!("connection {i} to {vip}: read: {e}"));
                line.trim().to_string()
            })
            .collect()
    })
    .join()
    .unwrap()
}

/// connect() that retries refused/unreachable attempts until `within` passes
/// (the first SYN may be dropped while the appliance resolves a next hop).
pub fn connect_retry(
    addr: std::net::SocketAddr,
    within: Duration,
) -> std::io::Result<std::net::TcpStream> {
    let start = Instant::now();
    loop {
        match std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
            Ok(s) => return Ok(s),
            Err(e) if start.elapsed() > within => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Counts how often each name occurs.
pub fn tally(names: &[String]) -> std::collections::BTreeMap<String, usize> {
    let mut m = std::collections::BTreeMap::new();
    for n in names {
        *m.entry(n.clone()).or_insert(0) += 1;
    }
    m
}
