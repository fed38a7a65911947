use super::*;
use crate::os::files;

fn sample(i: u64) -> ConnRecord {
    ConnRecord {
        start_ms: 1_000 + i,
        end_ms: 2_000 + i,
        conn_id: 7 << 48 | i,
        packets: [10 + i, 9],
        octets: [1_500, 900 + i],
        client: Ipv4Addr::new(192, 0, 2, 1).to_ipv6_mapped().octets(),
        vip: Ipv4Addr::new(198, 51, 100, 1).to_ipv6_mapped().octets(),
        backend: "2001:db8::11".parse::<Ipv6Addr>().unwrap().octets(),
        local: "2001:db8::1".parse::<Ipv6Addr>().unwrap().octets(),
        client_port: 40_000,
        vip_port: 443,
        backend_port: 8443,
        local_port: 1024 + i as u16,
        proto: 6,
        client_v6: false,
        backend_v6: true,
        end: EndReason::Fin,
        flags: REC_FULL_NAT | REC_PAYLOAD,
        worker: 3,
    }
}

/// A directory of the test's own, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("border-records-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn region(slots: u32) -> (TempDir, RecordsRegion) {
    let dir = TempDir::new();
    let r = RecordsRegion::create(&dir.path().join("r"), 2, slots, Access::PRIVATE).unwrap();
    (dir, r)
}

#[test]
fn a_record_survives_its_bytes() {
    let rec = sample(5);
    let mut b = [0xAA; RECORD_LEN];
    rec.encode(&mut b);
    assert_eq!(ConnRecord::decode(&b), Ok(rec));
    assert_eq!(rec.client_ip().to_string(), "192.0.2.1");
    assert_eq!(rec.vip_ip().to_string(), "198.51.100.1");
    assert_eq!(rec.backend_ip().to_string(), "2001:db8::11");
    assert!(rec.full_nat() && rec.carried_payload() && !rec.proxy_sent());
}

#[test]
fn bytes_that_no_writer_makes_are_refused() {
    let mut b = [0; RECORD_LEN];
    sample(1).encode(&mut b);
    let tail = 3 * 8 + 4 * 8 + 4 * 16 + 5 * 2;
    for (at, v, why) in [
        (tail + 1, 2, "client family"),
        (tail + 2, 9, "backend family"),
        (tail + 3, 5, "unknown end reason"),
        (tail + 4, 0x80, "unknown flag bits"),
    ] {
        let mut bad = b;
        bad[at] = v;
        assert_eq!(ConnRecord::decode(&bad), Err(BadRecord(why)));
    }
    let mut bad = b;
    bad[8..16].copy_from_slice(&0u64.to_le_bytes());
    assert_eq!(
        ConnRecord::decode(&bad),
        Err(BadRecord("ends before it starts"))
    );
}

#[test]
fn records_come_out_in_order_and_a_full_ring_refuses_more() {
    let (_d, r) = region(1024);
    let mut w = r.writer(1).unwrap();
    for i in 0..1024 {
        assert!(w.push(&sample(i)), "record {i}");
    }
    assert!(!w.push(&sample(9_999)), "the ring is full");
    assert_eq!(r.pending(1), 1024);
    assert_eq!(r.pending(0), 0);
    let mut got = Vec::new();
    assert_eq!(r.drain(1, 1000, |x| got.push(x.unwrap().start_ms)), 1000);
    assert_eq!(got, (0..1000).map(|i| 1_000 + i).collect::<Vec<_>>());
    // Slots given back are used again, across the wrap.
    for i in 1024..2024 {
        assert!(w.push(&sample(i)), "record {i}");
    }
    assert!(!w.push(&sample(9_999)));
    got.clear();
    assert_eq!(
        r.drain(1, usize::MAX, |x| got.push(x.unwrap().start_ms)),
        1024
    );
    assert_eq!(got, (1000..2024).map(|i| 1_000 + i).collect::<Vec<_>>());
    assert_eq!(r.drain(1, usize::MAX, |_| panic!("empty")), 0);
    assert!(r.writer(2).is_none());
}

#[test]
fn border_mgmt_sees_what_border_dp_wrote() {
    let (d, r) = region(1024);
    r.set_clock_offset_ms(1_700_000_000_000);
    let path = d.path().join("r");
    let reader = RecordsRegion::open(&path, Access::PRIVATE).unwrap();
    assert_eq!((reader.n_workers(), reader.ring_slots()), (2, 1024));
    assert_eq!(reader.pid(), std::process::id());
    assert_eq!(reader.clock_offset_ms(), 1_700_000_000_000);
    let done = std::sync::atomic::AtomicBool::new(false);
    let total = 50_000u64;
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut w = r.writer(0).unwrap();
            let mut i = 0;
            while i < total {
                if w.push(&sample(i)) {
                    i += 1;
                } else {
                    std::thread::yield_now();
                }
            }
            done.store(true, Ordering::Release);
        });
        let mut next = 0;
        while next < total {
            reader.drain(0, 300, |x| {
                assert_eq!(x.unwrap(), sample(next));
                next += 1;
            });
        }
    });
    assert!(done.load(Ordering::Acquire));
}

#[test]
fn a_file_that_is_not_a_records_region_is_refused() {
    let dir = TempDir::new();
    let p = dir.path().join("x");
    let write = |bytes: &[u8]| {
        let _ = std::fs::remove_file(&p);
        let f = files::create_new(&p, Access::PRIVATE).unwrap();
        drop(f);
        std::fs::write(&p, bytes).unwrap();
    };
    write(b"short");
    let e = RecordsRegion::open(&p, Access::PRIVATE)
        .unwrap_err()
        .to_string();
    assert!(e.contains("shorter than the header"), "{e}");
    write(&[0; 256]);
    let e = RecordsRegion::open(&p, Access::PRIVATE)
        .unwrap_err()
        .to_string();
    assert!(e.contains("bad magic"), "{e}");
    let mut h = vec![0; 256];
    h[..8].copy_from_slice(&KIND.magic);
    h[8..12].copy_from_slice(&RECORDS_LAYOUT_VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&4u32.to_le_bytes());
    h[16..20].copy_from_slice(&1024u32.to_le_bytes());
    h[20..24].copy_from_slice(&(RECORD_LEN as u32).to_le_bytes());
    write(&h);
    let e = RecordsRegion::open(&p, Access::PRIVATE)
        .unwrap_err()
        .to_string();
    assert!(e.contains("rings need"), "{e}");
    h[8..12].copy_from_slice(&99u32.to_le_bytes());
    write(&h);
    let e = RecordsRegion::open(&p, Access::PRIVATE)
        .unwrap_err()
        .to_string();
    assert!(e.contains("layout version 99"), "{e}");
}
