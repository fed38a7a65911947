//! The few operating-system calls that several crates make: the exclusive
//! `flock` that keeps one process per role and instance (border-dp,
//! border-mgmt) and one writer per tables region, whether a recorded pid
//! still lives, and the transparent-huge-page hint for large tables. They
//! live here, in the crate every other one depends on, so each has one copy.

pub mod files;
pub mod log_level;
pub mod notify;

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use files::{Access, Untrusted};

/// The directory of the instance locks (and of border-mgmt's default socket).
pub const RUN_DIR: &str = "/run/border";

/// The environment variable that moves the shared-memory regions out of
/// `/dev/shm` (see [`region_dir`]).
pub const SHM_DIR_ENV: &str = "BORDER_SHM_DIR";

/// Where the shared-memory regions (`border-<instance>-state`,
/// `border-<instance>-tables`) live: `/dev/shm`, or the directory that
/// `BORDER_SHM_DIR` names. A tmpfs of border's own there bounds what the
/// regions take and keeps other users from filling their space
/// (docs/reliability.md);
/// tests mount a small one to fill it. border-dp, border-mgmt and borderctl
/// of one instance must all see the same value. An empty value is unset.
pub fn region_dir() -> PathBuf {
    match std::env::var_os(SHM_DIR_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from("/dev/shm"),
    }
}

/// Why an exclusive lock was not taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another open file description holds the lock: another process of
    /// the same role and instance, or another writer of the same region.
    #[error("the lock is held")]
    Held,
    /// The lock file could not be created, opened or locked.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// Something that is not border's lock file is at its path (a symlink,
    /// another user's file).
    #[error("{0}")]
    Untrusted(#[from] Untrusted),
}

/// Takes an exclusive `flock` on `file` without waiting. The lock lasts as
/// long as the open file description: drop every handle of it to release.
/// The kernel drops it when the process dies, so a crash leaves no stale lock.
pub fn try_lock_exclusive(file: &File) -> Result<(), LockError> {
    // SAFETY: flock on a file descriptor borrowed from `file`, open for the
    // whole call; no memory is passed.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Err(LockError::Held)
    } else {
        Err(LockError::Io(e))
    }
}

/// `/run/border/<instance>.<role>.lock`: the lock file of one process role
/// (`dp`, `mgmt`) of an instance.
pub fn instance_lock_path(instance: &str, role: &str) -> PathBuf {
    Path::new(RUN_DIR).join(format!("{instance}.{role}.lock"))
}

/// Creates `path` (and its directory, 0750: [`files::ensure_dir`]) if
/// needed and locks it exclusively; the lock is held while the returned
/// file stays open. The file's content is never touched. The file is mode
/// 0600, so no other user can open it to hold the lock and keep border from
/// starting; a symlink at `path` is not followed, another user's file is
/// refused, and one of ours with a wider mode (an older border's) is set
/// to 0600.
pub fn lock_file(path: &Path) -> Result<File, LockError> {
    if let Some(dir) = path.parent() {
        files::ensure_dir(dir, Access::PRIVATE)?;
    }
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match files::open_error(path, e) {
            files::FileError::Untrusted(u) => LockError::Untrusted(u),
            files::FileError::Io(e) => LockError::Io(e),
        })?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(Untrusted {
            path: path.to_owned(),
            what: "is not a regular file".into(),
            fix: format!("remove it (`rm {}`) and start again", path.display()),
        }
        .into());
    }
    if meta.uid() != files::euid() {
        return Err(Untrusted {
            path: path.to_owned(),
            what: format!("owned by uid {}, not by this user", meta.uid()),
            fix: format!("remove it (`rm {}`) and start again", path.display()),
        }
        .into());
    }
    if meta.mode() & 0o777 != 0o600 {
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    try_lock_exclusive(&file)?;
    Ok(file)
}

/// True if a process with this pid exists (it may belong to another user).
/// 0 and pids beyond `i32::MAX` name no single process and are never alive.
pub fn process_alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    if pid == 0 {
        return false;
    }
    // SAFETY: kill(2) with signal 0 sends nothing: it only checks that the
    // process exists and that we may signal it. No memory is involved.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Sends SIGINT to `pid`: asks a child tool (`dpdk-dumpcap`) to finish
