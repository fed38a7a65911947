#!/usr/bin/env bash
# The border demo, on one Debian 12 machine, as root:
#
#   demo-cli (client)  --TAP demo-ext--  [border-dp in demo-lb]  --TAP demo-int--  demo-bk (backends)
#   10.10.0.2                            ext 10.10.0.1/24                          10.20.0.11-13
#                                        VIP 10.10.0.100:80
#                                        int 10.20.0.1/24
#
# border-dp runs in namespace demo-lb with two net_tap ports; their TAP
# interfaces are moved into the client and backend namespaces, so real Linux
# kernels sit on both sides. The demo shows ping to a port address and to the
# VIP answered by the dataplane, a TCP connection from demo-lb's own kernel to
# a backend through the kernel twin interface, border-mgmt publishing the
# tables, connections to the VIP spread over three backends, a drain through
# borderctl, and the dataplane's counters.
# Everything it creates is removed on exit, also on error or Ctrl-C.
#
# Usage: bash scripts/demo.sh        (installs packages and builds on first run)
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "scripts/demo.sh must run as root (network namespaces, TAP devices)" >&2; exit 1; }
export PATH="$HOME/.cargo/bin:$PATH"

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
show() { printf '\033[2m$ %s\033[0m\n' "$*"; "$@"; }

step "Installing dependencies (scripts/install-deps.sh)"
bash scripts/install-deps.sh

step "Building border (release)"
cargo build --release --bins
BIN=$PWD/target/release

started=$(date +%s)
DIR=$(mktemp -d /tmp/border-demo.XXXXXX)
DP_PID=""
DP_RAN=""

