//! border-mgmt and border-dp together (docs/design.md §3, §6), with real kernels
//! on both sides of the appliance: border-mgmt publishes the tables,
//! border-dp (not standalone) follows them, the operator drives it with
//! borderctl.
//!
//! * drain over borderctl: no new connection to the backend, an open one
//!   keeps working byte for byte until it closes; undrain brings it back;
//! * tables republished every 10 ms for 10 s under load: no drop, no
//!   reset, no retransmission, every byte echoed exactly;
//! * independence: kill -9 of border-mgmt while traffic flows, restart
//!   (re-attaches, same generation, no flow disturbed); kill -9 of border-dp,
//!   restart (forwards with the current tables);
//! * bad input: forged and corrupt generations in the tables region are
//!   refused, counted and logged while forwarding goes on; an unknown key,
//!   a huge message, a malformed request over the API are refused with one
//!   clear line and the running config stays;
//! * borderctl over TCP with mutual TLS;
//! * durable intent: an applied config and a drain survive kill -9 of
//!   border-mgmt and a reboot (tmpfs forgotten), --from-config-file runs
//!   the file; a change that cannot be saved (full or read-only state
//!   directory) fails and changes nothing.
//!
//! Tags `md1`..`md7`, subnets 10.101-112.x, instances `e2emdN`.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::metrics::free_port;
use common::small_fs::SmallFs;
use common::*;
use conf::counters::Counter;
use mgmt::pb;
use serde_json::Value;

#[derive(Clone, Copy)]
struct Plan {
    tag: &'static str,
    /// Client side 10.n.0.0/24, backend side 10.(n+1).0.0/24.
    n: u8,
    backends: u8,
}

impl Plan {
    fn instance(&self) -> String {
        format!("e2e{}", self.tag)
    }
    fn ext(&self, host: u8) -> String {
        format!("10.{}.0.{host}", self.n)
    }
    fn int(&self, host: u8) -> String {
        format!("10.{}.0.{host}", self.n + 1)
    }
    fn vip(&self) -> SocketAddr {
        SocketAddr::new(self.ext(100).parse().unwrap(), 80)
    }
    fn backend(&self, i: u8) -> SocketAddr {
        SocketAddr::new(self.int(11 + i).parse().unwrap(), 8080)
    }
    fn servers(&self) -> Vec<(String, SocketAddr)> {
        (0..self.backends)
            .map(|i| (format!("b{i}"), self.backend(i)))
            .collect()
    }

    /// Real TCP servers on every backend address, in the topology's backend
    /// namespace.
    fn serve(&self, t: &Topo) -> TcpBackends {
        let servers = self.servers();
        let refs: Vec<(&str, SocketAddr)> = servers.iter().map(|(n, a)| (n.as_str(), *a)).collect();
        TcpBackends::start(&t.bk.name, &refs)
    }

    /// The config both processes read. `weights` (if given) per backend.
    fn config(&self, socket: &Path, weights: &[u32]) -> String {
        let mut c = two_port_config(
            &self.instance(),
            self.tag,
            &format!("{}/24", self.ext(1)),
            &format!("{}/24", self.int(1)),
            &format!("unix://{}", socket.display()),
        );
        c += &format!(
            r#"
[[vip]]
name = "v"
address = "{vip}"
port = 80
protocol = "tcp"
mode = "fullnat"
maglev_table_size = 1021
"#,
            vip = self.ext(100),
        );
        for i in 0..self.backends {
            c += &format!(
                "\n[[vip.backend]]\naddress = \"{}\"\nport = 8080\nweight = {}\n",
                self.backend(i).ip(),
                weights.get(i as usize).copied().unwrap_or(1)
            );
        }
        c
    }

    /// border-mgmt first (it creates and publishes the tables), then
    /// border-dp following them; data ports moved into the client and
    /// backend namespaces.
    fn start(&self) -> Topo {
        self.start_with(&[])
    }

    /// [`Plan::start`] with more arguments to border-mgmt.
    fn start_with(&self, mgmt_args: &[&str]) -> Topo {
        let t = self.tag;
        clean_instance(&self.instance());
        let lb = Netns::new(&format!("{t}-lb"));
        let cli = Netns::new(&format!("{t}-cli"));
        let bk = Netns::new(&format!("{t}-bk"));
        let dir = TempDir::new(t);
        let socket = dir.path("api.sock");
        let config = self.config(&socket, &[]);
        let cfg = dir.path("border.toml");
        std::fs::write(&cfg, &config).unwrap();
        let mgmt = BorderMgmt::start_with(None, &cfg, dir.path("mgmt.log"), mgmt_args);
        let dp = BorderDp::start_following(&lb, &dir, &self.instance(), &config);
        let topo = Topo {
            plan: *self,
            dp,
            mgmt,
            cli,
            bk,
            lb,
            cfg,
            socket,
            config,
            dir,
        };
        topo.wire();
        topo.dp.wait_applied(1);
        topo
    }
}

struct Topo {
    plan: Plan,
    dp: BorderDp,
    mgmt: BorderMgmt,
    cli: Netns,
    bk: Netns,
    lb: Netns,
    cfg: PathBuf,
    socket: PathBuf,
    config: String,
    dir: TempDir,
}

impl Topo {
    /// Moves the TAP ports border-dp created into the client and backend
    /// namespaces, with addresses and routes (again after a restart of
    /// border-dp: its TAP interfaces die with it).
    fn wire(&self) {
        let (p, t) = (&self.plan, self.plan.tag);
        wait_iface(&self.lb, &format!("{t}-ext"));
        wait_iface(&self.lb, &format!("{t}-int"));
        self.cli.adopt(
            &self.lb,
            &format!("{t}-ext"),
            &[&format!("{}/24", p.ext(2))],
        );
        let bk_addrs: Vec<String> = (0..p.backends)
            .map(|i| format!("{}/24", p.backend(i).ip()))
            .collect();
        let refs: Vec<&str> = bk_addrs.iter().map(String::as_str).collect();
        self.bk.adopt(&self.lb, &format!("{t}-int"), &refs);
        self.cli
            .run(&["ip", "route", "add", "default", "via", &p.ext(1)]);
    }

    fn cfg(&self) -> &str {
        self.cfg.to_str().unwrap()
    }

    /// borderctl `args` --config <this topology's config>.
    fn ctl(&self, args: &[&str]) -> (i32, String, String) {
        let mut a = args.to_vec();
        a.extend(["--config", self.cfg()]);
        borderctl(&a)
    }

    fn ctl_ok(&self, args: &[&str]) -> String {
        let mut a = args.to_vec();
        a.extend(["--config", self.cfg()]);
        borderctl_ok(&a)
    }

    fn ctl_err(&self, args: &[&str]) -> String {
        let mut a = args.to_vec();
        a.extend(["--config", self.cfg()]);
        borderctl_err(&a)
    }

