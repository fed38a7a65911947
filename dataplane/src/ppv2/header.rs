//! PROXY protocol v2 header encoding (haproxy doc/proxy-protocol.txt §2.2).
//!
//! A header is written into a caller's buffer, never allocated: the fixed
//! 16 bytes (signature, version/command, family, length), the addresses, then
//! the TLVs that fit under the length bound, in a fixed priority order:
//! `UNIQUE_ID`, `CRC32C`, `AUTHORITY`. A TLV that would make the header
//! longer than the bound is left out and reported in [`Written::dropped`].
//! `CRC32C` (if written) is computed last, over the whole header with its own
//! value zeroed, and stored in network byte order.

use std::net::IpAddr;

/// The 12-byte signature that starts every v2 header.
pub const SIGNATURE: [u8; 12] = [
    0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A,
];
/// Signature, version/command, family and length.
pub const FIXED_LEN: usize = 16;
/// Version 2, command PROXY.
pub const VER_CMD_PROXY: u8 = 0x21;
/// TCP over IPv4.
pub const FAM_TCP4: u8 = 0x11;
/// TCP over IPv6.
pub const FAM_TCP6: u8 = 0x21;
/// The longest header border ever builds (addresses plus every TLV it knows,
/// with a 255-byte authority, is 336 bytes).
pub const MAX_HEADER_LEN: usize = 512;
/// Bytes of the `UNIQUE_ID` value: the connection id as 16 lowercase hex digits.
pub const UNIQUE_ID_LEN: usize = 16;
/// Longest `AUTHORITY` value accepted (a DNS name).
pub const MAX_AUTHORITY_LEN: usize = 255;

/// TLV types used here.
pub mod tlv {
    /// PP2_TYPE_AUTHORITY: the host name the client asked for (TLS SNI).
    pub const AUTHORITY: u8 = 0x02;
    /// PP2_TYPE_CRC32C: CRC32c of the whole header.
    pub const CRC32C: u8 = 0x03;
    /// PP2_TYPE_NOOP: padding, ignored by receivers.
    pub const NOOP: u8 = 0x04;
    /// PP2_TYPE_UNIQUE_ID: an opaque connection id.
    pub const UNIQUE_ID: u8 = 0x05;
}

/// What to put in a header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header<'a> {
    /// The real client: source address and port.
    pub src: (IpAddr, u16),
    /// The VIP the client connected to: destination address and port.
    pub dst: (IpAddr, u16),
    /// `UNIQUE_ID` TLV with this connection id, if requested.
    pub unique_id: Option<u64>,
    /// `AUTHORITY` TLV with this name, if requested and known.
    pub authority: Option<&'a [u8]>,
    /// `CRC32C` TLV, if requested.
    pub crc32c: bool,
    /// Upper bound of the whole header in bytes (`proxy_protocol_max_len`);
    /// the addresses are always written even if they alone exceed it.
    pub max_len: u16,
}

/// The result of writing a header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Written {
    /// Bytes written.
    pub len: usize,
    /// Requested TLVs left out because of `max_len`.
    pub dropped: u8,
}

/// Which TLVs go in, and the resulting length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Plan {
    uid: bool,
    crc: bool,
    auth: Option<usize>,
    /// Value length of a NOOP TLV, if one pads the header.
    noop: Option<usize>,
    len: usize,
    dropped: u8,
}

fn addr_len(src: IpAddr, dst: IpAddr) -> Option<usize> {
    match (src, dst) {
        (IpAddr::V4(_), IpAddr::V4(_)) => Some(12),
        (IpAddr::V6(_), IpAddr::V6(_)) => Some(36),
        _ => None,
    }
}

