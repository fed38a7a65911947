//! Running border as a service (docs/operations.md): the systemd units pass
//! `systemd-analyze verify` and hold the hardening they promise,
//! `scripts/install.sh` puts every file where the units expect it with its
//! mode, and the Debian package built by `cargo deb` holds the same files
//! and unpacks into a throwaway root where the units verify again.
//! border-gw runs within its unit's capability bounding set (`setpriv`).
//!
//! systemd is not PID 1 here: `systemd-analyze verify --root=DIR --man=no`
//! checks the units against DIR alone, so DIR gets the host's `.target`
//! units and `kill` (ExecReload) beside what is installed. No namespaces,
//! no network.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const UNITS: [&str; 3] = [
    "border-dp@.service",
    "border-mgmt@.service",
    "border-gw@.service",
];
/// Group border may open the vfio groups (border-dp runs as user border).
const UDEV_RULES: &str = "60-border-vfio.rules";
const BINARIES: [&str; 4] = ["border-dp", "border-mgmt", "border-gw", "borderctl"];

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Where cargo put the binaries this test was built with (target/debug).
fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_border-dp"))
        .parent()
        .unwrap()
        .to_path_buf()
}

struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!("border-units-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn install_sh(root: &Path, prefix: &str) {
    run_ok(
        Command::new("bash")
            .arg(repo().join("scripts/install.sh"))
            .env("DESTDIR", root)
            .env("PREFIX", prefix)
            .env("BIN_DIR", bin_dir()),
    );
}

/// Every regular file under `root` (relative path -> mode bits).
fn tree(root: &Path) -> BTreeMap<String, u32> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, u32>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let meta = std::fs::symlink_metadata(e.path()).unwrap();
            if meta.is_dir() {
                walk(root, &e.path(), out);
            } else if meta.is_file() {
                let rel = e.path().strip_prefix(root).unwrap().display().to_string();
                out.insert(rel, meta.permissions().mode() & 0o7777);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// What both installs must hold under `prefix` (without the leading `/`);
/// man pages as the package has them when `man_suffix` is `.gz`.
fn expected(prefix: &str) -> BTreeMap<String, u32> {
    expected_with(prefix, "")
}

fn expected_with(prefix: &str, man_suffix: &str) -> BTreeMap<String, u32> {
    let mut want = BTreeMap::new();
    for b in BINARIES {
        want.insert(format!("{prefix}/bin/{b}"), 0o755);
    }
    for u in UNITS {
        want.insert(format!("{prefix}/lib/systemd/system/{u}"), 0o644);
    }
    want.insert("etc/border/border.example.toml".into(), 0o644);
    want.insert(format!("{prefix}/lib/udev/rules.d/{UDEV_RULES}"), 0o644);
    want.insert(format!("{prefix}/share/border/grafana/border.json"), 0o644);
    want.insert(
        format!("{prefix}/share/border/prometheus/border-rules.yml"),
        0o644,
    );
    want.insert(format!("{prefix}/share/doc/border/README.md"), 0o644);
    for d in std::fs::read_dir(repo().join("deploy/examples")).unwrap() {
        let name = d.unwrap().file_name().into_string().unwrap();
        want.insert(format!("{prefix}/share/doc/border/examples/{name}"), 0o644);
    }
    for d in std::fs::read_dir(repo().join("docs")).unwrap() {
        let name = d.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".md") {
            want.insert(format!("{prefix}/share/doc/border/{name}"), 0o644);
        }
    }
    for d in std::fs::read_dir(repo().join("deploy/man")).unwrap() {
        let name = d.unwrap().file_name().into_string().unwrap();
        want.insert(format!("{prefix}/share/man/man1/{name}{man_suffix}"), 0o644);
    }
    let zsh = if prefix == "usr" {
        "vendor-completions"
    } else {
        "site-functions"
    };
    for f in [
        "bash-completion/completions/borderctl".to_string(),
        format!("zsh/{zsh}/_borderctl"),
        "fish/vendor_completions.d/borderctl.fish".to_string(),
    ] {
        want.insert(format!("{prefix}/share/{f}"), 0o644);
    }
    assert!(
        want.keys().any(|k| k.ends_with("/man1/border-dp.1"))
            || want.keys().any(|k| k.ends_with("/man1/border-dp.1.gz")),
        "the man pages are in deploy/man"
    );
    want
}

