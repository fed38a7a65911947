//! Validating the next version of a config text without parsing all of it.
//!
//! ApplyConfig always carries the whole config. When an operator changes one
//! backend of a config with hundreds of VIPs, parsing 2 MB of TOML again
//! (~120 ms) would dwarf the publish (~2 ms). [`ConfigText`] keeps the last
//! validated text with its config and where each `[[vip]]` entry lies in it;
//! [`ConfigText::reparse`] finds the bytes that changed and, when they lie
//! after the first VIP entry's header line, parses and validates only the
//! entries they touch (the region from the last entry header before the
//! change to the end of the entry where it ends: one entry for a weight,
//! the last entry and the new ones for VIPs appended) and reuses the rest.
//!
//! Why that equals a full parse: the text before the region is
//! byte-identical, so the TOML parser reaches the region's first `[[vip]]`
//! header in the same state (top level, start of a line). The region must
//! parse on its own into `[[vip]]` tables and nothing else, which rules out
//! an edit that opens a string or array running past its end, adds another
//! table, or defines keys outside the VIPs. It must end at a line break
//! before the next entry, whose header then starts a line as before. After
//! the first `[[vip]]` header the text holds only VIP headers (checked when
//! the entry ranges are taken), so nothing after the region can add to its
//! tables. VIPs are validated one by one and then against each other (names,
//! listeners), as the full validation does. Whatever the fast path cannot
//! vouch for, including every invalid text, goes through the full parse, so
//! errors are exactly those of [`Config::from_toml_str`].

use std::ops::Range;
use std::sync::Arc;

use serde::Deserialize;

use super::raw::RawVipEntry;
use super::validate::{clashes, lone_vip, rings_fit};
use super::{Config, ConfigError};

/// A validated config with the text it came from (paths as written).
#[derive(Debug, Clone)]
pub struct ConfigText {
    text: Arc<str>,
    config: Arc<Config>,
    /// Byte range of each `[[vip]]` entry, from its header line to the next
    /// one (or the end); empty when the layout is not one the fast path can
    /// vouch for.
    vip_entries: Vec<Range<usize>>,
    /// The VIP entries that were parsed again while everything else was
    /// reused (indices in `config.vips`).
    reparsed: Option<Range<usize>>,
}

impl ConfigText {
    /// Parses and validates `text` in full, as [`Config::from_toml_str`].
    pub fn parse(text: &str, origin: &str) -> Result<ConfigText, ConfigError> {
        let config = Config::from_toml_str(text, origin)?;
        let vip_entries = vip_entries(text, config.vips.len());
        Ok(ConfigText {
            text: text.into(),
            config: Arc::new(config),
            vip_entries,
            reparsed: None,
        })
    }

    /// Parses and validates `text`, a later version of this one: the same
    /// result as [`ConfigText::parse`], faster when the change lies among
    /// the VIP entries.
    pub fn reparse(&self, text: &str, origin: &str) -> Result<ConfigText, ConfigError> {
        match self.entries_changed(text) {
            Some(next) => Ok(next),
            None => ConfigText::parse(text, origin),
        }
    }

    /// The validated config.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The validated config, shared (a running config can hold it without
    /// a copy).
    pub fn shared_config(&self) -> Arc<Config> {
        self.config.clone()
    }

    /// The text, shared.
    pub fn shared_text(&self) -> Arc<str> {
        self.text.clone()
    }

    /// The text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The VIPs (indices in [`Config::vips`]) whose entries
    /// [`ConfigText::reparse`] parsed again while it reused the rest; `None`
    /// after a full parse or when the text is unchanged.
    pub fn reparsed(&self) -> Option<Range<usize>> {
        self.reparsed.clone()
    }

