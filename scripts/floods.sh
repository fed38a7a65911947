#!/usr/bin/env bash
# The flood figures of docs/reliability.md (outside CI): every flood of
# tests/e2e_floods.rs at the highest rate hping3 makes here (--flood), on a
# release build, one worker on TAP, with real clients at the same time.
# Prints one line per flood, writes the JSON the doc's table is made from and
# (for the default path and every flood) remakes that table
# (scripts/floods_table.py).
#
#   scripts/floods.sh [SECONDS] [JSON] [ONLY]
#
# Defaults: 10 s per flood, docs/reliability-floods.json, every flood (ONLY:
# a comma-separated list of names, e.g. syn-no-vip,syn-vip). Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "scripts/floods.sh must run as root" >&2; exit 1; }
json=${2:-docs/reliability-floods.json}
FLOODS_PACE=--flood FLOODS_SECONDS=${1:-10} FLOODS_CLIENTS=2 FLOODS_ONLY=${3:-} \
  FLOODS_JSON="$(realpath -m "$json")" FLOODS_COMMIT="$(git rev-parse --short HEAD)" \
  flock /tmp/border-e2e.lock \
  cargo test --release --test e2e_floods -- --nocapture floods_cost_real_clients_little
echo "wrote $json"
if [ "$json" = docs/reliability-floods.json ] && [ -z "${3:-}" ]; then
  python3 scripts/floods_table.py --write && echo "updated the table in docs/reliability.md"
fi
