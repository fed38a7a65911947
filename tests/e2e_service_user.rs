//! border-dp runs as an unprivileged user with only the capabilities its
//! systemd unit keeps (`User=border`, `AmbientCapabilities=` the bounding
//! set, `NoNewPrivileges`, `XDG_RUNTIME_DIR=/run`): started the way the unit
//! starts it, under `setpriv` as uid 65534 (systemd is not PID 1 here), it
//! brings up its TAP port and kernel twin, answers ping and opens its
//! telemetry socket under /run/dpdk. Without `CAP_NET_ADMIN` it cannot
//! (TUNSETIFF), and says so in one line. /run/border and /run/dpdk are a
//! scratch directory owned by that user, bound over the host's in a private
//! mount namespace, as systemd's `RuntimeDirectory=` gives the unit its own.
//! Namespaces `cp-*`, subnet 10.152.

mod common;

use std::os::unix::fs::MetadataExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use conf::state::state_path;

const INSTANCE: &str = "e2ecpuser";
/// nobody: any uid that is not root and owns nothing else here.
const UID: u32 = 65534;

/// A `Key=` line of border-dp's unit, split on whitespace.
fn unit_values(key: &str) -> Vec<String> {
    let unit = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/systemd/border-dp@.service"),
    )
    .unwrap();
    let prefix = format!("{key}=");
    unit.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("the unit sets {key}"))
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

fn cap_bit(name: &str) -> u32 {
    match name {
        "CAP_CHOWN" => 0,
        "CAP_NET_ADMIN" => 12,
        "CAP_NET_RAW" => 13,
        "CAP_IPC_LOCK" => 14,
        "CAP_BPF" => 39,
        other => panic!("add {other}'s bit to cap_bit"),
    }
}

fn status_field(pid: u32, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"))
        .trim()
        .to_string()
}

fn mask(pid: u32, field: &str) -> u64 {
    u64::from_str_radix(&status_field(pid, field), 16).unwrap()
}

/// Binds `run` over /run/border and `dpdk` over /run/dpdk in a private mount
/// namespace, then runs border-dp --standalone in `ns` as [`UID`] with
/// `caps` ambient, inheritable and bounding, and no new privileges.
fn spawn(ns: &Netns, caps: &[String], dir: &TempDir, log: &std::path::Path) -> std::process::Child {
    let set: Vec<String> = caps
        .iter()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect();
    let set = if set.is_empty() {
        "-all".to_string()
    } else {
        format!("-all,{}", set.join(","))
    };
    let script = format!(
        r#"set -e
mkdir -p /run/border /run/dpdk
mount --bind {run} /run/border
mount --bind {dpdk} /run/dpdk
exec ip netns exec {ns} setpriv --reuid={UID} --regid={UID} --clear-groups --no-new-privs \
  --inh-caps={set} --ambient-caps={set} --bounding-set={set} -- \
  env XDG_RUNTIME_DIR=/run {bin} --standalone --config {cfg}
"#,
        run = dir.path("run").display(),
        dpdk = dir.path("dpdk").display(),
        ns = ns.name,
        bin = border_dp_bin(),
        cfg = dir.path("border.toml").display(),
    );
    let logf = std::fs::File::create(log).unwrap();
    Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(logf.try_clone().unwrap())
        .stderr(logf)
        .spawn()
        .unwrap()
}

#[test]
fn border_dp_runs_as_an_unprivileged_user_with_the_units_ambient_capabilities() {
    let caps = unit_values("AmbientCapabilities");
    assert_eq!(caps, unit_values("CapabilityBoundingSet"));
    assert_eq!(unit_values("User"), ["border"]);
    clean_instance(INSTANCE);
    let lb = Netns::new("cp-lb");
    let cli = Netns::new("cp-cli");
    let dir = TempDir::new("cpuser");
    for d in ["run", "dpdk"] {
        std::fs::create_dir_all(dir.path(d)).unwrap();
        std::os::unix::fs::chown(dir.path(d), Some(UID), Some(UID)).unwrap();
    }
    // The user must reach its files through the scratch directory.
    run(&["chmod", "0755", &dir.0.display().to_string()]);
    std::fs::write(
        dir.path("border.toml"),
        two_port_config(
            INSTANCE,
            "cp",
            "10.152.1.1/24",
            "10.152.2.1/24",
            "unix:///run/border/e2ecpuser.sock",
        ),
    )
    .unwrap();

    // Without CAP_NET_ADMIN there is no TAP port: one line, exit 1.
    let without: Vec<String> = caps
        .iter()
        .filter(|c| *c != "CAP_NET_ADMIN")
        .cloned()
        .collect();
    let log = dir.path("without.log");
    let status = spawn(&lb, &without, &dir, &log).wait().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!status.success(), "{text}");
    assert!(
        text.contains("Unable to set TUNSETIFF") && text.contains("border-dp: error: port `ext`"),
        "{text}"
    );
    clean_instance(INSTANCE);

    let log = dir.path("dp.log");
    let mut child = spawn(&lb, &caps, &dir, &log);
    let start = Instant::now();
    // unshare, ip netns exec, setpriv and env each exec the next: the
    // child is border-dp. Its state region is not root's nor ours, so
    // StateRegion::open (trusted files only) refuses it: read the log.
    let pid = child.id();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            panic!(
                "border-dp exited with {s}:\n{}",
                std::fs::read_to_string(&log).unwrap()
            );
        }
        if std::fs::read_to_string(&log)
            .unwrap()
            .contains("border-dp running")
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "not running in 30 s:\n{}",
            std::fs::read_to_string(&log).unwrap()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Not root, and exactly the unit's capabilities.
    let uids = status_field(pid, "Uid:");
    assert!(
        uids.split_whitespace().all(|u| u == UID.to_string()),
        "{uids}"
    );
    let want: u64 = caps.iter().map(|c| 1u64 << cap_bit(c)).sum();
    assert_eq!(mask(pid, "CapBnd:"), want);
    assert_eq!(mask(pid, "CapAmb:"), want);
    assert_eq!(mask(pid, "CapEff:"), want);
    assert_eq!(mask(pid, "NoNewPrivs:"), 1);
    // Its shared-memory state is its own.
    let owner = std::fs::metadata(state_path(INSTANCE)).unwrap().uid();
    assert_eq!(owner, UID);

    cli.adopt(&lb, "cp-ext", &["10.152.1.2/24"]);
    let out = cli.try_run(&["ping", "-c", "3", "-i", "0.2", "-W", "2", "10.152.1.1"]);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(out.status.success(), "ping:\n{text}");
    // EAL not running as root took $XDG_RUNTIME_DIR/dpdk: the unit's /run/dpdk.
    let telemetry = dir.path(&format!("dpdk/border-{INSTANCE}/dpdk_telemetry.v2"));
    assert!(telemetry.exists(), "{}:\n{text}", telemetry.display());
    assert_eq!(std::fs::metadata(&telemetry).unwrap().uid(), UID);

    run(&["kill", "-TERM", &pid.to_string()]);
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "exit {status}:\n{}",
        std::fs::read_to_string(&log).unwrap()
    );
    clean_instance(INSTANCE);
}
