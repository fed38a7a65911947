#!/usr/bin/env bash
# Chaos and soak for border (issue 14, docs/reliability.md): faults under
# load, with figures. Bounded in time; everything it creates is removed on
# exit, also on error or Ctrl-C. As root on Debian 12.
#
#   ch-cli (client, load)  --veth ch-ext--  [border-dp, border-mgmt in ch-lb]  --veth ch-int--  ch-bk (echo backends)
#   10.98.0.2                               ext 10.98.0.1/24, VIP 10.98.0.100   int 10.98.1.1/24   10.98.1.11, 10.98.1.12
#
# The data ports are net_af_xdp on veth pairs: like a NIC, they outlive a
# border-dp that dies (net_tap interfaces would vanish with it).
#
# Scenarios (each prints `chaos: <name>: PASS|FAIL <figures>`):
#   mgmt-kill     kill -9 of border-mgmt under load, restart: 0 datagrams lost, 0 resets
#   swaps         N table swaps (weight changes) under load: 0 lost, 0 resets
#   apply-storm   100 parallel ApplyConfig callers: every call answered, the
#                 answer with the highest generation is what runs, whole; no
#                 table a worker refused, none mixing two configs
#   dp-kill       kill -9 of border-dp under load, restart: resets, time to serve again
#   dp-panic      a worker panics (test trigger): border-dp exits 1 naming the
#                 worker and the panic; restarted: time to serve again
#   mbuf-pool     every free mbuf held for 1 s (test trigger) under load: the
#                 ports count what they had no mbuf for, forwarding recovers
#                 without a restart
#   soak          churn (connections, health flaps, an apply every second):
#                 RSS of both processes flat within 5% after warm-up, no fd or
#                 thread growth, counters consistent (rx = tx + drops + to_host)
#
# Usage: scripts/chaos.sh [--short] [--soak-seconds N] [--only NAME[,NAME]] [--report FILE]
#   --short          CI form: 100 swaps, 5 s phases, a 16 s soak (about 80 s in all)
#   (default)        long form: 1000 swaps and a 10-minute soak
#   CHAOS_KEEP=1     keep the logs and figures (the directory is named on the first line)
#   BORDER_BIN=DIR   use border-dp, border-mgmt, borderctl from DIR (default: cargo build, debug:
#                    the worker panic trigger exists in debug builds only)
# Exit status 0 only if every scenario passed. Last line: `chaos: N passed, N failed`.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "scripts/chaos.sh must run as root (network namespaces, veth, AF_XDP)" >&2; exit 1; }
export PATH="$HOME/.cargo/bin:$PATH"

SHORT=0
SOAK_SECONDS=""
ONLY=""
REPORT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --short) SHORT=1 ;;
    --soak-seconds) SOAK_SECONDS=$2; shift ;;
    --only) ONLY=$2; shift ;;
    --report) REPORT=$2; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "chaos.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
if [ "$SHORT" = 1 ]; then
  SWAPS=100; PHASE=5; SOAK_SECONDS=${SOAK_SECONDS:-16}; WARMUP=4; SAMPLE_EVERY=2
else
  SWAPS=1000; PHASE=20; SOAK_SECONDS=${SOAK_SECONDS:-600}; WARMUP=60; SAMPLE_EVERY=10
fi

if [ -z "${BORDER_BIN:-}" ]; then
  cargo build --bins -q
  BORDER_BIN=$PWD/target/debug
fi
BIN=$BORDER_BIN
LOAD="python3 $PWD/scripts/chaos_load.py"
INST=chaos
SOCK=/run/border/$INST.sock
VIP=10.98.0.100
DIR=$(mktemp -d /tmp/border-chaos.XXXXXX)
STATE=$DIR/state
PANIC_FILE=$DIR/panic-worker
HOLD_FILE=$DIR/hold-mbufs
DP_PID=""; MG_PID=""; BK_PID=""
PASSED=0; FAILED=0
RESULTS=()
DP_STARTS=0

say() { printf 'chaos: %s\n' "$*"; }
ctl() { "$BIN/borderctl" --instance "$INST" --timeout-ms 5000 "$@"; }

