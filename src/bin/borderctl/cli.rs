//! The command line: every subcommand and flag, as clap parses them. The
//! target flags (`--server`, `--config`, `--instance`, TLS, `--timeout-ms`)
//! and `--json` are global: they go before or after the subcommand. The
//! target flags are listed once, under their heading in `borderctl --help`;
//! each command's help points there instead of repeating them.

use std::path::PathBuf;
use std::time::Duration;

use border::args::duration;
use clap::error::ErrorKind;
use clap::{Arg, ArgMatches, Args, Command, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::pcapng::Direction;

/// The border command-line tool.
///
/// Most commands talk to border-mgmt's gRPC API. The server is `--server
/// ADDR` (unix:///path or tcp://ip:port), else `[mgmt].listen` of `--config
/// FILE`, else the default socket of `--instance NAME`
/// (unix:///run/border/NAME.sock). A tcp:// server needs mutual TLS: `--cert`
/// and `--key` (a client certificate pinned in the server's
/// `[mgmt.tls].client_fingerprints`) and `--ca` (the CA of the server's
/// certificate). `counters` and `status --local` read border-dp's state
/// region on this machine instead.
///
/// Output is a readable table, or JSON with --json. Errors are one line on
/// stderr (one JSON object with --json). Exit status: 0 all is well, 1 the
/// command shows a problem or failed, 2 a bad command line, 3 the target
/// (border-mgmt, the gateway, border-dp's state region) cannot be reached.
/// The target flags and --json go before or after the command (`borderctl
/// --config x status` is `borderctl status --config x`). Durations take a
/// unit (`5s`, `300ms`, `2m`); a bare number keeps the flag's unit. See
/// docs/api.md.
#[derive(Parser, Debug)]
#[command(
    name = "borderctl",
    version = border::version::short(),
    long_version = border::version::long(),
    about,
    long_about
)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
    /// Machine-readable JSON instead of text (`events`: one object per line).
    #[arg(long, global = true)]
    pub json: bool,
    #[command(flatten)]
    pub target: Target,
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Publisher, dataplane workers and every VIP backend with its state and reason.
    ///
    /// Asks border-mgmt. When border-mgmt is not reachable and the instance is
    /// known (--config or --instance), shows border-dp's state region instead
    /// (with a note on stderr); --local always does. Exit 0 when border-dp runs
    /// and every worker is alive, 1 otherwise.
    Status {
        /// Read border-dp's state region on this machine; do not ask border-mgmt.
        #[arg(long)]
        local: bool,
        /// With the state region: how long to watch the heartbeats (`300ms`,
        /// `1s`; a bare number is milliseconds).
        #[arg(long, value_name = "DURATION", default_value = "300ms",
              value_parser = duration::millis::<10, 10_000>)]
        sample_ms: Duration,
    },
    /// Apply a whole config file (validated, atomic; only [[vip]] and zone
    /// change at run time).
    ///
    /// An invalid file is refused with `FILE:LINE:COL: key: why` and the
    /// running config stays.
    Apply {
        /// The config (TOML, docs/config.md).
        file: PathBuf,
        /// Validate only (including what would need a restart); apply nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// The running config.
    #[command(subcommand)]
    Config(ConfigCmd),
    /// Every backend of every VIP: its health verdict, each checker's last
    /// observation, and the quorum.
    ///
    /// The verdict is `up`, `down`, `drained` (by the operator), `fail-open`
    /// (down, but serving: every backend of its VIP is down), `undecided`
    /// or `unchecked` (the VIP has no health check). With [[mgmt.peer]]
    /// checkers, lists each with whether its votes count, and every
    /// backend's observations name their checker. Exit 0 when no
    /// health-checked backend is down, undecided or failing open, 1
    /// otherwise. See docs/health.md.
    Health,
    /// Drain a backend: no new connections; open ones finish.
    Drain(BackendRef),
    /// Undo a drain.
    Undrain(BackendRef),
    /// Set a backend's weight (0..=65535; 0 takes it out of the ring), or
    /// `reset` to the configured weight.
    Weight {
        #[command(flatten)]
        backend: BackendRef,
        /// A weight, or `reset`.
        #[arg(value_parser = parse_weight)]
        weight: WeightArg,
    },
    /// Add or remove one backend of a VIP in the running config; disable
    /// (drain, or --kill its connections) or enable one.
    ///
    /// `add` and `remove`: the running config with the change is validated,
    /// published and saved as `apply` would (the same errors; atomic; kept
    /// across restarts of border-mgmt). `disable` and `enable` are operator
    /// overrides like `drain` and `undrain` (kept across restarts too). See
    /// docs/api.md.
    #[command(subcommand)]
    Backend(BackendCmd),
    /// Add or remove one VIP of the running config.
    ///
    /// The running config with the change is validated, published and saved
    /// as `apply` would (the same errors; atomic; kept across restarts of
    /// border-mgmt). See docs/api.md.
    #[command(subcommand)]
    Vip(VipCmd),
    /// Dataplane counters per worker and totals, and per-VIP / per-backend
    /// flow statistics.
    ///
    /// The counter table shows the counters that are not zero (all with
    /// --all); --json lists every counter. When border-mgmt is not reachable
    /// and the instance is known, shows the state region's counters instead
    /// (as `counters`).
    Stats {
        /// Show every counter, also those that are zero.
        #[arg(long)]
        all: bool,
    },
    /// Follow border-mgmt's events (publishes, refused tables, worker
    /// liveness, config and backend changes, health) from now on, one line each.
    ///
    /// Runs until interrupted (or --count events); exit 3 if border-mgmt
    /// ends the stream (it stopped).
    Events {
        /// Stop after this many events.
        #[arg(long, value_name = "N")]
        count: Option<u64>,
    },
    /// The live connections border-dp's workers hold: client, VIP, backend,
    /// local tuple, state, age, packets and bytes each way, PROXY v2 status.
    ///
    /// Asks border-mgmt, which has each worker copy its connection table a
    /// few entries per poll (forwarding goes on at full speed). Each line is
    /// one connection as its worker saw it at one instant; the listing is
    /// not one instant of the whole table (a connection that lives through
    /// it is listed once; one that starts or ends meanwhile may or may not
    /// be). Packets and bytes are counted only with [records] configured.
    /// --json prints one object per line as they come. Exit 0 when listed
    /// (also none), 1 when border-dp is not running or a worker did not
    /// answer, 3 when border-mgmt cannot be reached. See docs/operations.md.
    Conns(ConnsArgs),
    /// BGP maintenance: `on` withdraws every VIP route from the routers
    /// (within 1 s) while border-dp keeps forwarding the connections already
    /// established; `off` announces them again.
    ///
    /// Needs [mgmt.bgp]. `status` shows the state and how many connections
    /// are left. Not kept across restarts of border-mgmt. See docs/bgp.md.
    Maintenance {
        /// `on` or `off`.
        #[arg(value_enum)]
        state: OnOff,
    },
    /// Set the log level of border-mgmt or border-dp while it runs.
    ///
    /// border's own crates log at LEVEL from now until the daemon restarts
    /// (RUST_LOG again) or the level is changed once more (this command,
    /// SIGUSR1/SIGUSR2); libraries keep RUST_LOG's level. border-mgmt
    /// signals the daemon (a real-time signal per level; border-dp by the
    /// pid its state region records), which logs the change at warn.
    /// Operators only. Exit 1 when border-dp is not running (--daemon dp).
    /// See docs/operations.md, "Logs".
    LogLevel {
        /// error, warn, info, debug or trace.
        #[arg(value_enum)]
        level: LogLevelArg,
        /// Which daemon: border-mgmt (mgmt) or border-dp (dp).
        #[arg(long, value_enum, default_value = "mgmt")]
        daemon: DaemonArg,
    },
    /// Name the typical problems, each with its evidence and the next command.
    ///
    /// Asks border-mgmt twice, --window apart: drops by reason with
    /// their rates (every drop counter that moved), VIPs with no eligible
    /// backend or failing open, flapping backends, workers that are stuck or
    /// behind the published tables, connection-table and local-port use,
    /// kernel twins that are down, the local_port_range / ephemeral-range
    /// overlap, BGP sessions and withdrawn VIPs. Exit 0 when nothing is
    /// flagged, 1 when something is, 3 when border-mgmt cannot be asked.
    /// See docs/diag.md.
    Diag {
        /// Time between the two samples, the window of the drop rates (`5s`,
        /// `1m`; a bare number is seconds).
        #[arg(long, value_name = "DURATION", default_value = "5s",
              value_parser = duration::secs::<1, 3600>)]
        window: Duration,
    },
    /// Per-worker dataplane counters and their totals, and each port's NIC
    /// statistics, read from border-dp's state region on this machine
    /// (without border-mgmt).
    ///
    /// Needs --config or --instance. The table shows the counters that are
    /// not zero (all with --all); --json always lists every counter. The
    /// port table (and "ports" in --json) shows each data port and kernel
    /// twin's rte_eth_stats (ipackets ... imissed, rx_nombuf), copied by
    /// border-dp about once a second. When border-dp has stopped, the
    /// counters of its last run are shown with a note on stderr, and the
    /// exit status is 1; 3 when it never ran (no state region).
    Counters {
        /// Show every counter, also those that are zero.
        #[arg(long)]
        all: bool,
    },
    /// Capture packets of border-dp's ports into a pcapng file (tcpdump -r,
    /// Wireshark), with a tcpdump filter expression.
    ///
    /// Needs --config (border-dp's ports and EAL prefix), `capture = true`
    /// in its [dataplane], and Debian's dpdk-dumpcap, which this runs
    /// against border-dp. Stops at --count packets, after --duration, or on
    /// Ctrl-C, and finishes the file. rx frames are as they
    /// arrived, tx frames as border sent them (rewritten): capture the
    /// client port and the backend port to see both sides. See docs/capture.md.
    Capture(CaptureArgs),
    /// Print the shell completion script for bash, zsh or fish.
    ///
    /// `borderctl completions bash > /etc/bash_completion.d/borderctl`; the
    /// Debian package installs all three.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the man pages of borderctl (and each of its commands),
    /// border-dp, border-mgmt and border-gw into DIR.
    ///
    /// The Debian package installs them already (made from the same
    /// definitions); this is for an install from source.
    ManPages {
        /// Where to write the pages (created if missing).
        dir: PathBuf,
    },
}

