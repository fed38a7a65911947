//! The agent check: the backend reports on itself with HAProxy's
//! agent-check protocol. Border connects to the agent's port, sends
//! nothing, and reads one ASCII line (up to a newline or the close), at most
//! [`MAX_ANSWER_BYTES`], within the probe's timeout.
//!
//! The line holds words separated by spaces, tabs or commas
//! (case-insensitive):
//! - `up`; `down`, `fail`, `stopped`: the backend's operational state
//!   (an answer without one of these words means up: it answered);
//! - `ready`, `drain`, `maint`: its administrative state, which sticks
//!   until the agent names another one (`ready` ends a drain or a
//!   maintenance);
//! - `N%`: its weight as a percentage of the configured weight, which
//!   sticks until the agent sends another one;
//! - `maxconn:N`: accepted and ignored (border has no connection limit per
//!   backend);
//! - `#` starts a description: the rest of the line, shown in the reason.
//!
//! Anything else is a malformed answer: a failed check, with the text in the
//! reason. [`parse_answer`] is pure and unit-tested; [`ask`] does the I/O.

use std::net::SocketAddr;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::time::{timeout_at, Instant};

/// The longest answer read; a longer one is malformed.
pub const MAX_ANSWER_BYTES: usize = 512;

/// The largest weight percentage accepted.
pub const MAX_WEIGHT_PCT: u32 = 65535;

/// The agent's administrative state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AgentAdmin {
    /// Takes flows.
    #[default]
    Ready,
    /// Keeps its established flows, takes no new ones.
    Drain,
    /// Out of the ring.
    Maint,
}

/// One parsed answer.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct AgentAnswer {
    /// The answer said `down`, `fail` or `stopped`.
    pub down: bool,
    /// `ready`, `drain` or `maint`, if the answer named one.
    pub admin: Option<AgentAdmin>,
    /// `N%`, if the answer had one.
    pub weight_pct: Option<u32>,
    /// The answer as received (trimmed, printable).
    pub text: String,
}

/// What asking the agent gave: an answer, or why there is none.
pub type AgentResult = Result<AgentAnswer, String>;

/// Shows at most 60 characters of untrusted bytes, quoted.
fn shown(b: &[u8]) -> String {
    let s: String = String::from_utf8_lossy(b).chars().take(60).collect();
    format!("{s:?}")
}

/// Parses one answer line (without its newline).
pub fn parse_answer(line: &[u8]) -> AgentResult {
    let line = line.strip_suffix(b"\r").unwrap_or(line).trim_ascii();
    let bad = |why: &str| Err(format!("malformed agent answer {}: {why}", shown(line)));
    if line.is_empty() {
        return Err("empty agent answer".to_string());
    }
    if line
        .iter()
        .any(|&b| !(b == b'\t' || (0x20..0x7f).contains(&b)))
    {
        return bad("not printable ASCII");
    }
    let (words, _description) = match line.iter().position(|&b| b == b'#') {
        Some(i) => (&line[..i], &line[i + 1..]),
        None => (line, &b""[..]),
    };
    let mut a = AgentAnswer {
        text: String::from_utf8_lossy(line).into_owned(),
        ..AgentAnswer::default()
    };
    let mut any = false;
    for w in words
        .split(|&b| b == b' ' || b == b'\t' || b == b',')
        .filter(|w| !w.is_empty())
    {
        any = true;
        let lower = w.to_ascii_lowercase();
        match lower.as_slice() {
            b"up" => a.down = false,
            b"down" | b"fail" | b"stopped" => a.down = true,
            b"ready" => a.admin = Some(AgentAdmin::Ready),
            b"drain" => a.admin = Some(AgentAdmin::Drain),
            b"maint" => a.admin = Some(AgentAdmin::Maint),
            _ if lower.starts_with(b"maxconn:")
                && lower.len() > 8
                && lower[8..].iter().all(u8::is_ascii_digit) => {}
            _ if lower.ends_with(b"%") => {
                let digits = &lower[..lower.len() - 1];
                let pct = (!digits.is_empty()
                    && digits.len() <= 5
                    && digits.iter().all(u8::is_ascii_digit))
                .then(|| std::str::from_utf8(digits).ok()?.parse::<u32>().ok())
                .flatten()
                .filter(|p| *p <= MAX_WEIGHT_PCT);
                match pct {
                    Some(p) => a.weight_pct = Some(p),
                    None => {
                        return bad(&format!(
                            "{} is not a weight (expected 0% to {MAX_WEIGHT_PCT}%)",
                            shown(w)
                        ))
                    }
                }
            }
            _ => return bad(&format!("unknown word {}", shown(w))),
        }
    }
    if !any {
        return bad("no state or weight before the '#' description");
    }
    Ok(a)
}

