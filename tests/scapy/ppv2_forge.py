#!/usr/bin/env python3
"""A client that tries to forge the PROXY header a backend trusts, with
hand-built TCP segments (python3-scapy), for tests/e2e_ppv2_forgery.rs.

    ppv2_forge.py SCENARIO CLIENT_IP VIP VIP_PORT CLIENT_PORT [UDP_PORT]

Run in the client namespace, whose kernel's own RSTs (it has no socket for
these connections) an nftables rule drops. Prints one line: whether a
SYN-ACK came, whether the VIP reset the connection, and the bytes the
server sent back (hex).

Scenarios (each sends `PROXY TCP4 6.6.6.6 ...` as the client's data):
- second_syn: handshake, a bare SYN with another ISN, then the forged data
  at the first ISN;
- first_lost: handshake, a first data segment (the test drops the copy that
  carries border's header on the backend side), then the forged data
  starting one byte early (at the SYN's sequence number), then at the
  first byte;
- mid_stream: handshake, a pause longer than the flow's idle timeout, then
  the forged data;
- table_full: UDP datagrams from many ports to fill the connection table,
  then a handshake (or blind data when no SYN-ACK comes) with the forged
  data.
"""

import random
import sys
import time

from scapy.all import IP, TCP, UDP, AsyncSniffer, Raw, conf, send

conf.verb = 0

FORGED = b"PROXY TCP4 6.6.6.6 6.6.6.7 6666 80\r\nGET / HTTP/1.0\r\n\r\n"


def main():
    scenario, client, vip, vport, sport = sys.argv[1:6]
    vport, sport = int(vport), int(sport)
    got = []
    sniffer = AsyncSniffer(
        filter=f"tcp and src host {vip} and src port {vport} and dst port {sport}",
        prn=got.append,
        store=False,
    )
    sniffer.start()
    time.sleep(1.0)
    isn = random.randrange(1 << 32)

    def tx(flags, seq, ack=0, data=b""):
        p = IP(src=client, dst=vip) / TCP(
            sport=sport,
            dport=vport,
            flags=flags,
            seq=seq % (1 << 32),
            ack=ack % (1 << 32),
            window=65535,
        )
        if data:
            p = p / Raw(data)
        send(p)

    def wait(pred, secs):
        end = time.time() + secs
        while time.time() < end:
            for p in list(got):
                if pred(p):
                    return p
            time.sleep(0.02)
        return None

    def synack(secs):
        return wait(lambda p: int(p[TCP].flags) & 0x12 == 0x12, secs)

    def handshake():
        # The first SYN may be dropped while border resolves the backend.
        for _ in range(4):
            tx("S", isn)
            sa = synack(1.5)
            if sa is not None:
                bseq = sa[TCP].seq + 1
                tx("A", isn + 1, bseq)
                return bseq
        return None

    bseq = None
    if scenario == "second_syn":
        bseq = handshake()
        tx("S", isn + 100_000)
        time.sleep(0.3)
        tx("PA", isn + 1, bseq or 0, FORGED)
    elif scenario == "first_lost":
        bseq = handshake()
        tx("PA", isn + 1, bseq or 0, b"GET / HTT")
        time.sleep(0.3)
        tx("PA", isn, bseq or 0, b"x" + FORGED)
        time.sleep(0.3)
        tx("PA", isn + 1, bseq or 0, FORGED)
    elif scenario == "mid_stream":
        bseq = handshake()
        time.sleep(float(sys.argv[6]))
        tx("PA", isn + 1, bseq or 0, FORGED)
    elif scenario == "table_full":
        udp_port = int(sys.argv[6])
        fill = [
            IP(src=client, dst=vip) / UDP(sport=p, dport=udp_port) / Raw(b"fill")
            for p in range(20000, 21500)
        ]
        send(fill)
        time.sleep(0.5)
        tx("S", isn)
        sa = synack(2.0)
        if sa is not None:
            bseq = sa[TCP].seq + 1
            tx("A", isn + 1, bseq)
        tx("PA", isn + 1, bseq or 0, FORGED)
    else:
        sys.exit(f"unknown scenario {scenario}")

    # What came back: until a FIN or RST, or 4 s.
    wait(lambda p: int(p[TCP].flags) & 0x05 != 0, 4.0)
    time.sleep(0.3)
    sniffer.stop()
    data = {}
    for p in got:
        if Raw in p:
            data[p[TCP].seq] = bytes(p[Raw].load)
    reset = any(int(p[TCP].flags) & 0x04 for p in got)
    answer = b"".join(data[k] for k in sorted(data))
    print(f"synack={int(bseq is not None)} reset={int(reset)} answer={answer.hex()}")

if __name__ == "__main__":
    main()
