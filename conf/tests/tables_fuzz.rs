//! The tables reader on hostile bytes: random bit flips, truncation, and
//! forged fields behind valid checksums. `view()` must refuse with an error
//! (naming the problem) or return exactly a generation that was published;
//! it must never panic.

mod common;

mod tables_fuzz {
    use std::net::IpAddr;
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    use super::common::{region_vip, three_vips, v4};
    use conf::tables::*;
    use conf::Mode;
    use proptest::prelude::*;

    struct TmpPath(PathBuf);

    impl TmpPath {
        fn new(name: &str) -> Self {
            TmpPath(
                std::env::temp_dir()
                    .join(format!("border-tables-fuzz-{}-{name}", std::process::id())),
            )
        }
    }

    impl Drop for TmpPath {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    /// VIP `id` on port 80 + `id` whose backends all weigh 1 + `stamp`.
    fn vip(
        id: u32,
        addr: IpAddr,
        backends: &[IpAddr],
        m: u32,
        mode: Mode,
        stamp: u32,
    ) -> Arc<VipTable> {
        Arc::new(VipTable {
            port: 80 + id as u16,
            ..region_vip(id, addr, backends, m, mode, 1 + stamp)
        })
    }

    fn generations() -> (Generation, Generation) {
        let g1 = three_vips(|id, addr, backends, m, mode| vip(id, addr, backends, m, mode, 0));
        let mut g2 = g1.clone();
        let v4_backends: Vec<IpAddr> = (1..=5).map(v4).collect();
        g2.vips[0] = vip(0, v4(100), &v4_backends, 61, Mode::FullNat, 1);
        (g1, g2)
    }

    /// The bytes of a region with generations 1 and 2 published (1's
    /// changed block retired but intact), and both models.
    fn region(name: &str) -> (Vec<u8>, Generation, Generation) {
        let (g1, g2) = generations();
        let path = TmpPath::new(&format!("{name}-source"));
        let mut w = TablesWriter::create(&path.0, 64 << 10).unwrap();
        w.publish(&g1, &[]).unwrap();
        w.publish(&g2, &[1]).unwrap();
        let bytes = std::fs::read(&path.0).unwrap();
        (bytes, g1, g2)
    }

    fn u64_at(b: &[u8], o: usize) -> u64 {
        u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
    }

    fn put_u64(b: &mut [u8], o: usize, v: u64) {
        b[o..o + 8].copy_from_slice(&v.to_le_bytes());
    }

    fn put_u32(b: &mut [u8], o: usize, v: u32) {
        b[o..o + 4].copy_from_slice(&v.to_le_bytes());
    }

    /// Offset of the published root.
    fn root_of(b: &[u8]) -> usize {
        ((u64_at(b, 32) & ((1 << ROOT_BITS) - 1)) * UNIT) as usize
    }

    /// Offset of VIP `i`'s block (per the root's slot).
    fn vip_of(b: &[u8], i: usize) -> usize {
        u64_at(b, root_of(b) + 64 + 32 * i) as usize
    }

    /// Recomputes a block's checksum from its (possibly forged) length,
    /// clamped to the file.
    fn fix_block(b: &mut [u8], off: usize) {
        let len = (u64_at(b, off + 16) as usize).clamp(8, b.len() - off);
        let sum = block_checksum(&b[off..off + len]);
        put_u64(b, off, sum);
    }

    /// After editing VIP `i`'s block: fix its checksum, the root's slot and
    /// the root's checksum, so validation has to look past the checksums.
    fn fix_vip(b: &mut [u8], i: usize) {
        let off = vip_of(b, i);
        fix_block(b, off);
        let root = root_of(b);
        let sum = u64_at(b, off);
        put_u64(b, root + 64 + 32 * i + 16, sum);
        fix_block(b, root);
    }

    /// Writes `bytes` to `path` and views the current generation.
    fn view_of(path: &Path, bytes: &[u8]) -> Result<Generation, String> {
        std::fs::write(path, bytes).unwrap();
        let r = TablesReader::open(path).map_err(|e| e.to_string())?;
        let v = r.view_current().map_err(|e| e.to_string())?;
        // Touch everything a worker would.
        for x in v.vips() {
            let n = x.backends().len();
            assert!(x.ring().iter().all(|&e| (e as usize) < n));
            for h in [0u64, 1, 12345, u64::MAX] {
                if let Some((i, b)) = x.pick(h) {
                    assert_eq!(x.backends()[i as usize], *b);
                }
            }
            let _ = (x.name(), x.addr(), x.mode(), x.flags(), x.fail_open());
        }
        Ok(v.to_generation())
    }