/// `config ...`.
#[derive(Subcommand, Debug)]
pub enum ConfigCmd {
    /// Print the config border-mgmt runs, as TOML, with its source (the
    /// file, or `<api>` for a config applied with `borderctl apply`) and
    /// when it was applied, as comment lines above it.
    ///
    /// The text is valid TOML (save it, edit it, `borderctl apply` it).
    /// --json prints `{source, applied_at, generation, toml}`.
    Show,
}

/// `backend ...`: one change to a VIP's backends.
#[derive(Subcommand, Debug)]
pub enum BackendCmd {
    /// Add a backend to a VIP ([[vip.backend]] with these keys).
    Add {
        /// VIP name.
        vip: String,
        /// Backend as addr:port (10.20.0.11:8080, [2001:db8::11]:8080).
        backend: String,
        /// Weight 0..=65535 (default 1).
        #[arg(long, value_name = "N")]
        weight: Option<u32>,
        /// The backend's zone.
        #[arg(long, value_name = "ZONE")]
        zone: Option<String>,
        /// Open connections at most (default: no limit).
        #[arg(long, value_name = "N")]
        max_connections: Option<u32>,
        /// Validate only; apply nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Remove a backend from a VIP; its open connections are no longer
    /// forwarded.
    Remove {
        /// VIP name.
        vip: String,
        /// Backend as addr:port.
        backend: String,
        /// Validate only; apply nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Take a backend out of the ring: as `drain` (open connections
    /// finish), or with --kill also reset every connection it holds.
    ///
    /// --kill: every established connection to the backend ends on its
    /// next packet from either end, whatever the VIP's `on_down`: TCP is
    /// answered with a RST (the client sees a reset), a UDP flow is
    /// forgotten and its next datagram goes to another backend. Each is
    /// counted once as `flows_killed` (`counters`, `stats`, Prometheus
    /// `border_flows_killed_total`). A connection that never sends again
    /// is not reset: its entry ends with the connection table's timeouts.
    /// Kept across restarts of border-mgmt; `backend enable` undoes it.
    /// Exit 0 when applied, 1 when refused (no such VIP or backend), 3
    /// when border-mgmt cannot be reached. See docs/operations.md.
    Disable {
        #[command(flatten)]
        backend: BackendRef,
        /// Also reset every connection the backend holds.
        #[arg(long)]
        kill: bool,
    },
    /// Undo `backend disable` (with or without --kill) and `drain`: the
    /// backend takes new connections again.
    Enable(BackendRef),
}

/// `vip ...`: one change to the VIPs.
#[derive(Subcommand, Debug)]
pub enum VipCmd {
    /// Add the VIP in FILE: exactly one [[vip]] table, with its
    /// [[vip.backend]], [vip.health] and [vip.limits] tables (docs/config.md).
    Add {
        /// The VIP (TOML).
        file: PathBuf,
        /// Validate only; apply nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Remove a VIP: it stops being served and announced.
    Remove {
        /// VIP name.
        vip: String,
        /// Validate only; apply nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

/// `maintenance on|off`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum OnOff {
    On,
    Off,
}

/// `log-level LEVEL`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum LogLevelArg {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

impl LogLevelArg {
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevelArg::Error => "error",
            LogLevelArg::Warn => "warn",
            LogLevelArg::Info => "info",
            LogLevelArg::Debug => "debug",
            LogLevelArg::Trace => "trace",
        }
    }
}

/// `log-level --daemon`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum DaemonArg {
    /// border-mgmt.
    Mgmt,
    /// border-dp.
    Dp,
}

/// One backend of one VIP, and the note kept with a change to it.
#[derive(Args, Debug)]
pub struct BackendRef {
    /// VIP name.
    pub vip: String,
    /// Backend as addr:port (10.20.0.11:8080, [2001:db8::11]:8080).
    pub backend: String,
    /// Text kept with the override and shown in the reason.
    #[arg(long)]
    pub note: Option<String>,
}

/// `borderctl conns` filters.
#[derive(Args, Debug)]
pub struct ConnsArgs {
    /// Only connections to this VIP: an address, or address:port
    /// (192.0.2.10:443, [2001:db8::10]:443).
    #[arg(long, value_name = "ADDR[:PORT]")]
    pub vip: Option<String>,
    /// Only connections to this backend: an address, or address:port.
    #[arg(long, value_name = "ADDR[:PORT]")]
    pub backend: Option<String>,
    /// Only clients in this prefix (198.51.100.0/24) or of this address.
    #[arg(long, value_name = "PREFIX")]
    pub client: Option<String>,
    /// Stop after this many connections.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub limit: Option<u64>,
}

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
    /// Stop after this long (`30s`, `5m`; a bare number is seconds).
    #[arg(long, value_name = "DURATION", value_parser = duration::secs::<1, 86_400>)]
    pub duration: Option<Duration>,
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

/// Where border-mgmt (or the instance's state region) is, and how to reach it.
#[derive(Args, Debug)]
#[command(next_help_heading = "Target")]
pub struct Target {
    /// border-mgmt's API: unix:///path or tcp://ip:port.
    #[arg(long, value_name = "ADDR", global = true)]
    pub server: Option<String>,
    /// The config file: its [mgmt].listen (and its instance, for the state region).
    #[arg(long, value_name = "FILE", global = true)]
    pub config: Option<PathBuf>,
    /// The instance: its default socket unix:///run/border/NAME.sock (and its state region).
    #[arg(long, value_name = "NAME", global = true)]
    pub instance: Option<String>,
    /// Client certificate (PEM) for a tcp:// server; pinned on the server.
    #[arg(long, value_name = "PEM", global = true)]
    pub cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, value_name = "PEM", global = true)]
    pub key: Option<PathBuf>,
    /// CA of the server's certificate (PEM).
    #[arg(long, value_name = "PEM", global = true)]
    pub ca: Option<PathBuf>,
    /// Name to verify the server's certificate against (default: its IP address).
    #[arg(long, value_name = "NAME", global = true)]
    pub server_name: Option<String>,
    /// Reach the appliance through this border-gw (tcp://ip:port, mutual
    /// TLS with --cert/--key/--ca); needs --appliance. See docs/fleet.md.
    #[arg(long, value_name = "URL", global = true)]
    pub gateway: Option<String>,
    /// The appliance to call through --gateway (its [mgmt.agent].id).
    #[arg(long, value_name = "ID", global = true)]
    pub appliance: Option<String>,
    /// How long to wait for border-mgmt, to connect and for each answer
    /// (`10s`, `500ms`; a bare number is milliseconds).
    #[arg(long, value_name = "DURATION", default_value = "10s", global = true,
          value_parser = duration::millis::<100, 600_000>)]
    pub timeout_ms: Duration,
}

