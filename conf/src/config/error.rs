//! Errors with file, line, column and key path.

use std::ops::Range;
use std::path::PathBuf;

use toml::de::{DeTable, DeValue};
use toml::Spanned;

/// Why a configuration was refused.
///
/// `Display` gives the one-line form operators see, e.g.
/// `border.toml:12:21: vip[0].maglev_table_size: 65536 is not prime (expected a prime >= 100 x backends, e.g. 65537)`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: cannot read config: {source}", path.display())]
    Io {
        /// The path as given.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The text is not a valid configuration: TOML syntax, an unknown key, a
    /// wrong type, a missing key or a broken rule.
    #[error("{origin}:{line}:{column}: {}{message}", key_prefix(.key))]
    Invalid {
        /// Where the text came from (a file name, or a label such as `<api>`).
        origin: String,
        /// 1-based line.
        line: usize,
        /// 1-based column, counted in characters.
        column: usize,
        /// Key path such as `vip[0].backend[2].port`; empty when the error
        /// is not about one key (e.g. some syntax errors).
        key: String,
        /// What is wrong and what was expected.
        message: String,
    },
}

impl ConfigError {
    /// Line and column (1-based) for [`ConfigError::Invalid`].
    pub fn position(&self) -> Option<(usize, usize)> {
        match self {
            ConfigError::Invalid { line, column, .. } => Some((*line, *column)),
            ConfigError::Io { .. } => None,
        }
    }

    /// The key path for [`ConfigError::Invalid`].
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid { key, .. } => Some(key),
            ConfigError::Io { .. } => None,
        }
    }
}

fn key_prefix(key: &str) -> String {
    if key.is_empty() {
        String::new()
    } else {
        format!("{key}: ")
    }
}

/// One semantic finding, before it is given a line and column.
#[derive(Debug)]
pub(super) struct Diag {
    pub at: usize,
    pub key: String,
    pub message: String,
}

impl Diag {
    pub(super) fn into_error(self, text: &str, origin: &str) -> ConfigError {
        let (line, column) = line_col(text, self.at);
        ConfigError::Invalid {
            origin: origin.to_owned(),
            line,
            column,
            key: self.key,
            message: self.message,
        }
    }
}

/// 1-based line and column (in characters) of byte `offset`; never panics.
pub(super) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while offset > 0 && !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = text.get(..offset).unwrap_or("");
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before.get(line_start..).unwrap_or("").chars().count() + 1;
    (line, column)
}

/// Key path of every key and array element in the parsed document, by span,
/// so errors raised by serde (which only carry a span) can name their key.
pub(super) struct SpanIndex {
    root: Range<usize>,
    entries: Vec<Entry>,
}

struct Entry {
    key: Option<Range<usize>>,
    value: Range<usize>,
    /// TOML type of the value ("string", "datetime", ...).
    kind: &'static str,
    depth: usize,
    path: String,
}

impl SpanIndex {
    pub(super) fn build(root: &Spanned<DeTable<'_>>) -> SpanIndex {
        let mut entries = Vec::new();
        walk_table(root.get_ref(), "", 0, &mut entries);
        SpanIndex {
            root: root.span(),
            entries,
        }
    }

    /// The key path an error span belongs to ("" for the document root).
    fn path_of(&self, span: &Range<usize>) -> String {
        if *span == self.root {
            return String::new();
        }
        if let Some(e) = self.entries.iter().find(|e| e.key.as_ref() == Some(span)) {
            return e.path.clone();
        }
        self.entries
            .iter()
            .filter(|e| e.value.start <= span.start && span.end <= e.value.end)
            .min_by_key(|e| (e.value.end - e.value.start, usize::MAX - e.depth))
            .map(|e| e.path.clone())
            .unwrap_or_default()
    }

    /// Turns a toml/serde error into a located [`ConfigError`].
    pub(super) fn error(&self, text: &str, origin: &str, err: &toml::de::Error) -> ConfigError {
        let span = err.span().unwrap_or(0..0);
        let mut key = self.path_of(&span);
        let (field, mut message) = translate(err.message());
        // serde sees a TOML date-time as a map; say what the user wrote.
        if message.ends_with("found a table")
            && self
                .entries
                .iter()
                .any(|e| e.value == span && e.kind == "datetime")
        {
            message = message.replace("found a table", "found a date-time");
        }
        if key.is_empty() && span != self.root {
            key = self.key_from_text(text, &span);
        }
        if let Some(field) = field {
            key = join(&key, &field);
        }
        let message = if message.starts_with("expected an array")
            && (key == "port" || key == "vip" || key.ends_with(".backend"))
        {
            let name = key.rsplit(['.', ']']).next().unwrap_or("");
            let table = if name == "backend" {
                "vip.backend"
            } else {
                name
            };
            message.replacen(
                "expected an array",
                &format!("expected an array of tables ([[{table}]])"),
                1,
            )
        } else {
            message
        };
        Diag {
            at: span.start,
            key,
            message,
        }
        .into_error(text, origin)
    }
}

