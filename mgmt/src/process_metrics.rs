//! The families every Prometheus target is expected to have, for the
//! exporting process and for border-dp beside it: `border_build_info` (what
//! build answers) and the `process_*` families of Prometheus's client
//! libraries, read from `/proc/<pid>` (so border-dp, whose pid border-mgmt
//! reads from the state region, needs no exporter of its own and its
//! workers no syscall).

use std::sync::OnceLock;

use crate::prom::Exposition;

/// What `border_build_info` says: the running build.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildInfo {
    /// The crate version (`0.1.0`).
    pub version: String,
    /// The git commit it was built from, `unknown` outside a checkout.
    pub commit: String,
    /// The DPDK release it was built against.
    pub dpdk: String,
}

static BUILD: OnceLock<BuildInfo> = OnceLock::new();

/// Names the running build (the daemon's `main`, which knows its commit);
/// the first call wins.
pub fn set_build_info(b: BuildInfo) {
    let _ = BUILD.set(b);
}

fn build_info() -> BuildInfo {
    BUILD.get().cloned().unwrap_or_else(|| BuildInfo {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        commit: "unknown".to_owned(),
        dpdk: "unknown".to_owned(),
    })
}

/// `border_build_info{daemon,version,commit,dpdk} 1` of the exporting daemon.
pub fn render_build_info(o: &mut Exposition, daemon: &str) {
    let b = build_info();
    o.family(
        "border_build_info",
        "gauge",
        "the build of the daemon that serves these metrics (always 1)",
    );
    o.sample(
        "border_build_info",
        &[
            ("daemon", daemon),
            ("version", &b.version),
            ("commit", &b.commit),
            ("dpdk", &b.dpdk),
        ],
        1,
    );
}

/// A process's numbers as `/proc/<pid>` gives them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcessSample {
    /// User and system CPU time, seconds.
    pub cpu_seconds: f64,
    /// Resident set size, bytes (hugepages are not in it).
    pub resident_bytes: u64,
    /// Virtual memory size, bytes.
    pub virtual_bytes: u64,
    /// Start time, seconds since the Unix epoch.
    pub start_time_seconds: f64,
    /// Threads.
    pub threads: u64,
    /// Open file descriptors, when readable (another user's process needs
    /// privilege).
    pub open_fds: Option<u64>,
    /// The soft limit of open file descriptors, when there is one.
    pub max_fds: Option<u64>,
}

/// Parses `/proc/<pid>/stat`: CPU ticks (utime + stime), start ticks after
/// boot, threads, virtual size (bytes).
fn parse_stat(text: &str) -> Option<(u64, u64, u64, u64)> {
    // The command name is in parentheses and may hold spaces or ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields after the name start at the state (field 3 of proc(5)).
    let at = |field: usize| f.get(field - 3)?.parse::<u64>().ok();
    Some((at(14)? + at(15)?, at(22)?, at(20)?, at(23)?))
}