    fn ctl_json(&self, args: &[&str]) -> Value {
        let mut a = args.to_vec();
        a.push("--json");
        let out = self.ctl(&a).1;
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{a:?}: {e}: {out}"))
    }

    fn published(&self) -> u64 {
        self.ctl_json(&["status"])["publisher"]["published_generation"]
            .as_u64()
            .unwrap()
    }

    fn logs(&self) -> String {
        format!(
            "--- border-mgmt:\n{}\n--- border-dp:\n{}",
            self.mgmt.log_text(),
            self.dp.log_text()
        )
    }
}

impl Drop for Topo {
    fn drop(&mut self) {
        // The processes (dropped after this) keep their mappings.
        clean_instance(&self.plan.instance());
    }
}

fn names_of(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
        .collect()
}

fn zeros(n: usize) -> Vec<u64> {
    vec![0; n]
}

/// A connection held open to the backend called `want`: new connections
/// until one lands there.
fn connection_to(ns: &str, vip: SocketAddr, want: &str) -> std::net::TcpStream {
    let want = want.to_string();
    in_netns(ns, move || {
        for _ in 0..200 {
            let mut s = connect_retry(vip, Duration::from_secs(10)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let g = read_greeting(&mut s).unwrap();
            if g.split_whitespace().next() == Some(want.as_str()) {
                return s;
            }
        }
        panic!("no connection landed on {want} in 200 tries");
    })
    .join()
    .unwrap()
}

/// Closes a stream cleanly: FIN, then the echo server's FIN, nothing else.
fn close_clean(mut s: std::net::TcpStream) {
    use std::io::Read;
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    assert_eq!(s.read_to_end(&mut rest).unwrap(), 0, "bytes after close");
}

fn check_streams(reports: &[StreamReport]) -> u64 {
    for r in reports {
        assert!(r.error.is_none(), "stream {} failed: {:?}", r.id, r.error);
        assert!(r.bytes > 0, "stream {} moved nothing", r.id);
    }
    reports.iter().map(|r| r.bytes).sum()
}

fn backend_stats<'a>(stats: &'a Value, addr: &str) -> &'a Value {
    stats["vips"][0]["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["address"] == addr)
        .unwrap_or_else(|| panic!("no backend {addr} in {stats}"))
}

#[test]
fn a_drained_backend_gets_no_new_connection_and_keeps_its_open_one() {
    let plan = Plan {
        tag: "md1",
        n: 101,
        backends: 3,
    };
    let t = plan.start();
    let _servers = plan.serve(&t);
    let b1 = plan.backend(1).to_string();
    let b0 = plan.backend(0).to_string();
    let vip = plan.vip();

    let first = names_of(&tcp_names(&t.cli.name, vip, 30));
    assert_eq!(tally(&first).len(), 3, "{first:?}");

    // status: three backends up, the worker on the published generation.
    let text = t.ctl_ok(&["status"]);
    assert!(text.contains("border-dp     pid "), "{text}");
    let up = text
        .lines()
        .filter(|l| l.split_whitespace().nth(2) == Some("UP"))
        .count();
    assert_eq!(up, 3, "{text}");
    let st = t.ctl_json(&["status"]);
    let g = st["publisher"]["published_generation"].as_u64().unwrap();
    assert_eq!(g, 1);
    assert_eq!(st["healthy"], true, "{st}");
    assert_eq!(st["dataplane"]["workers"][0]["applied_generation"], g);
    assert_eq!(st["dataplane"]["workers"][0]["alive"], true);

    // A connection to b1, held open across the drain.
    let mut held = connection_to(&t.cli.name, vip, "b1");
    echo_exact(&mut held, 7, 0, 64 << 10, 16 << 10).unwrap();

    let out = t.ctl_ok(&["drain", "v", &b1, "--note", "e2e drain"]);
    assert!(out.contains(&format!("{b1}: DRAINING")), "{out}");
    assert!(out.contains("drained: generation 2 published"), "{out}");
    t.dp.wait_applied(2);

    let after = names_of(&tcp_names(&t.cli.name, vip, 60));
    let tl = tally(&after);
    assert!(
        !tl.contains_key("b1"),
        "a new connection went to the drained b1: {tl:?}"
    );
    assert!(tl.contains_key("b0") && tl.contains_key("b2"), "{tl:?}");

    // The open connection to b1 keeps working, byte for byte.
    echo_exact(&mut held, 7, 64 << 10, 1 << 20, 16 << 10).unwrap();
    let st = t.ctl_json(&["status"]);
    let be = &st["vips"][0]["backends"][1];
    assert_eq!(be["address"], b1.as_str());
    assert_eq!(be["state"], "DRAINING", "{st}");
    assert_eq!(be["ring_slots"], 0);
    assert!(
        be["reason"]
            .as_str()
            .unwrap()
            .contains("drained by the operator: e2e drain"),
        "{be}"
    );
    let stats = t.ctl_json(&["stats"]);
    assert!(
        backend_stats(&stats, &b1)["stats"]["active_connections"]
            .as_u64()
            .unwrap()
            >= 1,
        "the held connection is active: {stats}"
    );
    let text = t.ctl_ok(&["stats"]);
    assert!(text.contains("new_flows"), "{text}");
    assert!(
        text.lines().any(|l| l.starts_with("v ") && l.contains(&b1)),
        "{text}"
    );
    close_clean(held);

    // Draining again changes nothing.
    let out = t.ctl_ok(&["drain", "v", &b1, "--note", "e2e drain"]);
    assert!(
        out.contains("it already was; nothing published (generation 2)"),
        "{out}"
    );

    // Undrain: b1 takes new connections again.
    let out = t.ctl_ok(&["undrain", "v", &b1]);
    assert!(out.contains("generation 3 published"), "{out}");
    t.dp.wait_applied(3);
    let back = tally(&names_of(&tcp_names(&t.cli.name, vip, 60)));
    assert!(back.contains_key("b1"), "{back:?}");

    // weight 0 takes b0 out of the ring; reset brings it back.
    let v = t.ctl_json(&["weight", "v", &b0, "0"]);
    assert_eq!(v["generation"], 4);
    assert_eq!(v["backend"]["weight"], 0);
    assert_eq!(v["backend"]["weight_overridden"], true);
    assert_eq!(v["backend"]["ring_slots"], 0);
    t.dp.wait_applied(4);
    let w0 = tally(&names_of(&tcp_names(&t.cli.name, vip, 40)));
    assert!(!w0.contains_key("b0"), "{w0:?}");
    let out = t.ctl_ok(&["weight", "v", &b0, "reset"]);
    assert!(
        out.contains("weight reset: generation 5 published"),
        "{out}"
    );

    // One-line errors, non-zero exit, nothing published.
    let e = t.ctl_err(&["drain", "v", &plan.backend(9).to_string()]);
    assert_eq!(e, format!("VIP `v` has no backend {}", plan.backend(9)));
    let e = t.ctl_err(&["drain", "nope", &b1]);
    assert_eq!(e, "no VIP `nope` in the running config");
    let e = t.ctl_err(&["undrain", "v", "10.102.0.12"]);
    assert!(e.contains("expected addr:port"), "{e}");
    let (code, _, err) = t.ctl(&["weight", "v", &b1, "70000"]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(t.published(), 5, "{}", t.logs());
    let drops = t.dp.drops();
    assert_eq!(drops["drop_no_backend"], 0);
}

/// SetBackend every 10 ms for `run`, alternating `backend`'s weight 2/1.
/// Returns (calls, last generation, slowest call).
fn churn(socket: &Path, backend: &str, run: Duration) -> (u64, u64, Duration) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut c = mgmt::client::connect_unix(socket.to_owned()).await.unwrap();
        let start = tokio::time::Instant::now();
        let (mut calls, mut last, mut slowest) = (0u64, 0u64, Duration::ZERO);
        let mut next = start;
        while start.elapsed() < run {
            calls += 1;
            let t0 = Instant::now();
            let r = c
                .set_backend(pb::SetBackendRequest {
                    vip: "v".into(),
                    backend: backend.to_string(),
                    action: Some(pb::set_backend_request::Action::Weight(if calls % 2 == 1 {
                        2
                    } else {
                        1
                    })),
                    note: String::new(),
                })
                .await
                .unwrap()
                .into_inner();
            slowest = slowest.max(t0.elapsed());
            assert!(r.changed && r.pending.is_empty(), "{r:?}");
            assert!(r.generation > last, "{r:?}");
            last = r.generation;
            next += Duration::from_millis(10);
            tokio::time::sleep_until(next).await;
        }
        (calls, last, slowest)
    })
}