/// borderctl's command as it parses and as its help, completions and man
/// pages show it: the target flags are global (every command takes them)
/// but listed only in `borderctl --help`, under their heading; each
/// command's help says where they are.
pub fn command() -> Command {
    let target: Vec<Arg> = Target::augment_args(Command::new("target"))
        .get_arguments()
        .cloned()
        .collect();
    let names: Vec<String> = target
        .iter()
        .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
        .collect();
    let pointer = format!(
        "Target: {} go before or after the command; see `borderctl --help`.",
        names.join(", ")
    );
    let mut cmd = Cli::command();
    let subcommands: Vec<String> = cmd
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    for name in subcommands {
        // A command that has the global flags already does not get them
        // propagated: its hidden copies (same ids, so the values still
        // reach `Target`) keep them out of its help and its commands' helps.
        cmd = cmd.mut_subcommand(name, |sc| {
            let sc = target.iter().fold(sc, |sc, a| sc.arg(a.clone().hide(true)));
            with_pointer(sc, &pointer)
        });
    }
    cmd
}

/// `sc` and every command under it say where the target flags are.
fn with_pointer(mut sc: Command, pointer: &str) -> Command {
    let nested: Vec<String> = sc
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    for name in nested {
        sc = sc.mut_subcommand(name, |n| with_pointer(n, pointer));
    }
    sc.after_help(pointer.to_string())
}

