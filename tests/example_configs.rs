//! The example configs (the annotated TAP one and the real-NIC ones under
//! deploy/examples/) pass `border-dp --check-config` and
//! `border-mgmt --check-config` as shipped. The check is the daemons' own
//! (config rules and the kernel's ephemeral port range here); it needs no
//! NIC, so the PCI examples are checked on a box without them.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn examples() -> Vec<PathBuf> {
    let mut all = vec![repo().join("conf/tests/data/border.example.toml")];
    let mut real: Vec<PathBuf> = std::fs::read_dir(repo().join("deploy/examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    real.sort();
    all.extend(real);
    all
}

#[test]
fn every_example_passes_both_daemons_check_config() {
    let all = examples();
    let names: Vec<String> = all
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for want in ["border.intel.example.toml", "border.mlx5.example.toml"] {
        assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
    }
    for path in &all {
        for bin in [
            env!("CARGO_BIN_EXE_border-dp"),
            env!("CARGO_BIN_EXE_border-mgmt"),
        ] {
            let out = Command::new(bin)
                .arg("--check-config")
                .arg(path)
                .output()
                .unwrap();
            assert!(
                out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "OK",
                "{bin} --check-config {}: {}{}",
                path.display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

#[test]
fn real_nic_examples_use_pci_devices_hugepages_and_keep_capture() {
    for path in examples().iter().skip(1) {
        let c = conf::Config::from_file(path).unwrap_or_else(|e| panic!("{e}"));
        let name = path.display();
        for p in &c.ports {
            let dev = p.devargs.split(',').next().unwrap();
            assert!(
                dev.len() == 12 && dev.as_bytes()[4] == b':' && dev.as_bytes()[7] == b':',
                "{name}: port {} is a PCI address, not {dev:?}",
                p.name
            );
        }
        for flag in ["--no-huge", "--no-pci", "--no-shconf", "--in-memory"] {
            assert!(
                !c.dataplane.eal_args.iter().any(|a| a == flag),
                "{name}: {flag} has no place on a real box"
            );
        }
        assert!(c.dataplane.capture, "{name}: capture works there");
        assert!(
            c.dataplane.worker_lcores.len() > 1,
            "{name}: RSS over several workers"
        );
    }
}
