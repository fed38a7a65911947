//! SYN cookies: the initial sequence number of border's SYN-ACK carries,
//! authenticated, what the client's SYN said, so that border keeps no state
//! until the client's ACK proves it owns its address.
//!
//! The anchors are Linux's `tcp_syncookies` (`net/ipv4/syncookies.c`) and
//! DPVS's synproxy, which uses the same encoding. Both lose the client's
//! window scale and SACK-permitted unless the SYN carried timestamps (they
//! then hide them in the low bits of the SYN-ACK's TSval), and neither
//! authenticates those TSval bits: an ACK may echo any options it likes.
//! This encoding keeps both in every case and authenticates them:
//!
//! - The cookie is `H << k | data`, `H` the top `32 - k` bits of
//!   SipHash-2-4 under a per-process secret over the time slot, the 4-tuple,
//!   the client's ISN, the layout, `data` and the TSval bits.
//! - Without timestamps, `k = 8`: MSS index (3 bits), SACK-permitted (1),
//!   window scale (4, 15 = none).
//! - With timestamps, `k = 3` (MSS index only) and the window scale and
//!   SACK-permitted go into the low [`TS_OPT_BITS`] bits of the SYN-ACK's
//!   TSval, as Linux does; the ACK echoes them in its TSecr and they are
//!   hashed too, so they cannot be altered.
//! - No time counter travels in the cookie: the verifier tries the current
//!   and the previous [`SLOT_MS`] slot (a cookie is good for one to two
//!   slots), which leaves all the bits to the hash. A guessed ACK passes
//!   with probability `2 / 2^24` without timestamps and `2 / 2^29` with
//!   them (Linux: about `2^-22` in both cases, with 2 of its 24 check bits
//!   spent on the MSS).
//!
//! ECN is not negotiated through a cookie: border cannot know whether the
//! backend will agree, so its SYN-ACK never sets ECE (the client then runs
//! without ECN, as RFC 3168 §6.1.1 provides).
//!
//! Sans-IO and allocation-free: numbers in, numbers out.

use conf::flowhash::siphash24;

use crate::conntrack::FlowKey;

/// Length of one secret time slot in milliseconds. A cookie is accepted in
/// the slot it was made in and the next one.
pub const SLOT_MS: u64 = 64_000;

/// The MSS values a cookie can carry; the client's MSS is rounded down to
/// the largest one at or below it (536 below them all: RFC 879's default).
pub const MSS_TABLE: [u16; 8] = [536, 1220, 1280, 1360, 1400, 1440, 1460, 8960];

/// Low bits of the SYN-ACK's TSval that carry window scale and
/// SACK-permitted when the SYN had timestamps.
pub const TS_OPT_BITS: u32 = 6;
const TS_OPT_MASK: u32 = (1 << TS_OPT_BITS) - 1;

/// Window scale value meaning "the SYN had no window scale option".
const WS_NONE: u8 = 15;
/// Largest window scale (RFC 7323 §2.3).
pub const WS_MAX: u8 = 14;

/// What a client's SYN said that its connection needs later: the options
/// border replays to the backend in its SYN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SynOptions {
    /// The client's MSS, rounded down to [`MSS_TABLE`].
    pub mss: u16,
    /// The client's window scale shift (`None`: no window scaling).
    pub wscale: Option<u8>,
    pub sack: bool,
    /// The SYN carried timestamps.
    pub ts: bool,
}

/// A per-process secret (SipHash key). Never printed.
#[derive(Clone, Copy)]
pub struct CookieSecret([u8; 16]);

impl std::fmt::Debug for CookieSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CookieSecret(..)")
    }
}

impl CookieSecret {
    pub const fn from_bytes(k: [u8; 16]) -> CookieSecret {
        CookieSecret(k)
    }

    /// A fresh random secret: two outputs of the standard library's
    /// randomly keyed SipHash (seeded from the OS once per thread).
    pub fn random() -> CookieSecret {
        use std::hash::{BuildHasher, Hasher};
        let mut k = [0u8; 16];
        for (i, half) in k.chunks_exact_mut(8).enumerate() {
            let mut h = std::hash::RandomState::new().build_hasher();
            h.write_usize(i);
            h.write_u128(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos()),
            );
            half.copy_from_slice(&h.finish().to_le_bytes());
        }
        CookieSecret(k)
    }
}

/// What border's SYN-ACK carries: its ISN and, when the SYN had
/// timestamps, the bits to put into the low [`TS_OPT_BITS`] of its TSval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cookie {
    pub isn: u32,
    pub ts_bits: u32,
    /// The MSS the cookie carries (the client's, rounded down).
    pub mss: u16,
}

/// The index in [`MSS_TABLE`] of the largest value at or below `mss`.
fn mss_index(mss: u16) -> u8 {
    MSS_TABLE.iter().rposition(|&m| m <= mss).unwrap_or(0) as u8
}

fn ws_bits(ws: Option<u8>) -> u8 {
    match ws {
        Some(s) => s.min(WS_MAX),
        None => WS_NONE,
    }
}

fn ws_of(bits: u8) -> Option<u8> {
    (bits <= WS_MAX).then_some(bits)
}

