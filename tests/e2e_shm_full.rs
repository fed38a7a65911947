//! A full shared-memory filesystem (docs/reliability.md): the
//! regions live on a 72 MiB tmpfs mounted for the test (`BORDER_SHM_DIR`)
//! and filled up. Creating a region there is a clear error at start; a
//! publish that needs a larger region fails with RESOURCE_EXHAUSTED and
//! nothing changes; a full filesystem does not stop publishes that fit the
//! preallocated arena; border-dp keeps forwarding through all of it and
//! never dies of SIGBUS.
//!
//! Tag `chs`, subnets 10.98.20.0/24 (clients) and 10.98.21.0/24 (backends).

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::small_fs::SmallFs;
use common::*;
use conf::counters::Counter;
use serde_json::Value;

const TAG: &str = "chs";
const INSTANCE: &str = "e2echs";

fn vip() -> SocketAddr {
    "10.98.20.100:80".parse().unwrap()
}

fn backend(i: u8) -> SocketAddr {
    SocketAddr::new(format!("10.98.21.{}", 11 + i).parse().unwrap(), 8080)
}

/// The config: VIP `v` over two backends, plus `big` VIPs with rings of
/// 1048573 slots (4 MiB each in the tables arena).
fn config(socket: &Path, big: u32) -> String {
    let mut c = two_port_config(
        INSTANCE,
        TAG,
        "10.98.20.1/24",
        "10.98.21.1/24",
        &format!("unix://{}", socket.display()),
    );
    c += "\n[[vip]]\nname = \"v\"\naddress = \"10.98.20.100\"\nport = 80\nprotocol = \"tcp\"\nmode = \"fullnat\"\nmaglev_table_size = 1021\n";
    for i in 0..2 {
        c += &format!(
            "\n[[vip.backend]]\naddress = \"{}\"\nport = 8080\n",
            backend(i).ip()
        );
    }
    for i in 0..big {
        c += &format!(
            "\n[[vip]]\nname = \"big{i}\"\naddress = \"10.98.20.100\"\nport = {}\nprotocol = \"tcp\"\nmode = \"fullnat\"\nmaglev_table_size = 1048573\n\n[[vip.backend]]\naddress = \"{}\"\nport = 8080\n",
            1000 + i,
            backend(0).ip()
        );
    }
    c
}

fn ctl(cfg: &Path, args: &[&str]) -> (i32, String, String) {
    let mut a = args.to_vec();
    a.extend(["--config", cfg.to_str().unwrap()]);
    borderctl(&a)
}

fn status(cfg: &Path) -> Value {
    let out = ctl(cfg, &["status", "--json"]).1;
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("status: {e}: {out}"))
}

/// Names of the backends 20 new connections reached.
fn reached(cli: &Netns) -> Vec<String> {
    let lines = tcp_names(&cli.name, vip(), 20);
    let names: Vec<String> = lines
        .iter()
        .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
        .collect();
    tally(&names).into_keys().collect()
}

/// Runs a program in `ns` and returns its exit status and output; it must
/// exit (not hang) within 30 s.
fn run_to_exit(ns: &Netns, args: &[&str]) -> (std::process::ExitStatus, String) {
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.name])
        .args(args)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .expect("run");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status, text)
}

