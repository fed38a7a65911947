//! border-dp on its two TAP ports between a client namespace and a backend
//! namespace, with real servers started in the backend one: the topology
//! of the PROXY protocol tests, and their tools (HAProxy echoing what it
//! parsed, nftables losing a chosen packet).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use conf::counters::Counter;

use super::{run, wait_iface, wait_until, BorderDp, Netns, TempDir};

/// Namespaces `<tag>-lb` (border-dp, instance `e2e<tag>`), `<tag>-cli`
/// (holding the port `<tag>-ext`) and `<tag>-bk` (holding `<tag>-int`).
pub struct ClientBackend {
    pub tag: String,
    pub dp: BorderDp,
    pub dir: TempDir,
    pub cli: Netns,
    pub bk: Netns,
    pub lb: Netns,
    /// Programs started in the backend namespace, killed on drop.
    pub procs: Vec<Child>,
}

impl Drop for ClientBackend {
    fn drop(&mut self) {
        for c in &mut self.procs {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl ClientBackend {
    /// Starts border-dp with `config` and gives its ports to the client
    /// (address `client`, with prefix length) and the backend (`backend`).
    pub fn start(tag: &str, config: &str, client: &str, backend: &str) -> ClientBackend {
        let lb = Netns::new(&format!("{tag}-lb"));
        let cli = Netns::new(&format!("{tag}-cli"));
        let bk = Netns::new(&format!("{tag}-bk"));
        let dir = TempDir::new(tag);
        let dp = BorderDp::start(&lb, &dir, &format!("e2e{tag}"), config);
        wait_iface(&lb, &format!("{tag}-ext"));
        wait_iface(&lb, &format!("{tag}-int"));
        cli.adopt(&lb, &format!("{tag}-ext"), &[client]);
        bk.adopt(&lb, &format!("{tag}-int"), &[backend]);
        ClientBackend {
            tag: tag.to_string(),
            dp,
            dir,
            cli,
            bk,
            lb,
            procs: Vec::new(),
        }
    }

    /// Routes the client's and the backend's traffic by default through
    /// border-dp's addresses `client_gateway` and `backend_gateway`.
    pub fn route_via(&self, client_gateway: &str, backend_gateway: &str) {
        let via = |ns: &Netns, gw: &str| ns.run(&["ip", "route", "add", "default", "via", gw]);
        via(&self.cli, client_gateway);
        via(&self.bk, backend_gateway);
    }

    /// Starts a program in the backend namespace, its output in `<name>.log`.
    pub fn spawn_bk(&mut self, name: &str, args: &[&str]) -> PathBuf {
        let log = self.dir.path(&format!("{name}.log"));
        let f = std::fs::File::create(&log).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &self.bk.name])
            .args(args)
            .stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .unwrap_or_else(|e| panic!("start {args:?}: {e}"));
        self.procs.push(child);
        log
    }

    /// What the backend program `name` printed.
    pub fn backend_log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path(&format!("{name}.log"))).unwrap_or_default()
    }

    /// Waits until something listens on `addr` in the backend namespace;
    /// panics with `log` after 20 s.
    pub fn wait_listening(&self, addr: SocketAddr, log: &Path) {
        let port = format!(":{} ", addr.port());
        let start = Instant::now();
        loop {
            let out = self.bk.try_run(&["ss", "-Htln"]);
            if String::from_utf8_lossy(&out.stdout).contains(&port) {
                return;
            }
            if start.elapsed() > Duration::from_secs(20) {
                panic!(
                    "nothing listens on {addr}:\n{}",
                    std::fs::read_to_string(log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// HAProxy in the backend namespace with `config`, listening on `listens`.
    pub fn start_haproxy(&mut self, config: &str, listens: &[SocketAddr]) {
        let path = self.dir.path("haproxy.cfg");
        std::fs::write(&path, config).unwrap();
        run(&["haproxy", "-c", "-f", path.to_str().unwrap()]);
        let log = self.spawn_bk("haproxy", &["haproxy", "-db", "-f", path.to_str().unwrap()]);
        for &l in listens {
            self.wait_listening(l, &log);
        }
    }

    pub fn counter(&self, c: Counter) -> u64 {
        self.dp.counter(c)
    }

    /// Waits for the worker to publish counters at least this high.
    pub fn wait_counter(&self, c: Counter, at_least: u64) {
        let state = self.dp.state();
        wait_until(
            &format!("{} >= {at_least} ({})", c.name(), self.tag),
            Duration::from_secs(10),
            || state.total(c) >= at_least,
        );
    }
}

/// An HAProxy config logging every request to stderr and answering it
/// with the line `echo` (a log-format string) on each of `binds` (the
/// words after `bind`).
pub fn haproxy_echo_config(binds: &[String], echo: &str) -> String {
    let binds: String = binds.iter().map(|b| format!("    bind {b}\n")).collect();
    format!(
        r#"global
    log stderr format raw local0 info
defaults
    mode http
    log global
    option httplog
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend pp
{binds}    http-request return status 200 content-type text/plain lf-string "{echo}\n"
"#
    )
}

/// Makes `ns` drop the `nth` packet of every connection whose packets
/// match `matching` (nftables words) at its `hook` (`input` or `output`),
/// counted by conntrack.
pub fn drop_nth_packet(ns: &Netns, hook: &str, matching: &[&str], nth: u32) {
    let chain = if hook == "input" { "in" } else { "out" };
    ns.run(&["sysctl", "-qw", "net.netfilter.nf_conntrack_acct=1"]);
    loss_chain(ns, chain, hook);
    let nth = nth.to_string();
    let mut rule = vec!["nft", "add", "rule", "inet", "loss", chain];
    rule.extend_from_slice(matching);
    rule.extend(["ct", "original", "packets", nth.as_str(), "drop"]);
    ns.run(&rule);
}

/// Adds the filter chain `chain` on `hook` (`input` or `output`) to the
/// nftables table `inet loss` of `ns`, creating the table if need be.
pub fn loss_chain(ns: &Netns, chain: &str, hook: &str) {
    ns.run(&["nft", "add", "table", "inet", "loss"]);
    ns.run(&[
        "nft",
        "add",
        "chain",
        "inet",
        "loss",
        chain,
        &format!("{{ type filter hook {hook} priority 0; }}"),
    ]);
}
