//! `ConfigText::reparse` gives exactly what a full parse gives, and parses
//! only the changed VIP entry when it can.

use conf::{Config, ConfigText};
use proptest::prelude::*;

const EXAMPLE: &str = include_str!("data/border.example.toml");

/// The annotated example plus `n` generated VIPs of three backends each.
fn config_text(n: u32) -> String {
    let mut text = EXAMPLE.to_owned();
    for v in 0..n {
        text.push_str(&format!(
            "\n[[vip]]\nname = \"gen-{v}\"\naddress = \"10.10.0.{}\"\nport = {}\n\
             [vip.health]\nkind = \"tcp\"\n",
            v % 200 + 20,
            8000 + v
        ));
        for b in 1..=3 {
            text.push_str(&format!(
                "[[vip.backend]]\naddress = \"10.20.0.{}\"\nport = 80\nweight = {}\n",
                b + 100,
                v + b
            ));
        }
    }
    text
}

/// `text` with the first occurrence of `from` after `after` replaced.
fn edit(text: &str, after: &str, from: &str, to: &str) -> String {
    let base = text.find(after).expect(after) + after.len();
    let at = base + text[base..].find(from).expect(from);
    format!("{}{}{}", &text[..at], to, &text[at + from.len()..])
}

/// Reparses `next` after `prev` and checks the outcome against a full parse.
fn reparse_checked(prev: &ConfigText, next: &str) -> Result<ConfigText, String> {
    let full = Config::from_toml_str(next, "t.toml");
    let re = prev.reparse(next, "t.toml");
    match (&full, &re) {
        (Ok(f), Ok(r)) => {
            assert_eq!(f, r.config(), "reparse differs from a full parse");
            assert_eq!(r.text(), next);
        }
        (Err(f), Err(r)) => assert_eq!(f.to_string(), r.to_string()),
        _ => panic!("full parse {full:?} but reparse {:?}", re.as_ref().err()),
    }
    re.map_err(|e| e.to_string())
}

#[test]
fn a_changed_weight_parses_only_its_vip() {
    let text = config_text(40);
    let base = ConfigText::parse(&text, "t.toml").unwrap();
    assert_eq!(base.reparsed(), None);
    let next = edit(&text, "name = \"gen-17\"", "weight = 19", "weight = 7");
    let re = reparse_checked(&base, &next).unwrap();
    // The example's own VIP is entry 0.
    assert_eq!(re.reparsed(), Some(18..18 + 1));
    assert_eq!(re.config().vips[18].backends[1].weight, 7);
    // Chained: the next change reparses from the reparsed text.
    let again = edit(&next, "name = \"gen-39\"", "port = 80\n", "port = 81\n");
    let re2 = reparse_checked(&re, &again).unwrap();
    assert_eq!(re2.reparsed(), Some(40..40 + 1));
    assert_eq!(re2.config().vips[40].backends[0].port, 81);
    // And back to an earlier entry, with the offsets of the others shifted.
    let third = edit(&again, "name = \"gen-3\"", "weight = 4", "weight = 40000");
    assert_eq!(
        reparse_checked(&re2, &third).unwrap().reparsed(),
        Some(4..5)
    );
}

#[test]
fn crlf_line_ends_take_the_fast_path_too() {
    let text = config_text(5).replace('\n', "\r\n");
    let base = ConfigText::parse(&text, "t.toml").unwrap();
    let next = edit(&text, "name = \"gen-2\"", "weight = 4", "weight = 8");
    let re = reparse_checked(&base, &next).unwrap();
    assert_eq!(re.reparsed(), Some(3..3 + 1));
    assert_eq!(re.config().vips[3].backends[1].weight, 8);
}

