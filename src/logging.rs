//! The daemons' log: where it goes (stderr), in which form (`--log-format`),
//! and how much of it, changed at run time by SIGUSR1 (more) and SIGUSR2
//! (less), or set to a named level by border-mgmt's SetLogLevel (a
//! real-time signal per level), without a restart. docs/operations.md#logs
//! says it for operators.

use std::io::IsTerminal;
use std::str::FromStr;

use tracing::level_filters::LevelFilter;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{self, FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Registry};

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines with a timestamp; coloured only when stderr is
    /// a terminal and `NO_COLOR` is unset or empty.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `message`, the
    /// event's fields, `target`.
    Json,
    /// Lines that start with a syslog priority (`<3>` error ... `<7>`
    /// debug) and carry no timestamp: what systemd's journal reads from a
    /// service's stderr, so `journalctl -p warning` filters by level.
    Journald,
}

/// The flag every daemon takes.
#[derive(clap::Args, Clone, Copy, Debug, Default)]
pub struct LogArgs {
    /// How log lines on stderr look: `text` (coloured only on a terminal,
    /// never with NO_COLOR set), `json` (one object per line), `journald`
    /// (syslog priority prefixes, no timestamps, for a systemd unit).
    /// RUST_LOG sets the level (default info); SIGUSR1 makes border's own
    /// log one level more verbose, SIGUSR2 one level less.
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// The crates whose level SIGUSR1 and SIGUSR2 move: border's own, by the
/// names their events carry as targets. Libraries (tonic, h2, rustls, ...)
/// stay at RUST_LOG's level, so a debugging session shows border's
/// decisions rather than every HTTP/2 frame.
const OWN_TARGETS: &[&str] = &[
    "border",
    "border_dp",
    "border_mgmt",
    "border_gw",
    "conf",
    "dataplane",
    "dpdk_ffi",
    "gw",
    "mgmt",
];

/// From least to most verbose: the steps of SIGUSR1 and SIGUSR2. Errors
/// are never silenced.
const STEPS: [LevelFilter; 5] = [
    LevelFilter::ERROR,
    LevelFilter::WARN,
    LevelFilter::INFO,
    LevelFilter::DEBUG,
    LevelFilter::TRACE,
];

/// Whether text lines may carry ANSI colour: stderr is a terminal and
/// `NO_COLOR` (<https://no-color.org>) is unset or empty.
pub fn colour_allowed(stderr_is_terminal: bool, no_color: Option<&str>) -> bool {
    stderr_is_terminal && no_color.is_none_or(str::is_empty)
}

/// The syslog priority of a level, as sd-daemon(3) prefixes a line.
pub fn syslog_priority(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        Level::DEBUG | Level::TRACE => 7,
    }
}

/// RUST_LOG's directives and the level border's crates run at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LevelPlan {
    /// RUST_LOG as given (`info` when unset or invalid).
    base: String,
    /// The level of border's own crates.
    own: LevelFilter,
}

impl LevelPlan {
    /// Starts from `rust_log`: border's crates at its bare level (the last
    /// directive without a target; `info` when it has none).
    pub fn new(rust_log: Option<&str>) -> LevelPlan {
        let base = match rust_log {
            Some(s) if EnvFilter::try_new(s).is_ok() && !s.trim().is_empty() => s.to_string(),
            _ => "info".to_string(),
        };
        let own = base
            .split(',')
            .filter_map(|d| LevelFilter::from_str(d.trim()).ok())
            .next_back()
            .unwrap_or(LevelFilter::INFO);
        LevelPlan { base, own }
    }

    /// The level border's own crates run at.
    pub fn own_level(&self) -> LevelFilter {
        self.own
    }

    /// One step more verbose (`more`) or less; false when already at the
    /// end. From `off` either step goes to `error`.
    pub fn step(&mut self, more: bool) -> bool {
        let next = match STEPS.iter().position(|l| *l == self.own) {
            Some(at) if more => STEPS[(at + 1).min(STEPS.len() - 1)],
            Some(at) => STEPS[at.saturating_sub(1)],
            None => LevelFilter::ERROR,
        };
        let moved = next != self.own;
        self.own = next;
        moved
    }

