//! Fleet control (docs/fleet.md): appliances whose border-mgmt
//! runs in agent mode dial out to two border-gw gateways that share one
//! Redis; borderctl reaches an appliance through either gateway.
//!
//! No namespaces: the appliances have no inbound TCP port at all (their API
//! is a unix socket, their only TCP connections are the tunnels they dial),
//! gateways and Redis listen on 127.0.0.1. Instances are prefixed `fl-`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::fleet::{redis_cli, registry_count, start_redis, wait_for, Ca, Metrics, Proc};
use common::metrics::free_port;
use common::{borderctl, null_port_config, BorderMgmt, TempDir};

struct Gw {
    id: &'static str,
    agent: u16,
    api: u16,
    metrics: u16,
    config: PathBuf,
    proc: Option<Proc>,
}

struct Fleet {
    dir: TempDir,
    redis_port: u16,
    redis: Option<Proc>,
    gws: Vec<Gw>,
    pins: Pins,
}

struct Pins {
    ams1: String,
    rogue: String,
    /// gw1's and gw2's certificates.
    gws: [String; 2],
    ctl: String,
}

/// Connections each gateway's exporter takes at once (small: the metrics
/// test fills them).
const METRICS_CONNECTIONS: usize = 2;

#[allow(clippy::too_many_arguments)]
fn gw_config(
    dir: &Path,
    id: &str,
    agent: u16,
    api: u16,
    metrics: u16,
    redis: u16,
    api_pins: &[&str],
    reader: &str,
    ams1: &str,
    peer: (u16, &str),
) -> String {
    let pins: Vec<String> = api_pins.iter().map(|p| format!("{p:?}")).collect();
    let (peer_api, peer_fp) = peer;
    format!(
        r#"id = "{id}"
agent_listen = "127.0.0.1:{agent}"
api_listen = "127.0.0.1:{api}"
metrics_listen = "127.0.0.1:{metrics}"
metrics_connections = {METRICS_CONNECTIONS}
redis = "redis://127.0.0.1:{redis}/0"
registry_ttl_ms = 1500

[tls]
cert = "{d}/{id}.pem"
key = "{d}/{id}.key"
client_ca = "{d}/ca.pem"
api_fingerprints = [{pins}]
reader_fingerprints = ["{reader}"]

[[appliance]]
id = "ams-1"
fingerprints = ["{ams1}"]

[[appliance]]
id = "ams-2"
fingerprints = ["{ams1}"]

[[peer]]
address = "127.0.0.1:{peer_api}"
fingerprints = ["{peer_fp}"]
"#,
        d = dir.display(),
        pins = pins.join(", ")
    )
}

fn appliance_config(
    dir: &Path,
    instance: &str,
    id: &str,
    cert: &str,
    ctl: &str,
    gws: &[u16],
    gw_pins: &[&str],
) -> String {
    let gw_pins: Vec<String> = gw_pins.iter().map(|p| format!("{p:?}")).collect();
    let gws: Vec<String> = gws
        .iter()
        .map(|p| format!("\"tcp://127.0.0.1:{p}\""))
        .collect();
    let d = dir.display();
    null_port_config(
        instance,
        "10.97.0.1",
        &format!("unix://{d}/{instance}.sock"),
    ) + &format!(
        r#"
[mgmt.tls]
cert = "{d}/{cert}.pem"
key = "{d}/{cert}.key"
client_ca = "{d}/ca.pem"
client_fingerprints = ["{ctl}"]

[mgmt.limits]
watch_streams = 256

[mgmt.agent]
id = "{id}"
gateways = [{gws}]
max_tunnels = 70
idle_timeout_ms = 1500
backoff_min_ms = 200
backoff_max_ms = 1000
backoff_reset_after_ms = 1000
gateway_fingerprints = [{gw_pins}]

[[vip]]
name = "web"
address = "10.97.0.100"
port = 80
maglev_table_size = 1009

[[vip.backend]]
address = "10.97.0.11"
port = 8080
"#,
        gws = gws.join(", "),
        gw_pins = gw_pins.join(", ")
    )
}

impl Fleet {
    fn new(tag: &str) -> Fleet {
        let dir = TempDir::new(tag);
        let ca = Ca::new(&dir.0);
        let ctl = ca.issue(&dir.0, "ctl");
        let fp1 = ca.issue(&dir.0, "gw1");
        let fp2 = ca.issue(&dir.0, "gw2");
        let ams1 = ca.issue(&dir.0, "ams1");
        let rogue = ca.issue(&dir.0, "rogue");
        let reader = ca.issue(&dir.0, "reader");
        let redis_port = free_port();
        let redis = start_redis(&dir.0, redis_port);
        let mut gws = Vec::new();
        let apis = [free_port(), free_port()];
        let fps = [fp1.clone(), fp2.clone()];
        for (i, id) in ["gw1", "gw2"].into_iter().enumerate() {
            let (agent, api, metrics) = (free_port(), apis[i], free_port());
            let config = dir.path(&format!("{id}.toml"));
            std::fs::write(
                &config,
                gw_config(
                    &dir.0,
                    id,
                    agent,
                    api,
                    metrics,
                    redis_port,
                    &[&ctl],
                    &reader,
                    &ams1,
                    (apis[1 - i], &fps[1 - i]),
                ),
            )
            .unwrap();
            gws.push(Gw {
                id,
                agent,
                api,
                metrics,
                config,
                proc: None,
            });
        }
        let mut f = Fleet {
            dir,
            redis_port,
            redis: Some(redis),
            gws,
            pins: Pins {
                ams1,
                rogue,
                gws: fps,
                ctl: ctl.clone(),
            },
        };
        f.start_gw(0);
        f.start_gw(1);
        f
    }

    fn start_gw(&mut self, i: usize) {
        let g = &mut self.gws[i];
        let p = Proc::spawn(
            g.id,
            Command::new(env!("CARGO_BIN_EXE_border-gw"))
                .arg("--config")
                .arg(&g.config),
            self.dir.path(&format!("{}.log", g.id)),
        );
        p.wait_log("border-gw running");
        g.proc = Some(p);
    }

    fn gw_log(&self, i: usize) -> String {
        self.gws[i]
            .proc
            .as_ref()
            .map(Proc::text)
            .unwrap_or_default()
    }

    fn appliance(&self, instance: &str, id: &str, cert: &str) -> BorderMgmt {
        let gws: Vec<u16> = self.gws.iter().map(|g| g.agent).collect();
        let pins = [self.pins.gws[0].as_str(), self.pins.gws[1].as_str()];
        self.appliance_to(instance, id, cert, &gws, &pins)
    }