cleanup() {
  local rc=$?
  set +e
  [ -n "$DP_PID" ] && kill -KILL "$DP_PID" 2>/dev/null
  [ -n "$MG_PID" ] && kill -KILL "$MG_PID" 2>/dev/null
  [ -n "$BK_PID" ] && kill "$BK_PID" 2>/dev/null
  wait 2>/dev/null
  for ns in ch-cli ch-bk ch-lb; do ip netns del "$ns" 2>/dev/null; done
  rm -f "/dev/shm/border-$INST-state" "/dev/shm/border-$INST-tables" \
    "/run/border/$INST.dp.lock" "/run/border/$INST.mgmt.lock" "$SOCK"
  if [ "$rc" -ne 0 ] && [ "$FAILED" -eq 0 ]; then
    echo "chaos.sh stopped on an error (exit $rc); logs:" >&2
    for f in "$DIR"/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -n 30 "$f" >&2; }; done
  fi
  if [ -n "${CHAOS_KEEP:-}" ]; then echo "chaos.sh: kept $DIR" >&2; else rm -rf "$DIR"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

want() { [ -z "$ONLY" ] || [[ ",$ONLY," == *",$1,"* ]]; }

# verdict NAME OK FIGURES: records and prints one scenario's outcome.
verdict() {
  local took=$((SECONDS - SCENARIO_START)); SCENARIO_START=$SECONDS
  if [ "$2" = 1 ]; then PASSED=$((PASSED + 1)); say "$1: PASS $3 [${took} s]"; else FAILED=$((FAILED + 1)); say "$1: FAIL $3 [${took} s]"; fi
  RESULTS+=("$(python3 -c 'import json,sys; print(json.dumps({"scenario": sys.argv[1], "pass": sys.argv[2] == "1", "figures": sys.argv[3]}))' "$1" "$2" "$3")")
}

# ------------------------------------------------------------------ topology

# write_vip FILE NAME PORT PROTOCOL MODE TABLE_SIZE WEIGHT1 WEIGHT2: appends one
# [[vip]] over the two backends 10.98.1.11 and .12 (port 8080).
write_vip() {
  cat >> "$1" <<EOF

[[vip]]
name = "$2"
address = "$VIP"
port = $3
protocol = "$4"
mode = "$5"
maglev_table_size = $6

[[vip.backend]]
address = "10.98.1.11"
port = 8080
weight = $7

[[vip.backend]]
address = "10.98.1.12"
port = 8080
weight = $8
EOF
}

write_config() {  # write_config FILE WEIGHT1 WEIGHT2 [EXTRA_VIPS]
  local file=$1 w1=$2 w2=$3 extra=${4:-0}
  cat > "$file" <<EOF
instance = "$INST"

[dataplane]
main_lcore = 0
worker_lcores = [1]
poll = "adaptive"
eal_args = ["--no-huge", "-m", "256", "--no-pci", "--no-shconf"]
conntrack_per_worker = 65536
flow_hash_key = "00112233445566778899aabbccddeeff"

[[port]]
name = "ext"
devargs = "net_af_xdp0,iface=ch-ext,start_queue=0,queue_count=1"
addresses = ["10.98.0.1/24"]
host_interface = "kch-ext"

[[port]]
name = "int"
devargs = "net_af_xdp1,iface=ch-int,start_queue=0,queue_count=1"
addresses = ["10.98.1.1/24"]
host_interface = "kch-int"
local_addresses = ["10.98.1.1"]
local_port_range = [1024, 32767]

[mgmt]
listen = "unix://$SOCK"
EOF
  local proto port
  for proto in tcp udp; do
    [ "$proto" = tcp ] && port=80 || port=7
    write_vip "$file" "$proto" "$port" "$proto" fullnat 1021 "$w1" "$w2"
    if [ "$proto" = tcp ]; then
      cat >> "$file" <<EOF

[vip.health]
kind = "tcp"
interval_ms = 200
timeout_ms = 150
rise = 2
fall = 2
EOF
    fi
  done
  write_vip "$file" dnat 81 tcp dnat 1021 "$w1" "$w2"
  local i
  for i in $(seq 1 "$extra"); do
    write_vip "$file" "extra$i" $((1000 + i)) tcp fullnat 307 "$w1" "$w2"
  done
}

