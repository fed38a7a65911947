#!/usr/bin/env bash
# The SYN-flood measurement of docs/reliability.md (outside CI): border-dp
# full-NAT over TAP, one worker, hping3 --rand-source from the client
# namespace, real clients and an established stream at the same time
# (tests/e2e_synflood.rs, a_spoofed_syn_flood_leaves_room_for_real_clients,
# whose short form CI runs). It prints the figures, then fails if real
# connections were lost or the stream retransmitted. Run as root.
#
#   scripts/synflood.sh [PACE] [SECONDS] [TABLE] [CLIENTS]
#
# PACE is hping3's -i value (u250: one SYN every 250 us) or --flood (as fast
# as hping3 can send: the rate one worker sustains is border-dp's rx rate
# printed at the end). Defaults: --flood, 60 s, a 65536-entry table, 2
# client loops.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "scripts/synflood.sh must run as root" >&2; exit 1; }
SYNFLOOD_PACE=${1:---flood} SYNFLOOD_SECONDS=${2:-60} SYNFLOOD_TABLE=${3:-65536} SYNFLOOD_CLIENTS=${4:-2} \
  flock /tmp/border-e2e.lock \
  cargo test --release --test e2e_synflood -- --nocapture a_spoofed_syn_flood_leaves_room_for_real_clients
