#!/usr/bin/env python3
"""Side-by-side end-to-end comparison of border with its peers (docs/performance.md).

The same topology (client namespace -> middle -> backend namespace with nginx
and iperf3) is served in turn by every peer: border full-NAT, DNAT and
full-NAT with PROXY v2 on TAP ports (busy polling, and full-NAT once more
with adaptive polling), nftables DNAT and HAProxy `mode tcp` with
send-proxy-v2 in the kernel over veth (HAProxy tuned, and once more with its
defaults), dpdk-testpmd io over the same TAPs, and border full-NAT/DNAT and
testpmd over net_af_xdp on veth pairs. Every peer's HTTP backend is the same
nginx (`listen ... proxy_protocol` where a PROXY v2 header comes).

Runs go in rounds, every peer once per round in the order given (ABCABC...);
a peer named twice in --peers runs twice per round. Each run: fresh
namespaces, a warm-up of wrk (--warmup s, not measured), then wrk with
`Connection: close` for --duration seconds (every request a new connection),
then iperf3 with one stream and with -P 8.

Measured per run: connections per second (wrk's total / duration) and its
per-second series (the client kernel's completed active opens, TcpActiveOpens
minus TcpAttemptFails from /proc/net/snmp sampled each second), wrk latency
p50/p99/max, the client namespace's retransmitted segments and SYN
retransmissions during the measured wrk phase (the nstat counters
TcpRetransSegs and TcpExtTCPSynRetrans), iperf3 throughput, whole-machine
CPU-seconds (/proc/stat, all CPUs, everything running) per 10k connections
and the load average before and after. Per peer: median, min-max and
interquartile range over its runs; ratios (against the bare forwarder of the
same port kind, nftables, HAProxy) are taken round by round (the i-th run
of one peer over the i-th run of the other), then their median and range.

Prints a table, writes JSON (--json; the commit and the command in it) and a
PNG plot of the per-second connection rate (--plot, gnuplot). `--render
JSON` prints the markdown tables of a results file; `--update-docs` rewrites
every block of docs/*.md marked `<!-- generated from FILE by perf/e2e.py
--render -->` ... `<!-- end generated -->` from its FILE. Exit 0 on
success; otherwise one line `e2e.py: error: ...` naming what failed.
Namespaces (pe-*) and every process it started are removed on every exit
path.
"""

import argparse
import json
import os
import re
import resource
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

CLI, LB, BK = "pe-cli", "pe-lb", "pe-bk"
EXT, INT = "pe-ext", "pe-int"
CLIENT = "10.201.0.2"
LB_EXT = "10.201.0.1"
VIP = "10.201.0.100"
LB_INT = "10.202.0.1"
BACKEND = "10.202.0.11"
# The bare forwarders join both sides into one subnet: the client talks to
# the backend directly.
BACKEND_FLAT = "10.201.0.11"
INSTANCE = "pe"

