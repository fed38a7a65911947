//! Turning the config into EAL arguments and a port plan. Pure, so the exact
//! command line border-dp hands to DPDK is unit-tested.

use conf::Config;

/// One data port and its kernel twin as DPDK will know them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedPort {
    /// `[[port]].name`.
    pub name: String,
    /// The DPDK device name to look the port up by: the devargs up to the first comma.
    pub device: String,
    /// DPDK device name of the kernel twin (a `net_tap` vdev).
    pub twin_device: String,
    /// Kernel interface name of the twin.
    pub twin_iface: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EalPlan {
    /// EAL options for `rte_eal_init` (the program name is supplied by dpdk-ffi).
    pub args: Vec<String>,
    pub ports: Vec<PlannedPort>,
}

/// True for a PCI address (`0000:3b:00.0` or `3b:00.0`): those are allowed
/// with `-a`, everything else is a virtual device for `--vdev`.
pub fn is_pci_address(device: &str) -> bool {
    let parts: Vec<&str> = device.split(':').collect();
    let hex = |s: &str, n: usize| s.len() == n && s.chars().all(|c| c.is_ascii_hexdigit());
    let (bus, devfn) = match parts.as_slice() {
        [domain, bus, devfn] if hex(domain, 4) => (*bus, *devfn),
        [bus, devfn] => (*bus, *devfn),
        _ => return false,
    };
    let Some((dev, func)) = devfn.split_once('.') else {
        return false;
    };
    hex(bus, 2) && hex(dev, 2) && func.len() == 1 && func.chars().all(|c| ('0'..='7').contains(&c))
}

fn has_any(args: &[String], flags: &[&str]) -> bool {
    args.iter().any(|a| {
        flags
            .iter()
            .any(|f| a == f || a.starts_with(&format!("{f}=")))
    })
}

/// Builds the EAL options: the operator's `eal_args`, then the lcore layout,
/// the file prefix (unless `eal_args` sets one) and the devices.
pub fn eal_plan(cfg: &Config, with_twins: bool) -> EalPlan {
    let dp = &cfg.dataplane;
    let mut args: Vec<String> = dp.eal_args.clone();
    // The config validator refuses lcore options in eal_args: the lcore
    // layout always comes from main_lcore and worker_lcores.
    let mut lcores = vec![dp.main_lcore];
    lcores.extend(dp.worker_lcores.iter().copied());
    match &dp.lcore_cpus {
        Some(cpus) => {
            let map: Vec<String> = lcores
                .iter()
                .zip(cpus)
                .map(|(l, c)| format!("{l}@{c}"))
                .collect();
            args.push(format!("--lcores={}", map.join(",")));
        }
        None => {
            let list: Vec<String> = lcores.iter().map(u32::to_string).collect();
            args.push("-l".into());
            args.push(list.join(","));
        }
    }
    args.push(format!("--main-lcore={}", dp.main_lcore));
    if !has_any(&dp.eal_args, &["--file-prefix"]) {
        args.push(format!("--file-prefix=border-{}", cfg.instance));
    }
    let mut ports = Vec::with_capacity(cfg.ports.len());
    for (i, p) in cfg.ports.iter().enumerate() {
        let device = p.devargs.split(',').next().unwrap_or("").trim().to_string();
        if is_pci_address(&device) {
            args.push("-a".into());
        } else {
            args.push("--vdev".into());
        }
        args.push(p.devargs.clone());
        ports.push(PlannedPort {
            name: p.name.clone(),
            device,
            twin_device: format!("net_tap_twin{i}"),
            twin_iface: p.host_interface.clone(),
        });
    }
    if with_twins {
        for t in &ports {
            args.push("--vdev".into());
            args.push(format!("{},iface={}", t.twin_device, t.twin_iface));
        }
    }
    EalPlan { args, ports }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
instance = "t1"
[dataplane]
main_lcore = 0
worker_lcores = [1]
eal_args = ["--no-huge", "-m", "256", "--no-pci", "--no-shconf"]
flow_hash_key = "00112233445566778899aabbccddeeff"
[[port]]
name = "ext"
devargs = "net_tap0,iface=border-ext"
addresses = ["10.10.0.1/24"]
[[port]]
name = "int"
devargs = "0000:3b:00.1"
addresses = ["10.20.0.1/24"]
[mgmt]
listen = "unix:///run/border/t1.sock"
"#;

    #[test]
    fn pci_addresses_are_told_apart_from_vdevs() {
        assert!(is_pci_address("0000:3b:00.1"));
        assert!(is_pci_address("3b:00.1"));
        assert!(!is_pci_address("net_tap0"));
        assert!(!is_pci_address("0000:3b:00.8"));
        assert!(!is_pci_address("zz:00.0"));
        assert!(!is_pci_address(""));
    }

    #[test]
    fn argv_carries_lcores_prefix_and_devices() {
        let cfg = Config::from_toml_str(BASE, "test.toml").unwrap();
        let plan = eal_plan(&cfg, true);
        assert_eq!(
            plan.args,
            [
                "--no-huge",
                "-m",
                "256",
                "--no-pci",
                "--no-shconf",
                "-l",
                "0,1",
                "--main-lcore=0",
                "--file-prefix=border-t1",
                "--vdev",
                "net_tap0,iface=border-ext",
                "-a",
                "0000:3b:00.1",
                "--vdev",
                "net_tap_twin0,iface=kni-ext",
                "--vdev",
                "net_tap_twin1,iface=kni-int",
            ]
        );
        assert_eq!(plan.ports[0].device, "net_tap0");
        assert_eq!(plan.ports[1].device, "0000:3b:00.1");
        assert_eq!(plan.ports[1].twin_iface, "kni-int");
    }

    #[test]
    fn lcore_cpus_map_lcores_onto_cpus() {
        let text = BASE.replace(
            "worker_lcores = [1]",
            "worker_lcores = [1, 2]\nlcore_cpus = [0, 1, 1]",
        );
        let cfg = Config::from_toml_str(&text, "test.toml").unwrap();
        let plan = eal_plan(&cfg, false);
        assert!(
            plan.args.iter().any(|a| a == "--lcores=0@0,1@1,2@1"),
            "{:?}",
            plan.args
        );
        assert!(!plan.args.iter().any(|a| a == "-l"));
        let bad = BASE.replace(
            "worker_lcores = [1]",
            "worker_lcores = [1, 2]\nlcore_cpus = [0, 1]",
        );
        let e = Config::from_toml_str(&bad, "test.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("dataplane.lcore_cpus") && e.contains("expected 3"),
            "{e}"
        );
    }

    #[test]
    fn operator_file_prefix_wins_and_twins_are_optional() {
        let text = BASE.replace(
            r#""--no-shconf"]"#,
            r#""--no-shconf", "--file-prefix=mine"]"#,
        );
        let cfg = Config::from_toml_str(&text, "test.toml").unwrap();
        let plan = eal_plan(&cfg, false);
        assert!(plan.args.iter().any(|a| a == "--file-prefix=mine"));
        assert!(!plan
            .args
            .iter()
            .any(|a| a.starts_with("--file-prefix=border")));
        assert!(!plan.args.iter().any(|a| a.contains("twin")));
    }
}
