//! border-mgmt: the management process of border (docs/design.md §1, §3, §6). The
//! work is in the `mgmt` crate; this is the command line around it.
#![deny(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

const PROGRAM: &str = "border-mgmt";

/// The border management process.
///
/// Loads the config, publishes the table generation it describes into the
/// shared-memory tables region that border-dp follows
/// (/dev/shm/border-<instance>-tables; re-attached, not rebuilt, after a
/// restart), and serves the gRPC API border.v1 on `[mgmt].listen` (default
/// unix:///run/border/<instance>.sock; TCP only with mutual TLS) and
/// Prometheus metrics on `[mgmt].metrics_listen`/metrics. Watches border-dp's
/// workers (liveness, applied generation, refused tables) through its state
/// region.
///
/// Probes the backends of every VIP with a [vip.health] table (tcp, tls,
/// http, https) through border-dp's kernel twins, and publishes the verdicts:
/// a backend that is down leaves the VIP's ring, one that comes back
/// re-enters it (docs/health.md). Backends of a VIP without [vip.health] are
/// up unless drained.
///
/// Every config applied (ApplyConfig, SIGHUP) and every drain and weight
/// (SetBackend) is saved to the state directory before it answers; a
/// restart, or a reboot, runs the last applied config with its drains and
/// weights, not --config, unless --from-config-file says so
/// (docs/reliability.md).
///
/// SIGHUP re-reads the config file (only [[vip]] and zone change at run
/// time; an invalid file is refused and the running config stays).
/// SIGINT/SIGTERM stop cleanly (exit 0, socket removed). See docs/api.md.
#[derive(Parser, Debug)]
#[command(
    name = "border-mgmt",
    version = border::version::short(),
    long_version = border::version::long(),
    about,
    long_about
)]
struct Args {
    /// Run with this configuration file (TOML; see docs/config.md).
    #[arg(long, value_name = "FILE", required_unless_present = "check_config")]
    config: Option<PathBuf>,
    /// Start from --config even if the state directory holds a config
    /// applied later (ApplyConfig, SIGHUP); saved drains and weights of
    /// backends it still has stay. Without it, the last applied config runs.
    #[arg(long, requires = "config")]
    from_config_file: bool,
    /// Where the applied config and the operator's drains and weights are
    /// saved, to survive restarts and reboots (created 0700 if missing)
    /// [default: /var/lib/border/<instance>].
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Validate FILE, print OK or the first error, and exit.
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    check_config: Option<PathBuf>,
    /// How often to look at the dataplane's state region (worker liveness,
    /// refused tables) and retry a deferred publish, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 250,
          value_parser = clap::value_parser!(u64).range(50..=60_000))]
    watch_interval_ms: u64,
    /// A worker whose heartbeat has not moved for this long is stalled and no
    /// longer holds back the reuse of table memory, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 3000,
          value_parser = clap::value_parser!(u64).range(500..=600_000))]
    liveness_grace_ms: u64,
    #[command(flatten)]
    log: border::LogArgs,
}

fn main() -> ExitCode {
    let args = Args::parse();
    // Whatever this process creates is its owner's only unless it says
    // otherwise (docs/security.md).
    conf::os::files::restrict_umask();
    if let Some(path) = args.check_config {
        return border::check_config(&path);
    }
    let Some(path) = args.config else {
        return ExitCode::FAILURE;
    };
    let (cfg, text) = match mgmt::store::load_config_file(&path) {
        Ok(c) => c,
        Err(e) => return border::fail(PROGRAM, &e),
    };
    if let Err(e) = conf::ephemeral::check_local_ports_here(&cfg) {
        return border::fail(PROGRAM, &e);
    }
    let _lock = match border::lock_instance(PROGRAM, &cfg.instance, "mgmt") {
        Ok(l) => l,
        Err(e) => return border::fail(PROGRAM, &e),
    };
    border::init_logging(args.log.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("border-mgmt")
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return border::fail(PROGRAM, &format!("cannot start the runtime: {e}")),
    };
    let mut paths = mgmt::Paths::for_instance(&cfg.instance);
    if let Some(dir) = args.state_dir {
        paths.state_dir = Some(dir);
    }
    let mut opts = mgmt::Options::new(paths);
    opts.from_config_file = args.from_config_file;
    opts.liveness_grace = Duration::from_millis(args.liveness_grace_ms);
    opts.config_path = Some(path.clone());
    let origin = path.display().to_string();
    let tick = Duration::from_millis(args.watch_interval_ms);
    let result = runtime.block_on(mgmt::server::run(cfg, text, origin, opts, tick));
    runtime.shutdown_timeout(Duration::from_secs(1));
    match result {
        Ok(()) => {
            tracing::info!("stopped");
            ExitCode::SUCCESS
        }
        Err(e) => border::fail(PROGRAM, &e),
    }
}