topo_up() {
  for ns in ch-lb ch-cli ch-bk; do
    ip netns del "$ns" 2>/dev/null || true
    ip netns add "$ns"
    ip -n "$ns" link set lo up
  done
  ip -n ch-lb link add ch-ext type veth peer name ch-ext netns ch-cli
  ip -n ch-lb link add ch-int type veth peer name ch-int netns ch-bk
  ip -n ch-lb link set ch-ext up
  ip -n ch-lb link set ch-int up
  # AF_XDP hands frames over as they are: the peers finish their checksums.
  ip netns exec ch-cli ethtool -K ch-ext tx off >/dev/null
  ip netns exec ch-bk ethtool -K ch-int tx off >/dev/null
  ip -n ch-cli addr add 10.98.0.2/24 dev ch-ext
  ip -n ch-cli link set ch-ext up
  ip -n ch-cli route add default via 10.98.0.1
  ip -n ch-bk addr add 10.98.1.11/24 dev ch-int
  ip -n ch-bk addr add 10.98.1.12/24 dev ch-int
  ip -n ch-bk link set ch-int up
  ip -n ch-bk route add 10.98.0.0/24 via 10.98.1.1
  ip netns exec ch-bk $LOAD serve --tcp 10.98.1.11:8080 --tcp 10.98.1.12:8080 \
    --udp 10.98.1.11:8080 --udp 10.98.1.12:8080 >"$DIR/backends.log" 2>&1 &
  BK_PID=$!
}

# Starts border-dp; returns once its state region says running.
dp_start() {
  DP_STARTS=$((DP_STARTS + 1))
  BORDER_TEST_PANIC_FILE=$PANIC_FILE BORDER_TEST_HOLD_MBUFS_FILE=$HOLD_FILE RUST_LOG=info NO_COLOR=1 \
    ip netns exec ch-lb "$BIN/border-dp" --config "$DIR/border.toml" >>"$DIR/border-dp.log" 2>&1 &
  DP_PID=$!
  wait_up border-dp "$DP_PID" dp_ready
}

# Whether border-dp answers and is the process it was started as.
dp_ready() {
  ctl status --local --sample-ms 50 >/dev/null 2>&1 && [ "$(cat /proc/$DP_PID/comm 2>/dev/null)" = border-dp ]
}

mg_start() {
  RUST_LOG=info NO_COLOR=1 ip netns exec ch-lb "$BIN/border-mgmt" --config "$DIR/border.toml" \
    --state-dir "$STATE" >>"$DIR/border-mgmt.log" 2>&1 &
  MG_PID=$!
  wait_up border-mgmt "$MG_PID" ctl status
}

# wait_up NAME PID CHECK...: returns once CHECK succeeds (quietly), failing
# if process PID (logging to $DIR/NAME.log) exits first or 15 s pass.
wait_up() {
  local name=$1 pid=$2 i
  shift 2
  for i in $(seq 300); do
    "$@" >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || { echo "$name exited early" >&2; tail -n 20 "$DIR/$name.log" >&2; return 1; }
    sleep 0.05
  done
  echo "$name did not come up in 15 s" >&2
  return 1
}

# Waits until a new connection through the VIP gets its echo (next hops resolved).
wait_serving() {
  local i
  for i in $(seq 200); do
    ip netns exec ch-cli $LOAD load --vip $VIP --seconds 0.3 --udp-pps 0 --tcp-conns 0 \
      --churn-cps 5 --timeout 0.5 --drain 0 2>/dev/null | grep -q '"ok": [1-9]' && return 0
    sleep 0.1
  done
  echo "the VIP does not serve" >&2
  return 1
}

# load_bg SECONDS OUT [ARGS...]: the client load in the background (pid in LOAD_PID).
load_bg() {
  local secs=$1 out=$2; shift 2
  ip netns exec ch-cli $LOAD load --vip $VIP --seconds "$secs" --out "$out" "$@" >/dev/null 2>"$out.err" &
  LOAD_PID=$!
}

