//! The main thread while the workers run: tables, SIGHUP reloads, the
//! port statistics, the records clock and the test triggers, until a stop
//! signal or a dead worker.

use std::sync::atomic::Ordering;
use std::time::Instant;

use conf::records::RecordsRegion;
use conf::state::StateRegion;
use conf::Config;
use dpdk_ffi::{Mbuf, Mempool, Port};
use tracing::{error, warn};

use super::follow::TablesFollow;
use super::publish::{reload_config, Publisher};
use super::readiness::Readiness;
use super::signals::Signals;
use super::workers::Crew;
use super::RunOptions;
use crate::port_stats::{read_port, PortStatsCopier};
use crate::worker::Handoff;

/// The test trigger of an empty mbuf pool ([`crate::fault`]): the main
/// thread turns it on (each worker then takes every mbuf it can get, its
/// lcore's cache included), turns it off after the time asked, and logs
/// what the ports counted meanwhile (`rx_nombuf`: frames a port had no
/// mbuf for). Inert unless the trigger fires (never in a release build).
pub(super) struct PoolHold<'a> {
    pool: &'a Mempool,
    ports: &'a [Port],
    until: Option<Instant>,
    nombuf_before: u64,
}

impl<'a> PoolHold<'a> {
    pub(super) fn new(pool: &'a Mempool, ports: &'a [Port]) -> PoolHold<'a> {
        PoolHold {
            pool,
            ports,
            until: None,
            nombuf_before: 0,
        }
    }

    pub(super) fn nombuf(&self) -> u64 {
        self.ports
            .iter()
            .filter_map(|p| p.stats().ok())
            .map(|s| s.rx_nombuf)
            .sum()
    }

    pub(super) fn tick(&mut self, handoff: &Handoff<Mbuf>) {
        if let Some(hold) = crate::fault::poll_hold_trigger() {
            self.nombuf_before = self.nombuf();
            crate::fault::set_pool_held(true);
            handoff.ring_all();
            self.until = Some(Instant::now() + hold);
            warn!(
                ms = hold.as_millis() as u64,
                free = self.pool.avail_count(),
                "test trigger: the workers hold every mbuf they can take"
            );
        }
        if self.until.is_some_and(|t| Instant::now() >= t) {
            let left = self.pool.avail_count();
            crate::fault::set_pool_held(false);
            handoff.ring_all();
            self.until = None;
            let dropped = self.nombuf().saturating_sub(self.nombuf_before);
            warn!(
                free_while_held = left,
                rx_nombuf = dropped,
                "test trigger: mbufs given back; the ports counted rx_nombuf={dropped} frames they had no mbuf for"
            );
        }
    }
}

/// What the main thread does every loop besides tables and signals.
pub(super) struct Chores<'a> {
    hold: PoolHold<'a>,
    port_stats: &'a mut PortStatsCopier,
    /// The records region whose clock offset is kept current, and TSC
    /// ticks per millisecond (the workers' clock).
    records_clock: Option<(&'static RecordsRegion, u64)>,
    /// Readiness and the watchdog, for the service manager.
    pub(super) readiness: Readiness,
    /// The flows regions whose clock offset is kept current, and TSC
    /// ticks per millisecond.
    pub(super) flows_clock: Option<(super::flows::FlowsStart, u64)>,
}

impl<'a> Chores<'a> {
    /// The chores over the ports (drawing from `pool`), the statistics
    /// copier and, with `[records]`, the records region's clock.
    pub(super) fn new(
        pool: &'a Mempool,
        ports: &'a [Port],
        port_stats: &'a mut PortStatsCopier,
        records_clock: Option<(&'static RecordsRegion, u64)>,
    ) -> Chores<'a> {
        Chores {
            hold: PoolHold::new(pool, ports),
            port_stats,
            records_clock,
            readiness: Readiness::from_env(),
            flows_clock: None,
        }
    }

    fn tick(&mut self, handoff: &Handoff<Mbuf>, state: &StateRegion, published: u64) {
        self.hold.tick(handoff);
        self.readiness.tick(state, published);
        self.port_stats.tick(read_port);
        if let Some((region, per_ms)) = self.records_clock {
            set_records_clock(region, per_ms);
        }
        if let Some((flows, per_ms)) = &self.flows_clock {
            flows.tick(*per_ms);
        }
    }
}

/// Tells border-mgmt how the workers' clock (TSC milliseconds) maps to
/// wall-clock time, for the records' times; refreshed every main-loop
/// turn, so a stepped wall clock shows up in records within 50 ms.
pub(super) fn set_records_clock(region: &RecordsRegion, per_ms: u64) {
    let unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let worker_ms = (dpdk_ffi::tsc_cycles() / per_ms) as i64;
    region.set_clock_offset_ms(unix_ms - worker_ms);
}

/// The main thread while the workers run: follows the tables region,
/// reloads on SIGHUP, reports refused generations. Returns at a stop
/// signal or when a worker returned on its own.
pub(super) fn supervise(
    cfg: &Config,
    opts: &RunOptions,
    signals: &Signals,
    mut publisher: Option<&mut Publisher>,
    tables: &mut TablesFollow,
    crew: &Crew,
    chores: &mut Chores<'_>,
) {
    let mut refused_seen = 0;
    let mut live_cfg = cfg.clone();
    while !signals.terminating() && crew.exited.load(Ordering::SeqCst) == 0 {
        tables.wait(&crew.handoff);
        if let Some(w) = crate::fault::poll_trigger() {
            warn!(
                worker = w,
                "test trigger: this worker panics at its next poll"
            );
            crew.handoff.ring_all();
        }
        if let Some(w) = crate::fault::poll_stall_trigger() {
            warn!(
                worker = w,
                "test trigger: this worker stops polling (wedged) until border-dp stops"
            );
            crew.handoff.ring_all();
        }
        chores.tick(&crew.handoff, &crew.state, tables.published_generation());
        if signals.reload.swap(false, Ordering::Relaxed) {
            reload_config(opts, &mut live_cfg, publisher.as_deref_mut(), &crew.state);
        }
        if tables.follow(&crew.handoff) {
            let refused = crew.state.total(conf::counters::Counter::TablesRefused);
            if refused > refused_seen {
                error!(
                    refused,
                    "workers refused a published table generation (kept the previous one)"
                );
                refused_seen = refused;
            }
        }
    }
}
