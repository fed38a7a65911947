//! Hand-built packets from scapy scripts run in a namespace.

use std::io::Read;
use std::process::{Child, Command, Stdio};

use super::netns::Netns;

/// Debian's python3, which python3-scapy installs into (a `python3` first
/// on `PATH`, e.g. pyenv's, does not see it).
pub const DEBIAN_PYTHON: &str = "/usr/bin/python3";

/// Starts the scapy program `script` (its text) in `ns` with `args`, its
/// stdout and stderr piped.
pub fn spawn_scapy(ns: &Netns, script: &str, args: &[&str]) -> Child {
    Command::new("ip")
        .args(["netns", "exec", &ns.name, DEBIAN_PYTHON, "-c", script])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 (scapy) starts")
}

/// Reads what a [`spawn_scapy`] program prints on `stdout` (its piped
/// stdout, or a reader over it) until it exits; panics with all it printed
/// unless it succeeded. Returns the rest of its stdout.
pub fn finish_scapy(mut child: Child, stdout: &mut impl Read) -> String {
    let mut out = String::new();
    stdout.read_to_string(&mut out).unwrap();
    let status = child.wait().unwrap();
    let mut err = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
    assert!(
        status.success(),
        "scapy (python3-scapy, scripts/install-deps.sh): {status}: {out}{err}"
    );
    out
}

/// Runs the scapy program `script` in `ns` with `args` to its end; returns
/// its stdout.
pub fn run_scapy(ns: &Netns, script: &str, args: &[&str]) -> String {
    let mut child = spawn_scapy(ns, script, args);
    let mut stdout = child.stdout.take().unwrap();
    finish_scapy(child, &mut stdout)
}
