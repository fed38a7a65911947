//! Where workers get their tables: the shared-memory tables region
//! (docs/design.md §3), published by border-mgmt or, in standalone mode, by
//! border-dp's main thread from its own config file.
//!
//! Each worker has its own [`TablesReader`] (readers keep a per-reader cache
//! of validated blocks). The main thread opens readers and hands them over
//! through a one-slot queue whenever the region appears or is replaced;
//! the worker looks at that queue and at the published word once per poll
//! iteration — two atomic loads when nothing changed.

use std::sync::Arc;

use conf::state::vip_stat_key;
use conf::tables::{BackendState, Generation, Published, TablesReader, TablesView, VipFlags};
use conf::SynProxy;
use crossbeam_queue::ArrayQueue;

use crate::lb::{Adopted, ResetKey, ResetWhy, VipInput, VipSrc};
use crate::ppv2::PpConfig;
use crate::routes::Routes;
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

/// The VIPs of a validated view (of the region `region_id`) as the
/// worker's lookup structures take them. Nothing per backend: each VIP
/// names its block, and [`crate::lb::Lb::adopt`] keeps the runtime of VIPs
/// whose block is unchanged and builds the others' from the records in
/// place (the reader validated every ring against its backend count once,
/// when the block was new).
pub fn inputs_from_view(view: &TablesView<'static>, region_id: u64) -> Vec<VipInput<'static>> {
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
            backends: Vec::new(),
            proxy_protocol: pp_from_flags(v.flags(), v.proto(), v.pp_max_len()),
            translate_timestamps: !v.flags().contains(VipFlags::TIMESTAMPS_PASS),
            // A persistent VIP picks a client it has no pin for by its
            // address alone: every worker makes the same first choice.
            hash_source: v.flags().contains(VipFlags::HASH_SOURCE) || v.persistence_s() > 0,
            persistence_s: v.persistence_s(),
            limits: *v.limits(),
            prefixes: v.prefixes(),
            backend_max: Vec::new(),
            syn_proxy: syn_proxy_of(v.flags()),
            block: Some((
                VipSrc {
                    region: region_id,
                    block: v.block_id(),
                },
                v.backends(),
            )),
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
            proxy_protocol: pp_from_flags(v.flags, v.proto, v.pp_max_len),
            translate_timestamps: !v.flags.contains(VipFlags::TIMESTAMPS_PASS),
            hash_source: v.flags.contains(VipFlags::HASH_SOURCE) || v.persistence_s > 0,
            persistence_s: v.persistence_s,
            limits: conf::tables::limits_record(&v.limits),
            prefixes: Box::leak(conf::tables::prefix_records(&v.limits).into_boxed_slice()),
            backend_max: v.backends.iter().map(|b| b.max_connections).collect(),
            syn_proxy: syn_proxy_of(v.flags),
            block: None,
        })
        .collect()
}

/// A VIP's `syn_proxy` from its flags (both bits: the stronger).
fn syn_proxy_of(flags: VipFlags) -> SynProxy {
    if flags.contains(VipFlags::SYN_PROXY_ALWAYS) {
        SynProxy::Always
    } else if flags.contains(VipFlags::SYN_PROXY_AUTO) {
        SynProxy::Auto
    } else {
        SynProxy::Off
    }
}

/// Whether a VIP with these flags resets the established flows of its
/// health-down backends: `on_down = "reset"`, and the VIP does not fail
/// open (then every backend is down and all of them serve, so nothing is
/// reset).
fn resets_down(flags: VipFlags) -> bool {
    flags.contains(VipFlags::RESET_ON_DOWN) && !flags.contains(VipFlags::FAIL_OPEN)
}

/// Why, if at all, workers reset the established flows of a backend in
/// `state` on a VIP with `flags`: health took it down and the VIP
/// [`resets_down`], or the operator killed it (on any VIP: a kill is the
/// operator's word, not a health policy, so neither `on_down` nor failing
/// open keeps its flows).
fn reset_why(flags: VipFlags, state: BackendState) -> Option<ResetWhy> {
    match state {
        BackendState::Killed => Some(ResetWhy::Killed),
        BackendState::Down if resets_down(flags) => Some(ResetWhy::Down),
        _ => None,
    }
}

/// The backends whose established flows workers reset, with why
/// ([`Adopted::with_resets`]): those health took down (state Down; not
/// drained, not weight 0) of VIPs that [`resets_down`], and those the
/// operator killed. Empty, without allocating, when there are none.
pub fn resets_from_view(view: &TablesView<'_>) -> Vec<(ResetKey, ResetWhy)> {
    let mut out = Vec::new();
    for v in view.vips().iter() {
        for b in v.backends() {
            if let Some(why) = reset_why(v.flags(), b.backend_state()) {
                let key = ResetKey::new(v.addr(), v.port(), v.proto(), b.ip(), b.port);
                out.push((key, why));
            }
        }
    }
    out
}

