#!/usr/bin/env python3
"""Open-loop load through border and its peers: CPU per connection and latency at fixed offered loads.

Every peer serves the topology of perf/e2e.py (client namespace -> the
middle -> nginx in the backend namespace), in namespaces of its own
(ll-cli, ll-lb, ll-bk). For each peer, in the same run: its own ceiling
first (wrk, closed loop, every request a new connection), then h2load
opening connections at fixed rates (fractions of that ceiling, open loop:
a connection starts on schedule whether or not earlier ones finished),
one HTTP/1.1 request per connection.

Measured at each rate: the connections started, done and failed; the
rate actually achieved; per-request latency percentiles from h2load's
--log-file (p50, p99, p99.9); CPU-seconds of the middle (the process's
utime+stime from /proc/<pid>/stat, plus the softirq time of the middle's
CPU, where the kernel peers do their work), of nginx and of h2load, per
10,000 connections; the load average before each rate.

Writes JSON (perf/results/openloop-<ports>.json by default); --render
prints the markdown tables from a JSON, --write-doc replaces the generated
section of a document with them. Exit 0 on success; otherwise one line
`openloop.py: error: ...`. Namespaces and every process it started are
removed on every exit path.

The topology, the backends and the border-dp, nftables and testpmd set-ups
are perf/e2e.py's, imported and run with this script's names and subnets
(its module-level names are set here); HAProxy (tuned) and testpmd (a
DPDK file prefix of its own) are set up here.
"""

import argparse
import json
import math
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import e2e  # noqa: E402  (perf/e2e.py, beside this file)

HarnessError = e2e.HarnessError

# Names and subnets of this script: e2e.py's functions read these module
# globals at call time, so a run here never touches e2e.py's pe-* namespaces.
NAMES = {
    "CLI": "ll-cli", "LB": "ll-lb", "BK": "ll-bk", "EXT": "ll-ext", "INT": "ll-int",
    "CLIENT": "10.166.0.2", "LB_EXT": "10.166.0.1", "VIP": "10.166.0.100",
    "LB_INT": "10.167.0.1", "BACKEND": "10.167.0.11", "BACKEND_FLAT": "10.166.0.11",
    "INSTANCE": "ll",
}
for _k, _v in NAMES.items():
    setattr(e2e, _k, _v)
TESTPMD_PREFIX = "ll-fwd"
MIDDLE_CPU = 1

PEERS = {
    # name: (port kind, middle process, what it is)
    "border-fullnat": ("tap", "border-dp", "border-dp full-NAT, poll adaptive, TAP ports"),
    "border-fullnat-busy": ("tap", "border-dp", "border-dp full-NAT, poll busy, TAP ports"),
    "border-dnat": ("tap", "border-dp", "border-dp DNAT, poll adaptive, TAP ports"),
    "testpmd-tap": ("tap", "testpmd", "dpdk-testpmd io between the same TAPs (bare forwarder)"),
    "nftables-dnat": ("kernel", None, "nftables DNAT in the kernel, veth"),
    "haproxy-tcp": ("kernel", "haproxy", "HAProxy mode tcp, tuned (one thread, tw_reuse, source port range), veth"),
    "border-fullnat-xdp": ("xdp", "border-dp", "border-dp full-NAT, poll adaptive, net_af_xdp on veth"),
    "border-fullnat-busy-xdp": ("xdp", "border-dp", "border-dp full-NAT, poll busy, net_af_xdp on veth"),
    "border-dnat-xdp": ("xdp", "border-dp", "border-dp DNAT, poll adaptive, net_af_xdp on veth"),
    "testpmd-xdp": ("xdp", "testpmd", "dpdk-testpmd io over the same af_xdp ports (bare forwarder)"),
}
DEFAULT_PEERS = {
    "tap": ["border-fullnat", "border-fullnat-busy", "border-dnat", "testpmd-tap", "nftables-dnat",
            "haproxy-tcp"],
    "xdp": ["border-fullnat-xdp", "border-fullnat-busy-xdp", "border-dnat-xdp", "testpmd-xdp",
            "nftables-dnat", "haproxy-tcp"],
}
FORWARDER = {"tap": "testpmd-tap", "xdp": "testpmd-xdp"}
TOOLS = ["ip", "wrk", "h2load", "nginx", "haproxy", "nft", "dpdk-testpmd", "ethtool", "curl",
         "taskset", "stdbuf", "iperf3"]
