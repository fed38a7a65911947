#!/usr/bin/env bash
# Installs border's binaries, systemd units, the annotated example config
# (and the real-NIC examples under share/doc/border/examples), the
# docs, the man pages, borderctl's shell completions and the Grafana
# dashboard (docs/operations.md). Build first:
#   cargo build --release --bins
#   sudo scripts/install.sh                       # into /usr/local
#   sudo PREFIX=/usr scripts/install.sh           # where the Debian package puts them
#   DESTDIR=/tmp/root scripts/install.sh          # into a staging root
# Environment:
#   PREFIX   where bin/, lib/systemd/system/ and share/ go (default /usr/local)
#   DESTDIR  a staging root prepended to every path (default: none)
#   BIN_DIR  where the built binaries are (default target/release)
# The units' paths follow PREFIX. The config directory is always /etc/border;
# an existing config there is never touched.
set -euo pipefail

PREFIX=${PREFIX:-/usr/local}
DESTDIR=${DESTDIR:-}
here=$(cd "$(dirname "$0")/.." && pwd)
BIN_DIR=${BIN_DIR:-$here/target/release}

die() {
  echo "install.sh: $*" >&2
  exit 1
}

case "$PREFIX" in
  /*) ;;
  *) die "PREFIX must be an absolute path, not '$PREFIX'" ;;
esac
for b in border-dp border-mgmt border-gw borderctl; do
  [ -x "$BIN_DIR/$b" ] || die "$BIN_DIR/$b is missing: run 'cargo build --release --bins' first (or set BIN_DIR)"
done

bindir=$DESTDIR$PREFIX/bin
unitdir=$DESTDIR$PREFIX/lib/systemd/system
docdir=$DESTDIR$PREFIX/share/doc/border
sharedir=$DESTDIR$PREFIX/share/border
confdir=$DESTDIR/etc/border
mandir=$DESTDIR$PREFIX/share/man/man1
bashdir=$DESTDIR$PREFIX/share/bash-completion/completions
fishdir=$DESTDIR$PREFIX/share/fish/vendor_completions.d
udevdir=$DESTDIR$PREFIX/lib/udev/rules.d
# Debian's zsh looks in vendor-completions under /usr, site-functions elsewhere.
if [ "$PREFIX" = /usr ]; then
  zshdir=$DESTDIR$PREFIX/share/zsh/vendor-completions
else
  zshdir=$DESTDIR$PREFIX/share/zsh/site-functions
fi

install -d -m 0755 "$bindir" "$unitdir" "$docdir" "$docdir/examples" "$sharedir/grafana" "$sharedir/prometheus"
install -d -m 0755 "$mandir" "$bashdir" "$zshdir" "$fishdir" "$udevdir"
install -d -m 0755 "$confdir"
for b in border-dp border-mgmt border-gw borderctl; do
  install -m 0755 "$BIN_DIR/$b" "$bindir/$b"
done
for u in border-dp@.service border-mgmt@.service border-gw@.service; do
  # The units name /usr/bin and /usr/share/doc (the Debian package's paths).
  sed -e "s|/usr/bin/border-|$PREFIX/bin/border-|g" \
      -e "s|/usr/share/doc/border/|$PREFIX/share/doc/border/|g" \
      "$here/deploy/systemd/$u" > "$unitdir/$u.tmp"
  chmod 0644 "$unitdir/$u.tmp"
  mv "$unitdir/$u.tmp" "$unitdir/$u"
done
install -m 0644 "$here/conf/tests/data/border.example.toml" "$confdir/border.example.toml"
install -m 0644 "$here/deploy/udev/60-border-vfio.rules" "$udevdir/60-border-vfio.rules"
install -m 0644 "$here/README.md" "$here"/docs/*.md "$docdir/"
install -m 0644 "$here"/deploy/examples/*.toml "$docdir/examples/"
install -m 0644 "$here/deploy/grafana/border.json" "$sharedir/grafana/border.json"
install -m 0644 "$here/deploy/prometheus/border-rules.yml" "$sharedir/prometheus/border-rules.yml"
install -m 0644 "$here"/deploy/man/*.1 "$mandir/"
install -m 0644 "$here/deploy/completions/borderctl.bash" "$bashdir/borderctl"
install -m 0644 "$here/deploy/completions/_borderctl" "$zshdir/_borderctl"
install -m 0644 "$here/deploy/completions/borderctl.fish" "$fishdir/borderctl.fish"

echo "installed border into ${DESTDIR:-/}${DESTDIR:+ }(PREFIX=$PREFIX)"
# The units run the daemons as user border (the package's postinst makes
# it the same way).
if [ -z "$DESTDIR" ] && [ "$(id -u)" = 0 ] && ! getent passwd border >/dev/null; then
  getent group border >/dev/null || groupadd --system border
  useradd --system --gid border --no-create-home --home-dir /var/lib/border \
    --shell /usr/sbin/nologin --comment "border load balancer" border
  echo "made the system user border"
fi
if [ -z "$DESTDIR" ] && command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
  systemctl daemon-reload
  echo "next: write /etc/border/<instance>.toml (see /etc/border/border.example.toml), then"
  echo "  systemctl enable --now border-dp@<instance> border-mgmt@<instance>"
  echo "a fleet gateway: /etc/border/gw-<name>.toml (docs/fleet.md), then systemctl enable --now border-gw@<name>"
fi
