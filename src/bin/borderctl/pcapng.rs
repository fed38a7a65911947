//! Just enough pcapng (draft-ietf-opsawg-pcapng) to pass captures through
//! block by block, keep only the packets of one direction, and merge
//! several captures into one section. DPDK 22.11's `dpdk-dumpcap` captures
//! rx and tx together (it marks each Enhanced Packet Block with its
//! direction, `epb_flags`) and only one port per run.

use std::collections::HashMap;

use std::io::{self, Read};

/// Section Header Block: starts every section and gives its byte order.
const SHB: u32 = 0x0A0D_0D0A;
/// Interface Description Block: one per captured port and section.
const IDB: u32 = 1;
/// Interface Statistics Block: dumpcap's received/dropped counts.
const ISB: u32 = 5;
/// Enhanced Packet Block: one captured frame.
const EPB: u32 = 6;
const BYTE_ORDER_MAGIC: u32 = 0x1A2B_3C4D;
/// `epb_flags`: bits 0-1 are the direction.
const OPT_EPB_FLAGS: u16 = 2;
const OPT_END: u16 = 0;
/// A block larger than this is refused rather than allocated.
const MAX_BLOCK: u32 = 16 << 20;

/// Which frames of a port to keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Frames the port received (before border rewrote them).
    Rx,
    /// Frames border sent out of the port (after the rewrite).
    Tx,
    /// Both.
    Both,
}

/// The direction a packet block records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    Inbound,
    Outbound,
    Unknown,
}

impl Direction {
    pub fn keeps(self, seen: Seen) -> bool {
        match self {
            Direction::Both => true,
            Direction::Rx => seen == Seen::Inbound,
            Direction::Tx => seen == Seen::Outbound,
        }
    }
}

/// One whole block as read (header, body and trailing length).
pub struct Block {
    pub bytes: Vec<u8>,
    big_endian: bool,
}

impl Block {
    fn u32_at(&self, at: usize) -> Option<u32> {
        let b: [u8; 4] = self.bytes.get(at..at + 4)?.try_into().ok()?;
        Some(if self.big_endian {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    }

    fn u16_at(&self, at: usize) -> Option<u16> {
        let b: [u8; 2] = self.bytes.get(at..at + 2)?.try_into().ok()?;
        Some(if self.big_endian {
            u16::from_be_bytes(b)
        } else {
            u16::from_le_bytes(b)
        })
    }

    fn set_u32_at(&mut self, at: usize, v: u32) {
        let b = if self.big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        };
        if let Some(dst) = self.bytes.get_mut(at..at + 4) {
            dst.copy_from_slice(&b);
        }
    }

    pub fn kind(&self) -> u32 {
        self.u32_at(0).unwrap_or(0)
    }

    pub fn is_packet(&self) -> bool {
        self.kind() == EPB
    }

    /// The direction in an Enhanced Packet Block's `epb_flags`
    /// ([`Seen::Unknown`] without one).
    pub fn direction(&self) -> Seen {
        // Header 8, interface id, timestamp (2), captured and original length.
        let Some(captured) = self.u32_at(20) else {
            return Seen::Unknown;
        };
        let mut at = 28 + (captured as usize).next_multiple_of(4);
        let end = self.bytes.len().saturating_sub(4);
        while at + 4 <= end {
            let (Some(code), Some(len)) = (self.u16_at(at), self.u16_at(at + 2)) else {
                break;
            };
            if code == OPT_END {
                break;
            }
            if code == OPT_EPB_FLAGS && len == 4 {
                return match self.u32_at(at + 4).map(|f| f & 3) {
                    Some(1) => Seen::Inbound,
                    Some(2) => Seen::Outbound,
                    _ => Seen::Unknown,
                };
            }
            at += 4 + usize::from(len).next_multiple_of(4);
        }
        Seen::Unknown
    }
}

/// Merges the blocks of several pcapng streams (one per port) into one
/// section: the first section header is kept, each stream's interfaces get
/// ids of their own, and packet and statistics blocks are renumbered.
#[derive(Default)]
pub struct Merger {
    wrote_header: bool,
    /// Per stream: its interface ids in order of description, as merged ids.
    interfaces: HashMap<usize, Vec<u32>>,
    next_id: u32,
}

impl Merger {
    /// `block` of stream `stream`, ready to write; `None` when it is left
    /// out (a later section header, or a block naming an interface its
    /// stream never described).
    pub fn merge(&mut self, stream: usize, mut block: Block) -> Option<Block> {
        let ids = self.interfaces.entry(stream).or_default();
        match block.kind() {
            SHB if self.wrote_header => return None,
            SHB => self.wrote_header = true,
            IDB => {
                ids.push(self.next_id);
                self.next_id += 1;
            }
            EPB | ISB => {
                let local = block.u32_at(8)?;
                let merged = *ids.get(local as usize)?;
                block.set_u32_at(8, merged);
            }
            _ => {}
        }
        Some(block)
    }
}

/// Reads a pcapng stream block by block.
pub struct Reader<R> {
    inner: R,
    big_endian: bool,
}

impl<R: Read> Reader<R> {
    pub fn new(inner: R) -> Reader<R> {
        Reader {
            inner,
            big_endian: false,
        }
    }

