//! border-dp: the DPDK dataplane process of border. Its command line is
//! `border::args::daemons::DpArgs`.
#![deny(unsafe_code)]

use std::process::ExitCode;

use border::args::daemons::DpArgs;
use clap::{CommandFactory, FromArgMatches};

fn main() -> ExitCode {
    // border-dp's --version also names the DPDK it loaded; the shared
    // definition (used for the man pages too) names only the one it was
    // built with, so that nothing else links DPDK to print it.
    let matches = DpArgs::command()
        .long_version(border::version::long_with_loaded_dpdk())
        .get_matches();
    let args = DpArgs::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
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
