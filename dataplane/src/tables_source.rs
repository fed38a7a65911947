//! Where workers get their tables: the shared-memory tables region
//! (DESIGN §3), published by border-mgmt or, in standalone mode, by
//! border-dp's main thread from its own config file.
//!
//! Each worker has its own [`TablesReader`] (readers keep a per-reader cache
//! of validated blocks). The main thread opens readers and hands them over
//! through a one-slot queue whenever the region appears or is replaced;
//! the worker looks at that queue and at the published word once per poll
//! iteration — two atomic loads when nothing changed.

use std::sync::Arc;

use conf::state::vip_stat_key;
use conf::tables::{Generation, Published, TablesReader, TablesView, VipFlags};
use crossbeam_queue::ArrayQueue;

use crate::lb::{Adopted, Routes, VipInput};
use crate::ppv2::PpConfig;
use crate::worker::{TablePoll, TableSource};

/// One worker's inbox for (re)opened readers.
pub type ReaderInbox = Arc<ArrayQueue<TablesReader>>;

pub fn reader_inbox() -> ReaderInbox {
    Arc::new(ArrayQueue::new(1))
}

/// A VIP's PROXY protocol settings from its table flags.
pub fn pp_from_flags(flags: VipFlags, proto: u8, max_len: u16) -> PpConfig {
    if !flags.contains(VipFlags::PROXY_V2) || proto != conf::tables::PROTO_TCP {
        return PpConfig::OFF;
    }
    PpConfig {
        enabled: true,
        send_on_connect: flags.contains(VipFlags::PP_SEND_ON_CONNECT),
        unique_id: flags.contains(VipFlags::PP_TLV_UNIQUE_ID),
        crc32c: flags.contains(VipFlags::PP_TLV_CRC32C),
        authority: flags.contains(VipFlags::PP_TLV_AUTHORITY),
        max_len,
    }
}

/// The VIPs of a validated view as the worker's lookup structures take them.
pub fn inputs_from_view(view: &TablesView<'static>) -> Vec<VipInput<'static>> {
    view.vips()
        .iter()
        .map(|v| VipInput {
            id: v.id(),
            stat_key: vip_stat_key(v.name()),
            addr: v.addr(),
            port: v.port(),
            proto: v.proto(),
            mode: v.mode(),
            ring: v.ring(),
            backends: v
                .backends()
                .iter()
                .map(|b| (b.id, b.ip(), b.port))
                .collect(),
            pp: pp_from_flags(v.flags(), v.proto(), v.pp_max_len()),
        })
        .collect()
}

/// The VIPs of an in-process generation (tests, benchmarks). The rings are
/// leaked to get the worker's `'static` lifetime.
pub fn inputs_from_generation(gen: &Generation) -> Vec<VipInput<'static>> {
    gen.vips
        .iter()
        .map(|v| VipInput {
            id: v.id,
            stat_key: vip_stat_key(&v.name),
            addr: v.addr,
            port: v.port,
            proto: v.proto,
            mode: v.mode,
            ring: Box::leak(v.ring.clone().into_boxed_slice()),
            backends: v.backends.iter().map(|b| (b.id, b.addr, b.port)).collect(),
            pp: pp_from_flags(v.flags, v.proto, v.pp_max_len),
        })
        .collect()
}

/// A reader leaked for the `'static` lifetime of the views into it, and
/// used by exactly one worker.
#[derive(Clone, Copy)]
struct OwnReader(&'static TablesReader);

// SAFETY: a TablesReader is Send but not Sync (its block cache is a
// RefCell). An OwnReader is created from a reader the worker received by
// value and lives only inside that worker's ShmTables, so the reference is
// never used from two threads: moving it is moving the reader.
unsafe impl Send for OwnReader {}

/// A worker's view of the tables region.
pub struct ShmTables {
    inbox: ReaderInbox,
    reader: Option<OwnReader>,
    routes: Routes,
    /// The last published word this worker refused, so a corrupt generation
    /// is validated (and counted) once, not on every poll.
    refused: Option<Published>,
    applied: Box<dyn FnMut(u64) + Send>,
}

impl ShmTables {
    /// `applied` records the worker's quiescent generation (state region).
    pub fn new(inbox: ReaderInbox, routes: Routes, applied: Box<dyn FnMut(u64) + Send>) -> Self {
        ShmTables {
            inbox,
            reader: None,
            routes,
            refused: None,
            applied,
        }
    }
}

impl TableSource for ShmTables {
    fn poll(&mut self, current: Option<u64>) -> TablePoll {
        if let Some(r) = self.inbox.pop() {
            // A new or replaced region. The old reader may still back the
            // adopted generation, so it is never unmapped.
            let r = OwnReader(Box::leak(Box::new(r)));
            self.reader = Some(r);
            self.refused = None;
            {
                let p = r.0.current();
                if p.generation != 0 {
                    return self.adopt(r, p);
                }
            }
        }
        let Some(r) = self.reader else {
            return TablePoll::Nothing;
        };
        let p = r.0.current();
        if p.generation == 0 || Some(p.generation) == current || self.refused == Some(p) {
            return TablePoll::Nothing;
        }
        self.adopt(r, p)
    }

    fn adopted(&mut self, generation: u64) {
        (self.applied)(generation);
    }
}

impl ShmTables {
    fn adopt(&mut self, r: OwnReader, p: Published) -> TablePoll {
        match r.0.view(p) {
            Ok(view) => TablePoll::New(Box::new(Adopted::new(
                view.generation(),
                view.flow_hash_key(),
                inputs_from_view(&view),
                self.routes.clone(),
            ))),
            Err(_) => {
                self.refused = Some(p);
                TablePoll::Refused
            }
        }
    }
}

/// Hands one prebuilt generation to the worker, once (tests, benchmarks).
pub struct OneShot(pub Option<Adopted<'static>>);

impl TableSource for OneShot {
    fn poll(&mut self, _current: Option<u64>) -> TablePoll {
        match self.0.take() {
            Some(t) => TablePoll::New(Box::new(t)),
            None => TablePoll::Nothing,
        }
    }
}
