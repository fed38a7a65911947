//! Shared plumbing of the border binaries (border-dp, border-mgmt, borderctl).

use std::path::Path;
use std::process::ExitCode;

/// `--check-config FILE`: prints `OK` or the error, exit status to match.
pub fn check_config(path: &Path) -> ExitCode {
    match conf::check_config_file(path) {
        Ok(_) => {
            println!("OK");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// Prints a one-line fatal error and returns a failing exit code.
pub fn fail(program: &str, e: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("{program}: error: {e}");
    ExitCode::FAILURE
}

/// Logs to stderr; `RUST_LOG` overrides the default `info` level.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}
