//! `borderctl capture`: packets of a running border-dp's ports into a pcapng
//! file, through DPDK's own capture framework. Runs Debian's `dpdk-dumpcap`
//! (a secondary process of border-dp; it compiles the filter with libpcap
//! and border-dp runs it as BPF on the worker), reads its pcapng from a
//! pipe, keeps the frames of the chosen direction and stops it at the
//! packet count or the time limit. See docs/capture.md.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use conf::Config;
use serde::Serialize;

use crate::cli::Target;
use crate::pcapng::{Direction, Reader};

/// The tool that attaches to border-dp (Debian package `dpdk`).
const DUMPCAP: &str = "dpdk-dumpcap";

/// `borderctl capture` flags.
#[derive(Args, Debug)]
pub struct CaptureArgs {
    /// A `[[port]].name` of the config; repeat for several ports (e.g. the
    /// client side and the backend side, to see a frame before and after
    /// its rewrite).
    #[arg(long = "port", value_name = "NAME", required = true)]
    pub ports: Vec<String>,
    /// Frames the port received, sent, or both.
    #[arg(long, value_enum, default_value_t = Direction::Both)]
    pub direction: Direction,
    /// Stop after this many packets.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
    /// Stop after this many seconds.
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub duration: Option<u64>,
    /// The pcapng file to write (replaced if it exists).
    #[arg(short = 'w', value_name = "FILE")]
    pub write: PathBuf,
    /// Bytes kept of each frame.
    #[arg(long, value_name = "BYTES", default_value_t = 2176,
          value_parser = clap::value_parser!(u32).range(64..=65_535))]
    pub snaplen: u32,
    /// A tcpdump filter expression (pcap-filter(7)), e.g. `icmp` or `tcp port 80`.
    #[arg(value_name = "FILTER", trailing_var_arg = true)]
    pub filter: Vec<String>,
}

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

pub fn run(target: &Target, args: &CaptureArgs, json: bool) -> Result<ExitCode, String> {
    let path = target
        .config
        .as_deref()
        .ok_or("`capture` needs --config FILE (the ports and EAL prefix of border-dp)")?;
    let cfg = Config::from_file(path).map_err(|e| e.to_string())?;
    let command = dumpcap_command(&cfg, path, args)?;
    let out = File::create(&args.write)
        .map_err(|e| format!("cannot create {}: {e}", args.write.display()))?;
    let child = spawn(command)?;
    let summary = pass_through(child, args, BufWriter::new(out)).inspect_err(|_| {
        // Nothing useful was written: leave no file that looks like a capture.
        let _ = std::fs::remove_file(&args.write);
    })?;
    if json {
        println!("{}", serde_json::to_string(&summary).map_err(|e| e.to_string())?);
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

/// `dpdk-dumpcap` for border-dp's prefix, ports and the filter, writing
/// pcapng to its stdout.
fn dumpcap_command(cfg: &Config, path: &Path, args: &CaptureArgs) -> Result<Command, String> {
    if !cfg.dataplane.capture {
        return Err(format!(
            "border-dp of {} does not serve packet capture: set `capture = true` in [dataplane] \
             and restart it (docs/capture.md)",
            path.display()
        ));
    }
    let mut cmd = Command::new(DUMPCAP);
    cmd.arg(format!("--file-prefix={}", cfg.eal_file_prefix()));
    for name in &args.ports {
        let port = cfg.port(name).ok_or_else(|| {
            let known: Vec<&str> = cfg.ports.iter().map(|p| p.name.as_str()).collect();
            format!("no port `{name}` in {} (ports: {})", path.display(), known.join(", "))
        })?;
        cmd.args(["-i", port.device_name()]);
    }
    let filter = args.filter.join(" ");
    if !filter.is_empty() {
        cmd.args(["-f", &filter]);
    }
    // -q: no running count (backspaces on stderr); the final report stays.
    cmd.args(["-q", "-s", &args.snaplen.to_string(), "-w", "-"]);
    Ok(cmd)
}

fn spawn(mut cmd: Command) -> Result<Child, String> {
    // dumpcap's own report (packets received/dropped per port, filter
    // errors) goes to our stderr.
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::inherit());
    cmd.spawn().map_err(|e| {
        format!("cannot run {DUMPCAP} ({e}); install Debian's dpdk package (scripts/install-deps.sh)")
    })
}

/// Copies dumpcap's pcapng to `out` block by block, keeping the packets of
/// the chosen direction, until the count, the time limit, or a signal.
fn pass_through(
    mut child: Child,
    args: &CaptureArgs,
    mut out: impl Write,
) -> Result<Summary, String> {
    let pid = child.id();
    let stdout = child.stdout.take().expect("stdout is piped");
    let counted_out = Arc::new(AtomicBool::new(false));
    let interrupted = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // Ctrl-C reaches dumpcap too (same process group); we finish the file.
        signal_hook::flag::register(sig, interrupted.clone()).map_err(|e| e.to_string())?;
    }
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let limit = args.duration.map(Duration::from_secs);
    let watch = {
        let (counted_out, interrupted) = (counted_out.clone(), interrupted.clone());
        std::thread::spawn(move || stop_when_due(pid, limit, &counted_out, &interrupted, &done_rx))
    };

    let mut reader = Reader::new(stdout);
    let mut packets = 0u64;
    let write_err = |e: std::io::Error| format!("cannot write {}: {e}", args.write.display());
    let result = loop {
        let block = match reader.next_block() {
            Ok(Some(b)) => b,
            Ok(None) => break Ok(()),
            Err(e) => break Err(format!("reading {DUMPCAP}'s output: {e}")),
        };
        if block.is_packet() {
            if counted_out.load(Ordering::Relaxed) || !args.direction.keeps(block.direction()) {
                continue;
            }
            packets += 1;
            if args.count == Some(packets) {
                counted_out.store(true, Ordering::Relaxed);
            }
        }
        if let Err(e) = out.write_all(&block.bytes) {
            break Err(write_err(e));
        }
    };
    drop(done_tx);
    let stopped_by = watch.join().unwrap_or("signal");
    let status = child.wait().map_err(|e| e.to_string())?;
    // A dumpcap that could not start (no border-dp, a bad filter) says why
    // on stderr and may leave text rather than pcapng on stdout.
    if !status.success() && stopped_by == "dumpcap" {
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

/// Interrupts dumpcap (which then ends its file and detaches cleanly) when
/// the count is reached, the time limit passes or we were signalled; returns
/// what stopped the capture. Ends without signalling once dumpcap's output
/// ended (`done` dropped).
fn stop_when_due(
    pid: u32,
    limit: Option<Duration>,
    counted_out: &AtomicBool,
    interrupted: &AtomicBool,
    done: &mpsc::Receiver<()>,
) -> &'static str {
    let start = Instant::now();
    loop {
        let why = if counted_out.load(Ordering::Relaxed) {
            Some("count")
        } else if interrupted.load(Ordering::Relaxed) {
            Some("signal")
        } else if limit.is_some_and(|l| start.elapsed() >= l) {
            Some("duration")
        } else {
            None
        };
        if let Some(why) = why {
            let _ = conf::os::interrupt(pid);
            // Wait for the stream to end; dumpcap has been asked to stop.
            let _ = done.recv();
            return why;
        }
        match done.recv_timeout(Duration::from_millis(50)) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return "dumpcap",
        }
    }
}
