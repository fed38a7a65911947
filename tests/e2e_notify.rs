//! The service manager's protocol (`NOTIFY_SOCKET`), with the test in
//! systemd's place (systemd is not PID 1 here): border-dp says `READY=1`
//! only once it forwards, pings `WATCHDOG=1` every half `WATCHDOG_USEC`
//! while its workers' heartbeats advance and stops when one is wedged, and
//! says `STOPPING=1` on SIGTERM; border-mgmt and border-gw say ready and
//! stopping too, and honour `WATCHDOG_PID`. Namespaces `sn-*`, subnet
//! 10.131.0.0/24.

mod common;

use std::os::unix::net::UnixDatagram;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use conf::state::RunState;

const INSTANCE: &str = "e2esn";

fn config(dir: &TempDir) -> String {
    format!(
        r#"
instance = "{INSTANCE}"

[dataplane]
main_lcore = 0
worker_lcores = [1]
poll = "adaptive"
eal_args = ["--no-huge", "-m", "256", "--no-pci", "--no-shconf"]
conntrack_per_worker = 4096
flow_hash_key = "00112233445566778899aabbccddeeff"

[[port]]
name = "ext"
devargs = "net_tap0,iface=sn-ext"
addresses = ["10.131.0.1/24"]
host_interface = "ksn-ext"
mac = "02:00:00:83:00:01"

[mgmt]
listen = "unix://{sock}"

[[vip]]
name = "web"
address = "10.131.0.100"
port = 80
protocol = "tcp"
mode = "dnat"
maglev_table_size = 251
[[vip.backend]]
address = "10.131.0.11"
port = 8080
"#,
        sock = dir.path("api.sock").display()
    )
}

/// The test's end of the notification socket: every datagram with the
/// time it arrived.
struct Listener(UnixDatagram);

impl Listener {
    fn bind(path: &std::path::Path) -> Listener {
        Listener::from(UnixDatagram::bind(path).unwrap())
    }

    fn from(socket: UnixDatagram) -> Listener {
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        Listener(socket)
    }

    /// Every message that arrives within `window`.
    fn collect(&self, window: Duration) -> Vec<(Instant, String)> {
        let end = Instant::now() + window;
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while Instant::now() < end {
            if let Ok(n) = self.0.recv(&mut buf) {
                got.push((
                    Instant::now(),
                    String::from_utf8_lossy(&buf[..n]).into_owned(),
                ));
            }
        }
        got
    }

    /// Messages until one holds `line` (as a whole line), at most `timeout`.
    fn until(&self, line: &str, timeout: Duration, log: impl Fn() -> String) -> Vec<String> {
        let end = Instant::now() + timeout;
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            assert!(
                Instant::now() < end,
                "no {line:?} within {timeout:?}; got {got:?}\n{}",
                log()
            );
            if let Ok(n) = self.0.recv(&mut buf) {
                let m = String::from_utf8_lossy(&buf[..n]).into_owned();
                let done = m.lines().any(|l| l == line);
                got.push(m);
                if done {
                    return got;
                }
            }
        }
    }
}

fn pings(msgs: &[(Instant, String)]) -> Vec<Instant> {
    msgs.iter()
        .filter(|(_, m)| m.lines().any(|l| l == "WATCHDOG=1"))
        .map(|(t, _)| *t)
        .collect()
}

fn sigterm(child: &Child) {
    // SAFETY: kill(2) on a child we spawned and have not reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
}

