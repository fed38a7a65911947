//! Finds the system DPDK through pkg-config (refusing any release but 22.11,
//! `build/dpdk_version.rs`), generates bindings for the
//! headers we use, builds the C shim for the static-inline hot path, and
//! links DPDK as shared libraries (EAL then loads PMDs from its plugin dir).

use std::env;
use std::path::PathBuf;
use std::process::Command;

#[path = "build/dpdk_version.rs"]
mod dpdk_version;

/// Ends the build with one clear error line (cargo prints it as `error: ...`).
fn fail(msg: &str) -> ! {
    println!("cargo::error={msg}");
    std::process::exit(1);
}

fn pkg_config(args: &[&str]) -> Vec<String> {
    let out = Command::new("pkg-config")
        .args(args)
        .arg("libdpdk")
        .output()
        .unwrap_or_else(|e| fail(&format!("cannot run pkg-config ({e}); install pkg-config")));
    if !out.status.success() {
        fail(&format!(
            "DPDK {} not found: `pkg-config {} libdpdk` failed: {}; install libdpdk-dev (Debian 12), or set PKG_CONFIG_PATH",
            dpdk_version::REQUIRED_DPDK,
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim().replace('\n', " ")
        ));
    }
    String::from_utf8(out.stdout)
        .unwrap_or_else(|_| fail("pkg-config output is not UTF-8"))
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=build/dpdk_version.rs");
    println!("cargo:rerun-if-changed=shim/shim.c");
    println!("cargo:rerun-if-changed=shim/shim.h");
    println!("cargo:rerun-if-changed=shim/wrapper.h");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_LIBDIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_SYSROOT_DIR");

    let version = pkg_config(&["--modversion"]).join("");
    if let Err(e) = dpdk_version::check_dpdk_version(&version) {
        fail(&e);
    }
    let cflags = pkg_config(&["--cflags"]);
    let libs = pkg_config(&["--libs"]);

    // Exported to dependents (`links = "rte_eal"`) as DEP_RTE_EAL_*.
    println!("cargo:version={version}");
    println!("cargo:rustc-env=BORDER_DPDK_VERSION={version}");
    println!("cargo:cflags={}", cflags.join(" "));

    for lib in &libs {
        if let Some(dir) = lib.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={dir}");
        } else if let Some(name) = lib.strip_prefix("-l") {
            println!("cargo:rustc-link-lib={name}");
        }
        // `-Wl,--as-needed` is rustc's default on Linux already.
    }

    cc::Build::new()
        .file("shim/shim.c")
        .include("shim")
        .flags(cflags.iter().map(String::as_str))
        .flag_if_supported("-Wall")
        .compile("border_dpdk_shim");

    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    let bindings = bindgen::Builder::default()
        .header("shim/wrapper.h")
        .clang_args(cflags.iter())
        .clang_arg("-Ishim")
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .allowlist_function("rte_.*|border_shim_.*")
        .allowlist_type("rte_.*|border_shim_.*")
        .allowlist_var("RTE_.*|rte_.*|SOCKET_ID_ANY|LCORE_ID_ANY")
        // Thread-locals: Rust cannot name them; the shim reads rte_errno.
        .blocklist_item("per_lcore_.*")
        // Packed structs with aligned members that Rust cannot express.
        .opaque_type("rte_l2tpv2_combined_msg_hdr")
        .opaque_type("rte_gtp_psc_generic_hdr")
        .derive_default(true)
        .derive_debug(false)
        .generate_comments(false)
        .prepend_enum_name(false)
        .layout_tests(true)
        .wrap_unsafe_ops(true)
        .generate()
        .expect("dpdk-ffi: bindgen failed on shim/wrapper.h (is libclang-dev installed?)");
    bindings
        .write_to_file(out_dir.join("bindings.rs"))
        .expect("dpdk-ffi: cannot write bindings.rs");
}
