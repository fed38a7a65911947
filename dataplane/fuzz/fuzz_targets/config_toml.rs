//! The config parser and validator on any text: a config is accepted with
//! its documented invariants, or refused with one located line naming the
//! file, line and column. Never a panic, never a multi-line error. Seeds in
//! seeds/config_toml are the shipped example configs.
#![no_main]

use conf::{Config, ConfigError};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Config::from_toml_str(text, "fuzz.toml") {
        Ok(c) => {
            assert!(!c.ports.is_empty());
            assert!(!c.dataplane.worker_lcores.is_empty());
            for p in &c.ports {
                assert_eq!(p.local_port_range.is_some(), !p.local_addresses.is_empty());
            }
            assert!(c.mgmt.listen_addr().is_some());
        }
        Err(e) => {
            let ConfigError::Invalid { line, column, .. } = &e else {
                panic!("unexpected error kind {e:?}");
            };
            let lines = text.split('\n').count();
            assert!(*line >= 1 && *line <= lines, "line {line} of {lines}: {e}");
            assert!(*column >= 1, "{e}");
            let shown = e.to_string();
            assert!(
                shown.starts_with(&format!("fuzz.toml:{line}:{column}: ")),
                "{shown}"
            );
            assert!(!shown.contains('\n'), "multi-line error: {shown:?}");
        }
    }
});
