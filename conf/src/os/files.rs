//! How border creates and opens its own files (regions, locks, the
//! overrides file, the socket's directory) so that no other local user can
//! read, block or redirect them (docs/security.md):
//! - new files are mode 0600, or 0640 with the operators' group
//!   ([`Access`]), whatever the umask;
//! - they are opened with `O_NOFOLLOW` and made with `O_EXCL`, so a symlink
//!   or a file planted in advance is never followed or reused;
//! - an existing file is used only if its owner and mode are what border
//!   would have made ([`open_own`], [`open_trusted`]); otherwise the error
//!   names the file and the fix;
//! - directories border makes are 0750.

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Who may read a file border creates besides its owner.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Access {
    /// The operators' group (`[mgmt] operators_group`), if any: its members
    /// may read (0640) and use the API socket (0660).
    pub group: Option<u32>,
}

impl Access {
    /// The owner only.
    pub const PRIVATE: Access = Access { group: None };

    /// Owner and `gid`.
    pub fn group(gid: u32) -> Access {
        Access { group: Some(gid) }
    }

    /// Resolves `[mgmt] operators_group` (a name) to an [`Access`].
    pub fn for_group_name(name: Option<&str>) -> Result<Access, String> {
        match name {
            None => Ok(Access::PRIVATE),
            Some(n) => group_id(n).map(Access::group).ok_or_else(|| {
                format!("mgmt.operators_group: no group named `{n}` on this machine (create it with `groupadd {n}`, or remove the key)")
            }),
        }
    }

    /// Mode of a file border creates: 0640 with a group, else 0600.
    pub fn file_mode(self) -> u32 {
        if self.group.is_some() {
            0o640
        } else {
            0o600
        }
    }

    /// Mode of the API socket: 0660 with a group, else 0600 (connecting
    /// needs write permission).
    pub fn socket_mode(self) -> u32 {
        if self.group.is_some() {
            0o660
        } else {
            0o600
        }
    }
}

/// Mode of the directories border makes (`/run/border`).
pub const DIR_MODE: u32 = 0o750;

/// The effective user id of this process.
pub fn euid() -> u32 {
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

/// The gid of group `name`, if the machine has one (through NSS).
pub fn group_id(name: &str) -> Option<u32> {
    let cname = CString::new(name).ok()?;
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: `libc::group` is plain data (integers and pointers), for
        // which all-zero bytes are a valid value.
        let mut grp: libc::group = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::group = std::ptr::null_mut();
        // SAFETY: `grp` and `result` are valid out-pointers; `buf` is a
        // writable buffer of `buf.len()` bytes that outlives the call, and
        // only `gr_gid` (a plain integer) is read from `grp` afterwards.
        let rc = unsafe {
            libc::getgrnam_r(
                cname.as_ptr(),
                &mut grp,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut result,
            )
        };
        if rc == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 2, 0);
            continue;
        }
        return (rc == 0 && !result.is_null()).then_some(grp.gr_gid);
    }
}

/// Why an existing file is not used. One line, naming the file and the fix.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {what}; {fix}", path = .path.display())]
pub struct Untrusted {
    /// The file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub what: String,
    /// What the operator should do.
    pub fix: String,
}

/// Why a file could not be opened or created.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The system call failed (a symlink in the way shows up as `ELOOP`,
    /// turned into [`FileError::Untrusted`] by the openers here).
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The file exists but is not one border would have made.
    #[error("{0}")]
    Untrusted(#[from] Untrusted),
}

impl FileError {
    /// The `io::Error` inside, if any (e.g. to tell "not found").
    pub fn io_kind(&self) -> Option<io::ErrorKind> {
        match self {
            FileError::Io(e) => Some(e.kind()),
            FileError::Untrusted(_) => None,
        }
    }
}

fn remove_fix(path: &Path) -> String {
    format!(
        "border does not use it: remove it (`rm {}`) and start again",
        path.display()
    )
}

/// A symlink where border expects its own file: `ELOOP` from an
/// `O_NOFOLLOW` open.
pub(super) fn symlink_error(path: &Path, e: io::Error) -> FileError {
    if e.raw_os_error() == Some(libc::ELOOP) {
        FileError::Untrusted(Untrusted {
            path: path.to_owned(),
            what: "is a symbolic link".into(),
            fix: remove_fix(path),
        })
    } else {
        FileError::Io(e)
    }
}

