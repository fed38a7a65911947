//! Whether the connection tables got transparent huge pages: the memory
//! of the mappings that asked for them (`MADV_HUGEPAGE`, the `hg` flag in
//! `/proc/self/smaps`: the slab, its expiry hints and the index) and how
//! much of it the kernel backs with huge pages (`AnonHugePages`). A random
//! access to a table on 4 KiB pages adds a page walk to each cache miss, so
//! a run's figures at 100k and 1M flows depend on it.

/// Memory of the process's advised mappings, in KiB (or a difference of two).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Advised {
    /// Resident memory of the mappings advised with `MADV_HUGEPAGE`.
    pub(super) rss_kib: u64,
    /// The part of it on transparent huge pages.
    pub(super) huge_kib: u64,
    /// Transparent huge pages of the whole process.
    pub(super) total_huge_kib: u64,
}

impl Advised {
    /// What was added since `before`.
    pub(super) fn since(self, before: Advised) -> Advised {
        Advised {
            rss_kib: self.rss_kib.saturating_sub(before.rss_kib),
            huge_kib: self.huge_kib.saturating_sub(before.huge_kib),
            total_huge_kib: self.total_huge_kib.saturating_sub(before.total_huge_kib),
        }
    }

    /// "X of Y MiB on huge pages".
    pub(super) fn describe(&self) -> String {
        format!(
            "{:.0} of {:.0} MiB on huge pages",
            self.huge_kib as f64 / 1024.0,
            self.rss_kib as f64 / 1024.0
        )
    }
}

/// [`Advised`] of this process now (all zero where `/proc` cannot be read).
pub(super) fn advised() -> Advised {
    std::fs::read_to_string("/proc/self/smaps")
        .map(|s| parse_smaps(&s))
        .unwrap_or_default()
}

/// [`Advised`] of a `/proc/<pid>/smaps` text.
fn parse_smaps(smaps: &str) -> Advised {
    let mut out = Advised::default();
    let (mut rss, mut huge) = (0, 0);
    for line in smaps.lines() {
        let mut words = line.split_whitespace();
        let key = words.next().unwrap_or_default();
        let kib = || words.clone().next().and_then(|v| v.parse::<u64>().ok());
        match key {
            "Rss:" => rss = kib().unwrap_or(0),
            "AnonHugePages:" => {
                huge = kib().unwrap_or(0);
                out.total_huge_kib += huge;
            }
            // The last line of a mapping's block.
            "VmFlags:" => {
                if line.split_whitespace().any(|f| f == "hg") {
                    out.rss_kib += rss;
                    out.huge_kib += huge;
                }
                (rss, huge) = (0, 0);
            }
            _ => {}
        }
    }
    out
}

/// The kernel's transparent-huge-page setting for anonymous memory
/// (`[madvise]` where MADV_HUGEPAGE is needed), and its defrag policy.
pub(super) fn settings() -> String {
    let read = |f: &str| {
        std::fs::read_to_string(format!("/sys/kernel/mm/transparent_hugepage/{f}"))
            .ok()
            .and_then(|s| {
                let s = s.trim();
                Some(s[s.find('[')? + 1..s.find(']')?].to_string())
            })
            .unwrap_or_else(|| "?".into())
    };
    format!("enabled={}, defrag={}", read("enabled"), read("defrag"))
}

/// Keeps this process's memory off transparent huge pages, whatever it
/// asks for (`PR_SET_THP_DISABLE`): the same run without them.
pub(super) fn disable() -> std::io::Result<()> {
    // SAFETY: prctl with PR_SET_THP_DISABLE takes integers only and sets
    // a flag of the calling process; no memory is passed.
    let rc = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_advised_mappings_count_as_the_tables() {
        let smaps = "\
7f0000000000-7f0040000000 rw-p 00000000 00:00 0
Size:            1048576 kB
Rss:              524288 kB
AnonHugePages:    510976 kB
VmFlags: rd wr mr mw me ac hg
7f0040000000-7f0040100000 rw-p 00000000 00:00 0
Size:               1024 kB
Rss:                1024 kB
AnonHugePages:      2048 kB
VmFlags: rd wr mr mw me ac
";
        let a = parse_smaps(smaps);
        assert_eq!(
            a,
            Advised {
                rss_kib: 524_288,
                huge_kib: 510_976,
                total_huge_kib: 513_024
            }
        );
        assert_eq!(a.since(a), Advised::default());
        assert_eq!(a.describe(), "499 of 512 MiB on huge pages");
    }

    /// Memory this process advises and touches shows in the advised
    /// mappings (on a kernel with transparent huge pages).
    #[test]
    fn memory_advised_here_is_seen() {
        if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
            return;
        }
        let before = advised();
        let mut buf = vec![0u8; 8 << 20];
        let whole = conf::os::advise_huge_pages(buf.as_ptr(), buf.len());
        for b in buf.iter_mut().step_by(4096) {
            *b = 1;
        }
        let added = advised().since(before);
        assert!(whole >= 6 << 20, "{whole}");
        assert!(
            added.rss_kib >= (whole as u64 >> 10),
            "{added:?} after advising {whole} bytes"
        );
        drop(buf);
    }
}
