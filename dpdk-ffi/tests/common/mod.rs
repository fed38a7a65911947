//! What the EAL tests share: their EAL arguments, the net_tap prerequisites
//! (checked, never skipped) and the kernel side of a TAP interface.
#![allow(dead_code)]

/// EAL arguments of a test on lcores `lcores` without hugepages, PCI or
/// shared config, its runtime files under `border-ffi-<name>-<pid>`, then
/// `extra` (vdevs, log levels).
pub fn eal_args(lcores: &str, name: &str, extra: &[&str]) -> Vec<String> {
    [
        "-l",
        lcores,
        "--no-huge",
        "-m",
        "256",
        "--no-pci",
        "--no-shconf",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!(
        "--file-prefix=border-ffi-{name}-{}",
        std::process::id()
    )])
    .chain(extra.iter().map(|s| s.to_string()))
    .collect()
}

/// Fails (never skips) unless net_tap can create TAP devices: it needs
/// /dev/net/tun and root. `test` names the test file for the message.
pub fn require_tun_and_root(test: &str) {
    assert!(
        std::path::Path::new("/dev/net/tun").exists(),
        "this test needs /dev/net/tun (net_tap creates TAP devices); \
         run it on a machine with the tun module, as CI does"
    );
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert!(
        euid == 0,
        "this test needs root (net_tap creates TAP devices), running as uid {euid}; \
         run it as root, as CI does (sudo -E cargo test -p dpdk-ffi --test {test})"
    );
}

/// `/sys/class/net/<iface>/<rel>`, trimmed.
pub fn sysfs(iface: &str, rel: &str) -> Option<String> {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/{rel}"))
        .ok()
        .map(|s| s.trim().to_string())
}

/// The packets the kernel received on `iface`.
pub fn kernel_rx_packets(iface: &str) -> u64 {
    sysfs(iface, "statistics/rx_packets")
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Sends one raw Ethernet frame out of `iface` from the kernel side.
pub fn kernel_send(iface: &str, frame: &[u8]) -> std::io::Result<()> {
    let ifindex: i32 = sysfs(iface, "ifindex")
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("interface {iface} has no ifindex")))?;
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: plain socket(2) call; the fd is closed below.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(proto)) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = proto;
    addr.sll_ifindex = ifindex;
    addr.sll_halen = 6;
    addr.sll_addr[..6].copy_from_slice(&frame[..6]);
    // SAFETY: fd is our open socket; frame and addr are valid for the
    // lengths given.
    let n = unsafe {
        libc::sendto(
            fd,
            frame.as_ptr().cast(),
            frame.len(),
            0,
            std::ptr::addr_of!(addr).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    let err = std::io::Error::last_os_error();
    // SAFETY: fd is our open socket, closed once.
    unsafe { libc::close(fd) };
    if n < 0 {
        Err(err)
    } else {
        Ok(())
    }
}

/// A broadcast frame with the IEEE "local experimental" ethertype, which the
/// kernel counts and then ignores; `marker` fills the payload.
pub fn test_frame(marker: u8) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, marker]);
    f.extend_from_slice(&[0x88, 0xb5]);
    f.extend(std::iter::repeat_n(marker, 46));
    f
}
