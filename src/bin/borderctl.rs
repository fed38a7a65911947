//! borderctl: the operator's command-line tool of border. Talks to
//! border-mgmt's gRPC API `border.v1` (status, apply, drain/undrain/weight,
//! stats, events); `counters` and `status --local` read border-dp's state
//! region directly, and `status`/`stats` fall back to it when border-mgmt
//! is not reachable.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args as ClapArgs, Parser, Subcommand};
use conf::counters::Counter;
use conf::state::{state_path, StateRegion};
use mgmt::client::{Client, ConnectError};
use mgmt::pb;
use mgmt::tls::ClientTls;
use serde_json::{json, Map, Value};

use border::DpView;

const PROGRAM: &str = "borderctl";

/// `println!` that ends the program quietly when stdout is a closed pipe
/// (`borderctl events | head`) instead of panicking. SIGPIPE stays ignored:
/// a connection border-mgmt closes must be an error, not a silent death.
macro_rules! outln {
    ($($t:tt)*) => {
        emit_line(&format!($($t)*))
    };
}

fn emit_line(s: &str) {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    if let Err(e) = writeln!(o, "{s}") {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("{PROGRAM}: error: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

/// The border command-line tool.
///
/// Most commands talk to border-mgmt's gRPC API. The server is `--server
/// ADDR` (unix:///path or tcp://ip:port), else `[mgmt].listen` of `--config
/// FILE`, else the default socket of `--instance NAME`
/// (unix:///run/border/NAME.sock). A tcp:// server needs mutual TLS: `--cert`
/// and `--key` (a client certificate pinned in the server's
/// `[mgmt.tls].client_fingerprints`) and `--ca` (the CA of the server's
/// certificate).
///
/// Output is a readable table, or JSON with --json. Errors are one line on
/// stderr with a non-zero exit status.
#[derive(Parser, Debug)]
#[command(name = "borderctl", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Publisher, dataplane workers and every VIP backend with its state and reason.
    ///
    /// Asks border-mgmt. When border-mgmt is not reachable and the instance is
    /// known (--config or --instance), shows border-dp's state region instead
    /// (with a note on stderr); --local always does. Exit 0 when border-dp runs
    /// and every worker is alive, 1 otherwise.
    Status {
        #[command(flatten)]
        conn: Conn,
        /// Machine-readable JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Read border-dp's state region on this machine; do not ask border-mgmt.
        #[arg(long)]
        local: bool,
        /// With the state region: how long to watch the heartbeats, in milliseconds.
        #[arg(long, value_name = "MS", default_value_t = 300,
              value_parser = clap::value_parser!(u64).range(10..=10_000))]
        sample_ms: u64,
    },
    /// Apply a whole config file (validated, atomic; only [[vip]] and zone
    /// change at run time).
    ///
    /// An invalid file is refused with `FILE:LINE:COL: key: why` and the
    /// running config stays.
    Apply {
        /// The config (TOML, docs/config.md).
        file: PathBuf,
        #[command(flatten)]
        conn: Conn,
        /// Validate only (including what would need a restart); apply nothing.
        #[arg(long)]
        dry_run: bool,
        /// Machine-readable JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Drain a backend: no new connections; open ones finish.
    Drain {
        /// VIP name.
        vip: String,
        /// Backend as addr:port (10.20.0.11:8080, [2001:db8::11]:8080).
        backend: String,
        #[command(flatten)]
        conn: Conn,
        /// Text kept with the override and shown in the reason.
        #[arg(long)]
        note: Option<String>,
        /// Machine-readable JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Undo a drain.
    Undrain {
        /// VIP name.
        vip: String,
        /// Backend as addr:port.
        backend: String,
        #[command(flatten)]
        conn: Conn,
        /// Text kept with the override and shown in the reason.
        #[arg(long)]
        note: Option<String>,
        /// Machine-readable JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Set a backend's weight (0..=65535; 0 takes it out of the ring), or
    /// `reset` to the configured weight.
    Weight {
        /// VIP name.
        vip: String,
        /// Backend as addr:port.
        backend: String,
        /// A weight, or `reset`.
        #[arg(value_parser = parse_weight)]
        weight: WeightArg,
        #[command(flatten)]
        conn: Conn,
        /// Text kept with the override and shown in the reason.
        #[arg(long)]
        note: Option<String>,
        /// Machine-readable JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Dataplane counters per worker and totals, and per-VIP / per-backend
    /// flow statistics.
    ///
    /// The counter table shows the counters that are not zero (all with
    /// --all); --json lists every counter. When border-mgmt is not reachable
    /// and the instance is known, shows the state region's counters instead
    /// (as `counters`).
    Stats {
        #[command(flatten)]
        conn: Conn,
        /// Show every counter, also those that are zero.
        #[arg(long)]
        all: bool,
        /// Machine-readable JSON instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// Follow border-mgmt's events (publishes, refused tables, worker
    /// liveness, config and backend changes) from now on, one line each.
    ///
    /// Runs until interrupted (or --count events); exit 1 if border-mgmt
    /// ends the stream (it stopped).
    Events {
        #[command(flatten)]
        conn: Conn,
        /// One JSON object per line instead of text.
        #[arg(long)]
        json: bool,
        /// Stop after this many events.
        #[arg(long, value_name = "N")]
        count: Option<u64>,
    },
    /// Per-worker dataplane counters and their totals, read from border-dp's
    /// state region on this machine (without border-mgmt).
    ///
    /// The table shows the counters that are not zero (all with --all);
    /// --json always lists every counter. Exit 0 even when border-dp has
    /// stopped (the counters of its last run are shown, with a note on stderr).
    Counters {
        #[command(flatten)]
        target: Target,
        /// Show every counter, also those that are zero.
        #[arg(long)]
        all: bool,
        /// Machine-readable JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// Which instance: from a config file or by name (state region commands).
#[derive(ClapArgs, Debug)]
#[group(required = true, multiple = false)]
struct Target {
    /// The instance named in this configuration file.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The instance with this name.
    #[arg(long, value_name = "NAME")]
    instance: Option<String>,
}

impl Target {
    fn open(&self) -> Result<(String, StateRegion), String> {
        open_local(self.config.as_deref(), self.instance.as_deref())
    }
}

fn open_local(
    config: Option<&Path>,
    instance: Option<&str>,
) -> Result<(String, StateRegion), String> {
    let instance = border::instance_from(config, instance).map_err(|e| e.to_string())?;
    let region = border::open_state(&instance).map_err(|e| e.to_string())?;
    Ok((instance, region))
}

/// Where border-mgmt is, and how to reach it.
#[derive(ClapArgs, Debug)]
struct Conn {
    /// border-mgmt's API: unix:///path or tcp://ip:port.
    #[arg(long, value_name = "ADDR")]
    server: Option<String>,
    /// The config file: its [mgmt].listen (and its instance, for the state region).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The instance: its default socket unix:///run/border/NAME.sock.
    #[arg(long, value_name = "NAME", conflicts_with = "config")]
    instance: Option<String>,
    /// Client certificate (PEM) for a tcp:// server; pinned on the server.
    #[arg(long, value_name = "PEM", requires_all = ["key", "ca"])]
    cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, value_name = "PEM", requires = "cert")]
    key: Option<PathBuf>,
    /// CA of the server's certificate (PEM).
    #[arg(long, value_name = "PEM", requires = "cert")]
    ca: Option<PathBuf>,
    /// Name to verify the server's certificate against (default: its IP address).
    #[arg(long, value_name = "NAME", requires = "cert")]
    server_name: Option<String>,
    /// How long to wait for border-mgmt (to connect, and for each answer), in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(100..=600_000))]
    timeout_ms: u64,
}

/// Why a command failed. One line.
#[derive(Debug)]
enum Failure {
    /// border-mgmt did not answer (status and stats may use the state region).
    Unreachable(String),
    /// Anything else.
    Other(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Unreachable(m) | Failure::Other(m) => f.write_str(m),
        }
    }
}

impl From<String> for Failure {
    fn from(s: String) -> Failure {
        Failure::Other(s)
    }
}

type Res = Result<ExitCode, Failure>;

/// `a\nb` -> `a; b`: every error stays one line.
fn one_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

/// A chain of causes as tonic prints it, without its repetitions and
/// without the uninformative `transport error`.
fn tidy_chain(s: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for p in s.split(": ") {
        if p == "transport error" {
            continue;
        }
        parts.push(p);
        // `a: b: a: b` -> `a: b`: a cause repeated by its wrapper.
        'shrink: loop {
            for k in 1..=parts.len() / 2 {
                let n = parts.len();
                if parts[n - k..] == parts[n - 2 * k..n - k] {
                    parts.truncate(n - k);
                    continue 'shrink;
                }
            }
            break;
        }
    }
    parts.join(": ")
}

/// A refusal in the TLS handshake (certificates, alerts), not a server that
/// is away.
fn is_tls_failure(why: &str) -> bool {
    [
        "certificate",
        "alert",
        "handshake",
        "AccessDenied",
        "UnknownIssuer",
    ]
    .iter()
    .any(|w| why.contains(w))
}

fn show(target: &conf::Listen) -> String {
    match target {
        conf::Listen::Unix(p) => format!("unix://{}", p.display()),
        conf::Listen::Tcp(a) => format!("tcp://{a}"),
    }
}

impl Conn {
    fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    /// The instance, when --config or --instance names one (for the state region).
    fn local_instance(&self) -> Option<(Option<&Path>, Option<&str>)> {
        (self.config.is_some() || self.instance.is_some())
            .then_some((self.config.as_deref(), self.instance.as_deref()))
    }

    fn tls(&self) -> Option<ClientTls> {
        let (cert, key, ca) = (self.cert.clone()?, self.key.clone()?, self.ca.clone()?);
        Some(ClientTls {
            server_ca: ca,
            cert,
            key,
            server_name: self.server_name.clone(),
        })
    }

    async fn connect(&self) -> Result<Api, Failure> {
        let target = border::api_target(
            self.server.as_deref(),
            self.config.as_deref(),
            self.instance.as_deref(),
        )
        .map_err(|e| Failure::Other(one_line(&e.to_string())))?;
        let shown = show(&target);
        if matches!(target, conf::Listen::Unix(_)) && self.cert.is_some() {
            return Err(Failure::Other(format!(
                "{shown}: --cert/--key/--ca are for a tcp:// server (a unix socket has no TLS)"
            )));
        }
        let tls = self.tls();
        let client = match tokio::time::timeout(
            self.timeout(),
            mgmt::client::connect(&target, tls.as_ref()),
        )
        .await
        {
            Err(_) => {
                return Err(Failure::Unreachable(format!(
                    "border-mgmt is not reachable: no answer from {shown} within {} ms",
                    self.timeout_ms
                )))
            }
            Ok(Err(e @ ConnectError::Connect { .. })) => {
                let why = tidy_chain(&one_line(&e.to_string()));
                // TLS 1.3 refuses a client certificate after the handshake;
                // the connect waits for it (mgmt::tls::connect_primed).
                let refused = why.contains("AccessDenied")
                    || why.contains("closed the connection right after the TLS handshake");
                return Err(if refused {
                    Failure::Other(format!(
                        "TLS with border-mgmt failed: it refused this client \
                         certificate ({why}); is its fingerprint in [mgmt.tls].client_fingerprints?"
                    ))
                } else if is_tls_failure(&why) {
                    Failure::Other(format!("TLS with border-mgmt failed: {why}"))
                } else {
                    Failure::Unreachable(format!("border-mgmt is not reachable: {why}"))
                });
            }
            Ok(Err(e)) => return Err(Failure::Other(one_line(&e.to_string()))),
            Ok(Ok(c)) => c,
        };
        Ok(Api {
            client,
            shown,
            timeout: self.timeout(),
        })
    }
}

/// A connected client and where it is connected.
struct Api {
    client: Client,
    shown: String,
    timeout: Duration,
}

impl Api {
    /// One unary call, bounded by the timeout; errors become one line.
    async fn call<T, F>(&mut self, f: impl FnOnce(Client) -> F) -> Result<T, Failure>
    where
        F: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        match tokio::time::timeout(self.timeout, f(self.client.clone())).await {
            Err(_) => Err(Failure::Unreachable(format!(
                "border-mgmt at {} did not answer within {} ms",
                self.shown,
                self.timeout.as_millis()
            ))),
            Ok(Ok(r)) => Ok(r.into_inner()),
            Ok(Err(st)) => Err(status_failure(&self.shown, &st)),
        }
    }
}

/// A refused call as one line: the server's message for the errors it
/// explains itself (NOT_FOUND, INVALID_ARGUMENT, FAILED_PRECONDITION).
fn status_failure(shown: &str, st: &tonic::Status) -> Failure {
    use tonic::Code;
    let mut msg = one_line(st.message());
    let mut src = std::error::Error::source(st);
    while let Some(s) = src {
        let more = one_line(&s.to_string());
        if !msg.contains(&more) {
            msg.push_str(": ");
            msg.push_str(&more);
        }
        src = s.source();
    }
    let msg = tidy_chain(&msg);
    // Over TLS 1.3 a client whose certificate the server refuses learns it
    // only on its first request: as an alert, or as a closed connection.
    let tls = shown.starts_with("tcp://");
    let lost = matches!(
        st.code(),
        Code::Unknown | Code::Cancelled | Code::Unavailable
    );
    if tls && lost && msg.contains("AccessDenied") {
        return Failure::Other(format!(
            "TLS with border-mgmt at {shown} failed: it refused this client certificate ({msg}); \
             is its fingerprint in [mgmt.tls].client_fingerprints?"
        ));
    }
    if tls
        && lost
        && ["broken pipe", "connection closed", "connection reset"]
            .iter()
            .any(|w| msg.contains(w))
    {
        return Failure::Other(format!(
            "border-mgmt at {shown} closed the connection ({msg}): over TLS that is how it \
             refuses a client certificate whose fingerprint is not in [mgmt.tls].client_fingerprints"
        ));
    }
    match st.code() {
        Code::NotFound | Code::InvalidArgument | Code::FailedPrecondition => Failure::Other(msg),
        Code::Unavailable if is_tls_failure(&msg) => {
            Failure::Other(format!("TLS with border-mgmt at {shown} failed: {msg}"))
        }
        Code::Unavailable => {
            Failure::Unreachable(format!("border-mgmt at {shown} is not reachable: {msg}"))
        }
        Code::OutOfRange => Failure::Other(format!(
            "border-mgmt refused the request: larger than the API's {} MiB limit (OUT_OF_RANGE: {msg})",
            mgmt::MAX_MESSAGE_BYTES >> 20
        )),
        code => Failure::Other(format!("border-mgmt at {shown}: {code:?}: {msg}")),
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Other(format!("cannot start the runtime: {e}")))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Counters { target, all, json } => counters(&target, all, json).map_err(Failure::from),
        Cmd::Status {
            conn,
            json,
            local,
            sample_ms,
        } => status(&conn, json, local, Duration::from_millis(sample_ms)),
        Cmd::Apply {
            file,
            conn,
            dry_run,
            json,
        } => apply(&conn, &file, dry_run, json),
        Cmd::Drain {
            vip,
            backend,
            conn,
            note,
            json,
        } => set_backend(
            &conn,
            &vip,
            &backend,
            pb::set_backend_request::Action::Drain(pb::Drain {}),
            note,
            json,
        ),
        Cmd::Undrain {
            vip,
            backend,
            conn,
            note,
            json,
        } => set_backend(
            &conn,
            &vip,
            &backend,
            pb::set_backend_request::Action::Undrain(pb::Undrain {}),
            note,
            json,
        ),
        Cmd::Weight {
            vip,
            backend,
            weight,
            conn,
            note,
            json,
        } => set_backend(
            &conn,
            &vip,
            &backend,
            match weight {
                WeightArg::Set(w) => pb::set_backend_request::Action::Weight(w),
                WeightArg::Reset => {
                    pb::set_backend_request::Action::ResetWeight(pb::ResetWeight {})
                }
            },
            note,
            json,
        ),
        Cmd::Stats { conn, all, json } => stats(&conn, all, json),
        Cmd::Events { conn, json, count } => events(&conn, json, count),
    };
    match res {
        Ok(code) => code,
        Err(e) => border::fail(PROGRAM, &e),
    }
}

// ---- weight argument -------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum WeightArg {
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

// ---- status ----------------------------------------------------------------

fn status(conn: &Conn, as_json: bool, local: bool, sample: Duration) -> Res {
    if local {
        let Some((config, instance)) = conn.local_instance() else {
            return Err(Failure::Other(
                "--local needs --config FILE or --instance NAME".into(),
            ));
        };
        return local_status(config, instance, as_json, sample).map_err(Failure::from);
    }
    let rt = runtime()?;
    let answer = rt.block_on(async {
        let mut api = conn.connect().await?;
        let st = api
            .call(|mut c| async move { c.get_status(pb::GetStatusRequest {}).await })
            .await?;
        Ok::<_, Failure>((api.shown, st))
    });
    match answer {
        Ok((shown, st)) => print_status(&shown, &st, as_json),
        Err(Failure::Unreachable(why)) => match conn.local_instance() {
            Some((config, instance)) => {
                match open_local(config, instance) {
                    Ok(_) => eprintln!(
                        "{PROGRAM}: note: {why}; showing border-dp's state region on this machine"
                    ),
                    Err(e) => return Err(Failure::Other(format!("{why}; and {e}"))),
                }
                local_status(config, instance, as_json, sample).map_err(Failure::from)
            }
            None => Err(Failure::Unreachable(why)),
        },
        Err(e) => Err(e),
    }
}

fn state_name(s: i32) -> &'static str {
    match pb::BackendState::try_from(s) {
        Ok(pb::BackendState::Up) => "UP",
        Ok(pb::BackendState::Down) => "DOWN",
        Ok(pb::BackendState::Draining) => "DRAINING",
        _ => "UNKNOWN",
    }
}