#[test]
fn tables_republished_every_10ms_under_load_lose_no_packet_and_reset_no_connection() {
    let plan = Plan {
        tag: "md2",
        n: 103,
        backends: 3,
    };
    let t = plan.start();
    let _servers = plan.serve(&t);
    let vip = plan.vip();
    // Neighbours resolved before anything is measured.
    tcp_names(&t.cli.name, vip, 6);

    let streams = EchoStreams::start(&t.cli.name, vip, 20, 8 << 10, Duration::from_millis(2), 1);
    let news = NewConnections::start(&t.cli.name, vip, 4096, 1);
    streams.wait_all_moving(&zeros(20));

    let taps = |t: &Topo| {
        let tag = t.plan.tag;
        [
            iface_drops(&t.cli, &format!("{tag}-ext")),
            iface_drops(&t.bk, &format!("{tag}-int")),
        ]
    };
    let totals = |t: &Topo| -> std::collections::BTreeMap<&'static str, u64> {
        t.dp.state()
            .totals()
            .into_iter()
            .map(|(c, v)| (c.name(), v))
            .collect()
    };
    let drops0 = t.dp.drops();
    let (c0, taps0) = (totals(&t), taps(&t));
    let adopted0 = t.dp.counter(Counter::TablesAdopted);
    let (cli0, bk0) = (tcp_mib(&t.cli), tcp_mib(&t.bk));
    let gen0 = t.dp.applied()[0];

    let (calls, last, slowest) = churn(
        &t.socket,
        &plan.backend(1).to_string(),
        Duration::from_secs(10),
    );
    t.dp.wait_applied(last);
    let mid = streams.progress();
    streams.wait_all_moving(&mid);

    let reports = streams.finish();
    let nc = news.finish();
    // Let the last FINs and ACKs pass before looking at the counters.
    std::thread::sleep(Duration::from_millis(300));
    let drops1 = t.dp.drops();
    let (c1, taps1) = (totals(&t), taps(&t));
    let d = |k: &str| c1[k] - c0[k];
    let adopted = t.dp.counter(Counter::TablesAdopted) - adopted0;
    let refused = t.dp.counter(Counter::TablesRefused);
    let (cli1, bk1) = (tcp_mib(&t.cli), tcp_mib(&t.bk));
    let delta =
        |a: &std::collections::BTreeMap<String, u64>,
         b: &std::collections::BTreeMap<String, u64>,
         k: &str| b.get(k).copied().unwrap_or(0) - a.get(k).copied().unwrap_or(0);

    let bytes = check_streams(&reports);
    let (rx, tx) = (d("rx_packets"), d("tx_packets"));
    let (up, down, asked) = (
        d("to_host_packets"),
        d("from_host_packets"),
        d("neighbour_requests"),
    );
    eprintln!(
        "swap under load: {calls} publishes (generation {gen0} -> {last}, slowest SetBackend {slowest:?}), \
         {adopted} adopted, {refused} refused; 20 streams echoed {bytes} bytes exactly; \
         {} new connections ({:?}); border-dp rx {rx} tx {tx} frames (host twin up {up}, down {down}, \
         neighbour requests {asked}); retransmitted segments client {} backend {} (tail-loss probes: {} {}; \
         reported as duplicates: {} {})",
        nc.ok,
        nc.backends,
        delta(&cli0, &cli1, "RetransSegs"),
        delta(&bk0, &bk1, "RetransSegs"),
        delta(&cli0, &cli1, "TCPLossProbes"),
        delta(&bk0, &bk1, "TCPLossProbes"),
        delta(&cli0, &cli1, "TCPDSACKRecvSegs"),
        delta(&bk0, &bk1, "TCPDSACKRecvSegs"),
    );
    assert!(
        nc.errors.is_empty(),
        "new connections failed: {:?}",
        nc.errors
    );
    assert!(nc.ok >= 20, "only {} new connections", nc.ok);
    assert_eq!(nc.backends.len(), 3, "{:?}", nc.backends);
    assert_eq!(last - gen0, calls, "one generation per call");
    // One every 10 ms is asked for; on two shared cores a debug build of
    // border-mgmt under this load answers 50-70 a second.
    assert!(calls >= 200, "only {calls} publishes in 10 s");
    assert!(
        adopted * 2 >= calls,
        "{adopted} of {calls} generations adopted"
    );
    assert_eq!(refused, 0, "{}", t.logs());
    assert_eq!(
        drops_rose(&drops0, &drops1),
        vec![],
        "drop counters rose during the swaps"
    );
    // Every frame border-dp received left it again: forwarded, or passed to
    // the kernel twin (and frames from the twin and neighbour requests are
    // the only others it sent).
    assert_eq!(tx + up, rx + down + asked, "frames in and out of border-dp");
    assert_eq!(taps0, taps1, "drops on the TAP interfaces");
    for (ns, a, b) in [("client", &cli0, &cli1), ("backend", &bk0, &bk1)] {
        // No reset, no refused or failed connection.
        for k in [
            "OutRsts",
            "EstabResets",
            "AttemptFails",
            "TCPAbortOnData",
            "TCPAbortOnClose",
        ] {
            assert_eq!(delta(a, b, k), 0, "{ns} namespace: Tcp {k} rose");
        }
        // Nothing lost. On two shared cores a busy moment can hold a segment
        // back long enough for the sender to retransmit it (a tail-loss probe
        // after 2 x SRTT, a few milliseconds here; a timeout after a long
        // stall). The receiver then reports the copy as a duplicate (D-SACK):
        // the original had arrived. A retransmission that filled a real hole
        // gets no D-SACK, a lost retransmission is counted, a lost SYN is
        // sent again: none of these may happen.
        let (retrans, dsack) = (
            delta(a, b, "RetransSegs"),
            delta(a, b, "TCPDSACKRecvSegs").max(delta(a, b, "TCPDSACKRecv")),
        );
        assert!(
            retrans <= dsack,
            "{ns}: {retrans} segments retransmitted, only {dsack} reported as duplicates \
             (tail-loss probes {}, timeouts {}, fast retransmits {})",
            delta(a, b, "TCPLossProbes"),
            delta(a, b, "TCPTimeouts"),
            delta(a, b, "TCPFastRetrans"),
        );
        for k in ["TCPLostRetransmit", "TCPSynRetrans"] {
            assert_eq!(delta(a, b, k), 0, "{ns} namespace: Tcp {k} rose");
        }
    }
    let st = t.ctl_json(&["status"]);
    assert_eq!(st["publisher"]["published_generation"], last);
    assert_eq!(st["dataplane"]["workers"][0]["applied_generation"], last);
}

