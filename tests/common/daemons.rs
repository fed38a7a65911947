//! The processes under test: border-dp in a namespace, border-mgmt,
//! borderctl runs, the scratch directory their configs and logs live in,
//! and what an instance leaves behind between runs.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use conf::counters::Counter;
use conf::state::{state_path, RunState, StateRegion};

use super::netns::{wait_until, Netns};

/// The border-dp the tests run: `BORDER_DP_BIN` when set (a release build
/// for throughput figures, `cargo build --release --bin border-dp` and
/// `BORDER_DP_BIN=target/release/border-dp`), else the one cargo built
/// with the tests.
pub fn border_dp_bin() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        std::env::var("BORDER_DP_BIN")
            .ok()
            .filter(|p| !p.is_empty())
            .map(|p| {
                std::fs::canonicalize(&p)
                    .unwrap_or_else(|e| panic!("BORDER_DP_BIN={p}: {e}"))
                    .to_string_lossy()
                    .into_owned()
            })
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_border-dp").to_string())
    })
}

/// A scratch directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("border-e2e-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A border-dp process running in a namespace.
pub struct BorderDp {
    child: Option<Child>,
    pub instance: String,
    pub log: PathBuf,
    pub config: PathBuf,
}

impl BorderDp {
    /// Writes `config` to `dir`, starts `border-dp --standalone` (it
    /// publishes its own tables) in `ns` and waits until its workers run.
    /// It starts with no flows: flows regions a previous border-dp of the
    /// instance left are removed first.
    pub fn start(ns: &Netns, dir: &TempDir, instance: &str, config: &str) -> BorderDp {
        forget_flows(instance);
        Self::start_mode(ns, dir, instance, config, true, &[])
    }

    /// [`BorderDp::start`] with more environment variables, adopting the
    /// flows a previous border-dp of the instance left.
    pub fn start_with_env(
        ns: &Netns,
        dir: &TempDir,
        instance: &str,
        config: &str,
        env: &[(&str, &str)],
    ) -> BorderDp {
        Self::start_mode(ns, dir, instance, config, true, env)
    }

    /// Like [`BorderDp::start`], without `--standalone`: border-dp follows
    /// the tables region that border-mgmt publishes.
    pub fn start_following(ns: &Netns, dir: &TempDir, instance: &str, config: &str) -> BorderDp {
        forget_flows(instance);
        Self::start_mode(ns, dir, instance, config, false, &[])
    }

    /// [`BorderDp::start_with_env`] without waiting for it to run (it may
    /// end on its own: [`BorderDp::wait_exit`]).
    pub fn spawn_with_env(
        ns: &Netns,
        dir: &TempDir,
        instance: &str,
        config: &str,
        env: &[(&str, &str)],
    ) -> BorderDp {
        Self::spawn_mode(ns, dir, instance, config, true, env)
    }

    fn start_mode(
        ns: &Netns,
        dir: &TempDir,
        instance: &str,
        config: &str,
        standalone: bool,
        env: &[(&str, &str)],
    ) -> BorderDp {
        let mut dp = Self::spawn_mode(ns, dir, instance, config, standalone, env);
        dp.wait_running();
        dp
    }

