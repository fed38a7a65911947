//! Malformed EAL arguments: a one-line error naming the cause, and EAL stays
//! unusable (not half-usable) afterwards. Own file: EAL starts once per
//! process, failed attempts included.

use dpdk_ffi::{launch_on, Eal, Mempool, DEFAULT_DATA_ROOM};

#[test]
fn bad_eal_args_fail_cleanly() {
    let args: Vec<String> = [
        "--no-huge",
        "-m",
        "256",
        "--no-pci",
        "--no-shconf",
        "--this-option-does-not-exist",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!(
        "--file-prefix=border-ffi-badargs-{}",
        std::process::id()
    )])
    .collect();

    let e = Eal::init(&args).expect_err("unknown option must be refused");
    assert_eq!(
        e.to_string(),
        "EAL init failed: Invalid argument (check eal_args/devargs)"
    );
    assert_eq!(e.errno(), libc::EINVAL);

    let again = Eal::init(&args).unwrap_err().to_string();
    assert!(again.contains("earlier attempt failed"), "{again}");

    let nul = Eal::init(&["a\0b".to_string()]).unwrap_err().to_string();
    assert!(nul.starts_with("EAL init failed: "), "{nul}");

    let e = Mempool::pktmbuf("p", 63, 0, DEFAULT_DATA_ROOM, -1).unwrap_err();
    assert!(e.to_string().contains("not initialised"), "{e}");
    assert!(launch_on(1, || 0).is_err());
}
