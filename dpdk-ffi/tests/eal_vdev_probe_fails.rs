//! A vdev whose driver exists but fails to probe (net_pcap with a missing
//! file) does NOT fail EAL init on 22.11: EAL logs it and starts. The port is
//! simply absent, so the failure must surface, cleanly, at lookup. Callers
//! must therefore look up every configured port. Own file: EAL starts once
//! per process.

mod common;

use common::eal_args;
use dpdk_ffi::{port_count, Eal, Port};

#[test]
fn failed_probe_surfaces_at_port_lookup() {
    let args = eal_args(
        "0",
        "probe",
        &["--vdev=net_pcap0,rx_pcap=/nonexistent/border-in.pcap,tx_pcap=/nonexistent/border-out.pcap"],
    );

    let _eal = Eal::init(&args).expect("EAL starts despite the failed probe");
    assert_eq!(port_count(), 0);
    let e = Port::by_name("net_pcap0,rx_pcap=/nonexistent/border-in.pcap").unwrap_err();
    let msg = e.to_string();
    eprintln!("refused at lookup: {msg}");
    assert_eq!(e.errno(), libc::ENODEV, "{msg}");
    assert!(
        msg.starts_with("port \"net_pcap0\" lookup failed: No such device ("),
        "{msg}"
    );
    assert!(!msg.contains('\n'), "{msg}");
}
