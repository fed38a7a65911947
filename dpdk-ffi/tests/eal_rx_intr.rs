//! Rx interrupts as an adaptive worker uses them: a net_tap queue
//! configured with them can be slept on (the wait ends when the kernel
//! sends a frame, or at its timeout when nothing comes), an eventfd in the
//! same set ends the wait too, and a net_null port, whose PMD has none,
//! refuses to be watched with a clear error. Needs root and /dev/net/tun
//! (never skips: CI has both). Own file: EAL starts once per process.

use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use dpdk_ffi::{Eal, MbufBurst, Mempool, Port, RxWaiter, DEFAULT_DATA_ROOM};

fn ifindex(iface: &str) -> i32 {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/ifindex"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("interface {iface} has no ifindex"))
}

/// Sends one raw broadcast frame out of `iface` from the kernel side.
fn kernel_send(iface: &str, marker: u8) {
    let mut frame = vec![0xff; 6];
    frame.extend_from_slice(&[0x02, 0, 0, 0, 0, marker, 0x88, 0xb5]);
    frame.extend(std::iter::repeat_n(marker, 46));
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: plain socket(2); the descriptor is owned right below.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(proto)) };
    assert!(
        fd >= 0,
        "AF_PACKET socket: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: fd is a new descriptor nobody else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = proto;
    addr.sll_ifindex = ifindex(iface);
    addr.sll_halen = 6;
    addr.sll_addr[..6].copy_from_slice(&frame[..6]);
    // SAFETY: the socket is open; frame and addr are valid for the lengths given.
    let n = unsafe {
        libc::sendto(
            std::os::fd::AsRawFd::as_raw_fd(&sock),
            frame.as_ptr().cast(),
            frame.len(),
            0,
            std::ptr::addr_of!(addr).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    assert!(n > 0, "AF_PACKET send: {}", std::io::Error::last_os_error());
}

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
    assert!(
        std::path::Path::new("/dev/net/tun").exists(),
        "this test needs /dev/net/tun (net_tap creates TAP devices)"
    );
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(euid, 0, "this test needs root (net_tap)");
    let iface = format!("brxi{}", std::process::id() % 10_000_000);
    let args: Vec<String> = [
        "-l",
        "0",
        "--no-huge",
        "-m",
        "256",
        "--no-pci",
        "--no-shconf",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([
        format!("--file-prefix=border-ffi-rxintr-{}", std::process::id()),
        format!("--vdev=net_tap0,iface={iface}"),
        "--vdev=net_null0".to_string(),
    ])
    .collect();
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
            kernel_send(&iface, 0x5a);
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
