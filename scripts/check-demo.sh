#!/usr/bin/env bash
# Runs the demo (README's first command) and checks that it showed what it
# says it shows: ping answered by the dataplane, TCP through the kernel twin,
# nine connections to the VIP answered by backends, none of them by the
# drained backend afterwards, the dataplane's counters, a clean exit.
# Part of scripts/test.sh. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."

log=$(mktemp)
trap 'rm -f "$log"' EXIT

fail() {
  cat "$log"
  echo "demo: FAILED: $*"
  exit 1
}

bash scripts/demo.sh >"$log" 2>&1 || fail "scripts/demo.sh exited with status $?"

# The lines of one demo step: from its "==> <title>" line to the next step.
section() {
  awk -v t="$1" '/==> / { on = index($0, t) > 0; next } on' "$log"
}

for addr in 10.10.0.1 10.10.0.100 10.20.0.1; do
  grep -q "^--- $addr ping statistics ---" "$log" || fail "no ping of $addr"
done
[ "$(grep -c ' 0% packet loss' "$log")" -eq 3 ] || fail "a ping lost packets"
section "through the kernel twin" | grep -q "^hello from the backend 10.20.0.11" ||
  fail "no TCP answer through the kernel twin"

spread=$(section "Nine connections" | grep -c '^backend 10.20.0.1[123] answers; it sees you as 10.20.0.1 ' || true)
[ "$spread" -eq 9 ] || fail "$spread of 9 connections to the VIP answered"

drained=$(section "Draining backend 10.20.0.12")
[ "$(grep -c '^backend 10.20.0.1[13] answers' <<<"$drained")" -eq 6 ] ||
  fail "not 6 answers from the two other backends while 10.20.0.12 drains"
if grep -q '^backend 10.20.0.12 answers' <<<"$drained"; then
  fail "the drained backend took a new connection"
fi
grep -q '^undrained: generation 3 published' <<<"$drained" || fail "undrain did not publish"

# 15 connections above, plus the warm-up ones that resolved the next hop.
flows=$(section "Dataplane counters" | awk '$1 == "new_flows" { print $3 }')
[ "${flows:-0}" -ge 15 ] || fail "new_flows ${flows:-missing}, not at least 15"
grep -q '^border-dp exited with status 0$' "$log" || fail "border-dp did not exit cleanly"
grep -q 'namespaces removed; demo done' "$log" || fail "the demo did not clean up"
echo "demo: ok ($(grep -o 'demo done in [0-9]* s' "$log"))"
