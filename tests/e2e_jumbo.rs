//! Jumbo frames end to end: border-dp's TAP ports at `mtu = 9000` between a
//! client and a backend namespace whose interfaces take 9000 too (every
//! hop), the kernels' own TCP as the judge. A byte-exact transfer through a
//! full-NAT and a DNAT VIP in 9000-byte frames; a PROXY v2 header inserted
//! into a jumbo first segment; and a port configured smaller than its link,
//! where border answers the client's too-big segments with ICMP
//! fragmentation-needed, the client's kernel lowers its path MTU, and the
//! transfer completes.
//!
//! Namespaces `jb-lb`, `jb-cli`, `jb-bk`; subnets 10.154.0.0/24 (client
//! side) and 10.155.0.0/24 (backends). The tests share the names, so they
//! run one at a time under a lock.
//!
//! Over af_xdp, DPDK 22.11's PMD has no multi-buffer Rx/Tx: a frame must
//! fit one UMEM frame (a page, less headroom), so it refuses MTU 9000 at
//! start; docs/operations.md says which ports take jumbo frames.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::Mutex;
use std::time::Duration;

use common::client_backend::ClientBackend;
use common::*;
use conf::counters::Counter;

/// The tests share namespace names.
static SERIAL: Mutex<()> = Mutex::new(());

const TAG: &str = "jb";
const CLIENT: &str = "10.154.0.2";
const BACKEND: &str = "10.155.0.11";
const FNAT_VIP: &str = "10.154.0.100:80";
const DNAT_VIP: &str = "10.154.0.101:80";
const PP_VIP: &str = "10.154.0.100:81";

/// The config: both ports at `int_mtu`/9000, a full-NAT, a DNAT and a
/// PROXY v2 VIP, all to one backend.
fn config(int_mtu: u16) -> String {
    let mut c = two_port_config(
        "e2ejb",
        TAG,
        "10.154.0.1/24",
        "10.155.0.1/24",
        "unix:///run/border/e2ejb.sock",
    )
    // Buffers of 9.9 KB: the pool outgrows the shared 256 MB.
    .replace("\"-m\", \"256\"", "\"-m\", \"768\"")
    .replace(
        "host_interface = \"kjb-ext\"",
        "host_interface = \"kjb-ext\"\nmtu = 9000",
    )
    .replace(
        "host_interface = \"kjb-int\"",
        &format!("host_interface = \"kjb-int\"\nmtu = {int_mtu}"),
    );
    for (name, vip, mode, bport, extra) in [
        ("fnat", FNAT_VIP, "fullnat", 8080, ""),
        ("dnat", DNAT_VIP, "dnat", 8081, ""),
        ("pp", PP_VIP, "fullnat", 8082, "proxy_protocol = \"v2\"\n"),
    ] {
        let (addr, port) = vip.split_once(':').unwrap();
        c += &format!(
            "\n[[vip]]\nname = \"{name}\"\naddress = \"{addr}\"\nport = {port}\nmode = \"{mode}\"\nmaglev_table_size = 1021\n{extra}[[vip.backend]]\naddress = \"{BACKEND}\"\nport = {bport}\n"
        );
    }
    c
}

/// The topology with the client's and backend's interfaces at MTU 9000.
fn start(int_mtu: u16) -> ClientBackend {
    let topo = ClientBackend::start(
        TAG,
        &config(int_mtu),
        &format!("{CLIENT}/24"),
        &format!("{BACKEND}/24"),
    );
    topo.cli
        .run(&["ip", "link", "set", "dev", "jb-ext", "mtu", "9000"]);
    topo.bk
        .run(&["ip", "link", "set", "dev", "jb-int", "mtu", "9000"]);
    topo.route_via("10.154.0.1", "10.155.0.1");
    topo
}

/// A server in the backend namespace on `port`: per connection, skips a
/// PROXY v2 header when `pp` (returning its source address), then echoes
/// every byte until the client closes.
fn echo_server(port: u16, pp: bool) -> std::thread::JoinHandle<Vec<String>> {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let h = in_netns("jb-bk", move || {
        let l = TcpListener::bind(("10.155.0.11", port)).expect("bind");
        ready_tx.send(()).unwrap();
        let (mut s, _) = l.accept().expect("accept");
        let mut sources = Vec::new();
        if pp {
            let mut head = [0u8; 16];
            s.read_exact(&mut head).expect("PROXY header");
            assert_eq!(&head[..12], b"\r\n\r\n\0\r\nQUIT\n", "PROXY v2 signature");
            let len = usize::from(u16::from_be_bytes([head[14], head[15]]));
            let mut rest = vec![0u8; len];
            s.read_exact(&mut rest).expect("PROXY addresses");
            sources.push(format!(
                "{}.{}.{}.{}",
                rest[0], rest[1], rest[2], rest[3]
            ));
        }
        let mut buf = vec![0u8; 65536];
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if s.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        sources
    });
    ready_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("server up");
    h
}