    /// The next block; `None` at a clean end of the stream.
    pub fn next_block(&mut self) -> io::Result<Option<Block>> {
        let mut head = [0u8; 12];
        let got = read_full(&mut self.inner, &mut head)?;
        if got == 0 {
            return Ok(None);
        }
        if got < head.len() {
            return Err(bad("stream ends inside a block header"));
        }
        let word = |at: usize, big: bool| {
            let b: [u8; 4] = head[at..at + 4].try_into().expect("4 bytes");
            if big {
                u32::from_be_bytes(b)
            } else {
                u32::from_le_bytes(b)
            }
        };
        if word(0, false) == SHB {
            // The section's byte order comes from its magic.
            self.big_endian = match (word(8, false), word(8, true)) {
                (BYTE_ORDER_MAGIC, _) => false,
                (_, BYTE_ORDER_MAGIC) => true,
                _ => return Err(bad("section header without the byte-order magic")),
            };
        }
        let len = word(4, self.big_endian);
        if len < 12 || len % 4 != 0 || len > MAX_BLOCK {
            return Err(bad(&format!("block length {len} is invalid")));
        }
        let mut bytes = vec![0u8; len as usize];
        bytes[..12].copy_from_slice(&head);
        if read_full(&mut self.inner, &mut bytes[12..])? < len as usize - 12 {
            return Err(bad("stream ends inside a block"));
        }
        Ok(Some(Block {
            bytes,
            big_endian: self.big_endian,
        }))
    }
}

fn bad(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("pcapng: {why}"))
}

