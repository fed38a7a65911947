#!/usr/bin/env bash
# Bounded libFuzzer runs of every cargo-fuzz target in dataplane/fuzz
# (parse_frame, slowpath, views, pipeline, and what crosses a trust
# boundary: tables_region, config_toml, pp_header). Part of scripts/test.sh.
#
# cargo-fuzz needs nightly compiler features; on the stable toolchain they
# are unlocked with RUSTC_BOOTSTRAP=1. cargo-fuzz itself is installed from
# crates.io when missing.
#
#   bash scripts/fuzz.sh                       # every target, whole step ~FUZZ_BUDGET s
#   FUZZ_BUDGET=1200 bash scripts/fuzz.sh pipeline
#
# Time: the whole step (build included) aims at FUZZ_BUDGET seconds
# (default 150). What the build leaves is shared among the targets, the
# pipeline target getting a double share, each at least FUZZ_MIN seconds
# (default 10); a run also stops after FUZZ_RUNS inputs (default 5000000).
# The first build of the fuzz crate (its own target directory, sanitizer
# coverage flags) takes several minutes; later ones rebuild only what
# changed. Targets are built optimised, with debug assertions (overflow
# checks) and without ASan (safe Rust; twice the rate).
#
# The corpus is kept in dataplane/fuzz/corpus/<target> (not in git), so
# later runs start from what earlier ones found; a target with a seed
# corpus in git (dataplane/fuzz/seeds/<target>) also starts from those. A
# crash is saved in dataplane/fuzz/artifacts/<target> and fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
begin=$(date +%s)

export RUSTC_BOOTSTRAP=1
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

budget=${FUZZ_BUDGET:-150}
min=${FUZZ_MIN:-10}
runs=${FUZZ_RUNS:-5000000}
cd dataplane/fuzz
if [ $# -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(cargo fuzz list)
fi

flags=(-O --debug-assertions --sanitizer none)
for t in "${targets[@]}"; do
  cargo fuzz build "${flags[@]}" "$t"
done

shares=0
for t in "${targets[@]}"; do
  if [ "$t" = pipeline ]; then shares=$((shares + 2)); else shares=$((shares + 1)); fi
done
left=$(( budget - ($(date +%s) - begin) ))
per_share=$(( left / shares ))
[ "$per_share" -ge "$min" ] || per_share=$min

log=$(mktemp)
trap 'rm -f "$log"' EXIT
for t in "${targets[@]}"; do
  secs=$per_share
  [ "$t" = pipeline ] && secs=$((per_share * 2))
  mkdir -p "corpus/$t"
  corpora=("corpus/$t")
  [ -d "seeds/$t" ] && corpora+=("seeds/$t")
  start=$(date +%s)
  status=0
  cargo fuzz run "${flags[@]}" "$t" "${corpora[@]}" -- \
    -max_total_time="$secs" -runs="$runs" -print_final_stats=1 >"$log" 2>&1 || status=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  echo "fuzz $t: ${execs:-?} inputs in $(( $(date +%s) - start ))s (limit ${secs}s), exit $status"
  if [ "$status" -ne 0 ]; then
    tail -n 40 "$log" >&2
    exit "$status"
  fi
done
echo "fuzz: ${#targets[@]} targets in $(( $(date +%s) - begin ))s"