PEERS = {
    # name: (port kind, what it is, border-dp's worker poll mode)
    "border-fullnat": ("tap", "border-dp full-NAT, busy polling, TAP ports", "busy"),
    "border-fullnat-adaptive": ("tap", "border-dp full-NAT, adaptive polling (sleeps on Rx interrupts), TAP ports",
                                "adaptive"),
    "border-dnat": ("tap", "border-dp DNAT, busy polling, TAP ports", "busy"),
    "border-ppv2": ("tap", "border-dp full-NAT + PROXY v2 to nginx proxy_protocol, busy polling, TAP ports", "busy"),
    "nftables-dnat": ("kernel", "nftables DNAT in the kernel, veth", None),
    "haproxy-tcp": ("kernel", "HAProxy mode tcp, send-proxy-v2 to nginx proxy_protocol, tuned "
                              "(tcp_tw_reuse, source port range, nbthread, maxconn), veth", None),
    "haproxy-default": ("kernel", "HAProxy mode tcp, send-proxy-v2 to nginx proxy_protocol, "
                                  "maxconn 9000 and the kernel's defaults, veth", None),
    "testpmd-tap": ("tap", "dpdk-testpmd io over the same TAPs (bare forwarder, busy polling)", None),
    "border-fullnat-xdp": ("xdp", "border-dp full-NAT, busy polling, net_af_xdp on veth", "busy"),
    "border-dnat-xdp": ("xdp", "border-dp DNAT, busy polling, net_af_xdp on veth", "busy"),
    "testpmd-xdp": ("xdp", "dpdk-testpmd io over the same af_xdp ports (bare forwarder, busy polling)", None),
}
# Two descriptors a connection, within the usual hard limit of 20000 open
# files (raising it needs CAP_SYS_RESOURCE).
HAPROXY_MAXCONN = min(9900, (resource.getrlimit(resource.RLIMIT_NOFILE)[1] - 100) // 2)
# The ratio columns: each run over the same round's run of this peer.
FORWARDER = {"tap": "testpmd-tap", "xdp": "testpmd-xdp"}
REFERENCES = [("x fwd", None), ("x nft", "nftables-dnat"), ("x HAProxy", "haproxy-tcp")]
# CPU placement (--pin): the client's and backend's programs on CPU 0, the
# middle's user-space work (the DPDK worker lcore, HAProxy) on CPU 1. Left to
# the scheduler, a busy-polling forwarder and nginx or wrk can land on one
# CPU and the rate drops to a fraction for the rest of the run.
PIN = {"endpoints": [], "middle": []}
RPS_MASK = "2"  # CPU 1
TOOLS = ["ip", "wrk", "iperf3", "nginx", "haproxy", "nft", "dpdk-testpmd", "ethtool", "curl", "gnuplot",
         "taskset", "stdbuf"]


SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class HarnessError(Exception):
    """One line naming what failed."""


class Harness:
    """Processes and namespaces of one peer's run; `teardown` removes them all."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.procs = []  # (name, Popen)

    # ---- running things -------------------------------------------------
    def sh(self, args, ns=None, check=True, timeout=60):
        full = (["ip", "netns", "exec", ns] if ns else []) + list(args)
        try:
            out = subprocess.run(full, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise HarnessError(f"`{' '.join(args)}` took more than {timeout} s")
        if check and out.returncode != 0:
            last = (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
            raise HarnessError(f"`{' '.join(args)}`{' in ' + ns if ns else ''} failed: {last}")
        return out.stdout

    def spawn(self, name, args, ns=None, env=None, stdin=subprocess.DEVNULL, pin=None):
        pin = pin if pin is not None else PIN["endpoints"] if ns in (CLI, BK) else []
        full = (["ip", "netns", "exec", ns] if ns else []) + pin + list(args)
        log = open(os.path.join(self.workdir, f"{name}.log"), "w")
        # `ip netns exec` execs the program: the pid is the program's.
        try:
            p = subprocess.Popen(full, stdin=stdin, stdout=log, stderr=subprocess.STDOUT,
                                 env=env, start_new_session=True)
        except OSError as e:
            raise HarnessError(f"cannot start {name}: {e}")
        self.procs.append((name, p))
        return p

    def log(self, name):
        try:
            with open(os.path.join(self.workdir, f"{name}.log")) as f:
                return f.read()
        except OSError:
            return ""

    def alive(self, name):
        for n, p in self.procs:
            if n == name and p.poll() is not None:
                tail = (self.log(name).strip().splitlines() or ["(no output)"])[-1]
                raise HarnessError(f"{name} exited with {p.returncode}: {tail}")

    def wait(self, what, cond, timeout=30, proc=None):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if proc:
                self.alive(proc)
            if cond():
                return
            time.sleep(0.1)
        raise HarnessError(f"timed out after {timeout} s waiting for {what}")

    def teardown(self):
        # A second SIGINT/SIGTERM must not cut the clean-up short.
        held = {sig: signal.signal(sig, signal.SIG_IGN) for sig in SIGNALS}
        try:
            self.stop_all()
        finally:
            for sig, handler in held.items():
                signal.signal(sig, handler)

    def stop_all(self):
        for _, p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 10
        for _, p in reversed(self.procs):
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs.clear()
        delete_namespaces()
        for f in (f"/dev/shm/border-{INSTANCE}-state", f"/dev/shm/border-{INSTANCE}-tables"):
            if os.path.exists(f):
                os.remove(f)

    # ---- topology -------------------------------------------------------
    def namespaces(self):
        delete_namespaces()
        for ns in (LB, CLI, BK):
            self.sh(["ip", "netns", "add", ns])
            self.sh(["ip", "-n", ns, "link", "set", "lo", "up"])

    def veth(self, iface, peer_ns, checksum_off):
        """A veth pair `iface` between LB and `peer_ns` (same name on both ends)."""
        self.sh(["ip", "-n", LB, "link", "add", iface, "type", "veth", "peer", "name", iface,
                 "netns", peer_ns])
        self.sh(["ip", "-n", LB, "link", "set", iface, "up"])
        if checksum_off:
            # af_xdp takes frames as they are: the peer computes its checksums.
            self.sh(["ethtool", "-K", iface, "tx", "off"], ns=peer_ns)

    def addr(self, ns, iface, cidr):
        self.sh(["ip", "-n", ns, "addr", "add", cidr, "dev", iface])
        self.sh(["ip", "-n", ns, "link", "set", iface, "up"])

    def take_tap(self, iface, ns, proc):
        """Moves a TAP that a DPDK process created in LB into `ns`."""
        self.wait(f"{iface} created by {proc}",
                  lambda: self.sh(["ip", "-n", LB, "link", "show", iface], check=False) != ""
                  or self.sh(["ip", "-n", ns, "link", "show", iface], check=False) != "",
                  proc=proc)
        if self.sh(["ip", "-n", LB, "link", "show", iface], check=False):
            self.sh(["ip", "-n", LB, "link", "set", iface, "netns", ns])

    # ---- backends -------------------------------------------------------
    def backends(self):
        """nginx (:80 plain, :81 with the PROXY header) and iperf3 in BK: the
        one backend of every peer."""
        d = self.workdir
        nginx = f"""daemon off;
master_process off;
worker_processes 1;
worker_rlimit_nofile 65536;
pid {d}/nginx.pid;
error_log {d}/nginx-error.log error;
events {{ worker_connections 16384; }}
http {{
    access_log off;
    client_body_temp_path {d}/cb; proxy_temp_path {d}/px; fastcgi_temp_path {d}/fc;
    uwsgi_temp_path {d}/uw; scgi_temp_path {d}/sc;
    server {{ listen 80 reuseport backlog=4096; return 200 "ok\\n"; }}
    server {{ listen 81 proxy_protocol backlog=4096; return 200 "ok\\n"; }}
}}
"""
        write(f"{d}/nginx.conf", nginx)
        self.spawn("nginx", ["nginx", "-c", f"{d}/nginx.conf", "-e", f"{d}/nginx-stderr.log"], ns=BK)
        self.spawn("iperf3-server", ["iperf3", "-s", "-p", "5201"], ns=BK)
        for port in (":80 ", ":81 ", ":5201 "):
            self.wait(f"a listener on {port.strip()} in {BK}",
                      lambda: port in self.sh(["ss", "-Htln"], ns=BK), proc=None)
        for name in ("nginx", "iperf3-server"):
            self.alive(name)

    # ---- the peers ------------------------------------------------------
    def border(self, opts, kind, mode, ppv2, poll):
        """border-dp in LB; returns the VIP. With PROXY v2 the web VIP's
        backend is nginx's proxy_protocol listener and there is no iperf3
        VIP (nginx here has no stream module to take the header off)."""
        self.namespaces()
        if kind == "xdp":
            self.veth(EXT, CLI, True)
            self.veth(INT, BK, True)
            dev = lambda i, n: f"net_af_xdp{i},iface={n},start_queue=0,queue_count=1"
        else:
            dev = lambda i, n: f"net_tap{i},iface={n}"
        web_port = 81 if ppv2 else 80
        pp = 'proxy_protocol = "v2"\n' if ppv2 else ""
        iperf_vip = "" if ppv2 else f"""[[vip]]
name = "iperf"
address = "{VIP}"
port = 5201
protocol = "tcp"
mode = "{mode}"
[[vip.backend]]
address = "{BACKEND}"
port = 5201
"""
        cfg = f"""instance = "{INSTANCE}"
[dataplane]
main_lcore = 0
worker_lcores = [1]
poll = "{poll}"
eal_args = ["--no-huge", "-m", "512", "--no-pci", "--no-shconf"]
conntrack_per_worker = 262144
flow_hash_key = "00112233445566778899aabbccddeeff"
[[port]]
name = "ext"
devargs = "{dev(0, EXT)}"
addresses = ["{LB_EXT}/24"]
host_interface = "kpe-ext"
[[port]]
name = "int"
devargs = "{dev(1, INT)}"
addresses = ["{LB_INT}/24"]
host_interface = "kpe-int"
local_addresses = ["{LB_INT}"]
local_port_range = [1024, 32767]
[mgmt]
listen = "unix:///run/border/{INSTANCE}.sock"
[[vip]]
name = "web"
address = "{VIP}"
port = 80
protocol = "tcp"
mode = "{mode}"
{pp}[[vip.backend]]
address = "{BACKEND}"
port = {web_port}
{iperf_vip}"""
        path = os.path.join(self.workdir, "border.toml")
        write(path, cfg)
        self.sh([opts.border_dp, "--check-config", path])
        env = dict(os.environ, RUST_LOG="info", NO_COLOR="1")
        self.spawn("border-dp", [opts.border_dp, "--standalone", "--config", path], ns=LB, env=env)
        self.wait("border-dp running", lambda: "border-dp running" in self.log("border-dp"),
                  timeout=60, proc="border-dp")
        if kind == "tap":
            self.take_tap(EXT, CLI, "border-dp")
            self.take_tap(INT, BK, "border-dp")
        self.addr(CLI, EXT, f"{CLIENT}/24")
        self.addr(BK, INT, f"{BACKEND}/24")
        self.sh(["ip", "-n", CLI, "route", "add", "default", "via", LB_EXT])
        if mode == "dnat":
            self.sh(["ip", "-n", BK, "route", "add", "default", "via", LB_INT])
        self.backends()
        return VIP

    def kernel_router(self):
        self.namespaces()
        self.veth(EXT, CLI, False)
        self.veth(INT, BK, False)
        self.addr(LB, EXT, f"{LB_EXT}/24")
        self.addr(LB, INT, f"{LB_INT}/24")
        # The VIP is in the client's subnet: the middle answers ARP for it
        # (nftables DNATs it in prerouting, HAProxy binds it).
        self.sh(["ip", "-n", LB, "addr", "add", f"{VIP}/32", "dev", EXT])
        self.sh(["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"], ns=LB)
        self.addr(CLI, EXT, f"{CLIENT}/24")
        self.addr(BK, INT, f"{BACKEND}/24")
        self.sh(["ip", "-n", CLI, "route", "add", "default", "via", LB_EXT])
        self.sh(["ip", "-n", BK, "route", "add", "default", "via", LB_INT])
        if PIN["middle"]:
            # A veth delivers in the sender's softirq, so the kernel's
            # forwarding would run on the endpoints' CPU. RPS moves what
            # the middle receives to the middle's CPU, as the DPDK peers have it.
            for iface in (EXT, INT):
                self.sh(["sh", "-c", f"echo {RPS_MASK} > /sys/class/net/{iface}/queues/rx-0/rps_cpus"],
                        ns=LB)

    def nftables(self, opts):
        self.kernel_router()
        rules = f"""table ip pe {{
    chain pre {{
        type nat hook prerouting priority dstnat; policy accept;
        ip daddr {VIP} tcp dport {{ 80, 5201 }} dnat to {BACKEND}
    }}
}}
"""
        write(os.path.join(self.workdir, "nft.conf"), rules)
        self.sh(["nft", "-f", os.path.join(self.workdir, "nft.conf")], ns=LB)
        self.backends()
        return VIP

    def haproxy(self, opts, tuned):
        """HAProxy in LB. Tuned as its users tune it for many short
        connections to one backend: the middle namespace reuses TIME_WAIT
        tuples for new outgoing connections (tcp_tw_reuse=1, timestamps are
        on) over all ports above 1024, HAProxy picks the source port itself
        from that range (`source ... :1024-65535`), one thread (it has one
        CPU, as border has one worker) and maxconn as high as the
        open-files limit allows (wrk holds 32 connections: it never binds).
        Untuned (`haproxy-default`): maxconn 9000 and the kernel's defaults;
        its outgoing connections then wait for ports held in TIME_WAIT."""
        self.kernel_router()
        if tuned:
            self.sh(["sysctl", "-q", "-w", "net.ipv4.tcp_tw_reuse=1"], ns=LB)
            self.sh(["sysctl", "-q", "-w", "net.ipv4.ip_local_port_range=1024 65535"], ns=LB)
            # maxconn: two descriptors a connection, within the open-files
            # limit a process gets here (20000, no CAP_SYS_RESOURCE to raise it).
            head = f"global\n    nbthread 1\n    maxconn {HAPROXY_MAXCONN}\n"
            source = f" source {LB_INT}:1024-65535"
            fe_maxconn = f"    maxconn {HAPROXY_MAXCONN}\n"
        else:
            head, source, fe_maxconn = "global\n    maxconn 9000\n", "", ""
        cfg = os.path.join(self.workdir, "haproxy.cfg")
        write(cfg, f"""{head}defaults
    mode tcp
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend web
    bind {VIP}:80 backlog 4096
{fe_maxconn}    default_backend web
backend web
    server b {BACKEND}:81 send-proxy-v2{source}
frontend iperf
    bind {VIP}:5201
    default_backend iperf
backend iperf
    server b {BACKEND}:5201
""")
        self.sh(["haproxy", "-c", "-q", "-f", cfg])
        self.spawn("haproxy", ["haproxy", "-db", "-f", cfg], ns=LB, pin=PIN["middle"])
        self.wait("HAProxy listening", lambda: f"{VIP}:80 " in self.sh(["ss", "-Htln"], ns=LB),
                  proc="haproxy")
        self.backends()
        return VIP

    def testpmd(self, opts, kind):
        self.namespaces()
        if kind == "xdp":
            self.veth(EXT, CLI, True)
            self.veth(INT, BK, True)
            vdevs = [f"--vdev=net_af_xdp{i},iface={n},start_queue=0,queue_count=1"
                     for i, n in enumerate((EXT, INT))]
        else:
            vdevs = [f"--vdev=net_tap{i},iface={n}" for i, n in enumerate((EXT, INT))]
        # stdbuf: testpmd's stdout is a file here; line buffering shows its
        # progress (and "Press enter to exit") as it happens.
        args = ["stdbuf", "-oL", "dpdk-testpmd", "--no-huge", "-m", "1024", "--no-pci", "--no-shconf",
                "--file-prefix=pe-fwd", "-l", "0-1"] + vdevs + [
                "--", "--forward-mode=io", "--auto-start", "--total-num-mbufs=16384"]
        # Without -i testpmd runs until a line arrives on stdin: keep it open.
        self.spawn("testpmd", args, ns=LB, stdin=subprocess.PIPE)
        self.wait("testpmd forwarding", lambda: "Press enter to exit" in self.log("testpmd"),
                  timeout=60, proc="testpmd")
        if kind == "tap":
            self.take_tap(EXT, CLI, "testpmd")
            self.take_tap(INT, BK, "testpmd")
        self.addr(CLI, EXT, f"{CLIENT}/24")
        self.addr(BK, INT, f"{BACKEND_FLAT}/24")
        self.backends()
        return BACKEND_FLAT

    def serve(self, opts, peer):
        kind, _, poll = PEERS[peer]
        if peer.startswith("border-"):
            mode = "dnat" if "-dnat" in peer else "fullnat"
            return self.border(opts, kind, mode, peer == "border-ppv2", poll)
        if peer == "nftables-dnat":
            return self.nftables(opts)
        if peer.startswith("haproxy-"):
            return self.haproxy(opts, peer == "haproxy-tcp")
        if peer.startswith("testpmd-"):
            return self.testpmd(opts, kind)
        raise HarnessError(f"unknown peer {peer}")


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def delete_namespaces():
    for ns in (LB, CLI, BK):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


# ---- measurements -----------------------------------------------------------
def cpu_busy_seconds():
    """Whole machine: non-idle jiffies of all CPUs, in seconds."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def tcp_counters(h):
    """The client namespace's Tcp and TcpExt counters (what nstat reads)."""
    text = h.sh(["cat", "/proc/net/snmp", "/proc/net/netstat"], ns=CLI)
    out, header = {}, None
    for line in text.splitlines():
        prefix, _, rest = line.partition(":")
        if header and header[0] == prefix:
            if prefix in ("Tcp", "TcpExt"):
                for k, v in zip(header[1], rest.split()):
                    out[prefix + k] = int(v)
            header = None
        else:
            header = (prefix, rest.split())
    return out


def warm_up(h, target, peer):
    """One answered request before timing: ARP resolved, TAPs settled."""
    for _ in range(20):
        out = subprocess.run(["ip", "netns", "exec", CLI, "curl", "-s", "-m", "1", "-o", "/dev/null",
                              "-w", "%{http_code}", f"http://{target}/"],
                             capture_output=True, text=True)
        if out.stdout.strip() == "200":
            return
        time.sleep(0.5)
    raise HarnessError(f"{peer}: no HTTP 200 from {target} through it after 20 tries")


UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}