/// Adds to `root` what `systemd-analyze verify --root` needs beyond the
/// installed files: the targets the units hang off and `/bin/kill`.
fn verify_units(root: &Path, instance: &str) {
    let units = root.join("usr/lib/systemd/system");
    std::fs::create_dir_all(&units).unwrap();
    for e in std::fs::read_dir("/usr/lib/systemd/system").unwrap() {
        let e = e.unwrap();
        if e.file_name().to_string_lossy().ends_with(".target") {
            std::fs::copy(e.path(), units.join(e.file_name())).unwrap();
        }
    }
    std::fs::create_dir_all(root.join("usr/bin")).unwrap();
    std::fs::copy("/usr/bin/kill", root.join("usr/bin/kill")).unwrap();
    if !root.join("bin").exists() {
        std::os::unix::fs::symlink("usr/bin", root.join("bin")).unwrap();
    }
    for u in UNITS {
        let unit = u.replace("@.", &format!("@{instance}."));
        let out = Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .arg(format!("--root={}", root.display()))
            .arg(&unit)
            .output()
            .expect("systemd-analyze (Debian package systemd)");
        let errors = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && errors.trim().is_empty(),
            "systemd-analyze verify {unit}: {}\n{errors}",
            out.status
        );
    }
}

/// `Key=value` lines of a unit, values of repeated keys joined by spaces.
fn unit_keys(text: &str) -> BTreeMap<String, String> {
    let mut keys: BTreeMap<String, String> = BTreeMap::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') || line.starts_with('[') {
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            let e = keys.entry(k.to_string()).or_default();
            if !e.is_empty() {
                e.push(' ');
            }
            e.push_str(v);
        }
    }
    keys
}

#[test]
fn units_are_hardened_as_documented() {
    let dp = unit_keys(
        &std::fs::read_to_string(repo().join("deploy/systemd/border-dp@.service")).unwrap(),
    );
    let mgmt = unit_keys(
        &std::fs::read_to_string(repo().join("deploy/systemd/border-mgmt@.service")).unwrap(),
    );
    for (name, u) in [("border-dp", &dp), ("border-mgmt", &mgmt)] {
        for (k, v) in [
            ("ProtectSystem", "strict"),
            ("NoNewPrivileges", "yes"),
            ("ProtectHome", "yes"),
            ("PrivateTmp", "yes"),
            ("ProtectKernelModules", "yes"),
            ("User", "border"),
            ("Group", "border"),
            ("UnsetEnvironment", "RUNTIME_DIRECTORY"),
        ] {
            assert_eq!(u.get(k).map(String::as_str), Some(v), "{name}: {k}");
        }
        assert!(
            u["ExecStart"].contains(&format!("/usr/bin/{name} --config /etc/border/%i.toml")),
            "{name}: {}",
            u["ExecStart"]
        );
        assert!(
            !u["CapabilityBoundingSet"].contains("CAP_SYS_ADMIN"),
            "{name}"
        );
        // Not root: what it keeps must be ambient, and no more than bounded.
        assert_eq!(
            u["AmbientCapabilities"], u["CapabilityBoundingSet"],
            "{name}"
        );
        assert!(u["ReadWritePaths"].contains("/run/border"), "{name}");
        assert!(u["ReadWritePaths"].contains("/dev/shm"), "{name}");
    }
    // Crash-only: systemd restarts a dataplane that died, however it died.
    assert_eq!(dp["Restart"], "always");
    assert!(dp["ReadWritePaths"].contains("-/dev/hugepages"));
    assert!(
        dp["ReadWritePaths"].contains("/run/dpdk"),
        "EAL's runtime dir"
    );
    // EAL not running as root puts its runtime directory under
    // $XDG_RUNTIME_DIR/dpdk: /run/dpdk, where dpdk-telemetry.py looks.
    assert_eq!(dp["Environment"], "XDG_RUNTIME_DIR=/run");
    assert!(dp["RuntimeDirectory"].contains("dpdk"));
    assert_eq!(
        dp["CapabilityBoundingSet"],
        "CAP_NET_ADMIN CAP_NET_RAW CAP_BPF CAP_IPC_LOCK CAP_CHOWN"
    );
    assert_eq!(mgmt["CapabilityBoundingSet"], "CAP_CHOWN");
    assert_eq!(mgmt["StateDirectory"], "border", "/var/lib/border");
    assert!(mgmt["After"].contains("gobgpd.service"));
    assert!(mgmt["Wants"].contains("gobgpd.service"));
    assert!(mgmt["After"].contains("border-dp@%i.service"));
}