#[test]
fn border_mgmt_and_border_dp_die_and_come_back_independently() {
    let plan = Plan {
        tag: "md3",
        n: 105,
        backends: 2,
    };
    let mut t = plan.start();
    let _servers = plan.serve(&t);
    let vip = plan.vip();
    tcp_names(&t.cli.name, vip, 6);
    let g = t.published();

    let streams = EchoStreams::start(&t.cli.name, vip, 10, 8 << 10, Duration::from_millis(1), 1);
    streams.wait_all_moving(&zeros(10));
    let drops0 = t.dp.drops();
    let adopted0 = t.dp.counter(Counter::TablesAdopted);

    // kill -9 border-mgmt: forwarding goes on with the last tables.
    t.mgmt.kill9();
    let p = streams.progress();
    streams.wait_all_moving(&p);
    let names = tally(&names_of(&tcp_names(&t.cli.name, vip, 20)));
    assert_eq!(names.len(), 2, "{names:?}");
    assert_eq!(t.dp.applied(), vec![g]);
    // borderctl: status falls back to the state region and says so;
    // a change cannot be made.
    let (code, out, err) = t.ctl(&["status"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        err.starts_with("borderctl: note: border-mgmt is not reachable: cannot connect to unix://"),
        "{err}"
    );
    assert!(
        out.contains(&format!("pid {} (alive), running", t.dp.pid())),
        "{out}"
    );
    let e = t.ctl_err(&["drain", "v", &plan.backend(0).to_string()]);
    assert!(
        e.starts_with("border-mgmt is not reachable: cannot connect to unix://"),
        "{e}"
    );

    // Restart: it re-attaches, publishes nothing, disturbs nothing.
    t.mgmt = BorderMgmt::start(&t.cfg, t.dir.path("mgmt-2.log"));
    let log = t.mgmt.log_text();
    assert!(
        log.contains("attached to the tables region (the published generation stays)"),
        "{log}"
    );
    assert!(log.contains("published_now=false"), "{log}");
    let st = t.ctl_json(&["status"]);
    assert_eq!(st["publisher"]["published_generation"], g, "{st}");
    assert_eq!(st["dataplane"]["workers"][0]["applied_generation"], g);
    let p = streams.progress();
    streams.wait_all_moving(&p);
    assert_eq!(t.dp.applied(), vec![g]);
    assert_eq!(
        t.dp.counter(Counter::TablesAdopted),
        adopted0,
        "border-dp adopted nothing new: the restart published nothing"
    );
    let bytes = check_streams(&streams.finish());
    assert_eq!(drops_rose(&drops0, &t.dp.drops()), vec![], "{}", t.logs());
    eprintln!("10 streams echoed {bytes} bytes exactly across kill -9 and restart of border-mgmt");

    // kill -9 border-dp; border-mgmt sees it go.
    let old_pid = t.dp.pid();
    t.dp.kill9();
    wait_until(
        "border-mgmt sees border-dp gone",
        Duration::from_secs(10),
        || t.ctl_json(&["status"])["dataplane"]["pid_alive"] == false,
    );
    let (code, _, _) = t.ctl(&["status"]);
    assert_eq!(code, 1, "no live dataplane: status fails");
    // The tables change while border-dp is away.
    let out = t.ctl_ok(&["drain", "v", &plan.backend(0).to_string()]);
    assert!(
        out.contains(&format!("generation {} published", g + 1)),
        "{out}"
    );

    // A new border-dp forwards with the current tables at once.
    std::fs::rename(&t.dp.log, t.dir.path("border-dp-1.log")).unwrap();
    t.dp = BorderDp::start_following(&t.lb, &t.dir, &plan.instance(), &t.config);
    assert_ne!(t.dp.pid(), old_pid);
    t.wire();
    t.dp.wait_applied(g + 1);
    let names = tally(&names_of(&tcp_names(&t.cli.name, vip, 20)));
    assert_eq!(
        names.keys().collect::<Vec<_>>(),
        ["b1"],
        "b0 is drained in the current tables: {names:?}"
    );
    let st = t.ctl_json(&["status"]);
    assert_eq!(st["healthy"], true, "{st}");
    assert_eq!(st["dataplane"]["pid"], t.dp.pid());
    assert_eq!(st["publisher"]["published_generation"], g + 1);
    assert_eq!(st["dataplane"]["workers"][0]["applied_generation"], g + 1);
    assert_eq!(t.dp.counter(Counter::TablesRefused), 0);
}

// ---- forging the tables region ---------------------------------------------

const H_REGION_LEN: u64 = 16;
const H_PUBLISHED: u64 = 32;
const H_HIGH_WATER: u64 = 40;

fn read_u64(f: &std::fs::File, at: u64) -> u64 {
    use std::os::unix::fs::FileExt;
    let mut b = [0u8; 8];
    f.read_exact_at(&mut b, at).unwrap();
    u64::from_le_bytes(b)
}

fn read_bytes(f: &std::fs::File, at: u64, len: u64) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let mut b = vec![0u8; len as usize];
    f.read_exact_at(&mut b, at).unwrap();
    b
}

fn write_bytes(f: &std::fs::File, at: u64, b: &[u8]) {
    use std::os::unix::fs::FileExt;
    f.write_all_at(b, at).unwrap();
}