    /// Sets border's crates to `level`; false when they already were.
    pub fn set(&mut self, level: LevelFilter) -> bool {
        let moved = level != self.own;
        self.own = level;
        moved
    }

    /// The filter directives: RUST_LOG's, except those naming one of
    /// border's crates as a whole, then border's crates at their level.
    /// Directives for a module inside them (`mgmt::health=trace`) are more
    /// specific and keep their own level.
    pub fn directives(&self) -> String {
        let mut out: Vec<String> = self
            .base
            .split(',')
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .filter(|d| {
                let target = d.split(['=', '[']).next().unwrap_or("");
                !d.contains('=') || !OWN_TARGETS.contains(&target)
            })
            .map(str::to_string)
            .collect();
        out.extend(OWN_TARGETS.iter().map(|t| format!("{t}={}", self.own)));
        out.join(",")
    }

    fn filter(&self) -> EnvFilter {
        EnvFilter::try_new(self.directives()).unwrap_or_else(|_| EnvFilter::new("info"))
    }
}

/// The journald form: a `<N>` priority, then the text line without its
/// timestamp and level (the journal has both).
struct SyslogPrefixed<F>(F);

impl<S, N, F> FormatEvent<S, N> for SyslogPrefixed<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        write!(writer, "<{}>", syslog_priority(event.metadata().level()))?;
        self.0.format_event(ctx, writer, event)
    }
}

/// Logs to stderr in `format`, at RUST_LOG's level (`info` by default),
/// and lets SIGUSR1/SIGUSR2 move the level of border's crates while the
/// process runs. Call once, early in `main`.
pub fn init_logging(format: LogFormat) {
    let plan = LevelPlan::new(std::env::var("RUST_LOG").ok().as_deref());
    let (filter, handle) = reload::Layer::new(plan.filter());
    let registry = tracing_subscriber::registry().with(filter);
    let colour = colour_allowed(
        std::io::stderr().is_terminal(),
        std::env::var("NO_COLOR").ok().as_deref(),
    );
    match format {
        LogFormat::Text => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_target(false)
                    .with_ansi(colour),
            )
            .init(),
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_writer(std::io::stderr)
                    .with_ansi(false),
            )
            .init(),
        LogFormat::Journald => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_ansi(false)
                    .event_format(SyslogPrefixed(
                        format::format()
                            .without_time()
                            .with_level(false)
                            .with_target(false)
                            .with_ansi(false),
                    )),
            )
            .init(),
    }
    if let Err(e) = watch_level_signals(plan, handle) {
        tracing::warn!("SIGUSR1/SIGUSR2 will not change the log level: {e}");
    }
}

