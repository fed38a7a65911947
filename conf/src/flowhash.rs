//! Stable keyed flow hash: SipHash-2-4 over a fixed byte encoding of the flow.
//!
//! This hash picks the Maglev slot for a new flow, so it is part of the
//! contract between appliances: several boxes behind one ECMP group must send
//! the same flow to the same backend, whatever build, host, CPU architecture or
//! restart they are on. That rules out `ahash`/`std` `RandomState` (randomised
//! or build-dependent) and pins down both the algorithm and the encoding:
//!
//! * algorithm: SipHash-2-4 (Aumasson & Bernstein), 64-bit output, with the key
//!   read as two little-endian `u64` words (`k0 = key[0..8]`, `k1 = key[8..16]`),
//!   exactly as in the reference implementation; checked against its published
//!   test vectors.
//! * encoding (network byte order, no padding):
//!   - IPv4: `src(4) ‖ dst(4) ‖ sport(2, BE) ‖ dport(2, BE) ‖ proto(1)` = 13 bytes;
//!   - IPv6: `src(16) ‖ dst(16) ‖ sport(2, BE) ‖ dport(2, BE) ‖ proto(1)` = 37 bytes.
//!
//!   `hash_v4(..) == hash_bytes(&encode_v4(..))` (same for v6), so any other
//!   implementation (a C tool, a test harness) can reproduce the value.
//!   SipHash mixes the length into the last block, so v4 and v6 encodings
//!   cannot collide structurally.
//!
//! Changing anything here re-shuffles every flow on upgrade; the known-answer
//! tests exist to make such a change impossible to do by accident.

use core::fmt;

/// Length of the IPv4 flow encoding.
pub const FLOW_V4_LEN: usize = 13;
/// Length of the IPv6 flow encoding.
pub const FLOW_V6_LEN: usize = 37;

/// The byte string that [`FlowHasher::hash_v4`] hashes.
#[inline]
pub const fn encode_v4(
    src: [u8; 4],
    dst: [u8; 4],
    sport: u16,
    dport: u16,
    proto: u8,
) -> [u8; FLOW_V4_LEN] {
    let sp = sport.to_be_bytes();
    let dp = dport.to_be_bytes();
    [
        src[0], src[1], src[2], src[3], dst[0], dst[1], dst[2], dst[3], sp[0], sp[1], dp[0], dp[1],
        proto,
    ]
}

/// The byte string that [`FlowHasher::hash_v6`] hashes.
#[inline]
pub const fn encode_v6(
    src: [u8; 16],
    dst: [u8; 16],
    sport: u16,
    dport: u16,
    proto: u8,
) -> [u8; FLOW_V6_LEN] {
    let mut out = [0u8; FLOW_V6_LEN];
    let mut i = 0;
    while i < 16 {
        out[i] = src[i];
        out[16 + i] = dst[i];
        i += 1;
    }
    let sp = sport.to_be_bytes();
    let dp = dport.to_be_bytes();
    out[32] = sp[0];
    out[33] = sp[1];
    out[34] = dp[0];
    out[35] = dp[1];
    out[36] = proto;
    out
}

/// SipHash internal state (v0..v3).
#[derive(Clone, Copy)]
struct State {
    v0: u64,
    v1: u64,
    v2: u64,
    v3: u64,
}

impl State {
    #[inline(always)]
    const fn new(key: &[u8; 16]) -> Self {
        let k0 = u64::from_le_bytes([
            key[0], key[1], key[2], key[3], key[4], key[5], key[6], key[7],
        ]);
        let k1 = u64::from_le_bytes([
            key[8], key[9], key[10], key[11], key[12], key[13], key[14], key[15],
        ]);
        State {
            v0: k0 ^ 0x736f_6d65_7073_6575,
            v1: k1 ^ 0x646f_7261_6e64_6f6d,
            v2: k0 ^ 0x6c79_6765_6e65_7261,
            v3: k1 ^ 0x7465_6462_7974_6573,
        }
    }

    #[inline(always)]
    fn round(&mut self) {
        self.v0 = self.v0.wrapping_add(self.v1);
        self.v1 = self.v1.rotate_left(13);
        self.v1 ^= self.v0;
        self.v0 = self.v0.rotate_left(32);
        self.v2 = self.v2.wrapping_add(self.v3);
        self.v3 = self.v3.rotate_left(16);
        self.v3 ^= self.v2;
        self.v0 = self.v0.wrapping_add(self.v3);
        self.v3 = self.v3.rotate_left(21);
        self.v3 ^= self.v0;
        self.v2 = self.v2.wrapping_add(self.v1);
        self.v1 = self.v1.rotate_left(17);
        self.v1 ^= self.v2;
        self.v2 = self.v2.rotate_left(32);
    }

    /// One message word, c = 2 compression rounds.
    #[inline(always)]
    fn compress(&mut self, m: u64) {
        self.v3 ^= m;
        self.round();
        self.round();
        self.v0 ^= m;
    }

