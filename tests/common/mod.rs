//! Shared harness of the end-to-end tests: network namespaces, a border-dp
//! process started inside one, and helpers to run real tools in the others.
//!
//! Every test builds its own namespaces (`<tag>-lb` runs border-dp and holds
//! the kernel twins, `<tag>-cli` and `<tag>-bk` receive the data ports'
//! TAP interfaces), so tests never touch the host's network and never see
//! each other's interfaces. Everything is torn down on drop.
#![allow(dead_code)]

/// border-dp between a client and a backend namespace, with real servers
/// in the backend one (the PROXY protocol tests).
pub mod client_backend;
/// A fleet on 127.0.0.1: a CA, Redis, border-gw processes, appliances.
pub mod fleet;
/// border-mgmt's metrics endpoint: a free port, a scrape.
pub mod metrics;
/// A real IPFIX collector (nfcapd) and its flows read back (nfdump).
pub mod nfcapd;
/// A small tmpfs to fill up or make read-only.
pub mod small_fs;

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
    pub fn spawn(&self, args: &[&str]) -> Spawned {
        // Output goes nowhere: a process that outlived its test must not hold
        // the test harness's pipes open (the run would never end).
        let child = Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {args:?} in {}: {e}", self.name));
        Spawned(child)
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

/// A process started in a namespace by [`Netns::spawn`], killed and reaped
/// when dropped (also when its test panics: deleting a namespace does not
/// stop the processes in it).
pub struct Spawned(pub Child);

impl std::ops::Deref for Spawned {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Spawned {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
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
    /// Writes `config` to `dir`, starts `border-dp --standalone` (it
    /// publishes its own tables) in `ns` and waits until its workers run.
    pub fn start(ns: &Netns, dir: &TempDir, instance: &str, config: &str) -> BorderDp {
        Self::start_mode(ns, dir, instance, config, true)
    }

    /// Like [`BorderDp::start`], without `--standalone`: border-dp follows
    /// the tables region that border-mgmt publishes.
    pub fn start_following(ns: &Netns, dir: &TempDir, instance: &str, config: &str) -> BorderDp {
        Self::start_mode(ns, dir, instance, config, false)
    }

    fn start_mode(
        ns: &Netns,
        dir: &TempDir,
        instance: &str,
        config: &str,
        standalone: bool,
    ) -> BorderDp {
        let cfg = dir.path("border.toml");
        std::fs::write(&cfg, config).unwrap();
        let log = dir.path("border-dp.log");
        let logf = std::fs::File::create(&log).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &ns.name, border_dp_bin()])
            .args(standalone.then_some("--standalone"))
            .arg("--config")
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

/// Server threads in a namespace, one per named address, each polling its
/// stop flag; stopped and joined on drop.
struct NsServers {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl NsServers {
    /// Runs `serve(name, addr, stop, ready)` in namespace `ns` for each of
    /// `addrs`, waiting up to 10 s for each to send `ready` (or panicking
    /// with `what`).
    fn start<F>(ns: &str, addrs: &[(&str, std::net::SocketAddr)], what: &str, serve: F) -> NsServers
    where
        F: Fn(
                String,
                std::net::SocketAddr,
                &std::sync::atomic::AtomicBool,
                std::sync::mpsc::Sender<()>,
            ) + Clone
            + Send
            + 'static,
    {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut threads = Vec::new();
        for (name, addr) in addrs {
            let (name, addr, stop) = (name.to_string(), *addr, stop.clone());
            let (ready_tx, ready_rx) = std::sync::mpsc::channel();
            let serve = serve.clone();
            threads.push(in_netns(ns, move || serve(name, addr, &stop, ready_tx)));
            ready_rx.recv_timeout(Duration::from_secs(10)).expect(what);
        }
        NsServers { stop, threads }
    }
}

impl Drop for NsServers {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// TCP servers in a namespace: each answers a connection with its name, the
/// peer address it sees and a newline, then echoes every byte back until the
/// client closes.
pub struct TcpBackends(NsServers);

impl TcpBackends {
    pub fn start(ns: &str, addrs: &[(&str, std::net::SocketAddr)]) -> TcpBackends {
        use std::sync::atomic::Ordering;
        TcpBackends(NsServers::start(
            ns,
            addrs,
            "backend listening",
            |name, addr, stop, ready| {
                let l = std::net::TcpListener::bind(addr)
                    .unwrap_or_else(|e| panic!("bind {addr}: {e}"));
                l.set_nonblocking(true).unwrap();
                ready.send(()).unwrap();
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
            },
        ))
    }
}

/// UDP servers in a namespace: each answers a datagram with `name:` + payload.
pub struct UdpBackends(NsServers);

impl UdpBackends {
    pub fn start(ns: &str, addrs: &[(&str, std::net::SocketAddr)]) -> UdpBackends {
        use std::sync::atomic::Ordering;
        UdpBackends(NsServers::start(
            ns,
            addrs,
            "backend bound",
            |name, addr, stop, ready| {
                let s =
                    std::net::UdpSocket::bind(addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
                s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
                ready.send(()).unwrap();
                let mut buf = [0u8; 2048];
                while !stop.load(Ordering::Relaxed) {
                    if let Ok((n, from)) = s.recv_from(&mut buf) {
                        let mut reply = format!("{name}:").into_bytes();
                        reply.extend_from_slice(&buf[..n]);
                        let _ = s.send_to(&reply, from);
                    }
                }
            },
        ))
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

// ---- border-mgmt, borderctl and traffic that checks every byte ------------

/// The start of an e2e appliance's config: `[dataplane]` with one worker,
/// ports `ext` and `int` on net_tap (`<tag>-ext`/`<tag>-int`, kernel twins
/// `k<tag>-ext`/`k<tag>-int`), `ext`/`int` as `address/prefix`, the `int`
/// address also the full-NAT local address, and `[mgmt] listen`. Tests append
/// more `[mgmt]` keys and their VIPs.
pub fn two_port_config(instance: &str, tag: &str, ext: &str, int: &str, listen: &str) -> String {
    two_port_config_on(PortKind::Tap, instance, tag, ext, int, listen)
}

/// The start of a config for border-mgmt without traffic: `[dataplane]`
/// with one worker, one `net_null0` port `p0` with `<address>/24` (also its
/// local address), and `[mgmt] listen`. Tests append more `[mgmt]` keys,
/// `[mgmt.tls]` and their VIPs.
pub fn null_port_config(instance: &str, address: &str, listen: &str) -> String {
    format!(
        r#"instance = "{instance}"

[dataplane]
worker_lcores = [1]
flow_hash_key = "00112233445566778899aabbccddeeff"

[[port]]
name = "p0"
devargs = "net_null0"
addresses = ["{address}/24"]
local_addresses = ["{address}"]

[mgmt]
listen = "{listen}"
"#
    )
}

/// [`two_port_config`] with the data ports on `kind`.
pub fn two_port_config_on(
    kind: PortKind,
    instance: &str,
    tag: &str,
    ext: &str,
    int: &str,
    listen: &str,
) -> String {
    let local = int.split('/').next().unwrap_or(int);
    let ext_dev = kind.devargs(0, &format!("{tag}-ext"));
    let int_dev = kind.devargs(1, &format!("{tag}-int"));
    format!(
        r#"instance = "{instance}"
[dataplane]
main_lcore = 0
worker_lcores = [1]
eal_args = ["--no-huge", "-m", "256", "--no-pci", "--no-shconf"]
conntrack_per_worker = 16384
flow_hash_key = "00112233445566778899aabbccddeeff"

[[port]]
name = "ext"
devargs = "{ext_dev}"
addresses = ["{ext}"]
host_interface = "k{tag}-ext"

[[port]]
name = "int"
devargs = "{int_dev}"
addresses = ["{int}"]
host_interface = "k{tag}-int"
local_addresses = ["{local}"]
local_port_range = [1024, 32767]

[mgmt]
listen = "{listen}"
"#
    )
}

/// What border-dp's data ports are and how they reach the client and
/// backend namespaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortKind {
    /// `net_tap`: border-dp creates `<tag>-ext`/`<tag>-int` in its own
    /// namespace; [`PortKind::connect`] moves them into the peers'.
    Tap,
    /// `net_af_xdp` over veth pairs: [`PortKind::prepare`] creates each pair
    /// before border-dp starts, one end in border-dp's namespace (the DPDK
    /// port) and the other, of the same name, in the peer's namespace.
    AfXdp,
}

impl PortKind {
    /// The `[[port]].devargs` of data port `index` on interface `iface`.
    pub fn devargs(self, index: usize, iface: &str) -> String {
        match self {
            PortKind::Tap => format!("net_tap{index},iface={iface}"),
            PortKind::AfXdp => {
                format!("net_af_xdp{index},iface={iface},start_queue=0,queue_count=1")
            }
        }
    }

    /// Before border-dp starts: for af_xdp, the veth pair `iface` between
    /// `lb` and `peer` (up on border-dp's side). Nothing for TAP.
    pub fn prepare(self, lb: &Netns, peer: &Netns, iface: &str) {
        if self == PortKind::Tap {
            return;
        }
        run(&[
            "ip", "-n", &lb.name, "link", "add", iface, "type", "veth", "peer", "name", iface,
            "netns", &peer.name,
        ]);
        run(&["ip", "-n", &lb.name, "link", "set", iface, "up"]);
        // AF_XDP hands frames to DPDK as they are: a checksum the peer's
        // kernel left to "hardware" (veth offload) would stay unfinished
        // and the far kernel would drop the segment. The peer computes it.
        peer.run(&["ethtool", "-K", iface, "tx", "off"]);
    }

    /// Once border-dp runs: `iface` is in `peer` with `addrs` and up.
    pub fn connect(self, lb: &Netns, peer: &Netns, iface: &str, addrs: &[&str]) {
        match self {
            PortKind::Tap => {
                wait_iface(lb, iface);
                peer.adopt(lb, iface, addrs);
            }
            PortKind::AfXdp => {
                for a in addrs {
                    let mut args = vec!["ip", "-n", &peer.name, "addr", "add", a, "dev", iface];
                    if a.contains(':') {
                        args.push("nodad");
                    }
                    run(&args);
                }
                run(&["ip", "-n", &peer.name, "link", "set", iface, "up"]);
            }
        }
    }
}

pub fn border_mgmt_bin() -> &'static str {
    env!("CARGO_BIN_EXE_border-mgmt")
}

pub fn borderctl_bin() -> &'static str {
    env!("CARGO_BIN_EXE_borderctl")
}

/// Removes what an instance leaves behind between runs: its shared-memory
/// regions and border-mgmt's state directory (the applied config, drains
/// and weights it saved).
pub fn clean_instance(instance: &str) {
    let _ = std::fs::remove_file(state_path(instance));
    let _ = std::fs::remove_file(conf::tables::tables_path(instance));
    let _ = std::fs::remove_file(conf::records::records_path(instance));
    forget_intent(instance);
}

/// Removes border-mgmt's default state directory of `instance` (and the
/// overrides file an older border-mgmt kept, which it would take): the
/// next border-mgmt starts from its --config.
pub fn forget_intent(instance: &str) {
    let _ = std::fs::remove_dir_all(mgmt::intent::default_state_dir(instance));
    let _ = std::fs::remove_file(mgmt::intent::legacy_overrides_path(instance));
}

/// Runs borderctl with `args`; returns (exit code, stdout, stderr).
pub fn borderctl(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(borderctl_bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run borderctl {args:?}: {e}"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// borderctl that must succeed; returns its stdout.
pub fn borderctl_ok(args: &[&str]) -> String {
    let (code, out, err) = borderctl(args);
    assert_eq!(
        code, 0,
        "borderctl {args:?} exit {code}\nstdout: {out}\nstderr: {err}"
    );
    out
}

/// borderctl that must fail with one line on stderr; returns that line
/// without the `borderctl: error: ` prefix.
pub fn borderctl_err(args: &[&str]) -> String {
    let (code, out, err) = borderctl(args);
    assert_ne!(code, 0, "borderctl {args:?} should fail\nstdout: {out}");
    assert_eq!(err.lines().count(), 1, "borderctl {args:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
    err.trim_end()
        .strip_prefix("borderctl: error: ")
        .unwrap_or_else(|| panic!("borderctl {args:?}: not an error line: {err}"))
        .to_string()
}

/// A border-mgmt process (in the host's namespace), killed on drop.
pub struct BorderMgmt {
    child: Option<Child>,
    pub log: PathBuf,
    pub config: PathBuf,
}

impl BorderMgmt {
    /// Starts border-mgmt on `config` (looking at the dataplane every
    /// 100 ms), logging to `log`, and waits until it serves.
    pub fn start(config: &Path, log: PathBuf) -> BorderMgmt {
        Self::start_in(None, config, log)
    }

    /// [`BorderMgmt::start`] inside network namespace `ns` (if given): its
    /// probes then leave through that namespace's interfaces.
    pub fn start_in(ns: Option<&str>, config: &Path, log: PathBuf) -> BorderMgmt {
        Self::start_with(ns, config, log, &[])
    }

    /// [`BorderMgmt::start_in`] with more arguments (`--state-dir DIR`,
    /// `--from-config-file`).
    pub fn start_with(ns: Option<&str>, config: &Path, log: PathBuf, more: &[&str]) -> BorderMgmt {
        let mut command = match ns {
            // `ip netns exec` execs the program: the child is border-mgmt.
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, border_mgmt_bin()]);
                c
            }
            None => Command::new(border_mgmt_bin()),
        };
        let child = command
            .arg("--config")
            .arg(config)
            .args(["--watch-interval-ms", "100"])
            .args(more)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start border-mgmt");
        let mut m = BorderMgmt {
            child: Some(child),
            log,
            config: config.to_owned(),
        };
        m.wait_log("border-mgmt running");
        m
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (15 s at most) until the log contains `what`.
    pub fn wait_log(&mut self, what: &str) {
        let start = Instant::now();
        while !self.log_text().contains(what) {
            if let Some(st) = self.child.as_mut().and_then(|c| c.try_wait().unwrap()) {
                panic!("border-mgmt exited with {st}:\n{}", self.log_text());
            }
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "no {what:?} in the border-mgmt log:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL: no clean-up at all (socket file and everything stay).
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and the exit status (at most 10 s).
    pub fn stop(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("border-mgmt already stopped");
        // SAFETY: kill(2) on a child we spawned and have not reaped.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let start = Instant::now();
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                return st;
            }
            if start.elapsed() > Duration::from_secs(10) {
                let _ = child.kill();
                let _ = child.wait();
                panic!("border-mgmt did not stop within 10 s:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for BorderMgmt {
    fn drop(&mut self) {
        self.kill9();
    }
}

impl BorderDp {
    /// SIGKILL and reap: no clean-up (the state region stays marked running).
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The generation each worker has applied.
    pub fn applied(&self) -> Vec<u64> {
        let s = self.state();
        (0..s.n_workers())
            .filter_map(|i| s.worker(i).map(|w| w.applied_generation()))
            .collect()
    }

    /// Waits (10 s at most) until every worker has applied generation `g`.
    pub fn wait_applied(&self, g: u64) {
        wait_until(
            &format!("every worker on generation {g}"),
            Duration::from_secs(10),
            || {
                let a = self.applied();
                !a.is_empty() && a.iter().all(|&x| x == g)
            },
        );
    }

    /// Every drop counter's total, by name.
    pub fn drops(&self) -> std::collections::BTreeMap<&'static str, u64> {
        let s = self.state();
        s.totals()
            .into_iter()
            .filter(|(c, _)| c.is_drop())
            .map(|(c, v)| (c.name(), v))
            .collect()
    }
}

/// The drop counters that rose between two [`BorderDp::drops`] snapshots.
pub fn drops_rose(
    before: &std::collections::BTreeMap<&'static str, u64>,
    after: &std::collections::BTreeMap<&'static str, u64>,
) -> Vec<(&'static str, u64)> {
    after
        .iter()
        .filter_map(|(k, v)| {
            let b = before.get(k).copied().unwrap_or(0);
            (*v > b).then_some((*k, v - b))
        })
        .collect()
}

/// TCP counters of a namespace's kernel (/proc/net/snmp and netstat):
/// `RetransSegs`, `OutRsts`, `EstabResets`, `AttemptFails`, ...
pub fn tcp_mib(ns: &Netns) -> std::collections::BTreeMap<String, u64> {
    let out = ns.run(&["cat", "/proc/net/snmp", "/proc/net/netstat"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let mut m = std::collections::BTreeMap::new();
    // Pairs of lines: "Tcp: <names>" then "Tcp: <values>".
    let mut header: Option<(&str, &str)> = None;
    for line in text.lines() {
        let Some((prefix, rest)) = line.split_once(':') else {
            continue;
        };
        match header.take() {
            Some((p, names)) if p == prefix => {
                if p == "Tcp" || p == "TcpExt" {
                    for (n, v) in names.split_whitespace().zip(rest.split_whitespace()) {
                        if let Ok(v) = v.parse::<u64>() {
                            m.insert(n.to_string(), v);
                        }
                    }
                }
            }
            _ => header = Some((prefix, rest)),
        }
    }
    m
}

/// `(rx_dropped, tx_dropped)` of interface `iface` in namespace `ns`.
pub fn iface_drops(ns: &Netns, iface: &str) -> (u64, u64) {
    let read = |what: &str| {
        let out = ns.run(&["cat", &format!("/sys/class/net/{iface}/statistics/{what}")]);
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<u64>()
            .unwrap()
    };
    (read("rx_dropped"), read("tx_dropped"))
}

/// Deterministic bytes of stream `id` at `offset`.
pub fn pattern(id: u64, offset: u64, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        let x =
            (offset + i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ id.wrapping_mul(0xC2B2_AE3D);
        *b = (x >> 29) as u8;
    }
}

/// Reads the greeting line of a [`TcpBackends`] server byte by byte (so no
/// echoed byte is consumed with it): "name peer-ip".
pub fn read_greeting(s: &mut std::net::TcpStream) -> std::io::Result<String> {
    use std::io::Read;
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    loop {
        s.read_exact(&mut b)?;
        if b[0] == b'\n' {
            return Ok(String::from_utf8_lossy(&line).into_owned());
        }
        line.push(b[0]);
        if line.len() > 200 {
            return Err(std::io::Error::other("greeting too long"));
        }
    }
}

/// Sends `len` pattern bytes of stream `id` from `offset` in `chunk`-sized
/// pieces and checks that exactly they come back.
pub fn echo_exact(
    s: &mut std::net::TcpStream,
    id: u64,
    offset: u64,
    len: usize,
    chunk: usize,
) -> std::io::Result<()> {
    use std::io::{Read, Write};
    let mut sent = vec![0u8; chunk];
    let mut got = vec![0u8; chunk];
    let mut done = 0;
    while done < len {
        let n = chunk.min(len - done);
        pattern(id, offset + done as u64, &mut sent[..n]);
        s.write_all(&sent[..n])?;
        s.read_exact(&mut got[..n])?;
        if got[..n] != sent[..n] {
            let at = got[..n].iter().zip(&sent[..n]).position(|(a, b)| a != b);
            return Err(std::io::Error::other(format!(
                "echo differs at byte {}",
                offset + done as u64 + at.unwrap_or(0) as u64
            )));
        }
        done += n;
    }
    Ok(())
}

/// What one long-lived stream did.
#[derive(Debug, Clone)]
pub struct StreamReport {
    pub id: u64,
    /// The backend that greeted it.
    pub backend: String,
    /// Bytes sent and verified on the echo.
    pub bytes: u64,
    /// The first error, if any (the stream stops there).
    pub error: Option<String>,
}

/// Long-lived TCP connections from namespace `ns` to `vip`, each streaming
/// pattern bytes in `chunk`-sized round trips and checking every echoed
/// byte, until [`EchoStreams::finish`] closes them cleanly.
pub struct EchoStreams {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    verified: std::sync::Arc<Vec<std::sync::atomic::AtomicU64>>,
    threads: Vec<std::thread::JoinHandle<StreamReport>>,
}

impl EchoStreams {
    /// Opens `n` connections (ids `first_id..`) and returns once every one
    /// has its greeting. Each waits `pace` between round trips.
    pub fn start(
        ns: &str,
        vip: std::net::SocketAddr,
        n: usize,
        chunk: usize,
        pace: Duration,
        first_id: u64,
    ) -> EchoStreams {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        use std::sync::Arc;
        let stop = Arc::new(AtomicBool::new(false));
        let verified: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let threads = (0..n)
            .map(|i| {
                let (stop, verified, ready) = (stop.clone(), verified.clone(), ready_tx.clone());
                let id = first_id + i as u64;
                in_netns(ns, move || {
                    let mut r = StreamReport {
                        id,
                        backend: String::new(),
                        bytes: 0,
                        error: None,
                    };
                    let mut s = match connect_retry(vip, Duration::from_secs(10)) {
                        Ok(s) => s,
                        Err(e) => {
                            r.error = Some(format!("connect: {e}"));
                            let _ = ready.send(());
                            return r;
                        }
                    };
                    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                    s.set_nodelay(true).unwrap();
                    match read_greeting(&mut s) {
                        Ok(g) => r.backend = g.split_whitespace().next().unwrap_or("").to_string(),
                        Err(e) => r.error = Some(format!("greeting: {e}")),
                    }
                    let _ = ready.send(());
                    while r.error.is_none() && !stop.load(Ordering::Relaxed) {
                        match echo_exact(&mut s, id, r.bytes, chunk, chunk) {
                            Ok(()) => {
                                r.bytes += chunk as u64;
                                verified[i].store(r.bytes, Ordering::Relaxed);
                                if !pace.is_zero() {
                                    std::thread::sleep(pace);
                                }
                            }
                            Err(e) => r.error = Some(format!("after {} bytes: {e}", r.bytes)),
                        }
                    }
                    if r.error.is_none() {
                        // A clean close: FIN, the echo server closes too.
                        use std::io::Read;
                        let _ = s.shutdown(std::net::Shutdown::Write);
                        let mut rest = Vec::new();
                        match s.read_to_end(&mut rest) {
                            Ok(0) => {}
                            Ok(n) => r.error = Some(format!("{n} unexpected bytes at close")),
                            Err(e) => r.error = Some(format!("close: {e}")),
                        }
                    }
                    r
                })
            })
            .collect();
        for _ in 0..n {
            ready_rx
                .recv_timeout(Duration::from_secs(30))
                .expect("stream connected");
        }
        EchoStreams {
            stop,
            verified,
            threads,
        }
    }

    /// Bytes verified so far, per stream.
    pub fn progress(&self) -> Vec<u64> {
        self.verified
            .iter()
            .map(|v| v.load(std::sync::atomic::Ordering::Relaxed))
            .collect()
    }

    /// Waits (10 s at most) until every stream has verified more bytes than
    /// in `since`: all of them are moving.
    pub fn wait_all_moving(&self, since: &[u64]) {
        wait_until("every stream moving", Duration::from_secs(10), || {
            self.progress()
                .iter()
                .zip(since)
                .all(|(now, then)| now > then)
        });
    }

    /// Stops, closes every connection cleanly and reports.
    pub fn finish(mut self) -> Vec<StreamReport> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.threads
            .drain(..)
            .map(|t| t.join().expect("stream thread"))
            .collect()
    }
}

impl Drop for EchoStreams {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// What a [`NewConnections`] loop did.
#[derive(Debug, Clone, Default)]
pub struct NewConnReport {
    /// Connections that greeted, echoed `bytes` exactly and closed cleanly.
    pub ok: u64,
    /// Backend name -> connections.
    pub backends: std::collections::BTreeMap<String, u64>,
    /// Every failure, in words.
    pub errors: Vec<String>,
    /// Microseconds each successful connection took to connect.
    pub connect_us: Vec<u64>,
}

/// A loop in namespace `ns` opening new connections to `vip` one after the
/// other: greeting, `bytes` echoed and checked, clean close.
pub struct NewConnections {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<NewConnReport>>,
}

impl NewConnections {
    pub fn start(ns: &str, vip: std::net::SocketAddr, bytes: usize, id: u64) -> NewConnections {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = in_netns(ns, move || {
            let mut r = NewConnReport::default();
            let mut k = 0u64;
            while !flag.load(Ordering::Relaxed) {
                k += 1;
                let mut one = || -> std::io::Result<String> {
                    use std::io::Read;
                    let t0 = std::time::Instant::now();
                    let mut s = std::net::TcpStream::connect_timeout(&vip, Duration::from_secs(5))?;
                    r.connect_us.push(t0.elapsed().as_micros() as u64);
                    s.set_read_timeout(Some(Duration::from_secs(10)))?;
                    s.set_nodelay(true)?;
                    let g = read_greeting(&mut s)?;
                    echo_exact(&mut s, id << 32 | k, 0, bytes, bytes.min(16 << 10))?;
                    s.shutdown(std::net::Shutdown::Write)?;
                    let mut rest = Vec::new();
                    if s.read_to_end(&mut rest)? != 0 {
                        return Err(std::io::Error::other("unexpected bytes at close"));
                    }
                    Ok(g.split_whitespace().next().unwrap_or("").to_string())
                };
                match one() {
                    Ok(name) => {
                        r.ok += 1;
                        *r.backends.entry(name).or_insert(0) += 1;
                    }
                    Err(e) => r.errors.push(format!("connection {k}: {e}")),
                }
            }
            r
        });
        NewConnections {
            stop,
            thread: Some(thread),
        }
    }

    pub fn finish(mut self) -> NewConnReport {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread
            .take()
            .unwrap()
            .join()
            .expect("new-connection thread")
    }
}

impl Drop for NewConnections {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Host `host` of the test subnet numbered `n`: `10.n.0.host` (IPv4) or
/// `fd00:n::host` (IPv6, host in hex).
pub fn subnet_host(n: u8, v6: bool, host: u8) -> String {
    if v6 {
        format!("fd00:{n}::{host:x}")
    } else {
        format!("10.{n}.0.{host}")
    }
}

/// The prefix length of a test subnet: /64 for IPv6, /24 for IPv4.
pub fn subnet_prefix_len(v6: bool) -> u8 {
    if v6 {
        64
    } else {
        24
    }
}
