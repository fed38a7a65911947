//! `borderctl config show` and `borderctl health` against a live
//! border-mgmt: the config shown is the file it loaded (parsed back, with
//! its path), then the one `borderctl apply` gave it (source `<api>`); a
//! health-checked backend shows up, and down once its server stops.
//!
//! No dataplane and no namespaces: border-mgmt probes two TCP servers on
//! 127.0.0.1; the null port uses 10.124.0.0/24. Instances are prefixed `ev-`.

mod common;

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::fleet::wait_for;
use common::{borderctl, borderctl_ok, clean_instance, null_port_config, BorderMgmt, TempDir};

/// A TCP server that accepts and closes connections until stopped; once
/// stopped its port refuses connections.
struct TcpServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TcpServer {
    fn start() -> TcpServer {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let addr = l.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((s, _)) => drop(s),
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        TcpServer {
            addr,
            stop,
            thread: Some(thread),
        }
    }

    fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

impl Drop for TcpServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn config(instance: &str, socket: &Path, backends: &[SocketAddr], extra_vip: bool) -> String {
    let mut c = null_port_config(
        instance,
        "10.124.0.1",
        &format!("unix://{}", socket.display()),
    );
    c += "\n[[vip]]\nname = \"web\"\naddress = \"10.124.0.100\"\nport = 80\n\
          maglev_table_size = 1009\n\
          [vip.health]\nkind = \"tcp\"\ninterval_ms = 200\ntimeout_ms = 100\nrise = 1\nfall = 1\n";
    for b in backends {
        c += &format!(
            "[[vip.backend]]\naddress = \"{}\"\nport = {}\n",
            b.ip(),
            b.port()
        );
    }
    if extra_vip {
        c += "\n[[vip]]\nname = \"api\"\naddress = \"10.124.0.101\"\nport = 443\n\
              maglev_table_size = 1009\n[[vip.backend]]\naddress = \"10.124.0.21\"\nport = 8443\n";
    }
    c
}

fn json(args: &[&str]) -> serde_json::Value {
    let out = borderctl_ok(args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {out}"))
}

/// `health --json` and its exit code.
fn health(server: &str) -> (i32, serde_json::Value) {
    let (code, out, err) = borderctl(&["health", "--server", server, "--json"]);
    assert!(code == 0 || code == 1, "exit {code}: {err}");
    let v = serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"));
    (code, v)
}

/// The verdict of `backend`, with ` (no data)` when no fresh probe decided it.
fn verdict(h: &serde_json::Value, backend: SocketAddr) -> String {
    let b = h["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["backend"] == backend.to_string().as_str())
        .unwrap_or_else(|| panic!("no {backend} in {h}"));
    let v = b["verdict"].as_str().unwrap();
    if b["no_data"] == true {
        format!("{v} (no data)")
    } else {
        v.to_string()
    }
}

#[test]
fn config_show_and_health_end_to_end() {
    let dir = TempDir::new("ev");
    let instance = format!("ev-{}", std::process::id());
    clean_instance(&instance);
    let socket = dir.path("mgmt.sock");
    let server = format!("unix://{}", socket.display());
    let mut stays = TcpServer::start();
    let mut stops = TcpServer::start();
    let cfg_path = dir.path("border.toml");
    let first = config(&instance, &socket, &[stays.addr, stops.addr], false);
    std::fs::write(&cfg_path, &first).unwrap();
    let mut mgmt = BorderMgmt::start(&cfg_path, dir.path("mgmt.log"));

    // config show: the loaded file, with its path.
    let shown = json(&["config", "show", "--server", &server, "--json"]);
    assert_eq!(shown["source"], cfg_path.to_str().unwrap(), "{shown}");
    assert_eq!(shown["toml"], first.as_str(), "{shown}");
    let first_at = shown["applied_at"].as_str().unwrap().to_string();
    assert!(first_at.ends_with('Z'), "{first_at}");
    let text = borderctl_ok(&["config", "show", "--server", &server]);
    assert!(
        text.starts_with(&format!("# source: {}\n", cfg_path.display())),
        "{text}"
    );
    let parsed: toml::Value = toml::from_str(&text).unwrap();
    let vips = parsed["vip"].as_array().unwrap();
    assert_eq!(vips.len(), 1, "{text}");
    assert_eq!(vips[0]["address"].as_str(), Some("10.124.0.100"));

    // health: both backends up (exit 0), then the stopped one down (exit 1)
    // while the other stays up.
    wait_for("both backends up", Duration::from_secs(15), || {
        let (code, h) = health(&server);
        code == 0 && verdict(&h, stays.addr) == "up" && verdict(&h, stops.addr) == "up"
    });
    let (_, h) = health(&server);
    assert_eq!(h["quorum"], 1, "{h}");
    let up = h["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["backend"] == stays.addr.to_string().as_str())
        .unwrap()
        .clone();
    assert!(
        !up["observations"].as_array().unwrap().is_empty(),
        "the local probe's last observation: {h}"
    );
    let table = borderctl_ok(&["health", "--server", &server]);
    assert!(table.contains("VERDICT"), "{table}");
    assert!(table.contains(&stays.addr.to_string()), "{table}");

    stops.stop();
    wait_for("the stopped backend down", Duration::from_secs(15), || {
        let (code, h) = health(&server);
        code == 1 && verdict(&h, stops.addr) == "down" && verdict(&h, stays.addr) == "up"
    });
    let (code, out, _) = borderctl(&["health", "--server", &server]);
    assert_eq!(code, 1, "{out}");
    let down_row = out
        .lines()
        .find(|l| l.contains(&stops.addr.to_string()))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(down_row.contains("down"), "{out}");

    // apply a changed config: shown with the new source.
    let second = config(&instance, &socket, &[stays.addr, stops.addr], true);
    let new_path = dir.path("new.toml");
    std::fs::write(&new_path, &second).unwrap();
    borderctl_ok(&["apply", new_path.to_str().unwrap(), "--server", &server]);
    let shown = json(&["config", "show", "--server", &server, "--json"]);
    assert_eq!(shown["source"], "<api>", "{shown}");
    assert_eq!(shown["toml"], second.as_str(), "{shown}");
    assert!(
        shown["applied_at"].as_str().unwrap() >= first_at.as_str(),
        "{shown}"
    );
    let parsed: toml::Value = toml::from_str(shown["toml"].as_str().unwrap()).unwrap();
    let vips = parsed["vip"].as_array().unwrap();
    assert_eq!(vips.len(), 2);
    assert_eq!(vips[1]["address"].as_str(), Some("10.124.0.101"));
    let text = borderctl_ok(&["config", "show", "--server", &server]);
    assert!(
        text.starts_with("# source: <api> (applied over the API)\n"),
        "{text}"
    );

    let st = mgmt.stop();
    assert!(st.success(), "{st}");
    stays.stop();
    clean_instance(&instance);
}
