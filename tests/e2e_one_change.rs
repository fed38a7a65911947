//! One change at a time against a live border-mgmt and a border-dp that
//! follows its tables, with real kernels on both sides:
//!
//! * `borderctl backend add`: the new backend takes new connections;
//!   `backend remove`: the removed one gets none; both survive a kill -9
//!   and restart of border-mgmt (saved as an apply is);
//! * `borderctl vip add FILE`: the VIP serves; `vip remove`: it no longer
//!   does;
//! * bad input (unknown VIP, a backend listed twice, an address that is
//!   not one, a VIP that overlaps another) is refused with one clear line
//!   and exit 1, and changes nothing.
//!
//! Tags `tk3` and `tk4`: namespaces `<tag>-lb|cli|bk`, instances
//! `e2e<tag>`; client side 10.146.0.0/24, backend side 10.147.0.0/24 (in
//! each test's own namespaces).

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use common::*;

fn ext(host: u8) -> String {
    format!("10.146.0.{host}")
}

fn int(host: u8) -> String {
    format!("10.147.0.{host}")
}

fn vip_at(host: u8) -> SocketAddr {
    SocketAddr::new(ext(host).parse().unwrap(), 80)
}

fn backend(i: u8) -> SocketAddr {
    SocketAddr::new(int(11 + i).parse().unwrap(), 8080)
}

struct Topo {
    tag: &'static str,
    dp: BorderDp,
    mgmt: BorderMgmt,
    cli: Netns,
    _bk: Netns,
    _lb: Netns,
    cfg: PathBuf,
    dir: TempDir,
    _servers: TcpBackends,
}

/// border-mgmt (publishing) and border-dp (following) on a config whose VIP
/// `v` (10.146.0.100:80) has backends b0 and b1; TCP servers listen on b0,
/// b1 and b2.
fn start(tag: &'static str) -> Topo {
    let instance = format!("e2e{tag}");
    clean_instance(&instance);
    let lb = Netns::new(&format!("{tag}-lb"));
    let cli = Netns::new(&format!("{tag}-cli"));
    let bk = Netns::new(&format!("{tag}-bk"));
    let dir = TempDir::new(tag);
    let socket = dir.path("api.sock");
    let mut config = two_port_config(
        &instance,
        tag,
        &format!("{}/24", ext(1)),
        &format!("{}/24", int(1)),
        &format!("unix://{}", socket.display()),
    );
    config += &format!(
        "\n# the one VIP this test starts with\n[[vip]]\nname = \"v\"\naddress = \"{}\"\nport = 80\nmaglev_table_size = 1021\n",
        ext(100)
    );
    for i in 0..2 {
        config += &format!(
            "\n[[vip.backend]]\naddress = \"{}\"\nport = 8080\n",
            backend(i).ip()
        );
    }
    let cfg = dir.path("border.toml");
    std::fs::write(&cfg, &config).unwrap();
    let mgmt = BorderMgmt::start(&cfg, dir.path("mgmt.log"));
    let dp = BorderDp::start_following(&lb, &dir, &instance, &config);
    wait_iface(&lb, &format!("{tag}-ext"));
    wait_iface(&lb, &format!("{tag}-int"));
    cli.adopt(&lb, &format!("{tag}-ext"), &[&format!("{}/24", ext(2))]);
    let bk_addrs: Vec<String> = (0..3).map(|i| format!("{}/24", backend(i).ip())).collect();
    let refs: Vec<&str> = bk_addrs.iter().map(String::as_str).collect();
    bk.adopt(&lb, &format!("{tag}-int"), &refs);
    cli.run(&["ip", "route", "add", "default", "via", &ext(1)]);
    dp.wait_applied(1);
    let servers = TcpBackends::start(
        &bk.name,
        &[("b0", backend(0)), ("b1", backend(1)), ("b2", backend(2))],
    );
    Topo {
        tag,
        dp,
        mgmt,
        cli,
        _bk: bk,
        _lb: lb,
        cfg,
        dir,
        _servers: servers,
    }
}

impl Topo {
    fn with_config(&self, args: &[&str]) -> Vec<String> {
        let mut a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        a.extend(["--config".into(), self.cfg.to_str().unwrap().into()]);
        a
    }

    /// borderctl `args` must succeed; waits until border-dp runs the
    /// generation it names, and returns its output.
    fn change(&self, args: &[&str]) -> String {
        let a = self.with_config(args);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let out = borderctl_ok(&a);
        let g: u64 = out
            .split("generation ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no generation in {out:?}"));
        self.dp.wait_applied(g);
        out
    }

    /// borderctl `args` must fail with exit 1 and one line; that line.
    fn refused(&self, args: &[&str]) -> String {
        let a = self.with_config(args);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let (code, _, err) = borderctl(&a);
        assert_eq!(code, 1, "borderctl {a:?}: {err}");
        borderctl_err(&a)
    }

    fn running_config(&self) -> String {
        let a = self.with_config(&["config", "show"]);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        borderctl_ok(&a)
    }

    /// The backends `n` new connections to the VIP reached.
    fn reached(&self, n: usize) -> std::collections::BTreeMap<String, usize> {
        let lines = tcp_names(&self.cli.name, vip_at(100), n);
        let names: Vec<String> = lines
            .iter()
            .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
            .collect();
        tally(&names)
    }
}

impl Drop for Topo {
    fn drop(&mut self) {
        clean_instance(&format!("e2e{}", self.tag));
    }
}

