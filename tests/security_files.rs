//! Files and the unix socket, tried by the attacker: another
//! local user (`nobody`, through `setpriv`) against a running border-mgmt
//! and border-dp (docs/security.md).
//!
//! * it cannot read the tables region (the flow hash key) nor the state
//!   region, cannot open the lock files to hold their `flock`, and cannot
//!   call the API, even when the socket file's mode is opened up by mistake
//!   (`SO_PEERCRED`: PERMISSION_DENIED, logged, counted);
//! * a lock file it holds does not keep border-mgmt from starting;
//! * a symlink it plants at the tables or state path is never followed: the
//!   tables region is refused with a line naming it and the fix, the state
//!   region is not read, and border-dp replaces the name with its own file;
//! * a region file it made in advance is refused, untouched;
//! * with `[mgmt] operators_group`, the group's members read the counters
//!   and call the API; other users still cannot; the tables stay 0600.
//!
//! Instances `sf-*`, namespaces `sf1-lb`.. (TAP `sf1-ext`..). The tests of
//! this file run one at a time: they change `/run/border`'s mode and group.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use common::*;
use conf::state::{state_path, RunState, StateRegion};
use conf::tables::{tables_path, TablesWriter};

/// One test at a time (they share `/run/border`).
static SERIAL: Mutex<()> = Mutex::new(());

const NOBODY: u32 = 65534;

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// `args` to run as `user`:`group` with no supplementary groups.
fn command_as(user: &str, group: &str, args: &[&str]) -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        &format!("--reuid={user}"),
        &format!("--regid={group}"),
        "--clear-groups",
        "--",
    ])
    .args(args)
    .stdin(Stdio::null());
    c
}

/// Runs `args` as `user`:`group` with no supplementary groups.
fn as_user(user: &str, group: &str, args: &[&str]) -> Output {
    command_as(user, group, args)
        .output()
        .unwrap_or_else(|e| panic!("setpriv {args:?}: {e}"))
}

fn as_nobody(args: &[&str]) -> Output {
    as_user("nobody", "nogroup", args)
}

