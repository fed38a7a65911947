//! border-gw: the gateway appliances in agent mode dial out to
//! (docs/fleet.md). The work is in the `gw` crate, the command line in
//! `border::args::daemons::GwArgs`.
#![deny(unsafe_code)]

use std::process::ExitCode;

use border::args::daemons::GwArgs;
use clap::Parser;

const PROGRAM: &str = "border-gw";

fn main() -> ExitCode {
    let args = GwArgs::parse();
    if let Some(path) = args.config_to_check() {
        return match gw::config::load(path) {
            Ok(_) => {
                println!("OK");
                ExitCode::SUCCESS
            }
            Err(e) => border::fail(PROGRAM, &e),
        };
    }
    let Some(path) = args.config else {
        return ExitCode::FAILURE;
    };
    let cfg = match gw::config::load(&path) {
        Ok(c) => c,
        Err(e) => return border::fail(PROGRAM, &e),
    };
    border::init_logging(args.log.log_format);
    border::version::name_build_for_metrics();
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
