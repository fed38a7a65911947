#!/usr/bin/env bash
# Installs everything border needs to build, test and run its demo on Debian 12.
# Idempotent: packages already present are not fetched again. Run as root.
set -euo pipefail

packages=(
  # DPDK 22.11 and what bindgen needs to read its headers
  dpdk dpdk-dev libdpdk-dev libclang-dev clang pkg-config libpcap-dev
  # the end-to-end tests' peers and tools
  iproute2 iputils-ping socat curl nftables procps
  # af_xdp ports over veth (the peers' checksum offload goes off with ethtool)
  ethtool
  # the package's maintainer scripts (adduser) and the dpkg -i test's
  # private overlay root (unshare, mount, setpriv: util-linux)
  adduser util-linux
  # the side-by-side comparison (perf/e2e.sh): load, throughput, plot
  wrk iperf3 gnuplot-nox
  # open-loop load at fixed connection rates (perf/openloop.py): h2load
  nghttp2-client
  # real PROXY protocol v2 receivers (e2e_ppv2) and a TLS client/cert tool
  haproxy nginx-light openssl
  # syntax checks of the traffic profiles (perf/tests/profiles_syntax.rs):
  # luac5.4 -p for pktgen's Lua, python3 and pyflakes3 for TRex's Python
  lua5.4 python3 pyflakes3
  # BGP (e2e_bgp): gobgpd is driven by border-mgmt over its gRPC API; its .proto
  # files (vendored in mgmt/proto/gobgp) come from golang-github-osrg-gobgp-dev;
  # BIRD2 is the router that learns the VIPs with ECMP
  gobgpd golang-github-osrg-gobgp-dev bird2
  # the security tests act as another local user (setpriv) and take locks (flock)
  util-linux
  # running as a service (tests/service_units.rs): systemd-analyze verify on the
  # units, dpkg-shlibdeps for the package's library dependencies (cargo deb)
  systemd dpkg-dev
  # scripts/chaos.sh (tests/e2e_chaos.rs): timings in fractional seconds
  bc
  # fleet control (e2e_fleet): border-gw's tunnel registry
  redis-server
  # spoofed SYN floods (--rand-source): e2e_synflood, scripts/synflood.sh, and
  # borderctl diag's (e2e_diag) table filled by SYNs that nothing answers
  hping3
  # hand-built segments (Debian's /usr/bin/python3): spoofed RSTs into a live
  # connection (e2e_rst_window), a client forging the PROXY header
  # (e2e_ppv2_forgery), a frame with a wrong IPv4 checksum (e2e_diag)
  python3-scapy
  # packet capture (e2e_capture): tcpdump and tshark (Wireshark's command
  # line) read back what borderctl capture wrote through dpdk-dumpcap
  # (package dpdk)
  tcpdump tshark
  # connection records (mgmt/tests/records_export.rs): a real IPFIX collector,
  # nfcapd receives and nfdump -r reads the flows back
  nfdump
  # UDP health probes (e2e_udp_health): a real DNS server as a backend; the
  # binary only (dnsmasq-base starts no system service)
  dnsmasq-base
  # direct server return (e2e_dsr): the backends' XDP decapsulation is built
  # with clang for the bpf target against libbpf's headers, and loaded with
  # iproute2 (this kernel has no ipip, fou or ip6_tunnel module)
  llvm libbpf-dev
  # metrics (e2e_prometheus, tests/prometheus_rules.rs): a real Prometheus
  # scrapes border-mgmt and evaluates the dashboard's queries and the alert
  # rules; promtool checks deploy/prometheus/border-rules.yml
  prometheus
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  # tshark: no setuid dumpcap group question (the tests read files as root)
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    echo "cargo is in $HOME/.cargo/bin but not on PATH: export PATH=\"\$HOME/.cargo/bin:\$PATH\"" >&2
  else
    echo "cargo not found: install a Rust toolchain >= 1.88 (rustup) first; Debian's rustc is too old" >&2
  fi
  exit 1
fi
if command -v rustup >/dev/null; then
  rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
  rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
fi
# The Debian package (tests/service_units.rs): cargo-deb, pinned so that a
# newer one cannot refuse the test's `--profile dev` package.
if ! cargo deb --version 2>/dev/null | grep -q '^cargo-deb 3\.8\.0$'; then
  cargo install cargo-deb --version 3.8.0 --locked
fi
pkg-config --exact-version=22.11.11 libdpdk 2>/dev/null || pkg-config --atleast-version=22.11 libdpdk
