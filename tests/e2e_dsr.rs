//! Direct server return with real kernels: a client namespace reaches DSR
//! VIPs served by three backends, each in its own namespace, through
//! border-dp on TAP ports, and the backends answer the client over a
//! separate path (a veth from each backend to the client) that never
//! touches the appliance. `encap = "none"` (the backends share a bridge
//! with border's `int` port and hold the VIPs on their loopback, with
//! arp_ignore/arp_announce as IPVS documents), `"ipip"` and `"gue"`, IPv4
//! and IPv6. This kernel has no ipip, fou or ip6_tunnel module: the
//! backends decapsulate with the XDP program `tests/xdp/dsr_decap.c`,
//! built here with clang.
//!
//! Namespaces `ds-lb` (border-dp), `ds-cli`, `ds-sw` (the bridge) and
//! `ds-b0..2`; subnets 10.142 (client side), 10.143 (backends' link),
//! 10.144.i (backend i's return path) and their fd00:14x:: twins.

mod common;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::*;
use conf::counters::Counter;
use conf::state::FlowStat;

/// The tests share namespace names: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const BACKENDS: u8 = 3;

/// Client-side VIPs: (name, address, encap).
const VIPS: &[(&str, &str, &str)] = &[
    ("mac4", "10.142.0.100", "none"),
    ("ipip4", "10.142.0.101", "ipip"),
    ("gue4", "10.142.0.102", "gue"),
    ("mac6", "fd00:142::100", "none"),
    ("ipip6", "fd00:142::101", "ipip"),
    ("gue6", "fd00:142::102", "gue"),
];

/// The download VIP: IPv4, IPIP, one backend (b0), iperf3's port.
const DOWNLOAD_VIP: &str = "10.142.0.110";
const IPERF_PORT: u16 = 5201;

fn backend4(i: u8) -> String {
    format!("10.143.0.{}", 11 + i)
}

fn backend6(i: u8) -> String {
    format!("fd00:143::{:x}", 11 + i)
}

/// The appliance's config; `drained` backends of VIP `ipip4` have weight 0.
fn config(drained: &[u8]) -> String {
    let mut c = two_port_config(
        "e2eds",
        "ds",
        "10.142.0.1/24",
        "10.143.0.1/24",
        "unix:///run/border/e2eds.sock",
    )
    .replace(
        "addresses = [\"10.142.0.1/24\"]",
        "addresses = [\"10.142.0.1/24\", \"fd00:142::1/64\"]",
    )
    .replace(
        "addresses = [\"10.143.0.1/24\"]",
        "addresses = [\"10.143.0.1/24\", \"fd00:143::1/64\"]",
    );
    for (name, addr, encap) in VIPS {
        c += &format!(
            "\n[[vip]]\nname = \"{name}\"\naddress = \"{addr}\"\nport = 80\nmode = \"dsr\"\nencap = \"{encap}\"\nmaglev_table_size = 1021\n"
        );
        for i in 0..BACKENDS {
            let b = if addr.contains(':') {
                backend6(i)
            } else {
                backend4(i)
            };
            let weight = if *name == "ipip4" && drained.contains(&i) {
                0
            } else {
                1
            };
            c += &format!("[[vip.backend]]\naddress = \"{b}\"\nport = 80\nweight = {weight}\n");
        }
    }
    c += &format!(
        "\n[[vip]]\nname = \"download\"\naddress = \"{DOWNLOAD_VIP}\"\nport = {IPERF_PORT}\nmode = \"dsr\"\nencap = \"ipip\"\nmaglev_table_size = 1021\n[[vip.backend]]\naddress = \"{}\"\nport = {IPERF_PORT}\n",
        backend4(0)
    );
    c
}

/// Compiles the backends' XDP decapsulation into `dir`.
fn build_xdp(dir: &TempDir) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/xdp/dsr_decap.c");
    let obj = dir.path("dsr_decap.o");
    let out = Command::new("clang")
        .args([
            "-O2",
            "-g",
            "-target",
            "bpf",
            "-I/usr/include/x86_64-linux-gnu",
            "-c",
        ])
        .arg(&src)
        .arg("-o")
        .arg(&obj)
        .output()
        .expect("run clang (scripts/install-deps.sh installs it)");
    assert!(
        out.status.success(),
        "clang {}: {}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    obj
}

