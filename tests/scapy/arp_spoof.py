#!/usr/bin/env python3
"""Spoofed ARP frames for tests/e2e_neigh.rs, written byte by byte and sent
on a raw AF_PACKET socket (fast enough for tens of thousands of frames).

    arp_spoof.py flood IFACE COUNT OUR_IP
    arp_spoof.py garp IFACE IP

flood: COUNT frames from random locally administered MACs, broadcast:
requests and (one in five) replies, their sender addresses in turn on
OUR_IP's /24 (hosts .100-.250), off every subnet (198.18.0.0/15) and in
the /8 around it, their targets in turn OUR_IP, the sender itself
(gratuitous) and other hosts of the /24 (.30-.90).
garp: one gratuitous ARP request for IP from IFACE's own MAC (what a VRRP
master or a moved server announces).

Prints `sent=N`.
"""

import random
import socket
import sys
import time


def frame(op, sha, spa, tpa, dst=b"\xff" * 6):
    return (
        dst
        + sha
        + b"\x08\x06"
        + b"\x00\x01\x08\x00\x06\x04"
        + op.to_bytes(2, "big")
        + sha
        + socket.inet_aton(spa)
        + b"\x00" * 6
        + socket.inet_aton(tpa)
        + b"\x00" * 18
    )


def iface_mac(iface):
    with open(f"/sys/class/net/{iface}/address") as f:
        return bytes.fromhex(f.read().strip().replace(":", ""))


def flood(sock, count, ours):
    net = ours.rsplit(".", 1)[0]
    first = int(ours.split(".")[0])
    rnd = random.Random(23)
    for i in range(count):
        sha = bytes([0x02, 0xAA]) + rnd.randbytes(4)
        kind = i % 3
        if kind == 0:
            spa = f"{net}.{rnd.randint(100, 250)}"
        elif kind == 1:
            spa = f"198.{rnd.randint(18, 19)}.{rnd.randint(0, 255)}.{rnd.randint(1, 254)}"
        else:
            spa = f"{first}.{rnd.randint(0, 255)}.{rnd.randint(0, 255)}.{rnd.randint(1, 254)}"
        target = i % 4
        if target == 0:
            tpa = ours
        elif target == 1:
            tpa = spa
        else:
            tpa = f"{net}.{rnd.randint(30, 90)}"
        op = 2 if i % 5 == 0 else 1
        sock.send(frame(op, sha, spa, tpa))
        if i % 128 == 127:
            # Let border-dp's TAP queue drain: (nearly) every frame should
            # arrive, even at a debug build on a busy machine.
            time.sleep(0.005)
    return count


def main():
    mode, iface = sys.argv[1], sys.argv[2]
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    sock.bind((iface, 0))
    if mode == "flood":
        sent = flood(sock, int(sys.argv[3]), sys.argv[4])
    elif mode == "garp":
        ip = sys.argv[3]
        sock.send(frame(1, iface_mac(iface), ip, ip))
        sent = 1
    else:
        sys.exit(f"unknown mode {mode}")
    print(f"sent={sent}")


if __name__ == "__main__":
    main()
