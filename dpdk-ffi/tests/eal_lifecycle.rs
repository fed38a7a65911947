//! The whole EAL lifecycle in one process (EAL starts once per process, so
//! this file holds exactly one test): ports on net_null and net_ring, mbuf
//! operations, rx/tx bursts, queue-handle rules, lcore launch with a
//! returning and a panicking closure, and orderly teardown.

mod common;

use dpdk_ffi::{
    launch_on, lcore_id, main_lcore, port_count, port_ids, tsc_hz, wait_all, wait_lcore,
    worker_lcores, Eal, Mbuf, MbufBurst, MbufError, Mempool, Port, DEFAULT_DATA_ROOM,
    LCORE_PANICKED, PKTMBUF_HEADROOM,
};

fn eal_args() -> Vec<String> {
    common::eal_args(
        "0,1",
        "life",
        &[
            "--log-level=lib.eal:warning",
            "--vdev=net_null0",
            "--vdev=net_ring0",
        ],
    )
}

fn check_mbuf_ops(pool: &Mempool) {
    let mut m = pool.alloc().expect("pool has mbufs");
    assert_eq!(m.data_len(), 0);
    assert_eq!(m.pkt_len(), 0);
    assert_eq!(m.nb_segs(), 1);
    assert!(m.is_contiguous());
    assert_eq!(m.headroom(), PKTMBUF_HEADROOM);
    assert_eq!(m.tailroom(), DEFAULT_DATA_ROOM - PKTMBUF_HEADROOM);

    m.append(60).expect("tailroom").fill(0xab);
    assert_eq!(m.data(), &[0xab; 60][..]);
    let eth = m.prepend(14).expect("headroom");
    eth.copy_from_slice(&[1; 14]);
    assert_eq!(m.data_len(), 74);
    assert_eq!(m.pkt_len(), 74);
    assert_eq!(m.headroom(), PKTMBUF_HEADROOM - 14);
    assert_eq!(&m.data()[..14], &[1; 14]);
    m.data_mut()[14] = 0xcd;
    m.adj(14).expect("adj");
    assert_eq!(m.data()[0], 0xcd);
    m.trim(10).expect("trim");
    assert_eq!(m.data_len(), 50);
    assert_eq!(m.pkt_len(), 50);

    // Refusals leave the mbuf unchanged.
    assert_eq!(
        m.prepend(usize::from(PKTMBUF_HEADROOM) + 1).unwrap_err(),
        MbufError::NoHeadroom
    );
    assert_eq!(m.append(4096).unwrap_err(), MbufError::NoTailroom);
    assert_eq!(m.append(100_000).unwrap_err(), MbufError::NoTailroom);
    assert_eq!(m.adj(51).unwrap_err(), MbufError::TooShort);
    assert_eq!(m.trim(51).unwrap_err(), MbufError::TooShort);
    assert_eq!(m.data_len(), 50);

    // The Rust view of the mbuf agrees with DPDK's own inline accessors.
    // SAFETY: m is a live mbuf we own; the shim functions only read it.
    unsafe {
        use dpdk_ffi::sys;
        assert_eq!(sys::border_shim_data_len(m.as_ptr()), m.data_len());
        assert_eq!(sys::border_shim_pkt_len(m.as_ptr()), m.pkt_len());
        assert_eq!(sys::border_shim_headroom(m.as_ptr()), m.headroom());
        assert_eq!(sys::border_shim_tailroom(m.as_ptr()), m.tailroom());
        assert_eq!(
            sys::border_shim_mtod(m.as_ptr()).cast::<u8>(),
            m.data().as_ptr().cast_mut()
        );
    }

    // into_raw / from_raw round trip keeps ownership single.
    let raw = m.into_raw();
    // SAFETY: raw came from into_raw just above and is not used again.
    let m = unsafe { Mbuf::from_raw(raw) };
    assert_eq!(m.data_len(), 50);
    drop(m);

    // Burst bookkeeping: push/pop/drain/clear/alloc_bulk.
    let before = pool.in_use_count();
    let mut b: MbufBurst<4> = MbufBurst::new();
    assert!(pool.alloc_bulk(&mut b, 3));
    assert_eq!(b.len(), 3);
    assert!(!pool.alloc_bulk(&mut b, 2), "only one slot left");
    b.push(pool.alloc().unwrap()).unwrap();
    assert!(b.is_full());
    let extra = pool.alloc().unwrap();
    let extra = b.push(extra).unwrap_err();
    drop(extra);
    let last = b.pop().unwrap();
    drop(last);
    let mut it = b.drain();
    assert_eq!(it.len(), 3);
    let first = it.next().unwrap();
    drop(it); // frees the two not yielded
    assert!(b.is_empty());
    assert_eq!(pool.in_use_count(), before + 1);
    drop(first);
    assert!(pool.alloc_bulk(&mut b, 4));
    b.clear();
    assert_eq!(pool.in_use_count(), before);
}