impl Cli {
    /// Parses the command line. A bad one, or a combination clap cannot
    /// check, comes back as clap's usage error with whether the line asked
    /// for `--json` (the caller exits 2 with it: `output::usage_error`).
    /// (clap checks `conflicts_with` and `requires` per level: a global flag
    /// before the subcommand and one after it would escape them, and a
    /// global flag cannot be required.)
    pub fn parse_checked() -> Result<Cli, (clap::Error, bool)> {
        let json = std::env::args_os().any(|a| a == "--json");
        let mut cmd = command();
        let cli = cmd
            .try_get_matches_from_mut(std::env::args_os())
            .and_then(|m: ArgMatches| Cli::from_arg_matches(&m))
            .map_err(|e| (e, json))?;
        if let Err((kind, msg)) = cli.check() {
            return Err((cmd.error(kind, msg), cli.json));
        }
        Ok(cli)
    }

    fn check(&self) -> Result<(), (ErrorKind, String)> {
        self.target.check()?;
        if let Cmd::Capture(_) = self.cmd {
            if self.target.config.is_none() {
                return Err((
                    ErrorKind::MissingRequiredArgument,
                    "`capture` needs --config FILE (border-dp's ports and EAL file prefix)".into(),
                ));
            }
        }
        if let Cmd::Status { local: true, .. } = self.cmd {
            if self.target.config.is_none() && self.target.instance.is_none() {
                return Err((
                    ErrorKind::MissingRequiredArgument,
                    "`status --local` needs --config FILE or --instance NAME".into(),
                ));
            }
        }
        if let Cmd::Counters { .. } = self.cmd {
            if self.target.server.is_some()
                || self.target.cert.is_some()
                || self.target.gateway.is_some()
            {
                return Err((
                    ErrorKind::ArgumentConflict,
                    "`counters` reads border-dp's state region on this machine: \
                     --server and TLS flags do not apply (use `stats` to ask border-mgmt)"
                        .into(),
                ));
            }
            if self.target.config.is_none() && self.target.instance.is_none() {
                return Err((
                    ErrorKind::MissingRequiredArgument,
                    "`counters` needs --config FILE or --instance NAME".into(),
                ));
            }
        }
        Ok(())
    }
}