    /// Last word (tail bytes with `len mod 256` in the top byte), then d = 4
    /// finalization rounds.
    #[inline(always)]
    fn finish(mut self, last: u64) -> u64 {
        self.compress(last);
        self.v2 ^= 0xff;
        self.round();
        self.round();
        self.round();
        self.round();
        self.v0 ^ self.v1 ^ self.v2 ^ self.v3
    }

    #[inline]
    fn hash(self, data: &[u8]) -> u64 {
        let mut s = self;
        let mut chunks = data.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            s.compress(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        // The reference takes the length modulo 256 into the top byte.
        w[7] = data.len() as u8;
        s.finish(u64::from_le_bytes(w))
    }
}

/// SipHash-2-4 of `data` under `key` (reference key layout).
#[inline]
pub fn siphash24(key: &[u8; 16], data: &[u8]) -> u64 {
    State::new(key).hash(data)
}

/// Keyed, stable flow hash. Build once per table generation from the config's
/// 16-byte `flow_hash_key`; hashing allocates nothing and does not branch on
/// the data.
#[derive(Clone)]
pub struct FlowHasher {
    init: State,
}

impl fmt::Debug for FlowHasher {
    /// Never prints the key (it decides which backend gets which flow).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlowHasher").finish_non_exhaustive()
    }
}

impl FlowHasher {
    /// A hasher keyed by `key` (`k0 = key[0..8]`, `k1 = key[8..16]`, little endian).
    pub const fn new(key: [u8; 16]) -> Self {
        FlowHasher {
            init: State::new(&key),
        }
    }

    /// Hash of an IPv4 flow, equal to `hash_bytes(&encode_v4(..))`.
    #[inline]
    pub fn hash_v4(&self, src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, proto: u8) -> u64 {
        let mut s = self.init;
        s.compress(u64::from_le_bytes([
            src[0], src[1], src[2], src[3], dst[0], dst[1], dst[2], dst[3],
        ]));
        let sp = sport.to_be_bytes();
        let dp = dport.to_be_bytes();
        s.finish(u64::from_le_bytes([
            sp[0],
            sp[1],
            dp[0],
            dp[1],
            proto,
            0,
            0,
            FLOW_V4_LEN as u8,
        ]))
    }

    /// Hash of an IPv6 flow, equal to `hash_bytes(&encode_v6(..))`.
    #[inline]
    pub fn hash_v6(&self, src: [u8; 16], dst: [u8; 16], sport: u16, dport: u16, proto: u8) -> u64 {
        let mut s = self.init;
        let [a, b] = split16(src);
        let [c, d] = split16(dst);
        s.compress(a);
        s.compress(b);
        s.compress(c);
        s.compress(d);
        let sp = sport.to_be_bytes();
        let dp = dport.to_be_bytes();
        s.finish(u64::from_le_bytes([
            sp[0],
            sp[1],
            dp[0],
            dp[1],
            proto,
            0,
            0,
            FLOW_V6_LEN as u8,
        ]))
    }

    /// Hash of an arbitrary byte string (plain SipHash-2-4 under this key).
    #[inline]
    pub fn hash_bytes(&self, data: &[u8]) -> u64 {
        self.init.hash(data)
    }
}

