//! Live connections (`borderctl conns`): the worker's side of a walk of
//! its connection table through the connections region (`conf::conns`).
//!
//! While no walk is asked for, a poll iteration costs one relaxed load.
//! During one, each iteration copies at most [`EXPORT_BUDGET`] entries
//! (looking at most at four times as many slots) into the worker's export
//! ring, and an idle wake-up [`IDLE_EXPORT_BUDGET`]: the walk goes as fast
//! as the reader takes records, and never holds a packet for longer than a
//! few dozen entry copies. Each record is its entry at one instant: the
//! worker copies it between two packets.

use conf::config::Mode;
use conf::conns::{
    ConnsExport, LiveConn, LIVE_FULL_NAT, LIVE_METERED, LIVE_PROXY, LIVE_PROXY_ACKED,
    LIVE_PROXY_SENT,
};

use super::flow::FlowRec;
use super::records::FlowRecords;
use crate::conntrack::{Conntrack, Entry};

/// Entries copied per poll iteration while a walk runs.
pub const EXPORT_BUDGET: usize = 16;

/// Entries copied per wake-up of an idle worker while a walk runs.
pub const IDLE_EXPORT_BUDGET: usize = 1024;

/// Copies up to `budget` more live entries of `table` into the walk
/// `export` serves, if one runs (at `now`, on the worker's clock).
#[inline]
pub(super) fn step(
    export: &mut ConnsExport<'static>,
    table: &Conntrack<FlowRec>,
    meters: Option<&FlowRecords>,
    timeouts_ms: &[u64; 7],
    now: u64,
    worker: usize,
    budget: usize,
) {
    if !export.walking() {
        return;
    }
    walk_some(export, table, meters, timeouts_ms, now, worker, budget);
}

#[cold]
#[inline(never)]
fn walk_some(
    export: &mut ConnsExport<'static>,
    table: &Conntrack<FlowRec>,
    meters: Option<&FlowRecords>,
    timeouts_ms: &[u64; 7],
    now: u64,
    worker: usize,
    budget: usize,
) {
    let mut copies = export.room().min(budget);
    let end = table.slots_used();
    let mut slot = export.cursor();
    let last = end.min(slot.saturating_add(4 * budget));
    while copies > 0 && slot < last {
        if let Some((id, e)) = table.entry_at(slot) {
            if !e.is_expired(now) {
                let meter = meters.and_then(|m| m.meter(id.index() as usize));
                export.push(&live_conn(e, meter, timeouts_ms, now, worker));
                copies -= 1;
            }
        }
        slot += 1;
    }
    export.set_cursor(slot);
    if slot >= end {
        export.finish();
    }
}

/// One entry as a record: its keys, state, times, meter and PROXY status.
fn live_conn(
    e: &Entry<FlowRec>,
    meter: Option<([u64; 2], [u64; 2])>,
    timeouts_ms: &[u64; 7],
    now: u64,
    worker: usize,
) -> LiveConn {
    let v = &e.value;
    let (o, r) = (e.orig(), e.reply());
    let mut flags = 0;
    if v.mode == Mode::FullNat {
        flags |= LIVE_FULL_NAT;
    }
    if v.pp_on() {
        flags |= LIVE_PROXY;
        if v.proxy.sent() {
            flags |= LIVE_PROXY_SENT;
        }
        if v.proxy.acked() {
            flags |= LIVE_PROXY_ACKED;
        }
    }
    let (packets, octets) = match meter {
        Some(m) => {
            flags |= LIVE_METERED;
            m
        }
        None => ([0; 2], [0; 2]),
    };
    LiveConn {
        conn_id: v.conn_id,
        created_ms: e.created_at(),
        last_seen_ms: e.last_seen(timeouts_ms).max(e.created_at()),
        expires_ms: e.expires_at(),
        now_ms: now,
        packets,
        octets,
        client: o.src,
        vip: o.dst,
        backend: r.src,
        local: r.dst,
        client_port: o.sport,
        vip_port: o.dport,
        backend_port: r.sport,
        local_port: r.dport,
        proto: o.proto,
        client_v6: o.v6,
        backend_v6: r.v6,
        state: e.state() as u8,
        flags,
        worker: worker as u16,
    }
}
