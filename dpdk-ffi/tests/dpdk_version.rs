//! The DPDK release check that `build.rs` runs on `pkg-config --modversion libdpdk`.

#[path = "../build/dpdk_version.rs"]
mod dpdk_version;

use dpdk_version::{check_dpdk_version, REQUIRED_DPDK};

#[test]
fn every_22_11_point_release_is_accepted() {
    for v in ["22.11", "22.11.0", "22.11.11", "22.11.4\n"] {
        assert_eq!(check_dpdk_version(v), Ok(()), "{v:?}");
    }
}

#[test]
fn another_release_is_refused_naming_what_was_found() {
    for v in ["23.11.0", "21.11.2", "22.1", "22.110", "2.11", "22"] {
        let e = check_dpdk_version(v).unwrap_err();
        assert!(e.contains(&format!("needs DPDK {REQUIRED_DPDK}")), "{e}");
        assert!(e.contains(&format!("reports {v}")), "{e}");
    }
    let e = check_dpdk_version("").unwrap_err();
    assert!(e.contains("reports an empty version"), "{e}");
}

#[test]
fn the_system_dpdk_is_the_one_the_build_accepted() {
    assert_eq!(check_dpdk_version(dpdk_ffi::DPDK_VERSION), Ok(()));
}