/// The hash that authenticates a cookie: the top bits of SipHash-2-4.
fn mac(
    secret: &CookieSecret,
    slot: u32,
    key: &FlowKey,
    isn: u32,
    layout_ts: bool,
    data: u8,
    ts_bits: u8,
) -> u32 {
    let mut m = [0u8; 48];
    m[..4].copy_from_slice(&slot.to_le_bytes());
    m[4..20].copy_from_slice(&key.src);
    m[20..36].copy_from_slice(&key.dst);
    m[36..38].copy_from_slice(&key.sport.to_be_bytes());
    m[38..40].copy_from_slice(&key.dport.to_be_bytes());
    m[40..44].copy_from_slice(&isn.to_be_bytes());
    m[44] = u8::from(layout_ts);
    m[45] = data;
    m[46] = ts_bits;
    (siphash24(&secret.0, &m) >> 32) as u32
}

fn slot_of(now_ms: u64) -> u32 {
    (now_ms / SLOT_MS) as u32
}

/// The cookie for a client's SYN of flow `key` (client -> VIP) with ISN
/// `client_isn` and options `opts`, made at `now_ms`.
pub fn encode(
    secret: &CookieSecret,
    now_ms: u64,
    key: &FlowKey,
    client_isn: u32,
    opts: &SynOptions,
) -> Cookie {
    let mi = mss_index(opts.mss);
    let sack = u8::from(opts.sack);
    let ws = ws_bits(opts.wscale);
    let (data, ts_bits, k) = if opts.ts {
        (mi, ws | sack << 4, 3)
    } else {
        (mi | sack << 3 | ws << 4, 0, 8)
    };
    let h = mac(
        secret,
        slot_of(now_ms),
        key,
        client_isn,
        opts.ts,
        data,
        ts_bits,
    );
    Cookie {
        isn: (h & !((1u32 << k) - 1)) | u32::from(data),
        ts_bits: u32::from(ts_bits),
        mss: MSS_TABLE[usize::from(mi)],
    }
}

/// Checks the ACK that completes a cookie handshake: `seq` and `ack` are
/// its sequence and acknowledgement numbers, `tsecr` its timestamp echo if
/// it carries timestamps. The SYN options the cookie carries, or `None`
/// when it is not a cookie of ours for this flow (or too old).
pub fn verify(
    secret: &CookieSecret,
    now_ms: u64,
    key: &FlowKey,
    seq: u32,
    ack: u32,
    tsecr: Option<u32>,
) -> Option<SynOptions> {
    let isn = seq.wrapping_sub(1);
    let cookie = ack.wrapping_sub(1);
    let ts = tsecr.is_some();
    let k = if ts { 3 } else { 8 };
    let data = (cookie & ((1u32 << k) - 1)) as u8;
    let ts_bits = tsecr.map_or(0, |t| (t & TS_OPT_MASK) as u8);
    if ts && ts_bits >> 4 > 1 {
        return None; // the reserved (ECN) bit
    }
    let now = slot_of(now_ms);
    let good = [now, now.wrapping_sub(1)].into_iter().any(|slot| {
        let h = mac(secret, slot, key, isn, ts, data, ts_bits);
        h >> k == cookie >> k
    });
    if !good {
        return None;
    }
    let (mi, sack, ws) = if ts {
        (data, ts_bits >> 4 & 1, ts_bits & 0xF)
    } else {
        (data & 7, data >> 3 & 1, data >> 4)
    };
    Some(SynOptions {
        mss: MSS_TABLE[usize::from(mi & 7)],
        wscale: ws_of(ws),
        sack: sack != 0,
        ts,
    })
}