impl Header<'_> {
    fn limit(&self) -> usize {
        usize::from(self.max_len).min(MAX_HEADER_LEN)
    }

    fn plan(&self, with_authority: bool) -> Option<Plan> {
        let base = FIXED_LEN + addr_len(self.src.0, self.dst.0)?;
        let limit = self.limit();
        let mut p = Plan {
            uid: false,
            crc: false,
            auth: None,
            noop: None,
            len: base,
            dropped: 0,
        };
        if self.unique_id.is_some() {
            if p.len + 3 + UNIQUE_ID_LEN <= limit {
                p.uid = true;
                p.len += 3 + UNIQUE_ID_LEN;
            } else {
                p.dropped += 1;
            }
        }
        if self.crc32c {
            if p.len + 7 <= limit {
                p.crc = true;
                p.len += 7;
            } else {
                p.dropped += 1;
            }
        }
        if let Some(a) = self.authority.filter(|_| with_authority) {
            let n = a.len();
            if (1..=MAX_AUTHORITY_LEN).contains(&n) && p.len + 3 + n <= limit {
                p.auth = Some(n);
                p.len += 3 + n;
            } else {
                p.dropped += 1;
            }
        }
        Some(p)
    }

    /// The length [`Header::write`] would produce.
    pub fn encoded_len(&self) -> Option<usize> {
        self.plan(true).map(|p| p.len)
    }

    /// Writes the header at the start of `out`. `None` when the addresses
    /// are of different families or `out` is too short; `out` may then be
    /// partly written.
    pub fn write(&self, out: &mut [u8]) -> Option<Written> {
        let plan = self.plan(true)?;
        self.emit(out, &plan)
    }

    /// Writes a header of exactly `len` bytes: the same header as
    /// [`Header::write`] when that has this length, else one without the
    /// authority, padded with a NOOP TLV up to `len`. Used when the header
    /// must be sent again at the length already accounted for in sequence
    /// numbers. `None` when no such header exists.
    pub fn write_exact(&self, out: &mut [u8], len: usize) -> Option<Written> {
        let full = self.plan(true)?;
        if full.len == len {
            return self.emit(out, &full);
        }
        let mut bare = self.plan(false)?;
        if bare.len == len {
            return self.emit(out, &bare);
        }
        if bare.len + 3 <= len && len <= MAX_HEADER_LEN {
            bare.noop = Some(len - bare.len - 3);
            bare.len = len;
            return self.emit(out, &bare);
        }
        None
    }

    fn emit(&self, out: &mut [u8], plan: &Plan) -> Option<Written> {
        let out = out.get_mut(..plan.len)?;
        out[..12].copy_from_slice(&SIGNATURE);
        out[12] = VER_CMD_PROXY;
        let body = u16::try_from(plan.len - FIXED_LEN).ok()?;
        out[14..16].copy_from_slice(&body.to_be_bytes());
        let mut at = FIXED_LEN;
        match (self.src.0, self.dst.0) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                out[13] = FAM_TCP4;
                out[at..at + 4].copy_from_slice(&s.octets());
                out[at + 4..at + 8].copy_from_slice(&d.octets());
                at += 8;
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                out[13] = FAM_TCP6;
                out[at..at + 16].copy_from_slice(&s.octets());
                out[at + 16..at + 32].copy_from_slice(&d.octets());
                at += 32;
            }
            _ => return None,
        }
        out[at..at + 2].copy_from_slice(&self.src.1.to_be_bytes());
        out[at + 2..at + 4].copy_from_slice(&self.dst.1.to_be_bytes());
        at += 4;
        if plan.uid {
            let id = self.unique_id.unwrap_or(0);
            at = put_tlv_head(out, at, tlv::UNIQUE_ID, UNIQUE_ID_LEN);
            write_hex(&mut out[at..at + UNIQUE_ID_LEN], id);
            at += UNIQUE_ID_LEN;
        }
        if let (Some(n), Some(a)) = (plan.auth, self.authority) {
            at = put_tlv_head(out, at, tlv::AUTHORITY, n);
            out[at..at + n].copy_from_slice(a.get(..n)?);
            at += n;
        }
        if let Some(n) = plan.noop {
            at = put_tlv_head(out, at, tlv::NOOP, n);
            out[at..at + n].fill(0);
            at += n;
        }
        let crc_at = if plan.crc {
            at = put_tlv_head(out, at, tlv::CRC32C, 4);
            out[at..at + 4].fill(0);
            at += 4;
            Some(at - 4)
        } else {
            None
        };
        debug_assert_eq!(at, plan.len);
        if let Some(c) = crc_at {
            let crc = crc32c(&out[..plan.len]);
            out[c..c + 4].copy_from_slice(&crc.to_be_bytes());
        }
        Some(Written {
            len: plan.len,
            dropped: plan.dropped,
        })
    }
}

