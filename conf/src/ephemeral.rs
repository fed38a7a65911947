//! Full-NAT source ports against the kernel's ephemeral ports. The kernel
//! twin of a port is a real interface of the network namespace border-dp
//! runs in; the host's own connections through it take source ports from
//! that namespace's `net.ipv4.ip_local_port_range` (IPv6 too). border-dp
//! takes a reply to a port inside a port's `local_port_range` for a
//! full-NAT reply, so the two ranges must not meet: a config whose ranges
//! overlap is refused at start (border-dp, border-mgmt) and on apply
//! (border-mgmt), naming both ranges (docs/reliability.md).

use std::path::Path;

use crate::Config;

/// Where the kernel keeps the ephemeral range of the caller's network
/// namespace.
pub const IP_LOCAL_PORT_RANGE: &str = "/proc/sys/net/ipv4/ip_local_port_range";

/// Why a config's local ports cannot be used here. One line each.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LocalPortsError {
    /// The kernel's range could not be read.
    #[error("cannot read the kernel's ephemeral port range {path}: {error}")]
    Read {
        /// The file.
        path: String,
        /// What went wrong.
        error: String,
    },
    /// A port's full-NAT range meets the kernel's.
    #[error("port[{index}] ({name:?}).local_port_range [{low}, {high}] overlaps the kernel's ephemeral ports {eph_low}-{eph_high} (net.ipv4.ip_local_port_range of this network namespace), which its kernel twin {twin} uses for the host's own connections: their replies would be taken for full-NAT replies and dropped (expected a local_port_range outside {eph_low}-{eph_high}, e.g. [1024, {below}], or move the kernel's range with sysctl)")]
    Overlap {
        /// Position of the port in the config.
        index: usize,
        /// Its name.
        name: String,
        /// Its full-NAT range.
        low: u16,
        /// Its full-NAT range.
        high: u16,
        /// The kernel's range.
        eph_low: u16,
        /// The kernel's range.
        eph_high: u16,
        /// The port's kernel twin.
        twin: String,
        /// The highest port below the kernel's range.
        below: u16,
    },
}

/// Parses the two numbers of `ip_local_port_range` ("32768\t60999\n").
pub fn parse_range(text: &str) -> Option<(u16, u16)> {
    let mut it = text.split_whitespace().map(str::parse::<u16>);
    match (it.next(), it.next(), it.next()) {
        (Some(Ok(lo)), Some(Ok(hi)), None) if lo <= hi => Some((lo, hi)),
        _ => None,
    }
}

/// The kernel's ephemeral range, read from `path` (normally
/// [`IP_LOCAL_PORT_RANGE`]).
pub fn read_range(path: &Path) -> Result<(u16, u16), LocalPortsError> {
    let read = |error: String| LocalPortsError::Read {
        path: path.display().to_string(),
        error,
    };
    let text = std::fs::read_to_string(path).map_err(|e| read(e.to_string()))?;
    parse_range(&text).ok_or_else(|| read(format!("expected two port numbers, found {text:?}")))
}

/// The first port of `cfg` whose `local_port_range` overlaps `ephemeral`.
pub fn check_local_ports(cfg: &Config, ephemeral: (u16, u16)) -> Result<(), LocalPortsError> {
    let (eph_low, eph_high) = ephemeral;
    for (index, p) in cfg.ports.iter().enumerate() {
        let Some((low, high)) = p.local_port_range else {
            continue;
        };
        if low <= eph_high && eph_low <= high {
            return Err(LocalPortsError::Overlap {
                index,
                name: p.name.clone(),
                low,
                high,
                eph_low,
                eph_high,
                twin: p.host_interface.clone(),
                below: eph_low.saturating_sub(1).max(1024),
            });
        }
    }
    Ok(())
}

/// [`check_local_ports`] against this network namespace's range.
pub fn check_local_ports_here(cfg: &Config) -> Result<(), LocalPortsError> {
    if cfg.ports.iter().all(|p| p.local_port_range.is_none()) {
        return Ok(());
    }
    check_local_ports(cfg, read_range(Path::new(IP_LOCAL_PORT_RANGE))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The annotated example: port[1] "int" has the pool [1024, 32767].
    const EXAMPLE: &str = include_str!("../tests/data/border.example.toml");

    fn example() -> Config {
        Config::from_toml_str(EXAMPLE, "border.example.toml").unwrap()
    }

    #[test]
    fn the_kernels_range_parses_as_the_file_says_it() {
        assert_eq!(parse_range("32768\t60999\n"), Some((32768, 60999)));
        assert_eq!(parse_range("1024 65535"), Some((1024, 65535)));
        for bad in ["", "32768", "60999 32768", "1 2 3", "a b", "70000 70001"] {
            assert_eq!(parse_range(bad), None, "{bad:?}");
        }
        assert_eq!(
            read_range(Path::new("/nonexistent/range")).unwrap_err().to_string(),
            "cannot read the kernel's ephemeral port range /nonexistent/range: No such file or directory (os error 2)"
        );
    }

    #[test]
    fn an_overlap_names_both_ranges_and_the_twin() {
        let cfg = example();
        let e = check_local_ports(&cfg, (20000, 60999))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "port[1] (\"int\").local_port_range [1024, 32767] overlaps the kernel's ephemeral ports 20000-60999 (net.ipv4.ip_local_port_range of this network namespace), which its kernel twin kni-int uses for the host's own connections: their replies would be taken for full-NAT replies and dropped (expected a local_port_range outside 20000-60999, e.g. [1024, 19999], or move the kernel's range with sysctl)"
        );
        // Touching at either end is an overlap; beside it is not.
        assert!(check_local_ports(&cfg, (32767, 60999)).is_err());
        assert!(check_local_ports(&cfg, (1, 1024)).is_err());
        assert_eq!(check_local_ports(&cfg, (32768, 60999)), Ok(()));
        assert_eq!(check_local_ports(&cfg, (1, 1023)), Ok(()));
    }
}
