//! net_tap as the dataplane uses it: the port shows up as a kernel interface,
//! frames sent by DPDK arrive in the kernel, frames the kernel sends on the
//! interface arrive in DPDK. Nothing leaves the machine: the kernel side is
//! an AF_PACKET socket on the same interface. Needs root and /dev/net/tun
//! and fails with a clear message without them (never skips: CI has both).
//! Own file: EAL starts once per process.

use std::time::{Duration, Instant};

use dpdk_ffi::{Eal, MbufBurst, Mempool, Port, DEFAULT_DATA_ROOM};

fn sysfs(iface: &str, rel: &str) -> Option<String> {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/{rel}"))
        .ok()
        .map(|s| s.trim().to_string())
}

fn kernel_rx_packets(iface: &str) -> u64 {
    sysfs(iface, "statistics/rx_packets")
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Sends one raw Ethernet frame out of `iface` from the kernel side.
fn kernel_send(iface: &str, frame: &[u8]) -> std::io::Result<()> {
    let ifindex: i32 = sysfs(iface, "ifindex")
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other("no ifindex"))?;
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
/// kernel counts and then ignores.
fn test_frame(marker: u8) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, marker]);
    f.extend_from_slice(&[0x88, 0xb5]);
    f.extend(std::iter::repeat_n(marker, 46));
    f
}

#[test]
fn tap_port_talks_to_the_kernel() {
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
         run it as root, as CI does (sudo -E cargo test -p dpdk-ffi --test eal_tap)"
    );
    let iface = format!("bffi{}", std::process::id() % 10_000_000);
    let args: Vec<String> = [
        "-l",
        "0",
        "--no-huge",
        "-m",
        "256",
        "--no-pci",
        "--no-shconf",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([
        format!("--file-prefix=border-ffi-tap-{}", std::process::id()),
        format!("--vdev=net_tap0,iface={iface}"),
    ])
    .collect();
    let _eal = Eal::init(&args).expect("EAL init");
    let mut port = Port::by_name(&format!("net_tap0,iface={iface}")).expect("tap port");
    assert_eq!(port.info().unwrap().driver_name, "net_tap");
    let pool = Mempool::pktmbuf("ffi_tap", 1023, 0, DEFAULT_DATA_ROOM, port.socket_id()).unwrap();
    port.configure(1, 1, 256, 256, &pool).unwrap();
    port.start().unwrap();

    // The kernel twin exists and start() brought it up.
    assert!(
        sysfs(&iface, "ifindex").is_some(),
        "kernel interface {iface} missing"
    );
    assert!(port.link().unwrap().up);
    let kernel_mac = sysfs(&iface, "address").unwrap();
    let dpdk_mac = port.mac_addr().unwrap();
    eprintln!(
        "tap {iface}: kernel MAC {kernel_mac}, DPDK-side MAC {}",
        dpdk_mac.map(|b| format!("{b:02x}")).join(":")
    );

    let mut rxq = port.rx_queue(0).unwrap();
    let mut txq = port.tx_queue(0).unwrap();

    // DPDK -> kernel.
    let before = kernel_rx_packets(&iface);
    let mut out: MbufBurst<1> = MbufBurst::new();
    let mut m = pool.alloc().unwrap();
    let frame = test_frame(0x11);
    m.append(frame.len()).unwrap().copy_from_slice(&frame);
    out.push(m).unwrap();
    assert_eq!(txq.tx_burst(&mut out), 1);
    let deadline = Instant::now() + Duration::from_secs(2);
    while kernel_rx_packets(&iface) == before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        kernel_rx_packets(&iface) > before,
        "kernel did not see the frame"
    );

    // kernel -> DPDK. The kernel may also send its own frames (IPv6 DAD,
    // MLD) when the interface comes up; look for ours among them.
    let frame = test_frame(0x22);
    kernel_send(&iface, &frame).expect("AF_PACKET send");
    let mut got = false;
    let mut burst: MbufBurst<32> = MbufBurst::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    while !got && Instant::now() < deadline {
        if rxq.rx_burst(&mut burst) == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
        got = burst.drain().any(|m| m.data() == &frame[..]);
    }
    assert!(got, "DPDK did not receive the kernel's frame");
    let st = port.stats().unwrap();
    assert!(st.ipackets >= 1 && st.opackets == 1, "{st:?}");

    drop((rxq, txq));
    drop(port);
    assert!(
        sysfs(&iface, "ifindex").is_none(),
        "closing the port removes the kernel interface"
    );
}
