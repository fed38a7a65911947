//! The daemons' logs as an operator's tools take them: stderr to a file
//! (as systemd's journal, a pipe or `2>log` take it) carries no ANSI
//! colour; `--log-format json` is one JSON object per line and
//! `--log-format journald` prefixes each line with its syslog priority;
//! SIGUSR1 and SIGUSR2 move the level while the process runs; and
//! border-dp does not log a DPDK error each time its port statistics are
//! read without a capture server.
//!
//! border-dp runs in namespaces `lg-lb` (10.121.x.x) and `lgj-lb`
//! (10.123.x.x); border-mgmt
//! (instance e2elgm, a `net_null` port on 10.122.0.1) and border-gw run in
//! the test's namespace on 127.0.0.1.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::fleet::Fleet;
use common::metrics::{free_port, scrape_metrics};
use common::*;
use conf::state::{state_path, RunState, StateRegion};

/// A daemon whose stdout and stderr go to files; killed on drop.
struct Daemon {
    child: Option<Child>,
    what: String,
    log: PathBuf,
}

impl Daemon {
    /// Starts `cmd` with RUST_LOG=info and no NO_COLOR: only the missing
    /// terminal keeps colour out. stderr goes to `log`, stdout to
    /// `log` too when `merge`, else to `<log>.out`.
    fn spawn(what: &str, cmd: &mut Command, log: PathBuf, merge: bool) -> Daemon {
        let err = std::fs::File::create(&log).unwrap();
        let out = if merge {
            err.try_clone().unwrap()
        } else {
            std::fs::File::create(log.with_extension("out")).unwrap()
        };
        let child = cmd
            .env("RUST_LOG", "info")
            .env_remove("NO_COLOR")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        Daemon {
            child: Some(child),
            what: what.to_string(),
            log,
        }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    fn bytes(&self) -> Vec<u8> {
        std::fs::read(&self.log).unwrap_or_default()
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes()).into_owned()
    }

    fn count(&self, needle: &str) -> usize {
        self.text().matches(needle).count()
    }

    /// Waits (15 s at most) until `needle` is in the log `n` times.
    fn wait_count(&mut self, needle: &str, n: usize) {
        let start = Instant::now();
        while self.count(needle) < n {
            if let Some(st) = self.child.as_mut().and_then(|c| c.try_wait().unwrap()) {
                panic!("{} exited with {st}:\n{}", self.what, self.text());
            }
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "{needle:?} not {n} times in the {} log:\n{}",
                self.what,
                self.text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on a child we spawned and have not reaped.
        unsafe { libc::kill(self.pid() as i32, sig) };
    }

    /// SIGTERM and the exit status (10 s at most).
    fn stop(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        sigterm_and_wait(&mut child, Duration::from_secs(10))
            .unwrap_or_else(|| panic!("{} did not stop within 10 s:\n{}", self.what, self.text()))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// No ANSI escape sequence (CSI, `ESC [`) anywhere in `bytes`.
fn assert_no_colour(what: &str, bytes: &[u8]) {
    let at = bytes.windows(2).position(|w| w == b"\x1b[");
    assert!(
        at.is_none(),
        "{what}'s log has an ANSI escape at byte {}:\n{}",
        at.unwrap_or(0),
        String::from_utf8_lossy(bytes)
    );
    assert!(!bytes.is_empty(), "{what} logged nothing");
}

/// Every line of `text` as a JSON object with a `level` and a `message`.
fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("not a JSON line ({e}): {l:?}\n{text}"));
            assert!(v["level"].is_string(), "no level: {l}");
            assert!(v["message"].is_string(), "no message: {l}");
            v
        })
        .collect()
}