#[test]
fn the_gateway_unit_is_hardened_and_drains_on_stop() {
    let gw = unit_keys(
        &std::fs::read_to_string(repo().join("deploy/systemd/border-gw@.service")).unwrap(),
    );
    for (k, v) in [
        ("ProtectSystem", "strict"),
        ("NoNewPrivileges", "yes"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("PrivateDevices", "yes"),
        ("ProtectKernelModules", "yes"),
        ("MemoryDenyWriteExecute", "yes"),
        ("SystemCallFilter", "@system-service"),
        ("AmbientCapabilities", ""),
        // Binding below 1024 at most; nothing else of root's.
        ("CapabilityBoundingSet", "CAP_NET_BIND_SERVICE"),
        (
            "RestrictAddressFamilies",
            "AF_UNIX AF_INET AF_INET6 AF_NETLINK",
        ),
        ("Restart", "on-failure"),
        ("ConditionPathExists", "/etc/border/gw-%i.toml"),
        (
            "ExecStartPre",
            "/usr/bin/border-gw --check-config /etc/border/gw-%i.toml",
        ),
        (
            "ExecStart",
            "/usr/bin/border-gw --config /etc/border/gw-%i.toml --log-format journald",
        ),
        ("Documentation", "file:/usr/share/doc/border/fleet.md"),
    ] {
        assert_eq!(gw.get(k).map(String::as_str), Some(v), "border-gw: {k}");
    }
    // Nothing writable: no state on disk.
    assert!(!gw.contains_key("ReadWritePaths"));
    assert!(!gw.contains_key("StateDirectory"));
    // A drain (SIGTERM) takes up to 3 s for busy tunnels, then Redis.
    let stop: u64 = gw["TimeoutStopSec"].parse().unwrap();
    assert!(stop >= 10, "{stop}");
    // Every tunnel is a file descriptor.
    let nofile: u64 = gw["LimitNOFILE"].parse().unwrap();
    assert!(nofile >= 65536, "{nofile}");
    // The flags the unit passes exist (cli_help checks the docs).
    let help = run_ok(Command::new(env!("CARGO_BIN_EXE_border-gw")).arg("--help"));
    assert!(
        help.contains("--config") && help.contains("--check-config"),
        "{help}"
    );
}

#[test]
fn install_sh_installs_every_file_with_its_mode_and_the_units_verify() {
    let s = Scratch::new("install");
    let t = Instant::now();
    install_sh(&s.0, "/usr");
    let got = tree(&s.0);
    assert_eq!(got, expected("usr"), "installed files and modes");
    for b in BINARIES {
        assert_eq!(
            std::fs::read(s.0.join("usr/bin").join(b)).unwrap(),
            std::fs::read(bin_dir().join(b)).unwrap(),
            "{b}"
        );
    }
    verify_units(&s.0, "lab");
    let gw_unit =
        std::fs::read_to_string(s.0.join("usr/lib/systemd/system/border-gw@.service")).unwrap();
    assert!(
        gw_unit.contains("ExecStart=/usr/bin/border-gw --config /etc/border/gw-%i.toml"),
        "{gw_unit}"
    );
    eprintln!("install.sh + verify: {:?}", t.elapsed());

    // Another prefix: the units follow it.
    let local = Scratch::new("install-local");
    install_sh(&local.0, "/usr/local");
    assert_eq!(tree(&local.0), expected("usr/local"));
    let unit = std::fs::read_to_string(
        local
            .0
            .join("usr/local/lib/systemd/system/border-dp@.service"),
    )
    .unwrap();
    assert!(
        unit.contains("ExecStart=/usr/local/bin/border-dp --config /etc/border/%i.toml"),
        "{unit}"
    );
    assert!(!unit.contains("/usr/bin/border"), "{unit}");

    // A relative PREFIX and missing binaries are refused with one line.
    let out = Command::new("bash")
        .arg(repo().join("scripts/install.sh"))
        .env("DESTDIR", &s.0)
        .env("PREFIX", "usr")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("PREFIX must be an absolute path"));
    let out = Command::new("bash")
        .arg(repo().join("scripts/install.sh"))
        .env("DESTDIR", &s.0)
        .env("BIN_DIR", s.0.join("nothing"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cargo build --release --bins"));
}

#[test]
fn cargo_deb_package_holds_and_unpacks_every_file() {
    let s = Scratch::new("deb");
    let out_dir = s.0.join("out");
    let t = Instant::now();
    // The binaries this test was built with (dev profile): no release build
    // here, and gzip (--fast) instead of xz.
    run_ok(
        Command::new(env!("CARGO"))
            .current_dir(repo())
            .args([
                "deb",
                "--no-build",
                "--profile",
                "dev",
                "--fast",
                "--quiet",
                "-o",
            ])
            .arg(&out_dir),
    );
    let built = t.elapsed();
    let deb = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .expect("cargo deb wrote a .deb");

    let contents = run_ok(Command::new("dpkg-deb").arg("--contents").arg(&deb));
    // `-rw-r--r-- 0/0 size date time ./path`
    let mut listed = BTreeMap::new();
    for line in contents.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 6 || !f[0].starts_with('-') {
            continue;
        }
        assert_eq!(f[1], "0/0", "owned by root: {line}");
        listed.insert(f[5].trim_start_matches("./").to_string(), f[0].to_string());
    }
    // cargo deb gzips man pages (Debian policy).
    let mut want = expected_with("usr", ".gz");
    // The units go where Debian keeps packaged units.
    for u in UNITS {
        want.remove(&format!("usr/lib/systemd/system/{u}"));
        want.insert(format!("lib/systemd/system/{u}"), 0o644);
    }
    // So do its udev rules.
    want.remove(&format!("usr/lib/udev/rules.d/{UDEV_RULES}"));
    want.insert(format!("lib/udev/rules.d/{UDEV_RULES}"), 0o644);
    want.insert("usr/share/doc/border/copyright".into(), 0o644);
    let listed_paths: Vec<&String> = listed.keys().collect();
    let want_paths: Vec<&String> = want.keys().collect();
    assert_eq!(listed_paths, want_paths, "dpkg-deb --contents");
    for (path, mode) in &listed {
        let expect = if want[path] == 0o755 {
            "-rwxr-xr-x"
        } else {
            "-rw-r--r--"
        };
        assert_eq!(mode, expect, "{path}");
    }
    let info = run_ok(Command::new("dpkg-deb").arg("--info").arg(&deb));
    assert!(info.contains("librte-eal23"), "shlibs of DPDK: {info}");
    assert!(info.contains("dpdk (>= 22.11)"), "{info}");
    let conffiles = run_ok(
        Command::new("dpkg-deb")
            .arg("--info")
            .arg(&deb)
            .arg("conffiles"),
    );
    assert_eq!(
        conffiles.trim(),
        "/etc/border/border.example.toml",
        "an upgrade keeps local edits"
    );

    // Unpacked into a throwaway root: every file with its mode; the units verify.
    let root = s.0.join("root");
    run_ok(Command::new("dpkg").arg("-x").arg(&deb).arg(&root));
    assert_eq!(tree(&root), want, "dpkg -x");
    // Binaries are stripped by cargo deb but still run.
    let v = run_ok(Command::new(root.join("usr/bin/borderctl")).arg("--version"));
    assert!(v.contains(env!("CARGO_PKG_VERSION")), "{v}");
    // Debian 12 merges /lib into /usr/lib: the units' copy there is what
    // systemd reads.
    let lib_units = root.join("lib/systemd/system");
    let usr_units = root.join("usr/lib/systemd/system");
    std::fs::create_dir_all(&usr_units).unwrap();
    for u in UNITS {
        std::fs::copy(lib_units.join(u), usr_units.join(u)).unwrap();
    }
    verify_units(&root, "edge");
    eprintln!(
        "cargo deb (dev binaries, --fast): {built:?}; whole test {:?}; package {} bytes",
        t.elapsed(),
        std::fs::metadata(&deb).unwrap().len()
    );
}

/// A free port below 1024 on 127.0.0.1 (binding it needs
/// CAP_NET_BIND_SERVICE).
fn free_low_port() -> u16 {
    (700..1000)
        .find(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).is_ok())
        .expect("a free port in 700..1000")
}

