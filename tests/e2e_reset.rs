//! `[vip.health] on_down` end to end (docs/health.md): border-dp follows
//! the tables border-mgmt publishes; border-mgmt probes three echo backends
//! through the kernel twin (`tcp` probes).
//!
//! Two VIPs over the same backends: `rst` with `on_down = "reset"`, `keep`
//! with the default. A long-lived connection on each; then health alone
//! fails for their backends (nftables in the backends' namespace drops the
//! probes, which come from the twin's ephemeral ports; the full-NAT data
//! connections use local ports below 32768 and are untouched, the servers
//! keep running). After `fall` intervals the backends are down and:
//! - on `rst`, the client's next segment is answered with a RST (the client
//!   sees ECONNRESET), counted as `reset_backend_down`; new connections go
//!   to a healthy backend;
//! - on `keep`, the connection keeps working byte for byte, nothing counted;
//! - ApplyConfig switching `keep` to `on_down = "reset"` (and GetConfig
//!   showing it) resets that connection too on its next segment.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use conf::counters::Counter;
use mgmt::pb;

const INTERVAL_MS: u64 = 300;
const FALL: u64 = 2;

const VIP_RST: &str = "10.91.0.100:80";
const VIP_KEEP: &str = "10.91.0.101:80";

fn backend(i: u8) -> SocketAddr {
    SocketAddr::new(format!("10.92.0.{}", 11 + i).parse().unwrap(), 8080)
}

fn config(socket: &Path, keep_on_down: &str) -> String {
    let mut c = two_port_config(
        "e2ers",
        "rs",
        "10.91.0.1/24",
        "10.92.0.1/24",
        &format!("unix://{}", socket.display()),
    );
    for (name, addr, on_down) in [
        ("rst", "10.91.0.100", "on_down = \"reset\"\n"),
        ("keep", "10.91.0.101", keep_on_down),
    ] {
        c += &format!(
            "\n[[vip]]\nname = \"{name}\"\naddress = \"{addr}\"\nport = 80\nmaglev_table_size = 1021\n\
             [vip.health]\nkind = \"tcp\"\ninterval_ms = {INTERVAL_MS}\ntimeout_ms = 200\nrise = 2\nfall = {FALL}\n{on_down}"
        );
        for i in 0..3 {
            c += &format!(
                "[[vip.backend]]\naddress = \"{}\"\nport = 8080\n",
                backend(i).ip()
            );
        }
    }
    c
}

/// border-mgmt in the appliance's namespace.
struct Mgmt {
    process: BorderMgmt,
    socket: PathBuf,
}

impl Mgmt {
    fn start(ns: &str, cfg: &Path, log: PathBuf, socket: PathBuf) -> Mgmt {
        Mgmt {
            process: BorderMgmt::start_in(Some(ns), cfg, log),
            socket,
        }
    }

    fn text(&self) -> String {
        self.process.log_text()
    }

