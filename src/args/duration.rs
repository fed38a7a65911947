//! Durations on the command line: `5s`, `300ms`, `2m`, `1m30s` (the
//! `humantime` syntax), or a bare integer in the flag's own unit, so that
//! `--timeout-ms 500` and `--window 5` mean what they always meant.
//!
//! Each flag names its unit and bounds in its value parser:
//! `value_parser = duration::millis::<100, 600_000>` (a bare number is
//! milliseconds, 100 ms..=600 s) or `duration::secs::<1, 3600>`. The syntax
//! is the config files' (`conf::duration`); this adds the flag's bounds.

use std::time::Duration;

use conf::duration::{show, Unit};

/// A duration between `MIN` and `MAX` milliseconds; a bare number is milliseconds.
pub fn millis<const MIN: u64, const MAX: u64>(s: &str) -> Result<Duration, String> {
    parse(
        s,
        Unit::Millis,
        Duration::from_millis(MIN),
        Duration::from_millis(MAX),
    )
}

/// A duration between `MIN` and `MAX` seconds; a bare number is seconds.
pub fn secs<const MIN: u64, const MAX: u64>(s: &str) -> Result<Duration, String> {
    parse(
        s,
        Unit::Secs,
        Duration::from_secs(MIN),
        Duration::from_secs(MAX),
    )
}

fn parse(s: &str, unit: Unit, min: Duration, max: Duration) -> Result<Duration, String> {
    let d = conf::duration::parse(s, unit)?;
    if d < min || d > max {
        return Err(format!(
            "{} is not between {} and {}",
            show(d),
            show(min),
            show(max)
        ));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_numbers_keep_the_flags_unit() {
        assert_eq!(
            millis::<100, 600_000>("500"),
            Ok(Duration::from_millis(500))
        );
        assert_eq!(secs::<1, 3600>("5"), Ok(Duration::from_secs(5)));
    }

    #[test]
    fn suffixed_durations_are_read_in_any_unit() {
        assert_eq!(millis::<100, 600_000>("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(
            millis::<100, 600_000>("300ms"),
            Ok(Duration::from_millis(300))
        );
        assert_eq!(secs::<1, 3600>("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(secs::<1, 3600>("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(secs::<1, 3600>("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(secs::<1, 3600>(" 10s "), Ok(Duration::from_secs(10)));
    }

    #[test]
    fn out_of_range_and_garbage_are_refused_with_the_bounds() {
        assert_eq!(
            millis::<100, 600_000>("50ms").unwrap_err(),
            "50ms is not between 100ms and 10m"
        );
        assert_eq!(
            secs::<1, 3600>("2h").unwrap_err(),
            "2h is not between 1s and 1h"
        );
        assert_eq!(
            secs::<1, 3600>("0").unwrap_err(),
            "0s is not between 1s and 1h"
        );
        for bad in ["", "5 apples", "-5", "5.5", "s"] {
            let e = secs::<1, 3600>(bad).unwrap_err();
            assert!(e.contains("expected a duration such as 5s"), "{bad:?}: {e}");
        }
        let e = secs::<1, 3600>("99999999999999999999").unwrap_err();
        assert!(e.contains("too long"), "{e}");
    }
}
