//! The publisher: the only writer of the tables region (docs/design.md §3). Builds a
//! generation from the store, writes only what changed, and publishes it with
//! the quiescent generations of the live workers (QSBR), so a block is reused
//! only after every live worker has passed the generation that retired it.
//!
//! * Start: [`Publisher::open`] re-attaches to an existing region (a restart
//!   keeps the published generation and never disturbs a flow), or creates
//!   one sized from the config with generous headroom.
//! * A generation equal to the published one is not published again.
//! * [`TablesError::ArenaFull`] (retired blocks still held by a worker) is
//!   not fatal: the caller keeps the config and retries later.
//! * A config that no longer fits the arena gets a new, larger region (the
//!   dataplane follows the replaced file); generations then restart at 1.

use std::path::{Path, PathBuf};

use conf::tables::{
    BuildStats, Generation, GenerationBuilder, PublishStats, TablesError, TablesReader,
    TablesWriter, HEADER_LEN, MAX_REGION_LEN, UNIT,
};
use conf::Config;

use crate::model::DpSnap;
use crate::store::Store;

/// Smallest arena border-mgmt creates.
pub const MIN_ARENA: u64 = 64 << 20;
/// Generations of the current config the arena holds at creation.
pub const HEADROOM: u64 = 8;

fn round_up(v: u64, unit: u64) -> u64 {
    v.div_ceil(unit) * unit
}

/// Bytes one full generation of `cfg` takes in the arena (every VIP block
/// plus the root), with slack for alignment.
pub fn generation_bytes(cfg: &Config) -> u64 {
    let root = round_up(64 + 32 * cfg.vips.len() as u64, UNIT);
    let vips: u64 = cfg
        .vips
        .iter()
        .map(|v| {
            round_up(
                96 + round_up(v.name.len() as u64, 8)
                    + 32 * v.backends.len() as u64
                    + 4 * u64::from(v.maglev_table_size)
                    + 64,
                UNIT,
            )
        })
        .sum();
    root + vips
}

/// Arena bytes for a new region holding `cfg`: [`HEADROOM`] generations, at
/// least [`MIN_ARENA`] (a sparse file: untouched pages cost nothing).
pub fn arena_for(cfg: &Config) -> u64 {
    generation_bytes(cfg)
        .saturating_mul(HEADROOM)
        .clamp(MIN_ARENA, MAX_REGION_LEN - HEADER_LEN)
}

/// How [`Publisher::open`] found the region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opened {
    /// Re-attached; this generation is published (0: none yet).
    Attached {
        /// The published generation.
        generation: u64,
    },
    /// Created a new region (none existed, or the old one was unusable).
    Created {
        /// Arena bytes.
        arena: u64,
        /// Why the old one was replaced, if one existed.
        replaced: Option<String>,
    },
}

/// Workers that may still read an older region after this publisher created
/// a new one: their applied generations mean nothing here until they change.
#[derive(Debug, Clone)]
struct FreshRegion {
    pid: u32,
    applied: Vec<u64>,
}

/// The tables region's only writer.
#[derive(Debug)]
pub struct Publisher {
    path: PathBuf,
    writer: Option<TablesWriter>,
    builder: GenerationBuilder,
    published: Option<Generation>,
    fresh: Option<FreshRegion>,
}

/// Why a publish did not happen.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// From the tables layer.
    #[error("{0}")]
    Tables(#[from] TablesError),
    /// The config needs a larger region and none could be made (a full
    /// `/dev/shm` is the usual cause); the old region stays, unchanged.
    #[error("the config needs a larger tables region ({new_arena} bytes of arena; the current one has {old_arena}) and it could not be made: {source}; border-dp goes on with the last tables")]
    Grow {
        /// The current region's arena.
        old_arena: u64,
        /// The arena the config needs.
        new_arena: u64,
        /// Why the new region could not be made.
        source: TablesError,
    },
}

impl PublishError {
    /// Worth retrying later (readers hold the space).
    pub fn is_retryable(&self) -> bool {
        matches!(self, PublishError::Tables(TablesError::ArenaFull { .. }))
    }

    /// No room: the region's filesystem is full, or the config is larger
    /// than a region can be (the caller's gRPC status: RESOURCE_EXHAUSTED).
    pub fn is_out_of_space(&self) -> bool {
        let tables = match self {
            PublishError::Tables(t) => t,
            PublishError::Grow { source, .. } => source,
        };
        match tables {
            TablesError::Io { source, .. } => {
                matches!(
                    source.raw_os_error(),
                    Some(libc::ENOSPC | libc::EFBIG | libc::ENOMEM)
                )
            }
            TablesError::TooLarge { .. } => true,
            _ => false,
        }
    }
}

