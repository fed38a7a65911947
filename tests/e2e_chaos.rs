//! The short form of `scripts/chaos.sh` (docs/reliability.md):
//! kill -9 of border-mgmt and of border-dp under load, a worker panic,
//! table swaps, 100 parallel ApplyConfig callers, an empty mbuf pool and a
//! short soak, each
//! with the figures it measured. Runs the debug binaries this test was
//! built with (the worker panic trigger exists only there).
//!
//! Tag `ch`, subnets 10.98.0.0/24 and 10.98.1.0/24 (the script's).

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The whole short form must end well inside CI's patience.
const LIMIT: Duration = Duration::from_secs(150);

#[test]
fn chaos_short_form_passes_every_scenario() {
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_border-dp"))
        .parent()
        .unwrap()
        .to_path_buf();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let report =
        std::env::temp_dir().join(format!("border-chaos-report-{}.json", std::process::id()));
    let mut child = Command::new("bash")
        .arg(root.join("scripts/chaos.sh"))
        .arg("--short")
        .arg("--report")
        .arg(&report)
        .env("BORDER_BIN", &bin_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run scripts/chaos.sh");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > LIMIT {
            // SIGTERM: the script removes what it made.
            // SAFETY: kill(2) on our own child, not yet reaped.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let st = child.wait().unwrap();
            panic!(
                "scripts/chaos.sh --short ran over {LIMIT:?} ({st}):\n{}\n{}",
                reader.join().unwrap(),
                err_reader.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stdout = reader.join().unwrap();
    let stderr = err_reader.join().unwrap();
    println!("{stdout}");
    eprintln!("{stderr}");
    let took = start.elapsed();
    assert!(
        status.success(),
        "scripts/chaos.sh --short failed ({status}) after {took:?}:\n{stdout}\n{stderr}"
    );
    for scenario in [
        "mgmt-kill",
        "swaps",
        "apply-storm",
        "dp-kill",
        "dp-panic",
        "soak",
    ] {
        assert!(
            stdout.contains(&format!("chaos: {scenario}: PASS")),
            "{scenario} did not pass:\n{stdout}"
        );
    }
    assert!(stdout.contains("chaos: 7 passed, 0 failed"), "{stdout}");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(r["results"].as_array().map(Vec::len), Some(7), "{r}");
    let _ = std::fs::remove_file(&report);
}
