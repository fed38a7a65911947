//! Random and mutated TOML never panics, and every error is one located line.

use conf::{Config, ConfigError};
use proptest::prelude::*;

const EXAMPLE: &str = include_str!("data/border.example.toml");

/// Characters that matter to TOML and to our parsers.
const ALPHABET: &[u8] = b"[]{}=\",.#\n \t0123456789abcdefxyz-_:/'+\\\xc3\xa9";

fn check(text: &str) {
    match Config::from_toml_str(text, "fuzz.toml") {
        Ok(c) => {
            // A valid config upholds the documented invariants.
            assert!(!c.ports.is_empty());
            assert!(!c.dataplane.worker_lcores.is_empty());
            for p in &c.ports {
                assert_eq!(p.local_port_range.is_some(), !p.local_addresses.is_empty());
            }
            assert!(c.mgmt.listen_addr().is_some());
        }
        Err(e) => {
            let ConfigError::Invalid {
                origin,
                line,
                column,
                message,
                ..
            } = &e
            else {
                panic!("unexpected error kind {e:?}");
            };
            assert_eq!(origin, "fuzz.toml");
            let lines = text.split('\n').count();
            assert!(*line >= 1 && *line <= lines, "line {line} of {lines}: {e}");
            assert!(*column >= 1, "{e}");
            assert!(!message.is_empty(), "{e}");
            let shown = e.to_string();
            assert!(
                shown.starts_with(&format!("fuzz.toml:{line}:{column}: ")),
                "{shown}"
            );
            assert!(!shown.contains('\n'), "multi-line error: {shown:?}");
        }
    }
}

#[derive(Debug, Clone)]
enum Mutation {
    Insert(usize, u8),
    Delete(usize),
    Replace(usize, u8),
    DropLine(usize),
    DupLine(usize),
    SwapLines(usize, usize),
    Number(usize, i64),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let byte = prop::sample::select(ALPHABET.to_vec());
    prop_oneof![
        (any::<usize>(), byte.clone()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        any::<usize>().prop_map(Mutation::Delete),
        (any::<usize>(), byte).prop_map(|(i, b)| Mutation::Replace(i, b)),
        any::<usize>().prop_map(Mutation::DropLine),
        any::<usize>().prop_map(Mutation::DupLine),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::SwapLines(a, b)),
        (
            any::<usize>(),
            prop_oneof![
                Just(0i64),
                Just(-1),
                Just(65536),
                Just(4_294_967_296),
                Just(i64::MAX),
                any::<i64>()
            ]
        )
            .prop_map(|(i, n)| Mutation::Number(i, n)),
    ]
}

fn apply(text: &str, muts: &[Mutation]) -> String {
    let mut bytes = text.as_bytes().to_vec();
    for m in muts {
        let len = bytes.len().max(1);
        match *m {
            Mutation::Insert(i, b) => bytes.insert(i % (bytes.len() + 1), b),
            Mutation::Delete(i) => {
                if !bytes.is_empty() {
                    bytes.remove(i % len);
                }
            }
            Mutation::Replace(i, b) => {
                if !bytes.is_empty() {
                    bytes[i % len] = b;
                }
            }
            Mutation::DropLine(_) | Mutation::DupLine(_) | Mutation::SwapLines(..) => {
                let s = String::from_utf8_lossy(&bytes).into_owned();
                let mut lines: Vec<&str> = s.split('\n').collect();
                let n = lines.len();
                match *m {
                    Mutation::DropLine(i) => {
                        lines.remove(i % n);
                    }
                    Mutation::DupLine(i) => lines.insert(i % n, lines[i % n]),
                    Mutation::SwapLines(a, b) => lines.swap(a % n, b % n),
                    _ => unreachable!(),
                }
                bytes = lines.join("\n").into_bytes();
            }
            Mutation::Number(i, n) => {
                // Replace the first integer at or after a random offset.
                let start = i % len;
                if let Some(pos) = bytes[start.min(bytes.len())..]
                    .iter()
                    .position(u8::is_ascii_digit)
                {
                    let at = start + pos;
                    let end = bytes[at..]
                        .iter()
                        .position(|b| !(b.is_ascii_digit() || *b == b'_'))
                        .map_or(bytes.len(), |e| at + e);
                    bytes.splice(at..end, n.to_string().into_bytes());
                }
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn mutated_example_never_panics(muts in prop::collection::vec(mutation(), 1..6)) {
        check(&apply(EXAMPLE, &muts));
    }

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC*") {
        check(&text);
    }

    #[test]
    fn toml_shaped_noise_never_panics(
        bytes in prop::collection::vec(prop::sample::select(ALPHABET.to_vec()), 0..200)
    ) {
        check(&String::from_utf8_lossy(&bytes));
    }
}

#[test]
fn pathological_inputs() {
    for text in [
        String::new(),
        "\u{feff}".to_owned(),
        "[".repeat(10_000),
        "a = ".to_owned() + &"[".repeat(10_000),
        "a = ".to_owned() + &"{ b = ".repeat(5_000),
        "\r\n\r\n=".to_owned(),
        EXAMPLE.replace('\n', "\r\n"),
        EXAMPLE.replace("65537", "4294967295"),
        EXAMPLE.replace("65537", "18446744073709551615"),
        EXAMPLE.replace("[1]", &format!("{:?}", (0..2000).collect::<Vec<_>>())),
        format!("{EXAMPLE}\n[[vip]]\nname = \"x\"\naddress = \"10.10.0.7\"\nport = 1\n")
            + &"[[vip.backend]]\naddress = \"10.20.0.9\"\nport = 1\n".repeat(700),
    ] {
        check(&text);
    }
}

#[test]
fn example_with_crlf_is_valid() {
    let c = Config::from_toml_str(&EXAMPLE.replace('\n', "\r\n"), "crlf.toml");
    assert!(c.is_ok(), "{}", c.unwrap_err());
}
