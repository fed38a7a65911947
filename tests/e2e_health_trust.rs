//! Trusted checkers and agent checks end to end (docs/health.md), with two
//! border-mgmt processes (two appliances, `tr-lb` and `tr-lb2`) that reach
//! the backends in `tr-bk` over their own veth links and hear each other's
//! observations over unix sockets. The dataplane does not matter here: what
//! is checked is what `borderctl status --json` says.
//!
//! - An untrusted peer blinded to one backend by nftables does not take it
//!   out (quorum 1, one checker each way: a split, the state is kept and the
//!   reason names both sides).
//! - The same peer marked `trusted = true` takes it out.
//! - An agent-check server (python3 in the backend namespace) answering
//!   `drain`, then `50%`, then `ready`, then `down` moves the backend from
//!   draining (the weight scaled while draining) to up at half its
//!   configured weight to down; a malformed answer is a failed check with
//!   the text in the reason.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;

const INTERVAL_MS: u64 = 300;
const WITHIN: Duration = Duration::from_secs(15);
const B1: &str = "10.99.0.11:8080";
const B2: &str = "10.99.0.12:8080";

/// The agent and the TCP backends: `addr,port[,answer file]` each; a
/// connection gets the file's bytes (if any), then the close.
const SERVER_PY: &str = r#"
import socket, sys, threading
def serve(addr, port, answer):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, int(port)))
    s.listen(64)
    while True:
        c, _ = s.accept()
        try:
            if answer:
                try:
                    data = open(answer, 'rb').read()
                except OSError:
                    data = b''
                c.sendall(data)
        except OSError:
            pass
        c.close()
for spec in sys.argv[1:]:
    addr, port, answer = (spec.split(',') + [''])[:3]
    threading.Thread(target=serve, args=(addr, port, answer), daemon=True).start()
threading.Event().wait()
"#;

fn config(instance: &str, socket: &Path, peer: &Path, trusted: bool) -> String {
    let mut c = two_port_config(
        instance,
        "tr",
        "10.99.8.1/24",
        "10.99.9.1/24",
        &format!("unix://{}", socket.display()),
    );
    c += &format!(
        "quorum = 1\n[[mgmt.peer]]\naddress = \"unix://{}\"\ntrusted = {trusted}\n",
        peer.display()
    );
    let health = |kind: &str, extra: &str| {
        format!(
            "[vip.health]\nkind = \"{kind}\"\ninterval_ms = {INTERVAL_MS}\ntimeout_ms = 200\nrise = 2\nfall = 2\n{extra}"
        )
    };
    c += &format!(
        "\n[[vip]]\nname = \"web\"\naddress = \"10.99.8.100\"\nport = 80\nmaglev_table_size = 1021\n{}",
        health("tcp", "")
    );
    c += "[[vip.backend]]\naddress = \"10.99.0.11\"\nport = 8080\n[[vip.backend]]\naddress = \"10.99.0.12\"\nport = 8080\n";
    c += &format!(
        "\n[[vip]]\nname = \"ag\"\naddress = \"10.99.8.101\"\nport = 80\nmaglev_table_size = 1021\n{}",
        health("agent", "agent_port = 9777\n")
    );
    c += "[[vip.backend]]\naddress = \"10.99.0.11\"\nport = 8080\nweight = 10\n[[vip.backend]]\naddress = \"10.99.0.12\"\nport = 8080\n";
    c
}

struct Appliance {
    process: BorderMgmt,
    socket: PathBuf,
}

impl Appliance {
    fn start(ns: &str, cfg: &Path, log: PathBuf, socket: PathBuf) -> Appliance {
        Appliance {
            process: BorderMgmt::start_in(Some(ns), cfg, log),
            socket,
        }
    }

