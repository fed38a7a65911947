//! A small fleet on 127.0.0.1 for border-gw's end-to-end tests: a test CA,
//! a real redis-server, border-gw processes, appliances (border-mgmt in
//! agent mode, no inbound port), clients with pinned certificates, and what
//! a process holds (`/proc/PID`: descriptors, resident memory).
//!
//! tests/e2e_fleet.rs takes its CA, processes, Redis and scrapes from here
//! and builds its own fleet (pinned readers, refusals, TLS to Redis).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

use super::metrics::free_port;
use super::{BorderMgmt, TempDir};

/// A test CA writing `<stem>.pem`/`<stem>.key` pairs.
pub struct Ca(CertifiedIssuer<'static, KeyPair>);

impl Ca {
    pub fn new(dir: &Path) -> Ca {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name
            .push(DnType::CommonName, "border fleet test CA");
        let ca = CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap();
        std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
        Ca(ca)
    }

    /// A certificate for 127.0.0.1 (server and client use); its fingerprint.
    pub fn issue(&self, dir: &Path, stem: &str) -> String {
        let mut p = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        p.distinguished_name.push(DnType::CommonName, stem);
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.0).unwrap();
        std::fs::write(dir.join(format!("{stem}.pem")), cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{stem}.key")), key.serialize_pem()).unwrap();
        mgmt::tls::fingerprint(cert.der())
    }
}

/// A child process logging to a file, killed on drop.
pub struct Proc {
    child: Option<Child>,
    pub log: PathBuf,
    what: String,
}

impl Proc {
    pub fn spawn(what: &str, cmd: &mut Command, log: PathBuf) -> Proc {
        let child = cmd
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(log.with_extension("out")).unwrap())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        Proc {
            child: Some(child),
            log,
            what: what.to_string(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn wait_log(&self, needle: &str) {
        let start = Instant::now();
        while !self.text().contains(needle) {
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "no {needle:?} in the {} log:\n{}",
                self.what,
                self.text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Open file descriptors (`/proc/PID/fd`).
    pub fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// SIGKILL and reap (nothing left behind if already stopped).
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait (10 s at most) for the exit.
    pub fn term(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill(2) on a child we spawned and have not reaped.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let start = Instant::now();
            while c.try_wait().unwrap().is_none() {
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "{} did not stop",
                    self.what
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// Resident memory in bytes (`VmRSS` of `/proc/PID/status`).
    pub fn rss(&self) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

pub fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

pub fn start_redis(dir: &Path, port: u16) -> Proc {
    let r = Proc::spawn(
        "redis-server",
        Command::new("redis-server").args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            dir.to_str().unwrap(),
            "--logfile",
            "",
        ]),
        dir.join(format!("redis-{port}.log")),
    );
    let start = Instant::now();
    while redis_cli(port, &["PING"]) != "PONG" {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "redis-server did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    r
}

/// Tunnels gateway `gw` holds of `appliance`, as the registry says.
pub fn registry_count(port: u16, gw: &str, appliance: &str) -> u64 {
    redis_cli(
        port,
        &["HGET", &format!("border:fleet:gateway:{gw}"), appliance],
    )
    .parse()
    .unwrap_or(0)
}

pub fn wait_for(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
    start.elapsed()
}

/// One border-gw.
pub struct Gw {
    pub id: String,
    pub agent: u16,
    pub api: u16,
    pub metrics: u16,
    pub proc: Proc,
}

impl Gw {
    /// Its `/metrics`.
    pub fn scrape(&self) -> Metrics {
        Metrics(super::metrics::scrape_metrics(self.metrics))
    }
}

/// A scrape of a gateway's exporter.
pub struct Metrics(pub String);

impl Metrics {
    /// The value of `series` (`name` or `name{labels}` as rendered).
    pub fn get(&self, series: &str) -> f64 {
        self.0
            .lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {series} in\n{}", self.0))
            .parse()
            .unwrap()
    }

    /// `border_gw_calls_total{outcome}`.
    pub fn calls(&self, outcome: &str) -> f64 {
        self.get(&format!("border_gw_calls_total{{outcome=\"{outcome}\"}}"))
    }

    /// `border_gw_limit_refusals_total{listener,limit}`.
    pub fn refused(&self, listener: &str, limit: &str) -> f64 {
        self.get(&format!(
            "border_gw_limit_refusals_total{{listener=\"{listener}\",limit=\"{limit}\"}}"
        ))
    }
}

/// The gateways' certificate stems (and ids).
const GATEWAYS: [&str; 3] = ["gw1", "gw2", "gw3"];

/// A CA, Redis, and the certificates: `ctl` (an operator), `reader`,
/// `gw1`..`gw3` (gateways, pinned as operators and as `[[peer]]`s at each
/// other, each with an api port chosen up front), `ams1`, `ams2`
/// (appliances, which pin the three gateways).
pub struct Fleet {
    pub dir: TempDir,
    pub redis_port: u16,
    pub redis: Proc,
    pins: std::collections::HashMap<String, String>,
    api_ports: std::collections::HashMap<String, u16>,
}

impl Fleet {
    pub fn new(tag: &str) -> Fleet {
        let dir = TempDir::new(tag);
        let ca = Ca::new(&dir.0);
        let pins = ["ctl", "reader", "gw1", "gw2", "gw3", "ams1", "ams2"]
            .iter()
            .map(|s| (s.to_string(), ca.issue(&dir.0, s)))
            .collect();
        let api_ports = GATEWAYS
            .iter()
            .map(|g| (g.to_string(), free_port()))
            .collect();
        let redis_port = free_port();
        let redis = start_redis(&dir.0, redis_port);
        Fleet {
            dir,
            redis_port,
            redis,
            pins,
            api_ports,
        }
    }

    pub fn pin(&self, stem: &str) -> &str {
        &self.pins[stem]
    }

    /// The api port of gateway `id` (`gw1`..`gw3`), whether it runs or
    /// not: the other gateways list it as a `[[peer]]`.
    pub fn api_port(&self, id: &str) -> u16 {
        self.api_ports[id]
    }

    /// Starts gateway `id` (a certificate stem) with `limits` as its
    /// `[limits]` table; appliances `ams-1` and `ams-2` are configured.
    pub fn gateway(&self, id: &str, limits: &str) -> Gw {
        let (agent, api, metrics) = (free_port(), self.api_port(id), free_port());
        let ops: Vec<String> = ["ctl", "gw1", "gw2", "gw3"]
            .iter()
            .map(|s| format!("{:?}", self.pin(s)))
            .collect();
        let peers: String = GATEWAYS
            .iter()
            .filter(|g| **g != id)
            .map(|g| {
                format!(
                    "\n[[peer]]\naddress = \"127.0.0.1:{}\"\nfingerprints = [{:?}]\n",
                    self.api_port(g),
                    self.pin(g)
                )
            })
            .collect();
        let config = self.dir.path(&format!("{id}.toml"));
        std::fs::write(
            &config,
            format!(
                r#"id = "{id}"
agent_listen = "127.0.0.1:{agent}"
api_listen = "127.0.0.1:{api}"
metrics_listen = "127.0.0.1:{metrics}"
redis = "redis://127.0.0.1:{redis}/0"
registry_ttl_ms = 3000

[limits]
{limits}

[tls]
cert = "{d}/{id}.pem"
key = "{d}/{id}.key"
client_ca = "{d}/ca.pem"
api_fingerprints = [{ops}]
reader_fingerprints = ["{reader}"]

[[appliance]]
id = "ams-1"
fingerprints = ["{ams1}"]

[[appliance]]
id = "ams-2"
fingerprints = ["{ams2}"]
{peers}"#,
                redis = self.redis_port,
                d = self.dir.0.display(),
                ops = ops.join(", "),
                reader = self.pin("reader"),
                ams1 = self.pin("ams1"),
                ams2 = self.pin("ams2"),
            ),
        )
        .unwrap();
        let proc = Proc::spawn(
            id,
            Command::new(env!("CARGO_BIN_EXE_border-gw"))
                .arg("--config")
                .arg(&config),
            self.dir.path(&format!("{id}.log")),
        );
        proc.wait_log("border-gw running");
        Gw {
            id: id.to_string(),
            agent,
            api,
            metrics,
            proc,
        }
    }

    /// Starts appliance `id` (`ams-1`: certificate `ams1`) as instance
    /// `instance`, dialling `gws`' agent listeners; its pool keeps the
    /// tunnels it opened for a minute.
    pub fn appliance(&self, instance: &str, id: &str, gws: &[&Gw]) -> BorderMgmt {
        super::clean_instance(instance);
        let d = self.dir.0.display();
        let cert = id.replace('-', "");
        let cfg = self.dir.path(&format!("{instance}.toml"));
        let gws: Vec<String> = gws
            .iter()
            .map(|g| format!("\"tcp://127.0.0.1:{}\"", g.agent))
            .collect();
        let gw_pins: Vec<String> = GATEWAYS
            .iter()
            .map(|g| format!("{:?}", self.pin(g)))
            .collect();
        std::fs::write(
            &cfg,
            super::null_port_config(
                instance,
                "10.89.0.1",
                &format!("unix://{d}/{instance}.sock"),
            ) + &format!(
                r#"
[mgmt.tls]
cert = "{d}/{cert}.pem"
key = "{d}/{cert}.key"
client_ca = "{d}/ca.pem"
client_fingerprints = ["{ctl}"]

[mgmt.agent]
id = "{id}"
gateways = [{gws}]
idle_timeout_ms = 60000
backoff_min_ms = 200
backoff_max_ms = 1000
gateway_fingerprints = [{gw_pins}]

[[vip]]
name = "web"
address = "10.89.0.100"
port = 80
maglev_table_size = 1009

[[vip.backend]]
address = "10.89.0.11"
port = 8080
"#,
                ctl = self.pin("ctl"),
                gws = gws.join(", "),
                gw_pins = gw_pins.join(", ")
            ),
        )
        .unwrap();
        BorderMgmt::start(&cfg, self.dir.path(&format!("{instance}.log")))
    }

    /// Client TLS with certificate `who`.
    pub fn client_tls(&self, who: &str) -> mgmt::tls::ClientTls {
        mgmt::tls::ClientTls {
            server_ca: self.dir.path("ca.pem"),
            cert: self.dir.path(&format!("{who}.pem")),
            key: self.dir.path(&format!("{who}.key")),
            server_name: None,
        }
    }

    /// A new gRPC connection to `gw`'s api listener as `who`, calls routed
    /// to `appliance`.
    pub async fn client(&self, gw: &Gw, who: &str, appliance: &str) -> mgmt::client::RoutedClient {
        let target = conf::Listen::Tcp(format!("127.0.0.1:{}", gw.api).parse().unwrap());
        let ch = mgmt::client::connect_channel(&target, Some(&self.client_tls(who)))
            .await
            .unwrap();
        mgmt::client::routed(ch, mgmt::client::Route::to(appliance).unwrap()).border
    }
}

/// The `q` quantile (0..=1) of `samples`.
pub fn quantile(samples: &mut [Duration], q: f64) -> Duration {
    samples.sort();
    let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
    samples[i.min(samples.len() - 1)]
}
