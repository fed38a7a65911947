//! border-gw: the gateway appliances in agent mode dial out to (issue 17,
//! docs/fleet.md). The work is in the `gw` crate; this is the command line.
#![deny(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

const PROGRAM: &str = "border-gw";

/// The border fleet gateway.
///
/// Accepts tunnels from appliances whose border-mgmt runs in agent mode
/// ([mgmt.agent]) on agent_listen (mutual TLS, each appliance's certificate
/// pinned per id), and control-plane calls on api_listen (mutual TLS,
/// clients pinned in tls.api_fingerprints) with the target appliance in
/// the `border-appliance` metadata. Each call goes to an idle tunnel of
/// that appliance here, or to the gateway that holds one, found in the
/// Redis registry (`borderctl --gateway tcp://GW --appliance ID ...`).
///
/// With metrics_listen set, Prometheus metrics (tunnels per appliance,
/// calls by outcome, forward latency, registry errors) are at /metrics
/// there. SIGINT/SIGTERM drain: the tunnels are told to close (their agents
/// reconnect to their next gateway at once), the registry entries removed.
/// The unit border-gw@NAME.service runs /etc/border/gw-NAME.toml.
/// See docs/fleet.md.
#[derive(Parser, Debug)]
#[command(
    name = "border-gw",
    version = border::version::short(),
    long_version = border::version::long(),
    about,
    long_about
)]
struct Args {
    /// The gateway's config file (TOML; see docs/fleet.md).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Validate the config, print OK or the error, and exit.
    #[arg(long)]
    check: bool,
    #[command(flatten)]
    log: border::LogArgs,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let cfg = match gw::config::load(&args.config) {
        Ok(c) => c,
        Err(e) => return border::fail(PROGRAM, &e),
    };
    if args.check {
        println!("OK");
        return ExitCode::SUCCESS;
    }
    border::init_logging(args.log.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("border-gw")
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return border::fail(PROGRAM, &format!("cannot start the runtime: {e}")),
    };
    let result = runtime.block_on(gw::run::run(cfg));
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(()) => {
            tracing::info!("stopped");
            ExitCode::SUCCESS
        }
        Err(e) => border::fail(PROGRAM, &e),
    }
}
