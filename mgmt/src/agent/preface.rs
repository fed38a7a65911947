//! The tunnel preface: what an agent says on a fresh tunnel before HTTP/2
//! starts, and the gateway's one-line answer (docs/fleet.md).
//!
//! ```text
//! agent -> gateway:  "BORDER-TUNNEL/1\n" u32-be length, JSON {"id": "ams-1", "methods": ["/border.v1.Border/GetStatus", ...]}
//! gateway -> agent:  "BORDER-TUNNEL/1 OK\n" | "BORDER-TUNNEL/1 REFUSED <reason>\n"
//! ```
//!
//! Then the agent is the HTTP/2 server and the gateway the HTTP/2 client
//! on the same TLS stream. Pure parsing over bytes; the I/O is in
//! [`super::tunnel`] and in border-gw.

use serde::{Deserialize, Serialize};

/// The first line of a tunnel.
pub const MAGIC: &[u8] = b"BORDER-TUNNEL/1\n";
/// Largest JSON body of a preface.
pub const MAX_BODY: usize = 64 << 10;
/// Largest answer line, newline included.
pub const MAX_ANSWER: usize = 512;

/// What the agent announces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preface {
    /// The appliance id (`[mgmt.agent].id`).
    pub id: String,
    /// Every gRPC method path it serves (`/package.Service/Method`).
    pub methods: Vec<String>,
}

/// Why a preface or an answer is not one. One line each.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrefaceError {
    /// The first bytes are not [`MAGIC`].
    #[error("not a border tunnel: the first bytes are not BORDER-TUNNEL/1")]
    BadMagic,
    /// The announced body is larger than [`MAX_BODY`].
    #[error("tunnel preface of {0} bytes is larger than {MAX_BODY}")]
    TooLarge(usize),
    /// The body is not the JSON expected.
    #[error("tunnel preface is not valid: {0}")]
    BadBody(String),
    /// The appliance id is not 1..=64 characters from `A-Z a-z 0-9 - _ .`
    /// (it goes into log lines, metric labels and Redis keys). Shown
    /// escaped.
    #[error("tunnel preface is not valid: id {0} is not 1..=64 characters from A-Z a-z 0-9 - _ .")]
    BadId(String),
    /// The answer line is not `BORDER-TUNNEL/1 OK` or `... REFUSED why`.
    #[error("the gateway's answer is not a border tunnel answer: {0:?}")]
    BadAnswer(String),
}

impl Preface {
    /// The bytes the agent sends.
    pub fn encode(&self) -> Vec<u8> {
        let body = serde_json::to_vec(self).expect("a preface serialises");
        let mut out = Vec::with_capacity(MAGIC.len() + 4 + body.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(body.len() as u32).to_be_bytes());
        out.extend_from_slice(&body);
        out
    }

    /// The body length announced by a header of `MAGIC.len() + 4` bytes.
    pub fn body_len(header: &[u8]) -> Result<usize, PrefaceError> {
        if header.len() < MAGIC.len() + 4 || &header[..MAGIC.len()] != MAGIC {
            return Err(PrefaceError::BadMagic);
        }
        let n = &header[MAGIC.len()..MAGIC.len() + 4];
        let len = u32::from_be_bytes([n[0], n[1], n[2], n[3]]) as usize;
        if len > MAX_BODY {
            return Err(PrefaceError::TooLarge(len));
        }
        Ok(len)
    }

    /// The preface in `body` (after the header).
    pub fn decode_body(body: &[u8]) -> Result<Preface, PrefaceError> {
        let p: Preface =
            serde_json::from_slice(body).map_err(|e| PrefaceError::BadBody(e.to_string()))?;
        if !safe_id(&p.id) {
            let shown: String = format!("{:?}", p.id).chars().take(80).collect();
            return Err(PrefaceError::BadId(shown));
        }
        if let Some(m) = p.methods.iter().find(|m| !safe_method(m)) {
            return Err(PrefaceError::BadBody(format!(
                "method {m:?} is not a /package.Service/Method path"
            )));
        }
        Ok(p)
    }
}