/// Reads until `buf` is full or the stream ends; returns the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(kind: u32, body: &[u8], big: bool) -> Vec<u8> {
        let w = |v: u32| {
            if big {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        let len = 12 + body.len() as u32;
        [&w(kind)[..], &w(len), body, &w(len)].concat()
    }

    fn shb(big: bool) -> Vec<u8> {
        let w = |v: u32| {
            if big {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        let body = [&w(BYTE_ORDER_MAGIC)[..], &[1, 0, 0, 0], &[0xff; 8]].concat();
        block(SHB, &body, big)
    }

    /// An EPB with a 5-byte frame and, when given, an epb_flags option.
    fn epb(flags: Option<u32>, big: bool) -> Vec<u8> {
        let w = |v: u32| {
            if big {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        let h = |v: u16| {
            if big {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        let mut body = [&w(0)[..], &w(1), &w(2), &w(5), &w(5)].concat();
        body.extend_from_slice(&[1, 2, 3, 4, 5, 0, 0, 0]);
        // An unrelated option first (comment, 3 bytes, padded).
        body.extend_from_slice(&[&h(1)[..], &h(3), b"abc\0"].concat());
        if let Some(f) = flags {
            body.extend_from_slice(&[&h(OPT_EPB_FLAGS)[..], &h(4), &w(f)].concat());
        }
        body.extend_from_slice(&[0, 0, 0, 0]);
        block(EPB, &body, big)
    }

    fn read_all(bytes: &[u8]) -> io::Result<Vec<Block>> {
        let mut r = Reader::new(bytes);
        let mut out = Vec::new();
        while let Some(b) = r.next_block()? {
            out.push(b);
        }
        Ok(out)
    }

    #[test]
    fn directions_from_epb_flags_in_either_byte_order() {
        for big in [false, true] {
            let stream = [
                shb(big),
                block(1, &[0; 8], big),
                epb(Some(1), big),
                epb(Some(2), big),
                epb(None, big),
                epb(Some(0x100), big),
            ]
            .concat();
            let blocks = read_all(&stream).unwrap();
            let seen: Vec<_> = blocks
                .iter()
                .filter(|b| b.is_packet())
                .map(Block::direction)
                .collect();
            assert_eq!(
                seen,
                [Seen::Inbound, Seen::Outbound, Seen::Unknown, Seen::Unknown],
                "big endian {big}"
            );
            let bytes: Vec<u8> = blocks.iter().flat_map(|b| b.bytes.clone()).collect();
            assert_eq!(bytes, stream, "blocks pass through unchanged");
        }
    }

    #[test]
    fn merged_streams_keep_one_header_and_renumber_interfaces() {
        let idb = || block(IDB, &[1, 0, 0, 0, 0, 0, 0, 0], false);
        let isb = || block(ISB, &[0, 0, 0, 0, 9, 9, 9, 9, 9, 9, 9, 9], false);
        let a = read_all(&[shb(false), idb(), epb(Some(1), false), isb()].concat()).unwrap();
        let b = read_all(&[shb(false), idb(), epb(Some(2), false), isb()].concat()).unwrap();
        let mut m = Merger::default();
        let mut out = Vec::new();
        // Interleaved as two dumpcaps' output arrives.
        let order = [
            (0, 0),
            (1, 0),
            (1, 1),
            (0, 1),
            (1, 2),
            (0, 2),
            (0, 3),
            (1, 3),
        ];
        let mut a = a.into_iter().map(Some).collect::<Vec<_>>();
        let mut b = b.into_iter().map(Some).collect::<Vec<_>>();
        for (s, i) in order {
            let blk = if s == 0 { a[i].take() } else { b[i].take() }.unwrap();
            if let Some(kept) = m.merge(s, blk) {
                out.push(kept);
            }
        }
        let kinds: Vec<u32> = out.iter().map(Block::kind).collect();
        assert_eq!(kinds, [SHB, IDB, IDB, EPB, EPB, ISB, ISB]);
        // Stream 1 described its interface first: it is interface 0.
        let ids: Vec<(Seen, u32)> = out
            .iter()
            .filter(|b| b.is_packet())
            .map(|b| (b.direction(), b.u32_at(8).unwrap()))
            .collect();
        assert_eq!(ids, [(Seen::Outbound, 0), (Seen::Inbound, 1)]);
        let isb_ids: Vec<u32> = out
            .iter()
            .filter(|b| b.kind() == ISB)
            .map(|b| b.u32_at(8).unwrap())
            .collect();
        assert_eq!(isb_ids, [1, 0]);
        // A packet naming an interface its stream never described is dropped.
        let stray = read_all(&[shb(false), epb(Some(1), false)].concat()).unwrap();
        let mut m = Merger::default();
        let kept: Vec<_> = stray.into_iter().filter_map(|b| m.merge(0, b)).collect();
        assert_eq!(kept.len(), 1, "only the header");
    }

    #[test]
    fn direction_choice_keeps_its_frames() {
        assert!(Direction::Rx.keeps(Seen::Inbound));
        assert!(!Direction::Rx.keeps(Seen::Outbound));
        assert!(!Direction::Tx.keeps(Seen::Inbound));
        assert!(Direction::Tx.keeps(Seen::Outbound));
        assert!(Direction::Both.keeps(Seen::Unknown));
    }

    #[test]
    fn truncated_or_bad_streams_are_errors_not_panics() {
        let good = [shb(false), epb(Some(1), false)].concat();
        for cut in 1..good.len() {
            let r = read_all(&good[..cut]);
            if cut != shb(false).len() {
                assert!(r.is_err(), "cut at {cut}");
            }
        }
        let mut odd = shb(false);
        odd[4] = 13;
        assert!(read_all(&odd).is_err());
        let mut no_magic = shb(false);
        no_magic[8] = 0;
        assert!(read_all(&no_magic).is_err());
        assert_eq!(read_all(&[]).unwrap().len(), 0);
        // An EPB whose captured length runs past its end has no direction.
        let mut short = epb(Some(1), false);
        short[20] = 200;
        let b = Block {
            bytes: short,
            big_endian: false,
        };
        assert_eq!(b.direction(), Seen::Unknown);
    }
}