/// Asks the agent at `addr`: connects, reads one line (or up to the close),
/// parses it. Ends by `deadline` whatever the agent does.
pub async fn ask(addr: SocketAddr, deadline: Instant, timeout_ms: u32) -> AgentResult {
    let mut s = match timeout_at(deadline, TcpStream::connect(addr)).await {
        Err(_) => return Err(format!("agent connect timeout after {timeout_ms} ms")),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            return Err("agent connect refused".to_string())
        }
        Ok(Err(e)) => return Err(format!("agent connect failed: {e}")),
        Ok(Ok(s)) => s,
    };
    let mut buf = Vec::with_capacity(64);
    let mut chunk = [0u8; 256];
    loop {
        let n = match timeout_at(deadline, s.read(&mut chunk)).await {
            Err(_) if buf.is_empty() => {
                return Err(format!("agent answer timeout after {timeout_ms} ms"))
            }
            Err(_) => {
                return Err(format!(
                    "agent answer {} not ended by a newline or a close within {timeout_ms} ms",
                    shown(&buf)
                ))
            }
            Ok(Err(e)) => return Err(format!("agent read failed: {e}")),
            Ok(Ok(n)) => n,
        };
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.iter().position(|&b| b == b'\n') {
            buf.truncate(i);
            break;
        }
        if buf.len() > MAX_ANSWER_BYTES {
            return Err(format!(
                "malformed agent answer {}...: longer than {MAX_ANSWER_BYTES} bytes",
                shown(&buf)
            ));
        }
    }
    parse_answer(&buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_and_weights() {
        let a = parse_answer(b"up 75%\n".strip_suffix(b"\n").unwrap()).unwrap();
        assert_eq!((a.down, a.admin, a.weight_pct), (false, None, Some(75)));
        let a = parse_answer(b"DRAIN").unwrap();
        assert_eq!(a.admin, Some(AgentAdmin::Drain));
        let a = parse_answer(b"ready,50%").unwrap();
        assert_eq!((a.admin, a.weight_pct), (Some(AgentAdmin::Ready), Some(50)));
        let a = parse_answer(b"down#disk full\r").unwrap();
        assert!(a.down);
        assert_eq!(a.text, "down#disk full");
        assert!(parse_answer(b"stopped").unwrap().down);
        assert!(parse_answer(b"fail").unwrap().down);
        assert_eq!(
            parse_answer(b"maint").unwrap().admin,
            Some(AgentAdmin::Maint)
        );
        assert_eq!(parse_answer(b"0%").unwrap().weight_pct, Some(0));
        assert!(!parse_answer(b"maxconn:30 up").unwrap().down);
    }

    #[test]
    fn malformed_answers_name_the_text() {
        for (line, want) in [
            (&b""[..], "empty agent answer"),
            (b"   ", "empty agent answer"),
            (
                b"sideways",
                "malformed agent answer \"sideways\": unknown word \"sideways\"",
            ),
            (b"up 12x%", "is not a weight"),
            (b"%", "is not a weight"),
            (b"999999%", "is not a weight"),
            (b"#only a comment", "no state or weight"),
            (b"up\x00", "not printable ASCII"),
            (b"HTTP/1.1 200 OK", "unknown word \"HTTP/1.1\""),
        ] {
            let e = parse_answer(line).unwrap_err();
            assert!(e.contains(want), "{line:?}: {e}");
        }
    }
}
