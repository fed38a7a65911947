#!/usr/bin/env python3
"""Traffic for scripts/chaos.sh: echo servers for the backends and a client
load that counts what a real client sees (lost datagrams, resets, outages).

  chaos_load.py serve --tcp 10.98.1.11:8080 --udp 10.98.1.11:8080 ...
  chaos_load.py load --vip 10.98.0.100 --seconds 20 --out result.json ...

Everything is bounded: the load stops after --seconds (plus a short drain),
the servers run until killed. Standard library only.

What `load` measures, printed as one JSON object (and written to --out):
  udp:    datagrams sent with sequence numbers over --udp-flows sockets
          (source ports), echoed by the backend; lost = sent - distinct echoes
          seen by the end of the drain.
  tcp:    --tcp-conns long-lived connections, each sending a 16-byte request
          every --tcp-interval and waiting for its echo; a connection that
          sees a reset, a refusal or no echo within --timeout is counted
          (resets / timeouts) and replaced by a new one.
  churn:  --churn-cps short connections per second (connect, request, echo,
          close), counted as ok, reset (RST or refused) or timeout.
  outages: periods in which nothing succeeded (no echo on any path) for
          more than --outage-ms: [start, end] in Unix seconds, so a caller
          can measure the time to serve again after a fault it made.
"""

import argparse
import errno
import json
import signal
import socket
import struct
import sys
import threading
import time

RESET_ERRNOS = {errno.ECONNRESET, errno.ECONNREFUSED, errno.EPIPE, errno.ECONNABORTED}

# When the load stops: after --seconds, or at once on SIGTERM/SIGINT (it
# still drains and prints its result).
DEADLINE = [0.0]


def running():
    return time.time() < DEADLINE[0]


def stop_now(_sig, _frame):
    DEADLINE[0] = time.time()


def parse_addr(text):
    host, port = text.rsplit(":", 1)
    return host, int(port)


# ---------------------------------------------------------------- servers

def tcp_echo_server(addr):
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(addr)
    srv.listen(1024)

    def echo(conn):
        with conn:
            try:
                while True:
                    data = conn.recv(4096)
                    if not data:
                        return
                    conn.sendall(data)
            except OSError:
                return

    while True:
        conn, _ = srv.accept()
        threading.Thread(target=echo, args=(conn,), daemon=True).start()


def udp_echo_server(addr):
    srv = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    srv.bind(addr)
    while True:
        data, peer = srv.recvfrom(2048)
        try:
            srv.sendto(data, peer)
        except OSError:
            pass


def serve(args):
    threads = []
    for a in args.tcp:
        threads.append(threading.Thread(target=tcp_echo_server, args=(parse_addr(a),), daemon=True))
    for a in args.udp:
        threads.append(threading.Thread(target=udp_echo_server, args=(parse_addr(a),), daemon=True))
    for t in threads:
        t.start()
    print("serving", flush=True)
    while True:
        time.sleep(3600)


# ---------------------------------------------------------------- load

class Progress:
    """Times of the last success on any path, to find outages."""

    def __init__(self, outage_s):
        self.lock = threading.Lock()
        self.last_ok = time.time()
        self.outage_s = outage_s
        self.outages = []

    def ok(self):
        now = time.time()
        with self.lock:
            if now - self.last_ok > self.outage_s:
                self.outages.append([round(self.last_ok, 3), round(now, 3)])
            self.last_ok = now


class Udp:
    def __init__(self, args, progress):
        self.args = args
        self.progress = progress
        self.sent = 0
        self.seen = set()
        self.socks = []
        for _ in range(args.udp_flows):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            s.bind(("0.0.0.0", 0))
            s.settimeout(0.2)
            self.socks.append(s)
        self.stop_rx = threading.Event()
        self.send_errors = 0

    def receiver(self, s):
        while not self.stop_rx.is_set():
            try:
                data = s.recv(2048)
            except socket.timeout:
                continue
            except OSError:
                continue
            if len(data) >= 8:
                self.seen.add(struct.unpack("!Q", data[:8])[0])
                self.progress.ok()

    def sender(self):
        dest = (self.args.vip, self.args.udp_port)
        period = 1.0 / self.args.udp_pps
        payload = b"x" * 56
        start = time.time()
        n = 0
        while True:
            now = time.time()
            if not running():
                return
            due = start + n * period
            if due > now:
                time.sleep(due - now)
            s = self.socks[n % len(self.socks)]
            try:
                s.sendto(struct.pack("!Q", n) + payload, dest)
                self.sent += 1
            except OSError:
                self.send_errors += 1
            n += 1

    def result(self):
        lost = self.sent - len(self.seen)
        return {"sent": self.sent, "received": len(self.seen), "lost": lost,
                "send_errors": self.send_errors}


def classify(e):
    if isinstance(e, socket.timeout):
        return "timeout"
    if isinstance(e, OSError) and e.errno in RESET_ERRNOS:
        return "reset"
    if isinstance(e, ConnectionError):
        return "reset"
    return "error"


