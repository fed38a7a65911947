//! Classic pcap files: frames read back from a capture, frames written
//! for a replay.

use std::path::Path;

/// Reads a classic pcap file (microsecond or nanosecond, little endian) into frames.
pub fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    assert!(b.len() >= 24, "pcap {} too short", path.display());
    let magic = u32::from_le_bytes(b[0..4].try_into().unwrap());
    assert!(
        magic == 0xa1b2_c3d4 || magic == 0xa1b2_3c4d,
        "not a little-endian pcap: {magic:#x}"
    );
    let mut frames = Vec::new();
    let mut off = 24;
    while off + 16 <= b.len() {
        let incl = u32::from_le_bytes(b[off + 8..off + 12].try_into().unwrap()) as usize;
        off += 16;
        frames.push(b[off..off + incl].to_vec());
        off += incl;
    }
    frames
}

/// Writes frames as a classic microsecond pcap (Ethernet link type).
pub fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut b = Vec::new();
    b.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    b.extend_from_slice(&2u16.to_le_bytes());
    b.extend_from_slice(&4u16.to_le_bytes());
    b.extend_from_slice(&0i32.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&65535u32.to_le_bytes());
    b.extend_from_slice(&1u32.to_le_bytes());
    for (i, f) in frames.iter().enumerate() {
        b.extend_from_slice(&(i as u32).to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&(f.len() as u32).to_le_bytes());
        b.extend_from_slice(&(f.len() as u32).to_le_bytes());
        b.extend_from_slice(f);
    }
    std::fs::write(path, b).unwrap();
}
