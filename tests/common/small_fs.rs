//! A small tmpfs mounted for one test, to fill up or make read-only.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use super::run;

/// A tmpfs mounted for one test at a path of its own; unmounted on drop.
pub struct SmallFs {
    pub path: PathBuf,
}

impl SmallFs {
    /// Mounts a tmpfs of `size` (mode 0700) at `border-e2e-<tag>-fs` in
    /// the temp dir, over whatever an earlier run left mounted there.
    pub fn mount(tag: &str, size: &str) -> SmallFs {
        let path = std::env::temp_dir().join(format!("border-e2e-{tag}-fs"));
        let _ = Command::new("umount")
            .arg(&path)
            .stderr(Stdio::null())
            .status();
        std::fs::create_dir_all(&path).unwrap();
        let opts = format!("size={size},mode=0700");
        run(&[
            "mount",
            "-t",
            "tmpfs",
            "-o",
            &opts,
            "tmpfs",
            path.to_str().unwrap(),
        ]);
        SmallFs { path }
    }

    /// Writes a filler file until the file system is full.
    pub fn fill(&self) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.path.join("filler")).unwrap();
        let chunk = [1u8; 65536];
        while f.write_all(&chunk).is_ok() {}
        let small = [1u8; 512];
        while f.write_all(&small).is_ok() {}
        let _ = f.sync_all();
    }

    /// Removes the filler file.
    pub fn free(&self) {
        std::fs::remove_file(self.path.join("filler")).unwrap();
    }

    /// Remounts with `mode` (`ro` or `rw`).
    pub fn remount(&self, mode: &str) {
        let opts = format!("remount,{mode}");
        run(&["mount", "-o", &opts, self.path.to_str().unwrap()]);
    }

    /// The names in the file system's root, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut n: Vec<String> = std::fs::read_dir(&self.path)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        n.sort();
        n
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.path).status();
        let _ = std::fs::remove_dir(&self.path);
    }
}