    fn err_of(path: &Path, bytes: &[u8]) -> String {
        match view_of(path, bytes) {
            Ok(g) => panic!("accepted {g:?}"),
            Err(e) => e,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        /// Random bit flips anywhere in the used part of the file: refused,
        /// or exactly one of the published generations (a flip in free
        /// space, or in header bytes readers do not use).
        #[test]
        fn random_flips_never_panic_and_never_lie(
            flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..12),
        ) {
            let (mut bytes, g1, g2) = region("flips");
            let path = TmpPath::new("flips");
            // Most flips where the data is: the header and the used arena.
            let used = (u64_at(&bytes, 40) as usize).min(bytes.len());
            for (at, mask) in &flips {
                let i = at.index(used);
                bytes[i] ^= mask;
            }
            if let Ok(g) = view_of(&path.0, &bytes) {
                prop_assert!(g == g2 || g == g1, "accepted a generation that was never published");
            }
        }

        /// A truncated file is refused; with a header forged to match the
        /// shorter length, whatever no longer fits is refused by bounds checks.
        #[test]
        fn truncated_files_are_refused(cut in any::<prop::sample::Index>()) {
            let (bytes, g1, g2) = region("truncated");
            let path = TmpPath::new("truncated");
            let len = cut.index(bytes.len());
            prop_assert!(view_of(&path.0, &bytes[..len]).is_err());
            if len >= HEADER_LEN as usize {
                let mut short = bytes[..len / 64 * 64].to_vec();
                let n = short.len() as u64;
                put_u64(&mut short, 16, n);
                if let Ok(g) = view_of(&path.0, &short) {
                    prop_assert!(g == g2 || g == g1);
                }
            }
        }

        /// Forged values behind valid checksums: any 4- or 8-byte field of
        /// the root or of a VIP block replaced by an arbitrary value, then
        /// every checksum recomputed. Structural validation must refuse
        /// whatever would be unsafe, and never panic.
        #[test]
        fn forged_fields_behind_valid_checksums(
            which in 0usize..4,
            at in any::<prop::sample::Index>(),
            value in prop_oneof![any::<u64>(), 0u64..70_000, Just(u64::MAX)],
            wide in any::<bool>(),
        ) {
            let (mut bytes, _, _) = region("forged");
            let path = TmpPath::new("forged");
            let root = root_of(&bytes);
            let (off, len) = if which == 3 {
                (root, u64_at(&bytes, root + 16) as usize)
            } else {
                let o = vip_of(&bytes, which);
                (o, u64_at(&bytes, o + 16) as usize)
            };
            // A field after the checksum, 4-aligned.
            let field = off + 8 + at.index((len - 8) / 4) * 4;
            if wide && field + 8 <= off + len {
                put_u64(&mut bytes, field, value);
            } else {
                put_u32(&mut bytes, field, value as u32);
            }
            if which == 3 {
                fix_block(&mut bytes, root);
            } else {
                fix_vip(&mut bytes, which);
            }
            let _ = view_of(&path.0, &bytes);
        }

        /// A published word with any value: refused or a real generation.
        #[test]
        fn forged_published_word(word in any::<u64>()) {
            let (mut bytes, g1, g2) = region("word");
            let path = TmpPath::new("word");
            put_u64(&mut bytes, 32, word);
            if let Ok(g) = view_of(&path.0, &bytes) {
                prop_assert!(g == g1 || g == g2);
            }
        }
    }

    #[test]
    fn offsets_pointing_outside_are_refused() {
        let (bytes, g1, g2) = region("outside");
        let path = TmpPath::new("outside");
        assert_eq!(view_of(&path.0, &bytes).unwrap(), g2);
        let len = bytes.len() as u64;
        let root = root_of(&bytes);
        let edit = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut b = bytes.clone();
            f(&mut b);
            err_of(&path.0, &b)
        };

        // The published word.
        let e = edit(&|b| put_u64(b, 32, (2 << ROOT_BITS) | (len / UNIT)));
        assert!(e.ends_with(&format!("generation 2 refused: block at {len:#x} of 32 bytes ends past the region ({len} bytes)")), "{e}");
        let e = edit(&|b| put_u64(b, 32, (2 << ROOT_BITS) | 1));
        assert_eq!(
            e,
            "generation 2 refused: root offset 0x40 is not a 64-aligned arena offset"
        );
        let e = edit(&|b| put_u64(b, 32, (3 << ROOT_BITS) | (root as u64 / UNIT)));
        assert_eq!(
            e,
            "generation 3 refused: root block is for generation 2, the published word says 3"
        );

