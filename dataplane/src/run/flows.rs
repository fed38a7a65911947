//! The workers' flows regions at start: the previous processes' regions
//! mapped for adoption and renamed out of the way (`….g<generation>`),
//! then a new region per worker created under each name, their clock
//! words for the main loop to keep current, and, once every worker has
//! adopted, the previous regions removed (`crate::flows_region`). Until
//! then a crash leaves them for the next start, which adopts from them
//! too: a crash during adoption loses no flow.
//!
//! The carry regions (`crate::carry_region`: neighbour bindings and
//! persistence pins) go the same way, beside the flows regions: mapped,
//! renamed, a new one per worker, removed once every worker adopted.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use conf::os::files::Access;
use conf::Config;
use tracing::{info, warn};

use crate::carry_region::{carry_path, CarryClock, CarryParts, CarryRegion, PreviousCarry};
use crate::conntrack::adopt::{layout_words, slot_bytes};
use crate::conntrack::{Entry, Slab};
use crate::flows_region::{flows_path, ClockWord, FlowsRegion, PreviousFlows, Spec};
use crate::lb::{FlowMeter, FlowRec, Previous, HALT_ENV, METER_BYTES};

/// What the workers take at start.
#[derive(Clone)]
pub(super) struct FlowsStart {
    /// Worker `w`'s new region, taken by the worker.
    regions: Arc<Mutex<Vec<Option<FlowsRegion>>>>,
    /// The previous regions, until every worker has adopted from them.
    previous: Arc<Mutex<Option<Arc<PreviousFlows>>>>,
    /// Workers that have adopted.
    adopted: Arc<AtomicUsize>,
    workers: usize,
    /// The previous regions are removed (or there were none).
    sealed: Arc<AtomicBool>,
    /// Debug builds: [`HALT_ENV`].
    halt_after: Option<u64>,
    /// Kept current by the main loop.
    pub(super) clocks: Arc<Vec<ClockWord>>,
    /// Worker `w`'s new carry region, taken by the worker.
    carry: Arc<Mutex<Vec<Option<CarryRegion>>>>,
    /// The previous carry regions, until every worker has adopted.
    carry_previous: Arc<Mutex<Option<Arc<PreviousCarry>>>>,
    /// Kept current by the main loop.
    carry_clocks: Arc<Vec<CarryClock>>,
}

/// What a worker takes at start ([`FlowsStart::take`]).
pub(super) struct WorkerFlows {
    pub(super) slab: Option<Slab<Entry<FlowRec>>>,
    pub(super) meters: Option<Slab<FlowMeter>>,
    pub(super) previous: Option<Previous>,
    pub(super) carry: Option<CarryParts>,
}

/// Wall clock minus the workers' clock (TSC ms), now.
pub(super) fn clock_offset_ms(per_ms: u64) -> i64 {
    let unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    unix_ms - (dpdk_ffi::tsc_cycles() / per_ms.max(1)) as i64
}

/// The crash test's hook: a `kill -9` of this very process.
fn kill_self() {
    // SAFETY: raise with a valid signal number; SIGKILL does not return.
    unsafe { libc::raise(libc::SIGKILL) };
}