/// [`resets_from_view`] for an in-process generation.
pub fn resets_from_generation(gen: &Generation) -> Vec<(ResetKey, ResetWhy)> {
    let mut out = Vec::new();
    for v in &gen.vips {
        for b in &v.backends {
            if let Some(why) = reset_why(v.flags, b.state) {
                out.push((ResetKey::new(v.addr, v.port, v.proto, b.addr, b.port), why));
            }
        }
    }
    out
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

    fn has_news(&self, current: Option<u64>) -> bool {
        if !self.inbox.is_empty() {
            return true;
        }
        self.reader.is_some_and(|r| {
            let p = r.0.current();
            p.generation != 0 && Some(p.generation) != current && self.refused != Some(p)
        })
    }

    fn adopted(&mut self, generation: u64) {
        (self.applied)(generation);
    }
}

impl ShmTables {
    fn adopt(&mut self, r: OwnReader, p: Published) -> TablePoll {
        match r.0.view(p) {
            Ok(view) => TablePoll::New(Box::new(
                Adopted::new(
                    view.generation(),
                    view.flow_hash_key(),
                    inputs_from_view(&view, r.0.region_id()),
                    self.routes.clone(),
                )
                .with_resets(resets_from_view(&view)),
            )),
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
    fn has_news(&self, _current: Option<u64>) -> bool {
        self.0.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conntrack::Timeouts;
    use crate::lb::{BackendRt, Lb};
    use crate::neigh::NeighborSync;
    use conf::state::FlowStats;
    use conf::tables::{BackendState, GenerationBuilder, TablesWriter};
    use conf::Config;
    use std::fmt::Write;
    use std::path::PathBuf;

    /// `n` VIPs (every fourth DNAT, from VIP 3 on) with 4 backends each.
    fn config(n: u32) -> Config {
        config_with(n, |_, _| None)
    }

    /// [`config`], with backend addresses changed by `addr(vip, backend)`.
    fn config_with(n: u32, addr: impl Fn(u32, u32) -> Option<String>) -> Config {
        let mut c = String::from(
            r#"instance = "t"
[dataplane]
worker_lcores = [1]
flow_hash_key = "000102030405060708090a0b0c0d0e0f"
[[port]]
name = "p0"
devargs = "net_null0"
addresses = ["10.0.0.1/16"]
local_addresses = ["10.0.0.1"]
"#,
        );
        for v in 0..n {
            let mode = if v % 4 == 3 { "dnat" } else { "fullnat" };
            let _ = write!(
                c,
                "[[vip]]\nname = \"v{v}\"\naddress = \"10.0.100.{v}\"\nport = 80\nmode = \"{mode}\"\nmaglev_table_size = 1009\n"
            );
            for b in 0..4 {
                let a = addr(v, b).unwrap_or(format!("10.0.{}.{}", 1 + b, v + 1));
                let _ = write!(c, "[[vip.backend]]\naddress = \"{a}\"\nport = 8080\n");
            }
        }
        Config::from_toml_str(&c, "t.toml").expect("config")
    }

    fn tmp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("border-dp-ts-{}-{name}", std::process::id()))
    }

    fn new_lb() -> Lb {
        Lb::new(
            0,
            1,
            64,
            Timeouts::default(),
            NeighborSync::new(1),
            FlowStats::detached(256),
            FlowStats::detached(1024),
        )
    }

    fn poll_adopt(src: &mut ShmTables, lb: &mut Lb) {
        match src.poll(lb.generation()) {
            TablePoll::New(t) => {
                let g = t.generation;
                lb.adopt(*t);
                src.adopted(g);
            }
            TablePoll::Nothing => panic!("nothing new"),
            TablePoll::Refused => panic!("refused"),
        }
    }

    /// Everything of a backend's runtime but the worker-specific slots.
    fn shape(b: &BackendRt) -> BackendRt {
        BackendRt {
            stat_slot: 0,
            hop: crate::neigh::Slot::NONE,
            ..b.clone()
        }
    }

    /// A one-backend change among many VIPs: the worker builds the backends
    /// of that VIP only and carries every other VIP over with its statistics
    /// and neighbour slots; the result is what a worker adopting the new
    /// generation from scratch has.
    #[test]
    fn one_backend_change_rebuilds_one_vip() {
        let n = 40u32;
        let k = 17usize;
        let cfg = config(n);
        let path = tmp("one");
        let _ = std::fs::remove_file(&path);
        let mut w = TablesWriter::create(&path, 8 << 20).unwrap();
        let mut builder = GenerationBuilder::new();
        let g1 = builder.build(&cfg, &conf::tables::no_overrides).unwrap();
        w.publish(&g1, &[]).unwrap();

        let inbox = reader_inbox();
        let _ = inbox.push(TablesReader::open(&path).unwrap());
        let routes = Routes::from_config(&cfg);
        let mut src = ShmTables::new(inbox, routes.clone(), Box::new(|_| {}));
        let mut lb = new_lb();
        poll_adopt(&mut src, &mut lb);
        let t = lb.tables().unwrap();
        assert_eq!((t.carried, t.built), (0, n as usize), "first adoption");
        let before: Vec<Vec<BackendRt>> = t.vips.iter().map(|v| v.backends.clone()).collect();
        let rings: Vec<*const u32> = t.vips.iter().map(|v| v.ring.slots().as_ptr()).collect();

        // Backend 2 of VIP k goes down.
        let down = |vi: usize, bi: usize| (vi == k && bi == 2).then_some((1, BackendState::Down));
        let g2 = builder.build(&cfg, &down).unwrap();
        let s = w.publish(&g2, &[1]).unwrap();
        assert_eq!(s.blocks_written, 2, "the changed VIP's block and the root");
        poll_adopt(&mut src, &mut lb);
        let t = lb.tables().unwrap();
        assert_eq!(t.generation, 2);
        assert_eq!((t.carried, t.built, t.refused), (n as usize - 1, 1, 0));
        for (i, v) in t.vips.iter().enumerate() {
            assert_eq!(v.backends, before[i], "vip {i}: same backends and slots");
            assert_eq!(v.ring.slots().as_ptr() == rings[i], i != k, "vip {i}: ring");
            assert!(v
                .ring
                .slots()
                .iter()
                .all(|&e| (e as usize) < v.backends.len()));
        }
        assert!(
            t.vips[k].ring.slots().iter().all(|&e| e != 2),
            "down: out of the ring"
        );

        // The same generation adopted from scratch by a fresh worker.
        let r = TablesReader::open(&path).unwrap();
        let view: &'static TablesReader = Box::leak(Box::new(r));
        let v = view.view_current().unwrap();
        let mut fresh = new_lb();
        fresh.adopt(Adopted::new(
            v.generation(),
            v.flow_hash_key(),
            inputs_from_view(&v, view.region_id()),
            routes,
        ));
        let f = fresh.tables().unwrap();
        assert_eq!((f.carried, f.built), (0, n as usize));
        for (a, b) in t.vips.iter().zip(&f.vips) {
            assert_eq!(a.ring.slots(), b.ring.slots());
            let (x, y): (Vec<_>, Vec<_>) = (
                a.backends.iter().map(shape).collect(),
                b.backends.iter().map(shape).collect(),
            );
            assert_eq!(x, y);
        }
        // DNAT replies still find their VIP (the reverse map is rebuilt
        // from the records of every DNAT VIP).
        let last = &cfg.vips[n as usize - 1];
        assert_eq!(
            t.vip_index(last.address, 80, 6),
            Some(n - 1),
            "VIP lookups cover carried VIPs"
        );
        std::fs::remove_file(&path).unwrap();
    }

    /// The DNAT reverse map (backend -> VIP, for stateless replies) of a
    /// generation that changed one DNAT VIP's backends is the previous one
    /// patched for that VIP, and equals a fresh adoption's; a backend that
    /// becomes ambiguous (claimed by two VIPs) makes it build the map anew,
    /// with the same result.
    #[test]
    fn dnat_reverse_map_is_patched_for_the_changed_vip() {
        let n = 40u32;
        let k = 19u32;
        let path = tmp("dnat");
        let _ = std::fs::remove_file(&path);
        let mut w = TablesWriter::create(&path, 8 << 20).unwrap();
        let mut builder = GenerationBuilder::new();
        let cfg = config(n);
        w.publish(
            &builder.build(&cfg, &conf::tables::no_overrides).unwrap(),
            &[],
        )
        .unwrap();
        let inbox = reader_inbox();
        let _ = inbox.push(TablesReader::open(&path).unwrap());
        let routes = Routes::from_config(&cfg);
        let mut src = ShmTables::new(inbox, routes.clone(), Box::new(|_| {}));
        let mut lb = new_lb();
        poll_adopt(&mut src, &mut lb);
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        let t = lb.tables().unwrap();
        assert_eq!(t.dnat_vip(ip("10.0.4.20"), 8080, 6), Some(Some(k)));
        assert_eq!(t.dnat_vip(ip("10.0.4.19"), 8080, 6), None, "full-NAT VIP");

        let fresh = |lb_gen: u64| {
            let r: &'static TablesReader = Box::leak(Box::new(TablesReader::open(&path).unwrap()));
            let v = r.view_current().unwrap();
            assert_eq!(v.generation(), lb_gen);
            let mut f = new_lb();
            f.adopt(Adopted::new(
                v.generation(),
                v.flow_hash_key(),
                inputs_from_view(&v, r.region_id()),
                routes.clone(),
            ));
            f.take_tables().unwrap()
        };

        // VIP k's backend 3 moves to another address.
        let cfg2 = config_with(n, |v, b| (v == k && b == 3).then(|| "10.0.9.9".into()));
        w.publish(
            &builder.build(&cfg2, &conf::tables::no_overrides).unwrap(),
            &[1],
        )
        .unwrap();
        poll_adopt(&mut src, &mut lb);
        let t = lb.tables().unwrap();
        assert_eq!((t.carried, t.built), (n as usize - 1, 1));
        assert!(t.dnat_patched);
        assert_eq!(t.dnat_vip(ip("10.0.4.20"), 8080, 6), None);
        assert_eq!(t.dnat_vip(ip("10.0.9.9"), 8080, 6), Some(Some(k)));
        assert_eq!(t.dnat_vip(ip("10.0.3.20"), 8080, 6), Some(Some(k)));
        assert_eq!(t.dnat_entries(), fresh(2).dnat_entries());
        assert_eq!(t.dnat_entries().len(), 10 * 4);

        // VIP k's backend 3 becomes VIP 23's backend 0 too: ambiguous.
        let cfg3 = config_with(n, |v, b| (v == k && b == 3).then(|| "10.0.1.24".into()));
        w.publish(
            &builder.build(&cfg3, &conf::tables::no_overrides).unwrap(),
            &[2],
        )
        .unwrap();
        poll_adopt(&mut src, &mut lb);
        let t = lb.tables().unwrap();
        assert_eq!((t.carried, t.built), (n as usize - 1, 1));
        assert!(!t.dnat_patched, "built anew");
        assert_eq!(t.dnat_vip(ip("10.0.1.24"), 8080, 6), Some(None));
        assert_eq!(t.dnat_entries(), fresh(3).dnat_entries());

        // And back: the ambiguous entry is in the way, built anew again.
        w.publish(
            &builder.build(&cfg2, &conf::tables::no_overrides).unwrap(),
            &[3],
        )
        .unwrap();
        poll_adopt(&mut src, &mut lb);
        let t = lb.tables().unwrap();
        assert!(!t.dnat_patched);
        assert_eq!(t.dnat_vip(ip("10.0.1.24"), 8080, 6), Some(Some(23)));
        assert_eq!(t.dnat_entries(), fresh(4).dnat_entries());
        std::fs::remove_file(&path).unwrap();
    }

    /// A replaced region (new file, new region id) shares nothing with the
    /// old one, even where offsets and checksums coincide.
    #[test]
    fn a_new_region_rebuilds_everything() {
        let cfg = config(5);
        let path = tmp("new");
        let _ = std::fs::remove_file(&path);
        let g = conf::tables::build_generation(&cfg, &conf::tables::no_overrides).unwrap();
        let mut w = TablesWriter::create(&path, 8 << 20).unwrap();
        w.publish(&g, &[]).unwrap();
        let inbox = reader_inbox();
        let _ = inbox.push(TablesReader::open(&path).unwrap());
        let mut src = ShmTables::new(inbox.clone(), Routes::from_config(&cfg), Box::new(|_| {}));
        let mut lb = new_lb();
        poll_adopt(&mut src, &mut lb);
        let srcs: Vec<VipSrc> = lb
            .tables()
            .unwrap()
            .vips
            .iter()
            .map(|v| v.src.unwrap())
            .collect();
        drop(w);
        std::fs::remove_file(&path).unwrap();
        let mut w = TablesWriter::create(&path, 8 << 20).unwrap();
        // Generation 1 again: same offsets, lengths and checksums.
        w.publish(&g, &[]).unwrap();
        let _ = inbox.push(TablesReader::open(&path).unwrap());
        poll_adopt(&mut src, &mut lb);
        let t = lb.tables().unwrap();
        assert_eq!((t.carried, t.built), (0, 5));
        for (v, old) in t.vips.iter().zip(&srcs) {
            let new = v.src.unwrap();
            assert_eq!(new.block, old.block, "the blocks coincide");
            assert_ne!(new.region, old.region);
        }
        std::fs::remove_file(&path).unwrap();
    }
}