fn backend_json(b: &pb::BackendStatus) -> Value {
    json!({
        "address": b.address,
        "id": b.id,
        "state": state_name(b.state),
        "reason": b.reason,
        "weight": b.weight,
        "config_weight": b.config_weight,
        "weight_overridden": b.weight_overridden,
        "drained": b.drained,
        "ring_slots": b.ring_slots,
        "zone": b.zone,
    })
}

fn dataplane_healthy(dp: &pb::DataplaneStatus) -> bool {
    dp.present
        && dp.pid_alive
        && dp.run_state == "running"
        && !dp.workers.is_empty()
        && dp.workers.iter().all(|w| w.alive)
}

fn print_status(shown: &str, st: &pb::GetStatusResponse, as_json: bool) -> Res {
    let publisher = st.publisher.clone().unwrap_or_default();
    let dp = st.dataplane.clone().unwrap_or_default();
    let healthy = dataplane_healthy(&dp);
    let published = publisher.published_generation;
    if as_json {
        let out = json!({
            "source": "border-mgmt",
            "server": shown,
            "instance": st.instance,
            "zone": st.zone,
            "healthy": healthy,
            "publisher": {
                "tables_path": publisher.tables_path,
                "published_generation": published,
                "arena_bytes": publisher.arena_bytes,
                "arena_free_bytes": publisher.arena_free_bytes,
                "pending": publisher.pending,
                "last_error": publisher.last_error,
                "config_origin": publisher.config_origin,
                "config_applied_unix_ms": publisher.config_applied_unix_ms,
            },
            "dataplane": {
                "present": dp.present,
                "pid": dp.pid,
                "pid_alive": dp.pid_alive,
                "run_state": dp.run_state,
                "problem": dp.problem,
                "findings": dp.findings.iter().map(|f| json!({
                    "kind": f.kind,
                    "worker": f.worker,
                    "detail": f.detail,
                })).collect::<Vec<_>>(),
                "workers": dp.workers.iter().map(|w| json!({
                    "index": w.index,
                    "lcore": w.lcore,
                    "applied_generation": w.applied_generation,
                    "alive": w.alive,
                    "heartbeat": w.heartbeat,
                    "heartbeat_age_ms": w.heartbeat_age_ms,
                })).collect::<Vec<_>>(),
            },
            "vips": st.vips.iter().map(|v| json!({
                "name": v.name,
                "address": v.address,
                "protocol": v.protocol,
                "mode": v.mode,
                "fail_open": v.fail_open,
                "zone_local": v.zone_local,
                "backends": v.backends.iter().map(backend_json).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        });
        print_json(&out)?;
        return Ok(exit(healthy));
    }

    let zone = if st.zone.is_empty() {
        String::new()
    } else {
        format!(" (zone {})", st.zone)
    };
    outln!("instance      {}{zone}", st.instance);
    outln!(
        "border-mgmt   {shown}: generation {published} published; arena {} ({} free)",
        human_bytes(publisher.arena_bytes),
        human_bytes(publisher.arena_free_bytes)
    );
    outln!(
        "config        {}, applied {}",
        publisher.config_origin,
        utc(publisher.config_applied_unix_ms)
    );
    if !publisher.pending.is_empty() {
        outln!(
            "pending       {} (border-mgmt retries by itself)",
            publisher.pending
        );
    }
    if !publisher.last_error.is_empty() {
        outln!("last error    {}", publisher.last_error);
    }
    if dp.present {
        outln!(
            "border-dp     pid {} ({}), {}; {} worker{}",
            dp.pid,
            if dp.pid_alive { "alive" } else { "gone" },
            dp.run_state,
            dp.workers.len(),
            if dp.workers.len() == 1 { "" } else { "s" }
        );
    } else {
        outln!("border-dp     not running (no state region)");
    }
    if !dp.problem.is_empty() {
        outln!("              problem: {}", dp.problem);
    }
    for f in &dp.findings {
        outln!(
            "              {} (worker {}): {}",
            f.kind,
            f.worker,
            f.detail
        );
    }
    if !dp.workers.is_empty() {
        outln!("");
        let mut t = Table::new(&[
            ("WORKER", false),
            ("LCORE", true),
            ("GENERATION", true),
            ("ALIVE", false),
            ("HEARTBEAT AGE", true),
        ]);
        for w in &dp.workers {
            let gen = if w.applied_generation == published {
                w.applied_generation.to_string()
            } else {
                format!("{} (behind)", w.applied_generation)
            };
            t.row(vec![
                w.index.to_string(),
                w.lcore.to_string(),
                gen,
                yes_no(w.alive),
                format!("{} ms", w.heartbeat_age_ms),
            ]);
        }
        t.print();
    }
    outln!("");
    if st.vips.is_empty() {
        outln!("(no VIPs configured)");
        return Ok(exit(healthy));
    }
    let mut t = Table::new(&[
        ("VIP", false),
        ("ADDRESS", false),
        ("PROTO", false),
        ("MODE", false),
        ("BACKENDS UP", true),
        ("NOTE", false),
    ]);
    for v in &st.vips {
        let up = v
            .backends
            .iter()
            .filter(|b| b.state == pb::BackendState::Up as i32)
            .count();
        let mut note = Vec::new();
        if v.fail_open {
            note.push("fail-open: no backend eligible, every backend serves");
        }
        if v.zone_local {
            note.push("zone-local");
        }
        t.row(vec![
            v.name.clone(),
            v.address.clone(),
            v.protocol.clone(),
            v.mode.clone(),
            format!("{up}/{}", v.backends.len()),
            note.join("; "),
        ]);
    }
    t.print();
    outln!("");
    let mut t = Table::new(&[
        ("VIP", false),
        ("BACKEND", false),
        ("STATE", false),
        ("WEIGHT", true),
        ("SLOTS", true),
        ("ZONE", false),
        ("REASON", false),
    ]);
    for v in &st.vips {
        for b in &v.backends {
            let weight = if b.weight_overridden {
                format!("{} (config {})", b.weight, b.config_weight)
            } else {
                b.weight.to_string()
            };
            t.row(vec![
                v.name.clone(),
                b.address.clone(),
                state_name(b.state).to_string(),
                weight,
                b.ring_slots.to_string(),
                if b.zone.is_empty() {
                    "-".into()
                } else {
                    b.zone.clone()
                },
                b.reason.clone(),
            ]);
        }
    }
    t.print();
    Ok(exit(healthy))
}

fn local_status(
    config: Option<&Path>,
    instance: Option<&str>,
    as_json: bool,
    sample: Duration,
) -> Result<ExitCode, String> {
    let (instance, region) = open_local(config, instance)?;
    let view = DpView::read(&region);
    let moving = if view.is_running() {
        border::heartbeats_moving(&region, sample)
    } else {
        vec![false; view.workers.len()]
    };
    // Re-read after sampling so heartbeats and generations are current.
    let view = DpView::read(&region);
    let healthy = view.is_running() && moving.iter().all(|&m| m);

    if as_json {
        let out = json!({
            "source": "state-region",
            "instance": instance,
            "state_path": state_path(&instance).display().to_string(),
            "pid": view.pid,
            "pid_alive": view.pid_alive,
            "run_state": border::run_state_name(view.run_state),
            "running": view.is_running(),
            "healthy": healthy,
            "workers": view.workers.iter().zip(&moving).enumerate()
                .map(|(i, (w, m))| json!({
                    "index": i,
                    "lcore": w.lcore,
                    "heartbeat": w.heartbeat,
                    "heartbeat_moving": m,
                    "applied_generation": w.applied_generation,
                }))
                .collect::<Vec<_>>(),
        });
        outln!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?
        );
    } else {
        outln!("instance      {instance}");
        outln!("state region  {}", region.path().display());
        outln!(
            "border-dp     pid {} ({}), {}",
            view.pid,
            if view.pid_alive { "alive" } else { "gone" },
            view.describe()
        );
        outln!("workers       {}", view.workers.len());
        outln!("");
        let mut table = vec![vec![
            "WORKER".to_string(),
            "LCORE".to_string(),
            "HEARTBEAT".to_string(),
            "MOVING".to_string(),
            "GENERATION".to_string(),
        ]];
        for (i, (w, m)) in view.workers.iter().zip(&moving).enumerate() {
            table.push(vec![
                i.to_string(),
                w.lcore.to_string(),
                w.heartbeat.to_string(),
                if *m { "yes" } else { "no" }.to_string(),
                w.applied_generation.to_string(),
            ]);
        }
        print_table(&table);
    }
    Ok(exit(healthy))
}

// ---- apply -----------------------------------------------------------------

fn apply(conn: &Conn, file: &Path, dry_run: bool, as_json: bool) -> Res {
    let text = std::fs::read_to_string(file)
        .map_err(|e| Failure::Other(format!("{}: cannot read: {e}", file.display())))?;
    let rt = runtime()?;
    let out = rt.block_on(async {
        let mut api = conn.connect().await?;
        api.call(|mut c| async move {
            c.apply_config(pb::ApplyConfigRequest {
                config_toml: text,
                dry_run,
            })
            .await
        })
        .await
    });
    let out = match out {
        Ok(o) => o,
        // The server names the text `<api>`; here it is the file.
        Err(Failure::Other(m)) => {
            let shown = file.display().to_string();
            return Err(Failure::Other(
                match m.strip_prefix(mgmt::service::API_ORIGIN) {
                    Some(rest) if rest.starts_with(':') => format!("{shown}{rest}"),
                    _ if m.contains("differs from the running config")
                        || m.starts_with("border-mgmt refused the request") =>
                    {
                        format!("{shown}: {m}")
                    }
                    _ => m,
                },
            ));
        }
        Err(e) => return Err(e),
    };
    if as_json {
        print_json(&json!({
            "file": file.display().to_string(),
            "dry_run": dry_run,
            "generation": out.generation,
            "changed": out.changed,
            "pending": out.pending,
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    let f = file.display();
    if dry_run {
        if out.changed {
            outln!(
                "{f}: valid; applying it would publish a new generation (dry run: nothing applied)"
            );
        } else {
            outln!("{f}: valid; equals the running config (dry run: nothing applied)");
        }
    } else if !out.pending.is_empty() {
        outln!(
            "{f}: applied; the tables are not published yet: {} (border-mgmt retries by itself)",
            out.pending
        );
    } else if out.changed {
        outln!("{f}: applied: generation {} published", out.generation);
    } else {
        outln!(
            "{f}: equals the running config: nothing published (generation {})",
            out.generation
        );
    }
    Ok(ExitCode::SUCCESS)
}

// ---- backends --------------------------------------------------------------

fn set_backend(
    conn: &Conn,
    vip: &str,
    backend: &str,
    action: pb::set_backend_request::Action,
    note: Option<String>,
    as_json: bool,
) -> Res {
    let what = match &action {
        pb::set_backend_request::Action::Drain(_) => "drained".to_string(),
        pb::set_backend_request::Action::Undrain(_) => "undrained".to_string(),
        pb::set_backend_request::Action::Weight(w) => format!("weight {w}"),
        pb::set_backend_request::Action::ResetWeight(_) => "weight reset".to_string(),
    };
    let req = pb::SetBackendRequest {
        vip: vip.to_string(),
        backend: backend.to_string(),
        action: Some(action),
        note: note.unwrap_or_default(),
    };
    let rt = runtime()?;
    let out = rt.block_on(async {
        let mut api = conn.connect().await?;
        api.call(|mut c| async move { c.set_backend(req).await })
            .await
    })?;
    let b = out.backend.clone().unwrap_or_default();
    if as_json {
        print_json(&json!({
            "vip": vip,
            "generation": out.generation,
            "changed": out.changed,
            "pending": out.pending,
            "backend": backend_json(&b),
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    let weight = if b.weight_overridden {
        format!("weight {} (config {})", b.weight, b.config_weight)
    } else {
        format!("weight {}", b.weight)
    };
    outln!(
        "{vip} {}: {}, {weight}, {} ring slots: {}",
        b.address,
        state_name(b.state),
        b.ring_slots,
        b.reason
    );
    if !out.pending.is_empty() {
        outln!(
            "{what}; the tables are not published yet: {} (border-mgmt retries by itself)",
            out.pending
        );
    } else if out.changed {
        outln!("{what}: generation {} published", out.generation);
    } else {
        outln!(
            "{what}: it already was; nothing published (generation {})",
            out.generation
        );
    }
    Ok(ExitCode::SUCCESS)
}

// ---- stats -----------------------------------------------------------------

fn stats(conn: &Conn, all: bool, as_json: bool) -> Res {
    let rt = runtime()?;
    let answer = rt.block_on(async {
        let mut api = conn.connect().await?;
        api.call(|mut c| async move { c.get_stats(pb::GetStatsRequest {}).await })
            .await
    });
    let st = match answer {
        Ok(st) => st,
        Err(Failure::Unreachable(why)) => {
            let Some((config, instance)) = conn.local_instance() else {
                return Err(Failure::Unreachable(why));
            };
            let target = Target {
                config: config.map(Path::to_path_buf),
                instance: instance.map(str::to_string),
            };
            if let Err(e) = target.open() {
                return Err(Failure::Other(format!("{why}; and {e}")));
            }
            eprintln!(
                "{PROGRAM}: note: {why}; showing the counters of border-dp's state region on this machine (no per-VIP statistics)"
            );
            return counters(&target, all, as_json).map_err(Failure::from);
        }
        Err(e) => return Err(e),
    };
    if !st.dataplane_present {
        eprintln!(
            "{PROGRAM}: note: border-dp is not running (no state region): every counter reads 0"
        );
    }
    let total = |i: usize| st.totals.get(i).copied().unwrap_or(0);
    let value = |w: &pb::WorkerCounters, i: usize| w.values.get(i).copied().unwrap_or(0);
    if as_json {
        let mut counters = Map::new();
        for (i, c) in st.counters.iter().enumerate() {
            counters.insert(
                c.name.clone(),
                json!({
                    "help": c.help,
                    "drop": c.drop,
                    "per_worker": st.workers.iter().map(|w| value(w, i)).collect::<Vec<_>>(),
                    "total": total(i),
                }),
            );
        }
        let flow = |s: &Option<pb::FlowStats>| {
            let s = s.unwrap_or_default();
            json!({
                "packets": s.packets,
                "bytes": s.bytes,
                "new_connections": s.new_connections,
                "active_connections": s.active_connections,
            })
        };
        print_json(&json!({
            "dataplane_present": st.dataplane_present,
            "workers": st.workers.iter().map(|w| json!({"index": w.index, "lcore": w.lcore})).collect::<Vec<_>>(),
            "counters": Value::Object(counters),
            "vips": st.vips.iter().map(|v| json!({
                "name": v.name,
                "stats": flow(&v.stats),
                "backends": v.backends.iter().map(|b| json!({
                    "address": b.address,
                    "id": b.id,
                    "stats": flow(&b.stats),
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        }))?;
        return Ok(ExitCode::SUCCESS);
    }

    let mut header = vec!["COUNTER".to_string()];
    header.extend(st.workers.iter().map(|w| format!("LCORE {}", w.lcore)));
    header.push("TOTAL".to_string());
    let mut table = vec![header];
    for (i, c) in st.counters.iter().enumerate() {
        if !all && total(i) == 0 {
            continue;
        }
        let mut line = vec![c.name.clone()];
        line.extend(st.workers.iter().map(|w| value(w, i).to_string()));
        line.push(total(i).to_string());
        table.push(line);
    }
    print_table(&table);
    if table.len() == 1 {
        outln!("(every counter is zero; --all lists them)");
    }
    if st.vips.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    outln!("");
    let mut t = Table::new(&[
        ("VIP", false),
        ("BACKEND", false),
        ("PACKETS", true),
        ("BYTES", true),
        ("NEW CONNECTIONS", true),
        ("ACTIVE", true),
    ]);
    let cells = |s: &Option<pb::FlowStats>| {
        let s = s.unwrap_or_default();
        [s.packets, s.bytes, s.new_connections, s.active_connections].map(|v| v.to_string())
    };
    for v in &st.vips {
        let mut row = vec![v.name.clone(), "(all)".to_string()];
        row.extend(cells(&v.stats));
        t.row(row);
        for b in &v.backends {
            let mut row = vec![v.name.clone(), b.address.clone()];
            row.extend(cells(&b.stats));
            t.row(row);
        }
    }
    t.print();
    Ok(ExitCode::SUCCESS)
}

fn counters(target: &Target, all: bool, as_json: bool) -> Result<ExitCode, String> {
    let (instance, region) = target.open()?;
    let view = DpView::read(&region);
    if !view.is_running() {
        eprintln!(
            "{PROGRAM}: note: border-dp of instance `{instance}` is not running ({}); \
             these are the counters of its last run",
            view.describe()
        );
    }
    let workers: Vec<_> = (0..region.n_workers())
        .filter_map(|i| region.worker(i))
        .collect();
    let rows: Vec<(Counter, Vec<u64>, u64)> = Counter::ALL
        .iter()
        .map(|&c| {
            let per: Vec<u64> = workers.iter().map(|w| w.get(c)).collect();
            let total = per.iter().fold(0u64, |a, &b| a.wrapping_add(b));
            (c, per, total)
        })
        .collect();

    if as_json {
        let mut counters = Map::new();
        for (c, per, total) in &rows {
            counters.insert(
                c.name().to_string(),
                json!({ "per_worker": per, "total": total }),
            );
        }
        let out = json!({
            "instance": instance,
            "state_path": region.path().display().to_string(),
            "pid": view.pid,
            "run_state": border::run_state_name(view.run_state),
            "running": view.is_running(),
            "workers": view.workers.iter().enumerate()
                .map(|(i, w)| json!({ "index": i, "lcore": w.lcore }))
                .collect::<Vec<_>>(),
            "counters": Value::Object(counters),
        });
        outln!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?
        );
        return Ok(ExitCode::SUCCESS);
    }

    let mut header = vec!["COUNTER".to_string()];
    header.extend(view.workers.iter().map(|w| format!("LCORE {}", w.lcore)));
    header.push("TOTAL".to_string());
    let mut table = vec![header];
    for (c, per, total) in rows.iter().filter(|r| all || r.2 != 0) {
        let mut line = vec![c.name().to_string()];
        line.extend(per.iter().map(u64::to_string));
        line.push(total.to_string());
        table.push(line);
    }
    print_table(&table);
    if table.len() == 1 {
        outln!("(every counter is zero; --all lists them)");
    }
    Ok(ExitCode::SUCCESS)
}

// ---- events ----------------------------------------------------------------

fn events(conn: &Conn, as_json: bool, count: Option<u64>) -> Res {
    let rt = runtime()?;
    rt.block_on(async {
        let mut api = conn.connect().await?;
        let shown = api.shown.clone();
        let mut stream = api
            .call(|mut c| async move { c.watch_events(pb::WatchEventsRequest {}).await })
            .await?;
        if !as_json {
            eprintln!("{PROGRAM}: following the events of border-mgmt at {shown} (Ctrl-C to stop)");
        }
        let mut seen = 0u64;
        if count == Some(0) {
            return Ok(ExitCode::SUCCESS);
        }
        loop {
            match stream.message().await {
                Ok(Some(ev)) => {
                    if as_json {
                        outln!("{}", event_json(&ev));
                    } else {
                        outln!("{}", event_line(&ev));
                    }
                    seen += 1;
                    if count.is_some_and(|n| seen >= n) {
                        return Ok(ExitCode::SUCCESS);
                    }
                }
                Ok(None) => {
                    return Err(Failure::Other(format!(
                        "border-mgmt at {shown} ended the event stream (it stopped)"
                    )))
                }
                Err(st) => return Err(status_failure(&shown, &st)),
            }
        }
    })
}

/// The event as `kind` plus its fields.
fn event_fields(ev: &pb::Event) -> (&'static str, Value) {
    use pb::event::Kind;
    match &ev.kind {
        Some(Kind::Published(p)) => (
            "published",
            json!({
                "generation": p.generation,
                "cause": p.cause,
                "blocks_written": p.blocks_written,
                "bytes_written": p.bytes_written,
                "arena_free_bytes": p.arena_free_bytes,
            }),
        ),
        Some(Kind::PublishFailed(p)) => (
            "publish_failed",
            json!({ "error": p.error, "will_retry": p.will_retry }),
        ),
        Some(Kind::TablesRefused(t)) => (
            "tables_refused",
            json!({ "worker": t.worker, "lcore": t.lcore, "refused_total": t.refused_total }),
        ),
        Some(Kind::WorkerLiveness(w)) => (
            "worker_liveness",
            json!({
                "worker": w.worker,
                "lcore": w.lcore,
                "alive": w.alive,
                "applied_generation": w.applied_generation,
            }),
        ),
        Some(Kind::Dataplane(d)) => (
            "dataplane",
            json!({
                "present": d.present,
                "pid": d.pid,
                "pid_alive": d.pid_alive,
                "run_state": d.run_state,
            }),
        ),
        Some(Kind::ConfigApplied(c)) => (
            "config_applied",
            json!({ "origin": c.origin, "generation": c.generation, "changed": c.changed }),
        ),
        Some(Kind::ConfigRejected(c)) => (
            "config_rejected",
            json!({ "origin": c.origin, "error": c.error }),
        ),
        Some(Kind::BackendChanged(b)) => (
            "backend_changed",
            json!({
                "vip": b.vip,
                "cause": b.cause,
                "backend": b.backend.as_ref().map(backend_json),
            }),
        ),
        Some(Kind::Lagged(l)) => ("lagged", json!({ "missed": l.missed })),
        Some(Kind::Health(h)) => ("health", json!({ "detail": format!("{:?}", h.kind) })),
        None => ("unknown", json!({})),
    }
}

fn event_json(ev: &pb::Event) -> Value {
    let (kind, fields) = event_fields(ev);
    let mut m = Map::new();
    m.insert("seq".into(), json!(ev.seq));
    m.insert("unix_ms".into(), json!(ev.unix_ms));
    m.insert("kind".into(), json!(kind));
    if let Value::Object(f) = fields {
        m.extend(f);
    }
    Value::Object(m)
}

fn event_line(ev: &pb::Event) -> String {
    use pb::event::Kind;
    let what = match &ev.kind {
        Some(Kind::Published(p)) => format!(
            "published generation {} (cause {}; {} block{}, {} written; arena {} free)",
            p.generation,
            p.cause,
            p.blocks_written,
            if p.blocks_written == 1 { "" } else { "s" },
            human_bytes(p.bytes_written),
            human_bytes(p.arena_free_bytes)
        ),
        Some(Kind::PublishFailed(p)) => format!(
            "publish failed: {}{}",
            p.error,
            if p.will_retry {
                " (border-mgmt retries)"
            } else {
                ""
            }
        ),
        Some(Kind::TablesRefused(t)) => format!(
            "tables refused: worker {} (lcore {}) refused a published generation and kept its tables ({} refused in all)",
            t.worker, t.lcore, t.refused_total
        ),
        Some(Kind::WorkerLiveness(w)) => format!(
            "worker {} (lcore {}) {} at generation {}",
            w.worker,
            w.lcore,
            if w.alive {
                "is alive"
            } else {
                "stalled: its heartbeat stopped"
            },
            w.applied_generation
        ),
        Some(Kind::Dataplane(d)) if !d.present => "border-dp: no state region".to_string(),
        Some(Kind::Dataplane(d)) => format!(
            "border-dp pid {} ({}), {}",
            d.pid,
            if d.pid_alive { "alive" } else { "gone" },
            d.run_state
        ),
        Some(Kind::ConfigApplied(c)) => {
            if c.changed {
                format!(
                    "config applied from {}: generation {}",
                    c.origin, c.generation
                )
            } else {
                format!(
                    "config from {} equals the running one (generation {})",
                    c.origin, c.generation
                )
            }
        }
        Some(Kind::ConfigRejected(c)) => {
            format!("config from {} rejected: {}", c.origin, one_line(&c.error))
        }
        Some(Kind::BackendChanged(b)) => {
            let be = b.backend.clone().unwrap_or_default();
            format!(
                "backend {} {}: {}, weight {}, {} ring slots: {} (cause {})",
                b.vip,
                be.address,
                state_name(be.state),
                be.weight,
                be.ring_slots,
                be.reason,
                b.cause
            )
        }
        Some(Kind::Lagged(l)) => format!(
            "missed {} events (this client fell behind)",
            l.missed
        ),
        Some(Kind::Health(h)) => format!("health: {:?}", h.kind),
        None => "unknown event (a newer border-mgmt?)".to_string(),
    };
    format!("{} #{:<5} {what}", utc(ev.unix_ms), ev.seq)
}

// ---- output helpers --------------------------------------------------------

fn exit(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.to_string()
}

fn print_json(v: &Value) -> Result<(), Failure> {
    let s = serde_json::to_string_pretty(v).map_err(|e| Failure::Other(e.to_string()))?;
    outln!("{s}");
    Ok(())
}

/// `1536` -> `1.5 KiB`.
fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Milliseconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
fn utc(unix_ms: u64) -> String {
    if unix_ms == 0 {
        return "-".into();
    }
    let secs = unix_ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        unix_ms % 1000
    )
}

/// Columns with a header; each left- or right-aligned.
struct Table {
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    fn new(cols: &[(&str, bool)]) -> Table {
        Table {
            right: cols.iter().map(|c| c.1).collect(),
            rows: vec![cols.iter().map(|c| c.0.to_string()).collect()],
        }
    }

    fn row(&mut self, r: Vec<String>) {
        self.rows.push(r);
    }

    fn print(&self) {
        let widths: Vec<usize> = (0..self.right.len())
            .map(|c| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(c))
                    .map(|s| s.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        for r in &self.rows {
            let cells: Vec<String> = r
                .iter()
                .enumerate()
                .map(|(c, v)| {
                    let w = widths.get(c).copied().unwrap_or(0);
                    if self.right.get(c).copied().unwrap_or(false) {
                        format!("{v:>w$}")
                    } else {
                        format!("{v:<w$}")
                    }
                })
                .collect();
            outln!("{}", cells.join("  ").trim_end());
        }
    }
}

/// Prints rows as aligned columns: the first left-aligned, the rest right-aligned.
fn print_table(rows: &[Vec<String>]) {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut right = vec![true; cols];
    if let Some(first) = right.first_mut() {
        *first = false;
    }
    let t = Table {
        right,
        rows: rows.to_vec(),
    };
    t.print();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_formats_the_epoch_and_a_leap_day() {
        assert_eq!(utc(1), "1970-01-01T00:00:00.001Z");
        assert_eq!(utc(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(utc(1_735_689_599_999), "2024-12-31T23:59:59.999Z");
    }

    #[test]
    fn weights_and_reset_parse() {
        assert!(matches!(parse_weight("0"), Ok(WeightArg::Set(0))));
        assert!(matches!(parse_weight("65535"), Ok(WeightArg::Set(65535))));
        assert!(matches!(parse_weight("reset"), Ok(WeightArg::Reset)));
        assert!(parse_weight("65536").is_err());
        assert!(parse_weight("-1").is_err());
    }

    #[test]
    fn errors_stay_on_one_line() {
        assert_eq!(one_line("a\n  b\n\nc"), "a; b; c");
        assert_eq!(
            tidy_chain(
                "cannot connect to x: transport error: gone (os error 2): gone (os error 2)"
            ),
            "cannot connect to x: gone (os error 2)"
        );
        assert_eq!(
            tidy_chain("cannot connect to x: bad cert: UnknownIssuer: bad cert: UnknownIssuer"),
            "cannot connect to x: bad cert: UnknownIssuer"
        );
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
    }

    #[test]
    fn the_cli_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
