//! `borderctl log-level` (SetLogLevel) sets border-mgmt's and border-dp's
//! log level while they run: border-mgmt says a debug line it did not say
//! at info, and stops again at info; border-dp takes the level (it says so
//! and keeps running: the signal has a handler); with border-dp stopped the
//! call fails with exit 1. Namespace `cm-lv`, subnet 10.151.

mod common;

use std::time::Duration;

use common::*;

const INSTANCE: &str = "e2ecmlv";

fn config(socket: &str, weight: u32) -> String {
    two_port_config(INSTANCE, "cm", "10.151.1.1/24", "10.151.2.1/24", socket)
        + &format!(
            r#"
[[vip]]
name = "web"
address = "10.151.1.100"
port = 80
protocol = "tcp"
mode = "fullnat"
[[vip.backend]]
address = "10.151.2.11"
port = 8080
weight = {weight}
"#
        )
}

#[test]
fn log_level_is_set_by_api_in_border_mgmt_and_border_dp() {
    clean_instance(INSTANCE);
    let lb = Netns::new("cm-lv");
    let dir = TempDir::new("cmlv");
    let server = format!("unix://{}", dir.path("api.sock").display());
    let cfg = dir.path("border.toml");
    std::fs::write(&cfg, config(&server, 1)).unwrap();
    let mut mgmt = BorderMgmt::start_with(
        None,
        &cfg,
        dir.path("mgmt.log"),
        &["--state-dir", dir.path("state").to_str().unwrap()],
    );
    let mut dp = BorderDp::start_following(&lb, &dir, INSTANCE, &config(&server, 1));
    dp.wait_applied(1);

    // border-mgmt says at debug which VIP entries a changed config re-parsed.
    let debug_line = "config validated: only these VIP entries were parsed";
    let apply = |weight: u32| {
        let file = dir.path(&format!("w{weight}.toml"));
        std::fs::write(&file, config(&server, weight)).unwrap();
        borderctl_ok(&["--server", &server, "apply", file.to_str().unwrap()]);
    };
    apply(2);
    assert_eq!(mgmt.log_text().matches(debug_line).count(), 0);

    let out = borderctl_ok(&["--server", &server, "log-level", "debug"]);
    assert!(
        out.contains("border-mgmt (pid ") && out.contains("log level set to debug"),
        "{out}"
    );
    wait_until("border-mgmt at debug", Duration::from_secs(5), || {
        mgmt.log_text()
            .contains("SetLogLevel: border's log level is now debug")
    });
    apply(3);
    assert_eq!(
        mgmt.log_text().matches(debug_line).count(),
        1,
        "{}",
        mgmt.log_text()
    );
    borderctl_ok(&["--server", &server, "log-level", "info", "--daemon", "mgmt"]);
    wait_until("border-mgmt at info", Duration::from_secs(5), || {
        mgmt.log_text()
            .contains("SetLogLevel: border's log level is now info")
    });
    apply(4);
    assert_eq!(mgmt.log_text().matches(debug_line).count(), 1);

    // border-dp: by the pid of its state region; --json names it.
    let out = borderctl_ok(&[
        "--server",
        &server,
        "--json",
        "log-level",
        "trace",
        "--daemon",
        "dp",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["daemon"], "border-dp");
    assert_eq!(v["pid"], dp.pid());
    assert_eq!(v["level"], "trace");
    wait_until("border-dp at trace", Duration::from_secs(5), || {
        dp.log_text()
            .contains("SetLogLevel: border's log level is now trace")
    });
    borderctl_ok(&["--server", &server, "log-level", "warn", "--daemon", "dp"]);
    wait_until("border-dp at warn", Duration::from_secs(5), || {
        dp.log_text()
            .contains("SetLogLevel: border's log level is now warn")
    });
    assert!(dp.stop().success(), "{}", dp.log_text());

    // No border-dp: refused, exit 1, and border-mgmt goes on.
    let (code, _, err) = borderctl(&["--server", &server, "log-level", "info", "--daemon", "dp"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("border-dp is not running"), "{err}");
    borderctl_ok(&["--server", &server, "log-level", "info"]);
    assert!(mgmt.stop().success(), "{}", mgmt.log_text());
    clean_instance(INSTANCE);
}