#[test]
fn a_full_region_filesystem_is_an_error_never_a_sigbus_and_forwarding_goes_on() {
    use std::os::unix::process::ExitStatusExt;
    let fs = SmallFs::mount(TAG, "72m");
    // Every border process this test starts, and its own reads of the
    // regions, use the small filesystem.
    std::env::set_var(conf::os::SHM_DIR_ENV, &fs.path);
    clean_instance(INSTANCE);
    let lb = Netns::new(&format!("{TAG}-lb"));
    let cli = Netns::new(&format!("{TAG}-cli"));
    let bk = Netns::new(&format!("{TAG}-bk"));
    let dir = TempDir::new(TAG);
    let socket = dir.path("api.sock");
    let cfg = dir.path("border.toml");
    std::fs::write(&cfg, config(&socket, 0)).unwrap();
    let state_dir = dir.path("state");
    let state_arg = state_dir.to_str().unwrap().to_string();

    // 1. Full from the start: both processes refuse to start, with the
    //    region, the step and the system's error, and leave no file.
    fs.fill();
    let (st, text) = run_to_exit(&lb, &[border_dp_bin(), "--config", cfg.to_str().unwrap()]);
    assert_eq!(st.code(), Some(1), "border-dp: {st:?}\n{text}");
    let state_file = fs.path.join(format!("border-{INSTANCE}-state"));
    assert!(
        text.contains(&format!(
            "border-dp: error: state region {}: No space left on device (os error 28)",
            state_file.display()
        )),
        "{text}"
    );
    let (st, text) = run_to_exit(
        &lb,
        &[
            border_mgmt_bin(),
            "--config",
            cfg.to_str().unwrap(),
            "--state-dir",
            &state_arg,
        ],
    );
    assert_eq!(st.code(), Some(1), "border-mgmt: {st:?}\n{text}");
    let tables_file = fs.path.join(format!("border-{INSTANCE}-tables"));
    assert!(
        text.contains(&format!(
            "tables region {}: No space left on device (os error 28)",
            tables_file.display()
        )),
        "{text}"
    );
    assert_eq!(fs.names(), ["filler"], "no region or temporary file left");
    fs.free();

    // 2. Room for the regions (a 64 MiB tables arena and the state region):
    //    both run, connections reach both backends.
    let mut mgmt = BorderMgmt::start_with(
        None,
        &cfg,
        dir.path("mgmt.log"),
        &["--state-dir", &state_arg],
    );
    let mut dp = BorderDp::start_following(&lb, &dir, INSTANCE, &config(&socket, 0));
    wait_iface(&lb, &format!("{TAG}-ext"));
    wait_iface(&lb, &format!("{TAG}-int"));
    cli.adopt(&lb, &format!("{TAG}-ext"), &["10.98.20.2/24"]);
    bk.adopt(
        &lb,
        &format!("{TAG}-int"),
        &["10.98.21.11/24", "10.98.21.12/24"],
    );
    cli.run(&["ip", "route", "add", "default", "via", "10.98.20.1"]);
    let _servers = TcpBackends::start(&bk.name, &[("b0", backend(0)), ("b1", backend(1))]);
    dp.wait_applied(1);
    assert_eq!(reached(&cli), ["b0", "b1"]);

    // 3. A config that needs a larger region than the filesystem has room
    //    for: ApplyConfig fails with RESOURCE_EXHAUSTED naming the region
    //    and the error; nothing changes; border-dp forwards on.
    let before = status(&cfg);
    let generation = before["publisher"]["published_generation"]
        .as_u64()
        .unwrap();
    let adopted = dp.counter(Counter::TablesAdopted);
    let big = dir.path("big.toml");
    std::fs::write(&big, config(&socket, 6)).unwrap();
    let (code, _, err) = ctl(&cfg, &["apply", big.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(
            "ResourceExhausted: cannot publish the tables: the config needs a larger tables region"
        ),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "tables region {}: No space left on device (os error 28); border-dp goes on with the last tables",
            tables_file.display()
        )),
        "{err}"
    );
    let after = status(&cfg);
    assert_eq!(
        after["publisher"]["published_generation"], generation,
        "{after}"
    );
    assert_eq!(after["vips"], before["vips"], "the running config stays");
    assert_eq!(
        after["publisher"]["config_applied_unix_ms"],
        before["publisher"]["config_applied_unix_ms"]
    );
    assert_eq!(
        dp.counter(Counter::TablesAdopted),
        adopted,
        "no table swapped"
    );
    assert_eq!(
        fs.names(),
        [
            format!("border-{INSTANCE}-carry-0"),
            format!("border-{INSTANCE}-conns"),
            format!("border-{INSTANCE}-flows-0"),
            format!("border-{INSTANCE}-state"),
            format!("border-{INSTANCE}-tables")
        ],
        "the half-made region is gone; the others stay"
    );
    assert_eq!(reached(&cli), ["b0", "b1"], "border-dp forwards on");
    // The refused config was not saved: a restart of border-mgmt runs the
    // last one that was applied.
    let saved = std::fs::read_to_string(state_dir.join("intent.json")).unwrap();
    assert!(!saved.contains("big0"), "the refused config was saved");

    // 4. The filesystem entirely full: changes that fit the preallocated
    //    arena still publish, workers adopt them (first touches of arena
    //    and statistics pages included), nothing dies of SIGBUS.
    fs.fill();
    let b0 = backend(0).to_string();
    let out = ctl(&cfg, &["drain", "v", &b0]);
    assert_eq!(out.0, 0, "{out:?}");
    dp.wait_applied(generation + 1);
    assert_eq!(reached(&cli), ["b1"]);
    let out = ctl(&cfg, &["undrain", "v", &b0]);
    assert_eq!(out.0, 0, "{out:?}");
    dp.wait_applied(generation + 2);
    assert_eq!(reached(&cli), ["b0", "b1"]);
    assert_eq!(dp.counter(Counter::TablesRefused), 0);

    // Both processes end normally: no signal, status 0.
    let st = dp.stop();
    assert_eq!(
        (st.code(), st.signal()),
        (Some(0), None),
        "{}",
        dp.log_text()
    );
    let st = mgmt.stop();
    assert_eq!(
        (st.code(), st.signal()),
        (Some(0), None),
        "{}",
        mgmt.log_text()
    );
    std::thread::sleep(Duration::from_millis(10));
    clean_instance(INSTANCE);
}