    /// An appliance dialling the agent listeners `gws`, pinning `gw_pins`.
    fn appliance_to(
        &self,
        instance: &str,
        id: &str,
        cert: &str,
        gws: &[u16],
        gw_pins: &[&str],
    ) -> BorderMgmt {
        common::clean_instance(instance);
        let cfg = self.dir.path(&format!("{instance}.toml"));
        std::fs::write(
            &cfg,
            appliance_config(
                &self.dir.0,
                instance,
                id,
                cert,
                &self.pins.ctl,
                gws,
                gw_pins,
            ),
        )
        .unwrap();
        BorderMgmt::start(&cfg, self.dir.path(&format!("{instance}.log")))
    }

    /// Gateway `i`'s `/metrics`.
    fn scrape(&self, i: usize) -> Metrics {
        let out = self.try_scrape(i);
        assert!(out.starts_with("HTTP/1.1 200"), "{out:?}");
        assert!(out.contains("text/plain; version=0.0.4"), "{out}");
        Metrics(out)
    }

    /// What gateway `i`'s exporter answers to `GET /metrics` (empty when it
    /// closed the connection at once).
    fn try_scrape(&self, i: usize) -> String {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.gws[i].metrics)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    /// borderctl through gateway `i` to `appliance`, as the operator.
    fn ctl(&self, i: usize, appliance: &str, args: &[&str]) -> (i32, String, String) {
        self.ctl_as("ctl", i, appliance, args)
    }

    /// borderctl through gateway `i` to `appliance` with the certificate
    /// `who` (`ctl`: an operator, `reader`: pinned as a reader).
    fn ctl_as(&self, who: &str, i: usize, appliance: &str, args: &[&str]) -> (i32, String, String) {
        let gw = format!("tcp://127.0.0.1:{}", self.gws[i].api);
        let (cert, key, ca) = (
            self.dir.path(&format!("{who}.pem")),
            self.dir.path(&format!("{who}.key")),
            self.dir.path("ca.pem"),
        );
        let mut all = vec![
            "--gateway",
            gw.as_str(),
            "--appliance",
            appliance,
            "--cert",
            cert.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
            "--ca",
            ca.to_str().unwrap(),
            "--timeout-ms",
            "5000",
        ];
        all.extend_from_slice(args);
        borderctl(&all)
    }

