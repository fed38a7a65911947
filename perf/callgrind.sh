#!/usr/bin/env bash
# Instructions per packet of `border-perf pipeline` cases, under callgrind
# (a count a busy machine does not disturb; method in perf/src/pipeline/mod.rs):
# each case is replayed with N = 20000 and 60000 packets and the difference
# over the 50000 extra packets is the cost of one.
#   perf/callgrind.sh [BORDER_PERF_BINARY] [CASE ...]
# Default cases: established full-NAT, DNAT and PROXY, both directions,
# full-NAT IPv6, DNAT IPv6 and DSR IPv4 and IPv6 (MAC only, IPIP or IP6IP6,
# and GUE; client->backend, its one direction).
# Prints one line per case: `<Ir per packet>  <case>`.
set -euo pipefail
bin=${1:-target/release/border-perf}
shift || true
cases=("$@")
if [ ${#cases[@]} -eq 0 ]; then
  cases=(
    "established full-NAT IPv4, client->backend"
    "established full-NAT IPv4, backend->client"
    "established DNAT IPv4, client->backend"
    "established DNAT IPv4, backend->client"
    "established full-NAT IPv6, client->backend"
    "established full-NAT IPv4 + PROXY v2, client->backend"
    "established full-NAT IPv4 + PROXY v2, backend->client"
    "established DSR IPv4, client->backend"
    "established DSR IPIP IPv4, client->backend"
    "established DSR GUE IPv4, client->backend"
    "established DNAT IPv6, client->backend"
    "established DSR IPv6, client->backend"
    "established DSR IP6IP6 IPv6, client->backend"
    "established DSR GUE IPv6, client->backend"
  )
fi
command -v valgrind >/dev/null || { echo "callgrind.sh needs valgrind (apt-get install valgrind)" >&2; exit 1; }
[ -x "$bin" ] || { echo "no border-perf at $bin (cargo build --release -p perf)" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
ir() {
  valgrind --tool=callgrind --callgrind-out-file="$out/cg" \
    --toggle-collect='dataplane::worker::Worker*::poll_once' \
    "$bin" pipeline --only "$1" --samples 1 --packets "$2" --flows 1000 >/dev/null 2>"$out/log"
  awk '/^summary:/ { print $2 }' "$out/cg"
}
for c in "${cases[@]}"; do
  a=$(ir "$c" 20000)
  b=$(ir "$c" 60000)
  [ -n "$a" ] && [ -n "$b" ] || { echo "no count for case '$c' (see border-perf pipeline --help)" >&2; exit 1; }
  echo "$(( (b - a) / 50000 ))  $c"
done
