//! border-dp on `net_af_xdp` ports over veth pairs, beside the same flows
//! on TAP: curl in the client namespace fetches pages through a VIP from
//! Debian's nginx in the backend namespace, in full-NAT and DNAT mode,
//! IPv4 and IPv6, small answers and a 3 MB file (full-size frames both
//! ways). nginx answers with the source address it saw.

mod common;

use std::net::IpAddr;
use std::process::Command;
use std::time::Duration;

use common::*;
use conf::counters::Counter;

#[derive(Clone, Copy)]
struct Plan {
    tag: &'static str,
    /// Second octet (v4) / group (v6) of the client subnet; backends are n + 1.
    n: u8,
    v6: bool,
    mode: &'static str,
    kind: PortKind,
}

impl Plan {
    fn ext(&self, host: u8) -> String {
        subnet_host(self.n, self.v6, host)
    }
    fn int(&self, host: u8) -> String {
        subnet_host(self.n + 1, self.v6, host)
    }
    fn plen(&self) -> u8 {
        subnet_prefix_len(self.v6)
    }
    /// `host` as it goes in a URL.
    fn url_host(&self, addr: &str) -> String {
        if self.v6 {
            format!("[{addr}]")
        } else {
            addr.to_string()
        }
    }
    fn config(&self) -> String {
        let t = self.tag;
        let mut c = two_port_config_on(
            self.kind,
            &format!("e2e{t}"),
            t,
            &format!("{}/{}", self.ext(1), self.plen()),
            &format!("{}/{}", self.int(1), self.plen()),
            &format!("unix:///run/border/e2e{t}.sock"),
        );
        c += &format!(
            r#"
[[vip]]
name = "web"
address = "{vip}"
port = 80
protocol = "tcp"
mode = "{mode}"
[[vip.backend]]
address = "{backend}"
port = 8080
"#,
            vip = self.ext(100),
            mode = self.mode,
            backend = self.int(11),
        );
        c
    }
}

struct Topo {
    plan: Plan,
    dir: TempDir,
    dp: BorderDp,
    cli: Netns,
    bk: Netns,
    _lb: Netns,
    _nginx: Option<Spawned>,
}

impl Topo {
    fn start(plan: Plan) -> Topo {
        let t = plan.tag;
        let lb = Netns::new(&format!("{t}-lb"));
        let cli = Netns::new(&format!("{t}-cli"));
        let bk = Netns::new(&format!("{t}-bk"));
        let (ext, int) = (format!("{t}-ext"), format!("{t}-int"));
        plan.kind.prepare(&lb, &cli, &ext);
        plan.kind.prepare(&lb, &bk, &int);
        let dir = TempDir::new(t);
        let dp = BorderDp::start(&lb, &dir, &format!("e2e{t}"), &plan.config());
        let p = plan.plen();
        plan.kind
            .connect(&lb, &cli, &ext, &[&format!("{}/{p}", plan.ext(2))]);
        plan.kind
            .connect(&lb, &bk, &int, &[&format!("{}/{p}", plan.int(11))]);
        let fam = if plan.v6 { "-6" } else { "-4" };
        cli.run(&["ip", fam, "route", "add", "default", "via", &plan.ext(1)]);
        if plan.mode == "dnat" {
            bk.run(&["ip", fam, "route", "add", "default", "via", &plan.int(1)]);
        }
        let mut topo = Topo {
            plan,
            dir,
            dp,
            cli,
            bk,
            _lb: lb,
            _nginx: None,
        };
        topo.nginx();
        topo
    }