fn put_tlv_head(out: &mut [u8], at: usize, kind: u8, len: usize) -> usize {
    out[at] = kind;
    out[at + 1..at + 3].copy_from_slice(&(len as u16).to_be_bytes());
    at + 3
}

/// `v` as 16 lowercase hex digits.
pub fn write_hex(out: &mut [u8], v: u64) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for (i, b) in out.iter_mut().take(16).enumerate() {
        *b = HEX[((v >> (60 - 4 * i)) & 0xF) as usize];
    }
}

const fn crc32c_table() -> [u32; 256] {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0x82F6_3B78 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}

static CRC32C_TABLE: [u32; 256] = crc32c_table();

/// CRC32c (Castagnoli, RFC 4960 appendix B), as PPv2's `CRC32C` TLV uses.
pub fn crc32c(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c = CRC32C_TABLE[((c ^ u32::from(b)) & 0xFF) as usize] ^ (c >> 8);
    }
    !c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_check_value() {
        // The standard check value of CRC-32C.
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn hex() {
        let mut b = [0u8; 16];
        write_hex(&mut b, 0x0001_0000_0000_00ab);
        assert_eq!(&b, b"00010000000000ab");
    }

    fn h(max_len: u16) -> Header<'static> {
        Header {
            src: ("10.0.0.1".parse().unwrap(), 1234),
            dst: ("10.0.0.2".parse().unwrap(), 80),
            unique_id: Some(7),
            authority: Some(b"example.com"),
            crc32c: true,
            max_len,
        }
    }

    #[test]
    fn tlvs_dropped_by_priority() {
        assert_eq!(h(1000).encoded_len(), Some(28 + 19 + 7 + 14));
        // Room for the unique id and the CRC, not the authority.
        let mut out = [0u8; 600];
        let w = h(60).write(&mut out).unwrap();
        assert_eq!(
            w,
            Written {
                len: 54,
                dropped: 1
            }
        );
        let w = h(28).write(&mut out).unwrap();
        assert_eq!(
            w,
            Written {
                len: 28,
                dropped: 3
            }
        );
        // Below the addresses: the addresses still go out.
        assert_eq!(h(10).write(&mut out).unwrap().len, 28);
    }

    #[test]
    fn exact_pads_or_drops_authority() {
        let mut out = [0u8; 600];
        let full = h(1000).encoded_len().unwrap();
        assert_eq!(h(1000).write_exact(&mut out, full).unwrap().len, full);
        // Shorter authority now: padded.
        let mut short = h(1000);
        short.authority = Some(b"a.io");
        assert_eq!(short.write_exact(&mut out, full).unwrap().len, full);
        // None now: padded.
        short.authority = None;
        assert_eq!(short.write_exact(&mut out, full).unwrap().len, full);
        // Without authority at first, with one now: the bare header.
        assert_eq!(h(1000).write_exact(&mut out, 54).unwrap().len, 54);
        // 1 or 2 bytes of difference cannot be padded.
        assert_eq!(short.write_exact(&mut out, 55), None);
    }

    #[test]
    fn mixed_families_refused() {
        let mut x = h(100);
        x.dst.0 = "::1".parse().unwrap();
        assert_eq!(x.encoded_len(), None);
        assert_eq!(x.write(&mut [0u8; 200]), None);
    }
}
