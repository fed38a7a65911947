//! border-dp: the DPDK dataplane process of border.
#![deny(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// The border dataplane: poll-mode workers on DPDK ports that answer for the
/// appliance's addresses, pass the host's traffic to kernel twin interfaces
/// and load-balance VIP traffic by the tables border-mgmt publishes (or,
/// with --standalone, by tables built from the config file). Counters and
/// worker liveness are in its state region (`borderctl counters`,
/// `borderctl status --local`). See docs/config.md and docs/architecture.md.
#[derive(Parser, Debug)]
#[command(
    name = "border-dp",
    version = border::version::short(),
    long_version = border::version::long_with_loaded_dpdk(),
    about,
    long_about
)]
struct Args {
    /// Run with this configuration file (TOML; see docs/config.md).
    #[arg(long, value_name = "FILE", required_unless_present = "check_config")]
    config: Option<PathBuf>,
    /// Validate FILE, print OK or the first error, and exit.
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    check_config: Option<PathBuf>,
    /// Build and publish the load-balancing tables from the config file
    /// (re-read on SIGHUP) instead of following border-mgmt's tables.
    #[arg(long)]
    standalone: bool,
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
    border::init_logging(args.log.log_format);
    let Some(path) = args.config else {
        return ExitCode::FAILURE;
    };
    let cfg = match conf::Config::from_file(&path) {
        Ok(c) => c,
        Err(e) => return border::fail("border-dp", &e),
    };
    // The kernel twins live in this namespace: their ports and the
    // full-NAT pools must not meet.
    if let Err(e) = conf::ephemeral::check_local_ports_here(&cfg) {
        return border::fail("border-dp", &e);
    }
    let opts = dataplane::run::RunOptions {
        standalone: args.standalone,
        config_path: Some(path),
    };
    match dataplane::run::run(&cfg, &opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => border::fail("border-dp", &e),
    }
}