struct Topo {
    dp: BorderDp,
    cli: Netns,
    bks: Vec<Netns>,
    _sw: Netns,
    lb: Netns,
    dir: TempDir,
}

fn sysctl(ns: &Netns, kv: &str) {
    ns.run(&["sysctl", "-q", "-w", kv]);
}

/// Gives `iface` in `ns` its addresses and brings it up.
fn addresses(ns: &Netns, iface: &str, addrs: &[&str]) {
    for a in addrs {
        let mut args = vec!["ip", "addr", "add", a, "dev", iface];
        if a.contains(':') {
            args.push("nodad");
        }
        ns.run(&args);
    }
    ns.run(&["ip", "link", "set", iface, "up"]);
}

fn start() -> Topo {
    start_with(&config(&[]), false)
}

/// The data ports of the download test: `DSR_PORTS=tap` or `af_xdp`.
fn download_ports() -> PortKind {
    match std::env::var("DSR_PORTS").as_deref() {
        Ok("tap") => PortKind::Tap,
        _ => PortKind::AfXdp,
    }
}

/// The namespaces and border-dp on `config`, standalone or `following`
/// border-mgmt's tables.
fn start_with(config: &str, following: bool) -> Topo {
    start_on(PortKind::Tap, config, following)
}

/// [`start_with`] with the data ports on `kind`.
fn start_on(kind: PortKind, config: &str, following: bool) -> Topo {
    let lb = Netns::new("ds-lb");
    let cli = Netns::new("ds-cli");
    let sw = Netns::new("ds-sw");
    let bks: Vec<Netns> = (0..BACKENDS)
        .map(|i| Netns::new(&format!("ds-b{i}")))
        .collect();
    let dir = TempDir::new("ds");
    let xdp = build_xdp(&dir);
    // The client takes replies from the VIPs on the return veths, whose
    // route back is the appliance: no reverse-path filter.
    for ns in std::iter::once(&cli).chain(&bks) {
        sysctl(ns, "net.ipv4.conf.all.rp_filter=0");
        sysctl(ns, "net.ipv4.conf.default.rp_filter=0");
    }
    kind.prepare(&lb, &cli, "ds-ext");
    kind.prepare(&lb, &sw, "ds-int");
    // An adaptive worker's empty polls of an af_xdp queue are then memory
    // reads, not one `recvfrom` each (DPDK's preferred busy polling):
    // docs/config.md#port-devices.
    let extra = if kind == PortKind::AfXdp {
        ",busy_budget=0"
    } else {
        ""
    };
    let config = &config.replace(
        &PortKind::Tap.devargs(0, "ds-ext"),
        &(kind.devargs(0, "ds-ext") + extra),
    );
    let config = &config.replace(
        &PortKind::Tap.devargs(1, "ds-int"),
        &(kind.devargs(1, "ds-int") + extra),
    );
    let dp = if following {
        // Nothing left over from an earlier run of this instance.
        let _ = std::fs::remove_file(conf::tables::tables_path("e2eds"));
        forget_intent("e2eds");
        BorderDp::start_following(&lb, &dir, "e2eds", config)
    } else {
        BorderDp::start(&lb, &dir, "e2eds", config)
    };
    kind.connect(&lb, &cli, "ds-ext", &["10.142.0.2/24", "fd00:142::2/64"]);
    kind.connect(&lb, &sw, "ds-int", &[]);
    if kind == PortKind::Tap {
        // The TAP device carries border's MAC: in the bridge that MAC would
        // be the bridge's own, and frames to border would stop there.
        sw.run(&["ip", "link", "set", "ds-int", "down"]);
        sw.run(&[
            "ip",
            "link",
            "set",
            "ds-int",
            "address",
            "02:00:00:14:30:01",
        ]);
        sw.run(&["ip", "link", "set", "ds-int", "up"]);
    }
    sw.run(&["ip", "link", "add", "ds-br", "type", "bridge"]);
    sw.run(&["ip", "link", "set", "ds-int", "master", "ds-br"]);
    sw.run(&["ip", "link", "set", "ds-br", "up"]);
    for (i, bk) in bks.iter().enumerate() {
        let i = i as u8;
        // IPVS's settings for a VIP on the loopback.
        sysctl(bk, "net.ipv4.conf.all.arp_ignore=1");
        sysctl(bk, "net.ipv4.conf.all.arp_announce=2");
        for (_, vip, _) in VIPS {
            let plen = if vip.contains(':') { "128" } else { "32" };
            bk.run(&["ip", "addr", "add", &format!("{vip}/{plen}"), "dev", "lo"]);
        }
        bk.run(&[
            "ip",
            "addr",
            "add",
            &format!("{DOWNLOAD_VIP}/32"),
            "dev",
            "lo",
        ]);
        // The link to the appliance, with the XDP decapsulation.
        let (port, link) = (format!("ds-p{i}"), format!("ds-l{i}"));
        run(&[
            "ip", "-n", &sw.name, "link", "add", &port, "type", "veth", "peer", "name", &link,
            "netns", &bk.name,
        ]);
        sw.run(&["ip", "link", "set", &port, "master", "ds-br"]);
        sw.run(&["ip", "link", "set", &port, "up"]);
        sysctl(bk, &format!("net.ipv4.conf.{link}.rp_filter=0"));
        addresses(
            bk,
            &link,
            &[
                &format!("{}/24", backend4(i)),
                &format!("{}/64", backend6(i)),
            ],
        );
        bk.run(&[
            "ip",
            "link",
            "set",
            "dev",
            &link,
            "xdp",
            "obj",
            xdp.to_str().unwrap(),
            "sec",
            "xdp",
        ]);
        // The return path: straight to the client, with an MSS that leaves
        // room for the tunnel's headers in the appliance's MTU.
        let (ret_b, ret_c) = (format!("ds-r{i}"), format!("ds-c{i}"));
        run(&[
            "ip", "-n", &bk.name, "link", "add", &ret_b, "type", "veth", "peer", "name", &ret_c,
            "netns", &cli.name,
        ]);
        sysctl(bk, &format!("net.ipv4.conf.{ret_b}.rp_filter=0"));
        addresses(
            bk,
            &ret_b,
            &[&format!("10.144.{i}.2/24"), &format!("fd00:144:{i}::2/64")],
        );
        addresses(
            &cli,
            &ret_c,
            &[&format!("10.144.{i}.1/24"), &format!("fd00:144:{i}::1/64")],
        );
        sysctl(&cli, &format!("net.ipv4.conf.{ret_c}.rp_filter=0"));
        let via4 = format!("10.144.{i}.1");
        let via6 = format!("fd00:144:{i}::1");
        bk.run(&[
            "ip",
            "route",
            "add",
            "10.142.0.0/24",
            "via",
            &via4,
            "advmss",
            "1380",
        ]);
        bk.run(&[
            "ip",
            "-6",
            "route",
            "add",
            "fd00:142::/64",
            "via",
            &via6,
            "advmss",
            "1360",
        ]);
    }
    sysctl(&cli, "net.ipv4.conf.ds-ext.rp_filter=0");
    Topo {
        dp,
        cli,
        bks,
        _sw: sw,
        lb,
        dir,
    }
}

