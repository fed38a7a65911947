//! In-process border-mgmt for tests: a manager on files in a temp dir,
//! served on a unix socket (or TCP with mutual TLS) in that dir.

#![allow(dead_code)]

pub mod backend;
pub mod ca;
pub mod engine;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use conf::Config;
use mgmt::client::Client;
use mgmt::{Manager, Options, Paths};
use tokio::sync::watch;

pub const CFG: &str = r#"instance = "apitest"

[dataplane]
worker_lcores = [1]
flow_hash_key = "000102030405060708090a0b0c0d0e0f"

[[port]]
name = "p0"
devargs = "net_null0"
addresses = ["10.0.0.1/24"]
local_addresses = ["10.0.0.1"]

[mgmt]
listen = "@LISTEN@"
@METRICS@

@TLS@

[[vip]]
name = "web"
address = "10.0.0.100"
port = 80
maglev_table_size = 1009

[[vip.backend]]
address = "10.0.1.1"
port = 8080

[[vip.backend]]
address = "10.0.1.2"
port = 8080
"#;

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "bmt-{}-{}-{tag}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A free TCP port on 127.0.0.1 (bound and released: good enough for tests).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The test config with the listen address, metrics and TLS sections filled in.
pub fn config_text(listen: &str, metrics: Option<u16>, tls: &str) -> String {
    CFG.replace("@LISTEN@", listen)
        .replace(
            "@METRICS@",
            &metrics.map_or(String::new(), |p| {
                format!("metrics_listen = \"127.0.0.1:{p}\"")
            }),
        )
        .replace("@TLS@", tls)
}

/// A running in-process border-mgmt.
pub struct Running {
    pub dir: TempDir,
    pub paths: Paths,
    pub m: Arc<Manager>,
    pub cfg: Config,
    pub text: String,
    pub socket: PathBuf,
    pub metrics_port: Option<u16>,
    stop: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<Result<(), mgmt::server::ServeError>>>,
}

impl Running {
    /// Starts a manager with a unix socket in a new temp dir.
    pub async fn start(tag: &str, metrics: bool) -> Running {
        let dir = TempDir::new(tag);
        let socket = dir.0.join("api.sock");
        let port = metrics.then(free_port);
        let text = config_text(&format!("unix://{}", socket.display()), port, "");
        Self::start_with(dir, text, socket).await
    }

    /// Starts a manager on `text` with its files in `dir`.
    pub async fn start_with(dir: TempDir, text: String, socket: PathBuf) -> Running {
        let cfg = Config::from_toml_str(&text, "test.toml").unwrap();
        let paths = Paths::in_dir(&dir.0);
        let mut opts = Options::new(paths.clone());
        opts.config_path = Some(dir.0.join("border.toml"));
        std::fs::write(dir.0.join("border.toml"), &text).unwrap();
        let (m, _) = Manager::new(cfg.clone(), text.clone(), "test.toml".into(), opts).unwrap();
        m.publish_now("startup").unwrap();
        let bound = mgmt::server::bind(&cfg).await.unwrap();
        let metrics_port = bound.metrics_addr().map(|a| a.port());
        let (stop, rx) = watch::channel(false);
        let task = tokio::spawn(mgmt::server::serve(
            m.clone(),
            bound,
            Duration::from_millis(50),
            rx,
        ));
        Running {
            dir,
            paths,
            m,
            cfg,
            text,
            socket,
            metrics_port,
            stop,
            task: Some(task),
        }
    }

    pub async fn client(&self) -> Client {
        mgmt::client::connect_unix(self.socket.clone())
            .await
            .unwrap()
    }

    /// Stops the server; returns once it has.
    pub async fn stop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(10), t)
                .await
                .expect("server stops")
                .unwrap()
                .unwrap();
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.0.join(name)
    }
}

pub fn read_region(path: &Path) -> conf::tables::Generation {
    conf::tables::TablesReader::open(path)
        .unwrap()
        .view_current()
        .unwrap()
        .to_generation()
}

/// The start of the health tests' configs: `[dataplane]`, one null port
/// with 10.0.0.1, and `[mgmt]` listening on `listen` with `quorum` (peers
/// and TLS may follow).
pub fn health_config_head(instance: &str, listen: &str, quorum: u32) -> String {
    format!(
        r#"instance = "{instance}"
[dataplane]
worker_lcores = [1]
flow_hash_key = "000102030405060708090a0b0c0d0e0f"
[[port]]
name = "p0"
devargs = "net_null0"
addresses = ["10.0.0.1/24"]
local_addresses = ["10.0.0.1"]
[mgmt]
listen = "{listen}"
quorum = {quorum}
"#
    )
}

/// The health tests' VIP `web` (10.0.0.100:80): an HTTP check of /healthz
/// every 200 ms (timeout 150, rise 2, fall 2) plus `extra_health` lines,
/// over `backends` on 127.0.0.1.
pub fn web_vip_checked(extra_health: &str, backends: &[&backend::Backend]) -> String {
    let mut t = format!(
        r#"[[vip]]
name = "web"
address = "10.0.0.100"
port = 80
maglev_table_size = 1009
[vip.health]
kind = "http"
path = "/healthz"
interval_ms = 200
timeout_ms = 150
rise = 2
fall = 2
{extra_health}"#
    );
    for b in backends {
        t.push_str(&format!(
            "[[vip.backend]]\naddress = \"127.0.0.1\"\nport = {}\n",
            b.addr.port()
        ));
    }
    t
}
