//! `borderctl completions SHELL` (clap_complete) and `borderctl
//! man-pages DIR` (clap_mangen): the shell completion scripts
//! and the man pages of all four binaries, from the same clap definitions
//! that parse their command lines. The Debian package installs the copies
//! kept in deploy/ (tests/cli_manuals.rs keeps them current).

use std::path::Path;
use std::process::ExitCode;

use border::args::daemons::{DpArgs, GwArgs, MgmtArgs};
use clap::{Command, CommandFactory};
use clap_complete::Shell;

use crate::conn::{Failure, Res};

/// The completion script for `shell` on stdout.
pub fn completions(shell: Shell) -> Res {
    let mut cmd = crate::cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, crate::PROGRAM, &mut out);
    write_stdout(&out)?;
    Ok(ExitCode::SUCCESS)
}

/// `borderctl.1`, `borderctl-<command>.1` for each command,
/// `border-dp.1`, `border-mgmt.1` and `border-gw.1` in `dir`.
pub fn man_pages(dir: &Path) -> Res {
    std::fs::create_dir_all(dir)
        .map_err(|e| Failure::Other(format!("cannot create {}: {e}", dir.display())))?;
    for (cmd, name_line) in [
        (crate::cli::command(), "the border command-line tool"),
        (
            DpArgs::command(),
            "the border dataplane (DPDK poll-mode workers)",
        ),
        (MgmtArgs::command(), "the border management process"),
        (GwArgs::command(), "the border fleet gateway"),
    ] {
        clap_mangen::generate_to(for_manual(cmd.about(name_line)), dir)
            .map_err(|e| Failure::Other(format!("cannot write into {}: {e}", dir.display())))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// A page's version is the package's: a build's commit or date would
/// change the pages kept in deploy/man with every commit.
fn for_manual(cmd: Command) -> Command {
    cmd.version(env!("CARGO_PKG_VERSION"))
        .long_version(env!("CARGO_PKG_VERSION"))
}

fn write_stdout(bytes: &[u8]) -> Result<(), Failure> {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    match o.write_all(bytes).and_then(|()| o.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Failure::Other(format!("cannot write to stdout: {e}"))),
    }
}