impl Topo {
    fn servers(&self) -> Vec<TcpBackends> {
        self.bks
            .iter()
            .enumerate()
            .map(|(i, bk)| {
                let name = format!("b{i}");
                let any: SocketAddr = "[::]:80".parse().unwrap();
                TcpBackends::start(&bk.name, &[(name.as_str(), any)])
            })
            .collect()
    }

    /// Bytes received so far on the client's interface `iface`.
    fn rx_bytes(&self, iface: &str) -> u64 {
        let out = self.cli.run(&[
            "cat",
            &format!("/sys/class/net/{iface}/statistics/rx_bytes"),
        ]);
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    }

    /// Bytes the client received over the return paths.
    fn rx_return(&self) -> u64 {
        (0..BACKENDS)
            .map(|i| self.rx_bytes(&format!("ds-c{i}")))
            .sum()
    }

    fn wait_generation(&self, g: u64) {
        let state = self.dp.state();
        wait_until(
            &format!("workers on generation {g}"),
            Duration::from_secs(10),
            || (0..state.n_workers()).all(|w| state.worker(w).unwrap().applied_generation() >= g),
        );
    }
}

/// Seconds of CPU the whole machine has spent busy (every core, all but
/// idle and iowait), from `/proc/stat` in ticks of 10 ms.
fn machine_busy() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<f64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let idle = ticks.get(3).copied().unwrap_or(0.0) + ticks.get(4).copied().unwrap_or(0.0);
    (ticks.iter().sum::<f64>() - idle) / 100.0
}

