//! The alerting rules border ships (deploy/prometheus/border-rules.yml) are
//! valid for Prometheus: `promtool check rules` (Debian's `prometheus`)
//! accepts them, and each rule is an alert that names its severity and
//! says what to do. tests/e2e_prometheus.rs evaluates them against a live
//! border-mgmt.

use std::path::Path;
use std::process::Command;

fn rules_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/prometheus/border-rules.yml")
}

#[test]
fn promtool_accepts_the_rules() {
    let out = Command::new("promtool")
        .args(["check", "rules"])
        .arg(rules_path())
        .output()
        .expect("promtool (Debian package prometheus; scripts/install-deps.sh)");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    let alerts = std::fs::read_to_string(rules_path())
        .unwrap()
        .lines()
        .filter(|l| l.trim_start().starts_with("- alert: "))
        .count();
    assert!(alerts >= 10, "{alerts} alerts");
    assert!(
        text.contains(&format!("SUCCESS: {alerts} rules found")),
        "{text}"
    );
}

#[test]
fn promtool_refuses_a_broken_rule() {
    // The check above can fail: a rule with an invalid expression is refused.
    let dir = std::env::temp_dir().join(format!("border-rules-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.yml");
    let text = std::fs::read_to_string(rules_path()).unwrap().replacen(
        "expr: border_dataplane_up == 0",
        "expr: border_dataplane_up ==",
        1,
    );
    std::fs::write(&bad, text).unwrap();
    let out = Command::new("promtool")
        .args(["check", "rules"])
        .arg(&bad)
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(!out.status.success());
}

#[test]
fn every_alert_has_a_severity_summary_and_description() {
    let text = std::fs::read_to_string(rules_path()).unwrap();
    let alerts: Vec<&str> = text.split("- alert: ").skip(1).collect();
    for a in alerts {
        let name = a.lines().next().unwrap();
        assert!(
            a.contains("severity: critical") || a.contains("severity: warning"),
            "{name}: severity"
        );
        assert!(a.contains("summary: "), "{name}: summary");
        assert!(a.contains("description: "), "{name}: description");
    }
}
