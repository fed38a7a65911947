//! The DNS messages of the `dns` probe (RFC 1035 §4.1), sans-IO: the query
//! it sends and the check that a datagram is the response to it.
//!
//! Hand-written rather than a DNS crate: the probe writes one question and
//! reads back one header and one question (compression pointers
//! included); the answer records are counted, never parsed. That is about
//! a hundred lines, against a crate whose record types, DNSSEC and zone
//! parsing border would compile and never call.

/// The header's length.
const HEADER: usize = 12;
/// Longest encoded name (RFC 1035 §2.3.4).
const MAX_NAME: usize = 255;
/// Class IN.
const CLASS_IN: u16 = 1;

/// The query for `name` (dotted, `"."` for the root, a trailing dot
/// optional) of type `qtype` with message ID `id`: one question, recursion
/// desired (a resolver answers from its cache; an authoritative server
/// ignores the bit), no EDNS (the answer then fits 512 bytes or comes
/// truncated, which still proves the server).
pub fn encode_query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    let mut m = Vec::with_capacity(HEADER + name.len() + 6);
    m.extend_from_slice(&id.to_be_bytes());
    // QR=0 (query), opcode 0 (QUERY), RD=1.
    m.extend_from_slice(&[0x01, 0x00]);
    // One question, no answer, authority or additional records.
    m.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
    for label in labels(name) {
        m.push(label.len() as u8);
        m.extend_from_slice(label.as_bytes());
    }
    m.push(0);
    m.extend_from_slice(&qtype.to_be_bytes());
    m.extend_from_slice(&CLASS_IN.to_be_bytes());
    m
}

/// The labels of a dotted name (none for the root).
fn labels(name: &str) -> impl Iterator<Item = &str> {
    name.strip_suffix('.')
        .unwrap_or(name)
        .split('.')
        .filter(|l| !l.is_empty())
}

/// What a response says, once it is known to answer the query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// RCODE (the low 4 bits of the header; no EDNS, so no extended code).
    pub rcode: u8,
    /// ANCOUNT.
    pub answers: u16,
    /// TC: the answer did not fit a datagram.
    pub truncated: bool,
}

/// Why a datagram is not the response to the query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotTheResponse {
    /// Another message ID: a late answer to an earlier query, or a forgery;
    /// ignored while the probe waits.
    OtherId(u16),
    /// Our ID, but not a response to our question; the reason in words.
    Wrong(String),
}

/// Checks that `msg` is the response to the query [`encode_query`] made
/// with `id`, `name` and `qtype`: QR set, opcode QUERY, the same ID, and
/// the question echoed (name compared without regard to ASCII case, RFC
/// 4343). A response with an error code and no question (allowed for
/// FORMERR, NOTIMP, REFUSED) is a response too; its code decides.
pub fn read_response(
    msg: &[u8],
    id: u16,
    name: &str,
    qtype: u16,
) -> Result<Response, NotTheResponse> {
    use NotTheResponse::Wrong;
    if msg.len() < HEADER {
        return Err(Wrong(format!(
            "not a DNS message: {} bytes, shorter than a DNS header",
            msg.len()
        )));
    }
    let got_id = u16::from_be_bytes([msg[0], msg[1]]);
    if got_id != id {
        return Err(NotTheResponse::OtherId(got_id));
    }
    if msg[2] & 0x80 == 0 {
        return Err(Wrong(
            "not a DNS response: the QR bit is clear (the query came back: an echo, not a DNS server)"
                .to_string(),
        ));
    }
    let opcode = (msg[2] >> 3) & 0x0f;
    if opcode != 0 {
        return Err(Wrong(format!(
            "DNS response with opcode {opcode} (expected 0, QUERY)"
        )));
    }
    let response = Response {
        rcode: msg[3] & 0x0f,
        answers: u16::from_be_bytes([msg[6], msg[7]]),
        truncated: msg[2] & 0x02 != 0,
    };
    let questions = u16::from_be_bytes([msg[4], msg[5]]);
    if questions == 0 && response.rcode != 0 {
        return Ok(response);
    }
    if questions != 1 {
        return Err(Wrong(format!(
            "DNS response with {questions} questions (expected the query's one question echoed)"
        )));
    }
    let (got_labels, end) = read_name(msg, HEADER).map_err(Wrong)?;
    let want: Vec<&[u8]> = labels(name).map(str::as_bytes).collect();
    let same = got_labels.len() == want.len()
        && got_labels
            .iter()
            .zip(&want)
            .all(|(g, w)| g.eq_ignore_ascii_case(w));
    if !same {
        return Err(Wrong(format!(
            "DNS response to another question: {} (expected {})",
            shown_name(&got_labels),
            shown_name(&want)
        )));
    }
    let Some(tail) = msg.get(end..end + 4) else {
        return Err(Wrong("DNS response ends inside its question".to_string()));
    };
    let (got_type, got_class) = (
        u16::from_be_bytes([tail[0], tail[1]]),
        u16::from_be_bytes([tail[2], tail[3]]),
    );
    if (got_type, got_class) != (qtype, CLASS_IN) {
        return Err(Wrong(format!(
            "DNS response to another question: type {got_type} class {got_class} (expected type {qtype} class {CLASS_IN})"
        )));
    }
    Ok(response)
}

