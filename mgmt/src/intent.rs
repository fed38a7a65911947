//! Durable intent (docs/reliability.md): what the operator applied — the
//! running config's text, where it came from and when, and the drains and
//! weights set on backends — saved in one file under the instance's state
//! directory (default `/var/lib/border/<instance>/intent.json`), so that a
//! restart of border-mgmt, or a reboot, runs what was applied last.
//!
//! A save is two steps around the publish: [`IntentFile::stage`] writes the
//! whole new intent to a temporary file made with `O_EXCL` and fsyncs it
//! (everything that needs space or can fail on a full or read-only disk),
//! [`Staged::commit`] renames it over the old one and fsyncs the directory.
//! The rename is the commit point: before it the old intent stands whole,
//! after it the new one does. A stage that fails fails the change before
//! anything is published.

use std::fs::{DirBuilder, File};
use std::io::{Read, Write};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use conf::os::files::{self, Access, FileError};

use serde::{Deserialize, Serialize};

use conf::{Config, ConfigError, ConfigText};

use crate::store::{check_reloadable, resolve_tls_paths, BackendKey, OperatorOverride, Store};

/// The intent file's name inside the state directory.
pub const INTENT_FILE: &str = "intent.json";

/// Format of the intent file; a file of another version is refused.
const VERSION: u32 = 1;

/// The default state directory of `instance`: `/var/lib/border/<instance>`.
pub fn default_state_dir(instance: &str) -> PathBuf {
    PathBuf::from("/var/lib/border").join(instance)
}

/// Where border-mgmt kept drains and weights before durable intent
/// (tmpfs): read once, when the state directory has no intent yet, so that
/// an upgrade keeps them.
pub fn legacy_overrides_path(instance: &str) -> PathBuf {
    PathBuf::from(format!("/run/border/{instance}.overrides.json"))
}

/// The drains and weights of a legacy overrides file (`None`: no file).
fn read_legacy(path: &Path) -> Result<Option<Vec<SavedOverride>>, IntentError> {
    let Some(bytes) = read_saved(path)? else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| IntentError::Invalid {
            path: path.to_path_buf(),
            why: e.to_string(),
        })
}

/// The bytes of a file border-mgmt saved (`None`: no such file). Only a
/// regular file root or this user made and nobody else can write, never
/// through a symlink: it configures, drains and weighs (docs/security.md).
fn read_saved(path: &Path) -> Result<Option<Vec<u8>>, IntentError> {
    let read_error = |source| IntentError::Read {
        path: path.to_path_buf(),
        source,
    };
    let mut file = match files::open_trusted(path) {
        Ok(f) => f,
        Err(FileError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(FileError::Io(e)) => return Err(read_error(e)),
        Err(FileError::Untrusted(u)) => {
            return Err(IntentError::Invalid {
                path: path.to_path_buf(),
                why: format!("{}; {}", u.what, u.fix),
            })
        }
    };
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(read_error)?;
    Ok(Some(bytes))
}

/// A new file beside `path` to be renamed over it: mode 0600, `O_EXCL`
/// under an unpredictable hidden name and `O_NOFOLLOW` (a fresh file of
/// ours, never one planted under the name, never through a symlink).
fn create_temp(path: &Path) -> std::io::Result<(PathBuf, File)> {
    let tmp = files::temp_path_for(path);
    match files::create_new(&tmp, Access::PRIVATE) {
        Ok(file) => Ok((tmp, file)),
        Err(FileError::Io(e)) => Err(e),
        Err(FileError::Untrusted(u)) => Err(std::io::Error::other(u)),
    }
}

/// Whether `name` is a temporary name [`create_temp`] gives.
fn is_temp_name(name: &str) -> bool {
    name.starts_with(&format!(".{INTENT_FILE}.tmp-"))
}

/// One operator override as saved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedOverride {
    /// Which backend.
    #[serde(flatten)]
    pub key: BackendKey,
    /// What the operator set on it.
    #[serde(flatten)]
    pub value: OperatorOverride,
}

/// What the operator applied, as saved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Intent {
    /// Format version ([`VERSION`]).
    pub version: u32,
    /// Where the config came from (a file path or `<api>`).
    pub origin: String,
    /// When it was applied.
    pub applied_unix_ms: u64,
    /// The config text, as applied.
    pub config: String,
    /// Drains and weights in force.
    pub overrides: Vec<SavedOverride>,
}

impl Intent {
    /// The intent of `store`: its config and the operator's overrides
    /// (health verdicts are not intent: they are measured again).
    pub fn of(store: &Store) -> Intent {
        Intent {
            version: VERSION,
            origin: store.origin().to_string(),
            applied_unix_ms: store.applied_unix_ms(),
            config: store.text().to_string(),
            overrides: store
                .operator_overrides()
                .iter()
                .map(|(k, v)| SavedOverride {
                    key: k.clone(),
                    value: v.clone(),
                })
                .collect(),
        }
    }
}