# j FILE EXPR: one value from a JSON file.
j() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, {'d': d}))" "$1" "$2"; }

counter() {  # counter NAME: border-dp's total of one counter
  ctl counters --json | python3 -c "import json,sys; d=json.load(sys.stdin)['counters']; print(d['$1']['total'] if '$1' in d else 0)"
}

# ------------------------------------------------------------------ scenarios

scenario_mgmt_kill() {
  local out=$DIR/mgmt-kill.json
  load_bg "$PHASE" "$out" --udp-pps 2000 --tcp-conns 8 --churn-cps 20
  sleep "$(echo "$PHASE / 4" | bc -l)"
  kill -KILL "$MG_PID"; wait "$MG_PID" 2>/dev/null || true
  local killed_at; killed_at=$(date +%s.%N)
  sleep "$(echo "$PHASE / 4" | bc -l)"
  mg_start
  local down; down=$(echo "$(date +%s.%N) - $killed_at" | bc)
  wait "$LOAD_PID"
  local lost resets timeouts churn_fail sent
  sent=$(j "$out" "d['udp']['sent']"); lost=$(j "$out" "d['udp']['lost']")
  resets=$(j "$out" "d['tcp']['reset'] + d['churn']['reset']")
  timeouts=$(j "$out" "d['tcp']['timeout'] + d['churn']['timeout']")
  churn_fail=$(j "$out" "d['churn']['attempted'] - d['churn']['ok']")
  local ok=0
  [ "$lost" = 0 ] && [ "$resets" = 0 ] && [ "$timeouts" = 0 ] && [ "$churn_fail" = 0 ] && ok=1
  verdict mgmt-kill "$ok" "udp sent=$sent lost=$lost; tcp requests=$(j "$out" "d['tcp']['requests_ok']") resets=$resets timeouts=$timeouts; new connections $(j "$out" "d['churn']['ok']")/$(j "$out" "d['churn']['attempted']") (border-mgmt down $(printf %.2f "$down") s, restarted on its saved intent)"
}

scenario_swaps() {
  local out=$DIR/swaps.json gen0 gen1 adopted0 adopted1 refused i
  gen0=$(ctl status --json | python3 -c "import json,sys; print(json.load(sys.stdin)['publisher']['published_generation'])")
  adopted0=$(counter tables_adopted)
  load_bg 600 "$out" --udp-pps 1000 --tcp-conns 8 --churn-cps 10
  local t0; t0=$(date +%s.%N)
  for i in $(seq 1 "$SWAPS"); do
    ctl weight tcp 10.98.1.11:8080 $((1 + i % 2)) >/dev/null
  done
  local took; took=$(echo "$(date +%s.%N) - $t0" | bc)
  sleep 1
  kill -TERM "$LOAD_PID" 2>/dev/null || true
  wait "$LOAD_PID" 2>/dev/null || true
  ctl weight tcp 10.98.1.11:8080 reset >/dev/null
  gen1=$(ctl status --json | python3 -c "import json,sys; print(json.load(sys.stdin)['publisher']['published_generation'])")
  adopted1=$(counter tables_adopted); refused=$(counter tables_refused)
  if [ ! -s "$out" ]; then verdict swaps 0 "the load printed no result: $(cat "$out.err")"; return; fi
  local lost resets timeouts
  lost=$(j "$out" "d['udp']['lost']")
  resets=$(j "$out" "d['tcp']['reset'] + d['churn']['reset']")
  timeouts=$(j "$out" "d['tcp']['timeout'] + d['churn']['timeout']")
  local ok=0
  [ "$lost" = 0 ] && [ "$resets" = 0 ] && [ "$timeouts" = 0 ] && [ "$refused" = 0 ] && \
    [ $((gen1 - gen0)) -ge "$SWAPS" ] && ok=1
  verdict swaps "$ok" "$SWAPS swaps in $(printf %.1f "$took") s (generations $gen0 -> $gen1, worker adopted $((adopted1 - adopted0)), refused $refused); udp sent=$(j "$out" "d['udp']['sent']") lost=$lost; resets=$resets timeouts=$timeouts"
}