fn vip(addr: &str, port: u16) -> SocketAddr {
    SocketAddr::new(addr.parse().unwrap(), port)
}

/// The greeting's two words: backend name and the peer it saw.
fn split(line: &str) -> (String, IpAddr) {
    let mut it = line.split_whitespace();
    let name = it.next().unwrap_or("").to_string();
    let peer: IpAddr = it
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("bad greeting {line:?}"));
    (name, peer.to_canonical())
}

/// Sends `n` bytes to `to` from the client and reads the echo back: the
/// bytes echoed.
fn echo(cli: &str, to: SocketAddr, n: usize) -> usize {
    in_netns(cli, move || {
        let s = connect_retry(to, Duration::from_secs(10)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut w = s.try_clone().unwrap();
        let writer = std::thread::spawn(move || {
            let chunk = vec![0x5a; 64 * 1024];
            let mut left = n;
            while left > 0 {
                let k = left.min(chunk.len());
                w.write_all(&chunk[..k]).unwrap();
                left -= k;
            }
            w.shutdown(std::net::Shutdown::Write).unwrap();
        });
        let mut r = s;
        let mut got = Vec::new();
        r.read_to_end(&mut got).expect("read the echo");
        writer.join().unwrap();
        got.iter()
            .position(|&b| b == b'\n')
            .map_or(0, |nl| got.len() - nl - 1)
    })
    .join()
    .unwrap()
}

#[test]
fn dsr_vips_spread_and_backends_answer_the_client_directly() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let t = start();
    let _servers = t.servers();
    let state = t.dp.state();
    for (name, addr, encap) in VIPS {
        let client: IpAddr = if addr.contains(':') {
            "fd00:142::2".parse().unwrap()
        } else {
            "10.142.0.2".parse().unwrap()
        };
        let lines = tcp_names(&t.cli.name, vip(addr, 80), 60);
        let (who, peers): (Vec<String>, Vec<IpAddr>) = lines.iter().map(|l| split(l)).unzip();
        let spread = tally(&who);
        assert_eq!(
            spread.len(),
            BACKENDS as usize,
            "{name} ({encap}): every backend gets connections: {spread:?}"
        );
        assert!(
            peers.iter().all(|p| *p == client),
            "{name}: the backends see the client itself: {peers:?}"
        );
        let key = conf::state::vip_stat_key(name);
        wait_until("VIP counters", Duration::from_secs(5), || {
            state.vip_total(key, FlowStat::NewConnections) >= 60
        });
    }
    // The replies do not pass the appliance: a 4 MB echo through a VIP
    // comes back over the return veths, and border-dp received the client's
    // bytes once (not the backend's too).
    let n = 4 << 20;
    let (ext0, ret0, rx0) = (
        t.rx_bytes("ds-ext"),
        t.rx_return(),
        t.dp.counter(Counter::RxBytes),
    );
    for (name, addr, _) in VIPS {
        assert_eq!(echo(&t.cli.name, vip(addr, 80), n), n, "{name}: the echo");
    }
    let sent = (n * VIPS.len()) as u64;
    let ext = t.rx_bytes("ds-ext") - ext0;
    let ret = t.rx_return() - ret0;
    let rx = t.dp.counter(Counter::RxBytes) - rx0;
    eprintln!("echoed {sent} bytes: client rx {ret} on the return paths, {ext} from the appliance; border-dp rx {rx}");
    assert!(
        ret >= sent,
        "the echoes came back over the return paths: {ret} < {sent}"
    );
    assert!(
        ext < sent / 20,
        "hardly anything came from the appliance: {ext}"
    );
    assert!(
        rx < sent + sent / 2,
        "border-dp received the client's bytes, not the replies too: {rx} for {sent}"
    );
    assert!(t.dp.counter(Counter::DsrForwarded) > 0);
    for c in [
        Counter::DropDsrTooBig,
        Counter::DropDsrNoRoom,
        Counter::DropDsrNoSource,
        Counter::DropNoBackend,
        Counter::DropNoConntrack,
    ] {
        assert_eq!(t.dp.counter(c), 0, "{}", c.name());
    }
}

