//! The workers' flows regions at start: the previous process's regions
//! mapped for adoption, then a new region per worker created over each
//! name (the old files stay mapped until adopted), and their clock words
//! for the main loop to keep current (`crate::flows_region`).

use std::sync::{Arc, Mutex};

use conf::os::files::Access;
use conf::Config;
use tracing::{info, warn};

use crate::conntrack::adopt::{layout_words, slot_bytes};
use crate::conntrack::{Entry, Slab};
use crate::flows_region::{flows_path, ClockWord, FlowsRegion, PreviousFlows};
use crate::lb::{FlowRec, Previous};

/// Regions a start looks for beyond its own workers' (a previous run with
/// more workers).
const MAX_PREVIOUS_REGIONS: usize = conf::config::MAX_LCORE as usize;

/// What the workers take at start.
#[derive(Clone)]
pub(super) struct FlowsStart {
    /// Worker `w`'s new region, taken by the worker.
    regions: Arc<Mutex<Vec<Option<FlowsRegion>>>>,
    previous: Arc<PreviousFlows>,
    /// Kept current by the main loop.
    pub(super) clocks: Arc<Vec<ClockWord>>,
}

/// Wall clock minus the workers' clock (TSC ms), now.
pub(super) fn clock_offset_ms(per_ms: u64) -> i64 {
    let unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    unix_ms - (dpdk_ffi::tsc_cycles() / per_ms.max(1)) as i64
}

impl FlowsStart {
    /// Maps the previous regions of `cfg`'s instance, then creates this
    /// run's. A region that cannot be created leaves its worker on private
    /// memory (its flows then end with the process), logged.
    pub(super) fn prepare(cfg: &Config, access: Access, per_ms: u64) -> FlowsStart {
        let words = layout_words::<FlowRec>();
        let bytes = slot_bytes::<FlowRec>();
        let workers = cfg.dataplane.worker_lcores.len();
        let (previous, refused) =
            PreviousFlows::open(&cfg.instance, access, bytes, &words, MAX_PREVIOUS_REGIONS);
        for (path, why) in refused {
            warn!(region = %path.display(), "flows of the previous border-dp not adopted: {why}");
        }
        if !previous.is_empty() {
            info!(
                regions = previous.regions.len(),
                slots = previous.slots(),
                "flows regions of the previous border-dp found"
            );
        }
        // Regions of workers this run does not have: mapped above, their
        // names are not reused.
        for r in previous.regions.iter().filter(|r| r.worker >= workers) {
            let _ = std::fs::remove_file(&r.path);
        }
        let offset = clock_offset_ms(per_ms);
        let capacity = cfg.dataplane.conntrack_per_worker as usize;
        let mut regions = Vec::with_capacity(workers);
        let mut clocks = Vec::new();
        for w in 0..workers {
            let path = flows_path(&cfg.instance, w);
            match FlowsRegion::create(&path, (w, workers), capacity, (bytes, &words), access) {
                Ok(r) => {
                    let clock = r.clock_word();
                    clock.set(offset);
                    clocks.push(clock);
                    regions.push(Some(r));
                }
                Err(e) => {
                    warn!(region = %path.display(), "flows region not created, worker {w}'s flows will not outlive this process: {e}");
                    regions.push(None);
                }
            }
        }
        FlowsStart {
            regions: Arc::new(Mutex::new(regions)),
            previous: Arc::new(previous),
            clocks: Arc::new(clocks),
        }
    }

    /// Worker `w`'s slab and what it adopts (once).
    pub(super) fn take(
        &self,
        w: usize,
        per_ms: u64,
    ) -> (Option<Slab<Entry<FlowRec>>>, Option<Previous>) {
        let region = {
            let mut regions = self.regions.lock().unwrap_or_else(|e| e.into_inner());
            regions.get_mut(w).and_then(Option::take)
        };
        let previous = (!self.previous.is_empty()).then(|| Previous {
            flows: self.previous.clone(),
            clock_offset_ms: clock_offset_ms(per_ms),
        });
        (region.map(FlowsRegion::into_slab), previous)
    }

    /// Refreshes every region's clock word (the main loop).
    pub(super) fn tick(&self, per_ms: u64) {
        let offset = clock_offset_ms(per_ms);
        self.clocks.iter().for_each(|c| c.set(offset));
    }
}