/// The TSval of border's SYN-ACK at `now_ms`: its millisecond clock with
/// the low bits replaced by the cookie's `ts_bits`.
pub fn synack_tsval(now_ms: u64, ts_bits: u32) -> u32 {
    (now_ms as u32 & !TS_OPT_MASK) | ts_bits
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: CookieSecret = CookieSecret::from_bytes(*b"0123456789abcdef");

    fn key4() -> FlowKey {
        FlowKey::v4([198, 51, 100, 7], [10, 1, 0, 100], 40000, 80, 6)
    }

    fn key6() -> FlowKey {
        let mut s = [0u8; 16];
        s[0] = 0x20;
        s[1] = 0x01;
        s[15] = 7;
        let mut d = s;
        d[15] = 100;
        FlowKey::v6(s, d, 40000, 443, 6)
    }

    const LINUX: SynOptions = SynOptions {
        mss: 1460,
        wscale: Some(7),
        sack: true,
        ts: true,
    };

    /// The ACK a client sends back for the cookie (seq, ack, tsecr).
    fn ack_for(c: &Cookie, isn: u32, opts: &SynOptions, now: u64) -> (u32, u32, Option<u32>) {
        let tsecr = opts.ts.then(|| synack_tsval(now, c.ts_bits));
        (isn.wrapping_add(1), c.isn.wrapping_add(1), tsecr)
    }

    #[test]
    fn options_survive_with_and_without_timestamps_v4_and_v6() {
        let now = 5 * SLOT_MS + 123;
        let cases = [
            LINUX,
            SynOptions { ts: false, ..LINUX },
            SynOptions {
                mss: 1440,
                wscale: None,
                sack: false,
                ts: false,
            },
            SynOptions {
                mss: 9000,
                wscale: Some(14),
                sack: false,
                ts: true,
            },
            SynOptions {
                mss: 1220,
                wscale: Some(0),
                sack: true,
                ts: false,
            },
        ];
        for key in [key4(), key6()] {
            for o in cases {
                let isn = 0xFFFF_FFFF; // wraps at +1
                let c = encode(&SECRET, now, &key, isn, &o);
                let (seq, ack, tsecr) = ack_for(&c, isn, &o, now);
                let want = SynOptions {
                    mss: if o.mss == 9000 { 8960 } else { o.mss },
                    ..o
                };
                assert_eq!(verify(&SECRET, now, &key, seq, ack, tsecr), Some(want));
            }
        }
    }

    #[test]
    fn mss_rounds_down_to_the_table() {
        assert_eq!(mss_index(100), 0);
        assert_eq!(mss_index(536), 0);
        assert_eq!(mss_index(1459), 5);
        assert_eq!(mss_index(1460), 6);
        assert_eq!(mss_index(65535), 7);
        let o = SynOptions { mss: 1450, ..LINUX };
        assert_eq!(encode(&SECRET, 0, &key4(), 1, &o).mss, 1440);
    }

    #[test]
    fn a_cookie_lives_one_to_two_slots() {
        let key = key4();
        let t0 = 10 * SLOT_MS + SLOT_MS - 1;
        let c = encode(&SECRET, t0, &key, 7, &LINUX);
        let (seq, ack, tsecr) = ack_for(&c, 7, &LINUX, t0);
        for (at, ok) in [
            (t0, true),
            (t0 + 1, true),
            (t0 + SLOT_MS, true),
            (t0 + SLOT_MS + 1, false),
        ] {
            assert_eq!(
                verify(&SECRET, at, &key, seq, ack, tsecr).is_some(),
                ok,
                "{at}"
            );
        }
    }

    #[test]
    fn anything_else_fails() {
        let now = 3 * SLOT_MS;
        for o in [LINUX, SynOptions { ts: false, ..LINUX }] {
            let key = key4();
            let c = encode(&SECRET, now, &key, 1000, &o);
            let (seq, ack, tsecr) = ack_for(&c, 1000, &o, now);
            assert!(verify(&SECRET, now, &key, seq, ack, tsecr).is_some());
            // Another ISN, another tuple, another secret.
            assert_eq!(verify(&SECRET, now, &key, seq + 1, ack, tsecr), None);
            let mut other = key;
            other.sport += 1;
            assert_eq!(verify(&SECRET, now, &other, seq, ack, tsecr), None);
            let mut other = key;
            other.src[15] ^= 1;
            assert_eq!(verify(&SECRET, now, &other, seq, ack, tsecr), None);
            let s2 = CookieSecret::from_bytes(*b"fedcba9876543210");
            assert_eq!(verify(&s2, now, &key, seq, ack, tsecr), None);
            // Every single-bit change of the cookie (the data bits too).
            for bit in 0..32 {
                let bad = ack ^ (1 << bit);
                assert_eq!(verify(&SECRET, now, &key, seq, bad, tsecr), None, "{bit}");
            }
            // The options in the TSecr cannot be altered, nor added or removed.
            match tsecr {
                Some(t) => {
                    for bit in 0..TS_OPT_BITS {
                        let bad = Some(t ^ (1 << bit));
                        assert_eq!(verify(&SECRET, now, &key, seq, ack, bad), None, "{bit}");
                    }
                    assert_eq!(verify(&SECRET, now, &key, seq, ack, None), None);
                }
                None => {
                    assert_eq!(verify(&SECRET, now, &key, seq, ack, Some(0)), None);
                }
            }
        }
    }

    #[test]
    fn random_acks_almost_never_pass() {
        // 2^20 guesses at 2^-23 each: a handful at most is expected.
        let key = key4();
        let mut x: u32 = 0x1234_5678;
        let mut passed = 0;
        for _ in 0..1 << 20 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            if verify(&SECRET, 0, &key, 1001, x, None).is_some() {
                passed += 1;
            }
        }
        assert!(passed <= 2, "{passed}");
    }

    #[test]
    fn fixed_bytes_give_a_fixed_cookie() {
        // The encoding is part of no contract, but it must not depend on
        // anything but its inputs (two workers with one secret agree).
        let a = encode(&SECRET, 1_000_000, &key4(), 0x0102_0304, &LINUX);
        let b = encode(&SECRET, 1_000_000 + 1, &key4(), 0x0102_0304, &LINUX);
        assert_eq!(a, b);
        assert_eq!(a.isn & 7, 6, "MSS index of 1460");
        assert_eq!(a.ts_bits, 7 | 1 << 4);
        assert_eq!(synack_tsval(0x1234_5678, a.ts_bits), 0x1234_5640 | 0x17);
    }
}
