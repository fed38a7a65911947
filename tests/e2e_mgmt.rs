//! The border-mgmt process: starts, publishes, serves the API on its unix
//! socket and metrics over HTTP, reloads on SIGHUP, stops cleanly on SIGTERM
//! (exit 0, socket removed), re-attaches to its tables after a restart
//! without publishing again, and refuses bad situations with one line:
//! a socket another process answers on, a tables region held by another
//! publisher (a `border-dp --standalone`).
//!
//! No dataplane and no namespaces: instances are prefixed `em-`.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::metrics::{free_port, scrape_metrics};
use common::{null_port_config, TempDir};
use mgmt::pb;

fn mgmt_bin() -> &'static str {
    env!("CARGO_BIN_EXE_border-mgmt")
}

fn config(instance: &str, socket: &Path, metrics_port: u16, backends: &[&str]) -> String {
    let mut s = null_port_config(
        instance,
        "10.60.0.1",
        &format!("unix://{}", socket.display()),
    );
    s += &format!(
        r#"metrics_listen = "127.0.0.1:{metrics_port}"

[[vip]]
name = "web"
address = "10.60.0.100"
port = 80
maglev_table_size = 1009
"#
    );
    for b in backends {
        s.push_str(&format!(
            "\n[[vip.backend]]\naddress = \"{b}\"\nport = 8080\n"
        ));
    }
    s
}

/// Removes what an instance leaves behind (tables region, overrides, lock).
fn clean(instance: &str) {
    let _ = std::fs::remove_file(conf::tables::tables_path(instance));
    let _ = std::fs::remove_dir_all(mgmt::intent::default_state_dir(instance));
    let _ = std::fs::remove_file(mgmt::intent::legacy_overrides_path(instance));
}

struct Mgmt {
    child: Child,
    log: PathBuf,
}

impl Mgmt {
    fn spawn(cfg: &Path, log: PathBuf) -> Mgmt {
        let child = Command::new(mgmt_bin())
            .args([
                "--config",
                cfg.to_str().unwrap(),
                "--watch-interval-ms",
                "100",
            ])
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Mgmt { child, log }
    }