/// An appliance id as `[mgmt.agent] id` and border-gw's config allow:
/// 1..=64 characters from `A-Z a-z 0-9 - _ .` (no newline or control
/// character can reach a log line through it).
pub fn safe_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// A gRPC method path: `/package.Service/Method`, ASCII letters, digits,
/// `_` and `.`, at most 256 bytes.
fn safe_method(m: &str) -> bool {
    m.len() <= 256
        && m.strip_prefix('/')
            .and_then(|r| r.split_once('/'))
            .is_some_and(|(service, method)| {
                let ok = |s: &str, dots: bool| {
                    !s.is_empty()
                        && s.chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_' || (dots && c == '.'))
                };
                ok(service, true) && ok(method, false)
            })
}

/// The gateway's answer to a preface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// HTTP/2 follows.
    Accepted,
    /// The gateway closes the tunnel, for this reason.
    Refused(String),
}

impl Answer {
    /// The answer line.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Answer::Accepted => b"BORDER-TUNNEL/1 OK\n".to_vec(),
            Answer::Refused(why) => {
                let why: String = why
                    .chars()
                    .map(|c| if c.is_control() { ' ' } else { c })
                    .take(MAX_ANSWER - 40)
                    .collect();
                format!("BORDER-TUNNEL/1 REFUSED {why}\n").into_bytes()
            }
        }
    }

    /// The answer in `line` (without its newline).
    pub fn decode(line: &[u8]) -> Result<Answer, PrefaceError> {
        let text = String::from_utf8_lossy(line);
        if text == "BORDER-TUNNEL/1 OK" {
            return Ok(Answer::Accepted);
        }
        match text.strip_prefix("BORDER-TUNNEL/1 REFUSED ") {
            Some(why) => Ok(Answer::Refused(why.to_string())),
            None => Err(PrefaceError::BadAnswer(text.chars().take(80).collect())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_preface_round_trips() {
        let p = Preface {
            id: "ams-1".into(),
            methods: vec!["/border.v1.Border/GetStatus".into()],
        };
        let bytes = p.encode();
        let len = Preface::body_len(&bytes[..MAGIC.len() + 4]).unwrap();
        assert_eq!(len, bytes.len() - MAGIC.len() - 4);
        assert_eq!(Preface::decode_body(&bytes[MAGIC.len() + 4..]).unwrap(), p);
    }

    #[test]
    fn garbage_is_refused_with_one_line() {
        assert_eq!(
            Preface::body_len(b"PRI * HTTP/2.0\r\n\r\nSM"),
            Err(PrefaceError::BadMagic)
        );
        let mut big = MAGIC.to_vec();
        big.extend_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(
            Preface::body_len(&big),
            Err(PrefaceError::TooLarge(u32::MAX as usize))
        );
        assert!(matches!(
            Preface::decode_body(b"{\"id\":\"\",\"methods\":[]}"),
            Err(PrefaceError::BadId(_))
        ));
        assert!(matches!(
            Preface::decode_body(b"{\"id\":\"a\",\"methods\":[\"x\"]}"),
            Err(PrefaceError::BadBody(_))
        ));
        for id in [
            "ams-1\nforged log line",
            "a b",
            "ams\u{1b}[31m",
            &"x".repeat(65),
        ] {
            let body = serde_json::to_vec(&Preface {
                id: id.into(),
                methods: vec![],
            })
            .unwrap();
            let e = Preface::decode_body(&body).unwrap_err();
            assert!(matches!(e, PrefaceError::BadId(_)), "{id:?}: {e}");
            assert_eq!(e.to_string().lines().count(), 1, "{e}");
            assert!(!e.to_string().contains('\u{1b}'), "{e}");
        }
        assert!(matches!(
            Preface::decode_body(b"{\"id\":\"a\",\"methods\":[\"/a.B/C\\nD\"]}"),
            Err(PrefaceError::BadBody(_))
        ));
        assert!(matches!(
            Preface::decode_body(b"\xff\x00"),
            Err(PrefaceError::BadBody(_))
        ));
    }

    #[test]
    fn answers_round_trip_and_stay_one_line() {
        assert_eq!(
            Answer::decode(b"BORDER-TUNNEL/1 OK").unwrap(),
            Answer::Accepted
        );
        let r = Answer::Refused("id ams-2\nis not pinned".into()).encode();
        assert_eq!(r.iter().filter(|b| **b == b'\n').count(), 1);
        assert_eq!(
            Answer::decode(&r[..r.len() - 1]).unwrap(),
            Answer::Refused("id ams-2 is not pinned".into())
        );
        assert!(Answer::decode(b"HTTP/1.1 400").is_err());
    }
}