fn text(o: &Output) -> String {
    format!(
        "exit {}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .mode()
        & 0o7777
}

fn gid(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().gid()
}

fn lock_path(instance: &str, role: &str) -> PathBuf {
    conf::os::instance_lock_path(instance, role)
}

fn chmod(p: &Path, m: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
}

/// A config for border-mgmt and border-dp of `instance` on TAP ports
/// `<tag>-ext`/`<tag>-int`, the API on `/run/border/<instance>.sock`, with
/// `mgmt_keys` (lines) added to `[mgmt]`.
fn config(instance: &str, tag: &str, n: u8, mgmt_keys: &str) -> String {
    let mut c = two_port_config(
        instance,
        tag,
        &format!("10.{n}.0.1/24"),
        &format!("10.{}.0.1/24", n + 1),
        &format!("unix:///run/border/{instance}.sock"),
    );
    c += mgmt_keys;
    c += &format!(
        "\n[[vip]]\nname = \"v\"\naddress = \"10.{n}.0.100\"\nport = 80\nmaglev_table_size = 1021\n\n[[vip.backend]]\naddress = \"10.{}.0.11\"\nport = 8080\n",
        n + 1
    );
    c
}

fn socket(instance: &str) -> String {
    format!("unix:///run/border/{instance}.sock")
}

/// `borderctl stats` against the instance's socket as `user`:`group`.
fn stats_as(user: &str, group: &str, instance: &str) -> Output {
    as_user(
        user,
        group,
        &[
            borderctl_bin(),
            "stats",
            "--server",
            &socket(instance),
            "--json",
        ],
    )
}

fn forget_instance(instance: &str) {
    clean_instance(instance);
    for role in ["mgmt", "dp"] {
        let _ = std::fs::remove_file(lock_path(instance, role));
    }
    let _ = std::fs::remove_file(format!("/run/border/{instance}.sock"));
}

/// A test's instance: this file's turn, nothing left of an earlier run, a
/// directory with the config file.
struct Setup {
    _serial: std::sync::MutexGuard<'static, ()>,
    dir: TempDir,
    cfg: PathBuf,
    text: String,
}

impl Setup {
    fn new(instance: &str, tag: &str, n: u8, mgmt_keys: &str) -> Setup {
        let serial = serial();
        forget_instance(instance);
        let dir = TempDir::new(instance);
        let cfg = dir.path("border.toml");
        let text = config(instance, tag, n, mgmt_keys);
        std::fs::write(&cfg, &text).unwrap();
        Setup {
            _serial: serial,
            dir,
            cfg,
            text,
        }
    }
}

/// border-mgmt, then border-dp following it in namespace `<tag>-lb`.
struct Running {
    mgmt: BorderMgmt,
    dp: BorderDp,
    _lb: Netns,
}

impl Running {
    fn start(s: &Setup, instance: &str, tag: &str) -> Running {
        let mgmt = BorderMgmt::start(&s.cfg, s.dir.path("mgmt.log"));
        let lb = Netns::new(&format!("{tag}-lb"));
        let dp = BorderDp::start_following(&lb, &s.dir, instance, &s.text);
        Running { mgmt, dp, _lb: lb }
    }

    fn stop(mut self) {
        assert!(self.dp.stop().success(), "{}", self.dp.log_text());
        assert!(self.mgmt.stop().success(), "{}", self.mgmt.log_text());
    }
}

#[test]
fn an_outsider_can_neither_read_nor_lock_nor_call() {
    let instance = "sf-out";
    let metrics = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let setup = Setup::new(
        instance,
        "sf1",
        141,
        &format!("metrics_listen = \"{metrics}\"\n"),
    );
    // An older border left its lock 0644 and /run/border 0755.
    std::fs::create_dir_all("/run/border").unwrap();
    chmod(Path::new("/run/border"), 0o755);
    std::fs::write(lock_path(instance, "mgmt"), b"").unwrap();
    chmod(&lock_path(instance, "mgmt"), 0o644);

    let mut running = Running::start(&setup, instance, "sf1");

    let tables = tables_path(instance);
    let state = state_path(instance);
    let sock = PathBuf::from(format!("/run/border/{instance}.sock"));
    assert_eq!(mode(&tables), 0o600, "tables region");
    assert_eq!(mode(&state), 0o600, "state region");
    assert_eq!(mode(&sock), 0o600, "API socket");
    assert_eq!(mode(Path::new("/run/border")), 0o750, "/run/border");
    for role in ["mgmt", "dp"] {
        assert_eq!(mode(&lock_path(instance, role)), 0o600, "{role} lock");
    }

    // Read the regions: the tables hold the flow hash key.
    for region in [&tables, &state] {
        let o = as_nobody(&["cat", &region.display().to_string()]);
        assert!(
            !o.status.success(),
            "nobody read {}:\n{}",
            region.display(),
            text(&o)
        );
        assert!(o.stdout.is_empty());
    }
    // Hold a lock file (a read-only open is enough for flock).
    for role in ["mgmt", "dp"] {
        let lock = lock_path(instance, role).display().to_string();
        let o = as_nobody(&["flock", "-n", "-s", &lock, "true"]);
        assert!(!o.status.success(), "nobody locked {lock}:\n{}", text(&o));
    }
    // Call the API.
    let o = stats_as("nobody", "nogroup", instance);
    assert!(!o.status.success(), "nobody called the API:\n{}", text(&o));

    // The socket file opened to everyone by mistake: the kernel lets
    // nobody connect, SO_PEERCRED still refuses every call.
    chmod(Path::new("/run/border"), 0o755);
    chmod(&sock, 0o666);
    let o = stats_as("nobody", "nogroup", instance);
    let out = text(&o);
    assert!(!o.status.success(), "nobody called the API:\n{out}");
    assert!(out.contains("PermissionDenied"), "{out}");
    running.mgmt.wait_log("api: call refused");
    let log = running.mgmt.log_text();
    assert!(log.contains("uid=Some(65534)"), "{log}");
    let url = format!("http://{metrics}/metrics");
    let page = run(&["curl", "-sf", &url]);
    let page = String::from_utf8_lossy(&page.stdout);
    let refused = page
        .lines()
        .find_map(|l| l.strip_prefix("border_mgmt_api_refused_total "))
        .unwrap_or_else(|| panic!("no refused counter:\n{page}"));
    assert!(refused.parse::<u64>().unwrap() >= 1, "{refused}");
    let o = stats_as("root", "root", instance);
    assert!(o.status.success(), "root is refused:\n{}", text(&o));

    running.stop();
    chmod(Path::new("/run/border"), 0o750);
    forget_instance(instance);
}

#[test]
fn a_lock_file_held_by_another_user_does_not_keep_border_mgmt_from_starting() {
    let instance = "sf-lock";
    let Setup { dir, cfg, .. } = &Setup::new(instance, "sf2", 143, "");
    let mut first = BorderMgmt::start(cfg, dir.path("mgmt1.log"));
    assert!(first.stop().success());
    let lock = lock_path(instance, "mgmt");
    assert!(lock.exists(), "the lock file stays between runs");

    // nobody tries to hold it for 20 s in the background.
    chmod(Path::new("/run/border"), 0o755); // as an older border left it
    let holder = nobody_holds_flock(&lock);
    let mut second = BorderMgmt::start(cfg, dir.path("mgmt2.log"));
    drop(holder);
    assert!(second.stop().success(), "{}", second.log_text());
    chmod(Path::new("/run/border"), 0o750);
    forget_instance(instance);
}

/// A valid tables region at `path` owned by nobody, mode 0666, and its bytes.
fn plant_tables_region(path: &Path) -> Vec<u8> {
    let _ = std::fs::remove_file(path);
    drop(TablesWriter::create(path, 1 << 20).unwrap());
    std::os::unix::fs::chown(path, Some(NOBODY), Some(NOBODY)).unwrap();
    chmod(path, 0o666);
    std::fs::read(path).unwrap()
}

/// nobody takes a `flock` on `path` (if it can open it) for 20 s, in the
/// background; killed on drop.
fn nobody_holds_flock(path: &Path) -> Spawned {
    let p = path.display().to_string();
    let child = command_as("nobody", "nogroup", &["flock", "-s", &p, "sleep", "20"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    Spawned(child)
}

/// nobody makes `link` a symlink to `target`.
fn plant_symlink(link: &Path, target: &Path) {
    let (t, l) = (target.display().to_string(), link.display().to_string());
    let o = as_nobody(&["ln", "-s", &t, &l]);
    assert!(o.status.success(), "{}", text(&o));
}

/// border-mgmt on `cfg` must exit at once (within 10 s) with one line that
/// names `path`.
fn mgmt_refuses(cfg: &Path, path: &Path, what: &str) -> String {
    let log = cfg.with_file_name("refused.log");
    let mut child = Command::new(border_mgmt_bin())
        .arg("--config")
        .arg(cfg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut status = None;
    for _ in 0..200 {
        status = child.try_wait().unwrap();
        if status.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let err = std::fs::read_to_string(&log).unwrap_or_default();
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("border-mgmt started on a region it should refuse:\n{err}");
    };
    assert!(!status.success(), "border-mgmt exit {status}:\n{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("border-mgmt: error:"))
        .unwrap_or_else(|| panic!("no error line:\n{err}"));
    assert!(
        line.contains(&path.display().to_string()) && line.contains(what) && line.contains("rm "),
        "{line}"
    );
    line.to_string()
}

#[test]
fn symlinks_planted_at_the_region_paths_are_not_followed() {
    let instance = "sf-link";
    let Setup {
        dir,
        cfg,
        text: text_cfg,
        ..
    } = &Setup::new(instance, "sf3", 145, "");

    // The tables path: a symlink to a region nobody can rewrite.
    let victim = PathBuf::from("/dev/shm/sf-link-victim-tables");
    let before = plant_tables_region(&victim);
    let tables = tables_path(instance);
    plant_symlink(&tables, &victim);
    mgmt_refuses(cfg, &tables, "symbolic link");
    assert_eq!(
        std::fs::read(&victim).unwrap(),
        before,
        "the symlink's target was written"
    );
    std::fs::remove_file(&tables).unwrap();

    // The state path: a symlink to a forged state region (a running
    // dataplane that applied generation 1000) before border-dp starts.
    let fake = PathBuf::from("/dev/shm/sf-link-victim-state");
    let _ = std::fs::remove_file(&fake);
    let forged = StateRegion::create(&fake, &[1]).unwrap();
    forged.set_run_state(RunState::Running);
    forged.worker(0).unwrap().set_applied_generation(1000);
    drop(forged);
    std::os::unix::fs::chown(&fake, Some(NOBODY), Some(NOBODY)).unwrap();
    let fake_bytes = std::fs::read(&fake).unwrap();
    let state = state_path(instance);
    plant_symlink(&state, &fake);
    let mut mgmt = BorderMgmt::start(cfg, dir.path("mgmt.log"));
    mgmt.wait_log("is a symbolic link");
    let log = mgmt.log_text();
    assert!(log.contains(&state.display().to_string()), "{log}");

    // border-dp replaces the name with its own region; the target stays.
    let lb = Netns::new("sf3-lb");
    let mut dp = BorderDp::start_following(&lb, dir, instance, text_cfg);
    let meta = std::fs::symlink_metadata(&state).unwrap();
    assert!(meta.file_type().is_file(), "still a symlink");
    assert_eq!((meta.uid(), meta.mode() & 0o7777), (0, 0o600));
    assert_eq!(
        std::fs::read(&fake).unwrap(),
        fake_bytes,
        "the symlink's target was written"
    );
    assert!(dp.stop().success(), "{}", dp.log_text());
    assert!(mgmt.stop().success(), "{}", mgmt.log_text());
    let _ = std::fs::remove_file(&victim);
    let _ = std::fs::remove_file(&fake);
    forget_instance(instance);
}

#[test]
fn a_region_made_in_advance_by_another_user_is_refused() {
    let instance = "sf-pre";
    let Setup { dir, cfg, text, .. } = &Setup::new(instance, "sf4", 147, "");
    let tables = tables_path(instance);
    let before = plant_tables_region(&tables);
    let line = mgmt_refuses(cfg, &tables, "owned by uid 65534");
    assert!(line.contains("mode 0666"), "{line}");
    assert_eq!(
        std::fs::read(&tables).unwrap(),
        before,
        "the planted region was written"
    );

    // Its owner holds its flock: a standalone border-dp, which makes a new
    // region, replaces it all the same (it locks only its own user's).
    let _holder = nobody_holds_flock(&tables);
    let lb = Netns::new("sf4-lb");
    let mut dp = BorderDp::start(&lb, dir, instance, text);
    let meta = std::fs::symlink_metadata(&tables).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o7777), (0, 0o600));
    assert!(dp.stop().success(), "{}", dp.log_text());
    forget_instance(instance);
}

#[test]
fn operators_group_members_read_counters_and_call_the_api_others_do_not() {
    let instance = "sf-grp";
    // nogroup is nobody's primary group: nobody is the operator here.
    let setup = Setup::new(instance, "sf5", 149, "operators_group = \"nogroup\"\n");
    let running = Running::start(&setup, instance, "sf5");

    let (tables, state) = (tables_path(instance), state_path(instance));
    let sock = PathBuf::from(format!("/run/border/{instance}.sock"));
    assert_eq!((mode(&state), gid(&state)), (0o640, NOBODY), "state region");
    assert_eq!((mode(&sock), gid(&sock)), (0o660, NOBODY), "API socket");
    assert_eq!(
        mode(&tables),
        0o600,
        "the tables (flow hash key) stay private"
    );
    let run = Path::new("/run/border");
    assert_eq!((mode(run), gid(run)), (0o750, NOBODY), "/run/border");

    // The operator reads the counters and calls the API without root.
    let o = as_nobody(&[
        borderctl_bin(),
        "counters",
        "--instance",
        instance,
        "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let o = stats_as("nobody", "nogroup", instance);
    assert!(o.status.success(), "{}", text(&o));
    let o = as_nobody(&["cat", &tables.display().to_string()]);
    assert!(!o.status.success(), "an operator read the flow hash key");

    // A member through a supplementary group (SO_PEERGROUPS, as the
    // kernel recorded them at connect) calls too.
    let o = Command::new("setpriv")
        .args([
            "--reuid=daemon",
            "--regid=daemon",
            "--groups=nogroup",
            "--",
            borderctl_bin(),
            "stats",
            "--server",
            &socket(instance),
            "--json",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));

    // Another user: neither.
    let o = as_user("daemon", "daemon", &["cat", &state.display().to_string()]);
    assert!(!o.status.success(), "daemon read the state region");
    chmod(&sock, 0o666);
    chmod(run, 0o755);
    let o = stats_as("daemon", "daemon", instance);
    assert!(text(&o).contains("PermissionDenied"), "{}", text(&o));

    running.stop();
    std::os::unix::fs::chown(run, None, Some(0)).unwrap();
    chmod(run, 0o750);
    forget_instance(instance);
}

/// `borderctl args` as root, killed after 10 s (`timeout` exits 124 then).
fn borderctl_within_10s(args: &[&str]) -> Output {
    Command::new("timeout")
        .arg("10")
        .arg(borderctl_bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn a_fifo_planted_at_the_state_path_is_refused_at_once_naming_it() {
    // Before the fix, opening the FIFO waited for a writer
    // forever, so border-mgmt never published and `borderctl status` hung.
    let instance = "sf-fifo";
    let Setup { dir, cfg, .. } = &Setup::new(instance, "sf6", 151, "");
    let state = state_path(instance);
    let o = as_nobody(&["mkfifo", "-m", "0666", &state.display().to_string()]);
    assert!(o.status.success(), "{}", text(&o));

    let mut mgmt = BorderMgmt::start(cfg, dir.path("mgmt.log"));
    mgmt.wait_log("is a FIFO");
    let log = mgmt.log_text();
    let line = log
        .lines()
        .find(|l| l.contains("is a FIFO"))
        .unwrap_or_default();
    assert!(
        line.contains(&state.display().to_string()) && line.contains("rm "),
        "{line}"
    );
    let tables = tables_path(instance);
    assert!(
        std::fs::symlink_metadata(&tables).is_ok_and(|m| m.is_file()),
        "border-mgmt did not publish its tables"
    );

    let server = socket(instance);
    for args in [
        &["status", "--server", server.as_str()][..],
        &["status", "--local", "--instance", instance][..],
        &["counters", "--instance", instance][..],
    ] {
        let o = borderctl_within_10s(args);
        let out = text(&o);
        assert_ne!(
            o.status.code(),
            Some(124),
            "borderctl {args:?} hung:\n{out}"
        );
        assert!(
            out.contains(&state.display().to_string()) || o.status.success(),
            "borderctl {args:?}:\n{out}"
        );
    }
    // The FIFO is left as it is, for the operator to look at.
    assert!(std::fs::symlink_metadata(&state).is_ok_and(|m| {
        use std::os::unix::fs::FileTypeExt;
        m.file_type().is_fifo()
    }));
    assert!(mgmt.stop().success(), "{}", mgmt.log_text());
    forget_instance(instance);
}