class Tcp:
    def __init__(self, args, progress):
        self.args = args
        self.progress = progress
        self.lock = threading.Lock()
        self.counts = {"requests_ok": 0, "reset": 0, "timeout": 0, "error": 0,
                       "connections": 0, "survived": 0}
        self.errors = []

    def count(self, key, n=1):
        with self.lock:
            self.counts[key] += n

    def note(self, kind, e):
        self.count(kind)
        with self.lock:
            if len(self.errors) < 20:
                self.errors.append([round(time.time(), 3), kind, str(e)])

    def connect(self):
        s = socket.create_connection((self.args.vip, self.args.tcp_port), timeout=self.args.timeout)
        s.settimeout(self.args.timeout)
        return s

    def long_lived(self, idx):
        seq = 0
        s = None
        clean = True
        while running():
            try:
                if s is None:
                    s = self.connect()
                    self.count("connections")
                msg = struct.pack("!QQ", idx, seq)
                s.sendall(msg)
                got = b""
                while len(got) < len(msg):
                    chunk = s.recv(len(msg) - len(got))
                    if not chunk:
                        raise ConnectionResetError("closed by peer")
                    got += chunk
                if got != msg:
                    raise OSError("echo mismatch")
                self.count("requests_ok")
                self.progress.ok()
                seq += 1
                time.sleep(self.args.tcp_interval)
            except Exception as e:  # noqa: BLE001 - every failure is counted
                self.note(classify(e), e)
                clean = False
                if s is not None:
                    s.close()
                    s = None
                time.sleep(0.05)
        if s is not None:
            s.close()
        if clean:
            self.count("survived")


class Churn:
    def __init__(self, args, progress):
        self.args = args
        self.progress = progress
        self.lock = threading.Lock()
        self.counts = {"attempted": 0, "ok": 0, "reset": 0, "timeout": 0, "error": 0}

    def one(self):
        with self.lock:
            self.counts["attempted"] += 1
        try:
            s = socket.create_connection((self.args.vip, self.args.tcp_port), timeout=self.args.timeout)
            with s:
                s.settimeout(self.args.timeout)
                s.sendall(b"churn-0123456789")
                got = b""
                while len(got) < 16:
                    chunk = s.recv(16 - len(got))
                    if not chunk:
                        raise ConnectionResetError("closed by peer")
                    got += chunk
            kind = "ok"
            self.progress.ok()
        except Exception as e:  # noqa: BLE001 - every failure is counted
            kind = classify(e)
        with self.lock:
            self.counts[kind] += 1

    def run(self):
        period = 1.0 / self.args.churn_cps
        start = time.time()
        n = 0
        workers = []
        while running():
            due = start + n * period
            now = time.time()
            if due > now:
                time.sleep(due - now)
            t = threading.Thread(target=self.one, daemon=True)
            t.start()
            workers.append(t)
            workers = [w for w in workers if w.is_alive()]
            n += 1
        for w in workers:
            w.join(self.args.timeout + 1)


def load(args):
    progress = Progress(args.outage_ms / 1000.0)
    DEADLINE[0] = time.time() + args.seconds
    signal.signal(signal.SIGTERM, stop_now)
    signal.signal(signal.SIGINT, stop_now)
    threads = []
    udp = tcp = churn = None
    if args.udp_pps > 0:
        udp = Udp(args, progress)
        for s in udp.socks:
            threading.Thread(target=udp.receiver, args=(s,), daemon=True).start()
        threads.append(threading.Thread(target=udp.sender))
    if args.tcp_conns > 0:
        tcp = Tcp(args, progress)
        for i in range(args.tcp_conns):
            threads.append(threading.Thread(target=tcp.long_lived, args=(i,)))
    if args.churn_cps > 0:
        churn = Churn(args, progress)
        threads.append(threading.Thread(target=churn.run))
    started = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if udp is not None:
        time.sleep(args.drain)
        udp.stop_rx.set()
    # An outage still open at the end counts too.
    progress.ok()
    out = {"started": round(started, 3), "ended": round(time.time(), 3),
           "outages": progress.outages}
    if udp is not None:
        out["udp"] = udp.result()
    if tcp is not None:
        out["tcp"] = dict(tcp.counts, first_errors=tcp.errors)
    if churn is not None:
        out["churn"] = churn.counts
    text = json.dumps(out)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text, flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="TCP and UDP echo servers (backends)")
    s.add_argument("--tcp", action="append", default=[], metavar="ADDR:PORT")
    s.add_argument("--udp", action="append", default=[], metavar="ADDR:PORT")
    ld = sub.add_parser("load", help="client load through the VIP")
    ld.add_argument("--vip", required=True)
    ld.add_argument("--tcp-port", type=int, default=80)
    ld.add_argument("--udp-port", type=int, default=7)
    ld.add_argument("--seconds", type=float, required=True)
    ld.add_argument("--udp-pps", type=float, default=1000)
    ld.add_argument("--udp-flows", type=int, default=8)
    ld.add_argument("--tcp-conns", type=int, default=8)
    ld.add_argument("--tcp-interval", type=float, default=0.05)
    ld.add_argument("--churn-cps", type=float, default=20)
    ld.add_argument("--timeout", type=float, default=2.0)
    ld.add_argument("--outage-ms", type=float, default=300)
    ld.add_argument("--drain", type=float, default=1.0, help="seconds to wait for the last echoes")
    ld.add_argument("--out")
    args = p.parse_args()
    if args.cmd == "serve":
        serve(args)
    else:
        load(args)


if __name__ == "__main__":
    sys.exit(main())