GOAL_P99_RATIO = 1.2
MARK_BEGIN = "<!-- generated from {json} by perf/openloop.py --render -->"
MARK_END = "<!-- end generated -->"


class Harness(e2e.Harness):
    """e2e.py's harness with this script's HAProxy and testpmd."""

    def haproxy_tuned(self, opts):
        self.kernel_router()
        lb = e2e.LB
        # Tuned as for a load test: the kernel may reuse a TIME_WAIT tuple
        # for an outgoing connection, the full port range is HAProxy's, and
        # HAProxy picks the source port itself (no search in connect()).
        for knob in ("net.ipv4.tcp_tw_reuse=1", "net.ipv4.ip_local_port_range=1024 65535"):
            self.sh(["sysctl", "-q", "-w", knob], ns=lb)
        cfg = os.path.join(self.workdir, "haproxy.cfg")
        e2e.write(cfg, f"""global
    maxconn 9000
    nbthread {opts.haproxy_threads}
defaults
    mode tcp
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend web
    bind {e2e.VIP}:80 backlog 8192
    default_backend web
backend web
    server b {e2e.BACKEND}:80 source {e2e.LB_INT}:1024-65535
""")
        self.sh(["haproxy", "-c", "-q", "-f", cfg])
        self.spawn("haproxy", ["haproxy", "-db", "-f", cfg], ns=lb, pin=e2e.PIN["middle"])
        self.wait("HAProxy listening", lambda: f"{e2e.VIP}:80 " in self.sh(["ss", "-Htln"], ns=lb),
                  proc="haproxy")
        self.backends()
        return e2e.VIP

    def testpmd_own(self, kind):
        # e2e.py's testpmd with a DPDK file prefix of this script's own.
        self.namespaces()
        ext, int_ = e2e.EXT, e2e.INT
        if kind == "xdp":
            self.veth(ext, e2e.CLI, True)
            self.veth(int_, e2e.BK, True)
            vdevs = [f"--vdev=net_af_xdp{i},iface={n},start_queue=0,queue_count=1"
                     for i, n in enumerate((ext, int_))]
        else:
            vdevs = [f"--vdev=net_tap{i},iface={n}" for i, n in enumerate((ext, int_))]
        args = ["stdbuf", "-oL", "dpdk-testpmd", "--no-huge", "-m", "1024", "--no-pci", "--no-shconf",
                f"--file-prefix={TESTPMD_PREFIX}", "-l", f"0-{MIDDLE_CPU}"] + vdevs + [
                "--", "--forward-mode=io", "--auto-start", "--total-num-mbufs=16384"]
        self.spawn("testpmd", args, ns=e2e.LB, stdin=subprocess.PIPE)
        self.wait("testpmd forwarding", lambda: "Press enter to exit" in self.log("testpmd"),
                  timeout=60, proc="testpmd")
        if kind == "tap":
            self.take_tap(ext, e2e.CLI, "testpmd")
            self.take_tap(int_, e2e.BK, "testpmd")
        self.addr(e2e.CLI, ext, f"{e2e.CLIENT}/24")
        self.addr(e2e.BK, int_, f"{e2e.BACKEND_FLAT}/24")
        self.backends()
        return e2e.BACKEND_FLAT

    def serve_peer(self, opts, peer):
        kind = PEERS[peer][0]
        if peer.startswith("border-"):
            poll = "busy" if "-busy" in peer else "adaptive"
            mode = "dnat" if peer.startswith("border-dnat") else "fullnat"
            target = self.border(opts, kind, mode, False, poll)
        elif peer == "nftables-dnat":
            target = self.nftables(opts)
        elif peer == "haproxy-tcp":
            target = self.haproxy_tuned(opts)
        elif peer.startswith("testpmd-"):
            target = self.testpmd_own(kind)
        else:
            raise HarnessError(f"unknown peer {peer}")
        # The client opens up to tens of thousands of connections a second
        # to one address and port: the whole port range, and TIME_WAIT tuples
        # reused (nginx closes first, so they are rare on this side).
        for knob in ("net.ipv4.tcp_tw_reuse=1", "net.ipv4.ip_local_port_range=1024 65535"):
            self.sh(["sysctl", "-q", "-w", knob], ns=e2e.CLI)
        return target

    def pid(self, name):
        for n, p in self.procs:
            if n == name and p.poll() is None:
                return p.pid
        raise HarnessError(f"{name} is not running")