#[test]
fn drained_backend_keeps_its_flows_and_gets_no_new_ones() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut t = start();
    let _servers = t.servers();
    let to = vip("10.142.0.101", 80);
    // A connection that landed on b0, kept open over the drain.
    let held = in_netns(&t.cli.name, move || {
        use std::io::{BufRead, BufReader};
        for _ in 0..200 {
            let s = connect_retry(to, Duration::from_secs(10)).expect("connect");
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut line = String::new();
            BufReader::new(s.try_clone().unwrap())
                .read_line(&mut line)
                .unwrap();
            if line.starts_with("b0 ") {
                return s;
            }
        }
        panic!("no connection landed on b0");
    })
    .join()
    .unwrap();
    t.dp.reload(&config(&[0]));
    t.wait_generation(2);
    let names: Vec<String> = tcp_names(&t.cli.name, to, 90)
        .iter()
        .map(|l| split(l).0)
        .collect();
    let spread = tally(&names);
    assert!(
        !spread.contains_key("b0"),
        "no new connection to the drained b0: {spread:?}"
    );
    assert_eq!(spread.len(), 2, "{spread:?}");
    // The held connection still reaches b0 and is answered.
    let echoed = in_netns(&t.cli.name, move || {
        let mut s = held;
        s.write_all(b"still there\n").unwrap();
        let mut buf = [0u8; 12];
        s.read_exact(&mut buf).unwrap();
        buf
    })
    .join()
    .unwrap();
    assert_eq!(&echoed, b"still there\n");
}

/// Health checks of a DSR VIP go to each backend's own address (the
/// default `health_target = "backend"`), from border-mgmt through the
/// kernel twin: a backend whose service stops is taken down and gets no
/// new connection, and comes back when it answers again.
#[test]
fn health_probes_reach_dsr_backends_at_their_own_address() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cfg = config(&[]).replacen(
        "name = \"ipip4\"\naddress = \"10.142.0.101\"\nport = 80\nmode = \"dsr\"\nencap = \"ipip\"\nmaglev_table_size = 1021\n",
        "name = \"ipip4\"\naddress = \"10.142.0.101\"\nport = 80\nmode = \"dsr\"\nencap = \"ipip\"\nmaglev_table_size = 1021\nhealth_target = \"backend\"\n[vip.health]\nkind = \"tcp\"\ninterval_ms = 200\ntimeout_ms = 150\nrise = 1\nfall = 2\n",
        1,
    );
    assert!(cfg.contains("[vip.health]"));
    let t = start_with(&cfg, true);
    let cfg_path = t.dir.path("mgmt.toml");
    std::fs::write(&cfg_path, &cfg).unwrap();
    let _mgmt = BorderMgmt::start_in(Some(&t.lb.name), &cfg_path, t.dir.path("mgmt.log"));
    let to = vip("10.142.0.101", 80);
    let mut servers: Vec<Option<TcpBackends>> = t.servers().into_iter().map(Some).collect();
    let spread = |n: usize| {
        tally(
            &tcp_names(&t.cli.name, to, n)
                .iter()
                .map(|l| split(l).0)
                .collect::<Vec<_>>(),
        )
    };
    wait_until(
        "every backend healthy and picked",
        Duration::from_secs(20),
        || spread(30).len() == 3,
    );
    // b0's service stops: its probes fail, it goes down, new flows avoid it.
    servers[0] = None;
    wait_until("b0 taken down", Duration::from_secs(20), || {
        !spread(30).contains_key("b0")
    });
    let s = spread(60);
    assert_eq!(s.len(), 2, "{s:?}");
    // Back again.
    servers[0] = Some(TcpBackends::start(
        &t.bks[0].name,
        &[("b0", "[::]:80".parse().unwrap())],
    ));
    wait_until("b0 back", Duration::from_secs(20), || {
        spread(30).contains_key("b0")
    });
}