impl Publisher {
    /// Attaches to the region at `path` if it exists, else creates one sized
    /// for `cfg`. A region that is not a usable tables region (garbage, another
    /// layout version, a corrupt live generation) is replaced by a new one.
    /// Refused with [`TablesError::Busy`] while another publisher (a
    /// `border-dp --standalone`, another border-mgmt) holds it.
    pub fn open(
        path: &Path,
        cfg: &Config,
        dp: &DpSnap,
    ) -> Result<(Publisher, Opened), TablesError> {
        let mut p = Publisher {
            path: path.to_owned(),
            writer: None,
            builder: GenerationBuilder::new(),
            published: None,
            fresh: None,
        };
        let replaced = match TablesWriter::attach(path) {
            Ok(w) => {
                let generation = w.published_generation();
                if generation > 0 {
                    let r = TablesReader::open(path)?;
                    let view = r.view_current()?;
                    p.published = Some(view.to_generation());
                }
                p.writer = Some(w);
                return Ok((p, Opened::Attached { generation }));
            }
            Err(TablesError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                None
            }
            Err(e @ TablesError::Busy { .. }) => return Err(e),
            // Not a file border made (a symlink, another user's file, a
            // mode open to others): neither used nor silently replaced.
            Err(e @ TablesError::Untrusted(_)) => return Err(e),
            Err(e @ TablesError::Io { .. }) => return Err(e),
            Err(e) => Some(e.to_string()),
        };
        let arena = arena_for(cfg);
        p.writer = Some(TablesWriter::create(path, arena)?);
        p.guard_fresh(dp);
        Ok((p, Opened::Created { arena, replaced }))
    }

    fn guard_fresh(&mut self, dp: &DpSnap) {
        self.fresh = dp.has_readers().then(|| FreshRegion {
            pid: dp.pid,
            applied: dp.workers.iter().map(|w| w.applied_generation).collect(),
        });
    }

    /// Path of the region.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The published generation (0: none).
    pub fn published_generation(&self) -> u64 {
        self.writer
            .as_ref()
            .map_or(0, TablesWriter::published_generation)
    }

    /// The generation published now, as a model value.
    pub fn published(&self) -> Option<&Generation> {
        self.published.as_ref()
    }

    /// Arena bytes and free bytes.
    pub fn arena(&self) -> (u64, u64) {
        self.writer
            .as_ref()
            .map_or((0, 0), |w| (w.arena_len(), w.arena_free()))
    }

    /// The quiescent generations to pass to a publish: the applied generation
    /// of every live worker; none when no dataplane process may be reading.
    /// Right after this publisher created a region, a worker whose value has
    /// not changed since may still be on the old region: it counts as 0
    /// (holds everything) until it moves.
    pub fn quiescent(&mut self, dp: &DpSnap) -> Vec<u64> {
        if !dp.has_readers() {
            // Any later dataplane opens the current region afresh.
            self.fresh = None;
            return Vec::new();
        }
        let mut q = Vec::with_capacity(dp.workers.len());
        let mut all_moved = true;
        for (i, w) in dp.workers.iter().enumerate() {
            let stale = self.fresh.as_ref().is_some_and(|f| {
                f.pid == dp.pid && f.applied.get(i) == Some(&w.applied_generation)
            });
            all_moved &= !stale;
            if !w.alive {
                continue;
            }
            q.push(if stale { 0 } else { w.applied_generation });
        }
        if all_moved {
            self.fresh = None;
        }
        q
    }

    /// Builds the generation `store` describes (Maglev per VIP; unchanged
    /// VIPs are reused, not rebuilt), looking at every VIP.
    pub fn build(&mut self, store: &Store) -> Result<Generation, TablesError> {
        self.builder
            .build(store.config(), &|vi, bi| store.overrides(vi, bi))
    }

    /// Builds the generation `store` describes when only the VIPs at the
    /// positions `changed` can differ from the last build (their config
    /// entry or the overrides of their backends): those are looked at,
    /// every other VIP is the last build's, untouched
    /// ([`GenerationBuilder::build_changed`]). A one-backend change thus
    /// costs one VIP however many there are.
    pub fn build_changed(
        &mut self,
        store: &Store,
        changed: &[usize],
    ) -> Result<Generation, TablesError> {
        self.builder
            .build_changed(store.config(), &|vi, bi| store.overrides(vi, bi), changed)
    }

    /// What the last build did.
    pub fn last_build(&self) -> BuildStats {
        self.builder.last_build()
    }

    /// The last build was not kept (its change was taken back): the next
    /// [`Publisher::build_changed`] looks at every VIP again.
    pub fn invalidate(&mut self) {
        self.builder.invalidate();
    }