fn pack(generation: u64, root: u64) -> u64 {
    (generation << conf::tables::ROOT_BITS) | (root / conf::tables::UNIT)
}

/// Publishes `word` in the region as border-mgmt would: one Release store
/// into the shared mapping.
fn forge_word(f: &std::fs::File, word: u64) {
    use std::os::fd::AsRawFd;
    use std::sync::atomic::{AtomicU64, Ordering};
    // SAFETY: maps the first page of a regular file we opened read-write;
    // checked for failure below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
    // SAFETY: offset 32 is 8-aligned inside the page mapped above; the word
    // is only ever accessed atomically (border-mgmt and border-dp do too).
    let w = unsafe { &*(p.cast::<u8>().add(H_PUBLISHED as usize).cast::<AtomicU64>()) };
    w.store(word, Ordering::Release);
    // SAFETY: unmaps exactly the mapping made above; `w` is not used again.
    unsafe { libc::munmap(p, 4096) };
}

/// border-dp's refusal count reaches `n`; it still forwards on generation
/// `g` (new connections and the stream keep working).
fn refused_and_still_forwarding(t: &Topo, streams: &EchoStreams, n: u64, g: u64, what: &str) {
    wait_until(
        &format!("border-dp refusing {what}"),
        Duration::from_secs(10),
        || t.dp.counter(Counter::TablesRefused) >= n,
    );
    assert_eq!(
        t.dp.counter(Counter::TablesRefused),
        n,
        "{what}: counted once"
    );
    assert_eq!(t.dp.applied(), vec![g], "{what}: the old tables stay");
    let names = names_of(&tcp_names(&t.cli.name, t.plan.vip(), 6));
    assert!(
        names.iter().all(|n| n == "b0" || n == "b1"),
        "{what}: {names:?}"
    );
    let p = streams.progress();
    streams.wait_all_moving(&p);
}

/// A raw HTTP/2 gRPC call of ApplyConfig whose protobuf is malformed (the
/// config string is not UTF-8). Returns the frame types the server sent on
/// stream 1 before ending it.
fn malformed_apply(socket: &Path) -> Vec<u8> {
    use std::io::{Read, Write};
    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        f.extend([kind, flags]);
        f.extend(stream.to_be_bytes());
        f.extend(payload);
        f
    }
    // HPACK: literal header field without indexing, new name, no Huffman.
    let mut headers = Vec::new();
    for (k, v) in [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/border.v1.Border/ApplyConfig"),
        (":authority", "border-mgmt"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ] {
        headers.push(0);
        headers.push(k.len() as u8);
        headers.extend(k.as_bytes());
        headers.push(v.len() as u8);
        headers.extend(v.as_bytes());
    }
    // Field 1 (config_toml, a string) holding invalid UTF-8.
    let proto = [0x0a, 0x03, 0xff, 0xfe, 0xfd];
    let mut msg = vec![0u8];
    msg.extend((proto.len() as u32).to_be_bytes());
    msg.extend(proto);
    let mut s = std::os::unix::net::UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(4, 0, 0, &[])); // SETTINGS
    out.extend(frame(1, 0x4, 1, &headers)); // HEADERS, END_HEADERS
    out.extend(frame(0, 0x1, 1, &msg)); // DATA, END_STREAM
    s.write_all(&out).unwrap();
    let mut seen = Vec::new();
    loop {
        let mut h = [0u8; 9];
        if s.read_exact(&mut h).is_err() {
            break;
        }
        let len = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
        let (kind, flags) = (h[3], h[4]);
        let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
        let mut payload = vec![0u8; len];
        s.read_exact(&mut payload).unwrap();
        if kind == 4 && flags & 1 == 0 {
            s.write_all(&frame(4, 1, 0, &[])).unwrap(); // SETTINGS ACK
        }
        if stream == 1 {
            seen.push(kind);
            // END_STREAM on HEADERS (trailers) or DATA, or RST_STREAM.
            if (kind == 1 && flags & 1 == 1) || kind == 3 {
                break;
            }
        }
        if kind == 7 {
            seen.push(kind); // GOAWAY
            break;
        }
    }
    seen
}

