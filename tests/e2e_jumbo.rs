//! Port MTUs end to end over TAP, the kernels' own TCP as the judge.
//!
//! DPDK 22.11's virtual PMDs bound the MTU by the longest frame they say
//! they receive: net_tap 1522 bytes (MTU 1504), net_af_packet and
//! net_memif 1518; net_af_xdp a UMEM frame (4096 bytes less headroom: no
//! multi-buffer). So `mtu = 9000` on a TAP port must end border-dp at
//! start with one line naming that limit, and jumbo frames proper are
//! covered by the chained-buffer tests on byte fixtures
//! (dataplane/tests/jumbo.rs). What TAP can show is the other half: a
//! port configured smaller (1280) than its link (1500), where border
//! answers the client's too-big segments with ICMP fragmentation-needed,
//! the client's kernel lowers its path MTU and the transfers complete
//! byte-exact, through full-NAT and through a PROXY v2 VIP.
//!
//! Namespaces `jb-lb`, `jb-cli`, `jb-bk`; subnets 10.154.0.0/24 (client
//! side) and 10.155.0.0/24 (backends). The tests share the names, so they
//! run one at a time under a lock.

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

/// The config: ports `ext` and `int` at `ext_mtu` and `int_mtu`, a
/// full-NAT, a DNAT and a PROXY v2 VIP, all to one backend.
fn config(ext_mtu: u16, int_mtu: u16) -> String {
    let mut c = two_port_config(
        "e2ejb",
        TAG,
        "10.154.0.1/24",
        "10.155.0.1/24",
        "unix:///run/border/e2ejb.sock",
    )
    .replace(
        "host_interface = \"kjb-ext\"",
        &format!("host_interface = \"kjb-ext\"\nmtu = {ext_mtu}"),
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

/// The topology, border's `int` port at `int_mtu` and the backend's
/// link at 1500, its routes (default and on-link) sending at most
/// `int_mtu` (border drops longer frames on arrival) but announcing the
/// MSS of 1500.
fn start(int_mtu: u16) -> ClientBackend {
    let topo = ClientBackend::start(
        TAG,
        &config(1500, int_mtu),
        &format!("{CLIENT}/24"),
        &format!("{BACKEND}/24"),
    );
    topo.bk
        .run(&["ip", "link", "set", "dev", "jb-int", "mtu", "1500"]);
    topo.route_via("10.154.0.1", "10.155.0.1");
    let mtu = int_mtu.to_string();
    topo.bk.run(&[
        "ip",
        "route",
        "replace",
        "default",
        "via",
        "10.155.0.1",
        "mtu",
        "lock",
        &mtu,
        "advmss",
        "1460",
    ]);
    // Full-NAT replies go to border's own address on int, on the link:
    // the connected route needs the same cap.
    topo.bk.run(&[
        "ip",
        "route",
        "replace",
        "10.155.0.0/24",
        "dev",
        "jb-int",
        "scope",
        "link",
        "src",
        BACKEND,
        "mtu",
        "lock",
        &mtu,
        "advmss",
        "1460",
    ]);
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
            sources.push(format!("{}.{}.{}.{}", rest[0], rest[1], rest[2], rest[3]));
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

/// Starts border-dp with both data ports on `kind` at `mtu = 9000` and
/// returns the one error line it ended with.
fn refused_start(kind: PortKind) -> String {
    let lb = Netns::new("jb-lb");
    let peer = Netns::new("jb-cli");
    kind.prepare(&lb, &peer, "jb-ext");
    kind.prepare(&lb, &peer, "jb-int");
    let dir = TempDir::new(TAG);
    let cfg = dir.path("border.toml");
    let text = two_port_config_on(
        kind,
        "e2ejb",
        TAG,
        "10.154.0.1/24",
        "10.155.0.1/24",
        "unix:///run/border/e2ejb.sock",
    )
    .replace(
        "host_interface = \"kjb-ext\"",
        "host_interface = \"kjb-ext\"\nmtu = 9000",
    );
    std::fs::write(&cfg, text).unwrap();
    let out = std::process::Command::new("timeout")
        .args(["30", "ip", "netns", "exec", &lb.name, border_dp_bin()])
        .args(["--standalone", "--config"])
        .arg(&cfg)
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("run border-dp");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("border-dp: error"))
        .collect();
    assert_eq!(lines.len(), 1, "{err}");
    eprintln!("{kind:?}: {}", lines[0]);
    lines[0].to_string()
}

#[test]
fn an_mtu_net_tap_cannot_take_ends_the_start_with_one_line() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let line = refused_start(PortKind::Tap);
    assert!(
        line.contains("port `ext`")
            && line.contains("mtu 9000 needs 9018-byte frames, net_tap takes at most 1522"),
        "{line}"
    );
}

#[test]
fn an_mtu_net_af_xdp_cannot_take_ends_the_start_with_one_line() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let line = refused_start(PortKind::AfXdp);
    assert!(
        line.contains("port `ext`")
            && line.contains("mtu 9000 is outside what net_af_xdp takes (68..=3542)"),
        "{line}"
    );
}

#[test]
fn too_big_segments_get_frag_needed_and_the_transfers_complete() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let topo = start(1280);
    // The backend announces an MSS of 1460: the client's first full
    // segments are 1500 bytes of IP, too big for int.
    let server = echo_server(8080, false);
    let mss = transfer(FNAT_VIP, 4 << 20, 64 << 10);
    server.join().unwrap();
    assert!(mss <= 1240, "the client's MSS stayed at {mss}");
    topo.wait_counter(Counter::IcmpTooBigSent, 1);
    topo.wait_counter(Counter::DropTooBig, 1);
    let route = topo.cli.run(&["ip", "route", "get", "10.154.0.100"]);
    let route = String::from_utf8_lossy(&route.stdout);
    assert!(
        route.contains("mtu 1280"),
        "the client's kernel learnt no path MTU: {route}"
    );
    // The PROXY v2 VIP on the same address: its header goes into the
    // first segment within the path MTU the client now keeps.
    let server = echo_server(8082, true);
    transfer(PP_VIP, 1 << 20, 1200);
    assert_eq!(server.join().unwrap(), vec![CLIENT.to_string()]);
    topo.wait_counter(Counter::PpHeadersInserted, 1);
    assert_eq!(topo.counter(Counter::DropOverMtu), 0);
    assert_eq!(topo.counter(Counter::DropChainTooLong), 0);
}
