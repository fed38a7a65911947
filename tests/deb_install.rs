//! The Debian package installs with `dpkg -i`, runs, removes and purges
//! cleanly, on a copy of this machine: an overlayfs over `/` in a private
//! mount namespace (`unshare -m`), its upper layer on a tmpfs, entered with
//! `chroot`. The host's files, users and dpkg database are never touched.
//!
//! Checked: postinst makes the `border` system user and group and
//! `/var/lib/border`, `/var/log/border` owned by them; each binary answers
//! `--version`; `dpkg -r` removes the binaries and keeps the user; `dpkg -P`
//! removes the user, the group and every directory border made, and what is
//! left in the upper layer has nothing of border's (only whiteouts of host
//! paths the purge removed) and the same passwd and group files as the host.
//! systemd is not PID 1 here, as in a chroot: the scripts skip
//! daemon-reload and stopping units without failing.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Runs in the private mount namespace: $1 the scratch directory, $2 the
/// package. Prints `step: ...` lines the test reads back.
const SCRIPT: &str = r#"set -eu
S=$1
DEB=$2
mount -t tmpfs tmpfs "$S/layer"
mkdir "$S/layer/upper" "$S/layer/work" "$S/root"
mount -t overlay overlay -o "lowerdir=/,upperdir=$S/layer/upper,workdir=$S/layer/work" "$S/root"
R=$S/root
mount -t proc proc "$R/proc"
mount --rbind /dev "$R/dev"
mount -t tmpfs tmpfs "$R/run"
mount -t tmpfs tmpfs "$R/tmp"
cp "$DEB" "$R/tmp/border.deb"
chroot "$R" sh -eu -c '
dpkg -i /tmp/border.deb >/dev/null
echo "user: $(id -un border) $(id -gn border)"
echo "shell: $(getent passwd border | cut -d: -f7)"
for d in /var/lib/border /var/log/border; do echo "dir: $d $(stat -c "%U:%G %a" $d)"; done
for b in border-dp border-mgmt border-gw borderctl; do echo "version: $($b --version | head -1)"; done
echo "udev: $(cat /lib/udev/rules.d/60-border-vfio.rules | grep -c GROUP)"
dpkg -r border >/dev/null
echo "removed: $(ls /usr/bin | grep -c "^border")"
echo "kept user: $(id -un border)"
dpkg -P border >/dev/null 2>&1
echo "purged user: $(getent passwd border | wc -l) group: $(getent group border | wc -l)"
for p in /var/lib/border /var/log/border /etc/border /usr/share/doc/border /lib/systemd/system/border-dp@.service /lib/udev/rules.d/60-border-vfio.rules; do
  if [ -e "$p" ]; then echo "left: $p"; fi
done
if ! dpkg-query -W border >/dev/null 2>&1; then echo "status: not-installed"; fi
'
cd "$S/layer/upper"
# What the purge leaves that names border: whiteouts (character devices
# 0,0) of host paths only.
find . -name "*border*" ! -type c | sed "s/^/ours: /"
for f in etc/passwd etc/group etc/shadow etc/gshadow; do
  if [ -e "$f" ] && ! cmp -s "$f" "/$f"; then echo "differs: $f"; fi
done
echo "done"
"#;

#[test]
fn the_package_installs_runs_and_purges_cleanly_with_dpkg() {
    let s = Scratch(std::env::temp_dir().join(format!("border-deb-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&s.0);
    std::fs::create_dir_all(s.0.join("layer")).unwrap();
    let out_dir = s.0.join("out");
    // The binaries this test was built with (dev profile), gzip (--fast).
    let (ok, text) = run(Command::new(env!("CARGO"))
        .current_dir(repo())
        .args([
            "deb",
            "--no-build",
            "--profile",
            "dev",
            "--fast",
            "--quiet",
            "-o",
        ])
        .arg(&out_dir));
    assert!(ok, "cargo deb: {text}");
    let deb = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .expect("cargo deb wrote a .deb");
    let script = s.0.join("install.sh");
    std::fs::write(&script, SCRIPT).unwrap();

    let (ok, text) = run(Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh"])
        .arg(&script)
        .arg(&s.0)
        .arg(&deb));
    assert!(ok && text.contains("done"), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    let has = |want: &str| lines.contains(&want);
    let version = env!("CARGO_PKG_VERSION");
    for want in [
        "user: border border".to_string(),
        "shell: /usr/sbin/nologin".to_string(),
        "dir: /var/lib/border border:border 750".to_string(),
        "dir: /var/log/border border:border 750".to_string(),
        format!("version: border-dp {version}"),
        format!("version: border-mgmt {version}"),
        format!("version: border-gw {version}"),
        format!("version: borderctl {version}"),
        "udev: 1".to_string(),
        "removed: 0".to_string(),
        "kept user: border".to_string(),
        "purged user: 0 group: 0".to_string(),
        "status: not-installed".to_string(),
    ] {
        assert!(has(&want), "{want:?} missing in:\n{text}");
    }
    for bad in ["left: ", "ours: ", "differs: "] {
        assert!(
            !lines.iter().any(|l| l.starts_with(bad)),
            "{bad}... in:\n{text}"
        );
    }
    // The host is untouched.
    let (ok, _) = run(Command::new("getent").args(["passwd", "border"]));
    assert!(!ok, "the host has no border user");
}