#[test]
fn forged_tables_and_bad_api_input_are_refused_and_the_running_config_stays() {
    let plan = Plan {
        tag: "md4",
        n: 107,
        backends: 2,
    };
    let t = plan.start();
    let _servers = plan.serve(&t);
    let vip = plan.vip();
    tcp_names(&t.cli.name, vip, 6);
    let g = t.published();
    assert_eq!(g, 1);

    // Follow the events with borderctl while all this happens.
    let mut events = std::process::Command::new(borderctl_bin())
        .args(["events", "--json", "--config", t.cfg()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Value>::new()));
    let reader = {
        let (lines, out) = (lines.clone(), events.stdout.take().unwrap());
        std::thread::spawn(move || {
            use std::io::BufRead;
            for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                lines
                    .lock()
                    .unwrap()
                    .push(serde_json::from_str(&l).unwrap());
            }
        })
    };
    let streams = EchoStreams::start(&t.cli.name, vip, 2, 8 << 10, Duration::from_millis(1), 1);
    streams.wait_all_moving(&zeros(2));
    let drops0 = t.dp.drops();

    let path = conf::tables::tables_path(&plan.instance());
    let f = std::fs::File::options()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let word = read_u64(&f, H_PUBLISHED);
    let (gen, root) = (
        word >> conf::tables::ROOT_BITS,
        (word & ((1 << conf::tables::ROOT_BITS) - 1)) * 64,
    );
    assert_eq!(gen, g);
    let region_len = read_u64(&f, H_REGION_LEN);
    let free = (read_u64(&f, H_HIGH_WATER) + (1 << 20)).next_multiple_of(4096);

    // 1. A root far outside the region.
    forge_word(&f, pack(g + 1, (1 << conf::tables::ROOT_BITS) * 64 - 64));
    refused_and_still_forwarding(&t, &streams, 1, g, "a root outside the region");
    // 2. The live root under the next generation's number.
    forge_word(&f, pack(g + 1, root));
    refused_and_still_forwarding(&t, &streams, 2, g, "a root of another generation");
    // 3. Garbage bytes as a root.
    let mut junk = vec![0u8; 4096];
    pattern(99, 0, &mut junk);
    write_bytes(&f, free, &junk);
    forge_word(&f, pack(g + 1, free));
    refused_and_still_forwarding(&t, &streams, 3, g, "garbage bytes");
    // 4. A well-formed root (right generation, valid checksum) listing a
    //    copy of the VIP block with one byte flipped.
    let root_len = read_u64(&f, root + 16);
    let mut root_copy = read_bytes(&f, root, root_len);
    let slot = &root_copy[64..96];
    let (vip_off, vip_len) = (
        u64::from_le_bytes(slot[0..8].try_into().unwrap()),
        u64::from_le_bytes(slot[8..16].try_into().unwrap()),
    );
    let mut vip_copy = read_bytes(&f, vip_off, vip_len);
    let last = vip_copy.len() - 1;
    vip_copy[last] ^= 0x5a;
    let (vip_at, root_at) = (free + 8192, (free + 8192 + vip_len).next_multiple_of(4096));
    assert!(root_at + root_len < region_len);
    root_copy[32..40].copy_from_slice(&(g + 1).to_le_bytes());
    root_copy[64..72].copy_from_slice(&vip_at.to_le_bytes());
    let sum = conf::tables::block_checksum(&root_copy);
    root_copy[0..8].copy_from_slice(&sum.to_le_bytes());
    write_bytes(&f, vip_at, &vip_copy);
    write_bytes(&f, root_at, &root_copy);
    forge_word(&f, pack(g + 1, root_at));
    refused_and_still_forwarding(&t, &streams, 4, g, "a corrupt VIP block");

    // border-dp's main loop logs refusals every 500 ms.
    wait_until(
        "border-dp logs the refusals",
        Duration::from_secs(5),
        || {
            t.dp.log_text()
                .contains("workers refused a published table generation (kept the previous one)")
        },
    );
    wait_until(
        "border-mgmt reports the refusals as events",
        Duration::from_secs(10),
        || {
            lines
                .lock()
                .unwrap()
                .iter()
                .any(|e| e["kind"] == "tables_refused" && e["refused_total"] == 4)
        },
    );
    let text = t.ctl_ok(&["stats"]);
    let row: Vec<&str> = text
        .lines()
        .find(|l| l.starts_with("tables_refused "))
        .unwrap_or_else(|| panic!("{text}"))
        .split_whitespace()
        .collect();
    assert_eq!(row, ["tables_refused", "4", "4"], "{text}");

    // border-mgmt's next publish replaces the forged word; border-dp adopts it.
    let out = t.ctl_ok(&["weight", "v", &plan.backend(0).to_string(), "2"]);
    assert!(
        out.contains(&format!("generation {} published", g + 1)),
        "{out}"
    );
    t.dp.wait_applied(g + 1);
    assert_eq!(t.dp.counter(Counter::TablesRefused), 4);
    let g = g + 1;

    // The API: an unknown key, a huge message, a config that needs a
    // restart, a malformed request. One clear line each; nothing changes.
    let bad = t.dir.path("bad.toml");
    let text = t.config.replacen("weight = 1", "weigth = 1", 1);
    std::fs::write(&bad, &text).unwrap();
    let line = text.lines().position(|l| l.starts_with("weigth")).unwrap() + 1;
    let e = t.ctl_err(&["apply", bad.to_str().unwrap()]);
    assert_eq!(
        e,
        format!(
            "{}:{line}:1: vip[0].backend[0].weigth: unknown key (expected one of `address`, `port`, `weight`, `zone`, `max_connections`)",
            bad.display()
        )
    );
    let huge = t.dir.path("huge.toml");
    std::fs::write(&huge, format!("{}\n# {}\n", t.config, "x".repeat(5 << 20))).unwrap();
    let e = t.ctl_err(&["apply", huge.to_str().unwrap()]);
    assert!(
        e.starts_with(&format!(
            "{}: border-mgmt refused the request: larger than the API's 4 MiB limit (OUT_OF_RANGE",
            huge.display()
        )),
        "{e}"
    );
    let restart = t.dir.path("restart.toml");
    std::fs::write(
        &restart,
        t.config.replace(
            "conntrack_per_worker = 16384",
            "conntrack_per_worker = 8192",
        ),
    )
    .unwrap();
    let e = t.ctl_err(&["apply", restart.to_str().unwrap()]);
    assert!(
        e.starts_with(&format!(
            "{}: [dataplane] differs from the running config",
            restart.display()
        )),
        "{e}"
    );
    let frames = malformed_apply(&t.socket);
    assert!(
        !frames.contains(&0),
        "no DATA: the call failed ({frames:?})"
    );
    assert!(frames.contains(&1), "the server answered ({frames:?})");
    {
        // Not even HTTP/2.
        use std::io::{Read, Write};
        let mut s = std::os::unix::net::UnixStream::connect(&t.socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut junk = vec![0u8; 64 << 10];
        pattern(5, 0, &mut junk);
        let _ = s.write_all(&junk);
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
    }
    let st = t.ctl_json(&["status"]);
    assert_eq!(st["publisher"]["published_generation"], g, "{st}");
    assert_eq!(
        st["publisher"]["config_origin"],
        t.cfg(),
        "the file's config still runs"
    );
    let got = borderctl_ok(&["apply", "--dry-run", t.cfg(), "--config", t.cfg()]);
    assert!(got.contains("valid; equals the running config"), "{got}");
    // ... and a good apply still works: a third backend address (no server).
    let more = t.dir.path("more.toml");
    std::fs::write(
        &more,
        format!(
            "{}\n[[vip.backend]]\naddress = \"{}\"\nport = 8080\nweight = 0\n",
            t.config,
            plan.backend(2).ip()
        ),
    )
    .unwrap();
    let out = t.ctl_ok(&["apply", more.to_str().unwrap()]);
    assert!(
        out.contains(&format!("applied: generation {} published", g + 1)),
        "{out}"
    );
    t.dp.wait_applied(g + 1);

    let bytes = check_streams(&streams.finish());
    assert_eq!(drops_rose(&drops0, &t.dp.drops()), vec![], "{}", t.logs());
    let _ = events.kill();
    let _ = events.wait();
    reader.join().unwrap();
    let ev = lines.lock().unwrap();
    let kinds: Vec<&str> = ev.iter().filter_map(|e| e["kind"].as_str()).collect();
    for k in [
        "tables_refused",
        "config_rejected",
        "backend_changed",
        "published",
        "config_applied",
    ] {
        assert!(kinds.contains(&k), "no {k} event in {kinds:?}");
    }
    assert!(!t.mgmt.log_text().contains("panicked"));
    assert!(!t.dp.log_text().contains("panicked"));
    eprintln!(
        "2 streams echoed {bytes} bytes exactly through 4 refused generations; events: {kinds:?}"
    );
}

// ---- mutual TLS ------------------------------------------------------------

fn openssl(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
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

/// A CA-signed certificate `name`.pem / `name`.key with `ext` extensions.
fn leaf(dir: &Path, ca: &str, name: &str, ext: &str) {
    std::fs::write(dir.join(format!("{name}.ext")), ext).unwrap();
    openssl(
        dir,
        &[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            &format!("/CN={name}"),
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.pem"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            &format!("{name}.pem"),
            "-extfile",
            &format!("{name}.ext"),
        ],
    );
}

fn ca(dir: &Path, name: &str) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.pem"),
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
}