fn wait_exit(child: &mut Child, what: &str) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("{what} did not exit within 20 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Kills and reaps a child on drop (also when the test panics).
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn border_dp_is_ready_when_it_forwards_and_its_watchdog_stops_for_a_wedged_worker() {
    clean_instance(INSTANCE);
    let lb = Netns::new("sn-lb");
    let cli = Netns::new("sn-cli");
    let dir = TempDir::new("notify");
    let cfg = dir.path("border.toml");
    std::fs::write(&cfg, config(&dir)).unwrap();
    let listener = Listener::bind(&dir.path("notify.sock"));
    let stall = dir.path("stall");
    let log = dir.path("border-dp.log");
    let logf = std::fs::File::create(&log).unwrap();
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    // `ip netns exec` execs border-dp: the child is border-dp.
    let mut dp = Reaped(
        Command::new("ip")
            .args(["netns", "exec", "sn-lb", border_dp_bin(), "--standalone"])
            .arg("--config")
            .arg(&cfg)
            .env("RUST_LOG", "info")
            .env("NOTIFY_SOCKET", dir.path("notify.sock"))
            .env("WATCHDOG_USEC", "2000000")
            .env("BORDER_TEST_STALL_FILE", &stall)
            .stdin(Stdio::null())
            .stdout(logf.try_clone().unwrap())
            .stderr(logf)
            .spawn()
            .expect("start border-dp"),
    );
    let before_ready = listener.until("READY=1", Duration::from_secs(30), log_text);
    assert_eq!(
        before_ready.len(),
        1,
        "nothing (no watchdog ping) before READY=1: {before_ready:?}"
    );
    assert!(
        before_ready[0].contains("STATUS=forwarding: 1 workers, tables generation 1"),
        "{before_ready:?}"
    );
    // Ready means forwarding: the workers run on the published tables, and
    // the port address answers the first ping.
    let state = conf::state::StateRegion::open(&conf::state::state_path(INSTANCE)).unwrap();
    assert_eq!(state.run_state(), RunState::Running);
    assert_eq!(state.worker(0).unwrap().applied_generation(), 1);
    // The TAP interface moves to the client only now: the TAP driver sets
    // it up by name in border-dp's namespace while the port starts.
    wait_iface(&lb, "sn-ext");
    cli.adopt(&lb, "sn-ext", &["10.131.0.2/24"]);
    let out = cli.try_run(&["ping", "-c", "1", "-W", "2", "10.131.0.1"]);
    assert!(
        out.status.success(),
        "the first ping after READY=1 went unanswered:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        log_text()
    );

    // Healthy: a ping every second (half of WATCHDOG_USEC).
    let healthy = pings(&listener.collect(Duration::from_millis(3500)));
    assert!(
        healthy.len() >= 3,
        "watchdog pings in 3.5 s: {}",
        healthy.len()
    );
    for pair in healthy.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            gap >= Duration::from_millis(800) && gap <= Duration::from_millis(1500),
            "ping gap {gap:?}"
        );
    }

    // Wedged: worker 0 stops polling; at most the ping already earned
    // (heartbeats that moved before the stall) arrives, then none.
    std::fs::write(&stall, "0").unwrap();
    let wedged_at = Instant::now();
    let after = listener.collect(Duration::from_millis(4500));
    assert!(!stall.exists(), "the trigger was taken:\n{}", log_text());
    let late = pings(&after);
    assert!(late.len() <= 1, "pings after the wedge: {after:?}");
    assert!(
        late.iter()
            .all(|t| *t - wedged_at < Duration::from_millis(1500)),
        "a ping long after the wedge: {after:?}"
    );
    assert!(
        after
            .iter()
            .any(|(_, m)| m.contains("STATUS=wedged: heartbeat of workers [0] stopped")),
        "{after:?}"
    );
    assert!(
        log_text().contains("worker heartbeat stopped: withholding the watchdog ping"),
        "{}",
        log_text()
    );

    // SIGTERM: STOPPING=1, and a clean exit (the wedge is let go).
    sigterm(&dp.0);
    listener.until("STOPPING=1", Duration::from_secs(10), log_text);
    let st = wait_exit(&mut dp.0, "border-dp");
    assert!(st.success(), "{st}\n{}", log_text());
}

