//! Which DPDK release border builds against, and the one-line error when the
//! system has another. Included by `build.rs` and by `tests/dpdk_version.rs`.

/// The DPDK release (major.minor) border's bindings, shim and measured facts
/// are for: Debian 12's `libdpdk-dev`. DPDK changes its ABI and its inline
/// hot-path functions between releases, so another one is refused up front
/// rather than failing somewhere in bindgen or at run time.
pub const REQUIRED_DPDK: &str = "22.11";

/// Checks `pkg-config --modversion libdpdk` output (`22.11.4`, `22.11`)
/// against [`REQUIRED_DPDK`]; the error names what was found.
pub fn check_dpdk_version(found: &str) -> Result<(), String> {
    let found = found.trim();
    let mut parts = found.split('.');
    let release = match (parts.next(), parts.next()) {
        (Some(major), Some(minor)) => format!("{major}.{minor}"),
        _ => String::new(),
    };
    if release == REQUIRED_DPDK {
        return Ok(());
    }
    let found = if found.is_empty() {
        "an empty version"
    } else {
        found
    };
    Err(format!(
        "border needs DPDK {REQUIRED_DPDK} (Debian 12: apt install libdpdk-dev), but pkg-config libdpdk reports {found}; \
         install {REQUIRED_DPDK}, or point PKG_CONFIG_PATH at its libdpdk.pc"
    ))
}
