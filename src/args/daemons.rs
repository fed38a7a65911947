//! The command lines of border-dp, border-mgmt and border-gw. They live in
//! the library so that `borderctl` can render them as man pages beside its
//! own (the Debian package installs all four).

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use super::duration;

/// The border dataplane: poll-mode workers on DPDK ports that answer for the
/// appliance's addresses, pass the host's traffic to kernel twin interfaces
/// and load-balance VIP traffic by the tables border-mgmt publishes (or,
/// with --standalone, by tables built from the config file). Counters and
/// worker liveness are in its state region (`borderctl counters`,
/// `borderctl status --local`). See docs/config.md and docs/architecture.md.
#[derive(Parser, Debug)]
#[command(
    name = "border-dp",
    version = crate::version::short(),
    long_version = crate::version::long(),
    about,
    long_about
)]
pub struct DpArgs {
    /// Run with this configuration file (TOML; see docs/config.md).
    #[arg(long, value_name = "FILE", required_unless_present = "check_config")]
    pub config: Option<PathBuf>,
    /// Validate FILE, print OK or the first error, and exit. Like the start,
    /// it also refuses a local_port_range that meets this network namespace's
    /// net.ipv4.ip_local_port_range.
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    pub check_config: Option<PathBuf>,
    /// Build and publish the load-balancing tables from the config file
    /// (re-read on SIGHUP) instead of following border-mgmt's tables.
    #[arg(long)]
    pub standalone: bool,
    #[command(flatten)]
    pub log: crate::LogArgs,
}

/// The border management process.
///
/// Loads the config, publishes the table generation it describes into the
/// shared-memory tables region that border-dp follows
/// (/dev/shm/border-<instance>-tables; re-attached, not rebuilt, after a
/// restart), and serves the gRPC API border.v1 on `[mgmt].listen` (default
/// unix:///run/border/<instance>.sock; TCP only with mutual TLS) and
/// Prometheus metrics on `[mgmt].metrics_listen`/metrics. Watches border-dp's
/// workers (liveness, applied generation, refused tables) through its state
/// region.
///
/// Probes the backends of every VIP with a [vip.health] table (tcp, tls,
/// http, https, agent, dns, udp) through border-dp's kernel twins, and
/// publishes the verdicts: a backend that is down leaves the VIP's ring, one
/// that comes back re-enters it (docs/health.md). Backends of a VIP without [vip.health] are
/// up unless drained.
///
/// Every config applied (ApplyConfig, SIGHUP) and every drain and weight
/// (SetBackend) is saved to the state directory before it answers; a
/// restart, or a reboot, runs the last applied config with its drains and
/// weights, not --config, unless --from-config-file says so
/// (docs/reliability.md).
///
/// SIGHUP re-reads the config file (only [[vip]] and zone change at run
/// time; an invalid file is refused and the running config stays).
/// SIGINT/SIGTERM stop cleanly (exit 0, socket removed). See docs/api.md.
#[derive(Parser, Debug)]
#[command(
    name = "border-mgmt",
    version = crate::version::short(),
    long_version = crate::version::long(),
    about,
    long_about
)]
pub struct MgmtArgs {
    /// Run with this configuration file (TOML; see docs/config.md).
    #[arg(long, value_name = "FILE", required_unless_present = "check_config")]
    pub config: Option<PathBuf>,
    /// Start from --config even if the state directory holds a config
    /// applied later (ApplyConfig, SIGHUP); saved drains and weights of
    /// backends it still has stay. Without it, the last applied config runs.
    #[arg(long, requires = "config")]
    pub from_config_file: bool,
    /// Where the applied config and the operator's drains and weights are
    /// saved, to survive restarts and reboots (created 0700 if missing)
    /// [default: /var/lib/border/<instance>].
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Validate FILE, print OK or the first error, and exit. Like the start,
    /// it also refuses a local_port_range that meets this network namespace's
    /// net.ipv4.ip_local_port_range.
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    pub check_config: Option<PathBuf>,
    /// How often to look at the dataplane's state region (worker liveness,
    /// refused tables) and retry a deferred publish: `250ms`, `1s`; a bare
    /// number is milliseconds.
    #[arg(long, value_name = "DURATION", default_value = "250ms",
          value_parser = duration::millis::<50, 60_000>)]
    pub watch_interval_ms: Duration,
    /// A worker whose heartbeat has not moved for this long is stalled and no
    /// longer holds back the reuse of table memory: `3s`, `500ms`; a bare
    /// number is milliseconds.
    #[arg(long, value_name = "DURATION", default_value = "3s",
          value_parser = duration::millis::<500, 600_000>)]
    pub liveness_grace_ms: Duration,
    #[command(flatten)]
    pub log: crate::LogArgs,
}