impl SpanIndex {
    /// Best-effort key path for a span the parsed tree does not cover (a
    /// duplicate key, or a syntax error): the enclosing `[table]` header's
    /// path plus the key text at the span.
    fn key_from_text(&self, text: &str, span: &Range<usize>) -> String {
        let start = span.start.min(text.len());
        let Some(before) = text.get(..start) else {
            return String::new();
        };
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let line = text.get(line_start..).unwrap_or("");
        let line = line.split('\n').next().unwrap_or("").trim();
        if line.starts_with('[') {
            // The span is inside a table header: name the header.
            return line
                .trim_start_matches('[')
                .split(']')
                .next()
                .unwrap_or("")
                .trim()
                .to_owned();
        }
        let word = text
            .get(span.clone())
            .filter(|w| !w.is_empty() && !w.contains(['\n', '=', '[', '{']))
            .unwrap_or("")
            .trim();
        // The last header line before the span names the enclosing table.
        let mut table = String::new();
        let mut offset = 0;
        for l in text.get(..line_start).unwrap_or("").split_inclusive('\n') {
            let trimmed = l.trim_start();
            if trimmed.starts_with('[') {
                let at = offset + (l.len() - trimmed.len());
                table = self
                    .entries
                    .iter()
                    .filter(|e| e.value.start == at)
                    .max_by_key(|e| e.depth)
                    .map(|e| e.path.clone())
                    .unwrap_or_default();
            }
            offset += l.len();
        }
        match (table.is_empty(), word.is_empty()) {
            (_, true) => table,
            (true, false) => join("", word),
            (false, false) => join(&table, word),
        }
    }
}

fn walk_table(table: &DeTable<'_>, prefix: &str, depth: usize, out: &mut Vec<Entry>) {
    for (k, v) in table.iter() {
        let path = join(prefix, k.get_ref());
        out.push(Entry {
            key: Some(k.span()),
            value: v.span(),
            kind: v.get_ref().type_str(),
            depth: depth + 1,
            path: path.clone(),
        });
        walk_value(v, &path, depth + 1, out);
    }
}

fn walk_value(v: &Spanned<DeValue<'_>>, path: &str, depth: usize, out: &mut Vec<Entry>) {
    match v.get_ref() {
        DeValue::Table(t) => walk_table(t, path, depth, out),
        DeValue::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let p = format!("{path}[{i}]");
                out.push(Entry {
                    key: None,
                    value: item.span(),
                    kind: item.get_ref().type_str(),
                    depth: depth + 1,
                    path: p.clone(),
                });
                walk_value(item, &p, depth + 1, out);
            }
        }
        _ => {}
    }
}

/// Appends a key to a path, quoting it when it is not a bare TOML key.
pub(super) fn join(prefix: &str, key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    let key = if bare {
        key.to_owned()
    } else {
        format!("{key:?}")
    };
    if prefix.is_empty() {
        key
    } else {
        format!("{prefix}.{key}")
    }
}

/// Rewrites serde/toml messages into "what is wrong (expected ...)" form.
/// Returns the missing field name for "missing field" errors.
fn translate(msg: &str) -> (Option<String>, String) {
    let msg = msg.trim().replace('\n', "; ");
    if msg == "duplicate key" {
        return (
            None,
            "is defined twice (each key and table may appear only once)".to_owned(),
        );
    }
    if let Some(rest) = msg.strip_prefix("missing field `") {
        let field = rest.split('`').next().unwrap_or("").to_owned();
        return (Some(field), "missing required key".to_owned());
    }
    if let Some(rest) = msg.strip_prefix("unknown field `") {
        let expected = rest.split_once("`, ").map_or("", |(_, e)| e);
        let expected = if expected == "there are no fields" {
            "this table takes no keys".to_owned()
        } else {
            expected.to_owned()
        };
        return (None, format!("unknown key ({expected})"));
    }
    if let Some(rest) = msg.strip_prefix("invalid type: ") {
        if let Some((found, expected)) = rest.rsplit_once(", expected ") {
            return (
                None,
                format!("expected {}, found {}", nice(expected), found_text(found)),
            );
        }
    }
    if let Some(rest) = msg.strip_prefix("invalid value: ") {
        if let Some((found, expected)) = rest.rsplit_once(", expected ") {
            let found = found
                .strip_prefix("integer `")
                .and_then(|f| f.strip_suffix('`'))
                .map_or_else(|| found_text(found), str::to_owned);
            return (
                None,
                format!("{found} is out of range (expected {})", nice(expected)),
            );
        }
    }
    (None, msg)
}

fn nice(expected: &str) -> String {
    match expected {
        "u8" => "an integer 0..=255".to_owned(),
        "u16" => "an integer 0..=65535".to_owned(),
        "u32" => "an integer 0..=4294967295".to_owned(),
        "u64" => "a non-negative integer".to_owned(),
        "a boolean" => "true or false".to_owned(),
        "a sequence" => "an array".to_owned(),
        other => other.to_owned(),
    }
}

fn found_text(found: &str) -> String {
    match found {
        "map" => "a table".to_owned(),
        "sequence" => "an array".to_owned(),
        other => other.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_is_total() {
        let t = "ab\ncdé\nf";
        assert_eq!(line_col(t, 0), (1, 1));
        assert_eq!(line_col(t, 3), (2, 1));
        assert_eq!(line_col(t, 7), (2, 4)); // after the two-byte é
        assert_eq!(line_col(t, 6), (2, 3)); // inside é: clamps to its start
        assert_eq!(line_col(t, 1000), (3, 2));
        assert_eq!(line_col("", 5), (1, 1));
    }

    #[test]
    fn join_quotes() {
        assert_eq!(join("", "a"), "a");
        assert_eq!(join("a", "b-c_1"), "a.b-c_1");
        assert_eq!(join("a", "b c"), "a.\"b c\"");
        assert_eq!(join("a", ""), "a.\"\"");
    }
}