impl Target {
    fn check(&self) -> Result<(), (ErrorKind, String)> {
        if self.config.is_some() && self.instance.is_some() {
            return Err((
                ErrorKind::ArgumentConflict,
                "the argument '--config <FILE>' cannot be used with '--instance <NAME>' \
                 (the config names the instance)"
                    .into(),
            ));
        }
        match (&self.gateway, &self.appliance) {
            (Some(_), None) => {
                return Err((
                    ErrorKind::MissingRequiredArgument,
                    "--gateway needs --appliance ID (the appliance to call through it)".into(),
                ))
            }
            (None, Some(_)) => {
                return Err((
                    ErrorKind::MissingRequiredArgument,
                    "--appliance is for a call through a gateway: give --gateway URL".into(),
                ))
            }
            (Some(_), Some(_))
                if self.server.is_some() || self.instance.is_some() || self.config.is_some() =>
            {
                return Err((
                    ErrorKind::ArgumentConflict,
                    "--gateway names where to call: --server, --config and --instance do not apply"
                        .into(),
                ))
            }
            _ => {}
        }
        let tls = [
            ("--key", self.key.is_some()),
            ("--ca", self.ca.is_some()),
            ("--server-name", self.server_name.is_some()),
        ];
        if self.cert.is_some() {
            let missing: Vec<&str> = tls[..2].iter().filter(|f| !f.1).map(|f| f.0).collect();
            if !missing.is_empty() {
                return Err((
                    ErrorKind::MissingRequiredArgument,
                    format!("--cert needs {} as well", missing.join(" and ")),
                ));
            }
        } else if let Some((flag, _)) = tls.iter().find(|f| f.1) {
            return Err((
                ErrorKind::MissingRequiredArgument,
                format!("{flag} is for a client certificate: give --cert, --key and --ca"),
            ));
        }
        Ok(())
    }
}