fn fingerprint(dir: &Path, pem: &str) -> String {
    let out = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha256", "-in", pem])
        .current_dir(dir)
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    let hex = s
        .trim()
        .rsplit('=')
        .next()
        .unwrap()
        .replace(':', "")
        .to_lowercase();
    format!("sha256:{hex}")
}

#[test]
fn borderctl_talks_mutual_tls_to_a_tcp_server_and_refuses_without_it() {
    let instance = "e2emd5";
    clean_instance(instance);
    let dir = TempDir::new("md5");
    let d = &dir.0;
    ca(d, "ca");
    ca(d, "other-ca");
    let client_ext = "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n";
    leaf(
        d,
        "ca",
        "server",
        "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n",
    );
    leaf(d, "ca", "client", client_ext);
    leaf(d, "ca", "unpinned", client_ext);
    let server = format!("tcp://127.0.0.1:{}", free_port());
    let mut config = null_port_config(instance, "10.108.0.1", &server);
    config += &format!(
        r#"
[mgmt.tls]
cert = "server.pem"
key = "server.key"
client_ca = "ca.pem"
client_fingerprints = ["{fp}"]

[[vip]]
name = "v"
address = "10.108.0.100"
port = 80

[[vip.backend]]
address = "10.108.1.1"
port = 8080
"#,
        fp = fingerprint(d, "client.pem")
    );
    let cfg = dir.path("border.toml");
    std::fs::write(&cfg, config).unwrap();
    let cfg = cfg.to_str().unwrap();
    let mut m = BorderMgmt::start(Path::new(cfg), dir.path("mgmt.log"));
    let p = |n: &str| dir.path(n).display().to_string();
    let (cert, key, cacert) = (p("client.pem"), p("client.key"), p("ca.pem"));
    let tls = [
        "--cert",
        cert.as_str(),
        "--key",
        key.as_str(),
        "--ca",
        cacert.as_str(),
    ];

    // The server from --server, and from [mgmt].listen of --config.
    let mut a = vec!["drain", "v", "10.108.1.1:8080", "--server", server.as_str()];
    a.extend(tls);
    let out = borderctl_ok(&a);
    assert!(out.contains("drained: generation 2 published"), "{out}");
    let mut a = vec!["status", "--config", cfg];
    a.extend(tls);
    let (code, out, err) = borderctl(&a);
    assert_eq!(code, 1, "no dataplane: status fails\n{out}{err}");
    assert!(
        out.contains(&format!("border-mgmt   {server}: generation 2 published")),
        "{out}"
    );
    assert!(out.contains("border-dp     not running"), "{out}");

    // Without a certificate, with one not pinned, trusting another CA.
    let e = borderctl_err(&["stats", "--server", &server]);
    assert_eq!(
        e,
        format!("{server}: a tcp:// server needs mutual TLS (a CA for the server, a client certificate and key)")
    );
    let (ucert, ukey) = (p("unpinned.pem"), p("unpinned.key"));
    let e = borderctl_err(&[
        "stats", "--server", &server, "--cert", &ucert, "--key", &ukey, "--ca", &cacert,
    ]);
    assert!(e.contains("is its fingerprint pinned in [mgmt.tls]"), "{e}");
    let other = p("other-ca.pem");
    let e = borderctl_err(&[
        "stats", "--server", &server, "--cert", &cert, "--key", &key, "--ca", &other,
    ]);
    assert!(
        e.starts_with("TLS with border-mgmt failed: cannot connect to tcp://127.0.0.1:")
            && e.ends_with("invalid peer certificate: UnknownIssuer"),
        "{e}"
    );
    assert!(m.log_text().contains("not pinned"), "{}", m.log_text());
    // TLS options make no sense on a unix socket.
    let e = borderctl_err(&[
        "stats",
        "--server",
        "unix:///nonexistent/api.sock",
        "--cert",
        &cert,
        "--key",
        &key,
        "--ca",
        &cacert,
    ]);
    assert!(e.contains("a unix socket has no TLS"), "{e}");
    let e = borderctl_err(&["stats", "--server", "unix:///nonexistent/api.sock"]);
    assert_eq!(
        e,
        "border-mgmt is not reachable: cannot connect to unix:///nonexistent/api.sock: No such file or directory (os error 2)"
    );

    let st = m.stop();
    assert!(st.success(), "{}", m.log_text());
    clean_instance(instance);
}

// ---- durable intent ---------------------------------------------------------

/// Backend names new connections to the VIP reach (20 connections).
fn reached(t: &Topo) -> Vec<String> {
    let names = tally(&names_of(&tcp_names(&t.cli.name, t.plan.vip(), 20)));
    names.into_keys().collect()
}

/// Asserts that border-mgmt runs the config applied through the API (VIP
/// `v` with backends b0, b1) with b1 drained, restored from `intent`, and
/// that border-dp forwards with it: new connections reach b0 only.
fn assert_runs_the_applied_intent(t: &Topo, intent: &Path, applied_ms: u64, what: &str) {
    let st = t.ctl_json(&["status"]);
    let p = &st["publisher"];
    assert_eq!(p["config_origin"], "<api>", "{what}: {st}\n{}", t.logs());
    assert_eq!(
        p["config_applied_unix_ms"], applied_ms,
        "{what}: applied time kept"
    );
    assert_eq!(
        p["config_restored_from"],
        intent.display().to_string(),
        "{what}"
    );
    let backends = st["vips"][0]["backends"].as_array().unwrap();
    assert_eq!(backends.len(), 2, "{what}: {st}");
    assert_eq!(backends[1]["state"], "DRAINING", "{what}: {st}");
    assert!(
        backends[1]["reason"]
            .as_str()
            .unwrap()
            .ends_with(": durable"),
        "{what}: {st}"
    );
    let g = p["published_generation"].as_u64().unwrap();
    t.dp.wait_applied(g);
    assert_eq!(reached(t), ["b0"], "{what}\n{}", t.logs());
    let text = t.ctl_ok(&["status"]);
    assert!(
        text.contains(&format!("; restored at start from {}\n", intent.display())),
        "{what}: {text}"
    );
}