    fn text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait_log(&self, what: &str) {
        let start = Instant::now();
        while !self.text().contains(what) {
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "no {what:?} in the log:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on a child we spawned and have not reaped.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    /// SIGTERM, then the exit status (at most 10 s).
    fn stop(&mut self) -> std::process::ExitStatus {
        self.signal(libc::SIGTERM);
        let start = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "no exit within 10 s of SIGTERM:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for a process that should fail by itself; returns (status, last line).
    fn wait_fail(&mut self) -> (std::process::ExitStatus, String) {
        let start = Instant::now();
        let st = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st;
            }
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "still running:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let text = self.text();
        assert!(!text.contains("panicked"), "{text}");
        (st, text.lines().last().unwrap_or_default().to_string())
    }
}

impl Drop for Mgmt {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// One call on a runtime of its own: dropping it closes the connection
/// (an idle client would otherwise hold up a graceful stop).
fn get_config(socket: &Path) -> pb::GetConfigResponse {
    runtime().block_on(async {
        let mut c = mgmt::client::connect_unix(socket.to_owned()).await.unwrap();
        c.get_config(pb::GetConfigRequest {})
            .await
            .unwrap()
            .into_inner()
    })
}

fn wait_generation(socket: &Path, g: u64, m: &Mgmt) {
    let start = Instant::now();
    while get_config(socket).generation != g {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "generation {g} never came:\n{}",
            m.text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn border_mgmt_serves_reloads_stops_cleanly_and_reattaches() {
    let instance = "em-run";
    clean(instance);
    let dir = TempDir::new("em-run");
    let socket = dir.path("api.sock");
    let port = free_port();
    let cfg = dir.path("border.toml");
    std::fs::write(&cfg, config(instance, &socket, port, &["10.60.1.1"])).unwrap();

    let mut m = Mgmt::spawn(&cfg, dir.path("mgmt.log"));
    m.wait_log("border-mgmt running");
    m.wait_log("border-dp is not running");
    let c = get_config(&socket);
    assert_eq!(c.generation, 1);
    assert_eq!(c.origin, cfg.display().to_string());
    let body = scrape_metrics(port);
    assert!(
        body.contains("\nborder_tables_published_generation 1\n"),
        "{body}"
    );
    assert!(
        body.contains("\nborder_dataplane_up 0\n"),
        "no dataplane here: {body}"
    );

    // SIGHUP: the file gains a backend.
    std::fs::write(
        &cfg,
        config(instance, &socket, port, &["10.60.1.1", "10.60.1.2"]),
    )
    .unwrap();
    m.signal(libc::SIGHUP);
    wait_generation(&socket, 2, &m);
    // A broken file is refused; the running config stays.
    std::fs::write(&cfg, "instance = \"em-run\"\n[dataplane\n").unwrap();
    m.signal(libc::SIGHUP);
    m.wait_log("config rejected; the running config stays");
    assert_eq!(get_config(&socket).generation, 2);

    // Drain over the API, then stop.
    runtime().block_on(async {
        let mut c = mgmt::client::connect_unix(socket.clone()).await.unwrap();
        let out = c
            .set_backend(pb::SetBackendRequest {
                vip: "web".into(),
                backend: "10.60.1.2:8080".into(),
                action: Some(pb::set_backend_request::Action::Drain(pb::Drain {})),
                note: "e2e".into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(out.generation, 3);
    });
    let st = m.stop();
    assert!(st.success(), "exit {st}:\n{}", m.text());
    assert!(!socket.exists(), "socket removed");
    assert!(!m.text().contains("panicked"));

    // Restart with the same config: re-attaches, publishes nothing, keeps the drain.
    std::fs::write(
        &cfg,
        config(instance, &socket, port, &["10.60.1.1", "10.60.1.2"]),
    )
    .unwrap();
    let mut m = Mgmt::spawn(&cfg, dir.path("mgmt2.log"));
    m.wait_log("border-mgmt running");
    assert!(
        m.text().contains("attached to the tables region"),
        "{}",
        m.text()
    );
    assert_eq!(get_config(&socket).generation, 3);
    let st = runtime().block_on(async {
        let mut c = mgmt::client::connect_unix(socket.clone()).await.unwrap();
        c.get_status(pb::GetStatusRequest {})
            .await
            .unwrap()
            .into_inner()
    });
    assert_eq!(
        st.vips[0].backends[1].state(),
        pb::BackendState::Draining,
        "{st:?}"
    );

    // Another instance configured on the same socket: refused, one line.
    let other = dir.path("other.toml");
    std::fs::write(&other, config("em-run2", &socket, free_port(), &[])).unwrap();
    clean("em-run2");
    let mut m2 = Mgmt::spawn(&other, dir.path("other.log"));
    let (st2, line) = m2.wait_fail();
    assert!(!st2.success());
    assert_eq!(
        line,
        format!(
            "border-mgmt: error: {}: socket in use: another process is listening on it",
            socket.display()
        )
    );
    assert!(
        get_config(&socket).generation == 3,
        "the first still serves"
    );

    let st = m.stop();
    assert!(st.success(), "exit {st}:\n{}", m.text());
    clean(instance);
    clean("em-run2");
}

#[test]
fn border_mgmt_refuses_a_tables_region_held_by_another_publisher() {
    let instance = "em-busy";
    clean(instance);
    let dir = TempDir::new("em-busy");
    let socket = dir.path("api.sock");
    let cfg = dir.path("border.toml");
    std::fs::write(&cfg, config(instance, &socket, free_port(), &["10.60.1.1"])).unwrap();
    // What a `border-dp --standalone` does: it holds the writer lock.
    let held =
        conf::tables::TablesWriter::create(&conf::tables::tables_path(instance), 1 << 20).unwrap();
    let mut m = Mgmt::spawn(&cfg, dir.path("mgmt.log"));
    let (st, line) = m.wait_fail();
    assert!(!st.success());
    assert_eq!(
        line,
        format!(
            "border-mgmt: error: tables region {}: another publisher holds it (exclusive lock)",
            conf::tables::tables_path(instance).display()
        )
    );
    assert!(!socket.exists(), "no socket left behind");
    drop(held);
    clean(instance);
}