/// Why the intent could not be read or saved. One line each.
#[derive(Debug, thiserror::Error)]
pub enum IntentError {
    /// Writing the temporary file, renaming it or syncing failed.
    #[error("cannot save the applied config and overrides to {} ({step}): {source}", path.display())]
    Save {
        /// The intent file.
        path: PathBuf,
        /// The step that failed.
        step: &'static str,
        /// The system's error.
        source: std::io::Error,
    },
    /// The file exists but cannot be read.
    #[error("cannot read the saved config and overrides {}: {source}", path.display())]
    Read {
        /// The intent file.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
    /// The file is not an intent this border-mgmt writes.
    #[error("the saved config and overrides {} are not valid: {why}", path.display())]
    Invalid {
        /// The intent file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
}

/// The intent file of one instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntentFile {
    dir: PathBuf,
    path: PathBuf,
}

impl IntentFile {
    /// The intent file in state directory `dir`.
    pub fn in_dir(dir: &Path) -> IntentFile {
        IntentFile {
            dir: dir.to_path_buf(),
            path: dir.join(INTENT_FILE),
        }
    }

    /// The intent file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The saved intent; `None` if nothing was ever saved. Temporary files
    /// a crash left behind are removed.
    pub fn load(&self) -> Result<Option<Intent>, IntentError> {
        self.remove_leftovers();
        let Some(bytes) = read_saved(&self.path)? else {
            return Ok(None);
        };
        let invalid = |why: String| IntentError::Invalid {
            path: self.path.clone(),
            why,
        };
        let intent: Intent = serde_json::from_slice(&bytes).map_err(|e| invalid(e.to_string()))?;
        if intent.version != VERSION {
            return Err(invalid(format!(
                "format version {} (this border-mgmt reads version {VERSION})",
                intent.version
            )));
        }
        Ok(Some(intent))
    }

    /// Writes `intent` to a new temporary file next to the intent file and
    /// syncs it to disk; [`Staged::commit`] makes it the intent. Dropping
    /// the [`Staged`] removes the temporary file and changes nothing.
    pub fn stage(&self, intent: &Intent) -> Result<Staged, IntentError> {
        let fail = |step| {
            let path = self.path.clone();
            move |source| IntentError::Save { path, step, source }
        };
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(fail("creating its directory"))?;
        let json = serde_json::to_vec_pretty(intent).map_err(std::io::Error::other);
        let (tmp, mut file) = create_temp(&self.path).map_err(fail("creating a temporary file"))?;
        // From here on the temporary file is ours: removed on any failure.
        let staged = Staged {
            tmp,
            dest: self.path.clone(),
            dir: self.dir.clone(),
            committed: false,
        };
        json.and_then(|j| file.write_all(&j))
            .and_then(|()| file.sync_all())
            .map_err(fail("writing a temporary file"))?;
        Ok(staged)
    }