/// cleanly, as Ctrl-C would.
pub fn interrupt(pid: u32) -> io::Result<()> {
    let pid = i32::try_from(pid)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: kill(2) only delivers a signal; no memory is involved.
    if unsafe { libc::kill(pid, libc::SIGINT) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Size of a transparent huge page on x86-64.
const HUGE_PAGE: usize = 2 << 20;

/// Asks the kernel to back the whole 2 MiB pages inside `bytes` at `ptr`
/// with transparent huge pages. Large tables read at random (the connection
/// table's slab and index, one entry per packet) otherwise cost a TLB miss,
/// a page walk, on top of each cache miss. Only a hint, given once: where
/// THP is off or the call fails, nothing changes. Returns the bytes advised
/// (0 when the range holds no whole huge page).
pub fn advise_huge_pages(ptr: *const u8, bytes: usize) -> usize {
    let start = (ptr as usize).next_multiple_of(HUGE_PAGE);
    let end = (ptr as usize).saturating_add(bytes) & !(HUGE_PAGE - 1);
    if end <= start {
        return 0;
    }
    // SAFETY: MADV_HUGEPAGE only changes how the kernel backs the pages of
    // `start..end`: no memory is freed, moved or changed, so no Rust
    // reference or value is affected whatever the range holds (an unmapped
    // range fails with ENOMEM, which a hint ignores).
    unsafe {
        libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
    }
    end - start
}

/// Whether files in a shared-memory directory (the flows regions) get
/// transparent huge pages when they ask for them, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShmemHugePages {
    /// The slab's `MADV_HUGEPAGE` can be granted there.
    pub huge: bool,
    /// The setting that decides it, and what to change when it says no.
    pub why: String,
}

/// [`ShmemHugePages`] of `dir`, for files allocated whole when they are
/// made (`files::allocate`) and advised only then. A tmpfs mount has its
/// own policy, its `huge=` mount option (default `never`: `/dev/shm` as
/// distributions mount it); `/sys/kernel/mm/transparent_hugepage/shmem_enabled`
/// is the policy of the kernel's internal shmem mount only, except that
/// `deny` and `force` override every mount.
pub fn shmem_huge_pages(dir: &Path) -> ShmemHugePages {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    shmem_huge_pages_of(
        &read("/proc/self/mountinfo"),
        &read("/sys/kernel/mm/transparent_hugepage/shmem_enabled"),
        &dir,
    )
}

fn shmem_huge_pages_of(mountinfo: &str, shmem_enabled: &str, dir: &Path) -> ShmemHugePages {
    let answer = |huge: bool, why: String| ShmemHugePages { huge, why };
    let selected = shmem_enabled
        .find('[')
        .and_then(|a| Some(&shmem_enabled[a + 1..a + shmem_enabled[a..].find(']')?]));
    let Some(selected) = selected else {
        return answer(
            false,
            "this kernel has no transparent huge pages for shared memory".into(),
        );
    };
    if selected == "deny" {
        return answer(
            false,
            "shmem_enabled=deny turns them off on every tmpfs".into(),
        );
    }
    // The deepest mount holding `dir`; of several on one point, the last.
    let mut best: Option<(PathBuf, &str, &str)> = None;
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let Some(point) = left.split(' ').nth(4) else {
            continue;
        };
        let point = PathBuf::from(point.replace("\\040", " "));
        let mut fields = right.split(' ');
        let (fstype, options) = (fields.next().unwrap_or(""), fields.nth(1).unwrap_or(""));
        let deeper = best
            .as_ref()
            .is_none_or(|(b, _, _)| point.components().count() >= b.components().count());
        if dir.starts_with(&point) && deeper {
            best = Some((point, fstype, options));
        }
    }
    let Some((point, fstype, options)) = best else {
        return answer(false, format!("no mount holds {}", dir.display()));
    };
    let at = point.display();
    match fstype {
        "hugetlbfs" => return answer(true, format!("{at} is hugetlbfs")),
        "tmpfs" => {}
        other => return answer(false, format!("{at} is {other}, not tmpfs")),
    }
    if selected == "force" {
        return answer(true, "shmem_enabled=force".into());
    }
    let huge = options
        .split(',')
        .find_map(|o| o.strip_prefix("huge="))
        .unwrap_or("never");
    match huge {
        "always" | "within_size" => answer(true, format!("tmpfs {at} mounted with huge={huge}")),
        // A region's memory is allocated when it is made (fallocate),
        // before the slab's MADV_HUGEPAGE: under `advise` it is allocated
        // in 4 KiB pages, which only khugepaged may merge later, slowly.
        "advise" => answer(
            false,
            format!("tmpfs {at} mounted with huge=advise, but the regions are allocated before the slab asks: remount it with huge=within_size (docs/operations.md)"),
        ),
        _ => answer(
            false,
            format!("tmpfs {at} mounted with huge={huge}: remount it with huge=within_size (docs/operations.md)"),
        ),
    }
}

