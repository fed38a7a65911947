//! Durations as operators write them: `5s`, `300ms`, `2m`, `1m30s` (the
//! `humantime` syntax), or a bare integer in the key's or flag's own unit,
//! so that `interval_ms = 500` and `--window 5` mean what they always meant.
//!
//! One parser for the config files (border's, border-gw's) and the command
//! line. A config key keeps its unit and its integer type: [`Unit::value`]
//! turns a duration into a whole number of that unit, so validation, its
//! ranges and its messages stay in the key's unit whichever way it was
//! written.

use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use toml::Spanned;

/// A bare number's unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Millis,
    Secs,
}

impl Unit {
    /// `n` of this unit.
    pub fn of(self, n: u64) -> Duration {
        match self {
            Unit::Millis => Duration::from_millis(n),
            Unit::Secs => Duration::from_secs(n),
        }
    }

    /// `milliseconds` or `seconds`.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Millis => "milliseconds",
            Unit::Secs => "seconds",
        }
    }

    /// `d` as a whole number of this unit, or why not.
    pub fn value(self, d: Duration) -> Result<u64, String> {
        let (n, exact) = match self {
            Unit::Millis => (d.as_millis(), d.subsec_nanos().is_multiple_of(1_000_000)),
            Unit::Secs => (u128::from(d.as_secs()), d.subsec_nanos() == 0),
        };
        if !exact {
            return Err(format!(
                "{} is not a whole number of {}",
                show(d),
                self.name()
            ));
        }
        u64::try_from(n).map_err(|_| format!("{} is too long", show(d)))
    }
}

/// `s` as a duration: `5s`, `300ms`, `2m`, `1m30s`, or a bare number of `unit`.
pub fn parse(s: &str, unit: Unit) -> Result<Duration, String> {
    let s = s.trim();
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s
            .parse::<u64>()
            .map(|n| unit.of(n))
            .map_err(|_| format!("{s} {} is too long", unit.name()));
    }
    humantime::parse_duration(s).map_err(|e| {
        format!(
            "{s:?} is not a duration, {e} (expected a duration such as 5s, 300ms or 2m, or a number of {})",
            unit.name()
        )
    })
}

/// `1500ms` -> `1s 500ms`, `0s` for zero.
pub fn show(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// A unit as a type, for the serde adapters below.
pub trait UnitOf {
    const UNIT: Unit;
}

/// A bare number is milliseconds.
#[derive(Debug)]
pub struct Ms;
/// A bare number is seconds.
#[derive(Debug)]
pub struct Sec;

impl UnitOf for Ms {
    const UNIT: Unit = Unit::Millis;
}
impl UnitOf for Sec {
    const UNIT: Unit = Unit::Secs;
}

/// An unsigned integer type a duration key is stored in.
pub trait Whole: Sized {
    const NAME: &'static str;
    fn from_u64(n: u64) -> Option<Self>;
}

impl Whole for u32 {
    const NAME: &'static str = "u32";
    fn from_u64(n: u64) -> Option<u32> {
        u32::try_from(n).ok()
    }
}

impl Whole for u64 {
    const NAME: &'static str = "u64";
    fn from_u64(n: u64) -> Option<u64> {
        Some(n)
    }
}

/// One duration value: an integer of `U`, or a string [`parse`] reads.
struct Value<U, T>(T, PhantomData<U>);

impl<'de, U: UnitOf, T: Whole> Deserialize<'de> for Value<U, T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ValueVisitor::<U, T>(PhantomData))
            .map(|n| Value(n, PhantomData))
    }
}

struct ValueVisitor<U, T>(PhantomData<(U, T)>);

impl<U: UnitOf, T: Whole> ValueVisitor<U, T> {
    fn whole<E: de::Error>(n: u64, shown: impl FnOnce() -> String) -> Result<T, E> {
        T::from_u64(n).ok_or_else(|| {
            E::custom(format!(
                "{} is too long (at most {} {} as {})",
                shown(),
                match T::NAME {
                    "u32" => u64::from(u32::MAX),
                    _ => u64::MAX,
                },
                U::UNIT.name(),
                T::NAME
            ))
        })
    }
}