/// The name at `at` in `msg`, following compression pointers; its labels
/// and the offset just after the name where it starts (after its first
/// pointer, if any). Each pointer must point before the run of labels it
/// ends began, so the runs start ever earlier and a loop cannot be made.
fn read_name(msg: &[u8], mut at: usize) -> Result<(Vec<&[u8]>, usize), String> {
    let cut = || "DNS response ends inside its question".to_string();
    let mut labels = Vec::new();
    let mut end = None;
    let mut encoded = 0usize;
    let mut run_start = at;
    loop {
        let len = *msg.get(at).ok_or_else(cut)? as usize;
        match len & 0xc0 {
            0x00 if len == 0 => {
                return Ok((labels, end.unwrap_or(at + 1)));
            }
            0x00 => {
                let label = msg.get(at + 1..at + 1 + len).ok_or_else(cut)?;
                encoded += 1 + len;
                if encoded + 1 > MAX_NAME {
                    return Err(format!(
                        "DNS response with a question name longer than {MAX_NAME} bytes"
                    ));
                }
                labels.push(label);
                at += 1 + len;
            }
            0xc0 => {
                let low = *msg.get(at + 1).ok_or_else(cut)? as usize;
                let target = ((len & 0x3f) << 8) | low;
                if target >= run_start {
                    return Err(format!(
                        "DNS response with a compression pointer that does not point back (to byte {target} from byte {at})"
                    ));
                }
                end.get_or_insert(at + 2);
                run_start = target;
                at = target;
            }
            _ => {
                return Err(format!(
                    "DNS response with an unknown label type 0x{:02x}",
                    len & 0xc0
                ))
            }
        }
    }
}

/// A name for a reason: dotted, bytes outside printable ASCII escaped.
fn shown_name(labels: &[&[u8]]) -> String {
    if labels.is_empty() {
        return "\".\"".to_string();
    }
    let mut s = String::new();
    for l in labels {
        s.push_str(&l.escape_ascii().to_string());
        s.push('.');
    }
    format!("{s:?}")
}