#[test]
fn border_dp_logs_plain_text_changes_level_on_signals_and_reads_stats_quietly() {
    const INSTANCE: &str = "e2elg";
    clean_instance(INSTANCE);
    let lb = Netns::new("lg-lb");
    let dir = TempDir::new("lg-dp");
    let cfg = dir.path("border.toml");
    std::fs::write(
        &cfg,
        two_port_config(
            INSTANCE,
            "lg",
            "10.121.1.1/24",
            "10.121.2.1/24",
            "unix:///run/border/e2elg.sock",
        ),
    )
    .unwrap();
    // `ip netns exec` execs: the child is border-dp. Its DPDK lines
    // (stdout) and its own (stderr) go to the same file.
    let mut dp = Daemon::spawn(
        "border-dp",
        Command::new("ip")
            .args(["netns", "exec", &lb.name, border_dp_bin(), "--standalone"])
            .arg("--config")
            .arg(&cfg),
        dir.path("border-dp.log"),
        true,
    );
    wait_until("border-dp running", Duration::from_secs(30), || {
        StateRegion::open(&state_path(INSTANCE))
            .is_ok_and(|r| r.run_state() == RunState::Running && r.pid() == dp.pid())
    });

    // The port statistics are copied every second; no capture server runs.
    for _ in 0..3 {
        borderctl_ok(&["--instance", INSTANCE, "counters"]);
        std::thread::sleep(Duration::from_millis(1100));
    }
    assert_eq!(dp.count("pdump"), 0, "{}", dp.text());

    // At info: a reload leaves no debug line.
    let debug_line = "SIGHUP: re-reading the config file";
    dp.signal(libc::SIGHUP);
    dp.wait_count("config reloaded", 1);
    assert_eq!(dp.count(debug_line), 0, "{}", dp.text());

    // SIGUSR1: one step more (debug); the same reload now says so.
    dp.signal(libc::SIGUSR1);
    dp.wait_count("border's log level is now debug", 1);
    dp.signal(libc::SIGHUP);
    dp.wait_count("config reloaded", 2);
    dp.wait_count(debug_line, 1);
    assert!(
        dp.text()
            .lines()
            .any(|l| l.contains(" DEBUG ") && l.contains(debug_line)),
        "{}",
        dp.text()
    );

    // SIGUSR2: back to info, and the debug line does not come again.
    dp.signal(libc::SIGUSR2);
    dp.wait_count("border's log level is now info", 1);
    dp.signal(libc::SIGHUP);
    dp.wait_count("config reloaded", 3);
    assert_eq!(dp.count(debug_line), 1, "{}", dp.text());

    let status = dp.stop();
    assert!(status.success(), "exit {status}:\n{}", dp.text());
    assert_no_colour("border-dp", &dp.bytes());
}

/// border-dp's `--log-format json`: every line on stderr is an object, its
/// own and DPDK's (EAL's, the TAP driver's) alike.
#[test]
fn border_dp_json_lines_carry_dpdks_own_lines_too() {
    const INSTANCE: &str = "e2elgj";
    clean_instance(INSTANCE);
    let lb = Netns::new("lgj-lb");
    let dir = TempDir::new("lg-dpj");
    let cfg = dir.path("border.toml");
    std::fs::write(
        &cfg,
        two_port_config(
            INSTANCE,
            "lgj",
            "10.123.1.1/24",
            "10.123.2.1/24",
            "unix:///run/border/e2elgj.sock",
        ),
    )
    .unwrap();
    let mut dp = Daemon::spawn(
        "border-dp",
        Command::new("ip")
            .args(["netns", "exec", &lb.name, border_dp_bin(), "--standalone"])
            .args(["--log-format", "json", "--config"])
            .arg(&cfg),
        dir.path("border-dp.log"),
        false,
    );
    dp.wait_count("border-dp running", 1);
    let status = dp.stop();
    assert!(status.success(), "exit {status}:\n{}", dp.text());
    let lines = json_lines(&dp.text());
    let eal: Vec<_> = lines
        .iter()
        .filter(|v| v["target"] == "dpdk")
        .filter(|v| v["message"].as_str().unwrap().starts_with("EAL: "))
        .collect();
    assert!(
        !eal.is_empty(),
        "no EAL line under target dpdk:\n{}",
        dp.text()
    );
    assert!(
        lines.iter().any(|v| v["message"] == "workers stopped"),
        "{}",
        dp.text()
    );
    assert_no_colour("border-dp --log-format json", &dp.bytes());
}