/// The supplementary groups of the process at the other end of a unix
/// stream socket, as the kernel recorded them when it connected
/// (`SO_PEERGROUPS`, Linux 4.13). Unlike `/proc/<pid>/status` of the pid
/// `SO_PEERCRED` names, this cannot be raced by the caller exiting and its
/// pid being reused.
pub fn peer_groups(socket: std::os::fd::BorrowedFd<'_>) -> io::Result<Vec<u32>> {
    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    loop {
        let mut len = libc::socklen_t::try_from(std::mem::size_of_val(groups.as_slice()))
            .map_err(|_| io::Error::from_raw_os_error(libc::ERANGE))?;
        // SAFETY: getsockopt writes at most `len` bytes into `groups`, a
        // buffer of exactly that many bytes that outlives the call, and
        // sets `len` to the bytes written (or needed, with ERANGE).
        let rc = unsafe {
            libc::getsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let count = len as usize / std::mem::size_of::<libc::gid_t>();
        if rc == 0 {
            groups.truncate(count);
            return Ok(groups);
        }
        let e = io::Error::last_os_error();
        // NGROUPS_MAX is 65536: the kernel said how much it needs.
        if e.raw_os_error() == Some(libc::ERANGE) && count > groups.len() && count <= 65_536 {
            groups.resize(count, 0);
            continue;
        }
        return Err(e);
    }
}

/// Clock ticks per second of the times in `/proc/<pid>/stat`
/// (`sysconf(_SC_CLK_TCK)`, USER_HZ: 100 on Linux).
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf reads a constant of the C library; it takes no
    // pointer and has no side effect.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(t).ok().filter(|&t| t > 0).unwrap_or(100)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("conf-os-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn peer_groups_are_the_connecting_process_groups() {
        use std::os::fd::AsFd;
        let mut mine: Vec<libc::gid_t> = vec![0; 65_536];
        // SAFETY: getgroups writes at most `mine.len()` gids into `mine`.
        let n = unsafe { libc::getgroups(mine.len() as i32, mine.as_mut_ptr()) };
        assert!(n >= 0);
        mine.truncate(n as usize);
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut theirs = peer_groups(a.as_fd()).unwrap();
        theirs.sort_unstable();
        mine.sort_unstable();
        assert_eq!(theirs, mine);
        let f = File::open("/proc/self/status").unwrap();
        assert!(peer_groups(f.as_fd()).is_err(), "not a socket");
    }

    #[test]
    fn a_second_lock_on_the_same_file_is_refused_until_the_first_is_dropped() {
        let dir = temp_dir("lock");
        let path = dir.join("nested").join("x.dp.lock");
        let first = lock_file(&path).expect("first lock, directory created");
        assert!(matches!(lock_file(&path), Err(LockError::Held)));
        let other = File::open(&path).unwrap();
        assert!(matches!(try_lock_exclusive(&other), Err(LockError::Held)));
        drop(first);
        let _again = lock_file(&path).expect("free once the holder closed it");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_lock_file_that_cannot_be_created_is_an_io_error() {
        let dir = temp_dir("lock-io");
        std::fs::create_dir_all(&dir).unwrap();
        let not_a_dir = dir.join("file");
        std::fs::write(&not_a_dir, b"").unwrap();
        let e = lock_file(&not_a_dir.join("x.lock")).unwrap_err();
        assert!(matches!(e, LockError::Io(_)), "{e:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn lock_files_are_0600_and_never_reached_through_a_symlink() {
        let dir = temp_dir("lock-mode");
        let path = dir.join("x.mgmt.lock");
        drop(files::with_umask(0o077, || lock_file(&path)).unwrap());
        let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(
            mode(&dir) & 0o007,
            0,
            "a directory it makes is closed to others"
        );
        // An older border's lock, open to all: tightened.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        drop(lock_file(&path).unwrap());
        assert_eq!(mode(&path), 0o600);
        let link = dir.join("y.mgmt.lock");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let e = lock_file(&link).unwrap_err();
        assert!(matches!(e, LockError::Untrusted(_)), "{e:?}");
        assert!(e.to_string().contains("symbolic link"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn instance_locks_are_per_instance_and_role() {
        assert_eq!(
            instance_lock_path("lab", "dp"),
            PathBuf::from("/run/border/lab.dp.lock")
        );
        assert_ne!(
            instance_lock_path("lab", "dp"),
            instance_lock_path("lab", "mgmt")
        );
    }

    #[test]
    fn only_an_existing_process_is_alive() {
        assert!(process_alive(std::process::id()));
        // pid 1 exists; as non-root kill(1, 0) says EPERM, still alive.
        assert!(process_alive(1));
        assert!(!process_alive(0));
        assert!(!process_alive(u32::MAX));
        assert!(!process_alive(i32::MAX as u32 + 1));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!process_alive(pid), "reaped child {pid} still alive");
    }

    #[test]
    fn shared_memory_gets_huge_pages_by_its_tmpfs_mount_option() {
        let mounts = "\
22 1 0:21 / / rw - ext4 /dev/vda1 rw
25 22 0:23 / /dev/shm rw,nosuid - tmpfs tmpfs rw,size=24683664k
40 22 0:30 / /srv/border rw - tmpfs tmpfs rw,size=4g,huge=within_size
43 22 0:33 / /srv/advised rw - tmpfs tmpfs rw,huge=advise
41 22 0:31 / /srv/big rw - tmpfs tmpfs rw,huge=always
42 22 0:32 / /mnt/huge rw - hugetlbfs nodev rw,pagesize=2M
";
        let off = "always within_size advise [never] deny force\n";
        let of = |enabled: &str, dir: &str| shmem_huge_pages_of(mounts, enabled, Path::new(dir));
        // /dev/shm as mounted by default: huge=never, whatever
        // shmem_enabled (the internal mount's policy) says.
        let shm = of(off, "/dev/shm");
        assert!(!shm.huge && shm.why.contains("huge=never"), "{shm:?}");
        assert!(!of("always within_size [advise] never deny force", "/dev/shm").huge);
        let own = of(off, "/srv/border/x");
        assert!(own.huge && own.why.contains("/srv/border"), "{own:?}");
        assert!(of(off, "/srv/big").huge);
        let late = of(off, "/srv/advised");
        assert!(!late.huge && late.why.contains("within_size"), "{late:?}");
        assert!(of(off, "/mnt/huge").huge);
        assert!(!of(off, "/srv/bordering").huge, "a prefix is not a parent");
        assert!(!of(off, "/var/tmp").huge, "ext4");
        assert!(of("always within_size advise never deny [force]", "/dev/shm").huge);
        assert!(!of("always within_size advise never [deny] force", "/srv/big").huge);
        assert!(!of("", "/srv/big").huge, "no THP in the kernel");
        // The last mount on a point is the one seen.
        let over = format!("{mounts}50 25 0:40 / /dev/shm rw - tmpfs tmpfs rw,huge=within_size\n");
        assert!(shmem_huge_pages_of(&over, off, Path::new("/dev/shm")).huge);
        // This machine's answer names a setting, whichever it is.
        assert!(!shmem_huge_pages(Path::new("/dev/shm")).why.is_empty());
    }

    #[test]
    fn only_whole_huge_pages_inside_the_range_are_advised() {
        let buf = vec![0u8; 3 * HUGE_PAGE];
        let advised = advise_huge_pages(buf.as_ptr(), buf.len());
        // Three huge pages' worth, wherever it starts, holds two whole ones.
        assert!(advised >= 2 * HUGE_PAGE, "{advised}");
        assert_eq!(advised % HUGE_PAGE, 0);
        assert!(buf.iter().all(|&b| b == 0), "the hint changes no content");
        assert_eq!(advise_huge_pages(buf.as_ptr(), HUGE_PAGE - 1), 0);
        assert_eq!(advise_huge_pages(std::ptr::null(), 0), 0);
    }
}