    fn client(&self) -> (tokio::runtime::Runtime, mgmt::client::Client) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let c = rt
            .block_on(mgmt::client::connect_unix(self.socket.clone()))
            .unwrap();
        (rt, c)
    }

    fn backend(&self, vip: &str, addr: SocketAddr) -> pb::BackendStatus {
        let (rt, mut c) = self.client();
        let st = rt
            .block_on(c.get_status(pb::GetStatusRequest {}))
            .unwrap()
            .into_inner();
        let v = st.vips.into_iter().find(|v| v.name == vip).unwrap();
        assert!(!v.fail_open, "{vip} must not fail open");
        v.backends
            .into_iter()
            .find(|b| b.address == addr.to_string())
            .unwrap_or_else(|| panic!("no backend {addr} in {vip}"))
    }

    fn wait_state(&self, vip: &str, addr: SocketAddr, state: pb::BackendState) {
        let start = Instant::now();
        loop {
            let b = self.backend(vip, addr);
            if b.state == state as i32 {
                return;
            }
            if start.elapsed() > Duration::from_secs(20) {
                panic!(
                    "{vip} {addr}: not {state:?} after 20 s: {b:?}\n{}",
                    self.text()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn apply(&self, toml: String) -> u64 {
        let (rt, mut c) = self.client();
        let r = rt
            .block_on(c.apply_config(pb::ApplyConfigRequest {
                config_toml: toml,
                dry_run: false,
            }))
            .unwrap_or_else(|e| panic!("ApplyConfig: {e}"))
            .into_inner();
        assert!(r.changed && r.pending.is_empty(), "{r:?}");
        r.generation
    }

    /// GetConfig: the running config's text and the published generation.
    fn config(&self) -> (String, u64) {
        let (rt, mut c) = self.client();
        let r = rt
            .block_on(c.get_config(pb::GetConfigRequest {}))
            .unwrap()
            .into_inner();
        (r.config_toml, r.generation)
    }
}

/// A long-lived connection from the client namespace: the stream, and the
/// name of the backend that greeted it.
fn open(ns: &str, vip: &str) -> (TcpStream, String) {
    let vip: SocketAddr = vip.parse().unwrap();
    in_netns(ns, move || {
        let mut s = connect_retry(vip, Duration::from_secs(10)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let g = read_greeting(&mut s).expect("greeting");
        let name = g.split(' ').next().unwrap().to_string();
        (s, name)
    })
    .join()
    .unwrap()
}

fn index_of(name: &str) -> u8 {
    name.strip_prefix('b').unwrap().parse().unwrap()
}

/// Waits (1 s at most) until border-dp has counted `n` resets: a worker
/// publishes its counters after the burst that sent the RST, so the client
/// can see the RST a moment before the count.
fn wait_resets(dp: &BorderDp, n: u64) {
    wait_until(
        &format!("reset_backend_down = {n}"),
        Duration::from_secs(1),
        || dp.counter(Counter::ResetBackendDown) >= n,
    );
    assert_eq!(dp.counter(Counter::ResetBackendDown), n);
}

#[test]
fn established_connections_to_a_down_backend_are_reset_or_kept() {
    let lb = Netns::new("rs-lb");
    let cli = Netns::new("rs-cli");
    let bk = Netns::new("rs-bk");
    let dir = TempDir::new("reset");
    let socket = dir.path("mgmt.sock");
    let cfg_path = dir.path("mgmt.toml");
    let cfg = config(&socket, "");
    std::fs::write(&cfg_path, &cfg).unwrap();
    clean_instance("e2ers");
    let _ = std::fs::remove_file(conf::tables::tables_path("e2ers"));

    let dp = BorderDp::start_following(&lb, &dir, "e2ers", &cfg);
    wait_iface(&lb, "rs-ext");
    wait_iface(&lb, "rs-int");
    cli.adopt(&lb, "rs-ext", &["10.91.0.2/24"]);
    bk.adopt(
        &lb,
        "rs-int",
        &["10.92.0.11/24", "10.92.0.12/24", "10.92.0.13/24"],
    );
    cli.run(&["ip", "route", "add", "default", "via", "10.91.0.1"]);
    let names = [("b0", backend(0)), ("b1", backend(1)), ("b2", backend(2))];
    let _servers = TcpBackends::start(&bk.name, &names);

    let m = Mgmt::start(&lb.name, &cfg_path, dir.path("mgmt.log"), socket.clone());
    for vip in ["rst", "keep"] {
        for i in 0..3 {
            m.wait_state(vip, backend(i), pb::BackendState::Up);
        }
    }

    // One long-lived connection per VIP, both echoing.
    let (mut c_rst, x) = open(&cli.name, VIP_RST);
    let (mut c_keep, y) = open(&cli.name, VIP_KEEP);
    echo_exact(&mut c_rst, 1, 0, 64 << 10, 4096).expect("rst echo before");
    echo_exact(&mut c_keep, 2, 0, 64 << 10, 4096).expect("keep echo before");
    assert_eq!(dp.counter(Counter::ResetBackendDown), 0);

    // Health alone fails for their backends: the probes (from the twin's
    // ephemeral ports) are dropped; data connections and servers go on.
    let mut rules = String::from(
        "add table inet probes; add chain inet probes input { type filter hook input priority 0; }; ",
    );
    for name in [&x, &y] {
        rules += &format!(
            "add rule inet probes input ip daddr {} tcp dport 8080 tcp sport 32768-65535 drop; ",
            backend(index_of(name)).ip()
        );
    }
    let drops_before = dp.drops();
    bk.run(&["nft", &rules]);
    let t0 = Instant::now();
    m.wait_state("rst", backend(index_of(&x)), pb::BackendState::Down);
    m.wait_state("keep", backend(index_of(&y)), pb::BackendState::Down);
    let took = t0.elapsed();
    assert!(
        took <= Duration::from_millis((FALL + 2) * 2 * INTERVAL_MS + 3000),
        "down after {took:?}"
    );
    // border-dp is on the generation that has them down.
    dp.wait_applied(m.config().1);

    // rst: the client's next segment is answered with a RST.
    let err = in_netns(&cli.name, move || {
        c_rst
            .write_all(b"are you there?")
            .expect("the write is queued");
        let mut b = [0u8; 64];
        match c_rst.read(&mut b) {
            Ok(n) => panic!("read {n} bytes instead of a reset: {:?}", &b[..n]),
            Err(e) => e,
        }
    })
    .join()
    .unwrap();
    assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{err}");
    wait_resets(&dp, 1);
    // New connections go to healthy backends.
    for _ in 0..10 {
        let (mut s, name) = open(&cli.name, VIP_RST);
        assert_ne!(name, x, "a new connection went to the down backend");
        echo_exact(&mut s, 3, 0, 1024, 1024).expect("new connection echoes");
    }

    // keep: the connection goes on, byte for byte; nothing was reset.
    echo_exact(&mut c_keep, 2, 64 << 10, 256 << 10, 8192).expect("keep echo after down");
    assert_eq!(dp.counter(Counter::ResetBackendDown), 1);

    // ApplyConfig carries on_down: `keep` becomes a resetting VIP, and its
    // connection to the down backend is reset on its next segment.
    let applied = config(&socket, "on_down = \"reset\"\n");
    let g = m.apply(applied.clone());
    let (text, _) = m.config();
    assert_eq!(text.matches("on_down = \"reset\"").count(), 2, "{text}");
    dp.wait_applied(g);
    c_keep
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let err = in_netns(&cli.name, move || {
        c_keep.write_all(b"and you?").expect("the write is queued");
        let mut b = [0u8; 64];
        match c_keep.read(&mut b) {
            Ok(n) => panic!("read {n} bytes instead of a reset: {:?}", &b[..n]),
            Err(e) => e,
        }
    })
    .join()
    .unwrap();
    assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{err}");
    wait_resets(&dp, 2);
    let rose = drops_rose(&drops_before, &dp.drops());
    assert!(rose.is_empty(), "drop counters rose: {rose:?}");
    forget_intent("e2ers");
}