#[inline(always)]
fn split16(x: [u8; 16]) -> [u64; 2] {
    [
        u64::from_le_bytes([x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]]),
        u64::from_le_bytes([x[8], x[9], x[10], x[11], x[12], x[13], x[14], x[15]]),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 64 SipHash-2-4 test vectors of the reference implementation
    /// (`vectors.h`, `vectors_sip64`): key 00..0f, message 00..(len-1) for
    /// len = 0..63, output read as a little-endian u64.
    const REFERENCE: [u64; 64] = [
        0x726fdb47dd0e0e31,
        0x74f839c593dc67fd,
        0x0d6c8009d9a94f5a,
        0x85676696d7fb7e2d,
        0xcf2794e0277187b7,
        0x18765564cd99a68d,
        0xcbc9466e58fee3ce,
        0xab0200f58b01d137,
        0x93f5f5799a932462,
        0x9e0082df0ba9e4b0,
        0x7a5dbbc594ddb9f3,
        0xf4b32f46226bada7,
        0x751e8fbc860ee5fb,
        0x14ea5627c0843d90,
        0xf723ca908e7af2ee,
        0xa129ca6149be45e5,
        0x3f2acc7f57c29bdb,
        0x699ae9f52cbe4794,
        0x4bc1b3f0968dd39c,
        0xbb6dc91da77961bd,
        0xbed65cf21aa2ee98,
        0xd0f2cbb02e3b67c7,
        0x93536795e3a33e88,
        0xa80c038ccd5ccec8,
        0xb8ad50c6f649af94,
        0xbce192de8a85b8ea,
        0x17d835b85bbb15f3,
        0x2f2e6163076bcfad,
        0xde4daaaca71dc9a5,
        0xa6a2506687956571,
        0xad87a3535c49ef28,
        0x32d892fad841c342,
        0x7127512f72f27cce,
        0xa7f32346f95978e3,
        0x12e0b01abb051238,
        0x15e034d40fa197ae,
        0x314dffbe0815a3b4,
        0x027990f029623981,
        0xcadcd4e59ef40c4d,
        0x9abfd8766a33735c,
        0x0e3ea96b5304a7d0,
        0xad0c42d6fc585992,
        0x187306c89bc215a9,
        0xd4a60abcf3792b95,
        0xf935451de4f21df2,
        0xa9538f0419755787,
        0xdb9acddff56ca510,
        0xd06c98cd5c0975eb,
        0xe612a3cb9ecba951,
        0xc766e62cfcadaf96,
        0xee64435a9752fe72,
        0xa192d576b245165a,
        0x0a8787bf8ecb74b2,
        0x81b3e73d20b49b6f,
        0x7fa8220ba3b2ecea,
        0x245731c13ca42499,
        0xb78dbfaf3a8d83bd,
        0xea1ad565322a1a0b,
        0x60e61c23a3795013,
        0x6606d7e446282b93,
        0x6ca4ecb15c5f91e1,
        0x9f626da15c9625f3,
        0xe51b38608ef25f57,
        0x958a324ceb064572,
    ];

    const KEY_SEQ: [u8; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];
    const KEY_BORDER: [u8; 16] = *b"border-flow-key!";

    #[test]
    fn reference_vectors() {
        let msg: Vec<u8> = (0u8..64).collect();
        let h = FlowHasher::new(KEY_SEQ);
        for (len, &want) in REFERENCE.iter().enumerate() {
            assert_eq!(siphash24(&KEY_SEQ, &msg[..len]), want, "len {len}");
            assert_eq!(h.hash_bytes(&msg[..len]), want, "len {len}");
        }
    }

    /// Flow vectors computed by an independent implementation (checked against
    /// the same reference vectors) from the documented encoding. If one of
    /// these changes, every appliance re-shuffles its flows: don't.
    #[test]
    fn flow_known_answers() {
        let cases: [([u8; 16], u64, u64, u64, u64, u64); 3] = [
            (
                KEY_SEQ,
                0xb928cd1c6a1ff49d,
                0xfd443ece88a36519,
                0xe3a06a40c25e2e82,
                0xe81d88714676b293,
                0x680e1d4ac6c83a8c,
            ),
            (
                KEY_BORDER,
                0x93b2a7b93a2c3715,
                0x5a4bc1e65865d56f,
                0x15bf77432f123af0,
                0xacc5fa4cd6c76c39,
                0xd99958bc5e453cdc,
            ),
            (
                [0; 16],
                0x1c86be432e011fd5,
                0x7c777e5a03d5b1d1,
                0xdd6e656777f8243c,
                0x7dc7c537b3b61050,
                0xaa2b5d757f74f3b0,
            ),
        ];
        let v6 = |s: &str| s.parse::<std::net::Ipv6Addr>().unwrap().octets();
        for (key, a, b, c, d, e) in cases {
            let h = FlowHasher::new(key);
            assert_eq!(h.hash_v4([10, 0, 0, 1], [192, 0, 2, 10], 12345, 443, 6), a);
            assert_eq!(
                h.hash_v4([198, 51, 100, 7], [203, 0, 113, 80], 65535, 80, 17),
                b
            );
            assert_eq!(h.hash_v4([0; 4], [0; 4], 0, 0, 0), c);
            assert_eq!(
                h.hash_v6(v6("2001:db8::1"), v6("2001:db8::80"), 40000, 443, 6),
                d
            );
            assert_eq!(h.hash_v6(v6("fe80::1"), v6("ff02::1"), 0, 0, 58), e);
        }
    }

    #[test]
    fn fixed_forms_equal_byte_form() {
        let h = FlowHasher::new(KEY_BORDER);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..1000 {
            let (a, b, c) = (next(), next(), next());
            let src4 = (a as u32).to_be_bytes();
            let dst4 = ((a >> 32) as u32).to_be_bytes();
            let (sp, dp, pr) = (b as u16, (b >> 16) as u16, (b >> 32) as u8);
            assert_eq!(
                h.hash_v4(src4, dst4, sp, dp, pr),
                h.hash_bytes(&encode_v4(src4, dst4, sp, dp, pr))
            );
            let mut src6 = [0u8; 16];
            let mut dst6 = [0u8; 16];
            src6[..8].copy_from_slice(&a.to_le_bytes());
            src6[8..].copy_from_slice(&b.to_le_bytes());
            dst6[..8].copy_from_slice(&c.to_le_bytes());
            dst6[8..].copy_from_slice(&next().to_le_bytes());
            assert_eq!(
                h.hash_v6(src6, dst6, sp, dp, pr),
                h.hash_bytes(&encode_v6(src6, dst6, sp, dp, pr))
            );
        }
    }

    #[test]
    fn key_matters_and_debug_hides_it() {
        let f = |h: &FlowHasher| h.hash_v4([1, 2, 3, 4], [5, 6, 7, 8], 1, 2, 6);
        assert_ne!(
            f(&FlowHasher::new(KEY_SEQ)),
            f(&FlowHasher::new(KEY_BORDER))
        );
        let dbg = format!("{:?}", FlowHasher::new(KEY_BORDER));
        assert_eq!(dbg, "FlowHasher { .. }");
    }
}
