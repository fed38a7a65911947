//! What `--version` says: the crate version, the git commit it was built
//! from, the DPDK release, and the versions of the shared-memory layouts
//! (state, tables, records regions) that border-dp, border-mgmt and
//! borderctl must agree on to read each other.

use std::sync::OnceLock;

/// The git commit of the build (`build.rs`), `unknown` outside a checkout.
pub const COMMIT: &str = env!("BORDER_GIT_COMMIT");

/// `-V`: the crate version and the commit.
pub fn short() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| format!("{} ({COMMIT})", env!("CARGO_PKG_VERSION")))
}

/// Names this build to the Prometheus exporters (`border_build_info`).
pub fn name_build_for_metrics() {
    mgmt::process_metrics::set_build_info(mgmt::process_metrics::BuildInfo {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        commit: COMMIT.to_owned(),
        dpdk: dpdk_ffi::DPDK_VERSION.to_owned(),
    });
}

/// `--version` of border-mgmt, border-gw and borderctl: the DPDK release
/// they were built with (they do not load DPDK themselves).
pub fn long() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| lines(&format!("built with DPDK {}", dpdk_ffi::DPDK_VERSION)))
}

/// `--version` of border-dp: the DPDK it loaded and the one it was built with.
pub fn long_with_loaded_dpdk() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        lines(&format!(
            "{} (loaded; built with {})",
            dpdk_ffi::loaded_version(),
            dpdk_ffi::DPDK_VERSION
        ))
    })
}

fn lines(dpdk: &str) -> String {
    format!(
        "{}\ncommit {COMMIT}\n{dpdk}\nshared memory layouts: state {}, tables {}, records {}, flows {}, carry {}, conns {}",
        env!("CARGO_PKG_VERSION"),
        conf::state::STATE_LAYOUT_VERSION,
        conf::tables::TABLES_LAYOUT_VERSION,
        conf::records::RECORDS_LAYOUT_VERSION,
        dataplane::flows_region::FLOWS_LAYOUT_VERSION,
        dataplane::carry_region::CARRY_LAYOUT_VERSION,
        conf::conns::CONNS_LAYOUT_VERSION,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_long_version_names_commit_dpdk_and_layouts() {
        let v = long();
        assert!(v.starts_with(env!("CARGO_PKG_VERSION")), "{v}");
        assert!(v.contains(&format!("commit {COMMIT}\n")), "{v}");
        assert!(
            v.contains(&format!("\nbuilt with DPDK {}\n", dpdk_ffi::DPDK_VERSION)),
            "{v}"
        );
        assert!(
            v.contains(&format!(
                "state {}, tables {}",
                conf::state::STATE_LAYOUT_VERSION,
                conf::tables::TABLES_LAYOUT_VERSION
            )),
            "{v}"
        );
        assert!(
            v.ends_with(&format!(", conns {}", conf::conns::CONNS_LAYOUT_VERSION)),
            "{v}"
        );
    }
}
