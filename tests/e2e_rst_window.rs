//! A blind RST into a live full-NAT flow (docs/security.md), end to end:
//! a real TCP connection from the client namespace through border-dp to an
//! echo backend; scapy in the client namespace learns the connection's next
//! sequence number from one of its segments and injects RSTs off it:
//! - far outside the window (what a blind attacker's guess almost always
//!   is): dropped, `drop_tcp_rst_out_of_window` + 1;
//! - inside the window but not exact: forwarded, the backend's kernel
//!   answers with a challenge ACK, `tcp_rst_not_exact` + 1.
//!
//! After `tcp_closing` (2 s here) the connection still echoes byte for byte:
//! the entry was not moved to `Closed` (which would expire it and leave the
//! next segment without a flow). Then the client's own kernel resets the
//! connection (close with `SO_LINGER` 0: the RST carries its next sequence
//! number), and that RST closes the flow: `tcp_rst_accepted` + 1.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::client_backend::ClientBackend;
use common::*;
use conf::counters::Counter;

const INSTANCE: &str = "e2erw";
const VIP: &str = "10.91.1.100:80";
const BACKEND: &str = "10.91.2.11:8080";
const CLIENT: &str = "10.91.1.2";
const TCP_CLOSING_S: u64 = 2;

fn config() -> String {
    let mut c = two_port_config(
        INSTANCE,
        "rw",
        "10.91.1.1/24",
        "10.91.2.1/24",
        "unix:///run/border/e2erw.sock",
    );
    c += &format!(
        r#"
[dataplane.timeouts]
tcp_closing = {TCP_CLOSING_S}

[[vip]]
name = "web"
address = "10.91.1.100"
port = 80
protocol = "tcp"
mode = "fullnat"
maglev_table_size = 101

[[vip.backend]]
address = "10.91.2.11"
port = 8080
"#
    );
    c
}

/// Sniffs one segment the client sends from `sport` on its interface, then
/// sends a RST `offset` bytes past that segment's end, from the client's
/// address and port to the VIP. Prints "ready" once sniffing, then the
/// sequence number it used.
const INJECT: &str = r#"
import sys, time
from scapy.all import AsyncSniffer, IP, TCP, send
iface, sport, offset = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = AsyncSniffer(iface=iface, filter="tcp and src port %d" % sport, count=1, timeout=20)
s.start()
while not getattr(s, "running", False):
    time.sleep(0.05)
time.sleep(0.5)
print("ready", flush=True)
s.join()
if not s.results:
    sys.exit("no segment seen")
p = s.results[0]
nxt = (p[TCP].seq + len(p[TCP].payload)) & 0xFFFFFFFF
seq = (nxt + offset) & 0xFFFFFFFF
send(IP(src=p[IP].src, dst=p[IP].dst) / TCP(sport=p[TCP].sport, dport=p[TCP].dport, flags="R", seq=seq), verbose=0)
print(seq, flush=True)
"#;

/// Injects a RST `offset` bytes off the connection's next sequence number
/// (see [`INJECT`]); `poke` makes the client send a segment once scapy
/// listens.
fn inject_rst(ns: &Netns, sport: u16, offset: u32, poke: impl FnOnce()) {
    let (sport, offset) = (sport.to_string(), offset.to_string());
    let mut child = spawn_scapy(ns, INJECT, &["rw-ext", &sport, &offset]);
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    if line.trim() != "ready" {
        let mut err = String::new();
        let _ = child.stderr.take().unwrap().read_to_string(&mut err);
        panic!("scapy did not start (python3-scapy, scripts/install-deps.sh): {line}{err}");
    }
    poke();
    finish_scapy(child, &mut out);
}

/// Waits (2 s at most) until a counter reaches `n`: a worker publishes its
/// counters after the burst that counted.
fn wait_counter(dp: &BorderDp, c: Counter, n: u64) {
    wait_until(
        &format!("{} = {n}", c.name()),
        Duration::from_secs(2),
        || dp.counter(c) >= n,
    );
    assert_eq!(dp.counter(c), n, "{}", c.name());
}

#[test]
fn blind_rst_does_not_kill_a_live_fullnat_flow() {
    clean_instance(INSTANCE);
    let mut t = ClientBackend::start("rw", &config(), &format!("{CLIENT}/24"), "10.91.2.11/24");
    t.route_via("10.91.1.1", "10.91.2.1");
    let (cli, bk, dp) = (&t.cli, &t.bk, &mut t.dp);
    let backend: SocketAddr = BACKEND.parse().unwrap();
    let _server = TcpBackends::start(&bk.name, &[("b0", backend)]);

    let vip: SocketAddr = VIP.parse().unwrap();
    let mut conn: TcpStream = in_netns(&cli.name, move || {
        let mut s = connect_retry(vip, Duration::from_secs(10)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        read_greeting(&mut s).expect("greeting");
        s
    })
    .join()
    .unwrap();
    echo_exact(&mut conn, 1, 0, 16 << 10, 1024).expect("echo before");
    let sport = conn.local_addr().unwrap().port();
    let drops_before = dp.drops();

    // Blind: half the sequence space away.
    let mut off = 16 << 10;
    inject_rst(cli, sport, 0x8000_0000, || {
        echo_exact(&mut conn, 1, off, 1024, 1024).expect("echo while sniffing");
    });
    off += 1024;
    // In the window, not exact: the backend's kernel judges it (and sends
    // a challenge ACK); the flow's state stays.
    inject_rst(cli, sport, 1000, || {
        echo_exact(&mut conn, 1, off, 1024, 1024).expect("echo while sniffing");
    });
    off += 1024;

    // Past tcp_closing: a flow moved to Closed would be gone by now.
    std::thread::sleep(Duration::from_millis(TCP_CLOSING_S * 1000 + 1500));
    echo_exact(&mut conn, 1, off, 64 << 10, 4096).expect("echo after tcp_closing");
    wait_counter(dp, Counter::DropTcpRstOutOfWindow, 1);
    wait_counter(dp, Counter::TcpRstNotExact, 1);
    assert_eq!(dp.counter(Counter::TcpRstAccepted), 0);

    // The client's own RST (abortive close) is exact and closes the flow.
    let fd = std::os::fd::AsRawFd::as_raw_fd(&conn);
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt(2) on the open socket `conn` owns, with a pointer
    // to a live `linger` and its exact size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_LINGER: {}", std::io::Error::last_os_error());
    drop(conn);
    wait_counter(dp, Counter::TcpRstAccepted, 1);

    let mut rose = drops_rose(&drops_before, &dp.drops());
    rose.retain(|(name, _)| *name != Counter::DropTcpRstOutOfWindow.name());
    assert!(rose.is_empty(), "drop counters rose: {rose:?}");
    assert_eq!(dp.counter(Counter::DropNoConntrack), 0);
    dp.stop();
}