/// Removes what a reboot loses of `instance`: its shared-memory regions
/// (/dev/shm) and its files in /run/border (both tmpfs).
fn reboot_forgets(instance: &str) {
    let _ = std::fs::remove_file(conf::state::state_path(instance));
    let _ = std::fs::remove_file(conf::tables::tables_path(instance));
    for e in std::fs::read_dir("/run/border")
        .into_iter()
        .flatten()
        .flatten()
    {
        if e.file_name()
            .to_string_lossy()
            .starts_with(&format!("{instance}."))
        {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

#[test]
fn an_applied_config_and_a_drain_survive_restarts_and_a_reboot() {
    let plan = Plan {
        tag: "md6",
        n: 109,
        backends: 3,
    };
    let state_dir = mgmt::intent::default_state_dir(&plan.instance());
    let intent = state_dir.join("intent.json");
    let mut t = plan.start();
    let _servers = plan.serve(&t);
    let b1 = plan.backend(1).to_string();
    assert_eq!(reached(&t), ["b0", "b1", "b2"]);
    let st = t.ctl_json(&["status"]);
    assert_eq!(
        st["publisher"]["state_dir"],
        state_dir.display().to_string()
    );
    assert_eq!(st["publisher"]["config_restored_from"], "", "{st}");

    // The operator's changes: b2 removed through ApplyConfig, b1 drained.
    let applied = t.dir.path("applied.toml");
    let two = Plan {
        backends: 2,
        ..plan
    };
    std::fs::write(&applied, two.config(&t.socket, &[])).unwrap();
    t.ctl_ok(&["apply", applied.to_str().unwrap()]);
    let applied_ms = t.ctl_json(&["status"])["publisher"]["config_applied_unix_ms"]
        .as_u64()
        .unwrap();
    t.ctl_ok(&["drain", "v", &b1, "--note", "durable"]);
    let g = t.published();
    t.dp.wait_applied(g);
    assert_eq!(reached(&t), ["b0"]);

    // kill -9 and a restart on the same --config (3 backends, none
    // drained): the applied config runs, nothing is published again.
    t.mgmt.kill9();
    t.mgmt = BorderMgmt::start(&t.cfg, t.dir.path("mgmt-2.log"));
    assert!(
        t.mgmt
            .log_text()
            .contains("running the last applied config"),
        "{}",
        t.mgmt.log_text()
    );
    assert_runs_the_applied_intent(&t, &intent, applied_ms, "after kill -9");
    assert_eq!(t.published(), g, "the restart published nothing new");

    // A reboot: both processes gone with everything on tmpfs.
    t.mgmt.kill9();
    t.dp.kill9();
    reboot_forgets(&plan.instance());
    t.mgmt = BorderMgmt::start(&t.cfg, t.dir.path("mgmt-3.log"));
    std::fs::rename(&t.dp.log, t.dir.path("border-dp-1.log")).unwrap();
    t.dp = BorderDp::start_following(&t.lb, &t.dir, &plan.instance(), &t.config);
    t.wire();
    assert_eq!(t.published(), 1, "a new tables region");
    assert_runs_the_applied_intent(&t, &intent, applied_ms, "after a reboot");

    // --from-config-file: the file's three backends run, b1 stays drained.
    t.mgmt.kill9();
    t.mgmt = BorderMgmt::start_with(
        None,
        &t.cfg,
        t.dir.path("mgmt-4.log"),
        &["--from-config-file"],
    );
    let st = t.ctl_json(&["status"]);
    let p = &st["publisher"];
    assert_eq!(p["config_origin"], t.cfg(), "{st}");
    assert_eq!(p["config_restored_from"], "", "{st}");
    assert!(p["config_applied_unix_ms"].as_u64().unwrap() > applied_ms);
    assert_eq!(st["vips"][0]["backends"][1]["state"], "DRAINING", "{st}");
    t.dp.wait_applied(p["published_generation"].as_u64().unwrap());
    assert_eq!(reached(&t), ["b0", "b2"], "{}", t.logs());
    let text = t.ctl_ok(&["status"]);
    assert!(
        text.contains(&format!("{}, applied ", t.cfg()))
            && text.contains(&format!("; saved in {}\n", state_dir.display())),
        "{text}"
    );
}

/// What a refused change must leave as it was: the published generation,
/// the generation border-dp applied, every VIP and backend, the config's
/// origin and time.
fn unchanged_part(st: &Value) -> Value {
    serde_json::json!({
        "generation": st["publisher"]["published_generation"],
        "applied": st["dataplane"]["workers"][0]["applied_generation"],
        "origin": st["publisher"]["config_origin"],
        "applied_ms": st["publisher"]["config_applied_unix_ms"],
        "vips": st["vips"],
    })
}

#[test]
fn a_change_that_cannot_be_saved_fails_and_changes_nothing() {
    let plan = Plan {
        tag: "md7",
        n: 111,
        backends: 2,
    };
    let fs = SmallFs::mount("md7", "256k");
    let state = fs.path.join("state");
    let mut t = plan.start_with(&["--state-dir", state.to_str().unwrap()]);
    let _servers = plan.serve(&t);
    let b0 = plan.backend(0).to_string();
    let intent = state.join("intent.json");
    assert!(intent.exists(), "the start saved what runs");
    let before = unchanged_part(&t.ctl_json(&["status"]));
    let adopted = t.dp.counter(Counter::TablesAdopted);
    let one = Plan {
        backends: 1,
        ..plan
    };
    let applied = t.dir.path("applied.toml");
    std::fs::write(&applied, one.config(&t.socket, &[])).unwrap();
    let refused = |t: &Topo, why: &str, step: &str| {
        let want = format!(
            "cannot save the applied config and overrides to {} ({step}): {why}; nothing changed",
            intent.display()
        );
        assert_eq!(t.ctl_err(&["drain", "v", &b0]), want);
        assert_eq!(t.ctl_err(&["apply", applied.to_str().unwrap()]), want);
        assert_eq!(unchanged_part(&t.ctl_json(&["status"])), before);
        assert_eq!(
            t.dp.counter(Counter::TablesAdopted),
            adopted,
            "no table swapped"
        );
        assert_eq!(reached(t), ["b0", "b1"], "{}", t.logs());
        let names: Vec<_> = std::fs::read_dir(&state)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, ["intent.json"], "no temporary file left");
    };

    // A full state directory, then a read-only one.
    fs.fill();
    refused(
        &t,
        "No space left on device (os error 28)",
        "writing a temporary file",
    );
    fs.free();
    fs.remount("ro");
    refused(
        &t,
        "Read-only file system (os error 30)",
        "creating a temporary file",
    );

    // Writable again: the drain is saved, and a restart runs it.
    fs.remount("rw");
    let out = t.ctl_ok(&["drain", "v", &b0, "--note", "saved"]);
    let g = before["generation"].as_u64().unwrap() + 1;
    assert!(out.contains(&format!("generation {g} published")), "{out}");
    t.mgmt.kill9();
    t.mgmt = BorderMgmt::start_with(
        None,
        &t.cfg,
        t.dir.path("mgmt-2.log"),
        &["--state-dir", state.to_str().unwrap()],
    );
    let st = t.ctl_json(&["status"]);
    assert_eq!(st["vips"][0]["backends"][0]["state"], "DRAINING", "{st}");
    assert_eq!(st["publisher"]["published_generation"], g, "{st}");
    t.dp.wait_applied(g);
    assert_eq!(reached(&t), ["b1"]);
}
