//! rte_flow steering on devices that cannot do it: net_null has no flow ops
//! at all, and net_tap's flow support needs the kernel's multiq qdisc (absent
//! on this CI's kernel, so net_tap disables rte_flow at probe). Installing
//! owner rules must fail with a readable error, never panic, and leave the
//! port as usable as before (tx and rx still work). A positive test needs a
//! NIC whose PMD supports the pattern (e.g. mlx5, ice, i40e; or net_tap on a
//! kernel with sch_multiq and cls_flower).
//! Needs root and /dev/net/tun, like eal_tap. Own file: EAL starts once per
//! process.

mod common;

use std::net::IpAddr;
use std::time::{Duration, Instant};

use common::{eal_args, kernel_rx_packets, kernel_send, require_tun_and_root, sysfs, test_frame};
use dpdk_ffi::{Eal, MbufBurst, Mempool, Port, SteerProto, SteerRule, DEFAULT_DATA_ROOM};

/// DPDK -> kernel (tx queue 0) and kernel -> DPDK (either rx queue).
fn tap_still_works(port: &Port, pool: &Mempool, iface: &str, marker: u8) {
    let mut txq = port.tx_queue(0).unwrap();
    let before = kernel_rx_packets(iface);
    let mut out: MbufBurst<1> = MbufBurst::new();
    let mut m = pool.alloc().unwrap();
    let frame = test_frame(marker);
    m.append(frame.len()).unwrap().copy_from_slice(&frame);
    out.push(m).unwrap();
    assert_eq!(txq.tx_burst(&mut out), 1);
    let deadline = Instant::now() + Duration::from_secs(2);
    while kernel_rx_packets(iface) == before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        kernel_rx_packets(iface) > before,
        "kernel did not see the frame after the failed rte_flow install"
    );

    // The kernel side picks an rx queue per flow; poll both.
    let mut rxqs = [port.rx_queue(0).unwrap(), port.rx_queue(1).unwrap()];
    let frame = test_frame(marker.wrapping_add(1));
    kernel_send(iface, &frame).expect("AF_PACKET send");
    let mut got = false;
    let mut burst: MbufBurst<32> = MbufBurst::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    while !got && Instant::now() < deadline {
        let mut n = 0;
        for q in &mut rxqs {
            n += q.rx_burst(&mut burst);
        }
        if n == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
        got = burst.drain().any(|m| m.data() == &frame[..]);
    }
    assert!(
        got,
        "DPDK did not receive the kernel's frame after the failed rte_flow install"
    );
}

fn null_still_works(port: &Port, pool: &Mempool) {
    let mut txq = port.tx_queue(1).unwrap();
    let mut rxq = port.rx_queue(1).unwrap();
    let mut out: MbufBurst<4> = MbufBurst::new();
    for _ in 0..4 {
        let mut m = pool.alloc().unwrap();
        m.append(60).unwrap().fill(0x5a);
        out.push(m).unwrap();
    }
    assert_eq!(txq.tx_burst(&mut out), 4);
    let mut burst: MbufBurst<8> = MbufBurst::new();
    assert!(rxq.rx_burst(&mut burst) > 0, "net_null rx stopped working");
    burst.clear();
    let st = port.stats().unwrap();
    assert!(st.opackets >= 4 && st.ipackets > 0, "{st:?}");
}

fn local_addrs() -> Vec<IpAddr> {
    vec![
        "192.0.2.10".parse().unwrap(),
        "2001:db8::10".parse().unwrap(),
    ]
}

#[test]
fn steering_fails_cleanly_without_rte_flow_support() {
    require_tun_and_root("eal_flow");
    let iface = format!("bflw{}", std::process::id() % 10_000_000);
    let vdev = format!("--vdev=net_tap0,iface={iface}");
    let args = eal_args("0", "flow", &[&vdev, "--vdev=net_null0"]);
    let _eal = Eal::init(&args).expect("EAL init");
    let pool = Mempool::pktmbuf("ffi_flow", 2047, 0, DEFAULT_DATA_ROOM, -1).unwrap();

    let rules = SteerRule::owner_rules(&local_addrs(), 2);
    assert_eq!(rules.len(), 2 * 2 * 2);

    // net_tap: two queues, like a dataplane with two workers.
    let mut tap = Port::by_name(&format!("net_tap0,iface={iface}")).expect("tap port");
    assert_eq!(tap.info().unwrap().driver_name, "net_tap");
    tap.configure(2, 2, 256, 256, &pool).unwrap();
    tap.start().unwrap();
    let e = tap
        .steer_local_ports(&rules)
        .expect_err("net_tap without multiq cannot steer by rte_flow");
    let msg = e.to_string();
    eprintln!("net_tap: {msg}");
    assert!(msg.contains("rte_flow"), "{msg}");
    assert!(msg.contains("net_tap"), "{msg}");
    assert!(msg.contains("rule 1/8"), "names the refused rule: {msg}");
    assert!(
        msg.contains("tcp to 192.0.2.10 port & 0x1 == 0 -> queue 0"),
        "{msg}"
    );
    // net_tap turns rules into TC flower filters and refuses partial port
    // masks (at create: its validate does not look at them).
    assert_eq!(e.errno(), libc::ENOTSUP, "{msg}");
    assert!(msg.contains("[pattern item: tcp]"), "{msg}");
    // An IPv6/UDP rule alone fails the same way (each family reaches the PMD).
    let v6 = SteerRule {
        dst: "2001:db8::10".parse().unwrap(),
        proto: SteerProto::Udp,
        port_spec: 1,
        port_mask: 1,
        queue: 1,
    };
    let e6 = tap.steer_local_ports(&[v6]).unwrap_err();
    eprintln!("net_tap v6: {e6}");
    assert!(e6.to_string().contains("udp to 2001:db8::10"), "{e6}");
    assert!(e6.to_string().contains("[pattern item: udp]"), "{e6}");
    // An exact port passes net_tap's own checks and reaches the kernel,
    // which refuses the filter: without the multiq qdisc there is nothing
    // to attach it to.
    let exact = SteerRule {
        port_mask: 0xffff,
        ..rules[1]
    };
    let ek = tap.steer_local_ports(&[exact]).unwrap_err();
    eprintln!("net_tap exact port: {ek}");
    assert!(ek.to_string().contains("create of rule 1/1"), "{ek}");
    assert_eq!(ek.errno(), libc::EEXIST, "{ek}");
    // No rules is trivially fine and holds nothing.
    let none = tap.steer_local_ports(&[]).expect("empty rule set");
    assert!(none.is_empty());
    assert_eq!(none.len(), 0);
    none.destroy().expect("destroying nothing");
    tap_still_works(&tap, &pool, &iface, 0x31);
    // The port still stops and restarts normally.
    tap.stop().unwrap();
    tap.start().unwrap();
    tap_still_works(&tap, &pool, &iface, 0x41);

    // net_null: no flow ops at all.
    let mut null = Port::by_name("net_null0").expect("null port");
    null.configure(2, 2, 256, 256, &pool).unwrap();
    null.start().unwrap();
    let e = null
        .steer_local_ports(&rules)
        .expect_err("net_null has no rte_flow");
    let msg = e.to_string();
    eprintln!("net_null: {msg}");
    assert!(msg.contains("rte_flow not supported by net_null"), "{msg}");
    null_still_works(&null, &pool);

    drop(null);
    drop(tap);
    assert!(
        sysfs(&iface, "ifindex").is_none(),
        "closing the port removes the kernel interface"
    );
}