    /// A gRPC channel to gateway `i`'s api listener, calls routed to `appliance`.
    async fn client(&self, i: usize, appliance: &str) -> mgmt::client::RoutedClient {
        let tls = mgmt::tls::ClientTls {
            server_ca: self.dir.path("ca.pem"),
            cert: self.dir.path("ctl.pem"),
            key: self.dir.path("ctl.key"),
            server_name: None,
        };
        let target = conf::Listen::Tcp(format!("127.0.0.1:{}", self.gws[i].api).parse().unwrap());
        let ch = mgmt::client::connect_channel(&target, Some(&tls))
            .await
            .unwrap();
        mgmt::client::routed(ch, mgmt::client::Route::to(appliance).unwrap()).border
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The VIP names of a `status --json` answer.
fn vips_of(json: &str) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
    v["vips"]
        .as_array()
        .unwrap_or_else(|| panic!("no vips in {json}"))
        .iter()
        .map(|x| x["name"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn borderctl_reaches_an_appliance_through_either_gateway_and_the_fleet_heals() {
    let mut fleet = Fleet::new("fl-main");
    let ams = fleet.appliance("fl-ams1", "ams-1", "ams1");
    let port = fleet.redis_port;
    // The agent opens grow_by (10) tunnels, all to gw1, the first gateway.
    wait_for(
        "10 tunnels of ams-1 on gw1 in the registry",
        Duration::from_secs(10),
        || registry_count(port, "gw1", "ams-1") == 10,
    );
    assert_eq!(registry_count(port, "gw2", "ams-1"), 0);

    // Through gw1 (it holds the tunnels) as through the unix socket.
    let sock = format!("unix://{}", fleet.dir.path("fl-ams1.sock").display());
    let (direct_code, direct, _) = borderctl(&["--server", &sock, "--json", "status"]);
    let (code, out, err) = fleet.ctl(0, "ams-1", &["--json", "status"]);
    assert_eq!(code, direct_code, "{err}");
    assert_eq!(vips_of(&out), vips_of(&direct));
    assert_eq!(vips_of(&out), ["web"]);
    // Through gw2, which has no tunnel: it finds gw1 in the registry.
    let (code, out, err) = fleet.ctl(1, "ams-1", &["--json", "status"]);
    assert_eq!(code, direct_code, "{err}");
    assert_eq!(vips_of(&out), ["web"]);
    // A write goes through too, and the appliance applied it.
    let (code, _, err) = fleet.ctl(1, "ams-1", &["drain", "web", "10.97.0.11:8080"]);
    assert_eq!(code, 0, "{err}");
    let (_, direct, _) = borderctl(&["--server", &sock, "--json", "status"]);
    assert!(
        direct.replace([' ', '\n'], "").contains("\"drained\":true"),
        "{direct}"
    );

    // An unknown appliance: a clear NOT_FOUND, logged by the gateway.
    let (code, _, err) = fleet.ctl(1, "nope", &["status"]);
    assert_eq!(code, 1);
    assert!(err.contains("unknown appliance nope"), "{err}");
    assert!(
        fleet.gw_log(1).contains("call refused"),
        "{}",
        fleet.gw_log(1)
    );

    // Redis restarted empty: rebuilt from the live tunnels within one TTL.
    fleet.redis.take().unwrap().kill9();
    fleet.redis = Some(start_redis(&fleet.dir.0, port));
    assert_eq!(registry_count(port, "gw1", "ams-1"), 0);
    let took = wait_for(
        "the registry rebuilt",
        Duration::from_millis(1500 + 1000),
        || registry_count(port, "gw1", "ams-1") >= 2,
    );
    eprintln!("registry rebuilt {took:?} after Redis restarted empty (TTL 1.5 s)");
    let (code, out, err) = fleet.ctl(1, "ams-1", &["--json", "status"]);
    assert_eq!(code, direct_code, "{err}");
    assert_eq!(vips_of(&out), ["web"]);

    // Redis answering errors: a clear UNAVAILABLE from gw2, logged.
    redis_cli(port, &["DEL", "border:fleet:appliance:ams-1"]);
    redis_cli(port, &["SET", "border:fleet:appliance:ams-1", "garbage"]);
    let start = Instant::now();
    let (code, _, err) = fleet.ctl(1, "ams-1", &["status"]);
    assert_eq!(code, 3, "UNAVAILABLE: exit 3 (docs/api.md)");
    assert!(
        err.contains("registry (Redis) failed") && err.contains("WRONGTYPE"),
        "{err}"
    );
    assert!(start.elapsed() < Duration::from_secs(3));
    redis_cli(port, &["DEL", "border:fleet:appliance:ams-1"]);

    // kill gw1: ams-1 reconnects to gw2 within its backoff.
    let killed = Instant::now();
    fleet.gws[0].proc.take().unwrap().kill9();
    wait_for("ams-1's tunnels on gw2", Duration::from_secs(5), || {
        registry_count(port, "gw2", "ams-1") >= 2
    });
    let took = killed.elapsed();
    eprintln!("ams-1 reconnected to gw2 {took:?} after gw1 was killed (backoff 200 ms .. 1 s)");
    assert!(took < Duration::from_millis(2500), "{took:?}");
    let (code, out, err) = fleet.ctl(1, "ams-1", &["--json", "status"]);
    assert_eq!(code, direct_code, "{err}");
    assert_eq!(vips_of(&out), ["web"]);
    assert!(
        ams.log_text().contains("agent: tunnel lost"),
        "{}",
        ams.log_text()
    );

    // The appliance dies mid-call: the caller gets UNAVAILABLE naming the
    // broken tunnel, from the gateway, at once.
    let rt = runtime();
    let mut stream = rt.block_on(async {
        let mut c = fleet.client(1, "ams-1").await;
        c.watch_events(mgmt::pb::WatchEventsRequest::default())
            .await
            .unwrap()
            .into_inner()
    });
    drop(ams);
    let end =
        rt.block_on(async { tokio::time::timeout(Duration::from_secs(5), stream.message()).await });
    let st = end
        .expect("the stream ended within 5 s")
        .expect_err("an error status");
    assert_eq!(st.code(), tonic::Code::Unavailable, "{st:?}");
    assert!(
        st.message()
            .contains("the tunnel of appliance ams-1 closed mid-call"),
        "{st:?}"
    );
}

#[test]
fn a_burst_grows_the_pool_by_tens_and_idle_shrinks_it_back() {
    let fleet = Fleet::new("fl-pool");
    let ams = fleet.appliance("fl-ams2", "ams-1", "ams1");
    let port = fleet.redis_port;
    wait_for("10 tunnels", Duration::from_secs(10), || {
        registry_count(port, "gw1", "ams-1") == 10
    });
    // Idle above the minimum: back to min_idle (2) after idle_timeout (1.5 s).
    wait_for("the pool back at 2", Duration::from_secs(6), || {
        registry_count(port, "gw1", "ams-1") == 2
    });
    let rt = runtime();
    let mut seen = std::collections::BTreeSet::new();
    let streams = rt.block_on(async {
        let client = fleet.client(0, "ams-1").await;
        let mut streams = Vec::new();
        for _ in 0..50 {
            let mut c = client.clone();
            streams.push(tokio::spawn(async move {
                c.watch_events(mgmt::pb::WatchEventsRequest::default())
                    .await
            }));
        }
        let mut held = Vec::new();
        for s in streams {
            held.push(
                s.await
                    .unwrap()
                    .expect("an events stream through the gateway"),
            );
        }
        held
    });
    assert_eq!(streams.len(), 50);
    wait_for("at least 52 tunnels", Duration::from_secs(10), || {
        let n = registry_count(port, "gw1", "ams-1");
        seen.insert(n);
        n >= 52
    });
    let log = ams.log_text();
    let steps: Vec<&str> = log.lines().filter(|l| l.contains("opening")).collect();
    assert!(steps.len() >= 6, "{log}");
    assert!(
        steps.iter().all(|l| l.contains("opening 10 more")),
        "{steps:#?}"
    );
    // Every tunnel busy and the pool at its maximum (70): a call with a
    // 300 ms deadline is ended by the gateway at its deadline.
    let (more, ended) = rt.block_on(async {
        let client = fleet.client(0, "ams-1").await;
        let mut more = Vec::new();
        for _ in 0..20 {
            let mut c = client.clone();
            more.push(
                c.watch_events(mgmt::pb::WatchEventsRequest::default())
                    .await
                    .unwrap(),
            );
        }
        let mut c = client.clone();
        let mut req = tonic::Request::new(mgmt::pb::GetStatusRequest::default());
        req.set_timeout(Duration::from_millis(300));
        let t0 = Instant::now();
        let r = c.get_status(req).await;
        (more, (t0.elapsed(), r))
    });
    assert_eq!(registry_count(port, "gw1", "ams-1"), 70);
    let (took, r) = ended;
    let st = r.expect_err("no tunnel can take the call");
    assert!(
        matches!(
            st.code(),
            tonic::Code::DeadlineExceeded | tonic::Code::ResourceExhausted
        ) && st.message().contains("border-gw"),
        "{st:?}"
    );
    assert!(took < Duration::from_millis(1500), "{took:?}");
    eprintln!("a call at the maximum ended after {took:?} (deadline 300 ms): {st:?}");
    drop(more);
    drop(streams);
    wait_for(
        "the pool back at 2 after the burst",
        Duration::from_secs(8),
        || registry_count(port, "gw1", "ams-1") == 2,
    );
    eprintln!("registry counts seen during the burst: {seen:?}");
}

#[test]
fn refusals_are_clear_and_nothing_hangs() {
    let mut fleet = Fleet::new("fl-bad");
    let port = fleet.redis_port;
    // An appliance whose certificate is CA-valid but not pinned for its id.
    let rogue = fleet.appliance("fl-rogue", "ams-2", "rogue");
    let _ = &fleet.pins.ams1;
    rogue.log_text();
    let fp = fleet.pins.rogue.clone();
    wait_for("the refusal in gw1's log", Duration::from_secs(10), || {
        fleet.gw_log(0).contains(&format!(
            "certificate {fp} is not pinned for appliance ams-2"
        ))
    });
    wait_for(
        "the refusal in the appliance's log",
        Duration::from_secs(10),
        || {
            rogue
                .log_text()
                .contains("the gateway refused the tunnel: certificate")
        },
    );
    assert_eq!(registry_count(port, "gw1", "ams-2"), 0);
    let m = fleet.scrape(0);
    assert!(m.get("border_gw_tunnel_refusals_total") >= 1.0);
    assert_eq!(m.get("border_gw_tunnel_opens_total"), 0.0);
    // A known appliance with no tunnel: UNAVAILABLE, at once.
    let (code, _, err) = fleet.ctl(0, "ams-2", &["status"]);
    assert_eq!(code, 3, "UNAVAILABLE: exit 3 (docs/api.md)");
    assert!(err.contains("has no tunnel to any gateway"), "{err}");
    drop(rogue);

    // Garbage on a tunnel: a pinned certificate, then not a preface.
    let rt = runtime();
    rt.block_on(async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut cfg = std::sync::Arc::unwrap_or_clone(
            mgmt::tls::client_config(&mgmt::tls::ClientTls {
                server_ca: fleet.dir.path("ca.pem"),
                cert: fleet.dir.path("ams1.pem"),
                key: fleet.dir.path("ams1.key"),
                server_name: None,
            })
            .unwrap(),
        );
        cfg.alpn_protocols = vec![mgmt::agent::ALPN.to_vec()];
        let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(cfg));
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", fleet.gws[0].agent))
            .await
            .unwrap();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let mut s = connector.connect(name, tcp).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut answer)).await;
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.starts_with("BORDER-TUNNEL/1 REFUSED not a border tunnel"),
            "{answer}"
        );
    });
    wait_for("the garbage logged", Duration::from_secs(5), || {
        fleet
            .gw_log(0)
            .contains("tunnel refused: not a border tunnel")
    });

    // An id with a newline would forge a log line.
    let answer = rt.block_on(async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut cfg = std::sync::Arc::unwrap_or_clone(
            mgmt::tls::client_config(&mgmt::tls::ClientTls {
                server_ca: fleet.dir.path("ca.pem"),
                cert: fleet.dir.path("ams1.pem"),
                key: fleet.dir.path("ams1.key"),
                server_name: None,
            })
            .unwrap(),
        );
        cfg.alpn_protocols = vec![mgmt::agent::ALPN.to_vec()];
        let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(cfg));
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", fleet.gws[0].agent))
            .await
            .unwrap();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let mut s = connector.connect(name, tcp).await.unwrap();
        let preface = mgmt::agent::preface::Preface {
            id: "ams-1\nFORGED audit line".into(),
            methods: vec![],
        };
        s.write_all(&preface.encode()).await.unwrap();
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut answer)).await;
        String::from_utf8_lossy(&answer).into_owned()
    });
    assert!(
        answer.starts_with("BORDER-TUNNEL/1 REFUSED tunnel preface is not valid: id"),
        "{answer}"
    );
    wait_for("the bad id counted", Duration::from_secs(5), || {
        fleet.scrape(0).get("border_gw_tunnel_bad_ids_total") == 1.0
    });
    let log = fleet.gw_log(0);
    assert!(
        !log.lines().any(|l| l.starts_with("FORGED")),
        "a forged line in the log:\n{log}"
    );

    // A gateway that closes mid-call: the caller gets a status, not a hang.
    let ams = fleet.appliance("fl-ams3", "ams-1", "ams1");
    wait_for("tunnels", Duration::from_secs(10), || {
        registry_count(port, "gw1", "ams-1") >= 2
    });
    let mut stream = rt.block_on(async {
        let mut c = fleet.client(0, "ams-1").await;
        c.watch_events(mgmt::pb::WatchEventsRequest::default())
            .await
            .unwrap()
            .into_inner()
    });
    fleet.gws[0].proc.take().unwrap().kill9();
    let start = Instant::now();
    let end =
        rt.block_on(async { tokio::time::timeout(Duration::from_secs(5), stream.message()).await });
    let st = end
        .expect("the stream ended within 5 s")
        .expect_err("an error status");
    assert!(start.elapsed() < Duration::from_secs(5));
    // The caller's own connection went with the gateway: its client says so.
    assert!(
        matches!(st.code(), tonic::Code::Unknown | tonic::Code::Unavailable),
        "{st:?}"
    );
    eprintln!("mid-call close: {:?}: {}", st.code(), st.message());

    // A planned reconnect: gw2 drains (SIGTERM: its tunnels are told to
    // close); the agent moves on to its next gateway (gw1, started again)
    // and a call with a deadline goes through within it.
    wait_for("ams-1 on gw2", Duration::from_secs(5), || {
        registry_count(port, "gw2", "ams-1") >= 2
    });
    let planned_before = ams.log_text().matches("the gateway drains").count();
    fleet.gws[1].proc.as_mut().unwrap().term();
    wait_for(
        "the drain seen by the agent",
        Duration::from_secs(5),
        || ams.log_text().matches("the gateway drains").count() > planned_before,
    );
    fleet.start_gw(0);
    wait_for("a call through gw1 again", Duration::from_secs(5), || {
        rt.block_on(async {
            let mut c = fleet.client(0, "ams-1").await;
            let mut req = tonic::Request::new(mgmt::pb::GetStatusRequest::default());
            req.set_timeout(Duration::from_millis(1000));
            c.get_status(req).await.is_ok()
        })
    });
    assert!(!ams.log_text().contains("panicked"));
}