# Prints one line per VIP: name and the weight of each backend, as border-mgmt runs them.
weights_now() {
  ctl status --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(" ".join(sorted({str(b["config_weight"]) for v in d["vips"] for b in v["backends"] if b["address"].startswith("10.98.1.11")})))'
}

scenario_apply_storm() {
  local n=100 k pids=() storm=$DIR/storm refused0
  mkdir -p "$storm"
  refused0=$(counter tables_refused)
  for k in $(seq 1 $n); do
    if [ $((k % 10)) = 0 ]; then
      write_config "$storm/c$k.toml" 70000 1 3   # invalid: weight above 65535
    else
      write_config "$storm/c$k.toml" "$k" 1 3
    fi
  done
  # A watcher: every snapshot of the running config is one config whole.
  ( mixed=0; snaps=0
    while [ ! -f "$storm/done" ]; do
      w=$(weights_now 2>/dev/null) || continue
      snaps=$((snaps + 1))
      case "$w" in *" "*) mixed=$((mixed + 1)); echo "mixed: $w" >>"$storm/mixed" ;; esac
    done
    echo "$snaps $mixed" >"$storm/watch" ) &
  local watcher=$! t0; t0=$(date +%s.%N)
  for k in $(seq 1 $n); do
    "$BIN/borderctl" --instance "$INST" --timeout-ms 60000 --json apply "$storm/c$k.toml" \
      >"$storm/o$k" 2>"$storm/e$k" &
    pids+=($!)
  done
  local answered=0 ok=0 bad_refused=0 wrong=0 rc
  for k in $(seq 1 $n); do
    rc=0; wait "${pids[$((k - 1))]}" || rc=$?
    if [ $((k % 10)) = 0 ]; then
      if [ "$rc" = 1 ] && grep -q 'weight' "$storm/e$k"; then answered=$((answered + 1)); bad_refused=$((bad_refused + 1)); else wrong=$((wrong + 1)); fi
    elif [ "$rc" = 0 ]; then answered=$((answered + 1)); ok=$((ok + 1)); else wrong=$((wrong + 1)); fi
  done
  local took; took=$(echo "$(date +%s.%N) - $t0" | bc)
  touch "$storm/done"; wait "$watcher" || true
  # The answer with the highest generation was published last: it runs, whole.
  local last
  last=$(python3 - "$storm" "$n" <<'PY'
import json, os, sys
d, n = sys.argv[1], int(sys.argv[2])
answers = []
for k in range(1, n + 1):
    f = os.path.join(d, f"o{k}")
    if os.path.getsize(f) > 0:
        answers.append((json.load(open(f))["generation"], k))
print(max(answers)[1])
PY
)
  local running; running=$(weights_now)
  local refused; refused=$(( $(counter tables_refused) - refused0 ))
  read -r snaps mixed <"$storm/watch"
  local ok_all=0
  [ "$answered" = $n ] && [ "$wrong" = 0 ] && [ "$running" = "$last" ] && [ "$mixed" = 0 ] && [ "$refused" = 0 ] && ok_all=1
  verdict apply-storm "$ok_all" "$n parallel ApplyConfig in $(printf %.2f "$took") s: answered $answered ($ok applied, $bad_refused invalid refused, $wrong wrong); highest generation from config $last, running weight $running; $snaps snapshots, $mixed mixed; tables_refused +$refused"
  write_config "$DIR/border.toml" 1 1
  ctl apply "$DIR/border.toml" >/dev/null
}