/// A thread that steps the level on SIGUSR1 (more) and SIGUSR2 (less), and
/// sets a named level on the real-time signals of [`conf::os::log_level`]
/// (what border-mgmt's SetLogLevel sends).
fn watch_level_signals(
    mut plan: LevelPlan,
    handle: reload::Handle<EnvFilter, Registry>,
) -> std::io::Result<()> {
    use signal_hook::consts::{SIGUSR1, SIGUSR2};
    let mut wanted = vec![SIGUSR1, SIGUSR2];
    wanted.extend(conf::os::log_level::signals());
    let mut signals = signal_hook::iterator::Signals::new(wanted)?;
    conf::os::log_level::mark_handled();
    std::thread::Builder::new()
        .name("log-level".into())
        .spawn(move || {
            for sig in signals.forever() {
                let name = if sig == SIGUSR1 {
                    plan.step(true);
                    "SIGUSR1"
                } else if sig == SIGUSR2 {
                    plan.step(false);
                    "SIGUSR2"
                } else if let Some(level) = conf::os::log_level::level_of_signal(sig)
                    .and_then(|l| LevelFilter::from_str(l).ok())
                {
                    plan.set(level);
                    "SetLogLevel"
                } else {
                    continue;
                };
                match handle.reload(plan.filter()) {
                    // At warn so that it shows at every level but error.
                    Ok(()) => tracing::warn!(
                        target: "border",
                        "{name}: border's log level is now {}",
                        plan.own_level()
                    ),
                    Err(e) => tracing::error!(target: "border", "{name}: log level unchanged: {e}"),
                }
            }
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_and_never_with_no_color() {
        assert!(colour_allowed(true, None));
        assert!(colour_allowed(true, Some("")));
        assert!(!colour_allowed(true, Some("1")));
        assert!(!colour_allowed(false, None));
        assert!(!colour_allowed(false, Some("")));
    }

    #[test]
    fn priorities_are_syslogs() {
        assert_eq!(syslog_priority(&Level::ERROR), 3);
        assert_eq!(syslog_priority(&Level::WARN), 4);
        assert_eq!(syslog_priority(&Level::INFO), 6);
        assert_eq!(syslog_priority(&Level::DEBUG), 7);
        assert_eq!(syslog_priority(&Level::TRACE), 7);
    }

    #[test]
    fn the_plan_starts_at_rust_logs_bare_level() {
        assert_eq!(LevelPlan::new(None).own_level(), LevelFilter::INFO);
        assert_eq!(LevelPlan::new(Some("")).own_level(), LevelFilter::INFO);
        assert_eq!(
            LevelPlan::new(Some("warn,h2=trace")).own_level(),
            LevelFilter::WARN
        );
        assert_eq!(
            LevelPlan::new(Some("h2=trace")).own_level(),
            LevelFilter::INFO
        );
        // An invalid RUST_LOG is ignored, as EnvFilter's default would.
        assert_eq!(LevelPlan::new(Some("=[")).own_level(), LevelFilter::INFO);
    }

    #[test]
    fn steps_stop_at_error_and_trace() {
        let mut p = LevelPlan::new(Some("info"));
        assert!(p.step(true));
        assert_eq!(p.own_level(), LevelFilter::DEBUG);
        assert!(p.step(true));
        assert!(!p.step(true));
        assert_eq!(p.own_level(), LevelFilter::TRACE);
        for _ in 0..3 {
            p.step(false);
        }
        assert_eq!(p.own_level(), LevelFilter::WARN);
        assert!(p.step(false));
        assert!(!p.step(false));
        assert_eq!(p.own_level(), LevelFilter::ERROR);
        let mut off = LevelPlan::new(Some("off"));
        assert_eq!(off.own_level(), LevelFilter::OFF);
        assert!(off.step(false));
        assert_eq!(off.own_level(), LevelFilter::ERROR);
    }

    #[test]
    fn a_named_level_is_set_whatever_the_level_before() {
        let mut p = LevelPlan::new(Some("trace"));
        assert!(p.set(LevelFilter::WARN));
        assert!(!p.set(LevelFilter::WARN));
        assert_eq!(p.own_level(), LevelFilter::WARN);
        for l in conf::os::log_level::LEVELS {
            assert!(LevelFilter::from_str(l).is_ok(), "{l}");
        }
    }

    #[test]
    fn directives_keep_libraries_and_modules_and_replace_whole_crates() {
        let mut p = LevelPlan::new(Some("info,h2=warn,mgmt=trace,mgmt::health=trace"));
        p.step(true);
        let d = p.directives();
        assert!(d.starts_with("info,h2=warn,mgmt::health=trace,"), "{d}");
        assert!(!d.contains("mgmt=trace"), "{d}");
        for t in OWN_TARGETS {
            assert!(d.contains(&format!("{t}=debug")), "{d}");
        }
        // The result is a filter EnvFilter accepts.
        assert!(EnvFilter::try_new(&d).is_ok(), "{d}");
    }
}