/// Sends `len` pattern bytes to `vip` from the client namespace in
/// `chunk`-byte writes and checks that exactly they come back; returns the
/// MSS the client's socket settled on.
fn transfer(vip: &str, len: usize, chunk: usize) -> u32 {
    let vip: SocketAddr = vip.parse().unwrap();
    in_netns("jb-cli", move || {
        let mut s = connect_retry(vip, Duration::from_secs(10)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        echo_exact(&mut s, 7, 0, len, chunk).expect("byte-exact echo");
        let mut mss: libc::c_int = 0;
        let mut l = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        use std::os::fd::AsRawFd;
        // SAFETY: getsockopt on a live socket with a c_int out-buffer of its size.
        let rc = unsafe {
            libc::getsockopt(
                s.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_MAXSEG,
                (&mut mss as *mut libc::c_int).cast(),
                &mut l,
            )
        };
        assert_eq!(rc, 0);
        mss as u32
    })
    .join()
    .unwrap()
}

fn no_size_drops(topo: &ClientBackend) {
    for c in [
        Counter::DropOverMtu,
        Counter::DropChainTooLong,
        Counter::DropTooBig,
        Counter::DropPpBadSegment,
    ] {
        assert_eq!(topo.counter(c), 0, "{}", c.name());
    }
}

#[test]
fn jumbo_transfers_through_full_nat_and_dnat_are_byte_exact() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let topo = start(9000);
    for (vip, port) in [(FNAT_VIP, 8080), (DNAT_VIP, 8081)] {
        let rx_before = (topo.counter(Counter::RxPackets), topo.counter(Counter::RxBytes));
        let server = echo_server(port, false);
        let mss = transfer(vip, 16 << 20, 256 << 10);
        server.join().unwrap();
        assert!(mss > 8000, "{vip}: the client's MSS is {mss}: jumbo frames were not negotiated");
        // 32 MB crossed border (counters are published about once a second).
        topo.wait_counter(Counter::RxBytes, rx_before.1 + (32 << 20));
        let packets = topo.counter(Counter::RxPackets) - rx_before.0;
        let bytes = topo.counter(Counter::RxBytes) - rx_before.1;
        // Most of it in frames far over 1514 bytes.
        assert!(
            bytes / packets > 3000,
            "{vip}: {packets} frames of {} bytes on average",
            bytes / packets
        );
    }
    no_size_drops(&topo);
}

#[test]
fn a_proxy_header_goes_into_a_jumbo_first_segment() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let topo = start(9000);
    let server = echo_server(8082, true);
    // The first write is one segment of 8000 bytes: the header goes in front of it.
    let mss = transfer(PP_VIP, 4 << 20, 8000);
    assert!(mss > 8000, "the client's MSS is {mss}");
    let sources = server.join().unwrap();
    assert_eq!(sources, vec![CLIENT.to_string()]);
    no_size_drops(&topo);
    topo.wait_counter(Counter::PpHeadersInserted, 1);
}

#[test]
fn a_too_big_segment_is_answered_with_frag_needed_and_the_transfer_completes() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // The int port's link takes 9000 (the backend announces an MSS of
    // 8960) but border is told 1500 for it.
    let topo = start(1500);
    let server = echo_server(8080, false);
    let mss = transfer(FNAT_VIP, 4 << 20, 64 << 10);
    server.join().unwrap();
    topo.wait_counter(Counter::IcmpTooBigSent, 1);
    topo.wait_counter(Counter::DropTooBig, 1);
    assert!(mss <= 1460, "the client's MSS stayed at {mss}");
    let route = topo.cli.run(&["ip", "route", "get", "10.154.0.100"]);
    let route = String::from_utf8_lossy(&route.stdout);
    assert!(route.contains("mtu 1500"), "the client learnt no path MTU: {route}");
}