#[test]
fn the_gateways_metrics_follow_tunnels_calls_and_the_registry() {
    let mut fleet = Fleet::new("fl-met");
    let m = fleet.scrape(0);
    assert_eq!(m.get("border_gw_up"), 1.0);
    assert_eq!(m.get("border_gw_tunnels"), 0.0);
    assert_eq!(m.get("border_gw_tunnel_opens_total"), 0.0);
    assert!(
        m.0.contains("border_gw_info{id=\"gw1\",version=\""),
        "{}",
        m.0
    );
    assert!(
        m.0.contains("border_build_info{daemon=\"border-gw\",version=\""),
        "{}",
        m.0
    );
    assert!(m.get("process_resident_memory_bytes") > 0.0, "{}", m.0);
    assert!(m.get("process_open_fds") > 0.0, "{}", m.0);

    // The agent opens 10 tunnels to gw1: counted, published, per appliance.
    let ams = fleet.appliance("fl-ams4", "ams-1", "ams1");
    let port = fleet.redis_port;
    wait_for(
        "10 tunnels in gw1's metrics",
        Duration::from_secs(10),
        || fleet.scrape(0).get("border_gw_tunnels") == 10.0,
    );
    wait_for("the registry entry", Duration::from_secs(5), || {
        registry_count(port, "gw1", "ams-1") == 10
    });
    let m = fleet.scrape(0);
    assert_eq!(
        m.get("border_gw_appliance_tunnels{appliance=\"ams-1\"}"),
        10.0
    );
    assert_eq!(m.get("border_gw_tunnel_opens_total"), 10.0);
    assert_eq!(m.get("border_gw_tunnel_closes_total"), 0.0);
    assert_eq!(m.get("border_gw_registry_entries"), 1.0);
    assert_eq!(m.get("border_gw_registry_up"), 1.0);
    assert_eq!(fleet.scrape(1).get("border_gw_tunnels"), 0.0);

    // 5 calls through gw1, one through gw2 (sent on to gw1), one for an
    // unknown appliance: each counted by outcome, the forwarded ones timed.
    const CALLS: usize = 5;
    let rt = runtime();
    rt.block_on(async {
        let mut c = fleet.client(0, "ams-1").await;
        for _ in 0..CALLS {
            c.get_status(mgmt::pb::GetStatusRequest::default())
                .await
                .unwrap();
        }
        let mut c = fleet.client(1, "ams-1").await;
        c.get_status(mgmt::pb::GetStatusRequest::default())
            .await
            .unwrap();
        // The appliance refuses this one itself (no such VIP).
        let mut c = fleet.client(0, "ams-1").await;
        let st = c
            .set_backend(mgmt::pb::SetBackendRequest::default())
            .await
            .unwrap_err();
        assert!(!st.message().contains("border-gw"), "{st:?}");
        let mut c = fleet.client(0, "nope").await;
        let st = c
            .get_status(mgmt::pb::GetStatusRequest::default())
            .await
            .unwrap_err();
        assert_eq!(st.code(), tonic::Code::NotFound, "{st:?}");
    });
    let (m1, m2) = (fleet.scrape(0), fleet.scrape(1));
    assert_eq!(m1.calls("ok"), (CALLS + 1) as f64, "gw1: its own and gw2's");
    assert_eq!(m1.calls("no_tunnel"), 1.0);
    assert_eq!(m1.calls("appliance_error"), 1.0, "the appliance's refusal");
    assert_eq!(m1.calls("deadline"), 0.0);
    assert_eq!(m1.get("border_gw_peer_forwards_total"), 0.0);
    // Timed: the ok ones and the appliance's refusal.
    assert_eq!(
        m1.get("border_gw_forward_seconds_count"),
        (CALLS + 2) as f64
    );
    assert_eq!(
        m1.get("border_gw_forward_seconds_bucket{le=\"+Inf\"}"),
        (CALLS + 2) as f64
    );
    let sum = m1.get("border_gw_forward_seconds_sum");
    assert!(sum > 0.0 && sum < 5.0, "{sum}");
    assert_eq!(m2.calls("ok"), 1.0);
    assert_eq!(m2.get("border_gw_peer_forwards_total"), 1.0);
    assert_eq!(m2.get("border_gw_forward_seconds_count"), 1.0);
    assert_eq!(m2.calls("no_tunnel"), 0.0);
    eprintln!(
        "gw1 forward latency: {:.2} ms mean over {} calls",
        sum * 1000.0 / (CALLS + 2) as f64,
        CALLS + 2
    );

    // Idle, the pool shrinks back to 2: the closes are counted.
    wait_for("the pool back at 2", Duration::from_secs(8), || {
        fleet.scrape(0).get("border_gw_tunnels") == 2.0
    });
    let m = fleet.scrape(0);
    let (opens, closes) = (
        m.get("border_gw_tunnel_opens_total"),
        m.get("border_gw_tunnel_closes_total"),
    );
    assert_eq!(opens - closes, 2.0, "opens {opens}, closes {closes}");
    assert!(closes >= 8.0, "{closes}");

    // The exporter takes METRICS_CONNECTIONS connections at once; one more
    // is closed at once and counted.
    // A scrape that just ended may still hold its place for a moment; then
    // one of the held connections is the one refused and the place frees
    // under the extra scrape. A bound that works refuses the extra one once
    // the earlier scrapes are gone, so a few tries tell the two apart.
    let beyond_the_bound_refused = (0..3).any(|_| {
        let held: Vec<std::net::TcpStream> = (0..METRICS_CONNECTIONS)
            .map(|_| std::net::TcpStream::connect(("127.0.0.1", fleet.gws[0].metrics)).unwrap())
            .collect();
        std::thread::sleep(Duration::from_millis(100));
        let refused = fleet.try_scrape(0).is_empty();
        drop(held);
        if !refused {
            std::thread::sleep(Duration::from_millis(300));
        }
        refused
    });
    assert!(beyond_the_bound_refused, "a connection beyond the bound");
    let mut m = None;
    wait_for(
        "a scrape after the held ones closed",
        Duration::from_secs(5),
        || {
            let out = fleet.try_scrape(0);
            let ok = out.starts_with("HTTP/1.1 200");
            if ok {
                m = Some(Metrics(out));
            }
            ok
        },
    );
    let refused = m
        .unwrap()
        .get("border_gw_metrics_connections_refused_total");
    assert!(refused >= 1.0, "{refused}");

    // Redis gone: gw2's lookup fails (a registry_error call), gw1's
    // publishes fail; both counted, and the registry reads down.
    fleet.redis.take().unwrap().kill9();
    rt.block_on(async {
        let mut c = fleet.client(1, "ams-1").await;
        let st = c
            .get_status(mgmt::pb::GetStatusRequest::default())
            .await
            .unwrap_err();
        assert_eq!(st.code(), tonic::Code::Unavailable, "{st:?}");
    });
    let m2 = fleet.scrape(1);
    assert_eq!(m2.calls("registry_error"), 1.0);
    assert!(m2.get("border_gw_registry_errors_total{op=\"lookup\"}") >= 1.0);
    assert_eq!(m2.get("border_gw_registry_up"), 0.0);
    wait_for("gw1's publish errors", Duration::from_secs(5), || {
        fleet
            .scrape(0)
            .get("border_gw_registry_errors_total{op=\"publish\"}")
            >= 1.0
    });
    assert_eq!(fleet.scrape(0).get("border_gw_registry_up"), 0.0);
    assert!(!ams.log_text().contains("panicked"));
}