# ---- measurements -------------------------------------------------------------
TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid):
    """utime+stime of a process (all its threads), seconds."""
    with open(f"/proc/{pid}/stat") as f:
        # The command name may hold spaces: fields count from after its ')'.
        rest = f.read().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / TICK


def cpu_lines():
    """/proc/stat's per-CPU and total lines: name -> {field: seconds}."""
    names = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            if not line.startswith("cpu"):
                break
            parts = line.split()
            out[parts[0]] = {n: int(v) / TICK for n, v in zip(names, parts[1:9])}
    return out


def cpu_delta(a, b):
    out = {}
    for cpu in b:
        d = {k: round(b[cpu][k] - a[cpu][k], 3) for k in b[cpu]}
        d["busy"] = round(sum(v for k, v in d.items() if k not in ("idle", "iowait")), 3)
        out[cpu] = d
    return out


def load_average():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def rate_schedule(rate):
    """(connections per period, period in ms) for h2load: its period is whole
    milliseconds. The shortest period within 1 % of `rate` (so arrivals are
    as even as h2load makes them), else the closest pair up to 1 s."""
    best = None
    for period in range(1, 1001):
        k = max(1, round(rate * period / 1000))
        err = abs(k * 1000 / period - rate) / rate
        if err <= 0.01:
            return k, period
        if best is None or err < best[0] - 1e-9:
            best = (err, k, period)
    return best[1], best[2]


def percentile(sorted_values, q):
    """Nearest rank: the smallest value with at least q of all at or below it."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[rank - 1]


def parse_h2load(text, peer):
    m = re.search(r"^requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
                  r"(\d+) errored, (\d+) timeout", text, re.M)
    if not m:
        raise HarnessError(f"{peer}: h2load printed no result: {text.strip().splitlines()[-1:]}")
    out = {"requests": dict(zip(("total", "started", "done", "succeeded", "failed", "errored", "timeout"),
                                map(int, m.groups())))}
    for key, label in (("connect_ms", "time for connect"), ("first_byte_ms", "time to 1st byte")):
        m = re.search(rf"^{label}:\s+(\S+)\s+(\S+)\s+(\S+)", text, re.M)
        if m:
            out[key] = {"min": e2e.ms(m.group(1)), "max": e2e.ms(m.group(2)), "mean": e2e.ms(m.group(3))}
    return out


def read_log(path):
    """h2load's --log-file: (start µs since the epoch, status, µs to the end of the response)."""
    rows = []
    with open(path) as f:
        for line in f:
            parts = line.split("\t")
            if len(parts) >= 3:
                rows.append((int(parts[0]), int(parts[1]), int(parts[2])))
    return rows