/// Starts border-gw under `setpriv` with a bounding set of `caps` only and
/// no new privileges (what the unit gives it); its stderr goes to `log`.
fn spawn_gw_bounded(caps: &str, config: &Path, log: &Path) -> std::process::Child {
    let set: Vec<String> = caps
        .split_whitespace()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect();
    let bounding = if set.is_empty() {
        "--bounding-set=-all".to_string()
    } else {
        format!("--bounding-set=-all,{}", set.join(","))
    };
    Command::new("setpriv")
        .args(["--no-new-privs", "--inh-caps=-all", &bounding, "--"])
        .arg(env!("CARGO_BIN_EXE_border-gw"))
        .arg("--config")
        .arg(config)
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .expect("setpriv (Debian package util-linux)")
}

#[test]
fn border_gw_runs_within_its_units_capability_bounding_set() {
    let s = Scratch::new("gw-caps");
    let unit = unit_keys(
        &std::fs::read_to_string(repo().join("deploy/systemd/border-gw@.service")).unwrap(),
    );
    let caps = unit["CapabilityBoundingSet"].clone();
    // Its key readable by root only, as under /etc/border.
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    std::fs::write(s.0.join("gw.pem"), cert.pem()).unwrap();
    std::fs::write(s.0.join("gw.key"), key.serialize_pem()).unwrap();
    std::fs::set_permissions(s.0.join("gw.key"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let agent = free_low_port();
    let api = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = s.0.join("gw-caps.toml");
    std::fs::write(
        &config,
        format!(
            r#"id = "caps"
agent_listen = "127.0.0.1:{agent}"
api_listen = "127.0.0.1:{api}"
redis = "redis://127.0.0.1:1/0"
[tls]
cert = "{d}/gw.pem"
key = "{d}/gw.key"
client_ca = "{d}/gw.pem"
api_fingerprints = ["sha256:{zeros}"]
"#,
            d = s.0.display(),
            zeros = "0".repeat(64)
        ),
    )
    .unwrap();

    // With the unit's bounding set: it binds below 1024, reads its key,
    // runs, and stops cleanly on SIGTERM (a drain).
    let log = s.0.join("gw.log");
    let mut gw = spawn_gw_bounded(&caps, &config, &log);
    let start = Instant::now();
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("border-gw running")
    {
        assert!(
            gw.try_wait().unwrap().is_none() && start.elapsed().as_secs() < 10,
            "border-gw under the unit's capabilities ({caps}) did not run:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // SAFETY: kill(2) on a child we spawned and have not reaped.
    unsafe { libc::kill(gw.id() as i32, libc::SIGTERM) };
    let status = gw.wait().unwrap();
    assert!(status.success(), "{status}");

    // Without CAP_NET_BIND_SERVICE: one line naming the listener.
    let log = s.0.join("gw-none.log");
    let status = spawn_gw_bounded("", &config, &log).wait().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!status.success());
    assert!(
        text.contains(&format!(
            "cannot listen on agent_listen 127.0.0.1:{agent}: Permission denied"
        )),
        "{text}"
    );
    assert_eq!(text.trim().lines().count(), 1, "{text}");
}

#[test]
fn every_unit_notifies_readiness_and_keeps_a_watchdog() {
    for name in ["border-dp", "border-mgmt", "border-gw"] {
        let unit = unit_keys(
            &std::fs::read_to_string(repo().join(format!("deploy/systemd/{name}@.service")))
                .unwrap(),
        );
        assert_eq!(unit["Type"], "notify", "{name}: READY=1 ends the start");
        // The pings come from the main process (its main thread or runtime).
        assert_eq!(unit["NotifyAccess"], "main", "{name}");
        let secs: u64 = unit["WatchdogSec"]
            .strip_suffix('s')
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{name}: WatchdogSec={}", unit["WatchdogSec"]));
        // Pings come at half the period; a restart needs a few missed ones.
        assert!((5..=60).contains(&secs), "{name}: WatchdogSec={secs}s");
        // A watchdog timeout ends in a restart.
        assert!(
            ["always", "on-failure"].contains(&unit["Restart"].as_str()),
            "{name}: Restart={}",
            unit["Restart"]
        );
    }
}