cleanup() {
  local rc=$?
  set +e
  if [ -n "$DP_PID" ] && kill -0 "$DP_PID" 2>/dev/null; then
    step "Stopping border-dp (SIGTERM)"
    kill -TERM "$DP_PID"
    for _ in $(seq 100); do kill -0 "$DP_PID" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$DP_PID" 2>/dev/null; then
      echo "border-dp did not stop within 10 s; killing it" >&2
      kill -KILL "$DP_PID"
    fi
    wait "$DP_PID"; echo "border-dp exited with status $?"
    tail -n 1 "$DIR/border-dp.log" | sed 's/\x1b\[[0-9;]*m//g'
  fi
  [ -n "${SERVER_PID:-}" ] && kill "$SERVER_PID" 2>/dev/null
  for p in ${BACKEND_PIDS:-}; do kill "$p" 2>/dev/null; done
  if [ -n "${MG_PID:-}" ] && kill -0 "$MG_PID" 2>/dev/null; then
    kill -TERM "$MG_PID"; wait "$MG_PID" 2>/dev/null
  fi
  for ns in demo-cli demo-bk demo-lb; do ip netns del "$ns" 2>/dev/null; done
  if [ -n "$DP_RAN" ]; then   # what border-dp keeps after exit, only if this run's came up
    rm -f /dev/shm/border-demo-state /dev/shm/border-demo-tables /run/border/demo.dp.lock
  fi
  if [ -n "${MG_RAN:-}" ]; then
    rm -f /run/border/demo.mgmt.lock /run/border/demo.sock
    rm -rf /var/lib/border/demo
  fi
  if [ "$rc" -ne 0 ] && [ -f "$DIR/border-dp.log" ]; then
    echo "--- border-dp log ---" >&2
    cat "$DIR/border-dp.log" >&2
  fi
  rm -rf "$DIR"
  if [ "$rc" -eq 0 ]; then
    echo "namespaces removed; demo done in $(( $(date +%s) - started )) s"
  else
    echo "demo FAILED (exit $rc); namespaces removed" >&2
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step "Creating namespaces demo-lb, demo-cli, demo-bk"
for ns in demo-lb demo-cli demo-bk; do
  ip netns del "$ns" 2>/dev/null || true   # leftovers of an interrupted run
  ip netns add "$ns"
  ip -n "$ns" link set lo up
done

cat > "$DIR/border.toml" <<'EOF'
instance = "demo"

[dataplane]
main_lcore = 0
worker_lcores = [1]
poll = "adaptive"            # backs off when idle: a small box stays usable
eal_args = ["--no-huge", "-m", "256", "--no-pci", "--no-shconf"]
conntrack_per_worker = 65536
flow_hash_key = "00112233445566778899aabbccddeeff"

[[port]]
name = "ext"
devargs = "net_tap0,iface=demo-ext"
addresses = ["10.10.0.1/24"]
host_interface = "kdemo-ext"

[[port]]
name = "int"
devargs = "net_tap1,iface=demo-int"
addresses = ["10.20.0.1/24"]
host_interface = "kdemo-int"
local_addresses = ["10.20.0.1"]
local_port_range = [1024, 32767]

[mgmt]
listen = "unix:///run/border/demo.sock"

[[vip]]
name = "web"
address = "10.10.0.100"
port = 80
protocol = "tcp"
mode = "fullnat"
maglev_table_size = 307

[[vip.backend]]
address = "10.20.0.11"
port = 8080

[[vip.backend]]
address = "10.20.0.12"
port = 8080

[[vip.backend]]
address = "10.20.0.13"
port = 8080
EOF
step "Config ($DIR/border.toml)"
show "$BIN/border-dp" --check-config "$DIR/border.toml"

step "Starting border-dp in demo-lb"
ip netns exec demo-lb "$BIN/border-dp" --config "$DIR/border.toml" >"$DIR/border-dp.log" 2>&1 &
DP_PID=$!   # `ip netns exec` execs border-dp: this is border-dp's pid
for i in $(seq 200); do
  "$BIN/borderctl" status --instance demo >/dev/null 2>&1 && [ "$(cat /proc/$DP_PID/comm 2>/dev/null)" = border-dp ] && break
  kill -0 "$DP_PID" 2>/dev/null || { echo "border-dp exited early" >&2; exit 1; }
  [ "$i" -eq 200 ] && { echo "border-dp did not come up in 20 s" >&2; exit 1; }
  sleep 0.1
done
DP_RAN=1
for ifc in demo-ext demo-int kdemo-ext kdemo-int; do
  for i in $(seq 100); do
    ip -n demo-lb link show "$ifc" >/dev/null 2>&1 && break
    [ "$i" -eq 100 ] && { echo "interface $ifc did not appear" >&2; exit 1; }
    sleep 0.1
  done
done
show "$BIN/borderctl" status --instance demo
echo "kernel twins in demo-lb (carry the ports' addresses for the host's own traffic):"
ip -n demo-lb -br addr show dev kdemo-ext
ip -n demo-lb -br addr show dev kdemo-int

step "Moving the TAP interfaces: demo-ext -> demo-cli, demo-int -> demo-bk"
ip -n demo-lb link set demo-ext netns demo-cli
ip -n demo-cli addr add 10.10.0.2/24 dev demo-ext
ip -n demo-cli link set demo-ext up
ip -n demo-cli route add default via 10.10.0.1
ip -n demo-lb link set demo-int netns demo-bk
for a in 10.20.0.11 10.20.0.12 10.20.0.13; do ip -n demo-bk addr add "$a/24" dev demo-int; done
ip -n demo-bk link set demo-int up
ip -n demo-bk route add 10.10.0.0/24 via 10.20.0.1
ip -n demo-cli -br addr show dev demo-ext
ip -n demo-bk -br addr show dev demo-int

step "Client pings the ext port address and the VIP (answered by the dataplane)"
show ip netns exec demo-cli ping -c 3 -i 0.2 -W 2 10.10.0.1
show ip netns exec demo-cli ping -c 3 -i 0.2 -W 2 10.10.0.100
show ip -n demo-cli neigh show dev demo-ext

step "Backend pings the int port address"
show ip netns exec demo-bk ping -c 3 -i 0.2 -W 2 10.20.0.1

step "TCP from demo-lb's kernel to a server in demo-bk, through the kernel twin kdemo-int"
cat > "$DIR/hello.sh" <<'EOF'
#!/bin/sh
echo "hello from the backend 10.20.0.11 in demo-bk; you are $SOCAT_PEERADDR:$SOCAT_PEERPORT"
EOF
chmod +x "$DIR/hello.sh"
ip netns exec demo-bk socat TCP-LISTEN:9000,bind=10.20.0.11,reuseaddr,fork EXEC:"$DIR/hello.sh" &
SERVER_PID=$!
for i in $(seq 100); do
  ip netns exec demo-bk ss -ltn | grep -q '10.20.0.11:9000' && break
  [ "$i" -eq 100 ] && { echo "server did not start" >&2; exit 1; }
  sleep 0.05
done
show ip netns exec demo-lb socat -t 3 -T 5 -u TCP:10.20.0.11:9000,connect-timeout=5 STDOUT
kill "$SERVER_PID" 2>/dev/null || true
wait "$SERVER_PID" 2>/dev/null || true
SERVER_PID=""

step "Starting border-mgmt in demo-lb: it publishes the tables border-dp follows"
ip netns exec demo-lb "$BIN/border-mgmt" --config "$DIR/border.toml" >"$DIR/border-mgmt.log" 2>&1 &
MG_PID=$!
MG_RAN=1
for i in $(seq 200); do
  "$BIN/borderctl" status --instance demo >/dev/null 2>&1 && break
  kill -0 "$MG_PID" 2>/dev/null || { echo "border-mgmt exited early:" >&2; cat "$DIR/border-mgmt.log" >&2; exit 1; }
  [ "$i" -eq 200 ] && { echo "border-mgmt did not come up in 20 s" >&2; exit 1; }
  sleep 0.1
done

step "Three backends in demo-bk answer on 10.20.0.11-13:8080"
for b in 11 12 13; do
  printf '#!/bin/sh\necho "backend 10.20.0.%s answers; it sees you as $SOCAT_PEERADDR (full-NAT: the local address)"\n' "$b" > "$DIR/backend-$b.sh"
  chmod +x "$DIR/backend-$b.sh"
  ip netns exec demo-bk socat TCP-LISTEN:8080,bind=10.20.0.$b,reuseaddr,fork EXEC:"$DIR/backend-$b.sh" &
  BACKEND_PIDS="${BACKEND_PIDS:-} $!"
done
for b in 11 12 13; do
  for i in $(seq 100); do
    ip netns exec demo-bk ss -ltn | grep -q "10.20.0.$b:8080" && break
    [ "$i" -eq 100 ] && { echo "backend $b did not start" >&2; exit 1; }
    sleep 0.05
  done
done

vip_once() {
  ip netns exec demo-cli socat -t 2 -T 3 -u TCP:10.10.0.100:80,connect-timeout=3 STDOUT
}
step "Nine connections from the client to the VIP 10.10.0.100:80 (Maglev spreads them)"
for i in $(seq 50); do vip_once >/dev/null 2>&1 && break; sleep 0.2; done   # first next-hop resolution
for i in $(seq 9); do vip_once; done

show "$BIN/borderctl" status --instance demo

step "Draining backend 10.20.0.12: new connections go to the others"
show "$BIN/borderctl" drain --instance demo web 10.20.0.12:8080
sleep 0.5
for i in $(seq 6); do vip_once; done
show "$BIN/borderctl" undrain --instance demo web 10.20.0.12:8080

step "Dataplane counters"
sleep 0.2   # workers publish their counters after each busy poll
show "$BIN/borderctl" counters --instance demo