/// Gives `file` exactly `mode` and, with a group, that group (the umask may
/// have cleared bits at creation).
fn set_owner_mode(file: &File, access: Access, mode: u32) -> io::Result<()> {
    if let Some(gid) = access.group {
        std::os::unix::fs::fchown(file, None, Some(gid))?;
    }
    file.set_permissions(std::fs::Permissions::from_mode(mode))
}

/// Creates `path`, which must not exist (`O_EXCL`; a symlink there is not
/// followed), read-write with [`Access::file_mode`].
pub fn create_new(path: &Path, access: Access) -> Result<File, FileError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(access.file_mode())
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| symlink_error(path, e))?;
    set_owner_mode(&file, access, access.file_mode())?;
    Ok(file)
}

/// Gives `file` `len` bytes of real backing store (`posix_fallocate`), not
/// a sparse `set_len`: on a full tmpfs (`/dev/shm`) this fails now with
/// ENOSPC instead of a SIGBUS later, at the first touch of a page that has
/// no memory behind it (docs/reliability.md, a full /dev/shm).
pub fn allocate(file: &File, len: u64) -> io::Result<()> {
    let len = libc::off_t::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    // SAFETY: posix_fallocate on a descriptor borrowed from `file`, open
    // for the whole call; no memory is passed.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

/// A name beside `path` for a file built before it is renamed over `path`:
/// hidden, and unpredictable to other users (pid and a random 64-bit tag).
pub fn temp_path_for(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tag: u64 = random_tag();
    path.with_file_name(format!(".{name}.tmp-{}-{tag:016x}", std::process::id()))
}

fn random_tag() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: getrandom(2) writes at most `b.len()` bytes into `b`.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != b.len() as isize {
        // Never short for 8 bytes once the pool is ready; fall back to time.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        return t ^ u64::from(std::process::id()).rotate_left(32);
    }
    u64::from_le_bytes(b)
}

/// What a file that is not a regular one is, in words (`None`: a regular
/// file).
fn special_kind(file_type: std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_file() {
        None
    } else if file_type.is_fifo() {
        Some("a FIFO (named pipe)")
    } else if file_type.is_socket() {
        Some("a socket")
    } else if file_type.is_char_device() {
        Some("a character device")
    } else if file_type.is_block_device() {
        Some("a block device")
    } else if file_type.is_dir() {
        Some("a directory")
    } else if file_type.is_symlink() {
        Some("a symbolic link")
    } else {
        Some("not a regular file")
    }
}

/// The refusal of a FIFO, socket, device or directory where border expects
/// one of its regular files: one line naming it, at once (opening a FIFO
/// would wait for a writer forever).
fn special_error(path: &Path, kind: &str) -> FileError {
    FileError::Untrusted(Untrusted {
        path: path.to_owned(),
        what: format!("is {kind}, not a file border made"),
        fix: remove_fix(path),
    })
}

/// The error of an `O_NOFOLLOW | O_NONBLOCK` open that failed: a symlink
/// (`ELOOP`), or a socket (`ENXIO`) or another special file, named as
/// such; anything else as it came.
pub(super) fn open_error(path: &Path, e: io::Error) -> FileError {
    let special = matches!(
        e.raw_os_error(),
        Some(libc::ENXIO | libc::ENODEV | libc::EISDIR)
    )
    .then(|| std::fs::symlink_metadata(path).ok())
    .flatten()
    .and_then(|m| special_kind(m.file_type()));
    match special {
        Some(kind) => special_error(path, kind),
        None => symlink_error(path, e),
    }
}

/// Opens an existing `path` (read-write with `write`) without following a
/// symlink, and its metadata, to be checked before use. `O_NONBLOCK` makes
/// the open of a FIFO return at once (without it, opening one another user
/// planted waits for a writer forever), and anything but a regular file is
/// refused right after the open, before a byte is read.
pub fn open_no_follow(path: &Path, write: bool) -> Result<(File, std::fs::Metadata), FileError> {
    let file = OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| open_error(path, e))?;
    let meta = file.metadata()?;
    if let Some(kind) = special_kind(meta.file_type()) {
        return Err(special_error(path, kind));
    }
    Ok((file, meta))
}

