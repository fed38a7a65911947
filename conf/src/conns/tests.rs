use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use super::*;

fn sample(i: u64) -> LiveConn {
    LiveConn {
        conn_id: 7 << 48 | i,
        created_ms: 1_000 + i,
        last_seen_ms: 1_500 + i,
        expires_ms: 301_500 + i,
        now_ms: 2_000 + i,
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
        state: 2,
        flags: LIVE_FULL_NAT | LIVE_PROXY | LIVE_PROXY_SENT | LIVE_METERED,
        worker: 3,
    }
}

/// A region file of the test's own, removed when dropped.
struct Temp(PathBuf);

impl Temp {
    fn new() -> Temp {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("border-conns-{}-{n}", std::process::id()));
        Temp(p)
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn region(workers: usize, slots: u32) -> (Temp, ConnsRegion) {
    let t = Temp::new();
    let r = ConnsRegion::create(&t.0, workers, slots, Access::PRIVATE).unwrap();
    (t, r)
}

/// The reader's side of a whole walk of worker 0, with the worker's side
/// run between takes: `table` is the worker's table, `step` how many
/// records it copies per poll iteration, `change` what happens to the
/// table after each iteration.
fn walk(
    r: &ConnsRegion,
    table: &mut Vec<Option<u64>>,
    step: usize,
    mut change: impl FnMut(usize, &mut Vec<Option<u64>>),
) -> (Vec<LiveConn>, usize) {
    let mut x = r.exporter(0).unwrap();
    r.request(0, 5);
    let (mut got, mut torn) = (Vec::new(), 0);
    for iteration in 0.. {
        assert!(iteration < 100_000, "the walk never ended");
        if x.walking() {
            let mut budget = x.room().min(step);
            let mut c = x.cursor();
            while budget > 0 && c < table.len() {
                if let Some(id) = table[c] {
                    x.push(&sample(id));
                    budget -= 1;
                }
                c += 1;
            }
            x.set_cursor(c);
            if c >= table.len() {
                x.finish();
            }
        }
        change(iteration, table);
        let t = r.take(0, 5, 3, |rec| got.push(rec.unwrap()));
        torn += t.torn;
        if t.done {
            break;
        }
    }
    (got, torn)
}

#[test]
fn a_record_survives_its_slot() {
    for i in [0, 1, 40_000] {
        let rec = sample(i);
        assert_eq!(LiveConn::decode(&rec.encode()), Ok(rec));
    }
    let rec = sample(1);
    assert_eq!(rec.client_ip(), "192.0.2.1".parse::<IpAddr>().unwrap());
    assert_eq!(rec.vip_ip(), "198.51.100.1".parse::<IpAddr>().unwrap());
    assert_eq!(rec.backend_ip(), "2001:db8::11".parse::<IpAddr>().unwrap());
    assert_eq!(rec.state_name(), "established");
    assert_eq!(rec.proxy_status(), "sent");
}

#[test]
fn a_record_with_impossible_fields_is_refused() {
    let mut w = sample(1).encode();
    w[18] |= 9 << 24;
    assert_eq!(LiveConn::decode(&w), Err(BadLiveConn("unknown state")));
    let mut w = sample(1).encode();
    w[18] |= 0x80 << 32;
    assert_eq!(LiveConn::decode(&w), Err(BadLiveConn("unknown flag bits")));
    let mut w = sample(1).encode();
    w[18] |= 2 << 8;
    assert_eq!(LiveConn::decode(&w), Err(BadLiveConn("client family")));
}

#[test]
fn without_a_request_the_worker_does_nothing() {
    let (_t, r) = region(2, 8);
    let mut x = r.exporter(1).unwrap();
    assert!(!x.walking());
    assert!(!x.walking());
    let t = r.take(1, 5, 10, |_| panic!("no record"));
    assert!(!t.started && !t.done);
}

#[test]
fn a_walk_through_a_small_ring_lists_every_entry_once_in_order() {
    let (_t, r) = region(1, 4);
    let mut table: Vec<Option<u64>> = (0..100).map(|i| (i % 3 != 0).then_some(i)).collect();
    let want: Vec<u64> = table.iter().flatten().copied().collect();
    let (got, torn) = walk(&r, &mut table, 5, |_, _| {});
    assert_eq!(torn, 0);
    let ids: Vec<u64> = got.iter().map(|c| c.conn_id & 0xFFFF).collect();
    assert_eq!(ids, want);
    assert_eq!(got[0], sample(1));
}

#[test]
fn an_empty_table_ends_its_walk_at_once() {
    let (_t, r) = region(1, 4);
    let (got, torn) = walk(&r, &mut Vec::new(), 5, |_, _| {});
    assert_eq!((got.len(), torn), (0, 0));
}

#[test]
fn entries_that_live_through_the_walk_are_listed_once_whatever_changes_meanwhile() {
    let (_t, r) = region(1, 8);
    let mut table: Vec<Option<u64>> = (0..200).map(Some).collect();
    // Every iteration removes one entry and adds one in a free slot or at
    // the end; entries 1000.. are new, and the even ones below 200 stay.
    let mut next_new = 1000;
    let (got, torn) = walk(&r, &mut table, 4, |it, t| {
        let gone = ((it * 7 + 1) % 200) | 1;
        t[gone] = None;
        match t.iter().position(Option::is_none) {
            Some(free) if it % 2 == 0 => t[free] = Some(next_new),
            _ => t.push(Some(next_new)),
        }
        next_new += 1;
    });
    assert_eq!(torn, 0);
    let mut ids: Vec<u64> = got.iter().map(|c| c.conn_id & 0xFFFF).collect();
    for stayed in (0..200).step_by(2) {
        assert_eq!(
            ids.iter().filter(|&&i| i == stayed).count(),
            1,
            "entry {stayed}"
        );
    }
    let n = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), n, "no entry is listed twice");
}