        // A root slot pointing outside the region, or misaligned.
        let e = edit(&|b| {
            put_u64(b, root + 64 + 32, len - 64);
            fix_block(b, root);
        });
        assert!(
            e.contains(&format!(
                "block at {:#x} of 32 bytes ends past the region",
                len - 64
            )) || e.contains("magic"),
            "{e}"
        );
        let e = edit(&|b| {
            put_u64(b, root + 64 + 32, u64::MAX - 63);
            fix_block(b, root);
        });
        assert!(e.contains("ends past the region"), "{e}");
        let e = edit(&|b| {
            put_u64(b, root + 64, root as u64 + 8);
            fix_block(b, root);
        });
        assert!(e.contains("is not a 64-aligned arena offset"), "{e}");
        // A root listing more VIPs than it holds.
        let e = edit(&|b| {
            put_u32(b, root + 40, 4);
            fix_block(b, root);
        });
        assert!(e.contains("root lists 4 VIPs in 160 bytes"), "{e}");
        // A slot whose checksum does not match its block.
        let e = edit(&|b| {
            b[root + 64 + 16] ^= 1;
            fix_block(b, root);
        });
        assert_eq!(
            e,
            "generation 2 refused: root slot 0: checksum disagrees with the VIP block"
        );

        // Inside a VIP block (re-checksummed): ring out of the block, a ring
        // entry that is not a backend, a bad enum byte.
        let v0 = vip_of(&bytes, 0);
        let e = edit(&|b| {
            put_u32(b, v0 + 32 + 44, 0xffff_fff8); // ring_off
            fix_vip(b, 0);
        });
        assert!(
            e.ends_with("ring lies outside the block or is misaligned"),
            "{e}"
        );
        let e = edit(&|b| {
            let ring = v0 + u32::from_le_bytes(b[v0 + 76..v0 + 80].try_into().unwrap()) as usize;
            put_u32(b, ring + 4 * 7, 5);
            fix_vip(b, 0);
        });
        assert_eq!(
            e,
            "generation 2 refused: vip slot 0: ring[7] = 5, but there are 5 backends"
        );
        let e = edit(&|b| {
            b[v0 + 32 + 29] = 99; // proto
            fix_vip(b, 0);
        });
        assert!(e.ends_with("proto = 99 is out of range"), "{e}");
        // Backend 1's state byte: 3 is a killed backend, anything past it
        // is refused (a reader never guesses what a newer writer meant).
        let state_at = |b: &[u8]| {
            let backends =
                v0 + u32::from_le_bytes(b[v0 + 72..v0 + 76].try_into().unwrap()) as usize;
            backends + 32 + 27
        };
        assert_eq!(bytes[state_at(&bytes)], BackendState::Draining.to_u8());
        let mut b = bytes.clone();
        let at = state_at(&b);
        b[at] = 3;
        fix_vip(&mut b, 0);
        let g = view_of(&path.0, &b).unwrap();
        assert_eq!(g.vips[0].backends[1].state, BackendState::Killed);
        let e = edit(&|b| {
            let at = state_at(b);
            b[at] = 4;
            fix_vip(b, 0);
        });
        assert!(e.ends_with("backend state = 4 is out of range"), "{e}");
        let e = edit(&|b| {
            put_u32(b, v0 + 32 + 32, 70_000); // n_backends
            fix_vip(b, 0);
        });
        assert!(e.ends_with("n_backends = 70000 is out of range"), "{e}");
        // A stale checksum is caught.
        let e = edit(&|b| b[v0 + 200] ^= 0x10);
        assert!(e.contains("checksum mismatch"), "{e}");

        // The untouched generation 1 is still what its root says.
        let mut b = bytes.clone();
        let r1 = {
            // Generation 1's root is the block right after generation 1's
            // VIP blocks: find it by magic and generation.
            (HEADER_LEN as usize..b.len())
                .step_by(64)
                .find(|&o| b[o + 8..o + 12] == *b"BRRT" && u64_at(&b, o + 32) == 1)
                .unwrap()
        };
        put_u64(&mut b, 32, (1 << ROOT_BITS) | (r1 as u64 / UNIT));
        assert_eq!(view_of(&path.0, &b).unwrap(), g1);
    }
}