    fn status(&self) -> serde_json::Value {
        let server = format!("unix://{}", self.socket.display());
        let (_, out, err) = borderctl(&["--server", &server, "--json", "status"]);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("status --json: {e}: {out}{err}"))
    }

    fn backend(&self, vip: &str, addr: &str) -> serde_json::Value {
        let st = self.status();
        let v = st["vips"]
            .as_array()
            .and_then(|vs| vs.iter().find(|v| v["name"] == vip))
            .unwrap_or_else(|| panic!("no VIP {vip} in {st}"));
        v["backends"]
            .as_array()
            .and_then(|bs| bs.iter().find(|b| b["address"] == addr))
            .unwrap_or_else(|| panic!("no backend {addr} in {v}"))
            .clone()
    }

    /// Waits until `cond` holds on the backend (as `borderctl status --json` shows it).
    fn wait(
        &self,
        vip: &str,
        addr: &str,
        what: &str,
        cond: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let start = Instant::now();
        loop {
            let b = self.backend(vip, addr);
            if cond(&b) {
                return b;
            }
            assert!(
                start.elapsed() < WITHIN,
                "{vip} {addr}: timed out waiting for {what}; now {b}\n{}",
                self.process.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn reason(b: &serde_json::Value) -> &str {
    b["reason"].as_str().unwrap_or_default()
}

/// A veth link from the backends' namespace to appliance `ns`, subnet 10.99.`net`.0/24.
fn link(bk: &Netns, ns: &Netns, net: u8) {
    let (a, b) = (format!("trv{net}a"), format!("trv{net}b"));
    bk.run(&["ip", "link", "add", &b, "type", "veth", "peer", "name", &a]);
    bk.run(&["ip", "link", "set", &a, "netns", &ns.name]);
    bk.run(&["ip", "addr", "add", &format!("10.99.{net}.1/24"), "dev", &b]);
    bk.run(&["ip", "link", "set", &b, "up"]);
    ns.run(&["ip", "addr", "add", &format!("10.99.{net}.2/24"), "dev", &a]);
    ns.run(&["ip", "link", "set", &a, "up"]);
    ns.run(&[
        "ip",
        "route",
        "add",
        "10.99.0.0/24",
        "via",
        &format!("10.99.{net}.1"),
    ]);
}

#[test]
fn trusted_checkers_and_agent_checks() {
    let lb = Netns::new("tr-lb");
    let lb2 = Netns::new("tr-lb2");
    let bk = Netns::new("tr-bk");
    link(&bk, &lb, 1);
    link(&bk, &lb2, 2);
    for a in ["10.99.0.11/32", "10.99.0.12/32"] {
        bk.run(&["ip", "addr", "add", a, "dev", "lo"]);
    }
    let dir = TempDir::new("health-trust");
    let answer = dir.path("agent-answer");
    std::fs::write(&answer, "up\n").unwrap();
    let up = dir.path("agent-up");
    std::fs::write(&up, "up\n").unwrap();
    let script = dir.path("servers.py");
    std::fs::write(&script, SERVER_PY).unwrap();
    let _servers = bk.spawn(&[
        "python3",
        script.to_str().unwrap(),
        "10.99.0.11,8080",
        "10.99.0.12,8080",
        &format!("10.99.0.11,9777,{}", answer.display()),
        &format!("10.99.0.12,9777,{}", up.display()),
    ]);

    let sockets = [dir.path("a.sock"), dir.path("b.sock")];
    let instances = ["e2etr", "e2etr2"];
    for inst in instances {
        clean_instance(inst);
    }
    let cfg_a = dir.path("a.toml");
    let cfg_b = dir.path("b.toml");
    std::fs::write(
        &cfg_a,
        config(instances[0], &sockets[0], &sockets[1], false),
    )
    .unwrap();
    std::fs::write(
        &cfg_b,
        config(instances[1], &sockets[1], &sockets[0], false),
    )
    .unwrap();
    let mut a = Appliance::start(&lb.name, &cfg_a, dir.path("a.log"), sockets[0].clone());
    let b = Appliance::start(&lb2.name, &cfg_b, dir.path("b.log"), sockets[1].clone());
    for (x, what) in [(&a, "a"), (&b, "b")] {
        for addr in [B1, B2] {
            x.wait("web", addr, &format!("{what}: {addr} up with data"), |b| {
                b["state"] == "UP" && reason(b).starts_with("up: ")
            });
        }
    }

    // ---- an untrusted peer blinded to one backend -------------------------
    lb2.run(&[
        "nft",
        "add table inet trblind; add chain inet trblind out { type filter hook output priority 0; }; add rule inet trblind out ip daddr 10.99.0.11 tcp dport 8080 drop",
    ]);
    let split = a.wait("web", B1, "a split on b1", |b| {
        reason(b).starts_with("split: ")
    });
    assert_eq!(split["state"], "UP", "{split}");
    assert!(
        reason(&split).contains("/e2etr2 see it fail (")
            && reason(&split)
                .contains("/e2etr see it pass; no majority either way, state kept (up)"),
        "{split}"
    );
    // It stays that way.
    std::thread::sleep(Duration::from_millis(6 * INTERVAL_MS));
    let still = a.backend("web", B1);
    assert_eq!(still["state"], "UP", "{still}");
    assert!(reason(&still).starts_with("split: "), "{still}");

    // ---- the same peer, trusted ----------------------------------------------
    let st = a.process.stop();
    assert!(st.success(), "{}", a.process.log_text());
    // A new deployment from the file (not the intent the first run saved).
    forget_intent(instances[0]);
    std::fs::write(&cfg_a, config(instances[0], &sockets[0], &sockets[1], true)).unwrap();
    a = Appliance::start(&lb.name, &cfg_a, dir.path("a2.log"), sockets[0].clone());
    let down = a.wait("web", B1, "b1 down by the trusted peer", |b| {
        b["state"] == "DOWN"
    });
    assert!(
        reason(&down).starts_with("down: trusted checker ")
            && reason(&down).contains("/e2etr2 sees it fail, whatever the quorum: "),
        "{down}"
    );
    let b2 = a.backend("web", B2);
    assert_eq!(b2["state"], "UP", "{b2}");
    // Unblinded: it comes back.
    lb2.run(&["nft", "delete table inet trblind"]);
    a.wait("web", B1, "b1 back up", |b| b["state"] == "UP");

    // ---- the backend's agent -------------------------------------------------
    let set = |s: &str| std::fs::write(&answer, s).unwrap();
    set("drain\n");
    let d = a.wait("ag", B1, "draining", |b| b["state"] == "DRAINING");
    assert!(
        reason(&d).starts_with("draining: the backend's agent says \"drain\""),
        "{d}"
    );
    assert_eq!(d["weight"], 10, "{d}");
    // The weight changes while draining; the drain sticks (HAProxy's rule).
    set("50%\n");
    let w = a.wait("ag", B1, "weight 5 while draining", |b| b["weight"] == 5);
    assert_eq!(w["state"], "DRAINING", "{w}");
    set("ready\n");
    let r = a.wait("ag", B1, "up again", |b| b["state"] == "UP");
    assert_eq!(r["weight"], 5, "half the configured 10: {r}");
    assert!(reason(&r).ends_with("; agent weight 50%"), "{r}");
    set("down#disk full\n");
    let dn = a.wait("ag", B1, "down", |b| b["state"] == "DOWN");
    assert_eq!(
        reason(&dn),
        "down: the backend's agent says \"down#disk full\"",
        "{dn}"
    );
    set("ready 100%\n");
    a.wait("ag", B1, "up at full weight", |b| {
        b["state"] == "UP" && b["weight"] == 10
    });
    set("sideways\n");
    let bad = a.wait("ag", B1, "down on a malformed answer", |b| {
        b["state"] == "DOWN"
    });
    // Both appliances ask the agent; the trusted one may well decide first.
    assert!(
        reason(&bad).contains("malformed agent answer \"sideways\": unknown word \"sideways\""),
        "{bad}"
    );
    // The other backend's agent said "up" all along.
    assert_eq!(a.backend("ag", B2)["state"], "UP");

    drop(b);
    drop(a);
    for inst in instances {
        clean_instance(inst);
    }
}