#[test]
fn added_and_removed_backends_and_health_keys_parse_alone() {
    let text = config_text(10);
    let base = ConfigText::parse(&text, "t.toml").unwrap();
    let added = edit(
        &text,
        "name = \"gen-5\"",
        "[[vip.backend]]",
        "[[vip.backend]]\naddress = \"10.20.0.19\"\nport = 80\n[[vip.backend]]",
    );
    let re = reparse_checked(&base, &added).unwrap();
    assert_eq!(re.reparsed(), Some(6..6 + 1));
    assert_eq!(re.config().vips[6].backends.len(), 4);
    let removed = edit(
        &text,
        "name = \"gen-9\"",
        "[[vip.backend]]\naddress = \"10.20.0.103\"\nport = 80\nweight = 12\n",
        "",
    );
    let re = reparse_checked(&base, &removed).unwrap();
    assert_eq!(re.reparsed(), Some(10..10 + 1));
    assert_eq!(re.config().vips[10].backends.len(), 2);
    let health = edit(
        &text,
        "name = \"gen-2\"",
        "kind = \"tcp\"",
        "kind = \"tcp\"\nfall = 5",
    );
    assert_eq!(
        reparse_checked(&base, &health).unwrap().reparsed(),
        Some(3..4)
    );
}

#[test]
fn changes_among_the_vips_parse_the_entries_they_touch() {
    let text = config_text(8);
    let base = ConfigText::parse(&text, "t.toml").unwrap();
    let reparsed = |next: &str| reparse_checked(&base, next).unwrap().reparsed();
    // Two entries, and everything between them.
    let two = edit(&text, "name = \"gen-1\"", "weight = 2", "weight = 9");
    let two = edit(&two, "name = \"gen-3\"", "weight = 4", "weight = 9");
    assert_eq!(reparsed(&two), Some(2..5));
    // A new entry inside an entry, and two appended after the last.
    let new_vip =
        |n: u32| format!("[[vip]]\nname = \"new{n}\"\naddress = \"10.10.0.25{n}\"\nport = 1\n");
    let split = edit(
        &text,
        "name = \"gen-4\"",
        "[[vip.backend]]",
        &format!("{}[[vip.backend]]", new_vip(0)),
    );
    let re = reparse_checked(&base, &split).unwrap();
    assert_eq!(re.reparsed(), Some(5..7));
    assert_eq!(re.config().vips.len(), 10);
    let appended = format!("{text}\n{}\n{}", new_vip(1), new_vip(2));
    let re = reparse_checked(&base, &appended).unwrap();
    assert_eq!(re.reparsed(), Some(8..11));
    // A VIP removed: the texts differ from its name on, so the entry that
    // now holds the next VIP is parsed again.
    let gen5 = text.find("\n[[vip]]\nname = \"gen-5\"").unwrap();
    let gen6 = text.find("\n[[vip]]\nname = \"gen-6\"").unwrap();
    let removed = format!("{}{}", &text[..gen5], &text[gen6..]);
    let re = reparse_checked(&base, &removed).unwrap();
    assert_eq!(re.reparsed(), Some(6..7));
    assert_eq!(re.config().vips.len(), 8);
    // An entry header rewritten: from the entry before it.
    let header = edit(&text, "weight = 4\n", "[[vip]]", "[[vip]] # renamed");
    assert_eq!(reparsed(&header), Some(2..4));
    // And the offsets of every entry stay right for the next change.
    let appended_again = reparse_checked(&base, &appended).unwrap();
    let next = edit(&appended, "name = \"new2\"", "port = 1", "port = 2");
    let re2 = reparse_checked(&appended_again, &next).unwrap();
    assert_eq!(re2.reparsed(), Some(10..11));
    assert_eq!(re2.config().vips[10].port, 2);
}

#[test]
fn changes_outside_the_vips_are_parsed_in_full() {
    let text = config_text(8);
    let base = ConfigText::parse(&text, "t.toml").unwrap();
    let full = |next: &str| reparse_checked(&base, next).map(|c| c.reparsed());
    let same = reparse_checked(&base, &text).unwrap();
    assert_eq!((same.reparsed(), same.config()), (None, base.config()));
    assert_eq!(
        full(&edit(&text, "", "tcp_closing = 10", "tcp_closing = 11")),
        Ok(None)
    );
    let head = edit(&text, "", "[1024, 32767]", "[1024, 32766]");
    assert_eq!(full(&head), Ok(None));
    // The first entry's header line.
    let first = edit(
        &text,
        "",
        "[[vip]]\nname = \"web\"",
        "[[vip]]  \nname = \"web\"",
    );
    assert_eq!(full(&first), Ok(None));
}