/// Opens a file border made and now uses again (a tables region it
/// re-attaches to, a lock file), read-write, never through a symlink. It
/// must be a regular file owned by this process's user with no permission
/// for others and no write permission for the group; with `exact`, its mode
/// must be [`Access::file_mode`] and its group the configured one.
pub fn open_own(path: &Path, access: Access, exact: bool) -> Result<File, FileError> {
    let (file, meta) = open_no_follow(path, true)?;
    let mode = meta.mode() & 0o7777;
    let me = euid();
    let expected = access.file_mode();
    let group_ok = access.group.is_none_or(|g| meta.gid() == g);
    let ok = meta.file_type().is_file()
        && meta.uid() == me
        && mode & 0o027 == 0
        && (!exact || (mode == expected && group_ok));
    if !ok {
        let group = access
            .group
            .map_or(String::new(), |g| format!(" group {g}"));
        return Err(Untrusted {
            path: path.to_owned(),
            what: format!(
                "owned by uid {} gid {} with mode {mode:04o}, where border makes it uid {me}{group} mode {expected:04o}",
                meta.uid(),
                meta.gid()
            ),
            fix: format!(
                "if no border process uses it, remove it (`rm {}`) and start again; if it is border's, `chown {me}{} {} && chmod {expected:o} {}`",
                path.display(),
                access.group.map_or(String::new(), |g| format!(":{g}")),
                path.display(),
                path.display()
            ),
        }
        .into());
    }
    Ok(file)
}

/// Opens, read-only and never through a symlink, a file another border
/// process made (a reader's view of a region): a regular file owned by root
/// or by this process's user, writable by nobody else. Anything else could
/// have been planted by another user to feed this process forged contents.
pub fn open_trusted(path: &Path) -> Result<File, FileError> {
    let (file, meta) = open_no_follow(path, false)?;
    let mode = meta.mode() & 0o7777;
    let me = euid();
    if !meta.file_type().is_file() || (meta.uid() != 0 && meta.uid() != me) || mode & 0o022 != 0 {
        return Err(Untrusted {
            path: path.to_owned(),
            what: format!(
                "owned by uid {} with mode {mode:04o}: not a file border made (owned by root or uid {me}, writable by its owner only)",
                meta.uid()
            ),
            fix: remove_fix(path),
        }
        .into());
    }
    Ok(file)
}

/// Makes sure `dir` exists. A missing one is created [`DIR_MODE`] with the
/// access's group (its parents as `create_dir_all` makes them). An
/// existing directory is left as it is, except border's own
/// [`super::RUN_DIR`]: if this user owns it, it is set to [`DIR_MODE`]
/// (and the group, if one is configured), which also tightens one that an
/// older border made 0755.
pub fn ensure_dir(dir: &Path, access: Access) -> io::Result<()> {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) => {
            if dir == Path::new(super::RUN_DIR) && meta.is_dir() && meta.uid() == euid() {
                if let Some(gid) = access.group {
                    std::os::unix::fs::lchown(dir, None, Some(gid))?;
                }
                if meta.mode() & 0o7777 != DIR_MODE {
                    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(DIR_MODE))?;
                }
            }
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if let Some(parent) = dir.parent() {
                std::fs::create_dir_all(parent)?;
            }
            match std::fs::create_dir(dir) {
                Ok(()) => {}
                // Another process made it meanwhile: as if it had existed.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(()),
                Err(e) => return Err(e),
            }
            if let Some(gid) = access.group {
                std::os::unix::fs::lchown(dir, None, Some(gid))?;
            }
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(DIR_MODE))
        }
        Err(e) => Err(e),
    }
}

/// Runs `f` with the process umask set to `mask`, then restores it, e.g.
/// around `bind()` of a unix socket, whose mode the umask decides at
/// creation. The umask is per process: files other threads create
/// meanwhile get it too, so pass only a mask at least as tight as the
/// process's (then they can only come out tighter). Callers are serialised
/// so that each restores the mask it found.
pub fn with_umask<T>(mask: u32, f: impl FnOnce() -> T) -> T {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: umask(2) only swaps the process's file-creation mask.
    let old = unsafe { libc::umask(mask as libc::mode_t) };
    let out = f();
    // SAFETY: as above; restores the previous mask.
    unsafe { libc::umask(old) };
    out
}

