//! Smoke form of `border-perf memif`: a second per phase through border-dp,
//! through dpdk-testpmd over memif, and with the generator's two ports
//! joined (no device). Asserts that packets went both ways in all three,
//! that every established flow completed its handshake, and that
//! border-dp's own counters saw the connections.
//!
//! Needs root and border-dp built next to border-perf (`cargo test
//! --workspace` builds it; alone: `cargo build --bin border-dp`). Run it
//! under the e2e lock: `flock /tmp/border-e2e.lock cargo test -p perf --test
//! memif_smoke`.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

const FLOWS: u64 = 64;

fn num(v: &Value, k: &str) -> f64 {
    v[k].as_f64()
        .unwrap_or_else(|| panic!("{k} missing in {v}"))
}

#[test]
fn generator_through_border_and_testpmd() {
    let perf = env!("CARGO_BIN_EXE_border-perf");
    let border_dp = Path::new(perf).with_file_name("border-dp");
    assert!(
        border_dp.exists(),
        "{} missing: build it first (cargo build --bin border-dp)",
        border_dp.display()
    );
    let json = std::env::temp_dir().join(format!("memif-smoke-{}.json", std::process::id()));
    let out = Command::new(perf)
        .args(["memif", "--seconds", "1", "--rounds", "1", "--window", "64"])
        .arg(format!("--flows={FLOWS}"))
        .arg("--border-dp")
        .arg(&border_dp)
        .arg("--json")
        .arg(&json)
        .output()
        .expect("run border-perf memif");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("ratio"), "{stdout}");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);

    let phases = doc["phases"].as_array().unwrap();
    let names: Vec<&str> = phases
        .iter()
        .map(|p| p["phase"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["fullnat", "dnat", "ppv2", "new"]);
    let mut new_flows_done = 0.0;
    for p in phases {
        let name = p["phase"].as_str().unwrap();
        // "loopback": the generator's two ports joined, no device.
        for dut in ["border", "testpmd", "loopback"] {
            let r = &p[dut][0];
            let what = format!("{name} through {dut}: {r}");
            assert!(num(r, "mpps") > 0.0, "{what}");
            // Both directions moved: client -> backend and back.
            assert!(num(r, "backend_rx") > 0.0, "{what}");
            assert!(num(r, "client_rx") > 0.0, "{what}");
            assert!(num(r, "backend_tx") > 0.0, "{what}");
            if name == "new" {
                assert!(num(r, "synacks") > 0.0, "{what}");
                assert!(num(r, "flows_done") > 0.0, "{what}");
                if dut == "border" {
                    new_flows_done = num(r, "flows_done");
                }
            } else {
                assert_eq!(num(r, "established"), FLOWS as f64, "{what}");
                assert!(num(r, "data_acks") > 0.0, "{what}");
            }
        }
        assert!(num(p, "ratio") > 0.0, "{p}");
        assert!(num(p, "loopback_mpps") > 0.0, "{p}");
        assert!(num(p, "testpmd_of_loopback") > 0.0, "{p}");
    }

    // border-dp saw every connection: the established flows of three
    // phases and at least the new connections the generator closed.
    let c = &doc["border_counters"][0];
    let counter = |k: &str| c[k].as_f64().unwrap_or(0.0);
    assert!(
        counter("new_flows") >= (3 * FLOWS) as f64 + new_flows_done,
        "new_flows {} < {} + {new_flows_done}: {c}",
        counter("new_flows"),
        3 * FLOWS
    );
    assert!(counter("pp_headers_inserted") >= FLOWS as f64, "{c}");
    assert!(
        counter("rx_packets") > 0.0 && counter("tx_packets") > 0.0,
        "{c}"
    );
    assert_eq!(counter("drop_malformed"), 0.0, "{c}");
    assert_eq!(counter("drop_not_our_mac"), 0.0, "{c}");
}
