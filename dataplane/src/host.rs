//! Setting up the kernel side of a port's twin interface (docs/design.md §2a).
//!
//! The twin is a TAP interface that DPDK created; here it gets the data port's
//! MAC (so the kernel's frames leave with the port's source address and the
//! neighbours' replies, addressed to that MAC, come back to it) and the port's
//! addresses, and is brought up. This runs once at start, through `ip` from
//! iproute2, which every Linux border box has.

use std::process::Command;

use conf::IpNet;

/// Why a twin could not be configured.
#[derive(Debug, thiserror::Error)]
#[error("kernel twin {iface}: `ip {args}` failed: {reason}")]
pub struct TwinError {
    pub iface: String,
    pub args: String,
    pub reason: String,
}

fn ip(iface: &str, args: &[&str]) -> Result<(), TwinError> {
    let fail = |reason: String| TwinError {
        iface: iface.to_string(),
        args: args.join(" "),
        reason,
    };
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| fail(format!("cannot run ip: {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(fail(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ))
    }
}

pub fn format_mac(mac: [u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Gives the twin `iface` the port's MAC and addresses and brings it up.
pub fn configure_twin(iface: &str, mac: [u8; 6], addresses: &[IpNet]) -> Result<(), TwinError> {
    let mac = format_mac(mac);
    ip(iface, &["link", "set", "dev", iface, "address", &mac])?;
    for net in addresses {
        let cidr = format!("{}/{}", net.addr, net.prefix_len);
        let mut args = vec!["addr", "replace", cidr.as_str(), "dev", iface];
        if net.addr.is_ipv6() {
            // Usable at once: duplicate address detection would hold the
            // address back for a second and the dataplane answers NDP anyway.
            args.push("nodad");
        }
        ip(iface, &args)?;
    }
    ip(iface, &["link", "set", "dev", iface, "up"])
}
