//! Network namespaces and the processes and threads that run in them:
//! commands (checked or not), background processes killed on drop, a
//! thread that entered a namespace, how border-dp's data ports reach the
//! peer namespaces, and the kernel counters of a namespace.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

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

/// Polls `ip link show` in `ns` until `iface` exists.
pub fn wait_iface(ns: &Netns, iface: &str) {
    wait_until(
        &format!("{iface} in {}", ns.name),
        Duration::from_secs(20),
        || ns.try_run(&["ip", "link", "show", iface]).status.success(),
    );
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