/// `weight`'s value: a number, or back to the configured weight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightArg {
    Set(u32),
    Reset,
}

fn parse_weight(s: &str) -> Result<WeightArg, String> {
    if s == "reset" {
        return Ok(WeightArg::Reset);
    }
    match s.parse::<u32>() {
        Ok(w) if w <= 65_535 => Ok(WeightArg::Set(w)),
        _ => Err(format!(
            "`{s}`: expected a weight 0..=65535 or `reset` (back to the configured weight)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("borderctl").chain(args.iter().copied()))
    }

    #[test]
    fn weights_and_reset_parse() {
        assert_eq!(parse_weight("0"), Ok(WeightArg::Set(0)));
        assert_eq!(parse_weight("65535"), Ok(WeightArg::Set(65535)));
        assert_eq!(parse_weight("reset"), Ok(WeightArg::Reset));
        assert!(parse_weight("65536").is_err());
        assert!(parse_weight("-1").is_err());
    }

    #[test]
    fn the_cli_is_consistent() {
        Cli::command().debug_assert();
        command().debug_assert();
    }

    #[test]
    fn durations_take_a_unit_or_the_flags_own() {
        let cli = parse(&["--timeout-ms", "2s", "diag", "--window", "1500ms"]).unwrap();
        assert_eq!(cli.target.timeout_ms, Duration::from_secs(2));
        assert!(matches!(cli.cmd, Cmd::Diag { window } if window == Duration::from_millis(1500)));
        let cli = parse(&["diag", "--window", "7"]).unwrap();
        assert!(matches!(cli.cmd, Cmd::Diag { window } if window == Duration::from_secs(7)));
        assert_eq!(
            parse(&["stats"]).unwrap().target.timeout_ms,
            Duration::from_secs(10)
        );
        let cli = parse(&["status", "--local", "--sample-ms", "1s"]).unwrap();
        assert!(
            matches!(cli.cmd, Cmd::Status { sample_ms, .. } if sample_ms == Duration::from_secs(1))
        );
        let e = parse(&["diag", "--window", "2h"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ValueValidation, "{e}");
        assert!(e.to_string().contains("2h is not between 1s and 1h"), "{e}");
    }

    #[test]
    fn the_target_flags_are_listed_once_and_still_taken_everywhere() {
        let mut cmd = command();
        let top = cmd.render_long_help().to_string();
        assert!(top.contains("Target:\n"), "{top}");
        assert_eq!(top.matches("--server <ADDR>").count(), 1, "{top}");
        let status = cmd.find_subcommand_mut("status").unwrap();
        let help = status.render_long_help().to_string();
        assert!(!help.contains("--server <ADDR>"), "{help}");
        assert!(help.contains("--json"), "{help}");
        assert!(
            help.contains("Target: --server, --config, --instance"),
            "{help}"
        );
        let m = command()
            .try_get_matches_from(["borderctl", "status", "--server", "unix:///x.sock"])
            .unwrap();
        let cli = Cli::from_arg_matches(&m).unwrap();
        assert_eq!(cli.target.server.as_deref(), Some("unix:///x.sock"));
    }

    #[test]
    fn global_flags_go_before_or_after_the_command() {
        for args in [
            &["--config", "x.toml", "--json", "status", "--local"][..],
            &["status", "--local", "--config", "x.toml", "--json"][..],
            &["--json", "status", "--config", "x.toml", "--local"][..],
        ] {
            let cli = parse(args).unwrap();
            assert_eq!(cli.target.config, Some(PathBuf::from("x.toml")), "{args:?}");
            assert!(cli.json, "{args:?}");
            assert!(
                matches!(cli.cmd, Cmd::Status { local: true, .. }),
                "{args:?}"
            );
        }
        let cli = parse(&[
            "--instance",
            "lab",
            "--timeout-ms",
            "500",
            "weight",
            "web",
            "10.0.0.1:80",
            "reset",
        ])
        .unwrap();
        assert_eq!(cli.target.instance.as_deref(), Some("lab"));
        assert_eq!(cli.target.timeout_ms, Duration::from_millis(500));
        match cli.cmd {
            Cmd::Weight { backend, weight } => {
                assert_eq!(
                    (backend.vip.as_str(), backend.backend.as_str()),
                    ("web", "10.0.0.1:80")
                );
                assert_eq!(weight, WeightArg::Reset);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn global_flags_keep_their_rules_on_either_side_of_the_command() {
        let check = |args: &[&str]| parse(args).unwrap().check().map_err(|e| e.0);
        for args in [
            &["--config", "x.toml", "status", "--instance", "lab"][..],
            &["status", "--config", "x.toml", "--instance", "lab"][..],
        ] {
            assert_eq!(check(args), Err(ErrorKind::ArgumentConflict), "{args:?}");
        }
        for args in [
            &["--cert", "c.pem", "stats", "--key", "k.pem"][..],
            &["--key", "k.pem", "stats"][..],
            &["stats", "--server-name", "mgmt"][..],
        ] {
            assert_eq!(
                check(args),
                Err(ErrorKind::MissingRequiredArgument),
                "{args:?}"
            );
        }
        let tls = [
            "--key", "k.pem", "stats", "--cert", "c.pem", "--ca", "ca.pem",
        ];
        assert_eq!(check(&tls), Ok(()));
        let e = parse(&["weight", "web", "10.0.0.1:80", "70000"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ValueValidation, "{e}");
    }

    #[test]
    fn gateway_and_appliance_go_together_and_exclude_the_other_targets() {
        let check = |args: &[&str]| parse(args).unwrap().check().map_err(|e| e.0);
        let tls = ["--cert", "c.pem", "--key", "k.pem", "--ca", "ca.pem"];
        let with = |more: &[&'static str]| -> Vec<&'static str> {
            tls.iter().copied().chain(more.iter().copied()).collect()
        };
        assert_eq!(
            check(&with(&[
                "status",
                "--gateway",
                "tcp://10.0.0.1:7501",
                "--appliance",
                "ams-1"
            ])),
            Ok(())
        );
        assert_eq!(
            check(&with(&["--gateway", "tcp://10.0.0.1:7501", "status"])),
            Err(ErrorKind::MissingRequiredArgument)
        );
        assert_eq!(
            check(&with(&["status", "--appliance", "ams-1"])),
            Err(ErrorKind::MissingRequiredArgument)
        );
        assert_eq!(
            check(&with(&[
                "--gateway",
                "tcp://10.0.0.1:7501",
                "--appliance",
                "ams-1",
                "status",
                "--server",
                "unix:///x.sock"
            ])),
            Err(ErrorKind::ArgumentConflict)
        );
        assert_eq!(
            check(&[
                "counters",
                "--instance",
                "lab",
                "--gateway",
                "tcp://1.2.3.4:5",
                "--appliance",
                "a"
            ]),
            Err(ErrorKind::ArgumentConflict)
        );
    }

    #[test]
    fn counters_needs_a_local_instance_and_no_server() {
        let check = |args: &[&str]| parse(args).unwrap().check().map_err(|e| e.0);
        assert_eq!(check(&["counters", "--instance", "lab"]), Ok(()));
        assert_eq!(check(&["--config", "x.toml", "counters", "--all"]), Ok(()));
        assert_eq!(
            check(&["counters"]),
            Err(ErrorKind::MissingRequiredArgument)
        );
        assert_eq!(
            check(&[
                "counters",
                "--instance",
                "lab",
                "--server",
                "unix:///x.sock"
            ]),
            Err(ErrorKind::ArgumentConflict)
        );
        assert_eq!(check(&["stats"]), Ok(()));
        assert_eq!(
            check(&["status", "--local"]),
            Err(ErrorKind::MissingRequiredArgument)
        );
        assert_eq!(check(&["status", "--local", "--instance", "lab"]), Ok(()));
    }
}