# dp_fault NAME HOW: border-dp dies under load (HOW: kill, or panic through
# the test trigger) and is started again at once, as systemd's
# Restart=always would; measures what the clients saw.
dp_fault() {
  local name=$1 how=$2 out=$DIR/$1.json outd=$DIR/$1-dnat.json
  local secs; secs=$(echo "$PHASE * 1.5" | bc)
  load_bg "$secs" "$out" --udp-pps 1000 --tcp-conns 8 --churn-cps 20 --outage-ms 200
  local lp1=$LOAD_PID
  load_bg "$secs" "$outd" --tcp-port 81 --udp-pps 0 --tcp-conns 8 --churn-cps 0
  local lp2=$LOAD_PID
  sleep "$(echo "$PHASE / 3" | bc -l)"
  local t_fault t_exit t_up rc=0 extra=""
  t_fault=$(date +%s.%N)
  if [ "$how" = kill ]; then
    kill -KILL "$DP_PID"
    wait "$DP_PID" 2>/dev/null || rc=$?
  else
    echo 0 >"$PANIC_FILE"
    wait "$DP_PID" 2>/dev/null || rc=$?
  fi
  t_exit=$(date +%s.%N)
  dp_start
  t_up=$(date +%s.%N)
  wait "$lp1" || true; wait "$lp2" || true
  local ok=1
  if [ "$how" = panic ]; then
    local line; line=$(grep -a 'border-dp: error: worker' "$DIR/border-dp.log" | tail -n 1 || true)
    [ "$rc" = 1 ] || ok=0
    [[ "$line" == *"worker 0 on lcore 1 panicked: injected by the test trigger"* ]] || ok=0
    grep -aq 'worker panicked: stopping every worker' "$DIR/border-dp.log" || ok=0
    extra="; exit status $rc, panic to exit $(printf %.2f "$(echo "$t_exit - $t_fault" | bc)") s; log: ${line#*border-dp: error: }"
  fi
  # Time to serve again: from the fault to the end of the outage around it.
  local serve_again
  serve_again=$(python3 - "$out" "$t_fault" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); t = float(sys.argv[2])
ends = [e for s, e in d["outages"] if s <= t + 1 and e >= t]
print(f"{max(ends) - t:.2f}" if ends else "none")
PY
)
  [ "$serve_again" != none ] || ok=0
  local lived=8
  verdict "$name" "$ok" "border-dp restarted in $(printf %.2f "$(echo "$t_up - $t_exit" | bc)") s (start to running); served again $serve_again s after the fault; udp lost $(j "$out" "d['udp']['lost']")/$(j "$out" "d['udp']['sent']"); full-NAT long-lived TCP survived $(j "$out" "d['tcp']['survived']")/$lived (resets $(j "$out" "d['tcp']['reset']"), timeouts $(j "$out" "d['tcp']['timeout']")); DNAT long-lived TCP survived $(j "$outd" "d['tcp']['survived']")/$lived (resets $(j "$outd" "d['tcp']['reset']"), timeouts $(j "$outd" "d['tcp']['timeout']")); new connections ok $(j "$out" "d['churn']['ok']")/$(j "$out" "d['churn']['attempted']") (reset $(j "$out" "d['churn']['reset']"), timeout $(j "$out" "d['churn']['timeout']"))$extra"
}