impl<U: UnitOf, T: Whole> Visitor<'_> for ValueVisitor<U, T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "a duration such as \"5s\", \"300ms\" or \"2m\", or a number of {}",
            U::UNIT.name()
        )
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<T, E> {
        Self::whole(n, || n.to_string())
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<T, E> {
        match u64::try_from(n) {
            Ok(n) => self.visit_u64(n),
            Err(_) => Err(E::invalid_value(de::Unexpected::Signed(n), &self)),
        }
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<T, E> {
        let d = parse(s, U::UNIT).map_err(E::custom)?;
        let n = U::UNIT.value(d).map_err(E::custom)?;
        Self::whole(n, || format!("{s:?}"))
    }
}

/// `#[serde(default, deserialize_with = "duration::spanned::<Ms, _>")]` on an
/// `Option<Spanned<u32>>` config key: a number of milliseconds or a
/// duration string, kept in milliseconds with the value's span.
pub fn spanned<'de, U: UnitOf, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Spanned<u32>>, D::Error> {
    let v: Option<Spanned<Value<U, u32>>> = Option::deserialize(d)?;
    Ok(v.map(|s| Spanned::new(s.span(), s.into_inner().0)))
}

/// `#[serde(default, deserialize_with = "duration::plain::<Ms, _, _>")]` on an
/// `Option<u32>` or `Option<u64>` key (border-gw's config).
pub fn plain<'de, U: UnitOf, T: Whole, D: Deserializer<'de>>(d: D) -> Result<Option<T>, D::Error> {
    let v: Option<Value<U, T>> = Option::deserialize(d)?;
    Ok(v.map(|v| v.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_numbers_keep_the_unit_and_strings_take_any() {
        assert_eq!(parse("500", Unit::Millis), Ok(Duration::from_millis(500)));
        assert_eq!(parse("5", Unit::Secs), Ok(Duration::from_secs(5)));
        assert_eq!(parse("5s", Unit::Millis), Ok(Duration::from_secs(5)));
        assert_eq!(parse("1m30s", Unit::Secs), Ok(Duration::from_secs(90)));
        assert_eq!(parse(" 300ms ", Unit::Secs), Ok(Duration::from_millis(300)));
        for bad in ["", "5 apples", "-5", "5.5", "s"] {
            let e = parse(bad, Unit::Secs).unwrap_err();
            assert!(e.contains("expected a duration such as 5s"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn values_are_whole_numbers_of_the_unit() {
        assert_eq!(Unit::Millis.value(Duration::from_secs(2)), Ok(2000));
        assert_eq!(Unit::Secs.value(Duration::from_secs(120)), Ok(120));
        assert_eq!(
            Unit::Secs.value(Duration::from_millis(1500)).unwrap_err(),
            "1s 500ms is not a whole number of seconds"
        );
        assert_eq!(
            Unit::Millis.value(Duration::from_micros(1500)).unwrap_err(),
            "1ms 500us is not a whole number of milliseconds"
        );
    }

    #[derive(Debug, Deserialize)]
    struct Keys {
        #[serde(default, deserialize_with = "spanned::<Ms, _>")]
        ms: Option<Spanned<u32>>,
        #[serde(default, deserialize_with = "spanned::<Sec, _>")]
        s: Option<Spanned<u32>>,
        #[serde(default, deserialize_with = "plain::<Ms, u64, _>")]
        big: Option<u64>,
    }

    fn keys(text: &str) -> Result<Keys, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    #[test]
    fn config_keys_take_integers_and_strings_with_their_spans() {
        let k = keys("ms = \"2s\"\ns = \"2m\"\nbig = 7").unwrap();
        let ms = k.ms.unwrap();
        assert_eq!(*ms.get_ref(), 2000);
        assert_eq!(ms.span(), 5..9);
        assert_eq!(*k.s.unwrap().get_ref(), 120);
        assert_eq!(k.big, Some(7));
        let k = keys("ms = 250\ns = 30").unwrap();
        assert_eq!(*k.ms.unwrap().get_ref(), 250);
        assert_eq!(*k.s.unwrap().get_ref(), 30);
        let k = keys("").unwrap();
        assert!(k.ms.is_none() && k.s.is_none() && k.big.is_none());
    }

    #[test]
    fn bad_config_values_are_refused_at_their_line() {
        let e = keys("ms = 1\ns = \"1500ms\"").unwrap_err();
        assert!(e.contains("line 2, column 5"), "{e}");
        assert!(
            e.contains("1s 500ms is not a whole number of seconds"),
            "{e}"
        );
        let e = keys("ms = \"soon\"").unwrap_err();
        assert!(e.contains("expected a duration such as 5s"), "{e}");
        let e = keys("ms = -5").unwrap_err();
        assert!(e.contains("invalid value: integer `-5`"), "{e}");
        let e = keys("ms = \"60d\"").unwrap_err();
        assert!(e.contains("is too long"), "{e}");
        let e = keys("s = 1.5").unwrap_err();
        assert!(e.contains("a duration such as \"5s\""), "{e}");
    }
}