/// A download through the DSR VIP against the same download straight
/// between the namespaces (over backend b0's return veth): DSR_DOWNLOAD
/// bytes (iperf3's `-n`, default 100M here), DSR_ROUNDS rounds (default
/// 3) of one of each, alternated; the medians are compared. The figures in
/// docs/performance.md are for 1G with a release border-dp
/// (`BORDER_DP_BIN`, see `common::border_dp_bin`). The data ports are
/// af_xdp (`DSR_PORTS=tap` for TAP ones); `DSR_BUSY=1` runs border-dp's
/// worker with `poll = "busy"`. The report adds the whole machine's busy
/// cores over each kind of transfer: on a 2-core VM the appliance shares
/// the CPU with both ends of the transfer.
#[test]
fn download_through_a_dsr_vip_moves_near_the_direct_rate() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let ports = download_ports();
    let mut c = config(&[]);
    if std::env::var("DSR_BUSY").is_ok() {
        c = c.replace(
            "worker_lcores = [1]",
            "worker_lcores = [1]\npoll = \"busy\"",
        );
    }
    let t = start_on(ports, &c, false);
    let size = std::env::var("DSR_DOWNLOAD").unwrap_or_else(|_| "100M".into());
    let _server = t.bks[0].spawn(&["iperf3", "-s", "-p", &IPERF_PORT.to_string()]);
    let rate = |to: &str| -> f64 {
        let start = Instant::now();
        loop {
            let out = t.cli.try_run(&[
                "iperf3",
                "-c",
                to,
                "-p",
                &IPERF_PORT.to_string(),
                "-R",
                "-n",
                &size,
                "-J",
            ]);
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            if let Some(bps) = v["end"]["sum_received"]["bits_per_second"].as_f64() {
                return bps;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "iperf3 to {to}: {}",
                String::from_utf8_lossy(&out.stdout)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    // Alternated, the machine being shared: each pair sees about the same load.
    let rounds: usize = std::env::var("DSR_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3)
        .max(1);
    // border-dp's CPU time (user + system) over each kind of transfer:
    // the client's ACKs are all it has to do in the DSR ones.
    let cpu = || -> f64 {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", t.dp.pid())).unwrap_or_default();
        let after = stat.rsplit(')').next().unwrap_or("");
        let f: Vec<f64> = after
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        // utime and stime, fields 14 and 15 (11 and 12 after the name), in ticks of 10 ms.
        f.get(11)
            .zip(f.get(12))
            .map_or(0.0, |(u, s)| (u + s) / 100.0)
    };
    let mut busy_direct = Vec::new();
    let mut busy_dsr = Vec::new();
    let (mut direct, mut dsr) = (Vec::new(), Vec::new());
    let (mut cpu_direct, mut cpu_dsr) = (0.0, 0.0);
    let timed = |to: &str, v: &mut Vec<f64>, c: &mut f64| {
        let (c0, t0) = (cpu(), Instant::now());
        v.push(rate(to));
        *c += (cpu() - c0) / t0.elapsed().as_secs_f64();
    };
    for _ in 0..rounds {
        let (b0, w0) = (machine_busy(), Instant::now());
        timed("10.144.0.2", &mut direct, &mut cpu_direct);
        let (b1, w1) = (machine_busy(), Instant::now());
        busy_direct.push((b1 - b0) / w1.duration_since(w0).as_secs_f64());
        timed(DOWNLOAD_VIP, &mut dsr, &mut cpu_dsr);
        busy_dsr.push((machine_busy() - b1) / w1.elapsed().as_secs_f64());
    }
    eprintln!("machine busy cores: direct {busy_direct:.2?}, DSR {busy_dsr:.2?}");
    eprintln!(
        "border-dp busy {:.0} % of a core during the direct transfers, {:.0} % during the DSR ones",
        100.0 * cpu_direct / rounds as f64,
        100.0 * cpu_dsr / rounds as f64
    );
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let m = v.len() / 2;
        if v.len().is_multiple_of(2) {
            (v[m - 1] + v[m]) / 2.0
        } else {
            v[m]
        }
    };
    let gbit = |v: &[f64]| {
        v.iter()
            .map(|r| format!("{:.2}", r / 1e9))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let (d, x) = (gbit(&direct), gbit(&dsr));
    let (direct_m, dsr_m) = (median(&mut direct), median(&mut dsr));
    eprintln!(
        "download of {size} ({rounds} rounds, {ports:?} ports, border-dp {}): direct [{d}] median {:.2} Gbit/s, through the DSR VIP [{x}] median {:.2} Gbit/s ({:.2} x)",
        border_dp_bin(),
        direct_m / 1e9,
        dsr_m / 1e9,
        dsr_m / direct_m
    );
    assert!(
        dsr_m >= 0.3 * direct_m,
        "DSR download at {:.2} of the direct rate",
        dsr_m / direct_m
    );
}
