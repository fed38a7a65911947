//! `borderctl capture`: packets of a running border-dp's ports into a pcapng
//! file, through DPDK's own capture framework. Runs Debian's `dpdk-dumpcap`
//! (a secondary process of border-dp; it compiles the filter with libpcap
//! and border-dp runs it as BPF on the worker) per port, merges their
//! pcapng from pipes into one file, keeps the frames of the chosen
//! direction and stops them at the packet count or the time limit. See
//! docs/capture.md.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use conf::Config;
use serde::Serialize;

use crate::cli::{CaptureArgs, Target};
use crate::conn::{open_local, Failure, Res};
use crate::pcapng::{Block, Direction, Merger, Reader};

/// The tool that attaches to border-dp (Debian package `dpdk`).
const DUMPCAP: &str = "dpdk-dumpcap";

/// What `capture` reports when it ends.
#[derive(Debug, Serialize)]
struct Summary {
    file: String,
    ports: Vec<String>,
    direction: Direction,
    filter: String,
    packets: u64,
    stopped_by: &'static str,
}

pub fn run(target: &Target, args: &CaptureArgs, json: bool) -> Res {
    let path = target.config.as_deref().ok_or_else(|| {
        Failure::Other(
            "`capture` needs --config FILE (the ports and EAL prefix of border-dp)".into(),
        )
    })?;
    let cfg = Config::from_file(path).map_err(|e| e.to_string())?;
    let commands = dumpcap_commands(&cfg, path, args)?;
    // dpdk-dumpcap attaches to a running border-dp: say so up front, with
    // the exit status of a target that cannot be reached.
    let (instance, region) = open_local(Some(path), None)?;
    let dp = border::DpView::read(&region);
    if !dp.is_running() {
        return Err(Failure::Unreachable(format!(
            "border-dp of instance `{instance}` is not running ({}): nothing to capture",
            dp.describe()
        )));
    }
    let access = conf::os::files::Access::for_group_name(cfg.mgmt.operators_group.as_deref())?;
    let (out, partial) = create_capture_file(&args.write, access)?;
    let mut children = Vec::new();
    for command in commands {
        match spawn(command) {
            Ok(c) => children.push(c),
            Err(e) => {
                stop_all(&mut children);
                let _ = std::fs::remove_file(&partial);
                return Err(e.into());
            }
        }
    }
    let summary = pass_through(children, args, BufWriter::new(out))
        .and_then(|s| {
            std::fs::rename(&partial, &args.write).map_err(|e| {
                format!(
                    "cannot rename {} to {}: {e}",
                    partial.display(),
                    args.write.display()
                )
            })?;
            Ok(s)
        })
        .inspect_err(|_| {
            // Nothing useful was written: leave no file that looks like a capture.
            let _ = std::fs::remove_file(&partial);
        })?;
    if json {
        println!(
            "{}",
            serde_json::to_string(&summary).map_err(|e| e.to_string())?
        );
    } else {
        println!(
            "{} packets from {} ({}) to {} (stopped by {})",
            summary.packets,
            summary.ports.join(", "),
            match args.direction {
                Direction::Rx => "rx",
                Direction::Tx => "tx",
                Direction::Both => "rx and tx",
            },
            summary.file,
            summary.stopped_by
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The file the capture is written to until it is complete: beside
/// `path`, under a hidden unpredictable name, made with `O_EXCL |
/// O_NOFOLLOW`, mode 0600 (0640 with the operators' group) whatever the
/// umask: a capture holds every tenant's payload (docs/capture.md).
/// Renamed over `path` at the end, so a symlink or a file planted at
/// `path` is replaced, never written through.
fn create_capture_file(
    path: &Path,
    access: conf::os::files::Access,
) -> Result<(File, PathBuf), String> {
    let partial = conf::os::files::temp_path_for(path);
    let file = conf::os::files::create_new(&partial, access).map_err(|e| {
        if e.io_kind() != Some(std::io::ErrorKind::AlreadyExists) {
            // Made, but its group could not be set: not left behind.
            let _ = std::fs::remove_file(&partial);
        }
        format!(
            "cannot create {} (for {}): {e}",
            partial.display(),
            path.display()
        )
    })?;
    Ok((file, partial))
}

/// One `dpdk-dumpcap` per port (22.11 captures one port per run), for
/// border-dp's prefix and the filter, each writing pcapng to its stdout.
fn dumpcap_commands(cfg: &Config, path: &Path, args: &CaptureArgs) -> Result<Vec<Command>, String> {
    if !cfg.dataplane.capture {
        return Err(format!(
            "border-dp of {} does not serve packet capture: set `capture = true` in [dataplane] \
             and restart it (docs/capture.md)",
            path.display()
        ));
    }
    let filter = args.filter.join(" ");
    let mut commands = Vec::new();
    for name in &args.ports {
        let port = cfg.port(name).ok_or_else(|| {
            let known: Vec<&str> = cfg.ports.iter().map(|p| p.name.as_str()).collect();
            format!(
                "no port `{name}` in {} (ports: {})",
                path.display(),
                known.join(", ")
            )
        })?;
        let mut cmd = Command::new(DUMPCAP);
        cmd.arg(format!("--file-prefix={}", cfg.eal_file_prefix()));
        cmd.args(["-i", port.device_name()]);
        if !filter.is_empty() {
            cmd.args(["-f", &filter]);
        }
        // -q: no running count (backspaces on stderr); the final report stays.
        cmd.args(["-q", "-s", &args.snaplen.to_string(), "-w", "-"]);
        commands.push(cmd);
    }
    Ok(commands)
}

fn spawn(mut cmd: Command) -> Result<Child, String> {
    // dumpcap's own report (packets received/dropped per port, filter
    // errors) goes to our stderr.
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    cmd.spawn().map_err(|e| {
        format!(
            "cannot run {DUMPCAP} ({e}); install Debian's dpdk package (scripts/install-deps.sh)"
        )
    })
}

fn stop_all(children: &mut [Child]) {
    for c in children.iter() {
        let _ = conf::os::interrupt(c.id());
    }
    for c in children.iter_mut() {
        let _ = c.wait();
    }
}

/// What a stream reader hands over: a block, its end, or why it broke off.
type Item = (usize, std::io::Result<Option<Block>>);

/// Merges the dumpcaps' pcapng into `out` block by block, keeping the
/// packets of the chosen direction, until the count, the time limit, or a
/// signal.
fn pass_through(
    mut children: Vec<Child>,
    args: &CaptureArgs,
    mut out: impl Write,
) -> Result<Summary, String> {
    let pids: Vec<u32> = children.iter().map(Child::id).collect();
    let counted_out = Arc::new(AtomicBool::new(false));
    let interrupted = Arc::new(AtomicBool::new(false));
    // One dumpcap ended by itself (it failed, or border-dp went away).
    let ended = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // Ctrl-C reaches dumpcap too (same process group); we finish the file.
        signal_hook::flag::register(sig, interrupted.clone()).map_err(|e| e.to_string())?;
    }
    let (items_tx, items_rx) = mpsc::channel::<Item>();
    for (i, child) in children.iter_mut().enumerate() {
        let stdout = child.stdout.take().expect("stdout is piped");
        let tx = items_tx.clone();
        std::thread::spawn(move || {
            let mut reader = Reader::new(stdout);
            loop {
                let item = reader.next_block();
                let last = !matches!(item, Ok(Some(_)));
                if tx.send((i, item)).is_err() || last {
                    return;
                }
            }
        });
    }
    drop(items_tx);
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let limit = args.duration;
    let watch = {
        let flags = Stops {
            counted_out: counted_out.clone(),
            interrupted: interrupted.clone(),
            ended: ended.clone(),
        };
        std::thread::spawn(move || stop_when_due(&pids, limit, &flags, &done_rx))
    };

    let mut merger = Merger::default();
    let mut packets = 0u64;
    let mut result = Ok(());
    let write_err = |e: std::io::Error| format!("cannot write {}: {e}", args.write.display());
    // Every reader ends with one `Ok(None)` or error; the channel closes then.
    for (stream, item) in items_rx {
        let block = match item {
            Ok(Some(b)) => b,
            Ok(None) => {
                ended.store(true, Ordering::Relaxed);
                continue;
            }
            Err(e) => {
                ended.store(true, Ordering::Relaxed);
                result = result.and(Err(format!("reading {DUMPCAP}'s output: {e}")));
                continue;
            }
        };
        let wanted =
            |b: &Block| !counted_out.load(Ordering::Relaxed) && args.direction.keeps(b.direction());
        if block.is_packet() && !wanted(&block) {
            continue;
        }
        let Some(block) = merger.merge(stream, block) else {
            continue;
        };
        if block.is_packet() {
            packets += 1;
            if args.count == Some(packets) {
                counted_out.store(true, Ordering::Relaxed);
            }
        }
        if result.is_ok() {
            if let Err(e) = out.write_all(&block.bytes) {
                result = Err(write_err(e));
                counted_out.store(true, Ordering::Relaxed);
            }
        }
    }
    drop(done_tx);
    let stopped_by = watch.join().unwrap_or("signal");
    let mut failed = None;
    for c in &mut children {
        let status = c.wait().map_err(|e| e.to_string())?;
        if !status.success() {
            failed = failed.or(Some(status));
        }
    }
    // A dumpcap that could not start (no border-dp, a bad filter) says why
    // on stderr and may leave text rather than pcapng on stdout.
    if let (Some(status), "dumpcap") = (failed, stopped_by) {
        return Err(format!(
            "{DUMPCAP} failed ({status}): is border-dp running with `capture = true`, \
             and is the filter valid? (its messages are above)"
        ));
    }
    result?;
    out.flush().map_err(write_err)?;
    Ok(Summary {
        file: args.write.display().to_string(),
        ports: args.ports.clone(),
        direction: args.direction,
        filter: args.filter.join(" "),
        packets,
        stopped_by: if counted_out.load(Ordering::Relaxed) {
            "count"
        } else {
            stopped_by
        },
    })
}

/// Why a capture stops, set by the merge loop and the signal handlers.
struct Stops {
    counted_out: Arc<AtomicBool>,
    interrupted: Arc<AtomicBool>,
    ended: Arc<AtomicBool>,
}

/// Interrupts every dumpcap (each then ends its stream and detaches
/// cleanly) when the count is reached, the time limit passes, we were
/// signalled or one of them ended by itself ("dumpcap"); returns what
/// stopped the capture.
fn stop_when_due(
    pids: &[u32],
    limit: Option<Duration>,
    stops: &Stops,
    done: &mpsc::Receiver<()>,
) -> &'static str {
    let start = Instant::now();
    loop {
        let why = if stops.counted_out.load(Ordering::Relaxed) {
            Some("count")
        } else if stops.interrupted.load(Ordering::Relaxed) {
            Some("signal")
        } else if stops.ended.load(Ordering::Relaxed) {
            Some("dumpcap")
        } else if limit.is_some_and(|l| start.elapsed() >= l) {
            Some("duration")
        } else {
            None
        };
        if let Some(why) = why {
            for &pid in pids {
                let _ = conf::os::interrupt(pid);
            }
            // Wait for the streams to end; every dumpcap has been asked to stop.
            let _ = done.recv();
            return why;
        }
        match done.recv_timeout(Duration::from_millis(50)) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return "dumpcap",
        }
    }
}