/// The border fleet gateway.
///
/// Accepts tunnels from appliances whose border-mgmt runs in agent mode
/// ([mgmt.agent]) on agent_listen (mutual TLS, each appliance's certificate
/// pinned per id), and control-plane calls on api_listen (mutual TLS,
/// clients pinned in tls.api_fingerprints) with the target appliance in
/// the `border-appliance` metadata. Each call goes to an idle tunnel of
/// that appliance here, or to the gateway that holds one, found in the
/// Redis registry (`borderctl --gateway tcp://GW --appliance ID ...`).
///
/// With metrics_listen set, Prometheus metrics (tunnels per appliance,
/// calls by outcome, forward latency, registry errors) are at /metrics
/// there. SIGINT/SIGTERM drain: the tunnels are told to close (their agents
/// reconnect to their next gateway at once), the registry entries removed.
/// The unit border-gw@NAME.service runs /etc/border/gw-NAME.toml.
/// See docs/fleet.md.
#[derive(Parser, Debug)]
#[command(
    name = "border-gw",
    version = crate::version::short(),
    long_version = crate::version::long(),
    about,
    long_about
)]
pub struct GwArgs {
    /// The gateway's config file (TOML; see docs/fleet.md).
    #[arg(long, value_name = "FILE", required_unless_present = "check_config")]
    pub config: Option<PathBuf>,
    /// Validate FILE, print OK or the error, and exit.
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    pub check_config: Option<PathBuf>,
    /// `--config FILE --check`: the older spelling of `--check-config FILE`.
    #[arg(long, hide = true, requires = "config")]
    pub check: bool,
    #[command(flatten)]
    pub log: crate::LogArgs,
}

impl GwArgs {
    /// The file to validate and exit, if this run only checks a config.
    pub fn config_to_check(&self) -> Option<&std::path::Path> {
        match (&self.check_config, self.check) {
            (Some(p), _) => Some(p),
            (None, true) => self.config.as_deref(),
            (None, false) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_daemons_command_lines_are_consistent() {
        DpArgs::command().debug_assert();
        MgmtArgs::command().debug_assert();
        GwArgs::command().debug_assert();
    }

    #[test]
    fn border_gw_checks_with_either_spelling() {
        let parse = |a: &[&str]| {
            GwArgs::try_parse_from(std::iter::once("border-gw").chain(a.iter().copied()))
        };
        let new = parse(&["--check-config", "gw.toml"]).unwrap();
        assert_eq!(new.config_to_check(), Some(std::path::Path::new("gw.toml")));
        let old = parse(&["--config", "gw.toml", "--check"]).unwrap();
        assert_eq!(old.config_to_check(), Some(std::path::Path::new("gw.toml")));
        let run = parse(&["--config", "gw.toml"]).unwrap();
        assert_eq!(run.config_to_check(), None);
        assert!(parse(&["--check"]).is_err());
        assert!(parse(&[]).is_err());
        assert!(parse(&["--config", "a.toml", "--check-config", "b.toml"]).is_err());
    }

    #[test]
    fn border_mgmt_intervals_take_durations_and_bare_milliseconds() {
        let parse = |a: &[&str]| {
            MgmtArgs::try_parse_from(std::iter::once("border-mgmt").chain(a.iter().copied()))
        };
        let d = parse(&["--config", "x.toml"]).unwrap();
        assert_eq!(d.watch_interval_ms, Duration::from_millis(250));
        assert_eq!(d.liveness_grace_ms, Duration::from_secs(3));
        let a = parse(&[
            "--config",
            "x.toml",
            "--watch-interval-ms",
            "100",
            "--liveness-grace-ms",
            "2s",
        ])
        .unwrap();
        assert_eq!(a.watch_interval_ms, Duration::from_millis(100));
        assert_eq!(a.liveness_grace_ms, Duration::from_secs(2));
        assert!(parse(&["--config", "x.toml", "--watch-interval-ms", "10"]).is_err());
    }
}
