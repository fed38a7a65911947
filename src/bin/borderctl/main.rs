//! borderctl: the operator's command-line tool of border. Talks to
//! border-mgmt's gRPC API `border.v1` (status, apply, drain/undrain/weight,
//! backend add/remove/disable [--kill]/enable, vip add/remove, stats, events, conns, maintenance); `counters` and `status --local` read border-dp's state
//! region directly, and `status`/`stats` fall back to it when border-mgmt
//! is not reachable; `capture` runs `dpdk-dumpcap` against border-dp's ports.
//!
//! `config show` prints the running config; `health` every backend's
//! verdict and the checkers' observations.
//!
//! `diag` puts status, counters and health together and names the
//! problems it sees.
//!
//! `cli` parses the command line, `conn` reaches border-mgmt and says in
//! one line why it could not, `output` prints every command's view as a
//! table or JSON, its notes and errors, and owns the exit statuses;
//! `manuals` writes the shell completions and man pages; each command has
//! its own module.
#![deny(unsafe_code)]

mod apply;
mod backend;
mod bgp;
mod capture;
mod cli;
mod config;
mod conn;
mod conns;
mod counters;
mod diag;
mod diag_rules;
mod edit;
mod events;
mod health;
mod log_level;
mod maintenance;
mod manuals;
mod output;
mod pcapng;
mod stats;
mod status;
mod status_local;

use std::process::ExitCode;

use backend::Change;
use cli::{Cli, Cmd, ConfigCmd};

const PROGRAM: &str = "borderctl";

fn main() -> ExitCode {
    let Cli { cmd, target, json } =
        Cli::parse_checked().unwrap_or_else(|(e, json)| output::usage_error(e, json));
    let res = match cmd {
        Cmd::Status { local, sample_ms } => status::run(&target, json, local, sample_ms),
        Cmd::Apply { file, dry_run } => apply::run(&target, &file, dry_run, json),
        Cmd::Config(ConfigCmd::Show) => config::show(&target, json),
        Cmd::Health => health::run(&target, json),
        Cmd::Drain(which) => backend::run(&target, which, Change::Drain, json),
        Cmd::Undrain(which) => backend::run(&target, which, Change::Undrain, json),
        Cmd::Weight { backend, weight } => {
            backend::run(&target, backend, Change::Weight(weight), json)
        }
        Cmd::Backend(cmd) => edit::backend(&target, cmd, json),
        Cmd::Vip(cmd) => edit::vip(&target, cmd, json),
        Cmd::Stats { all } => stats::run(&target, all, json),
        Cmd::Events { count } => events::run(&target, json, count),
        Cmd::Conns(args) => conns::run(&target, &args, json),
        Cmd::Maintenance { state } => maintenance::run(&target, state, json),
        Cmd::LogLevel { level, daemon } => log_level::run(&target, level, daemon, json),
        Cmd::Counters { all } => counters::run(&target, all, json),
        Cmd::Diag { window } => diag::run(&target, window, json),
        Cmd::Capture(args) => capture::run(&target, &args, json),
        Cmd::Completions { shell } => manuals::completions(shell),
        Cmd::ManPages { dir } => manuals::man_pages(&dir),
    };
    match res {
        Ok(code) => code,
        Err(e) => output::fail(&e, json),
    }
}
