#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit tests, DPDK tests and the
# end-to-end tests in network namespaces. Run as root on Debian 12.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "scripts/test.sh must run as root (network namespaces, TAP devices)" >&2; exit 1; }

# The end-to-end tests use fixed namespace and instance names: one run at a
# time per machine. Whoever runs e2e tests by hand (or scripts/synflood.sh)
# holds /tmp/border-e2e.lock; so does this run, through flock itself (-o:
# no test or daemon inherits the lock, so a stray process cannot keep it).
if [ -z "${BORDER_E2E_LOCKED:-}" ]; then
  exec env BORDER_E2E_LOCKED=1 flock -o /tmp/border-e2e.lock bash "$0" "$@"
fi

bash scripts/install-deps.sh

# Leftovers of an interrupted earlier run would make TAP creation fail: the
# end-to-end tests name their namespaces <tag>-lb, <tag>-cli, <tag>-bk.
for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E -- '-(lb|cli|bk)[0-9]*$' || true); do
  ip netns del "$ns" || true
done

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
results=$(mktemp)
trap 'rm -f "$results"' EXIT
# --no-fail-fast: one failing test binary must not hide the others' results.
status=0
cargo test --workspace --all-targets --no-fail-fast 2>&1 | tee -a "$results" || status=1
cargo test --workspace --doc --no-fail-fast 2>&1 | tee -a "$results" || status=1
bash scripts/fuzz.sh || status=1  # bounded cargo-fuzz runs of dataplane/fuzz (< 3 min once built)
bash scripts/check-demo.sh || status=1  # README's demo (release build), checked line by line

# One closing line over every test binary above.
awk '/^test result: / { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$results"
grep -E '^test .* FAILED$' "$results" | sed 's/^/failed: /' || true
exit "$status"