#[test]
fn invalid_edits_inside_one_entry_report_the_full_parse_error() {
    let text = config_text(8);
    let base = ConfigText::parse(&text, "t.toml").unwrap();
    let bad = [
        // Breaks a rule of the VIP itself.
        edit(&text, "name = \"gen-3\"", "port = 8003", "port = 0"),
        // Repeats another VIP's name.
        edit(&text, "port = 8002", "gen-3", "gen-1"),
        // Repeats another VIP's address and port.
        edit(
            &text,
            "name = \"gen-3\"",
            "10.10.0.23\"\nport = 8003",
            "10.10.0.21\"\nport = 8001",
        ),
        // A table that is not the VIP's.
        edit(
            &text,
            "name = \"gen-3\"",
            "[vip.health]",
            "[mgmt]\nquorum = 2\n[vip.health]",
        ),
        // An unknown key.
        edit(
            &text,
            "name = \"gen-3\"",
            "port = 8003",
            "port = 8003\nspeed = 1",
        ),
        // A string that swallows the next entries.
        edit(
            &text,
            "name = \"gen-3\"",
            "kind = \"tcp\"",
            "kind = \"\"\"tcp",
        ),
        // An array left open.
        edit(
            &text,
            "name = \"gen-6\"",
            "kind = \"tcp\"",
            "expect_status = [200,",
        ),
        // The line break before the next entry removed.
        edit(&text, "name = \"gen-6\"", "weight = 9\n\n", "weight = 9"),
    ];
    for next in bad {
        let e = reparse_checked(&base, &next).unwrap_err();
        assert!(e.starts_with("t.toml:"), "{e}");
    }
}

#[test]
fn an_unusual_layout_is_always_parsed_in_full() {
    // A table after the VIPs: an entry could be continued from there.
    let timeouts = EXAMPLE.find("[dataplane.timeouts]").unwrap();
    let ports = EXAMPLE.find("[[port]]").unwrap();
    let moved = format!(
        "{}{}\n{}",
        &EXAMPLE[..timeouts],
        &EXAMPLE[ports..],
        &EXAMPLE[timeouts..ports]
    );
    let base = ConfigText::parse(&moved, "t.toml").unwrap_or_else(|e| panic!("{e}"));
    let next = edit(&moved, "name = \"web\"", "port = 80", "port = 81");
    assert_eq!(reparse_checked(&base, &next).unwrap().reparsed(), None);
}

/// Snippets an edit inserts: values, keys, headers, quotes, brackets.
const SNIPPETS: &[&str] = &[
    "1",
    "0",
    "\n",
    "#",
    "\"",
    "\"\"\"",
    "'''",
    "[",
    "]",
    "[[vip]]\n",
    "[[vip.backend]]\naddress = \"10.20.0.17\"\nport = 80\n",
    "[vip.health]\n",
    "[mgmt]\n",
    "weight = 3\n",
    "name = \"gen-0\"\n",
    "port = 8001\n",
    "zone = \"z\"\n",
    "= ",
    " ",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any edit anywhere (delete a range, then insert a snippet), applied to
    /// a config or to a reparsed one, gives the full parse's result.
    #[test]
    fn reparse_equals_a_full_parse(
        at in 0.0f64..1.0,
        cut in 0usize..40,
        snippet in proptest::sample::select(SNIPPETS),
        second_at in 0.0f64..1.0,
    ) {
        let text = config_text(6);
        let base = ConfigText::parse(&text, "t.toml").unwrap();
        let mutate = |t: &str, at: f64| {
            let mut pos = ((t.len() as f64) * at) as usize;
            while !t.is_char_boundary(pos) { pos -= 1; }
            let mut end = (pos + cut).min(t.len());
            while !t.is_char_boundary(end) { end -= 1; }
            format!("{}{}{}", &t[..pos], snippet, &t[end..])
        };
        let next = mutate(&text, at);
        if let Ok(re) = reparse_checked(&base, &next) {
            let third = mutate(&next, second_at);
            let _ = reparse_checked(&re, &third);
        }
    }
}

