//! The seed corpus of the `tables_region` fuzz target
//! (dataplane/fuzz/seeds/tables_region) holds real regions that still
//! validate under today's layout, so the fuzzer starts from inputs that
//! reach past the header. After a layout change this test fails; rewrite
//! the seeds with `BORDER_WRITE_FUZZ_SEEDS=1 cargo test -p conf --test fuzz_seeds`.

mod common;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{region_vip, three_vips, v4};
use conf::tables::{view_bytes, Generation, TablesWriter, VipTable};
use conf::Mode;

fn seeds_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../dataplane/fuzz/seeds/tables_region")
}

fn vip(id: u32, addr: IpAddr, backends: &[IpAddr], ring_size: u32, mode: Mode) -> Arc<VipTable> {
    Arc::new(VipTable {
        name: format!("seed-vip-{id}"),
        ..region_vip(id, addr, backends, ring_size, mode, 1)
    })
}

/// Generation 1 (three VIPs: IPv4 full-NAT, IPv6 DNAT, one without
/// backends) and generation 2 (the first VIP changed).
fn generations() -> (Generation, Generation) {
    let g1 = three_vips(vip);
    let mut g2 = g1.clone();
    let v4_backends: Vec<IpAddr> = (1..=4).map(v4).collect();
    g2.vips[0] = vip(0, v4(100), &v4_backends, 61, Mode::FullNat);
    (g1, g2)
}

/// The region's bytes after publishing `gens` in order.
fn region_bytes(gens: &[&Generation]) -> Vec<u8> {
    // One file per call: the tests of this file run in parallel.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("border-fuzz-seed-{}-{call}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let mut writer = TablesWriter::create(&path, 16 << 10).unwrap();
    for (i, g) in gens.iter().enumerate() {
        // A reader still on generation 1 keeps its retired block intact.
        let readers: &[u64] = if i == 0 { &[] } else { &[1] };
        writer.publish(g, readers).unwrap();
    }
    drop(writer);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    bytes
}

#[test]
fn tables_region_seeds_validate_under_todays_layout() {
    let (g1, g2) = generations();
    let expected = [("generation-1.bin", 1u64), ("generation-2.bin", 2)];
    if std::env::var_os("BORDER_WRITE_FUZZ_SEEDS").is_some() {
        std::fs::create_dir_all(seeds_dir()).unwrap();
        std::fs::write(seeds_dir().join("generation-1.bin"), region_bytes(&[&g1])).unwrap();
        std::fs::write(
            seeds_dir().join("generation-2.bin"),
            region_bytes(&[&g1, &g2]),
        )
        .unwrap();
    }
    for (name, generation) in expected {
        let path = seeds_dir().join(name);
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let view = view_bytes(&bytes).unwrap_or_else(|e| {
            panic!("{name} no longer validates ({e}); rewrite the seeds (see the module docs)")
        });
        assert_eq!(view.generation(), generation, "{name}");
        assert_eq!(view.vip_count(), 3, "{name}");
        let want = if generation == 1 { &g1 } else { &g2 };
        assert_eq!(view.to_generation(), *want, "{name}");
    }
}

#[test]
fn view_bytes_refuses_what_the_file_reader_refuses() {
    let (g1, _) = generations();
    let mut bytes = region_bytes(&[&g1]);
    assert!(
        view_bytes(&bytes[..100]).is_err(),
        "shorter than the header"
    );
    bytes[0] ^= 0xff;
    assert!(view_bytes(&bytes).is_err(), "bad magic");
    bytes[0] ^= 0xff;
    let vip_block = view_bytes(&bytes).unwrap().vip(0).unwrap().block_offset() as usize;
    bytes[vip_block + 40] ^= 1;
    assert!(view_bytes(&bytes).is_err(), "a flipped byte in a VIP block");
}
