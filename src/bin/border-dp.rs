//! border-dp: the DPDK dataplane process of border. Its command line is
//! `border::args::daemons::DpArgs`.
#![deny(unsafe_code)]

use std::process::ExitCode;

use border::args::daemons::DpArgs;
use clap::Parser;

fn main() -> ExitCode {
    let args = DpArgs::parse();
    // Whatever this process creates is its owner's only unless it says
    // otherwise (docs/security.md).
    conf::os::files::restrict_umask();
    if let Some(path) = args.check_config {
        return border::check_config(&path);
    }
    border::init_logging();
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
