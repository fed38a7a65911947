//! The configs the e2e tests start from, and the addresses of their test
//! subnets.

use super::netns::PortKind;

/// The start of an e2e appliance's config: `[dataplane]` with one worker,
/// ports `ext` and `int` on net_tap (`<tag>-ext`/`<tag>-int`, kernel twins
/// `k<tag>-ext`/`k<tag>-int`), `ext`/`int` as `address/prefix`, the `int`
/// address also the full-NAT local address, and `[mgmt] listen`. Tests append
/// more `[mgmt]` keys and their VIPs.
pub fn two_port_config(instance: &str, tag: &str, ext: &str, int: &str, listen: &str) -> String {
    two_port_config_on(PortKind::Tap, instance, tag, ext, int, listen)
}

/// The start of a config for border-mgmt without traffic: `[dataplane]`
/// with one worker, one `net_null0` port `p0` with `<address>/24` (also its
/// local address), and `[mgmt] listen`. Tests append more `[mgmt]` keys,
/// `[mgmt.tls]` and their VIPs.
pub fn null_port_config(instance: &str, address: &str, listen: &str) -> String {
    format!(
        r#"instance = "{instance}"

[dataplane]
worker_lcores = [1]
flow_hash_key = "00112233445566778899aabbccddeeff"

[[port]]
name = "p0"
devargs = "net_null0"
addresses = ["{address}/24"]
local_addresses = ["{address}"]

[mgmt]
listen = "{listen}"
"#
    )
}

/// [`two_port_config`] with the data ports on `kind`.
pub fn two_port_config_on(
    kind: PortKind,
    instance: &str,
    tag: &str,
    ext: &str,
    int: &str,
    listen: &str,
) -> String {
    let local = int.split('/').next().unwrap_or(int);
    let ext_dev = kind.devargs(0, &format!("{tag}-ext"));
    let int_dev = kind.devargs(1, &format!("{tag}-int"));
    format!(
        r#"instance = "{instance}"
[dataplane]
main_lcore = 0
worker_lcores = [1]
eal_args = ["--no-huge", "-m", "256", "--no-pci", "--no-shconf"]
conntrack_per_worker = 16384
flow_hash_key = "00112233445566778899aabbccddeeff"

[[port]]
name = "ext"
devargs = "{ext_dev}"
addresses = ["{ext}"]
host_interface = "k{tag}-ext"

[[port]]
name = "int"
devargs = "{int_dev}"
addresses = ["{int}"]
host_interface = "k{tag}-int"
local_addresses = ["{local}"]
local_port_range = [1024, 32767]

[mgmt]
listen = "{listen}"
"#
    )
}

/// `fd00:n::host` (IPv6, host in hex).
pub fn subnet_host(n: u8, v6: bool, host: u8) -> String {
    if v6 {
        format!("fd00:{n}::{host:x}")
    } else {
        format!("10.{n}.0.{host}")
    }
}

/// The prefix length of a test subnet: /64 for IPv6, /24 for IPv4.
pub fn subnet_prefix_len(v6: bool) -> u8 {
    if v6 {
        64
    } else {
        24
    }
}
