//! The one output layer. Every command builds a view (a serde type) once;
//! `--json` prints it with serde_json and the table view is its `Render`.
//! Notes and errors go to stderr, as one line of text or, with `--json`,
//! one JSON object each; every command ends with a status of the one
//! table below (docs/api.md). Writing to a closed pipe (`borderctl events
//! | head`) ends the program quietly.

use std::io::Write;
use std::process::ExitCode;

use serde::ser::{Serialize, SerializeMap, Serializer};

use crate::conn::Failure;
use crate::PROGRAM;

/// Exit status: all is well (and nothing the command shows is a problem).
pub const OK: u8 = 0;
/// Exit status: what the command shows is a problem (status not healthy,
/// a diag finding, a stopped border-dp), or the command failed for a
/// reason of its own (refused by border-mgmt, a file it cannot read).
pub const PROBLEM: u8 = 1;
/// Exit status: a bad command line.
pub const USAGE: u8 = 2;
/// Exit status: the target cannot be reached: border-mgmt (or the gateway,
/// or the appliance behind it) does not answer or TLS with it fails, or
/// border-dp's state region does not exist.
pub const UNREACHABLE: u8 = 3;

/// The readable form of a view.
pub trait Render {
    fn render(&self) -> Text;
}

/// Prints `view` as pretty JSON or as its text.
pub fn print<V: Serialize + Render>(view: &V, json: bool) -> Result<(), Failure> {
    write(view, json, serde_json::to_string_pretty)
}

/// Prints `view` as JSON on one line (a stream of objects) or as its text.
pub fn print_line<V: Serialize + Render>(view: &V, json: bool) -> Result<(), Failure> {
    write(view, json, serde_json::to_string)
}

fn write<V: Serialize + Render>(
    view: &V,
    json: bool,
    to_json: fn(&V) -> serde_json::Result<String>,
) -> Result<(), Failure> {
    if json {
        emit(&to_json(view).map_err(|e| Failure::Other(e.to_string()))?);
    } else {
        view.render().print();
    }
    Ok(())
}

/// What a change published, in words: `{done}: generation N published`,
/// `{done}; the tables are not published yet: why (...)`, or
/// `{unchanged} nothing published (generation N)`.
pub fn published(
    done: &str,
    unchanged: &str,
    pending: &str,
    changed: bool,
    generation: u64,
) -> String {
    if !pending.is_empty() {
        format!(
            "{done}; the tables are not published yet: {pending} (border-mgmt retries by itself)"
        )
    } else if changed {
        format!("{done}: generation {generation} published")
    } else {
        format!("{unchanged} nothing published (generation {generation})")
    }
}

/// Writes `s` and a newline to stdout. SIGPIPE stays ignored (a connection
/// border-mgmt closes must be an error, not a silent death), so a closed
/// stdout shows up here and ends the program with 0.
fn emit(s: &str) {
    let mut o = std::io::stdout().lock();
    if let Err(e) = writeln!(o, "{s}") {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("{PROGRAM}: error: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

/// Lines of text, built up by a view's `render`.
#[derive(Debug, Default)]
pub struct Text {
    lines: Vec<String>,
}

impl Text {
    pub fn line(&mut self, s: impl Into<String>) {
        self.lines.push(s.into());
    }

    pub fn blank(&mut self) {
        self.lines.push(String::new());
    }

    pub fn table(&mut self, t: &Table) {
        self.lines.extend(t.lines());
    }

    fn print(&self) {
        emit(&self.to_string());
    }
}

impl std::fmt::Display for Text {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.lines.join("\n"))
    }
}

/// Columns with a header; each left- or right-aligned.
#[derive(Debug)]
pub struct Table {
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// Columns as (header, right-aligned).
    pub fn new(cols: &[(&str, bool)]) -> Table {
        Table {
            right: cols.iter().map(|c| c.1).collect(),
            rows: vec![cols.iter().map(|c| c.0.to_string()).collect()],
        }
    }

    /// The first column left-aligned (names), the rest right-aligned (numbers).
    pub fn numeric(header: Vec<String>) -> Table {
        let right = (0..header.len()).map(|c| c > 0).collect();
        Table {
            right,
            rows: vec![header],
        }
    }

    pub fn row(&mut self, r: Vec<String>) {
        self.rows.push(r);
    }

    /// Data rows, without the header.
    pub fn len(&self) -> usize {
        self.rows.len() - 1
    }

    fn lines(&self) -> Vec<String> {
        let widths: Vec<usize> = (0..self.right.len())
            .map(|c| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(c))
                    .map(|s| s.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        self.rows
            .iter()
            .map(|r| {
                let cells: Vec<String> = r
                    .iter()
                    .enumerate()
                    .map(|(c, v)| {
                        let w = widths.get(c).copied().unwrap_or(0);
                        if self.right.get(c).copied().unwrap_or(false) {
                            format!("{v:>w$}")
                        } else {
                            format!("{v:<w$}")
                        }
                    })
                    .collect();
                cells.join("  ").trim_end().to_string()
            })
            .collect()
    }
}

/// An ordered JSON object from (name, value) pairs: counters keep the
/// order of the counter table.
#[derive(Debug)]
pub struct Named<T>(pub Vec<(String, T)>);

impl<T: Serialize> Serialize for Named<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// [`OK`] or [`PROBLEM`].
pub fn exit(ok: bool) -> ExitCode {
    ExitCode::from(if ok { OK } else { PROBLEM })
}

/// The exit status of a failure.
pub fn failure_code(e: &Failure) -> u8 {
    match e {
        Failure::Unreachable(_) | Failure::Denied(_) => UNREACHABLE,
        Failure::Other(_) => PROBLEM,
    }
}

/// A failure on stderr, `borderctl: error: ...` or with `--json` one
/// object `{"error": "...", "code": N, "kind": "..."}`; its exit status.
pub fn fail(e: &Failure, json: bool) -> ExitCode {
    let kind = match e {
        Failure::Unreachable(_) => "unreachable",
        Failure::Denied(_) => "denied",
        Failure::Other(_) => "failed",
    };
    eprintln!("{}", error_text(&e.to_string(), kind, json));
    ExitCode::from(failure_code(e))
}

/// A bad command line (clap's error) ends the program: help and version
/// as clap prints them, a usage error as clap prints it or, with `--json`,
/// as one JSON object with code [`USAGE`].
pub fn usage_error(e: clap::Error, json: bool) -> ! {
    use clap::error::ErrorKind;
    if !json || !e.use_stderr() {
        e.exit();
    }
    let msg = if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        "no command given (see `borderctl --help`)".to_string()
    } else {
        let rendered = e.render().to_string();
        let first = rendered.lines().next().unwrap_or_default();
        first.strip_prefix("error: ").unwrap_or(first).to_string()
    };
    eprintln!("{}", error_text(&msg, "usage", true));
    std::process::exit(i32::from(USAGE));
}

/// What an error line says, as text or as a JSON object with the exit
/// status of its `kind`.
fn error_text(msg: &str, kind: &str, json: bool) -> String {
    if !json {
        return format!("{PROGRAM}: error: {msg}");
    }
    let code = match kind {
        "usage" => USAGE,
        "unreachable" | "denied" => UNREACHABLE,
        _ => PROBLEM,
    };
    serde_json::json!({ "error": msg, "code": code, "kind": kind }).to_string()
}

/// A note on stderr (a fallback taken, a stopped border-dp): `borderctl:
/// note: ...`, or with `--json` one object `{"note": "..."}`.
pub fn note(msg: &str, json: bool) {
    if json {
        eprintln!("{}", serde_json::json!({ "note": msg }));
    } else {
        eprintln!("{PROGRAM}: note: {msg}");
    }
}

pub fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.to_string()
}