# An empty mbuf pool under load (test trigger, debug builds): border-dp's
# main thread holds every free mbuf for a while. The ports count the frames
# they had no mbuf for (rx_nombuf, logged when the mbufs go back), and
# forwarding recovers without a restart.
scenario_mbuf_pool() {
  local out=$DIR/mbuf-pool.json hold_ms=1000 pid_before=$DP_PID
  load_bg "$PHASE" "$out" --udp-pps 1000 --tcp-conns 8 --churn-cps 20 --outage-ms 200
  sleep "$(echo "$PHASE / 3" | bc -l)"
  local t_hold; t_hold=$(date +%s.%N)
  echo "$hold_ms" >"$HOLD_FILE"
  wait "$LOAD_PID" || true
  local line free nombuf ok=1
  line=$(grep -a 'test trigger: mbufs given back' "$DIR/border-dp.log" | tail -n 1 || true)
  free=$(sed -n 's/.*free_while_held=\([0-9]*\).*/\1/p' <<<"$line")
  nombuf=$(sed -n 's/.*rx_nombuf=\([0-9]*\).*/\1/p' <<<"$line" | head -n 1)
  # Empty but for a few in the main thread's own cache, which no worker reaches.
  [ "${free:-999}" -lt 64 ] && [ "${nombuf:-0}" -gt 0 ] || ok=0
  [ "$DP_PID" = "$pid_before" ] && kill -0 "$DP_PID" 2>/dev/null || ok=0
  # Served again: the outage around the hold ends within 1.5 s of its end.
  local after
  after=$(python3 - "$out" "$t_hold" "$hold_ms" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); t = float(sys.argv[2]); hold = float(sys.argv[3]) / 1000
ends = [e for s, e in d["outages"] if s <= t + hold and e >= t]
print(f"{max(ends) - (t + hold):.2f}" if ends else "0.00")
PY
)
  python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 1.5 else 1)" "$after" || ok=0
  local resets; resets=$(j "$out" "d['tcp']['reset'] + d['churn']['reset']")
  [ "$resets" = 0 ] || ok=0
  verdict mbuf-pool "$ok" "pool empty for $hold_ms ms (free mbufs ${free:-?}); the ports counted rx_nombuf=${nombuf:-?}; border-dp pid unchanged ($DP_PID), serving again ${after} s after the mbufs went back; udp lost $(j "$out" "d['udp']['lost']")/$(j "$out" "d['udp']['sent']"); long-lived TCP survived $(j "$out" "d['tcp']['survived']")/8, resets $resets, timeouts $(j "$out" "d['tcp']['timeout'] + d['churn']['timeout']"); new connections ok $(j "$out" "d['churn']['ok']")/$(j "$out" "d['churn']['attempted']")"
}

# sample PID: rss_kib fds threads
sample() {
  local pid=$1
  echo "$(awk '/^VmRSS/ {print $2}' /proc/$pid/status) $(ls /proc/$pid/fd | wc -l) $(awk '/^Threads/ {print $2}' /proc/$pid/status)"
}