impl FlowsStart {
    /// Maps the previous regions of `cfg`'s instance, then creates this
    /// run's. A region that cannot be created leaves its worker on private
    /// memory (its flows then end with the process), logged.
    pub(super) fn prepare(cfg: &Config, access: Access, per_ms: u64) -> FlowsStart {
        let words = layout_words::<FlowRec>();
        let bytes = slot_bytes::<FlowRec>();
        let workers = cfg.dataplane.worker_lcores.len();
        let (previous, refused, generation) = PreviousFlows::take_over(
            &conf::os::region_dir(),
            &cfg.instance,
            access,
            bytes,
            &words,
        );
        for (path, why) in refused {
            warn!(region = %path.display(), "flows of the previous border-dp not adopted: {why}");
        }
        if !previous.is_empty() {
            info!(
                regions = previous.regions.len(),
                slots = previous.slots(),
                generations = ?previous
                    .regions
                    .iter()
                    .map(|r| r.generation)
                    .collect::<std::collections::BTreeSet<_>>(),
                "flows regions of the previous border-dp found"
            );
        }
        let offset = clock_offset_ms(per_ms);
        let capacity = cfg.dataplane.conntrack_per_worker as usize;
        let meter_bytes = if cfg.records.is_some() {
            METER_BYTES
        } else {
            0
        };
        let mut regions = Vec::with_capacity(workers);
        let mut clocks = Vec::new();
        for w in 0..workers {
            let path = flows_path(&cfg.instance, w);
            let spec = Spec {
                worker: w,
                workers,
                capacity,
                slot_bytes: bytes,
                words: &words,
                meter_bytes,
                generation,
            };
            match FlowsRegion::create_spec(&path, &spec, access) {
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
        let huge = conf::os::shmem_huge_pages(&conf::os::region_dir());
        info!(
            huge_pages = huge.huge,
            "flows regions on transparent huge pages: {} ({})",
            if huge.huge { "yes" } else { "no" },
            huge.why
        );
        let (carry_prev, carry_refused) =
            PreviousCarry::take_over(&conf::os::region_dir(), &cfg.instance, access);
        for (path, why) in carry_refused {
            warn!(region = %path.display(), "neighbours and pins of the previous border-dp not adopted: {why}");
        }
        let carry_generation = generation.max(carry_prev.newest_generation().map_or(1, |g| g + 1));
        let pins = crate::persist::Persist::new(crate::persist::entries_for(capacity)).capacity();
        let mut carry = Vec::with_capacity(workers);
        let mut carry_clocks = Vec::new();
        for w in 0..workers {
            let path = carry_path(&cfg.instance, w);
            match CarryRegion::create(&path, (w, workers), pins, carry_generation, access) {
                Ok(r) => {
                    let clock = r.clock();
                    clock.set(offset);
                    carry_clocks.push(clock);
                    carry.push(Some(r));
                }
                Err(e) => {
                    warn!(region = %path.display(), "carry region not created, worker {w}'s neighbours and pins will not outlive this process: {e}");
                    carry.push(None);
                }
            }
        }
        let halt_after = cfg!(debug_assertions)
            .then(|| std::env::var(HALT_ENV).ok()?.parse::<u64>().ok())
            .flatten();
        let none = previous.is_empty() && carry_prev.is_empty();
        FlowsStart {
            regions: Arc::new(Mutex::new(regions)),
            previous: Arc::new(Mutex::new((!none).then(|| Arc::new(previous)))),
            carry: Arc::new(Mutex::new(carry)),
            carry_previous: Arc::new(Mutex::new(
                (!carry_prev.is_empty()).then(|| Arc::new(carry_prev)),
            )),
            carry_clocks: Arc::new(carry_clocks),
            adopted: Arc::new(AtomicUsize::new(0)),
            workers,
            sealed: Arc::new(AtomicBool::new(none)),
            halt_after,
            clocks: Arc::new(clocks),
        }
    }

    /// Worker `w`'s slab, its meters (with `[records]`) and what it
    /// adopts (once).
    pub(super) fn take(&self, w: usize, per_ms: u64) -> WorkerFlows {
        let region = {
            let mut regions = self.regions.lock().unwrap_or_else(|e| e.into_inner());
            regions.get_mut(w).and_then(Option::take)
        };
        let previous = {
            let p = self.previous.lock().unwrap_or_else(|e| e.into_inner());
            p.clone()
        };
        let carry_previous = {
            let p = self
                .carry_previous
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            p.clone()
        };
        let carry = {
            let mut regions = self.carry.lock().unwrap_or_else(|e| e.into_inner());
            regions.get_mut(w).and_then(Option::take)
        };
        let previous = previous.map(|flows| Previous {
            flows,
            clock_offset_ms: clock_offset_ms(per_ms),
            done: Some(self.adopted.clone()),
            halt_after: self.halt_after.map(|n| (n, kill_self as fn())),
            carry: carry_previous,
        });
        let (slab, meters) = match region.map(FlowsRegion::into_parts::<Entry<FlowRec>, FlowMeter>)
        {
            Some((s, m)) => (Some(s), m),
            None => (None, None),
        };
        WorkerFlows {
            slab,
            meters,
            previous,
            carry: carry.and_then(CarryRegion::into_parts),
        }
    }

    /// Refreshes every region's clock word (the main loop), and removes
    /// the previous regions once every worker has adopted from them.
    pub(super) fn tick(&self, per_ms: u64) {
        let offset = clock_offset_ms(per_ms);
        self.clocks.iter().for_each(|c| c.set(offset));
        self.carry_clocks.iter().for_each(|c| c.set(offset));
        if !self.sealed.load(Ordering::Relaxed)
            && self.adopted.load(Ordering::Acquire) >= self.workers
        {
            self.sealed.store(true, Ordering::Relaxed);
            let previous = {
                let mut p = self.previous.lock().unwrap_or_else(|e| e.into_inner());
                p.take()
            };
            if let Some(p) = previous {
                let removed = p.remove_files();
                info!(
                    removed,
                    "every worker adopted the previous flows: their regions removed"
                );
            }
            let carried = {
                let mut p = self
                    .carry_previous
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                p.take()
            };
            if let Some(p) = carried {
                let removed = p.remove_files();
                info!(
                    removed,
                    "every worker adopted the previous neighbours and pins: their carry regions removed"
                );
            }
        }
    }
}