fn ring_loopback(ring: &mut Port, pool: &Mempool) {
    let mut rxq = ring.rx_queue(0).unwrap();
    let mut txq = ring.tx_queue(0).unwrap();
    assert!(ring.rx_queue(0).is_err(), "one handle per queue");
    assert!(ring.tx_queue(1).is_err(), "queue 1 not configured");
    let e = ring.stop().unwrap_err();
    assert!(e.to_string().contains("queue handles"), "{e}");

    let in_use = pool.in_use_count();
    let mut out: MbufBurst<8> = MbufBurst::new();
    for i in 0..8u8 {
        let mut m = pool.alloc().unwrap();
        m.append(64).unwrap().fill(i);
        out.push(m).unwrap();
    }
    assert_eq!(txq.tx_burst(&mut out), 8);
    assert!(out.is_empty());
    assert_eq!(
        pool.in_use_count(),
        in_use + 8,
        "sent mbufs sit in the ring"
    );

    // net_ring created from --vdev loops tx back to rx.
    let mut back: MbufBurst<32> = MbufBurst::new();
    assert_eq!(rxq.rx_burst(&mut back), 8);
    for (i, m) in back.iter().enumerate() {
        assert_eq!(m.data_len(), 64);
        assert!(m.data().iter().all(|b| usize::from(*b) == i));
    }
    drop(back);
    assert_eq!(pool.in_use_count(), in_use);

    let st = ring.stats().unwrap();
    assert_eq!(st.opackets, 8, "{st:?}");
    assert_eq!(st.ipackets, 8, "{st:?}");
    assert_eq!(st.oerrors, 0, "{st:?}");
    drop((rxq, txq));
    assert!(ring.rx_queue(0).is_ok(), "handle can be retaken after drop");
}

fn null_port(null: &mut Port) {
    let info = null.info().unwrap();
    assert_eq!(info.driver_name, "net_null");
    null.set_promiscuous(true).unwrap();
    let mac = [0x02, 0, 0, 0, 0, 0x42];
    null.set_mac_addr(mac).unwrap();
    assert_eq!(null.mac_addr().unwrap(), mac);
    let link = null.link().unwrap();
    assert!(link.up, "{link:?}");

    let mut rxq = null.rx_queue(0).unwrap();
    let mut txq = null.tx_queue(0).unwrap();
    // net_null makes up a packet for every slot offered.
    let mut burst: MbufBurst<32> = MbufBurst::new();
    assert_eq!(rxq.rx_burst(&mut burst), 32);
    assert!(burst.iter().all(|m| m.pkt_len() == 64 && m.is_contiguous()));
    assert_eq!(rxq.rx_burst(&mut burst), 0, "burst is full");
    assert_eq!(txq.tx_burst(&mut burst), 32);
    assert!(burst.is_empty());
    let st = null.stats().unwrap();
    assert_eq!(st.ipackets, 32, "{st:?}");
    assert_eq!(st.opackets, 32, "{st:?}");
    null.reset_stats()
        .unwrap_or_else(|e| eprintln!("reset_stats: {e}"));
}

fn lcores(null: &Port) {
    assert_eq!(main_lcore(), 0);
    assert_eq!(lcore_id(), 0);
    assert_eq!(worker_lcores(), vec![1]);

    launch_on(1, || if lcore_id() == 1 { 42 } else { -1 }).unwrap();
    assert_eq!(wait_lcore(1), 42);

    // The boxed form from the brief works too.
    let f: Box<dyn FnOnce() -> i32 + Send> = Box::new(|| 7);
    launch_on(1, f).unwrap();
    assert_eq!(wait_all(), vec![(1, 7)]);

    launch_on(1, || panic!("deliberate test panic on a worker lcore")).unwrap();
    assert_eq!(wait_lcore(1), LCORE_PANICKED);

    // The lcore is usable again after a caught panic, and queue handles can
    // move to it.
    let mut rxq = null.rx_queue(0).unwrap();
    launch_on(1, move || {
        let mut b: MbufBurst<16> = MbufBurst::new();
        i32::try_from(rxq.rx_burst(&mut b)).unwrap()
    })
    .unwrap();
    assert_eq!(wait_lcore(1), 16);

    let e = launch_on(0, || 0).unwrap_err();
    assert!(e.to_string().contains("not a worker lcore"), "{e}");
    assert!(launch_on(99, || 0).is_err());
    assert_eq!(wait_lcore(99), -libc::EINVAL);
}

#[test]
fn eal_lifecycle() {
    let eal = Eal::init(&eal_args()).expect("EAL init");
    let again = Eal::init(&eal_args()).expect_err("second init must fail");
    assert!(again.to_string().contains("already initialised"), "{again}");
    assert!(!again.to_string().contains('\n'));
    assert!(tsc_hz() > 0);

    assert_eq!(port_count(), 2);
    assert_eq!(port_ids().collect::<Vec<_>>(), vec![0, 1]);

    // Devargs after the first comma are ignored by the lookup.
    let mut null = Port::by_name("net_null0,size=64").expect("net_null0");
    let mut ring = Port::by_name("net_ring0").expect("net_ring0");
    assert_eq!(null.name(), "net_null0");
    assert!(Port::by_id(null.port_id()).is_err(), "a port has one owner");
    let e = Port::by_name("net_nosuch0").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("port \"net_nosuch0\" lookup failed: "),
        "{e}"
    );

    let pool = Mempool::pktmbuf("ffi_life", 2047, 32, DEFAULT_DATA_ROOM, null.socket_id())
        .expect("mempool");
    assert_eq!(pool.size(), 2047);
    assert_eq!(pool.name(), "ffi_life");
    let dup = Mempool::pktmbuf("ffi_life", 63, 0, DEFAULT_DATA_ROOM, -1).unwrap_err();
    assert!(dup.to_string().contains("ffi_life"), "{dup}");

    check_mbuf_ops(&pool);

    ring.configure(1, 1, 256, 256, &pool).unwrap();
    ring.start().unwrap();
    ring_loopback(&mut ring, &pool);

    null.configure(1, 1, 256, 256, &pool).unwrap();
    null.start().unwrap();
    null_port(&mut null);
    lcores(&null);

    // Teardown: ports close, which lets the pool go, which lets EAL go.
    null.stop().unwrap();
    drop(null);
    drop(ring);
    assert_eq!(pool.in_use_count(), 0);
    drop(pool);
    drop(eal);
    let e = Eal::current().unwrap_err();
    assert!(e.to_string().contains("cleaned up"), "{e}");
    assert!(Eal::init(&eal_args()).is_err());
}