/// `s` for a count other than one.
pub fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// `1536` -> `1.5 KiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Milliseconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ`; `-` for
/// 0 (never).
pub fn utc(unix_ms: u64) -> String {
    const FORMAT: &[time::format_description::BorrowedFormatItem<'_>] = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    if unix_ms == 0 {
        return "-".into();
    }
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(unix_ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(FORMAT).ok())
        .unwrap_or_else(|| format!("{unix_ms} ms after the epoch"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_formats_the_epoch_and_a_leap_day() {
        assert_eq!(utc(0), "-");
        assert_eq!(utc(1), "1970-01-01T00:00:00.001Z");
        assert_eq!(utc(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(utc(1_735_689_599_999), "2024-12-31T23:59:59.999Z");
        assert_eq!(utc(u64::MAX), format!("{} ms after the epoch", u64::MAX));
    }

    #[test]
    fn bytes_read_as_binary_units() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }

    #[test]
    fn a_table_aligns_its_columns_and_trims_the_line_end() {
        let mut t = Table::new(&[("NAME", false), ("N", true), ("NOTE", false)]);
        t.row(vec!["a".into(), "1".into(), String::new()]);
        t.row(vec!["long name".into(), "12345".into(), "x".into()]);
        let mut text = Text::default();
        text.table(&t);
        assert_eq!(
            text.to_string(),
            "NAME           N  NOTE\n\
             a              1\n\
             long name  12345  x"
        );
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn errors_are_one_line_of_text_or_one_json_object() {
        assert_eq!(
            error_text("border-mgmt is not reachable: x", "unreachable", false),
            "borderctl: error: border-mgmt is not reachable: x"
        );
        let v: serde_json::Value =
            serde_json::from_str(&error_text("a \"quoted\"\nthing", "unreachable", true)).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"error": "a \"quoted\"\nthing", "code": 3, "kind": "unreachable"})
        );
        let v: serde_json::Value = serde_json::from_str(&error_text("x", "usage", true)).unwrap();
        assert_eq!(
            (v["kind"].as_str(), v["code"].as_u64()),
            (Some("usage"), Some(2))
        );
        let v: serde_json::Value = serde_json::from_str(&error_text("x", "failed", true)).unwrap();
        assert_eq!(v["code"], 1);
        assert_eq!(failure_code(&Failure::Denied("x".into())), UNREACHABLE);
        assert_eq!(failure_code(&Failure::Other("x".into())), PROBLEM);
        assert_eq!(failure_code(&Failure::Unreachable("x".into())), UNREACHABLE);
    }

    #[test]
    fn named_keeps_its_order_in_json() {
        let n = Named(vec![("b".to_string(), 1), ("a".to_string(), 2)]);
        assert_eq!(serde_json::to_string(&n).unwrap(), r#"{"b":1,"a":2}"#);
    }
}
