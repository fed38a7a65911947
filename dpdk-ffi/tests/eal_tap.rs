//! net_tap as the dataplane uses it: the port shows up as a kernel interface,
//! frames sent by DPDK arrive in the kernel, frames the kernel sends on the
//! interface arrive in DPDK. Nothing leaves the machine: the kernel side is
//! an AF_PACKET socket on the same interface. Needs root and /dev/net/tun
//! and fails with a clear message without them (never skips: CI has both).
//! Own file: EAL starts once per process.

mod common;

use std::time::{Duration, Instant};

use common::{eal_args, kernel_rx_packets, kernel_send, require_tun_and_root, sysfs, test_frame};
use dpdk_ffi::{Eal, MbufBurst, Mempool, Port, DEFAULT_DATA_ROOM};

#[test]
fn tap_port_talks_to_the_kernel() {
    require_tun_and_root("eal_tap");
    let iface = format!("bffi{}", std::process::id() % 10_000_000);
    let vdev = format!("--vdev=net_tap0,iface={iface}");
    let args = eal_args("0", "tap", &[&vdev]);
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
