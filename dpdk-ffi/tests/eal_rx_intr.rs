//! Rx interrupts as an adaptive worker uses them: a net_tap queue
//! configured with them can be slept on (the wait ends when the kernel
//! sends a frame, or at its timeout when nothing comes), an eventfd in the
//! same set ends the wait too, and a net_null port, whose PMD has none,
//! refuses to be watched with a clear error. Needs root and /dev/net/tun
//! (never skips: CI has both). Own file: EAL starts once per process.

mod common;

use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use common::{eal_args, kernel_send, require_tun_and_root, test_frame};
use dpdk_ffi::{Eal, MbufBurst, Mempool, Port, RxWaiter, DEFAULT_DATA_ROOM};

fn eventfd() -> OwnedFd {
    // SAFETY: plain eventfd(2); the descriptor is owned right below.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    assert!(fd >= 0, "eventfd: {}", std::io::Error::last_os_error());
    // SAFETY: fd is a new descriptor nobody else owns.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

fn ring(fd: &OwnedFd) {
    let one = 1u64.to_ne_bytes();
    // SAFETY: fd is an open eventfd; we write 8 bytes from a live buffer.
    let n = unsafe { libc::write(std::os::fd::AsRawFd::as_raw_fd(fd), one.as_ptr().cast(), 8) };
    assert_eq!(n, 8);
}

#[test]
fn tap_queue_wakes_its_waiter_and_null_has_no_interrupts() {
    require_tun_and_root("eal_rx_intr");
    let iface = format!("brxi{}", std::process::id() % 10_000_000);
    let vdev = format!("--vdev=net_tap0,iface={iface}");
    let args = eal_args("0", "rxintr", &[&vdev, "--vdev=net_null0"]);
    let _eal = Eal::init(&args).expect("EAL init");
    let pool = Mempool::pktmbuf("ffi_rxintr", 2047, 0, DEFAULT_DATA_ROOM, -1).unwrap();

    let mut tap = Port::by_name("net_tap0").expect("tap port");
    tap.set_rx_interrupts(true);
    tap.configure(2, 2, 256, 256, &pool).unwrap();
    tap.start().unwrap();
    let mut rxq = tap.rx_queue(0).unwrap();
    let mut rxq1 = tap.rx_queue(1).unwrap();
    let bell = eventfd();
    let mut waiter = RxWaiter::new().unwrap();
    waiter
        .watch(&rxq)
        .expect("net_tap queue 0 has Rx interrupts");
    waiter
        .watch(&rxq1)
        .expect("net_tap queue 1 has Rx interrupts");
    waiter.watch_fd(bell.as_fd()).unwrap();
    assert_eq!(waiter.queues(), 2);
    let sig = waiter.arrival_signal();
    assert!(
        sig.is_some_and(|s| s >= libc::SIGRTMIN()),
        "net_tap counts arrivals with a real-time signal: {sig:?}"
    );
    let mut burst: MbufBurst<32> = MbufBurst::new();

    // Nothing arrives: the wait lasts its timeout. (The kernel may send
    // its own frames when the interface comes up: drain and try again.)
    let mut quiet = None;
    for _ in 0..20 {
        burst.clear();
        while rxq.rx_burst(&mut burst) > 0 {
            burst.clear();
        }
        waiter.arm();
        let t = Instant::now();
        let n = waiter.wait(100);
        waiter.disarm();
        if n == 0 {
            quiet = Some(t.elapsed());
            break;
        }
    }
    let quiet = quiet.expect("a quiet wait of 100 ms within 20 tries");
    assert!(quiet >= Duration::from_millis(90), "woke early: {quiet:?}");

    // A frame from the kernel ends a long wait at once, and is there to read.
    let sender = {
        let iface = iface.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            kernel_send(&iface, &test_frame(0x5a)).expect("AF_PACKET send");
        })
    };
    let mut got = false;
    let start = Instant::now();
    while !got && start.elapsed() < Duration::from_secs(5) {
        waiter.arm();
        waiter.wait(5000);
        waiter.disarm();
        for q in [&mut rxq, &mut rxq1] {
            burst.clear();
            q.rx_burst(&mut burst);
            got |= burst.drain().any(|m| m.data().get(11) == Some(&0x5a));
        }
    }
    sender.join().unwrap();
    // One queue or the other may get the frame (the kernel picks); the
    // wait ending well before its 5 s timeout is what counts.
    let woke = start.elapsed();
    assert!(
        woke < Duration::from_secs(2),
        "the wait ignored the frame: {woke:?}"
    );

    // Ringing the eventfd ends the wait too.
    let ringer = {
        let fd = bell.try_clone().unwrap();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            ring(&fd);
        })
    };
    let t = Instant::now();
    waiter.arm();
    waiter.wait(5000);
    waiter.disarm();
    ringer.join().unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "the doorbell did not wake the waiter"
    );

    // net_null has no Rx interrupts: watching its queue is refused, cleanly.
    let mut null = Port::by_name("net_null0").expect("null port");
    null.set_rx_interrupts(true);
    null.configure(1, 1, 256, 256, &pool).unwrap();
    null.start().unwrap();
    let nq = null.rx_queue(0).unwrap();
    let e = waiter.watch(&nq).unwrap_err();
    let msg = e.to_string();
    eprintln!("net_null refused: {msg}");
    assert!(msg.contains("net_null0 rx queue 0 interrupt"), "{msg}");
    assert!(!msg.contains('\n'), "{msg}");
    assert_eq!(waiter.queues(), 2);

    drop(waiter);
    drop((rxq, rxq1, nq));
    drop((tap, null));
}