/// Sets the process umask to 077 for good: whatever a process creates
/// without going through this module (DPDK's runtime files, logs) is then
/// its owner's only. border-dp and border-mgmt call it first thing.
pub fn restrict_umask() {
    // SAFETY: umask(2) only swaps the process's file-creation mask.
    unsafe { libc::umask(0o077) };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("conf-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    #[test]
    fn new_files_are_private_whatever_the_umask_and_never_follow_a_symlink() {
        let dir = temp_dir("create");
        let p = dir.join("region");
        with_umask(0o077, || create_new(&p, Access::PRIVATE)).unwrap();
        assert_eq!(mode(&p), 0o600);
        let g = dir.join("grouped");
        let gid = std::fs::metadata(&dir).unwrap().gid();
        with_umask(0o077, || create_new(&g, Access::group(gid))).unwrap();
        assert_eq!(mode(&g), 0o640, "the group bit survives a 077 umask");

        let target = dir.join("target");
        let link = dir.join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = create_new(&link, Access::PRIVATE).unwrap_err();
        assert!(
            matches!(e, FileError::Io(ref e) if e.kind() == io::ErrorKind::AlreadyExists),
            "{e}"
        );
        assert!(!target.exists(), "the symlink was followed");
        let e = open_own(&link, Access::PRIVATE, false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is a symbolic link") && e.contains("rm "), "{e}");
        let e = open_trusted(&link).unwrap_err().to_string();
        assert!(e.contains("is a symbolic link"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_fifo_or_a_socket_at_a_region_path_is_refused_at_once_naming_it() {
        let dir = temp_dir("special");
        let fifo = dir.join("state");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        // Without O_NONBLOCK each of these opens waits for a writer forever.
        let (tx, rx) = std::sync::mpsc::channel();
        let f = fifo.clone();
        std::thread::spawn(move || {
            let trusted = open_trusted(&f).map(drop).map_err(|e| e.to_string());
            let own = open_own(&f, Access::PRIVATE, false)
                .map(drop)
                .map_err(|e| e.to_string());
            let _ = tx.send((trusted, own));
        });
        let (trusted, own) = rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("opening a FIFO blocked");
        for e in [trusted.unwrap_err(), own.unwrap_err()] {
            assert!(
                e.contains(&fifo.display().to_string())
                    && e.contains("is a FIFO")
                    && e.contains("rm "),
                "{e}"
            );
            assert_eq!(e.lines().count(), 1, "{e}");
        }
        let sock = dir.join("sock");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let e = open_trusted(&sock).unwrap_err().to_string();
        assert!(e.contains("sock: is a socket"), "{e}");
        let e = open_own(&dir, Access::PRIVATE, false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is a directory"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_existing_file_is_used_only_with_the_owner_and_mode_border_gives() {
        let dir = temp_dir("own");
        let p = dir.join("region");
        create_new(&p, Access::PRIVATE).unwrap();
        open_own(&p, Access::PRIVATE, true).unwrap();
        open_trusted(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = open_own(&p, Access::PRIVATE, false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&p.display().to_string())
                && e.contains("mode 0644")
                && e.contains("chmod 600"),
            "{e}"
        );
        open_trusted(&p)
            .expect("a reader accepts a world-readable file that only its owner writes");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = open_trusted(&p).unwrap_err().to_string();
        assert!(e.contains("mode 0666") && e.contains("rm "), "{e}");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        open_own(&p, Access::PRIVATE, false).expect("group read, not exact");
        assert!(
            open_own(&p, Access::PRIVATE, true).is_err(),
            "exact wants 0600"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn made_directories_are_0750_and_existing_ones_other_than_run_border_are_left_alone() {
        let dir = temp_dir("dir");
        let d = dir.join("a").join("b");
        with_umask(0o077, || ensure_dir(&d, Access::PRIVATE)).unwrap();
        assert_eq!(mode(&d), 0o750);
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        ensure_dir(&d, Access::PRIVATE).unwrap();
        assert_eq!(mode(&d), 0o755, "not border's run directory: untouched");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn groups_resolve_by_name() {
        assert_eq!(group_id("root"), Some(0));
        assert_eq!(group_id("no-such-group-here"), None);
        assert_eq!(Access::for_group_name(None).unwrap(), Access::PRIVATE);
        let e = Access::for_group_name(Some("no-such-group-here")).unwrap_err();
        assert!(e.contains("groupadd no-such-group-here"), "{e}");
        assert_eq!(
            Access::for_group_name(Some("root")).unwrap(),
            Access::group(0)
        );
    }

    #[test]
    fn temporary_names_differ_and_stay_beside_the_file() {
        let p = Path::new("/dev/shm/border-x-state");
        let (a, b) = (temp_path_for(p), temp_path_for(p));
        assert_ne!(a, b);
        assert_eq!(a.parent(), p.parent());
        assert!(a
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(".border-x-state.tmp-"));
    }
}