fn mgmt_config(dir: &TempDir, weight: u32) -> String {
    null_port_config(
        "e2elgm",
        "10.122.0.1",
        &format!("unix://{}", dir.path("mgmt.sock").display()),
    ) + &format!(
        r#"
[[vip]]
name = "web"
address = "10.122.0.100"
port = 80

[[vip.backend]]
address = "10.122.0.11"
port = 8080
weight = {weight}
"#
    )
}

fn start_mgmt(dir: &TempDir, cfg: &Path, log: &str, more: &[&str]) -> Daemon {
    let mut m = Daemon::spawn(
        "border-mgmt",
        Command::new(border_mgmt_bin())
            .arg("--config")
            .arg(cfg)
            .arg("--state-dir")
            .arg(dir.path("state"))
            .args(more),
        dir.path(log),
        false,
    );
    m.wait_count("border-mgmt running", 1);
    m
}

#[test]
fn border_mgmt_logs_plain_text_or_json_lines_and_changes_level_on_signals() {
    clean_instance("e2elgm");
    let dir = TempDir::new("lg-mgmt");
    let cfg = dir.path("border.toml");
    std::fs::write(&cfg, mgmt_config(&dir, 100)).unwrap();

    let mut text = start_mgmt(&dir, &cfg, "text.log", &[]);
    assert!(text.stop().success(), "{}", text.text());
    assert_no_colour("border-mgmt", &text.bytes());
    assert!(text.text().contains(" INFO "), "{}", text.text());

    let mut m = start_mgmt(&dir, &cfg, "json.log", &["--log-format", "json"]);
    // A change inside the VIP entries is validated by re-parsing only
    // that entry, which border-mgmt says at debug.
    // The first reload parses in full (nothing to reuse yet); the second
    // would say it, at debug.
    let debug_line = "config validated: only these VIP entries were parsed";
    for (n, weight) in [(1, 90), (2, 85)] {
        std::fs::write(&cfg, mgmt_config(&dir, weight)).unwrap();
        m.signal(libc::SIGHUP);
        m.wait_count("config applied", n);
    }
    assert_eq!(m.count(debug_line), 0, "{}", m.text());

    m.signal(libc::SIGUSR1);
    m.wait_count("border's log level is now debug", 1);
    std::fs::write(&cfg, mgmt_config(&dir, 80)).unwrap();
    m.signal(libc::SIGHUP);
    m.wait_count(debug_line, 1);

    assert!(m.stop().success(), "{}", m.text());
    let lines = json_lines(&m.text());
    let levels = |message: &str| -> Vec<String> {
        lines
            .iter()
            .filter(|v| v["message"].as_str().unwrap().contains(message))
            .map(|v| v["level"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(levels("border-mgmt running"), ["INFO"]);
    assert_eq!(levels(debug_line), ["DEBUG"]);
    assert_eq!(levels("border's log level is now debug"), ["WARN"]);
    assert!(
        lines.iter().all(|v| v["timestamp"].is_string()),
        "{}",
        m.text()
    );
    assert_no_colour("border-mgmt --log-format json", &m.bytes());
}

fn gw_config(fleet: &Fleet, api: u16, metrics: u16) -> String {
    let d = fleet.dir.0.display();
    format!(
        r#"id = "gw1"
agent_listen = "127.0.0.1:{agent}"
api_listen = "127.0.0.1:{api}"
metrics_listen = "127.0.0.1:{metrics}"
redis = "redis://127.0.0.1:{redis}/0"

[limits]
api_connections = 1

[tls]
cert = "{d}/gw1.pem"
key = "{d}/gw1.key"
client_ca = "{d}/ca.pem"
api_fingerprints = ["{ctl}"]
"#,
        agent = free_port(),
        redis = fleet.redis_port,
        ctl = fleet.pin("ctl"),
    )
}

fn api_refusals(metrics: u16) -> f64 {
    let series = "border_gw_limit_refusals_total{listener=\"api\",limit=\"api_connections\"} ";
    scrape_metrics(metrics)
        .lines()
        .find_map(|l| l.strip_prefix(series))
        .map_or(0.0, |v| v.parse().unwrap())
}

/// Two connections to the api listener, which takes one: the second is
/// refused (counted, and logged at debug).
fn refused_api_connection(api: u16, metrics: u16) {
    let before = api_refusals(metrics);
    let _held = std::net::TcpStream::connect(("127.0.0.1", api)).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let _refused = std::net::TcpStream::connect(("127.0.0.1", api)).unwrap();
    wait_until("the refusal counted", Duration::from_secs(10), || {
        api_refusals(metrics) > before
    });
}

#[test]
fn border_gw_logs_plain_text_or_journald_priorities_and_changes_level_on_signals() {
    let fleet = Fleet::new("lg-gw");
    let (api, metrics) = (free_port(), free_port());
    let cfg = fleet.dir.path("gw1.toml");
    std::fs::write(&cfg, gw_config(&fleet, api, metrics)).unwrap();
    let gw = |log: &str, more: &[&str]| {
        let mut g = Daemon::spawn(
            "border-gw",
            Command::new(env!("CARGO_BIN_EXE_border-gw"))
                .arg("--config")
                .arg(&cfg)
                .args(more),
            fleet.dir.path(log),
            false,
        );
        g.wait_count("border-gw running", 1);
        g
    };

    let mut text = gw("text.log", &[]);
    assert!(text.stop().success(), "{}", text.text());
    assert_no_colour("border-gw", &text.bytes());

    let mut g = gw("journald.log", &["--log-format", "journald"]);
    let debug_line = "api: limits.api_connections reached";
    refused_api_connection(api, metrics);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(g.count(debug_line), 0, "{}", g.text());
    g.signal(libc::SIGUSR1);
    g.wait_count("border's log level is now debug", 1);
    refused_api_connection(api, metrics);
    g.wait_count(debug_line, 1);
    assert!(g.stop().success(), "{}", g.text());

    let log = g.text();
    let priority = |needle: &str| -> Vec<&str> {
        log.lines()
            .filter(|l| l.contains(needle))
            .map(|l| &l[..3])
            .collect()
    };
    assert_eq!(priority("border-gw running"), ["<6>"], "{log}");
    assert_eq!(priority(debug_line), ["<7>"], "{log}");
    assert_eq!(
        priority("border's log level is now debug"),
        ["<4>"],
        "{log}"
    );
    for l in log.lines() {
        let p = l.as_bytes();
        assert!(
            p.len() > 3 && p[0] == b'<' && (b'3'..=b'7').contains(&p[1]) && p[2] == b'>',
            "no syslog priority: {l:?}"
        );
        // The journal has its own timestamp and the level is the prefix.
        assert!(!l.contains(" INFO ") && !l[3..].starts_with("20"), "{l:?}");
    }
    assert_no_colour("border-gw --log-format journald", &g.bytes());
}

/// The units run each daemon with the journald form.
#[test]
fn the_units_log_in_the_journald_form() {
    for unit in [
        "border-dp@.service",
        "border-mgmt@.service",
        "border-gw@.service",
    ] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("deploy/systemd")
            .join(unit);
        let text = std::fs::read_to_string(&path).unwrap();
        let exec = text
            .lines()
            .find(|l| l.starts_with("ExecStart="))
            .unwrap_or_else(|| panic!("{unit}: no ExecStart"));
        assert!(exec.contains(" --log-format journald"), "{unit}: {exec}");
    }
}