/// A valid change to the generated config: what operators do.
#[derive(Debug, Clone)]
enum Change {
    Weight { vip: u32, weight: u32 },
    AddBackend { vip: u32, host: u8 },
    RemoveVip { vip: u32 },
    InsertVip { before: u32, id: u32 },
    Comment { vip: u32 },
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        (0u32..12, 0u32..=65535).prop_map(|(vip, weight)| Change::Weight { vip, weight }),
        (0u32..12, 110u8..250).prop_map(|(vip, host)| Change::AddBackend { vip, host }),
        (0u32..12).prop_map(|vip| Change::RemoveVip { vip }),
        (0u32..13, 0u32..1000).prop_map(|(before, id)| Change::InsertVip { before, id }),
        (0u32..12).prop_map(|vip| Change::Comment { vip }),
    ]
}

/// `text` with `change` made, or unchanged when its VIP is gone.
fn apply(text: &str, change: &Change) -> String {
    let entry = |v: u32| text.find(&format!("[[vip]]\nname = \"gen-{v}\"\n"));
    match *change {
        Change::Weight { vip, weight } => match entry(vip) {
            Some(at) => {
                let w = at + text[at..].find("weight = ").unwrap() + "weight = ".len();
                let end = w + text[w..].find('\n').unwrap();
                format!("{}{weight}{}", &text[..w], &text[end..])
            }
            None => text.to_owned(),
        },
        Change::AddBackend { vip, host } => match entry(vip) {
            Some(_) if text.contains(&format!("\"10.20.0.{host}\"\nport = 81")) => text.to_owned(),
            Some(at) => {
                let b = at + text[at..].find("[[vip.backend]]").unwrap();
                format!(
                    "{}[[vip.backend]]\naddress = \"10.20.0.{host}\"\nport = 81\n{}",
                    &text[..b],
                    &text[b..]
                )
            }
            None => text.to_owned(),
        },
        Change::RemoveVip { vip } => match entry(vip) {
            Some(at) => {
                let end = text[at + 1..]
                    .find("[[vip]]")
                    .map_or(text.len(), |n| at + 1 + n);
                format!("{}{}", &text[..at], &text[end..])
            }
            None => text.to_owned(),
        },
        Change::InsertVip { before, id } => {
            let vip = format!(
                "[[vip]]\nname = \"ins-{id}\"\naddress = \"10.10.0.{}\"\nport = {}\n",
                id % 200 + 20,
                20000 + id
            );
            match entry(before) {
                Some(at) if !text.contains(&format!("\"ins-{id}\"")) => {
                    format!("{}{vip}\n{}", &text[..at], &text[at..])
                }
                _ => text.to_owned(),
            }
        }
        Change::Comment { vip } => match entry(vip) {
            Some(at) => {
                let line = at + text[at..].find('\n').unwrap() + 1;
                format!("{}# changed\n{}", &text[..line], &text[line..])
            }
            None => text.to_owned(),
        },
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Chains of operator changes (weights, backends, VIPs added and
    /// removed, comments), each reparsed from the previous result, equal
    /// full parses, and each takes the fast path.
    #[test]
    fn operator_changes_reparse_like_full_parses(
        changes in proptest::collection::vec(change(), 1..6),
    ) {
        let mut text = config_text(12);
        let mut prev = ConfigText::parse(&text, "t.toml").unwrap();
        for c in &changes {
            let next = apply(&text, c);
            let re = reparse_checked(&prev, &next).unwrap_or_else(|e| panic!("{c:?}: {e}"));
            prop_assert!(next == text || re.reparsed().is_some(), "{:?} was parsed in full", c);
            text = next;
            prev = re;
        }
    }
}