def open_loop(h, opts, peer, target, fraction, ceiling, middle):
    rate = max(1.0, ceiling * fraction)
    per_period, period_ms = rate_schedule(rate)
    offered = per_period * 1000 / period_ms
    conns = max(1, round(offered * opts.duration))
    log = os.path.join(h.workdir, f"h2load-{fraction}.log")
    args = ["h2load", "--h1", "-t1", "-c", str(conns), "-n", str(conns), "-r", str(per_period),
            f"--rate-period={period_ms}ms", "-T", f"{opts.timeout}s", "-H", "Connection: close",
            f"--log-file={log}", f"http://{target}/"]
    pids = {"nginx": h.pid("nginx")}
    if middle:
        pids["middle"] = h.pid(middle)
    load_before = load_average()
    before = {k: proc_cpu(p) for k, p in pids.items()}
    cpus0 = cpu_lines()
    # h2load's own CPU: the children's resource usage around its wait (the
    # only child that ends meanwhile; `ip netns exec` and taskset exec it).
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.Popen(["ip", "netns", "exec", e2e.CLI] + e2e.PIN["endpoints"] + args,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    h.procs.append(("h2load", p))
    try:
        out = p.communicate(timeout=opts.duration * 4 + opts.timeout + 60)[0]
    except subprocess.TimeoutExpired:
        raise HarnessError(f"{peer}: h2load still running {opts.duration * 4 + opts.timeout + 60} s later")
    wall = time.monotonic() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpus1 = cpu_lines()
    after = {k: proc_cpu(p_) for k, p_ in pids.items()}
    if p.returncode != 0:
        raise HarnessError(f"{peer}: h2load exited {p.returncode}: {out.strip().splitlines()[-1:]}")
    r = parse_h2load(out, peer)
    rows = read_log(log)
    ok = sorted(d for _, status, d in rows if 200 <= status < 300)
    r["log_rows"] = len(rows)
    if rows:
        span = (max(s + d for s, _, d in rows) - min(s for s, _, _ in rows)) / 1e6
    else:
        span = 0.0
    done = r["requests"]["succeeded"]
    cpu = cpu_delta(cpus0, cpus1)
    mid = f"cpu{MIDDLE_CPU}"
    cpu_s = {
        "middle_process": round(after["middle"] - before["middle"], 3) if middle else None,
        "middle_cpu_softirq": cpu[mid]["softirq"],
        "nginx": round(after["nginx"] - before["nginx"], 3),
        "h2load": round(ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime, 3),
        "machine_busy": cpu["cpu"]["busy"],
        "middle_cpu_busy": cpu[mid]["busy"],
    }
    # The middle's cost: its process (all threads, user and system) and the
    # softirq work on its CPU, where a veth's RPS and a TAP's receive run.
    cpu_s["middle"] = round((cpu_s["middle_process"] or 0.0) + cpu_s["middle_cpu_softirq"], 3)
    per10k = (lambda v: round(v / done * 1e4, 4) if done else None)
    r.update({
        "fraction": fraction,
        "target_cps": round(rate, 1),
        "offered_cps": round(offered, 1),
        "h2load_rate": f"-r {per_period} --rate-period={period_ms}ms",
        "connections": conns,
        "achieved_cps": round(done / span, 1) if span > 0 else 0.0,
        "wall_seconds": round(wall, 2),
        "load_average_before": load_before,
        "latency_ms": {
            "p50": us_ms(percentile(ok, 0.50)), "p99": us_ms(percentile(ok, 0.99)),
            "p99.9": us_ms(percentile(ok, 0.999)), "max": us_ms(ok[-1] if ok else None),
        },
        "cpu_seconds": cpu_s,
        "cpu_s_per_10k": {k: per10k(v) for k, v in cpu_s.items() if v is not None},
        "cpu_by_cpu": {k: v for k, v in cpu.items() if k != "cpu"},
    })
    return r


def us_ms(v):
    return None if v is None else round(v / 1000, 3)


def measure_peer(opts, peer, workdir):
    h = Harness(workdir)
    try:
        return measure_in(h, opts, peer)
    except HarnessError as e:
        raise HarnessError(f"{peer}: {e} (logs in {workdir})".replace(f"{peer}: {peer}: ", f"{peer}: "))
    finally:
        h.teardown()


def measure_in(h, opts, peer):
    kind, middle, what = PEERS[peer]
    target = h.serve_peer(opts, peer)
    e2e.warm_up(h, target, peer)
    r = {"peer": peer, "kind": kind, "what": what, "middle": middle or f"kernel (CPU {MIDDLE_CPU} softirq)",
         "load_average_before": load_average()}
    wrk_opts = types.SimpleNamespace(duration=opts.ceiling_duration, connections=opts.connections)
    ceiling = e2e.load(h, wrk_opts, peer, target)
    ceiling.pop("per_second", None)
    r["ceiling"] = ceiling
    if not ceiling["cps"]:
        raise HarnessError(f"{peer}: no connection completed in the ceiling run")
    r["runs"] = []
    for fraction in opts.fractions:
        time.sleep(opts.pause)
        print(f"  {peer}: {fraction:.0%} of {ceiling['cps']:.0f}/s ...", file=sys.stderr, flush=True)
        r["runs"].append(open_loop(h, opts, peer, target, fraction, ceiling["cps"], middle))
    for name, _ in h.procs:
        if name not in ("wrk", "h2load"):
            h.alive(name)
    return r


# ---- report -----------------------------------------------------------------
def fmt(v, digits=2):
    return "-" if v is None else f"{v:.{digits}f}"


def md_table(cols, rows):
    widths = [max(len(c), *(len(row[i]) for row in rows)) if rows else len(c) for i, c in enumerate(cols)]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"
    return "\n".join([line(cols), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
                     + [line(row) for row in rows])


def run_at(peer, fraction):
    for run in peer["runs"]:
        if abs(run["fraction"] - fraction) < 1e-9:
            return run
    return None


def p99_ratios(report):
    """Each peer's p99 at the highest load over its port kind's forwarder's p99 at the same fraction."""
    by = {p["peer"]: p for p in report["peers"]}
    top = max(report["settings"]["fractions"])
    out = {}
    for p in report["peers"]:
        fwd = by.get(FORWARDER.get(p["kind"], ""))
        if not fwd or fwd is p:
            continue
        a, b = run_at(p, top), run_at(fwd, top)
        if a and b and a["latency_ms"]["p99"] and b["latency_ms"]["p99"]:
            out[p["peer"]] = {"forwarder": fwd["peer"], "fraction": top,
                              "ratio": round(a["latency_ms"]["p99"] / b["latency_ms"]["p99"], 3)}
    return out


def render(report, json_name):
    fr = report["settings"]["fractions"]
    la = report["load_average"]
    out = [f"Run of {report['started']} UTC, commit {report['commit']}, "
           f"{report['machine']['cpus']} CPUs ({report['machine']['cpu']}); "
           f"load average (1, 5, 15 min) {', '.join(map(str, la['start']))} at the start and "
           f"{', '.join(map(str, la['end']))} at the end (a shared machine: other work ran beside it). "
           f"Command: `{report['command']}`.", ""]
    out.append(f"CPU-seconds of the middle per 10,000 connections at fixed offered loads "
               f"(fractions of each peer's own ceiling; the middle: its process, user and system, "
               f"plus the softirq time of CPU {MIDDLE_CPU}):")
    out.append("")
    cols = ["peer", "ceiling conn/s"] + [f"{f:.0%}" for f in fr]
    rows = []
    for p in report["peers"]:
        cells = [p["peer"], f"{p['ceiling']['cps']:.0f}"]
        for f in fr:
            run = run_at(p, f)
            cells.append(fmt(run["cpu_s_per_10k"].get("middle")) if run else "-")
        rows.append(cells)
    out.append(md_table(cols, rows))
    out.append("")
    out.append("Offered and achieved connections per second, and the endpoints' CPU (nginx + h2load) "
               "per 10,000 connections:")
    out.append("")
    cols = ["peer", "load", "offered/s", "achieved/s", "failed", "middle s/10k", "endpoints s/10k"]
    rows = []
    for p in report["peers"]:
        for run in p["runs"]:
            c = run["cpu_s_per_10k"]
            ends = None if c.get("nginx") is None or c.get("h2load") is None else c["nginx"] + c["h2load"]
            req = run["requests"]
            rows.append([p["peer"], f"{run['fraction']:.0%}", f"{run['offered_cps']:.0f}",
                         f"{run['achieved_cps']:.0f}",
                         str(req["total"] - req["succeeded"]), fmt(c.get("middle")), fmt(ends)])
    out.append(md_table(cols, rows))
    out.append("")
    ratios = p99_ratios(report)
    lat_fr = [f for f in (0.5, 0.9) if f in fr] or fr
    out.append("Request latency (h2load's log: from the request written on an open connection to "
               "the end of the response), ms; `x fwd p99`: the p99 over the same port kind's "
               f"forwarder's p99 at the same fraction of its own ceiling (goal for border at "
               f"{max(fr):.0%}: at most {GOAL_P99_RATIO}):")
    out.append("")
    cols = ["peer", "load", "offered/s", "p50", "p99", "p99.9", "max", "connect mean", "x fwd p99"]
    rows = []
    for p in report["peers"]:
        for f in lat_fr:
            run = run_at(p, f)
            if not run:
                continue
            lat = run["latency_ms"]
            ratio = ratios.get(p["peer"]) if f == max(fr) else None
            conn = run.get("connect_ms", {}).get("mean")
            rows.append([p["peer"], f"{f:.0%}", f"{run['offered_cps']:.0f}", fmt(lat["p50"], 3),
                         fmt(lat["p99"], 3), fmt(lat["p99.9"], 3), fmt(lat["max"], 3), fmt(conn, 3),
                         fmt(ratio["ratio"]) if ratio else "-"])
    out.append(md_table(cols, rows))
    verdicts = [f"`{peer}` {r['ratio']:.2f}x ({'met' if r['ratio'] <= GOAL_P99_RATIO else 'missed'})"
                for peer, r in ratios.items() if peer.startswith("border")]
    if verdicts:
        out.append("")
        out.append(f"Goal, border's p99 at {max(fr):.0%} of its ceiling at most {GOAL_P99_RATIO}x the "
                   f"forwarder's at {max(fr):.0%} of its own: " + ", ".join(verdicts) + ".")
    return "\n".join(out) + "\n"


def plot(report, png):
    """CPU-seconds of the middle per 10k connections against the offered load, one line per peer."""
    workdir = tempfile.mkdtemp(prefix="border-openloop-plot-")
    try:
        data = os.path.join(workdir, "cpu.dat")
        with open(data, "w") as f:
            for p in report["peers"]:
                f.write(f'"{p["peer"]}"\n')
                for run in p["runs"]:
                    v = run["cpu_s_per_10k"].get("middle")
                    if v is not None:
                        f.write(f"{run['fraction'] * 100:g} {v}\n")
                f.write("\n\n")
        script = os.path.join(workdir, "cpu.gp")
        lines = ", ".join(
            f'"{data}" index {i} using 1:2 with linespoints lw 2 lc rgb "{e2e.COLOURS[i % len(e2e.COLOURS)]}" '
            f'dt {e2e.DASH[p["kind"]]} title columnheader(1)' for i, p in enumerate(report["peers"]))
        e2e.write(script, f"""set terminal pngcairo size 1000,560 font ",10" noenhanced
set output "{os.path.abspath(png)}"
set title "CPU-seconds of the middle per 10,000 connections (open loop, h2load -r), {report['started']} UTC\\nsolid: TAP ports, dashed: af_xdp, dotted: kernel on veth"
set xlabel "offered load, % of the peer's own ceiling"
set ylabel "CPU-seconds / 10k connections"
set logscale y
set key outside right top
set grid
plot {lines}
""")
        out = subprocess.run(["gnuplot", script], capture_output=True, text=True)
        if out.returncode != 0:
            raise HarnessError(f"gnuplot failed: {out.stderr.strip().splitlines()[-1:]}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def write_doc(doc_path, json_name, text):
    begin = MARK_BEGIN.format(json=json_name)
    with open(doc_path) as f:
        doc = f.read()
    start = doc.find(begin)
    if start < 0:
        raise HarnessError(f"{doc_path} has no marker {begin}")
    start += len(begin)
    stop = doc.find(MARK_END, start)
    if stop < 0:
        raise HarnessError(f"{doc_path}: no {MARK_END} after {begin}")
    e2e.write(doc_path, doc[:start] + "\n" + text + doc[stop:])


def git_commit():
    try:
        rev = subprocess.run(["git", "-C", HERE, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", HERE, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return rev + ("-dirty" if dirty else "") if rev else "unknown"
    except OSError:
        return "unknown"


def parse_fractions(text):
    try:
        out = [float(x) / 100 for x in text.split(",") if x.strip()]
    except ValueError:
        raise HarnessError(f"--loads {text!r}: percentages, comma-separated")
    if not out or any(not 0 < f <= 2 for f in out):
        raise HarnessError(f"--loads {text!r}: each in (0, 200] percent")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ports", default="tap", choices=sorted(DEFAULT_PEERS),
                    help="which DPDK port kind (and default peers and JSON name): tap or xdp (default tap)")
    ap.add_argument("--peers", default="", help=f"comma-separated subset of: {', '.join(PEERS)}")
    ap.add_argument("--loads", default="10,25,50,75,90",
                    help="offered loads, percent of each peer's ceiling (default 10,25,50,75,90)")
    ap.add_argument("--duration", type=float, default=10, help="h2load seconds per load (default 10)")
    ap.add_argument("--ceiling-duration", type=int, default=10,
                    help="wrk seconds of the closed-loop ceiling run (default 10)")
    ap.add_argument("--connections", type=int, default=32, help="wrk connections of the ceiling run")
    ap.add_argument("--timeout", type=int, default=10, help="h2load's connection timeout, s (default 10)")
    ap.add_argument("--pause", type=float, default=2, help="seconds of rest before each load (default 2)")
    ap.add_argument("--haproxy-threads", type=int, default=1,
                    help="HAProxy nbthread (default 1: the middle has one CPU)")
    ap.add_argument("--border-dp", default="target/release/border-dp", help="border-dp binary")
    ap.add_argument("--json", default="", help="results (default perf/results/openloop-<ports>.json)")
    ap.add_argument("--render", action="store_true", help="print the markdown tables of --json and exit")
    ap.add_argument("--write-doc", default="",
                    help="with --render: replace the generated section of this document")
    ap.add_argument("--plot", default="",
                    help="with --render: a PNG of the middle's CPU per 10k connections against the load (gnuplot)")
    opts = ap.parse_args()
    if not opts.json:
        opts.json = os.path.join(os.path.relpath(HERE), "results", f"openloop-{opts.ports}.json")
    if opts.render:
        try:
            with open(opts.json) as f:
                report = json.load(f)
        except (OSError, ValueError) as e:
            raise HarnessError(f"{opts.json}: {e}")
        text = render(report, opts.json)
        if opts.plot:
            plot(report, opts.plot)
        if opts.write_doc:
            write_doc(opts.write_doc, opts.json, text)
        else:
            sys.stdout.write(text)
        return
    opts.fractions = parse_fractions(opts.loads)
    peers = [p.strip() for p in (opts.peers or ",".join(DEFAULT_PEERS[opts.ports])).split(",") if p.strip()]
    for p in peers:
        if p not in PEERS:
            raise HarnessError(f"unknown peer {p!r} (known: {', '.join(PEERS)})")
    if os.geteuid() != 0:
        raise HarnessError("must run as root (network namespaces)")
    for tool in TOOLS:
        if not shutil.which(tool):
            raise HarnessError(f"{tool} not found (scripts/install-deps.sh installs it)")
    if any(p.startswith("border") for p in peers) and not os.access(opts.border_dp, os.X_OK):
        raise HarnessError(f"border-dp binary {opts.border_dp} not found "
                           "(cargo build --release --bin border-dp, or --border-dp PATH)")
    opts.border_dp = os.path.abspath(opts.border_dp)
    if (os.cpu_count() or 1) < 2:
        raise HarnessError("needs two CPUs (the endpoints on CPU 0, the middle on CPU 1)")
    e2e.PIN["endpoints"], e2e.PIN["middle"] = ["taskset", "-c", "0"], ["taskset", "-c", str(MIDDLE_CPU)]
    workdir = tempfile.mkdtemp(prefix="border-openloop-")
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    report = {
        "tool": "perf/openloop.py", "started": started, "commit": git_commit(),
        "command": " ".join(["perf/openloop.py"] + sys.argv[1:]),
        "machine": e2e.machine(), "load_average": {"start": load_average()},
        "settings": {"ports": opts.ports, "fractions": opts.fractions, "duration_s": opts.duration,
                     "ceiling": f"wrk -t1 -c{opts.connections} -d{opts.ceiling_duration}s Connection: close",
                     "h2load": subprocess.run(["h2load", "--version"], capture_output=True,
                                              text=True).stdout.strip(),
                     "timeout_s": opts.timeout, "haproxy_threads": opts.haproxy_threads,
                     "pinned": "endpoints on CPU 0, the middle on CPU 1", "nice": os.nice(0)},
        "peers": [],
    }
    for p in peers:
        print(f"{p}: {PEERS[p][2]} ...", file=sys.stderr, flush=True)
        peer_dir = os.path.join(workdir, p)
        os.makedirs(peer_dir)
        report["peers"].append(measure_peer(opts, p, peer_dir))
    report["load_average"]["end"] = load_average()
    report["p99_vs_forwarder"] = p99_ratios(report)
    os.makedirs(os.path.dirname(os.path.abspath(opts.json)), exist_ok=True)
    e2e.write(opts.json, json.dumps(report, indent=1) + "\n")
    sys.stdout.write(render(report, opts.json))
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    for sig in e2e.SIGNALS:
        e2e.signal.signal(sig, e2e.on_signal)
    try:
        main()
    except HarnessError as e:
        e2e.delete_namespaces()
        print(f"openloop.py: error: {e}", file=sys.stderr)
        sys.exit(1)