    /// Debian's nginx on the backend address: `/` answers with the source
    /// address it saw, `/big` is a 3 MB file.
    fn nginx(&mut self) {
        let d = self.dir.0.display().to_string();
        let big: Vec<u8> = (0..3u32 << 20)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        std::fs::write(self.dir.path("big"), &big).unwrap();
        let listen = format!("{}:8080", self.plan.url_host(&self.plan.int(11)));
        let cfg = format!(
            r#"daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/nginx-error.log info;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {d}/cb;
    proxy_temp_path {d}/px;
    fastcgi_temp_path {d}/fc;
    uwsgi_temp_path {d}/uw;
    scgi_temp_path {d}/sc;
    server {{
        listen {listen};
        location = / {{ return 200 "$remote_addr\n"; }}
        location = /big {{ alias {d}/big; }}
    }}
}}
"#
        );
        let path = self.dir.path("nginx.conf");
        std::fs::write(&path, cfg).unwrap();
        // Checked first in the namespace (it binds): a bad config is one clear failure.
        self.bk.run(&[
            "nginx",
            "-t",
            "-q",
            "-c",
            path.to_str().unwrap(),
            "-e",
            &format!("{d}/nginx-t.log"),
        ]);
        self._nginx = Some(self.bk.spawn(&[
            "nginx",
            "-c",
            path.to_str().unwrap(),
            "-e",
            &format!("{d}/nginx-stderr.log"),
        ]));
        wait_until("nginx listening", Duration::from_secs(20), || {
            let out = self.bk.try_run(&["ss", "-Htln"]);
            String::from_utf8_lossy(&out.stdout).contains(":8080 ")
        });
    }

    /// curl from the client namespace; returns the body.
    fn curl(&self, path: &str) -> Vec<u8> {
        let url = format!("http://{}{path}", self.plan.url_host(&self.plan.ext(100)));
        let out = Command::new("ip")
            .args(["netns", "exec", &self.cli.name])
            .args(["curl", "-sS", "--fail", "-m", "20", &url])
            .output()
            .expect("run curl");
        assert!(
            out.status.success(),
            "curl {url} over {:?}: {}\nborder-dp log:\n{}",
            self.plan.kind,
            String::from_utf8_lossy(&out.stderr),
            self.dp.log_text()
        );
        out.stdout
    }
}

/// Ten page requests and a 3 MB download through the VIP: nginx saw the
/// expected source address, the file arrived intact, border-dp counted the
/// flows and dropped nothing (but the first SYN, held for ARP).
fn http_through_vip(plan: Plan) {
    let topo = Topo::start(plan);
    let before = topo.dp.drops();
    let expected: IpAddr = if plan.mode == "fullnat" {
        plan.int(1).parse().unwrap()
    } else {
        plan.ext(2).parse().unwrap()
    };
    for i in 0..10 {
        let body = String::from_utf8(topo.curl("/")).unwrap();
        let seen: IpAddr = body
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("request {i}: nginx answered {body:?}"));
        assert_eq!(seen, expected, "request {i}: nginx saw the wrong source");
    }
    let big = topo.curl("/big");
    let want = std::fs::read(topo.dir.path("big")).unwrap();
    assert_eq!(big.len(), want.len(), "3 MB download length");
    assert!(big == want, "3 MB download differs from the file");
    wait_until("new_flows counted", Duration::from_secs(5), || {
        topo.dp.counter(Counter::NewFlows) >= 11
    });
    assert!(topo.dp.counter(Counter::RxPackets) > 2000);
    assert!(topo.dp.counter(Counter::TxPackets) > 2000);
    let rose: Vec<_> = drops_rose(&before, &topo.dp.drops())
        .into_iter()
        // The peers' kernels solicit for their own link-local addresses
        // (DAD) when the veth comes up: not ours, rightly dropped.
        .filter(|(name, _)| *name != "drop_nd_not_ours")
        .filter(|(name, n)| !(*name == "drop_neighbour_unresolved" && *n <= 1))
        .collect();
    assert!(rose.is_empty(), "drops over {:?}: {rose:?}", plan.kind);
}

#[test]
fn fullnat_ipv4_http_over_af_xdp() {
    http_through_vip(Plan {
        tag: "xf4",
        n: 41,
        v6: false,
        mode: "fullnat",
        kind: PortKind::AfXdp,
    });
}

#[test]
fn dnat_ipv4_http_over_af_xdp_keeps_the_client_address() {
    http_through_vip(Plan {
        tag: "xd4",
        n: 43,
        v6: false,
        mode: "dnat",
        kind: PortKind::AfXdp,
    });
}

#[test]
fn fullnat_ipv6_http_over_af_xdp() {
    http_through_vip(Plan {
        tag: "xf6",
        n: 45,
        v6: true,
        mode: "fullnat",
        kind: PortKind::AfXdp,
    });
}

#[test]
fn fullnat_ipv4_http_over_tap_the_same_way() {
    http_through_vip(Plan {
        tag: "xt4",
        n: 47,
        v6: false,
        mode: "fullnat",
        kind: PortKind::Tap,
    });
}
