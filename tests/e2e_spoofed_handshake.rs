//! Spoofed handshakes, end to end: scapy in the client namespace sends, from
//! many addresses nobody answers for, a SYN to a full-NAT VIP and then the
//! ACK a spoofer can send: one with a guessed acknowledgement number, one
//! with a bad TCP checksum (which the backend's kernel drops without a
//! word). The backend's kernel answers each SYN; the entries stay half-open
//! and, past `tcp_syn`, no entry and no local tuple is left. A real client
//! connects meanwhile and after.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::client_backend::ClientBackend;
use common::*;
use conf::counters::Counter;

const INSTANCE: &str = "e2esh";
const VIP: &str = "10.112.1.100:80";
const BACKEND: &str = "10.112.2.11:8080";
const CLIENT: &str = "10.112.1.2";
const TCP_SYN_S: u64 = 3;
const PAIRS: usize = 1000;

fn config() -> String {
    let mut c = two_port_config(
        INSTANCE,
        "sh",
        "10.112.1.1/24",
        "10.112.2.1/24",
        "unix:///run/border/e2esh.sock",
    );
    c += &format!(
        r#"
[dataplane.timeouts]
tcp_syn = {TCP_SYN_S}
tcp_closing = 1

[[vip]]
name = "web"
address = "10.112.1.100"
port = 80
protocol = "tcp"
mode = "fullnat"
maglev_table_size = 101

[[vip.backend]]
address = "10.112.2.11"
port = 8080
"#
    );
    c
}

/// `PAIRS` spoofed handshakes from 198.18.x.y (an address the client
/// namespace does not own, so its kernel ignores the SYN-ACKs): a SYN, then
/// an ACK with a wrong acknowledgement number, then an ACK with a bad TCP
/// checksum.
const SPOOF: &str = r#"
import sys, random
from scapy.all import Ether, IP, TCP, sendp, conf
iface, vip, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
ip, port = vip.split(":")
conf.verb = 0
frames = []
for i in range(n):
    src = "198.18.%d.%d" % (i // 250, 1 + i % 250)
    sport = 20000 + i
    isn = random.randrange(1 << 32)
    base = IP(src=src, dst=ip) / TCP(sport=sport, dport=int(port))
    frames.append(Ether() / base.copy())
    frames[-1][TCP].flags = "S"
    frames[-1][TCP].seq = isn
    guess = Ether() / base.copy()
    guess[TCP].flags = "A"
    guess[TCP].seq = (isn + 1) & 0xFFFFFFFF
    guess[TCP].ack = random.randrange(1 << 32)
    frames.append(guess)
    bad = Ether() / base.copy()
    bad[TCP].flags = "A"
    bad[TCP].seq = (isn + 1) & 0xFFFFFFFF
    bad[TCP].ack = random.randrange(1 << 32)
    bad[TCP].chksum = 0xDEAD
    frames.append(bad)
sendp(frames, iface=iface)
print("sent", len(frames), flush=True)
"#;

fn spoof(ns: &Netns, vip: &str) {
    run_scapy(ns, SPOOF, &["sh-ext", vip, &PAIRS.to_string()]);
}

fn connect_once(cli: &Netns, vip: SocketAddr) {
    in_netns(&cli.name, move || {
        let mut s = connect_retry(vip, Duration::from_secs(5)).expect("a real client connects");
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        read_greeting(&mut s).expect("greeting");
    })
    .join()
    .unwrap();
}

#[test]
fn spoofed_handshakes_hold_no_entry_and_no_tuple_past_tcp_syn() {
    clean_instance(INSTANCE);
    let mut t = ClientBackend::start("sh", &config(), &format!("{CLIENT}/24"), "10.112.2.11/24");
    t.route_via("10.112.1.1", "10.112.2.1");
    let (cli, bk, dp) = (&t.cli, &t.bk, &mut t.dp);
    let backend: SocketAddr = BACKEND.parse().unwrap();
    let _server = TcpBackends::start(&bk.name, &[("b0", backend)]);
    let vip: SocketAddr = VIP.parse().unwrap();
    connect_once(cli, vip);

    spoof(cli, VIP);
    wait_until("every spoofed SYN seen", Duration::from_secs(10), || {
        dp.counter(Counter::NewFlows) > PAIRS as u64
    });
    wait_until("the spoofed ACKs judged", Duration::from_secs(10), || {
        dp.counter(Counter::TcpHandshakeAckWrong)
            + dp.counter(Counter::BadL4ChecksumIgnored)
            + dp.counter(Counter::DropTcpRstOutOfWindow)
            >= PAIRS as u64
    });
    // Not one spoofed ACK established a connection: each bad checksum was
    // counted and changed nothing.
    assert!(
        dp.counter(Counter::BadL4ChecksumIgnored) >= PAIRS as u64 * 9 / 10,
        "bad checksums: {}",
        dp.counter(Counter::BadL4ChecksumIgnored)
    );
    connect_once(cli, vip);

    // Past tcp_syn, the sweep and the next scan of the tuple pool (once a
    // second): nothing of the spoofer is held.
    wait_until(
        "no entry and no tuple left",
        Duration::from_secs(TCP_SYN_S + 8),
        || dp.counter(Counter::ConntrackEntries) == 0 && dp.counter(Counter::LocalTuplesInUse) == 0,
    );
    connect_once(cli, vip);
    dp.stop();
}
