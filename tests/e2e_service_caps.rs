//! border-dp runs with nothing but the capabilities its systemd unit
//! leaves it: started as the unit starts it (`NoNewPrivileges`, the unit's
//! `CapabilityBoundingSet`, nothing inheritable; systemd is not PID 1 here,
//! so `setpriv` applies the same limits), it brings up its TAP ports and
//! kernel twins, answers ping and opens its telemetry socket. Without
//! `CAP_NET_ADMIN` it cannot, and says so in one line. Namespaces `op-*`,
//! subnet 10.95.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use conf::state::{state_path, RunState, StateRegion};

const INSTANCE: &str = "e2eopcaps";

/// The unit's `CapabilityBoundingSet=` as capability names (`CAP_NET_ADMIN`).
fn unit_capabilities() -> Vec<String> {
    let unit = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/systemd/border-dp@.service"),
    )
    .unwrap();
    let line = unit
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .expect("the unit sets CapabilityBoundingSet");
    line.split_whitespace().map(str::to_string).collect()
}

/// `setpriv` arguments for a bounding set of `caps` and nothing else.
fn setpriv_args(caps: &[String]) -> Vec<String> {
    let set: Vec<String> = caps
        .iter()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect();
    vec![
        "setpriv".into(),
        "--no-new-privs".into(),
        "--inh-caps=-all".into(),
        format!("--bounding-set=-all,{}", set.join(",")),
        "--".into(),
    ]
}

/// The bit of each capability in /proc/<pid>/status masks.
fn cap_bit(name: &str) -> u32 {
    match name {
        "CAP_CHOWN" => 0,
        "CAP_NET_ADMIN" => 12,
        "CAP_NET_RAW" => 13,
        "CAP_IPC_LOCK" => 14,
        "CAP_SYS_ADMIN" => 21,
        "CAP_BPF" => 39,
        other => panic!("add {other}'s bit to cap_bit"),
    }
}

fn status_mask(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"))
        .trim();
    u64::from_str_radix(hex, 16).unwrap()
}

/// Starts border-dp --standalone in `ns` under `setpriv`.
fn spawn(
    ns: &Netns,
    caps: &[String],
    cfg: &std::path::Path,
    log: &std::path::Path,
) -> std::process::Child {
    let mut args = vec!["netns".to_string(), "exec".into(), ns.name.clone()];
    args.extend(setpriv_args(caps));
    args.extend([
        border_dp_bin().to_string(),
        "--standalone".into(),
        "--config".into(),
    ]);
    args.push(cfg.display().to_string());
    let logf = std::fs::File::create(log).unwrap();
    Command::new("ip")
        .args(&args)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(logf.try_clone().unwrap())
        .stderr(logf)
        .spawn()
        .unwrap()
}

#[test]
fn border_dp_runs_within_its_units_capability_bounding_set() {
    let caps = unit_capabilities();
    assert!(!caps.iter().any(|c| c == "CAP_SYS_ADMIN"), "{caps:?}");
    clean_instance(INSTANCE);
    let lb = Netns::new("op-lb");
    let cli = Netns::new("op-cli");
    let dir = TempDir::new("opcaps");
    let cfg = dir.path("border.toml");
    std::fs::write(
        &cfg,
        two_port_config(
            INSTANCE,
            "op",
            "10.95.1.1/24",
            "10.95.2.1/24",
            "unix:///run/border/e2eopcaps.sock",
        ),
    )
    .unwrap();

    // Without CAP_NET_ADMIN there are no TAP ports: one line, exit 1.
    let without: Vec<String> = caps
        .iter()
        .filter(|c| *c != "CAP_NET_ADMIN")
        .cloned()
        .collect();
    let log = dir.path("without.log");
    let status = spawn(&lb, &without, &cfg, &log).wait().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!status.success(), "{text}");
    assert!(text.contains("error"), "{text}");

    let log = dir.path("dp.log");
    let mut child = spawn(&lb, &caps, &cfg, &log);
    let start = Instant::now();
    let pid = loop {
        if let Some(s) = child.try_wait().unwrap() {
            panic!(
                "border-dp exited with {s}:\n{}",
                std::fs::read_to_string(&log).unwrap()
            );
        }
        if let Ok(r) = StateRegion::open(&state_path(INSTANCE)) {
            if r.run_state() == RunState::Running {
                break r.pid();
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "not running in 30 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    // The limits held: exactly the unit's bounding set, no way to gain more.
    let want: u64 = caps.iter().map(|c| 1u64 << cap_bit(c)).sum();
    assert_eq!(status_mask(pid, "CapBnd:"), want);
    assert_eq!(status_mask(pid, "CapEff:") & !want, 0);
    assert_eq!(status_mask(pid, "NoNewPrivs:"), 1);

    cli.adopt(&lb, "op-ext", &["10.95.1.2/24"]);
    let out = cli.try_run(&["ping", "-c", "3", "-i", "0.2", "-W", "2", "10.95.1.1"]);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(out.status.success(), "ping:\n{text}");
    assert!(
        std::path::Path::new(&format!("/run/dpdk/border-{INSTANCE}/dpdk_telemetry.v2")).exists(),
        "{text}"
    );

    // SIGTERM, as systemd stops the unit.
    run(&["kill", "-TERM", &pid.to_string()]);
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "exit {status}:\n{}",
        std::fs::read_to_string(&log).unwrap()
    );
    clean_instance(INSTANCE);
}