#[test]
fn border_mgmt_and_border_gw_say_ready_ping_and_stopping() {
    let dir = TempDir::new("notify-ctl");

    // border-mgmt: ready once it serves; WATCHDOG_PID of another process
    // means no pings for it.
    let instance = "e2esn-mgmt";
    clean_instance(instance);
    forget_intent(instance);
    let cfg = dir.path("mgmt.toml");
    std::fs::write(
        &cfg,
        config(&dir)
            .replace(INSTANCE, instance)
            .replace("api.sock", "mgmt.sock"),
    )
    .unwrap();
    for (watchdog_pid, expect_pings) in [(None, true), (Some("1"), false)] {
        let sock = dir.path("mgmt-notify.sock");
        let _ = std::fs::remove_file(&sock);
        let listener = Listener::bind(&sock);
        let log = dir.path("mgmt.log");
        let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
        let mut command = Command::new(border_mgmt_bin());
        command
            .arg("--config")
            .arg(&cfg)
            .arg("--state-dir")
            .arg(dir.path("state"))
            .env("NOTIFY_SOCKET", &sock)
            .env("WATCHDOG_USEC", "1000000")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        if let Some(pid) = watchdog_pid {
            command.env("WATCHDOG_PID", pid);
        }
        let mut mgmt = Reaped(command.spawn().expect("start border-mgmt"));
        let first = listener.until("READY=1", Duration::from_secs(15), log_text);
        assert_eq!(first.len(), 1, "{first:?}");
        assert!(
            first[0].contains("STATUS=serving: tables generation 1"),
            "{first:?}"
        );
        // Ready means the API answers.
        assert!(
            std::os::unix::net::UnixStream::connect(dir.path("mgmt.sock")).is_ok(),
            "the API socket listens at READY=1"
        );
        let got = pings(&listener.collect(Duration::from_millis(1800)));
        if expect_pings {
            assert!(got.len() >= 3, "pings every 0.5 s: {}", got.len());
        } else {
            assert!(got.is_empty(), "WATCHDOG_PID=1 is not border-mgmt: {got:?}");
        }
        sigterm(&mgmt.0);
        listener.until("STOPPING=1", Duration::from_secs(10), log_text);
        assert!(wait_exit(&mut mgmt.0, "border-mgmt").success());
    }
    clean_instance(instance);
    forget_intent(instance);

    // border-gw, on an abstract socket (`@name`).
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    std::fs::write(dir.path("gw.pem"), cert.pem()).unwrap();
    std::fs::write(dir.path("gw.key"), key.serialize_pem()).unwrap();
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let (agent, api) = (free(), free());
    let gw_cfg = dir.path("gw.toml");
    std::fs::write(
        &gw_cfg,
        format!(
            r#"id = "sn"
agent_listen = "127.0.0.1:{agent}"
api_listen = "127.0.0.1:{api}"
redis = "redis://127.0.0.1:1/0"
[tls]
cert = "{d}/gw.pem"
key = "{d}/gw.key"
client_ca = "{d}/gw.pem"
api_fingerprints = ["sha256:{zeros}"]
"#,
            d = dir.0.display(),
            zeros = "0".repeat(64)
        ),
    )
    .unwrap();
    let name = format!("border-e2e-notify-gw-{}", std::process::id());
    let addr = {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap()
    };
    let listener = Listener::from(UnixDatagram::bind_addr(&addr).unwrap());
    let log = dir.path("gw.log");
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    let mut gw = Reaped(
        Command::new(env!("CARGO_BIN_EXE_border-gw"))
            .arg("--config")
            .arg(&gw_cfg)
            .env("NOTIFY_SOCKET", format!("@{name}"))
            .env("WATCHDOG_USEC", "1000000")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start border-gw"),
    );
    let first = listener.until("READY=1", Duration::from_secs(15), log_text);
    assert_eq!(first.len(), 1, "{first:?}");
    // Ready means its listeners are bound.
    assert!(std::net::TcpStream::connect(("127.0.0.1", agent)).is_ok());
    assert!(std::net::TcpStream::connect(("127.0.0.1", api)).is_ok());
    let got = pings(&listener.collect(Duration::from_millis(1800)));
    assert!(got.len() >= 3, "pings every 0.5 s: {}", got.len());
    sigterm(&gw.0);
    listener.until("STOPPING=1", Duration::from_secs(10), log_text);
    assert!(wait_exit(&mut gw.0, "border-gw").success());
}