#[test]
fn backend_added_takes_connections_removed_gets_none_and_both_survive_a_restart() {
    let mut t = start("tk3");
    let before = t.reached(60);
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        ["b0", "b1"],
        "{before:?}"
    );

    let b2 = backend(2).to_string();
    let out = t.change(&["backend", "add", "v", &b2, "--weight", "2"]);
    assert!(
        out.starts_with(&format!("v: backend {b2} added: generation ")),
        "{out}"
    );
    let with_three = t.reached(120);
    assert_eq!(with_three.len(), 3, "{with_three:?}");
    assert!(with_three["b2"] > 20, "weight 2 of 4: {with_three:?}");

    let b0 = backend(0).to_string();
    t.change(&["backend", "remove", "v", &b0]);
    let without_b0 = t.reached(90);
    assert_eq!(
        without_b0.keys().collect::<Vec<_>>(),
        ["b1", "b2"],
        "{without_b0:?}"
    );

    // Bad input: one line each, exit 1, nothing changed.
    let published = |t: &Topo| {
        let a = t.with_config(&["status", "--json"]);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let v: serde_json::Value = serde_json::from_str(&borderctl(&a).1).unwrap();
        v["publisher"]["published_generation"].as_u64().unwrap()
    };
    let g = published(&t);
    assert_eq!(
        t.refused(&["backend", "add", "nope", &b0]),
        "no VIP `nope` in the running config"
    );
    let twice = t.refused(&["backend", "add", "v", &backend(1).to_string()]);
    assert!(
        twice.starts_with("the running config with this change:")
            && twice.contains(&format!("{} is listed twice", backend(1))),
        "{twice}"
    );
    assert_eq!(
        t.refused(&["backend", "add", "v", "10.147.0.300:8080"]),
        "backend `10.147.0.300:8080`: expected addr:port, e.g. 10.20.0.11:8080 or [2001:db8::11]:8080"
    );
    let multicast = t.refused(&["backend", "add", "v", "224.0.0.5:8080"]);
    assert!(
        multicast.contains("224.0.0.5 is not a unicast address"),
        "{multicast}"
    );
    assert_eq!(
        t.refused(&["backend", "remove", "v", &b0]),
        format!("VIP `v` has no backend {b0}")
    );
    assert_eq!(published(&t), g, "a refused change published nothing");

    // Saved as an apply is: border-mgmt restarted runs the changed config.
    t.mgmt.kill9();
    t.mgmt = BorderMgmt::start(&t.cfg, t.dir.path("mgmt2.log"));
    let running = t.running_config();
    assert!(
        running.contains("# the one VIP this test starts with"),
        "{running}"
    );
    assert!(
        running.contains(&format!("\"{}\"", backend(2).ip())),
        "{running}"
    );
    assert!(
        !running.contains(&format!("\"{}\"", backend(0).ip())),
        "{running}"
    );
    let after = t.reached(60);
    assert_eq!(after.keys().collect::<Vec<_>>(), ["b1", "b2"], "{after:?}");
}

#[test]
fn vip_added_serves_and_removed_does_not() {
    let t = start("tk4");
    let file = t.dir.path("w.toml");
    std::fs::write(
        &file,
        format!(
            "[[vip]]\nname = \"w\"\naddress = \"{}\"\nport = 80\nmaglev_table_size = 1021\n\n[[vip.backend]]\naddress = \"{}\"\nport = 8080\n",
            ext(101),
            backend(2).ip()
        ),
    )
    .unwrap();
    let file = file.to_str().unwrap().to_string();
    let out = t.change(&["vip", "add", &file]);
    assert!(
        out.starts_with(&format!("{file}: VIP added: generation ")),
        "{out}"
    );
    let names = tcp_names(&t.cli.name, vip_at(101), 10);
    assert!(names.iter().all(|l| l.starts_with("b2 ")), "{names:?}");
    // The first VIP is untouched.
    assert!(!t.reached(30).contains_key("b2"));

    // Overlaps and names clash as they would in a whole config.
    let clash = t.dir.path("clash.toml");
    std::fs::write(
        &clash,
        format!(
            "[[vip]]\nname = \"x\"\naddress = \"{}\"\nport = 80\n",
            ext(100)
        ),
    )
    .unwrap();
    let overlap = t.refused(&["vip", "add", clash.to_str().unwrap()]);
    assert!(
        overlap.contains(&format!(
            "{} port 80/tcp is already served by vip \"v\" (vip[0])",
            ext(100)
        )),
        "{overlap}"
    );
    let again = t.refused(&["vip", "add", &file]);
    assert!(
        again.contains("\"w\" is already the name of vip[1]"),
        "{again}"
    );
    let not_a_vip = t.dir.path("bad.toml");
    std::fs::write(&not_a_vip, "[mgmt]\nlisten = \"x\"\n").unwrap();
    let bad = t.refused(&["vip", "add", not_a_vip.to_str().unwrap()]);
    assert!(
        bad.starts_with("the VIP to add: `mgmt` is not part of a VIP"),
        "{bad}"
    );

    t.change(&["vip", "remove", "w"]);
    let gone = in_netns(&t.cli.name, || {
        std::net::TcpStream::connect_timeout(&vip_at(101), Duration::from_secs(2)).is_err()
    })
    .join()
    .unwrap();
    assert!(gone, "the removed VIP still accepts connections");
    assert_eq!(
        t.refused(&["vip", "remove", "w"]),
        "no VIP `w` in the running config"
    );
    assert_eq!(t.reached(30).len(), 2);
}