    fn remove_leftovers(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for e in entries.flatten() {
            if is_temp_name(&e.file_name().to_string_lossy()) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// A new intent on disk under a temporary name, not yet in force.
#[derive(Debug)]
pub struct Staged {
    tmp: PathBuf,
    dest: PathBuf,
    dir: PathBuf,
    committed: bool,
}

impl Staged {
    /// Renames the temporary file over the intent file and syncs the
    /// directory: the new intent is the one a restart runs. Fails only if
    /// the rename does (then the old intent stands).
    pub fn commit(mut self) -> Result<(), IntentError> {
        std::fs::rename(&self.tmp, &self.dest).map_err(|source| IntentError::Save {
            path: self.dest.clone(),
            step: "renaming the temporary file",
            source,
        })?;
        self.committed = true;
        // The new intent is in force from the rename on: a directory that
        // cannot be synced is worth a warning, not a change taken back
        // while the new file stands.
        if let Err(e) = File::open(&self.dir).and_then(|d| d.sync_all()) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "cannot sync the state directory: the saved intent may not survive a power loss");
        }
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// The config border-mgmt starts with and where it came from.
#[derive(Debug)]
pub struct Start {
    /// The running store: config and operator overrides.
    pub store: Store,
    /// The intent file it was restored from (`None`: from `--config`).
    pub restored_from: Option<PathBuf>,
}

/// Why border-mgmt cannot start from its saved intent. One line each.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Unreadable or invalid intent file.
    #[error("{0} (--from-config-file starts from --config instead)")]
    Intent(#[from] IntentError),
    /// What runs cannot be saved: no change could be either.
    #[error("{0} (--state-dir chooses another directory)")]
    Save(IntentError),
    /// The saved config no longer validates.
    #[error("the saved config in {} is not valid: {error} (--from-config-file starts from --config instead)", path.display())]
    Config {
        /// The intent file.
        path: PathBuf,
        /// The validation error.
        error: ConfigError,
    },
    /// The file changed what only a restart changes: which wins is the
    /// operator's call.
    #[error("the last applied config ({origin}, saved in {}) differs from --config in {section}, which the dataplane reads from --config: start with --from-config-file to run --config (drains and weights stay), or first copy the applied [[vip]]s (its `config` text) into --config", path.display())]
    Differs {
        /// Where the saved config came from.
        origin: String,
        /// The intent file.
        path: PathBuf,
        /// The first section that differs.
        section: &'static str,
    },
}

/// Chooses what runs at start: the saved intent if there is one (a
/// restart never undoes an operator's change), `file` (`--config`) if
/// nothing was saved or `from_file` says so; saved drains and weights of
/// backends still configured stay either way. With nothing saved, those of
/// the `legacy` overrides file are taken (and the file removed once saved).
/// `tls_dir` resolves relative TLS paths of a saved config, as ApplyConfig
/// did. The choice is saved before anything runs.
pub fn start(
    intent: &IntentFile,
    file: (Config, String, String),
    from_file: bool,
    tls_dir: Option<&Path>,
    legacy: Option<&Path>,
) -> Result<Start, StartError> {
    let (file_cfg, file_text, file_origin) = file;
    let saved = intent.load()?;
    let legacy = match (&saved, legacy) {
        (None, Some(p)) => read_legacy(p)?.map(|o| (p, o)),
        _ => None,
    };
    let mut restored_from = None;
    let mut store = match &saved {
        Some(s) if !from_file => {
            let mut cfg = ConfigText::parse(&s.config, &s.origin)
                .map_err(|error| StartError::Config {
                    path: intent.path().to_path_buf(),
                    error,
                })?
                .shared_config();
            resolve_tls_paths(std::sync::Arc::make_mut(&mut cfg), tls_dir);
            if let Err(section) = check_reloadable(&file_cfg, &cfg) {
                return Err(StartError::Differs {
                    origin: s.origin.clone(),
                    path: intent.path().to_path_buf(),
                    section,
                });
            }
            restored_from = Some(intent.path().to_path_buf());
            let mut store = Store::new(cfg, s.config.as_str(), s.origin.clone());
            store.set_applied_unix_ms(s.applied_unix_ms);
            store
        }
        _ => Store::new(file_cfg, file_text, file_origin),
    };
    let overrides = match (saved, &legacy) {
        (Some(s), _) => Some(s.overrides),
        (None, Some((p, o))) => {
            tracing::info!(path = %p.display(), count = o.len(), "operator overrides taken from the file of an older border-mgmt");
            Some(o.clone())
        }
        (None, None) => None,
    };
    if let Some(o) = overrides {
        let gone = store.restore_overrides(o.into_iter().map(|o| (o.key, o.value)));
        for k in gone {
            tracing::info!(vip = %k.vip, backend = %k.backend, "saved operator override dropped: the backend is not configured");
        }
    }
    intent
        .stage(&Intent::of(&store))
        .and_then(Staged::commit)
        .map_err(StartError::Save)?;
    if let Some((p, _)) = legacy {
        let _ = std::fs::remove_file(p);
    }
    Ok(Start {
        store,
        restored_from,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("border-intent-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn intent(origin: &str) -> Intent {
        Intent {
            version: VERSION,
            origin: origin.into(),
            applied_unix_ms: 42,
            config: "instance = \"t\"\n".into(),
            overrides: vec![SavedOverride {
                key: BackendKey::new("web", "10.0.1.1:8080".parse().unwrap()),
                value: OperatorOverride {
                    drained: true,
                    ..Default::default()
                },
            }],
        }
    }

    #[test]
    fn a_committed_stage_is_what_loads_and_a_dropped_one_changes_nothing() {
        let d = tmpdir("commit");
        let f = IntentFile::in_dir(&d.join("inst"));
        assert_eq!(f.load().unwrap(), None);
        f.stage(&intent("a")).unwrap().commit().unwrap();
        assert_eq!(f.load().unwrap(), Some(intent("a")));
        drop(f.stage(&intent("b")).unwrap());
        assert_eq!(f.load().unwrap(), Some(intent("a")));
        let names: Vec<_> = std::fs::read_dir(d.join("inst"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [INTENT_FILE], "no temporary file left");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(f.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn leftovers_of_a_crash_go_and_a_bad_file_is_named() {
        let d = tmpdir("bad");
        std::fs::create_dir_all(&d).unwrap();
        let f = IntentFile::in_dir(&d);
        let (left, _) = create_temp(f.path()).unwrap();
        std::fs::write(f.path(), "{\"version\": 1").unwrap();
        let e = f.load().unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "the saved config and overrides {} are not valid: ",
                f.path().display()
            )),
            "{e}"
        );
        assert!(!left.exists());
        let mut other = intent("a");
        other.version = 9;
        std::fs::write(f.path(), serde_json::to_vec(&other).unwrap()).unwrap();
        let e = f.load().unwrap_err().to_string();
        assert!(
            e.ends_with("format version 9 (this border-mgmt reads version 1)"),
            "{e}"
        );
        // One another user could have written is not read at all.
        f.stage(&intent("a")).unwrap().commit().unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(f.path(), std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = f.load().unwrap_err().to_string();
        assert!(e.contains("with mode 0666: not a file border made"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    fn file(text: &str) -> (Config, String, String) {
        let cfg = Config::from_toml_str(text, "b.toml").unwrap();
        (cfg, text.to_string(), "b.toml".into())
    }

    #[test]
    fn a_saved_config_that_no_longer_fits_the_file_stops_the_start() {
        use crate::store::tests::CFG;
        let d = tmpdir("start");
        let f = IntentFile::in_dir(&d);
        let first = start(&f, file(CFG), false, None, None).unwrap();
        assert_eq!(
            (first.store.origin(), first.restored_from),
            ("b.toml", None)
        );
        let again = start(&f, file(CFG), false, None, None).unwrap();
        assert_eq!(again.restored_from.as_deref(), Some(f.path()));

        let edited = CFG.replace("worker_lcores = [1]", "worker_lcores = [1, 2]");
        let e = start(&f, file(&edited), false, None, None)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            format!("the last applied config (b.toml, saved in {}) differs from --config in [dataplane], which the dataplane reads from --config: start with --from-config-file to run --config (drains and weights stay), or first copy the applied [[vip]]s (its `config` text) into --config", f.path().display())
        );
        let s = start(&f, file(&edited), true, None, None).unwrap();
        assert_eq!(s.store.config().dataplane.worker_lcores, [1, 2]);

        let mut broken = f.load().unwrap().unwrap();
        broken.config.push_str("\nbogus = 1\n");
        f.stage(&broken).unwrap().commit().unwrap();
        let e = start(&f, file(&edited), false, None, None)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!(
                "the saved config in {} is not valid: b.toml:",
                f.path().display()
            )),
            "{e}"
        );
        assert!(
            e.ends_with("(--from-config-file starts from --config instead)"),
            "{e}"
        );

        // A state directory that cannot take the save (immutable: even
        // root cannot create in it): no start.
        let chattr = |flag: &str| {
            let st = std::process::Command::new("chattr")
                .args([flag, d.to_str().unwrap()])
                .status()
                .unwrap();
            assert!(st.success(), "chattr {flag}");
        };
        chattr("+i");
        let e = start(&f, file(CFG), true, None, None).map(|_| ());
        chattr("-i");
        assert_eq!(
            e.unwrap_err().to_string(),
            format!("cannot save the applied config and overrides to {} (creating a temporary file): Operation not permitted (os error 1) (--state-dir chooses another directory)", f.path().display())
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn drains_of_an_older_border_mgmt_are_taken_once() {
        use crate::store::tests::CFG;
        let d = tmpdir("legacy");
        std::fs::create_dir_all(&d).unwrap();
        let f = IntentFile::in_dir(&d.join("state"));
        let legacy = d.join("t.overrides.json");
        let old = r#"[{"vip": "web", "backend": "10.0.1.2:8080", "drained": true, "note": "old"},
                      {"vip": "gone", "backend": "10.9.9.9:1", "weight": 3}]"#;
        std::fs::write(&legacy, old).unwrap();
        let s = start(&f, file(CFG), false, None, Some(&legacy)).unwrap();
        let k = BackendKey::new("web", "10.0.1.2:8080".parse().unwrap());
        assert!(s.store.operator_overrides()[&k].drained);
        assert_eq!(s.store.operator_overrides().len(), 1);
        assert!(!legacy.exists(), "taken once");
        assert_eq!(f.load().unwrap().unwrap().overrides.len(), 1);
        // With an intent saved, a legacy file is not read.
        std::fs::write(&legacy, "not json").unwrap();
        let s = start(&f, file(CFG), false, None, Some(&legacy)).unwrap();
        assert_eq!(s.store.operator_overrides().len(), 1);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