    fn entries_changed(&self, text: &str) -> Option<ConfigText> {
        let (old, new) = (self.text.as_bytes(), text.as_bytes());
        let prefix = common_prefix(old, new);
        if prefix == old.len() && prefix == new.len() {
            return Some(ConfigText {
                reparsed: None,
                ..self.clone()
            });
        }
        let suffix = common_suffix(old, new, old.len().min(new.len()) - prefix);
        let changed_until = old.len() - suffix;
        let entries = &self.vip_entries;
        // From the last entry whose header line is unchanged, to the one
        // where the change ends.
        let first = entries
            .partition_point(|e| line_end(old, e.start) < prefix)
            .checked_sub(1)?;
        let last = first
            + entries
                .get(first..)?
                .partition_point(|e| e.end < changed_until);
        let start = entries.get(first)?.start;
        let old_end = entries.get(last)?.end;
        let new_end = (old_end + new.len()).checked_sub(old.len())?;
        let region = text.get(start..new_end)?;
        if last + 1 < entries.len() && !region.ends_with('\n') {
            return None;
        }
        let (table, syntax) = toml::de::DeTable::parse_recoverable(region);
        if !syntax.is_empty() {
            return None;
        }
        let parsed = RawVipEntry::deserialize(toml::de::Deserializer::from(table)).ok()?;
        let raws = parsed.vip.get_ref();
        // The region parsed, so the lexer can be trusted with it: one entry
        // header per table, the first on the region's first line.
        let offsets = vip_headers(region.as_bytes())?;
        if offsets.len() != raws.len() || offsets.first() != Some(&0) {
            return None;
        }
        let vips = raws
            .iter()
            .enumerate()
            .map(|(i, raw)| lone_vip(&self.config, raw, first + i))
            .collect::<Option<Vec<_>>>()?;
        let mut config = Config::clone(&self.config);
        config.vips.splice(first..=last, vips);
        if !clashes(&config.vips).is_empty() || !rings_fit(&config) {
            return None;
        }
        let parsed_ends = offsets.iter().skip(1).copied().chain([region.len()]);
        let vip_entries = entries[..first]
            .iter()
            .cloned()
            .chain(
                offsets
                    .iter()
                    .zip(parsed_ends)
                    .map(|(&s, e)| start + s..start + e),
            )
            .chain(
                entries[last + 1..]
                    .iter()
                    .map(|e| e.start + new.len() - old.len()..e.end + new.len() - old.len()),
            )
            .collect();
        // What the next reparse relies on (tests run with debug assertions).
        debug_assert_eq!(vip_entries, self::vip_entries(text, config.vips.len()));
        Some(ConfigText {
            text: text.into(),
            config: Arc::new(config),
            vip_entries,
            reparsed: Some(first..first + raws.len()),
        })
    }
}

/// Bytes compared at once (as slices, so with memcmp) before the byte that
/// differs is looked for: a 2 MB config is compared in well under a millisecond.
const CHUNK: usize = 256;

fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let chunks = a
        .chunks(CHUNK)
        .zip(b.chunks(CHUNK))
        .take_while(|(x, y)| x == y)
        .count();
    // Equal last chunks may be shorter than CHUNK.
    let done = (chunks * CHUNK).min(a.len()).min(b.len());
    let (a, b) = (&a[done..], &b[done..]);
    done + a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Length of the common tail of `a` and `b`, at most `max` (which is at most
/// either length).
fn common_suffix(a: &[u8], b: &[u8], max: usize) -> usize {
    let (a, b) = (&a[a.len() - max..], &b[b.len() - max..]);
    let chunks = a
        .rchunks(CHUNK)
        .zip(b.rchunks(CHUNK))
        .take_while(|(x, y)| x == y)
        .count();
    let done = (chunks * CHUNK).min(max);
    let (a, b) = (&a[..max - done], &b[..max - done]);
    done + a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take_while(|(x, y)| x == y)
        .count()
}

/// Index of the line break ending the line that holds `at` (or the length).
fn line_end(text: &[u8], at: usize) -> usize {
    text.get(at..)
        .and_then(|rest| rest.iter().position(|&c| c == b'\n'))
        .map_or(text.len(), |n| at + n)
}

/// What a table header line names.
#[derive(Debug, PartialEq)]
enum Header {
    /// `[[vip]]`: a new VIP entry.
    VipEntry,
    /// `[vip.…]` or `[[vip.…]]`: part of the current VIP entry.
    InVip,
    /// Anything else, including headers with quoted keys.
    Other,
}

fn header_kind(line: &str) -> Header {
    let line = line.split('#').next().unwrap_or("").trim();
    if line.contains(['"', '\'']) {
        return Header::Other;
    }
    let (inner, array) = match line.strip_prefix("[[").and_then(|l| l.strip_suffix("]]")) {
        Some(inner) => (inner, true),
        None => match line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            Some(inner) => (inner, false),
            None => return Header::Other,
        },
    };
    let mut parts = inner.split('.').map(str::trim);
    match (parts.next(), parts.next()) {
        (Some("vip"), None) if array => Header::VipEntry,
        (Some("vip"), Some(_)) => Header::InVip,
        _ => Header::Other,
    }
}

/// The byte ranges of the `[[vip]]` entries of `text`, a text that parsed
/// into `n_vips` VIPs. Empty unless every header after the first `[[vip]]`
/// belongs to a VIP and exactly `n_vips` entry headers were found, so an
/// unusual layout only costs the fast path.
fn vip_entries(text: &str, n_vips: usize) -> Vec<Range<usize>> {
    let starts = match vip_headers(text.as_bytes()) {
        Some(starts) if starts.len() == n_vips && n_vips > 0 => starts,
        _ => return Vec::new(),
    };
    let ends = starts.iter().skip(1).copied().chain([text.len()]);
    starts.iter().zip(ends).map(|(&s, e)| s..e).collect()
}