    /// Publishes `gen` unless it equals the published generation (`Ok(None)`).
    /// A config much larger than the arena first gets a new region.
    pub fn publish(
        &mut self,
        cfg: &Config,
        gen: Generation,
        dp: &DpSnap,
    ) -> Result<Option<PublishStats>, PublishError> {
        if self.published.as_ref() == Some(&gen) {
            return Ok(None);
        }
        if self.writer.is_none() {
            self.writer = Some(TablesWriter::attach(&self.path)?);
        }
        let need = generation_bytes(cfg).saturating_mul(3);
        let arena = self.arena().0;
        if need > arena && arena < MAX_REGION_LEN - HEADER_LEN {
            self.grow(cfg, dp).map_err(|source| PublishError::Grow {
                old_arena: arena,
                new_arena: arena_for(cfg),
                source,
            })?;
        }
        let q = self.quiescent(dp);
        let w = self.writer.as_mut().expect("writer present");
        let stats = w.publish(&gen, &q)?;
        self.published = Some(gen);
        Ok(Some(stats))
    }

    fn grow(&mut self, cfg: &Config, dp: &DpSnap) -> Result<(), TablesError> {
        let arena = arena_for(cfg);
        tracing::warn!(
            path = %self.path.display(),
            old_arena = self.arena().0,
            new_arena = arena,
            "the config no longer fits the tables arena: creating a larger region (generations restart at 1; border-dp follows the new file)"
        );
        // Our own lock on the old file would refuse the create.
        self.writer = None;
        match TablesWriter::create(&self.path, arena) {
            Ok(w) => {
                self.writer = Some(w);
                self.published = None;
                self.guard_fresh(dp);
                Ok(())
            }
            Err(e) => {
                self.writer = TablesWriter::attach(&self.path).ok();
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::WorkerSnap;
    use crate::store::tests::CFG;
    use crate::store::{BackendAction, BackendKey};
    use conf::tables::BackendState;
    use std::os::unix::fs::PermissionsExt;

    fn tmp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("border-mgmt-pub-{}-{name}", std::process::id()))
    }

    fn store() -> Store {
        let cfg = Config::from_toml_str(CFG, "t").unwrap();
        Store::new(cfg, CFG, "t".into())
    }

    fn reader_view(path: &Path) -> Generation {
        TablesReader::open(path)
            .unwrap()
            .view_current()
            .unwrap()
            .to_generation()
    }

    fn live_worker(applied: u64) -> DpSnap {
        DpSnap {
            present: true,
            pid: std::process::id(),
            pid_alive: true,
            run_state: Some(conf::state::RunState::Running),
            workers: vec![WorkerSnap {
                lcore: 1,
                applied_generation: applied,
                heartbeat: 1,
                alive: true,
                heartbeat_age: std::time::Duration::ZERO,
            }],
            ..DpSnap::default()
        }
    }

    #[test]
    fn create_publish_attach_keeps_the_generation() {
        let path = tmp("attach");
        let _ = std::fs::remove_file(&path);
        let mut s = store();
        let none = DpSnap::default();
        let (mut p, opened) = Publisher::open(&path, s.config(), &none).unwrap();
        assert!(matches!(opened, Opened::Created { replaced: None, .. }));
        let g = p.build(&s).unwrap();
        let stats = p.publish(s.config(), g.clone(), &none).unwrap().unwrap();
        assert_eq!(stats.generation, 1);
        assert_eq!(reader_view(&path), g);
        assert_eq!(
            g,
            conf::tables::build_generation(s.config(), &conf::tables::no_overrides).unwrap()
        );
        // The same generation again: nothing published.
        let g = p.build(&s).unwrap();
        assert!(p.publish(s.config(), g, &none).unwrap().is_none());

        // A second publisher is refused while the first holds the region.
        let e = Publisher::open(&path, s.config(), &none).unwrap_err();
        assert!(matches!(e, TablesError::Busy { .. }), "{e}");

        // Drain: out of the ring in the next generation.
        let key = BackendKey::new("web", "10.0.1.2:8080".parse().unwrap());
        s.set_backend(&key, BackendAction::Drain, "").unwrap();
        let g = p.build(&s).unwrap();
        assert_eq!(
            p.publish(s.config(), g, &none).unwrap().unwrap().generation,
            2
        );
        let view = reader_view(&path);
        let vip = &view.vips[0];
        assert_eq!(vip.backends[1].state, BackendState::Draining);
        assert!(vip.ring.iter().all(|&i| i == 0));
        drop(p);

        // A restart re-attaches: same generation, nothing new to publish.
        let (mut p, opened) = Publisher::open(&path, s.config(), &none).unwrap();
        assert_eq!(opened, Opened::Attached { generation: 2 });
        let g = p.build(&s).unwrap();
        assert!(p.publish(s.config(), g, &none).unwrap().is_none());
        assert_eq!(p.published_generation(), 2);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn garbage_region_is_replaced() {
        let path = tmp("garbage");
        std::fs::write(&path, vec![0x5a; 8192]).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let s = store();
        let (_p, opened) = Publisher::open(&path, s.config(), &DpSnap::default()).unwrap();
        match opened {
            Opened::Created {
                replaced: Some(why),
                ..
            } => assert!(why.contains("magic"), "{why}"),
            o => panic!("{o:?}"),
        }
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_region_open_to_others_is_refused_naming_the_fix() {
        let path = tmp("open");
        std::fs::write(&path, vec![0x5a; 8192]).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = Publisher::open(&path, store().config(), &DpSnap::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&path.display().to_string()) && e.contains("mode 0644") && e.contains("rm "),
            "{e}"
        );
        assert_eq!(
            std::fs::read(&path).unwrap(),
            vec![0x5a; 8192],
            "left as it was"
        );
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn fresh_region_holds_workers_that_have_not_moved() {
        let path = tmp("fresh");
        let _ = std::fs::remove_file(&path);
        let s = store();
        // A dataplane whose worker reports 57 from some older region.
        let dp = live_worker(57);
        let (mut p, _) = Publisher::open(&path, s.config(), &dp).unwrap();
        assert_eq!(p.quiescent(&dp), vec![0], "57 means nothing here");
        let moved = live_worker(1);
        assert_eq!(p.quiescent(&moved), vec![1]);
        assert_eq!(p.quiescent(&dp), vec![57], "guard cleared once it moved");
        let mut stalled = live_worker(3);
        stalled.workers[0].alive = false;
        assert!(
            p.quiescent(&stalled).is_empty(),
            "a stalled worker is left out"
        );
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn no_room_for_a_region_is_out_of_space_and_not_retried() {
        let enospc = || TablesError::Io {
            path: "/dev/shm/border-x-tables".into(),
            source: std::io::Error::from_raw_os_error(libc::ENOSPC),
        };
        let grow = PublishError::Grow {
            old_arena: 64 << 20,
            new_arena: 192 << 20,
            source: enospc(),
        };
        assert!(grow.is_out_of_space() && !grow.is_retryable());
        assert_eq!(
            grow.to_string(),
            "the config needs a larger tables region (201326592 bytes of arena; the current one has 67108864) and it could not be made: tables region /dev/shm/border-x-tables: No space left on device (os error 28); border-dp goes on with the last tables"
        );
        assert!(PublishError::Tables(enospc()).is_out_of_space());
        let denied = PublishError::Tables(TablesError::Io {
            path: "/x".into(),
            source: std::io::Error::from_raw_os_error(libc::EACCES),
        });
        assert!(!denied.is_out_of_space());
    }

    #[test]
    fn arena_full_is_retryable_and_clears_when_readers_pass() {
        let path = tmp("full");
        let _ = std::fs::remove_file(&path);
        let mut s = store();
        let (mut p, _) = Publisher::open(&path, s.config(), &DpSnap::default()).unwrap();
        // Replace the writer by one with a tiny arena: room for about two
        // generations of this config.
        drop(p.writer.take());
        std::fs::remove_file(&path).unwrap();
        let one = generation_bytes(s.config());
        p.writer = Some(TablesWriter::create(&path, one * 2 + 128).unwrap());
        p.published = None;
        let key = BackendKey::new("web", "10.0.1.2:8080".parse().unwrap());
        // The worker never passes generation 1.
        let stuck = live_worker(1);
        let mut results = Vec::new();
        for i in 0..4u32 {
            s.set_backend(&key, BackendAction::Weight(i + 2), "")
                .unwrap();
            let g = p.build(&s).unwrap();
            // Bypass growing: the arena is small on purpose.
            let q = p.quiescent(&stuck);
            results.push(p.writer.as_mut().unwrap().publish(&g, &q).map(|_| ()));
        }
        let err = results
            .into_iter()
            .find_map(Result::err)
            .expect("the arena fills up");
        let err = PublishError::from(err);
        assert!(err.is_retryable(), "{err}");
        // Once the worker passes every generation, the retry goes through.
        let g = p.build(&s).unwrap();
        let gen = p.published_generation();
        let q = p.quiescent(&live_worker(gen));
        p.writer.as_mut().unwrap().publish(&g, &q).unwrap();
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn sizing_has_headroom() {
        let s = store();
        assert!(generation_bytes(s.config()) >= 4 * 1009);
        assert_eq!(arena_for(s.config()), MIN_ARENA);
    }
}
