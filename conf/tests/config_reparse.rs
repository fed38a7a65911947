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
    assert_eq!(base.parsed_alone(), None);
    let next = edit(&text, "name = \"gen-17\"", "weight = 19", "weight = 7");
    let re = reparse_checked(&base, &next).unwrap();
    // The example's own VIP is entry 0.
    assert_eq!(re.parsed_alone(), Some(18));
    assert_eq!(re.config().vips[18].backends[1].weight, 7);
    // Chained: the next change reparses from the reparsed text.
    let again = edit(&next, "name = \"gen-39\"", "port = 80\n", "port = 81\n");
    let re2 = reparse_checked(&re, &again).unwrap();
    assert_eq!(re2.parsed_alone(), Some(40));
    assert_eq!(re2.config().vips[40].backends[0].port, 81);
    // And back to an earlier entry, with the offsets of the others shifted.
    let third = edit(&again, "name = \"gen-3\"", "weight = 4", "weight = 40000");
    assert_eq!(
        reparse_checked(&re2, &third).unwrap().parsed_alone(),
        Some(4)
    );
}

#[test]
fn crlf_line_ends_take_the_fast_path_too() {
    let text = config_text(5).replace('\n', "\r\n");
    let base = ConfigText::parse(&text, "t.toml").unwrap();
    let next = edit(&text, "name = \"gen-2\"", "weight = 4", "weight = 8");
    let re = reparse_checked(&base, &next).unwrap();
    assert_eq!(re.parsed_alone(), Some(3));
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
    assert_eq!(re.parsed_alone(), Some(6));
    assert_eq!(re.config().vips[6].backends.len(), 4);
    let removed = edit(
        &text,
        "name = \"gen-9\"",
        "[[vip.backend]]\naddress = \"10.20.0.103\"\nport = 80\nweight = 12\n",
        "",
    );
    let re = reparse_checked(&base, &removed).unwrap();
    assert_eq!(re.parsed_alone(), Some(10));
    assert_eq!(re.config().vips[10].backends.len(), 2);
    let health = edit(
        &text,
        "name = \"gen-2\"",
        "kind = \"tcp\"",
        "kind = \"tcp\"\nfall = 5",
    );
    assert_eq!(
        reparse_checked(&base, &health).unwrap().parsed_alone(),
        Some(3)
    );
}

#[test]
fn what_the_fast_path_cannot_vouch_for_is_parsed_in_full() {
    let text = config_text(8);
    let base = ConfigText::parse(&text, "t.toml").unwrap();
    let full = |next: &str| reparse_checked(&base, next).map(|c| c.parsed_alone());
    // Outside the VIPs.
    let same = reparse_checked(&base, &text).unwrap();
    assert_eq!((same.parsed_alone(), same.config()), (None, base.config()));
    assert_eq!(
        full(&edit(&text, "", "tcp_closing = 10", "tcp_closing = 11")),
        Ok(None)
    );
    let head = edit(&text, "", "[1024, 49151]", "[1024, 49150]");
    assert_eq!(full(&head), Ok(None));
    // Across two entries.
    let two = edit(&text, "name = \"gen-1\"", "weight = 2", "weight = 9");
    let two = edit(&two, "name = \"gen-2\"", "weight = 3", "weight = 9");
    assert_eq!(full(&two), Ok(None));
    // A new entry, inside or after an entry.
    let split = edit(
        &text,
        "name = \"gen-4\"",
        "[[vip.backend]]",
        "[[vip]]\nname = \"new\"\naddress = \"10.10.0.250\"\nport = 1\n[[vip.backend]]",
    );
    assert_eq!(full(&split), Ok(None));
    let appended =
        format!("{text}\n[[vip]]\nname = \"new\"\naddress = \"10.10.0.250\"\nport = 1\n");
    assert_eq!(full(&appended), Ok(None));
    // An entry header changed.
    let header = edit(&text, "weight = 4\n", "[[vip]]", "[[vip]] # renamed");
    assert_eq!(full(&header), Ok(None));
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
    assert_eq!(reparse_checked(&base, &next).unwrap().parsed_alone(), None);
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