/// Line starts of the `[[vip]]` headers, found with a TOML lexer that knows
/// strings, comments and brackets well enough for text that parsed; `None`
/// when a header that is not part of a VIP follows the first one.
fn vip_headers(b: &[u8]) -> Option<Vec<usize>> {
    let mut starts = Vec::new();
    let (mut i, mut depth, mut line_start) = (0, 0usize, Some(0));
    while let Some(&c) = b.get(i) {
        if let Some(line) = line_start {
            if c == b' ' || c == b'\t' {
                i += 1;
                continue;
            }
            line_start = None;
            if c == b'[' && depth == 0 {
                let end = line_end(b, i);
                let header = std::str::from_utf8(b.get(i..end)?).ok()?;
                match header_kind(header) {
                    Header::VipEntry => starts.push(line),
                    Header::InVip => {}
                    Header::Other if starts.is_empty() => {}
                    Header::Other => return None,
                }
                i = end;
                continue;
            }
        }
        i = match c {
            b'\n' => {
                line_start = Some(i + 1);
                i + 1
            }
            b'#' => line_end(b, i),
            b'[' | b'{' => {
                depth += 1;
                i + 1
            }
            b']' | b'}' => {
                depth = depth.saturating_sub(1);
                i + 1
            }
            b'"' | b'\'' => string_end(b, i),
            _ => i + 1,
        };
    }
    Some(starts)
}

/// The index after the string that starts at `at` (basic or literal, one
/// line or multi-line).
fn string_end(b: &[u8], at: usize) -> usize {
    let quote = b[at];
    let escapes = quote == b'"';
    let triple = [quote; 3];
    if b.get(at..at + 3) == Some(&triple[..]) {
        let mut i = at + 3;
        while i < b.len() {
            if escapes && b[i] == b'\\' {
                i += 2;
            } else if b.get(i..i + 3) == Some(&triple[..]) {
                // Up to two more quotes right before the delimiter's end are
                // content: `""""` closes after the fourth.
                i += 3;
                let mut extra = 0;
                while extra < 2 && b.get(i) == Some(&quote) {
                    i += 1;
                    extra += 1;
                }
                return i;
            } else {
                i += 1;
            }
        }
        return b.len();
    }
    let mut i = at + 1;
    while let Some(&c) = b.get(i) {
        match c {
            b'\\' if escapes => i += 2,
            b'\n' => return i,
            c if c == quote => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_ends_are_found_across_chunks() {
        for (a, b) in [(300, 300), (300, 400), (512, 600), (0, 5), (255, 257)] {
            let x: Vec<u8> = (0..a).map(|i| (i % 251) as u8).collect();
            let y: Vec<u8> = (0..b).map(|i| (i % 251) as u8).collect();
            assert_eq!(common_prefix(&x, &y), a.min(b));
            let short = &x[a - a.min(b)..];
            for cut in [0, 1, 255, 256, 257] {
                let max = short.len().saturating_sub(cut);
                assert_eq!(common_suffix(&x, short, max), max);
            }
        }
        let mut x = vec![7u8; 1000];
        let y = x.clone();
        x[600] = 8;
        assert_eq!(common_prefix(&x, &y), 600);
        assert_eq!(common_suffix(&x, &y, 1000), 399);
        assert_eq!(common_suffix(&x, &y, 300), 300);
    }

    #[test]
    fn headers_are_classified() {
        assert_eq!(header_kind("[[vip]]"), Header::VipEntry);
        assert_eq!(header_kind("[[ vip ]]  # the web VIP"), Header::VipEntry);
        assert_eq!(header_kind("[[vip.backend]]"), Header::InVip);
        assert_eq!(header_kind("[vip.health]"), Header::InVip);
        assert_eq!(header_kind("[vip]"), Header::Other);
        assert_eq!(header_kind("[[\"vip\"]]"), Header::Other);
        assert_eq!(header_kind("[mgmt]"), Header::Other);
        assert_eq!(header_kind("[[vipx]]"), Header::Other);
    }

    #[test]
    fn headers_inside_strings_and_arrays_are_not_headers() {
        let text = "a = \"\"\"\n[[vip]]\n\"\"\"\nb = '''\n[[vip]]'''\nc = [\n[1],\n]\n\
                    d = \"[[vip]]\" # [[vip]]\ne = \"\"\"x\"\"\"\"\"\n[[vip]]\nf = 'it''s'\n\
                    [vip.health]\n[[vip]]\n";
        let starts = vip_headers(text.as_bytes()).unwrap();
        let lines: Vec<&str> = starts
            .iter()
            .map(|&s| &text[s..line_end(text.as_bytes(), s)])
            .collect();
        assert_eq!(lines, ["[[vip]]", "[[vip]]"]);
        assert_eq!(starts[0], text.find("\n[[vip]]\nf").unwrap() + 1);
    }

    #[test]
    fn another_table_after_the_vips_disables_the_fast_path() {
        assert_eq!(vip_headers(b"[[vip]]\nname = \"a\"\n[mgmt]\n"), None);
        assert_eq!(
            vip_headers(b"[mgmt]\n[[vip]]\n[[vip.backend]]\n"),
            Some(vec![7])
        );
    }
}