/// The system's boot time (`btime` of `/proc/stat`), seconds since the epoch.
fn boot_time() -> Option<u64> {
    std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

/// The soft `Max open files` of `/proc/<pid>/limits`.
fn parse_max_fds(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Reads `/proc/<pid>` (`self` for this process); `None` when the process
/// is gone.
pub fn sample(pid: &str) -> Option<ProcessSample> {
    let dir = std::path::Path::new("/proc").join(pid);
    let (ticks, start_ticks, threads, vsize) =
        parse_stat(&std::fs::read_to_string(dir.join("stat")).ok()?)?;
    let hz = conf::os::clock_ticks_per_second() as f64;
    Some(ProcessSample {
        cpu_seconds: ticks as f64 / hz,
        resident_bytes: std::fs::read_to_string(dir.join("status"))
            .ok()
            .and_then(|s| parse_rss_bytes(&s))
            .unwrap_or(0),
        virtual_bytes: vsize,
        start_time_seconds: boot_time().unwrap_or(0) as f64 + start_ticks as f64 / hz,
        threads,
        open_fds: std::fs::read_dir(dir.join("fd"))
            .ok()
            .map(|d| d.count() as u64),
        max_fds: std::fs::read_to_string(dir.join("limits"))
            .ok()
            .and_then(|l| parse_max_fds(&l)),
    })
}

/// `VmRSS` of `/proc/<pid>/status` in bytes (the kernel's own unit, kB,
/// needs no page size).
fn parse_rss_bytes(status: &str) -> Option<u64> {
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// The `process_*` families (`prefix` = `process` for the exporting
/// process, `border_dp_process` for border-dp) of one sample; nothing
/// when there is none.
pub fn render_process(o: &mut Exposition, prefix: &str, who: &str, s: Option<&ProcessSample>) {
    let Some(s) = s else {
        return;
    };
    let mut family = |suffix: &str, kind: &str, help: &str, v: String| {
        let name = format!("{prefix}_{suffix}");
        o.family(&name, kind, &format!("{who}: {help}"));
        o.sample(&name, &[], v);
    };
    family(
        "cpu_seconds_total",
        "counter",
        "user and system CPU time spent, seconds",
        s.cpu_seconds.to_string(),
    );
    family(
        "resident_memory_bytes",
        "gauge",
        "resident memory size, bytes (hugepages not included)",
        s.resident_bytes.to_string(),
    );
    family(
        "virtual_memory_bytes",
        "gauge",
        "virtual memory size, bytes",
        s.virtual_bytes.to_string(),
    );
    family(
        "start_time_seconds",
        "gauge",
        "start time of the process since the Unix epoch, seconds",
        s.start_time_seconds.to_string(),
    );
    family(
        "threads",
        "gauge",
        "threads of the process",
        s.threads.to_string(),
    );
    if let Some(n) = s.open_fds {
        family("open_fds", "gauge", "open file descriptors", n.to_string());
    }
    if let Some(n) = s.max_fds {
        family(
            "max_fds",
            "gauge",
            "the soft limit of open file descriptors",
            n.to_string(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_read_after_the_name_even_with_parens_in_it() {
        // proc(5): pid (comm) state ppid ... utime(14) stime(15) ...
        // num_threads(20) itrealvalue(21) starttime(22) vsize(23) rss(24)
        let line = "42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 \
                    250 50 0 0 20 0 7 0 12345 104857600 2560 18446744073709551615";
        assert_eq!(parse_stat(line), Some((300, 12345, 7, 104857600)));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S 1"), None);
    }

    #[test]
    fn rss_is_read_in_kilobytes() {
        assert_eq!(
            parse_rss_bytes("Name:\tx\nVmRSS:\t    2048 kB\nThreads:\t3\n"),
            Some(2 << 20)
        );
        assert_eq!(parse_rss_bytes("Name:\tkthread\n"), None);
    }

    #[test]
    fn the_soft_fd_limit_is_read() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(parse_max_fds(limits), Some(1024));
        assert_eq!(
            parse_max_fds("Max open files unlimited unlimited files"),
            None
        );
    }

    #[test]
    fn this_process_is_sampled() {
        let s = sample("self").expect("/proc/self");
        assert!(s.resident_bytes > 0 && s.threads >= 1, "{s:?}");
        assert!(s.open_fds.unwrap() >= 3, "{s:?}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            s.start_time_seconds > now - 3600.0 && s.start_time_seconds <= now + 1.0,
            "{s:?}"
        );
        let mut o = Exposition::default();
        render_process(&mut o, "process", "this process", Some(&s));
        let text = o.into_string();
        for f in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_open_fds ",
            "process_start_time_seconds ",
            "process_max_fds ",
        ] {
            assert!(text.lines().any(|l| l.starts_with(f)), "{f} in {text}");
        }
        assert_eq!(sample("0"), None, "no process 0 in /proc");
    }
}