    fn spawn_mode(
        ns: &Netns,
        dir: &TempDir,
        instance: &str,
        config: &str,
        standalone: bool,
        env: &[(&str, &str)],
    ) -> BorderDp {
        let cfg = dir.path("border.toml");
        std::fs::write(&cfg, config).unwrap();
        let log = dir.path("border-dp.log");
        let logf = std::fs::File::create(&log).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &ns.name, border_dp_bin()])
            .args(standalone.then_some("--standalone"))
            .arg("--config")
            .arg(&cfg)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(logf.try_clone().unwrap())
            .stderr(logf)
            .spawn()
            .expect("start border-dp");
        BorderDp {
            child: Some(child),
            instance: instance.to_string(),
            log,
            config: cfg,
        }
    }

    fn wait_running(&mut self) {
        let path = state_path(&self.instance);
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("border-dp exited early with {status}:\n{}", self.log_text());
            }
            if let Ok(r) = StateRegion::open(&path) {
                if r.run_state() == RunState::Running && r.pid() == self.pid() {
                    return;
                }
            }
            if start.elapsed() > Duration::from_secs(30) {
                panic!("border-dp did not come up in 30 s:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Rewrites the config file and sends SIGHUP.
    pub fn reload(&mut self, config: &str) {
        std::fs::write(&self.config, config).unwrap();
        // SAFETY: kill(2) on the pid of our live child.
        unsafe { libc::kill(self.pid() as i32, libc::SIGHUP) };
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn state(&self) -> StateRegion {
        StateRegion::open(&state_path(&self.instance)).expect("open state region")
    }

    pub fn counter(&self, c: Counter) -> u64 {
        self.state().total(c)
    }

    /// Sends SIGTERM and waits for the exit status (at most 20 s).
    pub fn stop(&mut self) -> ExitStatus {
        // `ip netns exec` execs border-dp, so the child's pid is border-dp's.
        let mut child = self.child.take().expect("border-dp already stopped");
        sigterm_and_wait(&mut child, Duration::from_secs(20)).unwrap_or_else(|| {
            panic!(
                "border-dp did not exit within 20 s of SIGTERM:\n{}",
                self.log_text()
            )
        })
    }
}

impl Drop for BorderDp {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Sends SIGTERM to a child and waits up to `within` for its exit status;
/// `None` when it did not exit in time (it is then killed and reaped).
pub fn sigterm_and_wait(child: &mut Child, within: Duration) -> Option<ExitStatus> {
    // SAFETY: kill(2) on a child we spawned and have not reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return Some(st);
        }
        if start.elapsed() > within {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn border_mgmt_bin() -> &'static str {
    env!("CARGO_BIN_EXE_border-mgmt")
}

pub fn borderctl_bin() -> &'static str {
    env!("CARGO_BIN_EXE_borderctl")
}

/// Removes what an instance leaves behind between runs: its shared-memory
/// regions and border-mgmt's state directory (the applied config, drains
/// and weights it saved).
pub fn clean_instance(instance: &str) {
    let _ = std::fs::remove_file(state_path(instance));
    let _ = std::fs::remove_file(conf::tables::tables_path(instance));
    let _ = std::fs::remove_file(conf::records::records_path(instance));
    let _ = std::fs::remove_file(conf::conns::conns_path(instance));
    forget_flows(instance);
    forget_intent(instance);
}

/// Removes the flows and carry regions of `instance` (and those a start
/// that died while adopting left): the next border-dp starts with empty
/// connection tables, neighbour tables and pins.
pub fn forget_flows(instance: &str) {
    for w in 0..8 {
        let _ = std::fs::remove_file(dataplane::flows_region::flows_path(instance, w));
    }
    let dir = conf::os::region_dir();
    for (path, _, _) in dataplane::flows_region::flows_files(&dir, instance) {
        let _ = std::fs::remove_file(path);
    }
    for (path, _, _) in dataplane::carry_region::carry_files(&dir, instance) {
        let _ = std::fs::remove_file(path);
    }
}

/// Removes border-mgmt's default state directory of `instance` (and the
/// overrides file an older border-mgmt kept, which it would take): the
/// next border-mgmt starts from its --config.
pub fn forget_intent(instance: &str) {
    let _ = std::fs::remove_dir_all(mgmt::intent::default_state_dir(instance));
    let _ = std::fs::remove_file(mgmt::intent::legacy_overrides_path(instance));
}

/// Runs borderctl with `args`; returns (exit code, stdout, stderr).
pub fn borderctl(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(borderctl_bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run borderctl {args:?}: {e}"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// borderctl that must succeed; returns its stdout.
pub fn borderctl_ok(args: &[&str]) -> String {
    let (code, out, err) = borderctl(args);
    assert_eq!(
        code, 0,
        "borderctl {args:?} exit {code}\nstdout: {out}\nstderr: {err}"
    );
    out
}

/// borderctl that must fail with one line on stderr; returns that line
/// without the `borderctl: error: ` prefix.
pub fn borderctl_err(args: &[&str]) -> String {
    let (code, out, err) = borderctl(args);
    assert_ne!(code, 0, "borderctl {args:?} should fail\nstdout: {out}");
    assert_eq!(err.lines().count(), 1, "borderctl {args:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
    err.trim_end()
        .strip_prefix("borderctl: error: ")
        .unwrap_or_else(|| panic!("borderctl {args:?}: not an error line: {err}"))
        .to_string()
}

/// A border-mgmt process (in the host's namespace), killed on drop.
pub struct BorderMgmt {
    child: Option<Child>,
    pub log: PathBuf,
    pub config: PathBuf,
}

impl BorderMgmt {
    /// Starts border-mgmt on `config` (looking at the dataplane every
    /// 100 ms), logging to `log`, and waits until it serves.
    pub fn start(config: &Path, log: PathBuf) -> BorderMgmt {
        Self::start_in(None, config, log)
    }

    /// [`BorderMgmt::start`] inside network namespace `ns` (if given): its
    /// probes then leave through that namespace's interfaces.
    pub fn start_in(ns: Option<&str>, config: &Path, log: PathBuf) -> BorderMgmt {
        Self::start_with(ns, config, log, &[])
    }

    /// [`BorderMgmt::start_in`] with more arguments (`--state-dir DIR`,
    /// `--from-config-file`).
    pub fn start_with(ns: Option<&str>, config: &Path, log: PathBuf, more: &[&str]) -> BorderMgmt {
        let mut command = match ns {
            // `ip netns exec` execs the program: the child is border-mgmt.
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, border_mgmt_bin()]);
                c
            }
            None => Command::new(border_mgmt_bin()),
        };
        let child = command
            .arg("--config")
            .arg(config)
            .args(["--watch-interval-ms", "100"])
            .args(more)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start border-mgmt");
        let mut m = BorderMgmt {
            child: Some(child),
            log,
            config: config.to_owned(),
        };
        m.wait_log("border-mgmt running");
        m
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (15 s at most) until the log contains `what`.
    pub fn wait_log(&mut self, what: &str) {
        let start = Instant::now();
        while !self.log_text().contains(what) {
            if let Some(st) = self.child.as_mut().and_then(|c| c.try_wait().unwrap()) {
                panic!("border-mgmt exited with {st}:\n{}", self.log_text());
            }
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "no {what:?} in the border-mgmt log:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL: no clean-up at all (socket file and everything stay).
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and the exit status (at most 10 s).
    pub fn stop(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("border-mgmt already stopped");
        sigterm_and_wait(&mut child, Duration::from_secs(10))
            .unwrap_or_else(|| panic!("border-mgmt did not stop within 10 s:\n{}", self.log_text()))
    }
}

impl Drop for BorderMgmt {
    fn drop(&mut self) {
        self.kill9();
    }
}

impl BorderDp {
    /// Waits up to `within` for border-dp to exit on its own (a worker
    /// panic); its status, or `None` if it still runs.
    pub fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        while start.elapsed() < within {
            if let Some(status) = self.child.as_mut()?.try_wait().ok().flatten() {
                self.child = None;
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    }

    /// SIGKILL and reap: no clean-up (the state region stays marked running).
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The generation each worker has applied.
    pub fn applied(&self) -> Vec<u64> {
        let s = self.state();
        (0..s.n_workers())
            .filter_map(|i| s.worker(i).map(|w| w.applied_generation()))
            .collect()
    }

    /// Waits (10 s at most) until every worker has applied generation `g`.
    pub fn wait_applied(&self, g: u64) {
        wait_until(
            &format!("every worker on generation {g}"),
            Duration::from_secs(10),
            || {
                let a = self.applied();
                !a.is_empty() && a.iter().all(|&x| x == g)
            },
        );
    }

    /// Every drop counter's total, by name.
    pub fn drops(&self) -> std::collections::BTreeMap<&'static str, u64> {
        let s = self.state();
        s.totals()
            .into_iter()
            .filter(|(c, _)| c.is_drop())
            .map(|(c, v)| (c.name(), v))
            .collect()
    }
}

/// The drop counters that rose between two [`BorderDp::drops`] snapshots.
pub fn drops_rose(
    before: &std::collections::BTreeMap<&'static str, u64>,
    after: &std::collections::BTreeMap<&'static str, u64>,
) -> Vec<(&'static str, u64)> {
    after
        .iter()
        .filter_map(|(k, v)| {
            let b = before.get(k).copied().unwrap_or(0);
            (*v > b).then_some((*k, v - b))
        })
        .collect()
}