/// A client pinned as a reader at the gateway reads an appliance through
/// it, and every call that would change something is refused at the
/// gateway (the appliance sees each gateway as an operator).
#[test]
fn a_reader_reads_through_the_gateway_and_changes_nothing() {
    let fleet = Fleet::new("fl-rd");
    let _ams = fleet.appliance("fl-rd-ams1", "ams-1", "ams1");
    let port = fleet.redis_port;
    wait_for("tunnels of ams-1 on gw1", Duration::from_secs(10), || {
        registry_count(port, "gw1", "ams-1") >= 2
    });
    // What the operator gets (status exits 1 here: no border-dp runs).
    let (op_code, op_out, _) = fleet.ctl(0, "ams-1", &["--json", "status"]);
    let (code, out, err) = fleet.ctl_as("reader", 0, "ams-1", &["--json", "status"]);
    assert_eq!(code, op_code, "{err}");
    assert!(err.is_empty(), "{err}");
    assert_eq!(vips_of(&out), vips_of(&op_out));
    assert_eq!(vips_of(&out), ["web"]);
    // Through gw2 too: the role is checked where the call enters.
    let (op_code, op_out, _) = fleet.ctl(1, "ams-1", &["--json", "stats"]);
    let (code, out, err) = fleet.ctl_as("reader", 1, "ams-1", &["--json", "stats"]);
    assert_eq!(
        (code, out.is_empty()),
        (op_code, op_out.is_empty()),
        "{err}"
    );
    assert!(!err.contains("not open to a reader"), "{err}");
    let (code, _, err) = fleet.ctl_as("reader", 1, "ams-1", &["drain", "web", "10.97.0.11:8080"]);
    assert_ne!(code, 0);
    assert!(err.contains("is not open to a reader"), "{err}");
    let (code, _, err) = fleet.ctl_as(
        "reader",
        0,
        "ams-1",
        &["weight", "web", "10.97.0.11:8080", "3"],
    );
    assert_ne!(code, 0);
    assert!(err.contains("is not open to a reader"), "{err}");
    // Nothing changed on the appliance; the operator still may.
    let (_, out, _) = fleet.ctl(0, "ams-1", &["--json", "status"]);
    let flat = out.replace([' ', '\n'], "");
    assert!(flat.contains("\"drained\":false"), "{out}");
    assert!(!flat.contains("\"weight\":3"), "{out}");
    let (code, _, err) = fleet.ctl(1, "ams-1", &["drain", "web", "10.97.0.11:8080"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(fleet.scrape(0).calls("denied"), 1.0);
    assert_eq!(fleet.scrape(1).calls("denied"), 1.0);
}

// Trust between fleet members: peers, agent pins, backoff, audit.

/// A host that is not a gateway, holding a CA-valid certificate `stem`
/// (an appliance's: IP SAN 127.0.0.1), listening on 127.0.0.1:`port` with
/// ALPN `alpn`. It counts TLS handshakes and the application bytes it is
/// sent; with `answer_tunnels` it reads a tunnel preface, answers OK and
/// drops the tunnel at once.
struct Impostor {
    port: u16,
    handshakes: std::sync::Arc<std::sync::atomic::AtomicU64>,
    bytes: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Impostor {
    fn start(
        rt: &tokio::runtime::Runtime,
        dir: &Path,
        stem: &str,
        port: u16,
        alpn: &[u8],
        answer_tunnels: bool,
    ) -> Impostor {
        use std::sync::atomic::{AtomicU64, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let certs = mgmt::tls::load_certs(&dir.join(format!("{stem}.pem"))).unwrap();
        let key = mgmt::tls::load_key(&dir.join(format!("{stem}.key"))).unwrap();
        let mut sc = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
        sc.alpn_protocols = vec![alpn.to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(sc));
        let listener = rt
            .block_on(tokio::net::TcpListener::bind(("127.0.0.1", port)))
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let handshakes = std::sync::Arc::new(AtomicU64::new(0));
        let bytes = std::sync::Arc::new(AtomicU64::new(0));
        let (h, b) = (handshakes.clone(), bytes.clone());
        rt.spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, h, b) = (acceptor.clone(), h.clone(), b.clone());
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    h.fetch_add(1, Ordering::SeqCst);
                    let mut buf = vec![0u8; 64 << 10];
                    if answer_tunnels {
                        let mut head = [0u8; 20];
                        if tls.read_exact(&mut head).await.is_err() {
                            return;
                        }
                        b.fetch_add(head.len() as u64, Ordering::SeqCst);
                        let n =
                            u32::from_be_bytes([head[16], head[17], head[18], head[19]]) as usize;
                        if n > buf.len() || tls.read_exact(&mut buf[..n]).await.is_err() {
                            return;
                        }
                        b.fetch_add(n as u64, Ordering::SeqCst);
                        let _ = tls.write_all(b"BORDER-TUNNEL/1 OK\n").await;
                        let _ = tls.shutdown().await;
                        return;
                    }
                    while let Ok(n) = tls.read(&mut buf).await {
                        if n == 0 {
                            return;
                        }
                        b.fetch_add(n as u64, Ordering::SeqCst);
                    }
                });
            }
        });
        Impostor {
            port,
            handshakes,
            bytes,
        }
    }

    fn handshakes(&self) -> u64 {
        self.handshakes.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn bytes(&self) -> u64 {
        self.bytes.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// `gateway` (an api address) named in the registry as holding tunnels of
/// `appliance` for the next minute.
fn plant_registry_entry(redis: u16, appliance: &str, gateway: &str) {
    let expiry = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 60_000;
    let key = format!("border:fleet:appliance:{appliance}");
    assert_eq!(
        redis_cli(redis, &["ZADD", &key, &expiry.to_string(), gateway]),
        "1"
    );
}

#[test]
fn a_forged_peer_listed_in_redis_receives_no_call() {
    // Before the fix, a host with any certificate from the fleet CA,
    // named in Redis, received HasTunnel probes and then the operators'
    // calls (ApplyConfig with the flow hash key), and could answer them.
    let mut fleet = Fleet::new("fl-forge");
    let port = fleet.redis_port;
    let rt = runtime();
    let forged = Impostor::start(&rt, &fleet.dir.0, "rogue", 0, b"h2", false);
    plant_registry_entry(port, "ams-2", &format!("127.0.0.1:{}", forged.port));
    let (code, _, err) = fleet.ctl(0, "ams-2", &["status"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("ams-2"), "{err}");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        (forged.handshakes(), forged.bytes()),
        (0, 0),
        "the forged gateway was contacted"
    );
    let log = fleet.gw_log(0);
    assert!(
        log.contains("not a configured [[peer]]") && log.contains(&forged.port.to_string()),
        "{log}"
    );
    assert!(
        fleet
            .scrape(0)
            .get("border_gw_registry_unknown_peers_total")
            >= 1.0
    );

    // The impostor at a configured peer's address (gw2 is down): the TLS
    // handshake happens, but its certificate is not gw2's: no request.
    fleet.gws[1].proc.take().unwrap().term();
    let gw2_api = fleet.gws[1].api;
    let at_peer = Impostor::start(&rt, &fleet.dir.0, "rogue", gw2_api, b"h2", false);
    plant_registry_entry(port, "ams-2", &format!("127.0.0.1:{gw2_api}"));
    let (code, _, err) = fleet.ctl(0, "ams-2", &["status"]);
    assert_eq!(code, 3, "{err}");
    std::thread::sleep(Duration::from_millis(300));
    assert!(at_peer.handshakes() >= 1, "gw1 never tried gw2's address");
    assert_eq!(at_peer.bytes(), 0, "a request reached the impostor");
    let log = fleet.gw_log(0);
    assert!(
        log.contains(&format!(
            "certificate {} is not pinned for peer 127.0.0.1:{gw2_api}",
            fleet.pins.rogue
        )),
        "{log}"
    );
}

#[test]
fn an_agent_says_nothing_to_a_gateway_it_has_not_pinned() {
    // Before the fix, the agent sent its preface to, and served the
    // operator role over a tunnel to, any gateway with a CA-valid
    // certificate (an appliance's, here).
    let fleet = Fleet::new("fl-agpin");
    let rt = runtime();
    let rogue = Impostor::start(&rt, &fleet.dir.0, "rogue", 0, mgmt::agent::ALPN, true);
    let pins = [fleet.pins.gws[0].as_str()];
    let ams = fleet.appliance_to("fl-agpin", "ams-1", "ams1", &[rogue.port], &pins);
    let mut ams = ams;
    ams.wait_log("is not pinned in mgmt.agent.gateway_fingerprints");
    std::thread::sleep(Duration::from_millis(500));
    assert!(rogue.handshakes() >= 1);
    assert_eq!(rogue.bytes(), 0, "the preface reached an unpinned gateway");
    let log = ams.log_text();
    assert!(log.contains(&fleet.pins.rogue), "{log}");
}

#[test]
fn a_gateway_that_drops_every_tunnel_is_redialled_at_backoff_speed() {
    // Before the fix, the failure count went back to 0 at every
    // successful dial, so a gateway that accepts tunnels and drops them at
    // once got redials as fast as the pool grows (backoff_min_ms), forever.
    let fleet = Fleet::new("fl-drop");
    let rt = runtime();
    let dropper = Impostor::start(&rt, &fleet.dir.0, "gw1", 0, mgmt::agent::ALPN, true);
    let pins = [fleet.pins.gws[0].as_str()];
    let _ams = fleet.appliance_to("fl-drop", "ams-1", "ams1", &[dropper.port], &pins);
    // backoff 200 ms .. 1 s; the pool dials 10 at a time.
    std::thread::sleep(Duration::from_secs(2));
    let settled = dropper.handshakes();
    std::thread::sleep(Duration::from_secs(3));
    let later = dropper.handshakes() - settled;
    eprintln!("tunnels to a dropping gateway: {settled} in the first 2 s, {later} in the next 3 s");
    assert!(settled >= 1, "never dialled");
    // Failing, the pool dials one at a time at the backoff's 1 s ceiling:
    // about 2 a second. Before, every dial reset the count, so the pool
    // redialled by tens at the 200 ms first step (~57 a second measured).
    assert!(later <= 25, "{later} redials in 3 s");
}

#[test]
fn each_call_is_audited_with_its_original_caller() {
    // Before the fix, the gateway logged no successful call, and the
    // appliance attributed every call to the gateway's certificate.
    let fleet = Fleet::new("fl-audit");
    let port = fleet.redis_port;
    let mut ams = fleet.appliance("fl-audit", "ams-1", "ams1");
    wait_for("tunnels of ams-1 on gw1", Duration::from_secs(10), || {
        registry_count(port, "gw1", "ams-1") >= 2
    });
    let (ctl, gw1, gw2) = (&fleet.pins.ctl, &fleet.pins.gws[0], &fleet.pins.gws[1]);
    // Through gw2, which forwards to gw1, which holds the tunnels.
    let (code, _, err) = fleet.ctl(1, "ams-1", &["drain", "web", "10.97.0.11:8080"]);
    assert_eq!(code, 0, "{err}");
    let method = "method=/border.v1.Border/SetBackend";
    let line_of = |log: &str| -> String {
        log.lines()
            .rfind(|l| l.contains(method) && l.contains(" call "))
            .unwrap_or_else(|| panic!("no audit line in\n{log}"))
            .to_string()
    };
    wait_for("the audit line at gw2", Duration::from_secs(5), || {
        fleet.gw_log(1).contains(method)
    });
    let at_gw2 = line_of(&fleet.gw_log(1));
    assert!(
        at_gw2.contains(&format!("caller={ctl}"))
            && at_gw2.contains("via=-")
            && at_gw2.contains("appliance=ams-1")
            && at_gw2.contains("status=Ok"),
        "{at_gw2}"
    );
    wait_for("the audit line at gw1", Duration::from_secs(5), || {
        fleet.gw_log(0).contains(method)
    });
    let at_gw1 = line_of(&fleet.gw_log(0));
    assert!(
        at_gw1.contains(&format!("caller={ctl}")) && at_gw1.contains(&format!("via={gw2}")),
        "{at_gw1}"
    );
    ams.wait_log("api: call");
    let log = ams.log_text();
    let line = log
        .lines()
        .find(|l| l.contains("api: call") && l.contains("SetBackend"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(line.contains(&format!("{ctl} via gateway {gw1}")), "{line}");

    // A client naming someone else as the caller: replaced by the gateway.
    let fake = format!("sha256:{}", "ee".repeat(32));
    let rt = runtime();
    rt.block_on(async {
        let mut c = fleet.client(0, "ams-1").await;
        let mut req = tonic::Request::new(mgmt::pb::SetBackendRequest {
            vip: "web".into(),
            backend: "10.97.0.11:8080".into(),
            action: Some(mgmt::pb::set_backend_request::Action::Undrain(
                mgmt::pb::Undrain {},
            )),
            note: String::new(),
        });
        req.metadata_mut()
            .insert("border-caller", fake.parse().unwrap());
        c.set_backend(req).await.unwrap();
    });
    // The line is written when the answer's body ends, maybe just after
    // the client has it.
    let lines = |log: &str| {
        log.lines()
            .filter(|l| l.contains(method) && l.contains(" call "))
            .count()
    };
    wait_for(
        "the second audit line at gw1",
        Duration::from_secs(5),
        || lines(&fleet.gw_log(0)) >= 2,
    );
    let at_gw1 = line_of(&fleet.gw_log(0));
    assert!(
        at_gw1.contains(&format!("caller={ctl}")) && at_gw1.contains("via=-"),
        "{at_gw1}"
    );
    std::thread::sleep(Duration::from_millis(300));
    let log = ams.log_text();
    assert!(
        !log.contains(&fake),
        "the appliance believed a client's caller:\n{log}"
    );
    assert!(!fleet.gw_log(0).contains(&fake));

    // On the appliance's own socket the header is ignored.
    rt.block_on(async {
        let mut c = mgmt::client::connect_unix(fleet.dir.path("fl-audit.sock"))
            .await
            .unwrap();
        let mut req = tonic::Request::new(mgmt::pb::SetBackendRequest {
            vip: "web".into(),
            backend: "10.97.0.11:8080".into(),
            action: Some(mgmt::pb::set_backend_request::Action::Drain(
                mgmt::pb::Drain {},
            )),
            note: String::new(),
        });
        req.metadata_mut()
            .insert("border-caller", fake.parse().unwrap());
        c.set_backend(req).await.unwrap();
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(!ams.log_text().contains(&fake), "{}", ams.log_text());
}

// The registry over TLS with an ACL user.

/// Runs `openssl args` in `dir`.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A test CA made with openssl (`rca.pem`) and Redis's certificate for
/// 127.0.0.1 from it (`redis.pem`, `redis.key`).
fn redis_tls_material(dir: &Path) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec![
        "req",
        "-x509",
        "-days",
        "2",
        "-subj",
        "/CN=redis test CA",
        "-keyout",
        "rca.key",
        "-out",
        "rca.pem",
    ];
    ca.extend_from_slice(&ec);
    openssl(dir, &ca);
    let mut csr = vec![
        "req",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "redis.key",
        "-out",
        "redis.csr",
    ];
    csr.extend_from_slice(&ec);
    openssl(dir, &csr);
    std::fs::write(dir.join("redis.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-days",
            "2",
            "-in",
            "redis.csr",
            "-CA",
            "rca.pem",
            "-CAkey",
            "rca.key",
            "-CAcreateserial",
            "-extfile",
            "redis.ext",
            "-out",
            "redis.pem",
        ],
    );
}

/// redis-server with TLS only on `port` (mutual: clients' certificates
/// chain to the fleet CA), the default user off and one ACL user
/// `border-gw` with `password`, allowed the registry's keys only.
fn start_redis_tls(dir: &Path, port: u16, password: &str) -> Proc {
    let d = |f: &str| dir.join(f).display().to_string();
    let r = Proc::spawn(
        "redis-server (TLS)",
        Command::new("redis-server").args([
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--tls-cert-file",
            &d("redis.pem"),
            "--tls-key-file",
            &d("redis.key"),
            "--tls-ca-cert-file",
            &d("ca.pem"),
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
            // One word an argument: redis-server joins them into the line.
            "--user",
            "default",
            "off",
            "--user",
            "border-gw",
            "on",
            &format!(">{password}"),
            "~border:fleet:*",
            "+@all",
        ]),
        dir.join(format!("redis-{port}.log")),
    );
    let start = Instant::now();
    while redis_tls_cli(dir, port, password, &["PING"]) != "PONG" {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "redis-server (TLS) did not start:\n{}",
            r.text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    r
}

/// redis-cli over TLS as `border-gw` (gw1's certificate as the client's).
fn redis_tls_cli(dir: &Path, port: u16, password: &str, args: &[&str]) -> String {
    let d = |f: &str| dir.join(f).display().to_string();
    let out = Command::new("redis-cli")
        .args([
            "--tls",
            "--cacert",
            &d("rca.pem"),
            "--cert",
            &d("gw1.pem"),
            "--key",
            &d("gw1.key"),
        ])
        .args([
            "-p",
            &port.to_string(),
            "--user",
            "border-gw",
            "--pass",
            password,
            "--no-auth-warning",
        ])
        .args(args)
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn the_registry_works_over_tls_with_an_acl_user_and_the_password_is_never_shown() {
    let dir = TempDir::new("fl-rtls");
    let ca = Ca::new(&dir.0);
    let ctl = ca.issue(&dir.0, "ctl");
    let gw1 = ca.issue(&dir.0, "gw1");
    let ams1 = ca.issue(&dir.0, "ams1");
    redis_tls_material(&dir.0);
    let password = "s3cret-Redis-pw";
    let redis_port = free_port();
    let _redis = start_redis_tls(&dir.0, redis_port, password);
    let (agent, api, metrics) = (free_port(), free_port(), free_port());
    let config = |pw: &str| {
        gw_config(
            &dir.0,
            "gw1",
            agent,
            api,
            metrics,
            redis_port,
            &[&ctl],
            &format!("sha256:{}", "ab".repeat(32)),
            &ams1,
            (free_port(), &ctl),
        )
        .replace(
            &format!("redis = \"redis://127.0.0.1:{redis_port}/0\""),
            &format!(
                "redis = \"rediss://border-gw:{pw}@127.0.0.1:{redis_port}/0\"\nredis_ca = \"{}\"",
                dir.path("rca.pem").display()
            ),
        )
    };
    let good = dir.path("gw1.toml");
    std::fs::write(&good, config(password)).unwrap();
    let check = |path: &Path| {
        let out = Command::new(env!("CARGO_BIN_EXE_border-gw"))
            .arg("--config")
            .arg(path)
            .arg("--check")
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    };
    // Before the fix, `--check` refused rediss:// and its error
    // printed the password.
    let (ok, text) = check(&good);
    assert!(ok, "{text}");
    assert_eq!(text.trim(), "OK");
    let no_ca = dir.path("no-ca.toml");
    std::fs::write(&no_ca, config(password).replace("redis_ca", "# redis_ca")).unwrap();
    let (ok, text) = check(&no_ca);
    assert!(
        !ok && text.contains("redis_ca: missing") && text.contains("border-gw:***@"),
        "{text}"
    );
    assert!(!text.contains(password), "{text}");
    let bad_port = dir.path("bad-port.toml");
    std::fs::write(
        &bad_port,
        config(password).replace(&format!(":{redis_port}/0"), ":99999/0"),
    )
    .unwrap();
    let (ok, text) = check(&bad_port);
    assert!(!ok && text.contains("redis: "), "{text}");
    assert!(!text.contains(password), "{text}");

    // Running: the tunnels are published through TLS as the ACL user.
    let gw = Proc::spawn(
        "gw1",
        Command::new(env!("CARGO_BIN_EXE_border-gw"))
            .arg("--config")
            .arg(&good),
        dir.path("gw1.log"),
    );
    gw.wait_log("border-gw running");
    let fleet_dir = &dir.0;
    common::clean_instance("fl-rtls");
    let cfg = dir.path("fl-rtls.toml");
    std::fs::write(
        &cfg,
        appliance_config(
            fleet_dir,
            "fl-rtls",
            "ams-1",
            "ams1",
            &ctl,
            &[agent],
            &[&gw1],
        ),
    )
    .unwrap();
    let _ams = BorderMgmt::start(&cfg, dir.path("fl-rtls.log"));
    wait_for(
        "ams-1's tunnels in the TLS registry",
        Duration::from_secs(10),
        || {
            redis_tls_cli(
                &dir.0,
                redis_port,
                password,
                &["HGET", "border:fleet:gateway:gw1", "ams-1"],
            )
            .parse::<u64>()
            .is_ok_and(|n| n >= 2)
        },
    );
    assert!(
        gw.text().contains("redis=rediss://border-gw:***@127.0.0.1"),
        "{}",
        gw.text()
    );
    assert!(!gw.text().contains(password), "{}", gw.text());
    drop(gw);

    // A wrong password: Redis refuses, the gateway says so, never with it.
    let wrong_pw = "wrong-Redis-pw";
    let wrong = dir.path("gw1-wrong.toml");
    std::fs::write(&wrong, config(wrong_pw)).unwrap();
    let gw = Proc::spawn(
        "gw1 (wrong password)",
        Command::new(env!("CARGO_BIN_EXE_border-gw"))
            .arg("--config")
            .arg(&wrong),
        dir.path("gw1-wrong.log"),
    );
    gw.wait_log("cannot publish the tunnels to Redis");
    let log = gw.text();
    assert!(log.contains("authentication failed"), "{log}");
    assert!(log.contains("border-gw:***@"), "{log}");
    assert!(!log.contains(wrong_pw), "{log}");
}
