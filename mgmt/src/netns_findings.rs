//! Problems border-mgmt sees in border-dp's network namespace: a port's
//! kernel twin that is down or gone, and a `local_port_range` the kernel's
//! ephemeral range has grown into since border-dp started (border-dp and
//! border-mgmt refuse the overlap at start, but `ip_local_port_range` can
//! change later). Looked at only when border-mgmt runs in the same network
//! namespace as border-dp: from another one, its twins are not visible.

use std::path::Path;

use conf::ephemeral::{check_local_ports, read_range, IP_LOCAL_PORT_RANGE};
use conf::Config;

use crate::findings::{Finding, Subject};

/// `IFF_UP` of `/sys/class/net/<if>/flags`.
const IFF_UP: u32 = 0x1;

/// What the kernel says about a twin interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TwinLink {
    /// No such interface in this namespace.
    Missing,
    /// Its `flags` without `IFF_UP` (`ip link set dev X down`).
    Down,
    Up,
}

/// The findings for `cfg`'s ports, when border-dp (`dp_pid`) runs in this
/// network namespace; none otherwise.
pub fn netns(cfg: &Config, dp_pid: u32) -> Vec<Finding> {
    if !same_netns(dp_pid) {
        return Vec::new();
    }
    let mut out: Vec<Finding> = cfg
        .ports
        .iter()
        .filter_map(|p| twin_finding(&p.name, &p.host_interface, twin_link(&p.host_interface)))
        .collect();
    if cfg.ports.iter().any(|p| p.local_port_range.is_some()) {
        out.extend(ephemeral_finding(
            cfg,
            read_range(Path::new(IP_LOCAL_PORT_RANGE)).ok(),
        ));
    }
    out
}

/// Whether `pid` lives in the caller's network namespace.
fn same_netns(pid: u32) -> bool {
    let mine = std::fs::read_link("/proc/self/ns/net");
    let its = std::fs::read_link(format!("/proc/{pid}/ns/net"));
    matches!((mine, its), (Ok(a), Ok(b)) if a == b)
}

/// The state of interface `name` in this namespace.
pub fn twin_link(name: &str) -> TwinLink {
    let flags = std::fs::read_to_string(Path::new("/sys/class/net").join(name).join("flags"));
    match flags.ok().and_then(|f| parse_flags(&f)) {
        None => TwinLink::Missing,
        Some(f) if f & IFF_UP == 0 => TwinLink::Down,
        Some(_) => TwinLink::Up,
    }
}

/// `0x1003\n` -> 0x1003.
fn parse_flags(text: &str) -> Option<u32> {
    u32::from_str_radix(text.trim().strip_prefix("0x")?, 16).ok()
}

/// `host_twin_down` for port `port` whose twin `twin` is `link`.
pub fn twin_finding(port: &str, twin: &str, link: TwinLink) -> Option<Finding> {
    let why = match link {
        TwinLink::Up => return None,
        TwinLink::Down => format!(
            "kernel twin {twin} of port {port:?} is down: the host's own traffic through the port \
             (health probes, BGP, ssh) is cut; `ip link set dev {twin} up` in border-dp's namespace"
        ),
        TwinLink::Missing => format!(
            "kernel twin {twin} of port {port:?} does not exist in border-dp's namespace: \
             the host's own traffic through the port is cut; restart border-dp (it creates the twin)"
        ),
    };
    Some(Finding::of_status(
        "host_twin_down",
        Subject::Port(port.to_string()),
        why,
    ))
}

/// `local_ports_overlap_ephemeral` when `cfg`'s first overlapping port meets
/// the kernel's `ephemeral` range (unknown: no finding).
pub fn ephemeral_finding(cfg: &Config, ephemeral: Option<(u16, u16)>) -> Option<Finding> {
    let e = check_local_ports(cfg, ephemeral?).err()?;
    let port = match &e {
        conf::ephemeral::LocalPortsError::Overlap { name, .. } => Some(name.clone()),
        conf::ephemeral::LocalPortsError::Read { .. } => None,
    };
    // A range the kernel did not let us read names no port (GetStatus
    // carries it with worker 0 and no port).
    let subject = match port {
        Some(p) => Subject::Port(p),
        None => Subject::Named("the kernel's ephemeral port range".into()),
    };
    Some(Finding::of_status(
        "local_ports_overlap_ephemeral",
        subject,
        format!(
            "{e} (the range changed after border-dp started: it refuses this overlap at start)"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = include_str!("../../conf/tests/data/border.example.toml");

    #[test]
    fn flags_read_as_the_kernel_writes_them() {
        assert_eq!(parse_flags("0x1003\n"), Some(0x1003));
        assert_eq!(parse_flags("0x1002"), Some(0x1002));
        assert_eq!(parse_flags("1003"), None);
        assert_eq!(twin_link("no-such-iface-dg"), TwinLink::Missing);
        assert_eq!(twin_link("lo"), TwinLink::Up);
    }

    #[test]
    fn a_twin_that_is_down_or_gone_is_named_with_what_to_do() {
        assert_eq!(twin_finding("ext", "kni-ext", TwinLink::Up), None);
        let f = twin_finding("ext", "kni-ext", TwinLink::Down).unwrap();
        assert_eq!(
            (f.kind.as_str(), f.subject.wire()),
            ("host_twin_down", (0, "ext"))
        );
        assert!(
            f.evidence.contains("ip link set dev kni-ext up"),
            "{}",
            f.evidence
        );
        let f = twin_finding("int", "kni-int", TwinLink::Missing).unwrap();
        assert!(f.evidence.contains("does not exist"), "{}", f.evidence);
    }

    #[test]
    fn an_ephemeral_range_grown_into_the_pool_is_named() {
        let cfg = Config::from_toml_str(EXAMPLE, "border.example.toml").unwrap();
        assert_eq!(ephemeral_finding(&cfg, Some((32768, 60999))), None);
        assert_eq!(ephemeral_finding(&cfg, None), None);
        let f = ephemeral_finding(&cfg, Some((10000, 60999))).unwrap();
        assert_eq!(f.kind, "local_ports_overlap_ephemeral");
        assert_eq!(f.subject, Subject::Port("int".into()));
        assert!(
            f.evidence
                .contains("overlaps the kernel's ephemeral ports 10000-60999"),
            "{}",
            f.evidence
        );
    }
}