scenario_soak() {
  local out=$DIR/soak.json samples=$DIR/soak.samples
  write_config "$DIR/apply-a.toml" 1 1
  write_config "$DIR/apply-b.toml" 2 1
  load_bg "$SOAK_SECONDS" "$out" --udp-pps 500 --tcp-conns 8 --churn-cps 30
  local lp=$LOAD_PID start; start=$(date +%s)
  local applies=0 flaps=0 now i=0 probes_blocked=0
  : >"$samples"
  while kill -0 "$lp" 2>/dev/null; do
    now=$(date +%s)
    # An apply every second, alternating two configs.
    if [ $((i % 2)) = 0 ]; then ctl apply "$DIR/apply-a.toml" >/dev/null; else ctl apply "$DIR/apply-b.toml" >/dev/null; fi
    applies=$((applies + 1))
    # A health flap every 6 s: the probes (kernel ports 32768+) to one
    # backend blocked, then let through; full-NAT traffic (ports below
    # 32768) still reaches it.
    if [ $((i % 6)) = 0 ]; then
      if [ "$probes_blocked" = 0 ]; then
        ip netns exec ch-bk nft add table inet chflap
        ip netns exec ch-bk nft add chain inet chflap in '{ type filter hook input priority 0; }'
        ip netns exec ch-bk nft add rule inet chflap in ip daddr 10.98.1.12 tcp dport 8080 tcp sport 32768-65535 drop
        probes_blocked=1
      else
        ip netns exec ch-bk nft delete table inet chflap
        probes_blocked=0
      fi
      flaps=$((flaps + 1))
    fi
    if [ $((i % SAMPLE_EVERY)) = 0 ]; then
      echo "$((now - start)) $(sample "$DP_PID") $(sample "$MG_PID")" >>"$samples"
    fi
    i=$((i + 1))
    sleep 1
  done
  wait "$lp" || true
  [ "$probes_blocked" = 1 ] && ip netns exec ch-bk nft delete table inet chflap
  sleep 2   # the last counters published, queues empty
  echo "$(( $(date +%s) - start )) $(sample "$DP_PID") $(sample "$MG_PID")" >>"$samples"
  local totals=$DIR/soak-counters.json
  ctl counters --json >"$totals"
  local figures ok
  figures=$(python3 - "$samples" "$WARMUP" "$totals" "$out" <<'PY'
import json, sys
rows = [list(map(int, l.split())) for l in open(sys.argv[1]) if l.strip()]
warm = int(sys.argv[2])
after = [r for r in rows if r[0] >= warm] or rows[-1:]
ok = True
out = [f"{len(after)} samples after warm-up"]
for name, base in (("border-dp", 1), ("border-mgmt", 4)):
    rss = [r[base] for r in after]
    spread = (max(rss) - min(rss)) / min(rss) * 100.0
    # Growth: the floor of the later half of the samples above the floor
    # of the earlier half. A leak raises the floor; a probe's socket or a
    # pool thread open at one sample does not.
    half = max(1, len(after) // 2)
    def growth(col):
        v = [r[col] for r in after]
        return min(v[half:] or v[-1:]) - min(v[:half]), min(v), max(v)
    fd_g, fd_lo, fd_hi = growth(base + 1)
    th_g, th_lo, th_hi = growth(base + 2)
    ok &= spread <= 5.0 and fd_g <= 0 and th_g <= 0
    out.append(f"{name} RSS {min(rss)}-{max(rss)} KiB ({spread:.1f}%), fds {fd_lo}-{fd_hi} (growth {fd_g}), threads {th_lo}-{th_hi} (growth {th_g})")
c = json.load(open(sys.argv[3]))["counters"]
tot = lambda n: c[n]["total"] if n in c else 0
drops = sum(v["total"] for n, v in c.items() if n.startswith("drop_") and n != "drop_malformed")
rx, tx, host = tot("rx_packets"), tot("tx_packets"), tot("to_host_packets")
# Frames border-dp sends that it did not receive on a data port: from the
# kernel twins and the ones it makes itself (neighbour requests, PROXY
# headers on their own); an answer (ARP, echo) reuses the request's frame.
made = sum(tot(n) for n in ("from_host_packets", "neighbour_requests", "pp_headers_standalone"))
gap = rx + made - (tx + drops + host)
ok &= gap == 0
out.append(f"counters rx={rx} tx={tx} drops={drops} to_host={host} made_here={made}: rx + made_here - (tx + drops + to_host) = {gap}")
l = json.load(open(sys.argv[4]))
out.append(f"load: udp lost {l['udp']['lost']}/{l['udp']['sent']}, new connections ok {l['churn']['ok']}/{l['churn']['attempted']}, long-lived resets {l['tcp']['reset']} timeouts {l['tcp']['timeout']}")
print(("1 " if ok else "0 ") + "; ".join(out))
PY
)
  ok=${figures%% *}; figures=${figures#* }
  verdict soak "$ok" "$SOAK_SECONDS s, $applies applies, $flaps health flaps: $figures"
}

# ------------------------------------------------------------------ main

say "binaries $BIN; form $([ "$SHORT" = 1 ] && echo short || echo long); logs and figures in $DIR"
started=$(date +%s)
topo_up
write_config "$DIR/border.toml" 1 1
rm -rf "$STATE"
rm -f "/dev/shm/border-$INST-state" "/dev/shm/border-$INST-tables"
dp_start
mg_start
wait_serving
say "set up in $(( $(date +%s) - started )) s"
SCENARIO_START=$SECONDS

if want mgmt-kill; then scenario_mgmt_kill; fi
if want swaps; then scenario_swaps; fi
if want apply-storm; then scenario_apply_storm; fi
if want dp-kill; then dp_fault dp-kill kill; wait_serving; fi
if want dp-panic; then dp_fault dp-panic panic; wait_serving; fi
if want mbuf-pool; then scenario_mbuf_pool; fi
if want soak; then scenario_soak; fi

if [ -n "$REPORT" ]; then
  ( IFS=,; echo "{\"short\":$([ "$SHORT" = 1 ] && echo true || echo false),\"seconds\":$(( $(date +%s) - started )),\"results\":[${RESULTS[*]}]}" ) >"$REPORT"
fi
say "done in $(( $(date +%s) - started )) s"
echo "chaos: $PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