#[test]
fn a_new_request_restarts_the_walk_and_a_cancel_ends_it() {
    let (_t, r) = region(1, 4);
    let mut x = r.exporter(0).unwrap();
    r.request(0, 1);
    assert!(x.walking());
    x.push(&sample(1));
    x.push(&sample(2));
    x.set_cursor(2);
    r.request(0, 2);
    assert!(x.walking());
    assert_eq!(x.cursor(), 0, "a new walk starts at the table's start");
    assert_eq!(x.room(), 4);
    // Records of walk 1 are not walk 2's.
    assert_eq!(r.take(0, 1, 10, |_| panic!()), Taken::default());
    x.push(&sample(3));
    let mut got = Vec::new();
    let t = r.take(0, 2, 10, |c| got.push(c.unwrap()));
    assert_eq!((t.records, t.torn, t.done), (1, 0, false));
    assert_eq!(got, [sample(3)]);
    r.cancel(0);
    assert!(!x.walking());
}

#[test]
fn a_full_ring_holds_the_walk_until_the_reader_takes() {
    let (_t, r) = region(1, 4);
    let mut x = r.exporter(0).unwrap();
    r.request(0, 9);
    assert!(x.walking());
    for i in 0..4 {
        x.push(&sample(i));
    }
    assert_eq!(x.room(), 0);
    let t = r.take(0, 9, 3, |_| {});
    assert_eq!(t.records, 3);
    assert_eq!(x.room(), 3);
}

#[test]
fn a_slot_of_another_walk_or_position_is_torn_and_never_shown() {
    let (_t, r) = region(1, 4);
    let mut x = r.exporter(0).unwrap();
    r.request(0, 3);
    assert!(x.walking());
    for i in 0..3 {
        x.push(&sample(i));
    }
    // A writer that ignores the protocol rewrote slot 1 for another walk,
    // and slot 2 is half written (its stamp still zero).
    r.scribble(0, 4, 1, &sample(99).encode());
    r.slot_word(0, 2, 0).store(0, Ordering::Relaxed);
    let mut got = Vec::new();
    let t = r.take(0, 3, 10, |c| got.push(c.unwrap()));
    assert_eq!((t.records, t.torn), (1, 2));
    assert_eq!(got, [sample(0)]);
}

#[test]
fn a_slot_rewritten_while_it_is_read_is_never_shown_torn() {
    let (t, r) = region(1, 4);
    let r = Arc::new(r);
    let stop = Arc::new(AtomicBool::new(false));
    let published = Arc::new(AtomicU64::new(u64::MAX));
    // The writer goes round the ring as a worker does: position `4k + 1`
    // reuses slot 1 with the stamp of its own position, and every word of
    // it is `k`, so a copy that mixes two versions shows as words that
    // differ, or as words of another position than the one asked for.
    let writer = {
        let (r, stop, published) = (r.clone(), stop.clone(), published.clone());
        std::thread::spawn(move || {
            let mut k = 0u64;
            while !stop.load(Ordering::Relaxed) {
                r.scribble(0, 1, 4 * k + 1, &[k; RECORD_WORDS]);
                published.store(k, Ordering::Release);
                k += 1;
                // A pause now and then, as a worker's bursts have: on a
                // loaded machine a writer that never pauses can leave the
                // reader no window, and the test would prove nothing.
                if k.is_multiple_of(64) {
                    std::thread::yield_now();
                }
            }
        })
    };
    let (mut whole, mut torn) = (0, 0);
    let started = std::time::Instant::now();
    // At least 300 ms of reads, and on until a whole copy came (10 s at most).
    while started.elapsed() < std::time::Duration::from_millis(300)
        || (whole == 0 && started.elapsed() < std::time::Duration::from_secs(10))
    {
        let k = published.load(Ordering::Acquire);
        if k == u64::MAX {
            continue;
        }
        match r.read_slot(0, 1, 4 * k + 1) {
            Some(words) => {
                assert!(
                    words.iter().all(|&w| w == k),
                    "a torn copy was taken of position {}: {words:?}",
                    4 * k + 1
                );
                whole += 1;
            }
            None => torn += 1,
        }
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    drop(t);
    assert!(whole > 0, "no whole copy in 10 s ({torn} torn)");
}

#[test]
fn open_checks_the_header() {
    let (t, r) = region(2, 8);
    let o = ConnsRegion::open(&t.0, Access::PRIVATE).unwrap();
    assert_eq!((o.n_workers(), o.ring_slots()), (2, 8));
    assert_eq!(o.pid(), std::process::id());
    drop(r);
    // A walk asked for through one mapping is served through the other.
    let mut x = o.exporter(1).unwrap();
    let reader = ConnsRegion::open(&t.0, Access::PRIVATE).unwrap();
    reader.request(1, 11);
    assert!(x.walking());
    x.push(&sample(4));
    x.finish();
    let mut got = Vec::new();
    let taken = reader.take(1, 11, 10, |c| got.push(c.unwrap()));
    assert!(taken.done);
    assert_eq!(got, [sample(4)]);
    std::fs::write(&t.0, b"BRDRECS1 not this region").unwrap();
    assert!(matches!(
        ConnsRegion::open(&t.0, Access::PRIVATE),
        Err(ConnsError::Corrupt { .. })
    ));
}
