//! border-mgmt: the management process of border (docs/design.md §1, §3, §6). The
//! work is in the `mgmt` crate, the command line in
//! `border::args::daemons::MgmtArgs`; this puts them together.
#![deny(unsafe_code)]

use std::process::ExitCode;
use std::time::Duration;

use border::args::daemons::MgmtArgs;
use clap::Parser;

const PROGRAM: &str = "border-mgmt";

fn main() -> ExitCode {
    let args = MgmtArgs::parse();
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
    border::version::name_build_for_metrics();
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
    opts.liveness_grace = args.liveness_grace_ms;
    opts.config_path = Some(path.clone());
    let origin = path.display().to_string();
    let tick = args.watch_interval_ms;
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
