//! An unknown vdev driver must give a clean error, never a panic. EAL 22.11
//! refuses it at init (no bus claims the name, so it cannot be parsed); a
//! driver that exists but fails to probe lets EAL start and surfaces at
//! port lookup instead. Either way the error must be one clean line.
//! Own file: EAL starts once per process.

mod common;

use common::eal_args;
use dpdk_ffi::{port_count, Eal, Port};

#[test]
fn unknown_vdev_is_an_error_not_a_panic() {
    let args = eal_args(
        "0",
        "badvdev",
        &["--vdev=net_doesnotexist0", "--vdev=net_null0"],
    );

    match Eal::init(&args) {
        Err(e) => {
            let msg = e.to_string();
            eprintln!("refused at init: {msg}");
            assert!(msg.starts_with("EAL init failed: "), "{msg}");
            assert!(!msg.contains('\n'), "{msg}");
        }
        Ok(_eal) => {
            assert_eq!(port_count(), 1, "only net_null0 exists");
            let e = Port::by_name("net_doesnotexist0").unwrap_err();
            let msg = e.to_string();
            eprintln!("refused at lookup: {msg}");
            assert_eq!(e.errno(), libc::ENODEV, "{msg}");
            assert!(
                msg.starts_with("port \"net_doesnotexist0\" lookup failed: No such device"),
                "{msg}"
            );
            assert!(!msg.contains('\n'), "{msg}");
            Port::by_name("net_null0").expect("the good vdev still works");
        }
    }
}