/// An RCODE in words (RFC 1035, RFC 2136).
pub fn rcode_name(rcode: u8) -> String {
    match rcode {
        0 => "NOERROR".into(),
        1 => "FORMERR".into(),
        2 => "SERVFAIL".into(),
        3 => "NXDOMAIN".into(),
        4 => "NOTIMP".into(),
        5 => "REFUSED".into(),
        6 => "YXDOMAIN".into(),
        7 => "YXRRSET".into(),
        8 => "NXRRSET".into(),
        9 => "NOTAUTH".into(),
        10 => "NOTZONE".into(),
        n => format!("RCODE {n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `dig +norecurse`-style query for example.com A, ID 0x1234, RD set.
    const QUERY_EXAMPLE_A: [u8; 29] = [
        0x12, 0x34, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        7, b'e', b'x', b'a', b'm', b'p', b'l', b'e', 3, b'c', b'o', b'm', 0, //
        0x00, 0x01, 0x00, 0x01,
    ];

    /// The response to it: QR AA RD RA, NOERROR, one A record 93.184.216.34
    /// whose owner is a compression pointer to the question's name.
    fn response_example_a() -> Vec<u8> {
        let mut m = QUERY_EXAMPLE_A.to_vec();
        m[2] = 0x85; // QR, opcode 0, AA, RD
        m[3] = 0x80; // RA, NOERROR
        m[7] = 1; // ANCOUNT
        m.extend_from_slice(&[
            0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0x0e, 0x10, 0, 4, 93, 184, 216, 34,
        ]);
        m
    }

    #[test]
    fn query_bytes() {
        assert_eq!(encode_query(0x1234, "example.com", 1), QUERY_EXAMPLE_A);
        assert_eq!(encode_query(0x1234, "example.com.", 1), QUERY_EXAMPLE_A);
        // The root, type NS: the name is the single zero byte.
        assert_eq!(
            encode_query(0xbeef, ".", 2),
            [0xbe, 0xef, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1]
        );
    }

    #[test]
    fn the_response_to_the_query() {
        let r = read_response(&response_example_a(), 0x1234, "example.com", 1).unwrap();
        assert_eq!(
            r,
            Response {
                rcode: 0,
                answers: 1,
                truncated: false
            }
        );
        // Names compare without regard to case (0x20 mixing servers).
        let mut m = response_example_a();
        m[13] = b'E';
        assert!(read_response(&m, 0x1234, "EXAMPLE.com.", 1).is_ok());
        // NXDOMAIN and truncation are read, not judged here.
        let mut m = response_example_a();
        m[3] = 0x83;
        m[2] |= 0x02;
        let r = read_response(&m, 0x1234, "example.com", 1).unwrap();
        assert_eq!((r.rcode, r.truncated), (3, true));
        // REFUSED without the question echoed is still a response.
        let refused = [0x12, 0x34, 0x81, 0x05, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            read_response(&refused, 0x1234, "example.com", 1)
                .unwrap()
                .rcode,
            5
        );
    }

    #[test]
    fn what_is_not_the_response() {
        let wrong = |m: &[u8]| match read_response(m, 0x1234, "example.com", 1) {
            Err(NotTheResponse::Wrong(w)) => w,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            read_response(&response_example_a(), 0x4321, "example.com", 1),
            Err(NotTheResponse::OtherId(0x1234))
        );
        assert!(wrong(&QUERY_EXAMPLE_A).contains("QR bit is clear"));
        assert!(wrong(b"PONG").contains("shorter than a DNS header"));
        let mut m = response_example_a();
        m[2] |= 2 << 3; // opcode STATUS
        assert!(wrong(&m).contains("opcode 2"));
        let mut m = response_example_a();
        m[5] = 2;
        assert!(wrong(&m).contains("2 questions"));
        assert!(
            read_response(&response_example_a(), 0x1234, "example.org", 1).is_err_and(|e| {
                e
                == NotTheResponse::Wrong(
                    "DNS response to another question: \"example.com.\" (expected \"example.org.\")"
                        .into()
                )
            })
        );
        assert!(wrong(&response_example_a()[..20]).contains("ends inside its question"));
        let mut m = response_example_a();
        m[26] = 28; // AAAA
        assert!(wrong(&m).contains("type 28 class 1 (expected type 1 class 1)"));
        // A pointer must point backwards: this one points at itself.
        let mut m = QUERY_EXAMPLE_A[..12].to_vec();
        m[2] = 0x81;
        m.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1]);
        assert!(wrong(&m).contains("does not point back (to byte 12 from byte 12)"));
        // Label type 0x40 (extended, obsolete) is refused.
        let mut m = QUERY_EXAMPLE_A.to_vec();
        m[2] = 0x81;
        m[12] = 0x47;
        assert!(wrong(&m).contains("unknown label type 0x40"));
    }

    #[test]
    fn a_pointer_loop_is_refused() {
        // "com" then a pointer back to that same "com": a loop.
        let mut m = vec![0x12, 0x34, 0x81, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        m.extend_from_slice(&[3, b'c', b'o', b'm', 0xc0, 12, 0, 1, 0, 1]);
        assert_eq!(
            read_response(&m, 0x1234, "com.com", 1),
            Err(NotTheResponse::Wrong(
                "DNS response with a compression pointer that does not point back (to byte 12 from byte 16)".into()
            ))
        );
    }

    #[test]
    fn rcodes_in_words() {
        assert_eq!(rcode_name(0), "NOERROR");
        assert_eq!(rcode_name(5), "REFUSED");
        assert_eq!(rcode_name(15), "RCODE 15");
    }
}