def ms(text):
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    if not m:
        raise HarnessError(f"unparsable wrk latency {text!r}")
    return float(m.group(1)) * UNITS[m.group(2)]


def parse_wrk(text, peer):
    def find(pattern):
        m = re.search(pattern, text, re.M)
        return m
    total = find(r"^\s*(\d+) requests in ([\d.]+)(\w+),")
    lat = find(r"^\s*Latency\s+(\S+)\s+(\S+)\s+(\S+)")
    p50, p99 = find(r"^\s*50%\s+(\S+)"), find(r"^\s*99%\s+(\S+)")
    if not (total and lat and p50 and p99):
        raise HarnessError(f"{peer}: wrk printed no result: {text.strip().splitlines()[-1:]}")
    errors = find(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)")
    non2xx = find(r"Non-2xx or 3xx responses: (\d+)")
    return {
        "requests": int(total.group(1)),
        "latency_ms": {"p50": ms(p50.group(1)), "p99": ms(p99.group(1)), "max": ms(lat.group(3))},
        "socket_errors": dict(zip(("connect", "read", "write", "timeout"),
                                  map(int, errors.groups()) if errors else (0, 0, 0, 0))),
        "non_2xx": int(non2xx.group(1)) if non2xx else 0,
    }


def load(h, opts, peer, target):
    """wrk for opts.duration s; samples the client's opens each second."""
    tcp0, cpu0 = tcp_counters(h), cpu_busy_seconds()
    wrk = subprocess.Popen(["ip", "netns", "exec", CLI] + PIN["endpoints"] + [
                            "wrk", "-t1", f"-c{opts.connections}",
                            f"-d{opts.duration}s", "--latency", "-H", "Connection: close",
                            f"http://{target}/"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           start_new_session=True)
    h.procs.append(("wrk", wrk))
    start = time.monotonic()
    series, last, last_t = [], tcp0, start
    while wrk.poll() is None:
        time.sleep(max(0.0, 1.0 - (time.monotonic() - last_t)))
        if wrk.poll() is not None:
            break
        now_c, now_t = tcp_counters(h), time.monotonic()
        opened = (now_c["TcpActiveOpens"] - last["TcpActiveOpens"]) - (
            now_c["TcpAttemptFails"] - last["TcpAttemptFails"])
        series.append([round(now_t - start, 2), round(opened / (now_t - last_t), 1)])
        last, last_t = now_c, now_t
    out = wrk.communicate()[0]
    elapsed = time.monotonic() - start
    load_after = loadavg()
    cpu = cpu_busy_seconds() - cpu0
    tcp1 = tcp_counters(h)
    if wrk.returncode != 0:
        raise HarnessError(f"{peer}: wrk exited {wrk.returncode}: {out.strip().splitlines()[-1:]}")
    r = parse_wrk(out, peer)
    r["cps"] = round(r["requests"] / opts.duration, 1)
    r["per_second"] = series
    r["client_tcp"] = {
        "retrans_segs": tcp1["TcpRetransSegs"] - tcp0["TcpRetransSegs"],
        "syn_retrans": tcp1.get("TcpExtTCPSynRetrans", 0) - tcp0.get("TcpExtTCPSynRetrans", 0),
        "attempt_fails": tcp1["TcpAttemptFails"] - tcp0["TcpAttemptFails"],
    }
    r["cpu_seconds"] = round(cpu, 2)
    r["wall_seconds"] = round(elapsed, 2)
    r["load_average_after"] = load_after
    r["cpu_s_per_10k_conns"] = round(cpu / r["requests"] * 1e4, 3) if r["requests"] else None
    return r


def iperf(h, opts, peer, target, streams):
    """iperf3 through the peer. A connection the peer does not carry (say, a
    full-NAT port pool full of TIME_WAIT tuples) is a result, not a harness
    failure: it is reported as 0 Gb/s with the error."""
    out = h.sh(PIN["endpoints"] + ["iperf3", "-c", target, "-p", "5201", "-J", "-t", str(opts.iperf_duration),
                "-P", str(streams), "--connect-timeout", "5000"],
               ns=CLI, check=False, timeout=opts.iperf_duration + 60)
    try:
        j = json.loads(out)
    except ValueError:
        tail = (out.strip().splitlines() or ["(nothing)"])[-1]
        raise HarnessError(f"{peer}: iperf3 -P {streams} printed no JSON: {tail}")
    if "error" in j:
        print(f"{peer}: iperf3 -P {streams}: {j['error']}", file=sys.stderr, flush=True)
        return {"gbps": 0.0, "retransmits": None, "error": j["error"]}
    end = j["end"]
    return {"gbps": round(end["sum_received"]["bits_per_second"] / 1e9, 3),
            "retransmits": end["sum_sent"].get("retransmits", 0)}


def warm_up_load(h, opts, peer, target):
    """wrk as measured, for opts.warmup s, its numbers thrown away: caches,
    ARP and neighbour entries, the peer's tables and the TIME_WAIT
    population reach their steady state before the clock starts."""
    if opts.warmup <= 0:
        return
    out = h.sh(PIN["endpoints"] + ["wrk", "-t1", f"-c{opts.connections}", f"-d{opts.warmup}s",
                                   "-H", "Connection: close", f"http://{target}/"],
               ns=CLI, check=False, timeout=opts.warmup + 60)
    if not re.search(r"^\s*\d+ requests in", out, re.M):
        raise HarnessError(f"{peer}: warm-up wrk printed no result: {out.strip().splitlines()[-1:]}")


def measure(opts, peer, round_no, workdir):
    h = Harness(workdir)
    try:
        return measure_in(h, opts, peer, round_no)
    except HarnessError as e:
        raise HarnessError(f"{peer}: {e} (logs in {workdir})".replace(f"{peer}: {peer}: ", f"{peer}: "))
    finally:
        h.teardown()


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def measure_in(h, opts, peer, round_no):
    kind, what, poll = PEERS[peer]
    target = h.serve(opts, peer)
    warm_up(h, target, peer)
    warm_up_load(h, opts, peer, target)
    r = {"peer": peer, "round": round_no, "kind": kind, "what": what, "poll": poll,
         "load_average_before": loadavg()}
    r.update(load(h, opts, peer, target))
    if opts.iperf_duration > 0 and peer != "border-ppv2":
        r["iperf_1"] = iperf(h, opts, peer, target, 1)
        r["iperf_8"] = iperf(h, opts, peer, target, 8)
    for name, _ in h.procs:
        if name not in ("wrk",):
            h.alive(name)
    if peer.startswith("border"):
        r["border_counters"] = border_counters(h, opts)
        r["border_drops"] = {k: v for k, v in r["border_counters"].items() if k.startswith("drop_")}
    return r


def border_counters(h, opts):
    """border-dp's own counters (non-zero totals) over the whole peer run."""
    out = h.sh([opts.borderctl, "counters", "--instance", INSTANCE, "--json"])
    try:
        counters = json.loads(out)["counters"]
    except (ValueError, KeyError):
        raise HarnessError("borderctl counters --json printed no counters")
    return {k: v["total"] for k, v in counters.items() if v["total"]}


# ---- report -----------------------------------------------------------------
def spread(values):
    """median, min, max and the quartiles (inclusive method) of a sample."""
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    q1, q3 = ((statistics.quantiles(values, n=4, method="inclusive")[i] for i in (0, 2))
              if len(values) > 1 else (values[0], values[0]))
    return {"median": round(statistics.median(values), 3), "min": values[0], "max": values[-1],
            "q1": round(q1, 3), "q3": round(q3, 3), "n": len(values)}


def by_peer(runs):
    """Each peer's runs in order, peers in the order they first ran."""
    out = {}
    for r in runs:
        out.setdefault(r["peer"], []).append(r)
    return out


def round_ratios(mine, theirs, key):
    """key(run) of my i-th run over key(run) of their i-th run, for every i
    both have: each pair ran in the same round, under the same load."""
    out = []
    for a, b in zip(mine, theirs):
        x, y = key(a), key(b)
        if x is not None and y:
            out.append(round(x / y, 3))
    return out


def iperf_gbps(name):
    return lambda r: (r.get(name) or {}).get("gbps") if not (r.get(name) or {}).get("error") else None


def summarise(runs):
    """Per peer: the spread of every measure over its runs, and its ratios."""
    peers = by_peer(runs)
    out = []
    for peer, rs in peers.items():
        kind = rs[0]["kind"]
        s = {"peer": peer, "kind": kind, "what": rs[0]["what"], "poll": rs[0]["poll"], "runs": len(rs),
             "cps": spread(r["cps"] for r in rs),
             "p50_ms": spread(r["latency_ms"]["p50"] for r in rs),
             "p99_ms": spread(r["latency_ms"]["p99"] for r in rs),
             "max_ms": spread(r["latency_ms"]["max"] for r in rs),
             "cpu_s_per_10k_conns": spread(r["cpu_s_per_10k_conns"] for r in rs),
             "iperf_1_gbps": spread(iperf_gbps("iperf_1")(r) for r in rs),
             "iperf_8_gbps": spread(iperf_gbps("iperf_8")(r) for r in rs),
             "iperf_failed": {k: sum(1 for r in rs if (r.get(k) or {}).get("error"))
                              for k in ("iperf_1", "iperf_8")},
             "syn_retrans": sum(r["client_tcp"]["syn_retrans"] for r in rs),
             "retrans_segs": sum(r["client_tcp"]["retrans_segs"] for r in rs),
             "socket_errors": sum(sum(r["socket_errors"].values()) for r in rs),
             "non_2xx": sum(r["non_2xx"] for r in rs),
             "border_drops": (sum(sum(r["border_drops"].values()) for r in rs)
                              if all("border_drops" in r for r in rs) else None),
             "ratios": {}}
        for label, ref in REFERENCES:
            ref = ref or FORWARDER.get(kind)
            if ref is None or ref == peer or ref not in peers:
                continue
            per_round = round_ratios(rs, peers[ref], lambda r: r["cps"])
            if per_round:
                s["ratios"][label] = {"against": ref, "cps_per_round": per_round,
                                      "cps": spread(per_round),
                                      "p99": spread(round_ratios(rs, peers[ref],
                                                                 lambda r: r["latency_ms"]["p99"]))}
        out.append(s)
    return out


def median_range(sp, fmt="{:.0f}"):
    if sp is None:
        return "-"
    if sp["n"] == 1:
        return fmt.format(sp["median"])
    return f"{fmt.format(sp['median'])} ({fmt.format(sp['min'])}-{fmt.format(sp['max'])})"


def gbps_cell(s, key):
    sp, failed = s[key + "_gbps"], s["iperf_failed"][key]
    if sp is None:
        return "failed" if failed else "-"
    return f"{sp['median']:.2f}" + (f" ({failed} failed)" if failed else "")


COLUMNS = ["peer", "runs", "conn/s median (min-max)", "IQR", "x fwd", "x nft", "x HAProxy",
           "p50 ms", "p99 ms median (min-max)", "SYN rtx", "sock err", "Gb/s 1", "Gb/s 8",
           "CPU s/10k", "dp drops"]


def table_rows(summary):
    rows = []
    for s in summary:
        c = s["cps"]
        ratio = lambda label: (median_range(s["ratios"][label]["cps"], "{:.2f}")
                               if label in s["ratios"] else "-")
        rows.append([
            s["peer"], str(s["runs"]), median_range(c), f"{c['q1']:.0f}-{c['q3']:.0f}",
            ratio("x fwd"), ratio("x nft"), ratio("x HAProxy"),
            f"{s['p50_ms']['median']:.2f}", median_range(s["p99_ms"], "{:.2f}"),
            str(s["syn_retrans"]), str(s["socket_errors"]),
            gbps_cell(s, "iperf_1"), gbps_cell(s, "iperf_8"),
            f"{s['cpu_s_per_10k_conns']['median']:.2f}" if s["cpu_s_per_10k_conns"] else "-",
            "-" if s["border_drops"] is None else str(s["border_drops"]),
        ])
    return rows


def text_table(cols, rows):
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(cols)]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"
    return "\n".join([line(cols), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
                     + [line(row) for row in rows])


def table(report):
    return text_table(COLUMNS, table_rows(report["summary"]))


def render(report, path):
    """The markdown of a results file: the summary table, each run's
    connection rate by round, and what made it (commit, command, load)."""
    summary = report["summary"]
    out = [text_table(COLUMNS, table_rows(summary)), ""]
    runs = by_peer(report["runs"])
    n = max(len(rs) for rs in runs.values())
    cols = ["conn/s by round"] + [str(i + 1) for i in range(n)]
    rows = [[peer] + [f"{r['cps']:.0f}" for r in rs] + [""] * (n - len(rs)) for peer, rs in runs.items()]
    out += [text_table(cols, rows), ""]
    loads = [r["load_average_before"][0] for r in report["runs"]] + \
            [r["load_average_after"][0] for r in report["runs"]]
    st = report["settings"]
    dirty = " with uncommitted changes" if report.get("commit_dirty") else ""
    out.append(f"Made by `{report['command']}` at commit `{report['commit'][:12]}`{dirty}, "
               f"{report['started']} to {report['finished']}; {st['rounds']} rounds in the order "
               f"{', '.join(st['peers_per_round'])}, each run {st['warmup_seconds']} s of warm-up "
               f"(not measured) then {st['duration_seconds']} s of wrk `{st['wrk']}`"
               + (f" and iperf3 {st['iperf3_seconds']} s" if st["iperf3_seconds"] else "")
               + f". Machine: {report['machine']['cpus']} CPUs ({report['machine']['cpu']}), "
               f"Linux {report['machine']['kernel']}, shared: 1-minute load average "
               f"{min(loads):.1f}-{max(loads):.1f} around the runs. "
               f"Source: [{os.path.basename(path)}]({os.path.relpath(path, 'docs')}).")
    return "\n".join(out) + "\n"


BEGIN_RE = re.compile(r"^<!-- generated from (\S+) by perf/e2e.py --render -->\n", re.M)
END_MARK = "<!-- end generated -->"


def update_docs(root):
    """Rewrites every generated block of docs/*.md from its JSON; returns
    the files changed."""
    changed = []
    docs = os.path.join(root, "docs")
    for name in sorted(os.listdir(docs)):
        if not name.endswith(".md"):
            continue
        path = os.path.join(docs, name)
        with open(path) as f:
            text = f.read()
        out, pos = [], 0
        for m in BEGIN_RE.finditer(text):
            stop = text.find(END_MARK, m.end())
            if stop < 0:
                raise HarnessError(f"{path}: no {END_MARK} after the block from {m.group(1)}")
            out += [text[pos:m.end()], render(read_report(root, m.group(1)), m.group(1))]
            pos = stop
        out.append(text[pos:])
        new = "".join(out)
        if new != text:
            write(path, new)
            changed.append(path)
    return changed


def read_report(root, rel):
    try:
        with open(os.path.join(root, rel)) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise HarnessError(f"cannot read results {rel}: {e}")


# One colour per peer (gnuplot's default cycle repeats after eight); the
# dash type tells the port kind: solid TAP, dashed af_xdp, dotted kernel.
COLOURS = ["#9400d3", "#009e73", "#56b4e9", "#e69f00", "#f0e442", "#0072b2", "#e51e10",
           "#000000", "#cc79a7", "#8b4513"]
DASH = {"tap": 1, "xdp": 2, "kernel": 3}


def median_run(rs):
    """The run whose rate is nearest the peer's median (the one plotted)."""
    med = statistics.median(r["cps"] for r in rs)
    return min(rs, key=lambda r: abs(r["cps"] - med))


def plot(report, png, workdir):
    shown = [median_run(rs) for rs in by_peer(report["runs"]).values()]
    data = os.path.join(workdir, "cps.dat")
    with open(data, "w") as f:
        for r in shown:
            f.write(f'"{r["peer"]}"\n')
            for t, v in r["per_second"]:
                f.write(f"{t} {v}\n")
            f.write("\n\n")
    script = os.path.join(workdir, "cps.gp")
    st = report["settings"]
    write(script, f"""set terminal pngcairo size 1100,600 font ",10" noenhanced
set output "{png}"
set title "New connections per second, each peer's median round (client's completed active opens; wrk -c{st['connections']}, Connection: close, after {st['warmup_seconds']} s of warm-up)\\nsolid: TAP ports, dashed: af_xdp on veth, dotted: kernel on veth"
set xlabel "seconds since the measured load started"
set ylabel "connections / s"
set key outside right top
set grid
plot {", ".join(f'"{data}" index {i} using 1:2 with lines lw 2 lc rgb "{COLOURS[i % len(COLOURS)]}" dt {DASH[r["kind"]]} title columnheader(1)' for i, r in enumerate(shown))}
""")
    out = subprocess.run(["gnuplot", script], capture_output=True, text=True)
    if out.returncode != 0:
        raise HarnessError(f"gnuplot failed: {out.stderr.strip().splitlines()[-1:]}")


def machine():
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {"cpu": cpu, "cpus": os.cpu_count(), "kernel": os.uname().release,
            "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)}


def repo_root():
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def commit():
    """HEAD of the checkout this script is in, and whether tracked files differ from it."""
    root = repo_root()
    git = lambda *a: subprocess.run(["git", "-C", root, *a], capture_output=True, text=True)
    head = git("rev-parse", "HEAD")
    if head.returncode != 0:
        return "unknown", None
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return head.stdout.strip(), bool(dirty.stdout.strip())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5,
                    help="rounds; each runs every peer of --peers once, in that order (default 5)")
    ap.add_argument("--duration", type=int, default=30, help="measured wrk seconds per run (default 30)")
    ap.add_argument("--warmup", type=int, default=5,
                    help="wrk seconds before each measured run, not measured (default 5)")
    ap.add_argument("--iperf-duration", type=int, default=5,
                    help="iperf3 seconds, two runs per peer run; 0 skips iperf3 (default 5)")
    ap.add_argument("--connections", type=int, default=32, help="wrk connections (default 32)")
    ap.add_argument("--peers", default=",".join(PEERS),
                    help="comma-separated peers run in each round, in this order; a peer named "
                         f"twice runs twice per round (known: {', '.join(PEERS)})")
    ap.add_argument("--border-dp", default="target/release/border-dp", help="border-dp binary")
    ap.add_argument("--no-pin", action="store_true",
                    help="leave CPU placement to the scheduler (default: client and backend "
                         "programs on CPU 0, the middle's on CPU 1)")
    ap.add_argument("--json", default="e2e.json", help="where to write the results")
    ap.add_argument("--plot", default="", help="PNG of connections per second over time")
    ap.add_argument("--render", metavar="JSON",
                    help="print the markdown tables of a results file and exit (no root needed)")
    ap.add_argument("--update-docs", action="store_true",
                    help="rewrite every generated block of docs/*.md from its JSON and exit")
    opts = ap.parse_args()
    if opts.render:
        print(render(read_report(".", opts.render), opts.render), end="")
        return
    if opts.update_docs:
        for path in update_docs(repo_root()):
            print(f"updated {os.path.relpath(path)}")
        return
    peers = [p.strip() for p in opts.peers.split(",") if p.strip()]
    for p in peers:
        if p not in PEERS:
            raise HarnessError(f"unknown peer {p!r} (known: {', '.join(PEERS)})")
    if not peers:
        raise HarnessError("--peers names no peer")
    if opts.rounds < 1 or opts.duration < 1 or opts.warmup < 0 or opts.iperf_duration < 0:
        raise HarnessError("--rounds and --duration must be at least 1, --warmup and --iperf-duration "
                           "at least 0")
    if os.geteuid() != 0:
        raise HarnessError("must run as root (network namespaces)")
    for tool in TOOLS:
        if not shutil.which(tool):
            raise HarnessError(f"{tool} not found (scripts/install-deps.sh installs it)")
    if any(p.startswith("border") for p in peers) and not os.access(opts.border_dp, os.X_OK):
        raise HarnessError(f"border-dp binary {opts.border_dp} not found "
                           "(cargo build --release --bin border-dp, or --border-dp PATH)")
    opts.border_dp = os.path.abspath(opts.border_dp)
    # border-dp's counters are read with the borderctl built beside it.
    opts.borderctl = os.path.join(os.path.dirname(opts.border_dp), "borderctl")
    if any(p.startswith("border") for p in peers) and not os.access(opts.borderctl, os.X_OK):
        raise HarnessError(f"borderctl not found beside border-dp ({opts.borderctl}; "
                           "cargo build --release --bins)")
    if not opts.no_pin:
        if (os.cpu_count() or 1) < 2:
            raise HarnessError("pinning needs two CPUs (or --no-pin)")
        PIN["endpoints"], PIN["middle"] = ["taskset", "-c", "0"], ["taskset", "-c", "1"]
    head, dirty = commit()
    command = shlex.join(["perf/e2e.py"] + sys.argv[1:])
    workdir = tempfile.mkdtemp(prefix="border-e2e-perf-")
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    order = peers * opts.rounds
    runs, seen = [], {}
    for i, p in enumerate(order):
        seen[p] = seen.get(p, 0) + 1
        print(f"[{i + 1}/{len(order)}] {p} run {seen[p]}: {PEERS[p][1]} ...", file=sys.stderr, flush=True)
        run_dir = os.path.join(workdir, f"{i + 1:03d}-{p}")
        os.makedirs(run_dir)
        runs.append(measure(opts, p, seen[p], run_dir))
        print(f"    {runs[-1]['cps']:.0f} conn/s, p99 {runs[-1]['latency_ms']['p99']:.2f} ms, "
              f"load {runs[-1]['load_average_before'][0]:.1f}", file=sys.stderr, flush=True)
    report = {"commit": head, "commit_dirty": dirty, "command": command,
              "started": started, "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "machine": machine(),
              "settings": {"rounds": opts.rounds, "peers_per_round": peers,
                           "duration_seconds": opts.duration, "warmup_seconds": opts.warmup,
                           "connections": opts.connections,
                           "wrk": f"-t1 -c{opts.connections} -H 'Connection: close'",
                           "iperf3_seconds": opts.iperf_duration, "pinned": not opts.no_pin},
              "order": order, "summary": summarise(runs), "runs": runs}
    write(opts.json, json.dumps(report, indent=1) + "\n")
    if opts.plot:
        plot(report, os.path.abspath(opts.plot), workdir)
    print(table(report))
    shutil.rmtree(workdir, ignore_errors=True)


def on_signal(signum, _frame):
    raise HarnessError(f"interrupted by signal {signum}")


if __name__ == "__main__":
    for sig in SIGNALS:
        signal.signal(sig, on_signal)
    try:
        main()
    except HarnessError as e:
        delete_namespaces()
        print(f"e2e.py: error: {e}", file=sys.stderr)
        sys.exit(1)
