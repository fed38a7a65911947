//! The state region: a shared-memory file written only by border-dp and read by
//! border-mgmt, borderctl and tests.
//!
//! Layout (all offsets in bytes from the start of the file, little endian,
//! every field naturally aligned; the file is mapped page-aligned):
//!
//! ```text
//! 0    magic          [u8; 8]  "BRDSTATE"
//! 8    layout_version u32
//! 12   header_len     u32      offset of worker block 0
//! 16   n_workers      u32
//! 20   n_counters     u32
//! 24   worker_stride  u32      bytes between worker blocks (multiple of 64)
//! 28   dp_pid         u32      atomic; pid of the border-dp that owns the region
//! 32   run_state      u64      atomic; see [`RunState`]
//! 40   started_unix_ms u64
//! 48   (zero)
//! 128  port slots     [[u64; 24]; MAX_PORT_SLOTS]  see [`PortSnapshot`]; the
//!      main thread of border-dp is their only writer:
//!      0  tag         atomic; 0 = unused, else 1 << 16 | role << 8 | name length
//!      8  name        [u8; 32] (as 4 words, written before the tag)
//!      40 updated_unix_ms  atomic; when the stats were last copied
//!      48 stats       [u64; 11] atomic; rte_eth_stats and rte_pdump_stats, by [`PortStat`]
//!      (zero to 192)
//! ...  (zero up to header_len)
//! worker block i at header_len + i * worker_stride:
//! 0    lcore          u64
//! 8    applied_generation u64  atomic; quiescent state of the worker (QSBR)
//! 16   heartbeat      u64      atomic; poll-loop iterations, for liveness
//! 24   counters       [u64; n_counters]  atomic; indexed by [`Counter`]
//! (padded to 64)
//!      vip stats      [[u64; 5]; MAX_VIPS]      atomic; keyed slots, see [`FlowStats`]
//!      backend stats  [[u64; 5]; MAX_BACKENDS]  atomic; keyed slots
//!      local pools    [[u64; 6]; MAX_LOCAL_POOLS] atomic; see [`LocalPoolStats`]
//! ```
//!
//! Each worker is the only writer of its block, so counters are bumped with a
//! relaxed load and store instead of a locked read-modify-write.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::{Mmap, MmapMut};

use crate::counters::Counter;
use crate::os::files::{self, Access};

/// Bumped whenever the byte layout or the counter list changes.
pub const STATE_LAYOUT_VERSION: u32 = 13;
/// Statistics slots for VIPs, per worker.
pub const MAX_VIPS: usize = 4096;
/// Statistics slots for backends, per worker.
pub const MAX_BACKENDS: usize = 65536;
/// Full-NAT local addresses whose tuple use a worker shows (the first ones
/// of its pools, in config order).
pub const MAX_LOCAL_POOLS: usize = 256;
/// Words per local-address slot: present, address (two words), tuples, in
/// use, resting.
const POOL_WORDS: usize = 6;

/// The statistics key of a VIP: a stable hash of its name, never 0.
pub fn vip_stat_key(name: &str) -> u32 {
    stat_key(crate::flowhash::siphash24(b"border-vip-stats", name.as_bytes()) as u32)
}

/// A statistics key from a stable 32-bit id (0 is reserved for "free").
pub const fn stat_key(id: u32) -> u32 {
    if id == 0 {
        1
    } else {
        id
    }
}

/// Per-VIP and per-backend statistics, four words per VIP or backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum FlowStat {
    /// Packets forwarded (both directions).
    Packets = 0,
    /// Bytes forwarded (both directions).
    Bytes = 1,
    /// Connections created.
    NewConnections = 2,
    /// Connections in the worker's table now (a gauge).
    ActiveConnections = 3,
}

impl FlowStat {
    pub const ALL: [FlowStat; 4] = [
        FlowStat::Packets,
        FlowStat::Bytes,
        FlowStat::NewConnections,
        FlowStat::ActiveConnections,
    ];
    pub const fn name(self) -> &'static str {
        match self {
            FlowStat::Packets => "packets",
            FlowStat::Bytes => "bytes",
            FlowStat::NewConnections => "new_connections",
            FlowStat::ActiveConnections => "active_connections",
        }
    }
}

/// A port's statistics as DPDK counts them (`rte_eth_stats`, and
/// `rte_pdump_stats` of packet capture), named as DPDK names them, copied
/// into the state region about once a second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum PortStat {
    /// Packets received.
    Ipackets = 0,
    /// Packets sent.
    Opackets = 1,
    /// Bytes received.
    Ibytes = 2,
    /// Bytes sent.
    Obytes = 3,
    /// Packets the NIC dropped because the Rx ring was full (workers too slow).
    Imissed = 4,
    /// Erroneous packets received.
    Ierrors = 5,
    /// Packets the NIC failed to send.
    Oerrors = 6,
    /// Packets dropped because the mbuf pool was empty.
    RxNombuf = 7,
    /// Packets a capture (`borderctl capture`, `dpdk-dumpcap`) took: its
    /// filter matched them (rte_pdump_stats.accepted, Rx and Tx).
    CaptureAccepted = 8,
    /// Packets a capture lost because its ring to the capture tool was
    /// full (rte_pdump_stats.ringfull).
    CaptureRingfull = 9,
    /// Packets a capture lost for want of an mbuf to copy them into
    /// (rte_pdump_stats.nombuf).
    CaptureNombuf = 10,
}

impl PortStat {
    pub const COUNT: usize = 11;
    pub const ALL: [PortStat; PortStat::COUNT] = [
        PortStat::Ipackets,
        PortStat::Opackets,
        PortStat::Ibytes,
        PortStat::Obytes,
        PortStat::Imissed,
        PortStat::Ierrors,
        PortStat::Oerrors,
        PortStat::RxNombuf,
        PortStat::CaptureAccepted,
        PortStat::CaptureRingfull,
        PortStat::CaptureNombuf,
    ];
    pub const fn name(self) -> &'static str {
        match self {
            PortStat::Ipackets => "ipackets",
            PortStat::Opackets => "opackets",
            PortStat::Ibytes => "ibytes",
            PortStat::Obytes => "obytes",
            PortStat::Imissed => "imissed",
            PortStat::Ierrors => "ierrors",
            PortStat::Oerrors => "oerrors",
            PortStat::RxNombuf => "rx_nombuf",
            PortStat::CaptureAccepted => "capture_accepted",
            PortStat::CaptureRingfull => "capture_ringfull",
            PortStat::CaptureNombuf => "capture_nombuf",
        }
    }
    /// One line for operators (metric help).
    pub const fn help(self) -> &'static str {
        match self {
            PortStat::Ipackets => "packets the port received (rte_eth_stats.ipackets)",
            PortStat::Opackets => "packets the port sent (rte_eth_stats.opackets)",
            PortStat::Ibytes => "bytes the port received (rte_eth_stats.ibytes)",
            PortStat::Obytes => "bytes the port sent (rte_eth_stats.obytes)",
            PortStat::Imissed => {
                "packets the NIC dropped because an Rx ring was full: workers too slow (rte_eth_stats.imissed)"
            }
            PortStat::Ierrors => "erroneous packets received (rte_eth_stats.ierrors)",
            PortStat::Oerrors => "packets the port failed to send (rte_eth_stats.oerrors)",
            PortStat::RxNombuf => {
                "packets dropped because the mbuf pool was empty (rte_eth_stats.rx_nombuf)"
            }
            PortStat::CaptureAccepted => {
                "packets a packet capture took (its filter matched; rte_pdump_stats.accepted)"
            }
            PortStat::CaptureRingfull => {
                "packets a packet capture lost: its ring to the capture tool was full (rte_pdump_stats.ringfull)"
            }
            PortStat::CaptureNombuf => {
                "packets a packet capture lost: no mbuf to copy them into (rte_pdump_stats.nombuf)"
            }
        }
    }
}

/// What a port slot holds: a data port (`[[port]].name`) or its kernel twin
/// (by its interface name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortRole {
    Data,
    Twin,
}

impl PortRole {
    pub const fn name(self) -> &'static str {
        match self {
            PortRole::Data => "data",
            PortRole::Twin => "twin",
        }
    }
}

/// One port's slot as read from the region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortSnapshot {
    pub name: String,
    pub role: PortRole,
    /// When border-dp last copied the statistics (0: not yet).
    pub updated_unix_ms: u64,
    /// Values in [`PortStat::ALL`] order.
    pub stats: [u64; PortStat::COUNT],
}

impl PortSnapshot {
    pub fn get(&self, s: PortStat) -> u64 {
        self.stats[s as usize]
    }
}

/// Words per statistics slot: the key, then one per [`FlowStat`].
const FLOW_WORDS: usize = 1 + FlowStat::ALL.len();
const MAGIC: [u8; 8] = *b"BRDSTATE";
/// The fixed header fields, before the port slots.
const HEADER_FIXED: usize = 128;
/// Port slots: every `[[port]]` and its kernel twin.
pub const MAX_PORT_SLOTS: usize = 2 * crate::config::MAX_PORTS;
const PORT_SLOT_LEN: usize = 192;
const _: () = assert!(48 + PortStat::COUNT * 8 <= PORT_SLOT_LEN);
/// Tag bit of a named port slot (an unused slot's tag is 0).
const NAMED: u64 = 1 << 16;
/// Longest port name a slot keeps (a port or interface name is shorter).
pub const PORT_NAME_LEN: usize = 32;
const HEADER_LEN: usize = HEADER_FIXED + MAX_PORT_SLOTS * PORT_SLOT_LEN;
const _: () = assert!(HEADER_LEN.is_multiple_of(64));
const WORKER_FIXED: usize = 24;
const MAX_WORKERS: u32 = 1024;

/// Where the state region of an instance lives:
/// `/dev/shm/border-<instance>-state` ([`crate::os::region_dir`] moves it).
pub fn state_path(instance: &str) -> PathBuf {
    crate::os::region_dir().join(format!("border-{instance}-state"))
}

/// Lifecycle of the dataplane process that owns the region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunState {
    Starting,
    Running,
    Stopped,
    Unknown(u64),
}

impl RunState {
    fn to_raw(self) -> u64 {
        match self {
            RunState::Starting => 0,
            RunState::Running => 1,
            RunState::Stopped => 2,
            RunState::Unknown(v) => v,
        }
    }
    fn from_raw(v: u64) -> Self {
        match v {
            0 => RunState::Starting,
            1 => RunState::Running,
            2 => RunState::Stopped,
            v => RunState::Unknown(v),
        }
    }
}

/// Why a state region could not be created or opened.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("state region {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("state region {path}: not a border state region (bad magic)")]
    BadMagic { path: PathBuf },
    #[error("state region {path}: layout version {found} is not supported (this build speaks {expected})")]
    Version {
        path: PathBuf,
        found: u32,
        expected: u32,
    },
    #[error("state region {path}: {what}")]
    Corrupt { path: PathBuf, what: String },
    #[error("state region {0}")]
    Untrusted(files::Untrusted),
    #[error("state region: {0} workers is more than the supported {MAX_WORKERS}")]
    TooManyWorkers(u32),
}

fn file_error(path: &Path, e: files::FileError) -> StateError {
    match e {
        files::FileError::Io(source) => StateError::Io {
            path: path.to_owned(),
            source,
        },
        files::FileError::Untrusted(u) => StateError::Untrusted(u),
    }
}

fn counters_len() -> usize {
    (WORKER_FIXED + Counter::COUNT * 8).div_ceil(64) * 64
}

fn worker_stride() -> usize {
    counters_len() + (MAX_VIPS + MAX_BACKENDS) * FLOW_WORDS * 8 + MAX_LOCAL_POOLS * POOL_WORDS * 8
}

enum Map {
    Rw(MmapMut),
    Ro(Mmap),
}

impl Map {
    fn as_ptr(&self) -> *const u8 {
        match self {
            Map::Rw(m) => m.as_ptr(),
            Map::Ro(m) => m.as_ptr(),
        }
    }
    fn len(&self) -> usize {
        match self {
            Map::Rw(m) => m.len(),
            Map::Ro(m) => m.len(),
        }
    }
}

/// A mapped state region.
pub struct StateRegion {
    map: Map,
    path: PathBuf,
    n_workers: usize,
    n_counters: usize,
    stride: usize,
}

impl std::fmt::Debug for StateRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateRegion")
            .field("path", &self.path)
            .field("n_workers", &self.n_workers)
            .finish()
    }
}

impl StateRegion {
    /// Creates (or truncates and re-initialises) the region for `lcores.len()`
    /// workers, mode 0600. Only border-dp calls this.
    pub fn create(path: &Path, lcores: &[u32]) -> Result<StateRegion, StateError> {
        Self::create_for(path, lcores, Access::PRIVATE)
    }

    /// [`StateRegion::create`] readable by `access`'s group too (0640), for
    /// operators who read counters without root.
    pub fn create_for(
        path: &Path,
        lcores: &[u32],
        access: Access,
    ) -> Result<StateRegion, StateError> {
        let n_workers = lcores.len() as u32;
        if n_workers > MAX_WORKERS {
            return Err(StateError::TooManyWorkers(n_workers));
        }
        let io_err = |source| StateError::Io {
            path: path.to_owned(),
            source,
        };
        let stride = worker_stride();
        let len = HEADER_LEN + stride * lcores.len();
        // Built under a temporary name and renamed over `path`: a reader
        // still mapping the previous region keeps valid (if frozen) memory,
        // where truncating the file in place would fault it (SIGBUS). The
        // name is unpredictable and made with O_EXCL, never through a
        // symlink; the rename replaces whatever is at `path` (a symlink
        // included) without following it.
        let tmp = files::temp_path_for(path);
        let file = files::create_new(&tmp, access).map_err(|e| file_error(path, e))?;
        if let Err(e) = files::allocate(&file, len as u64) {
            let _ = std::fs::remove_file(&tmp);
            return Err(io_err(e));
        }
        // SAFETY: the file was just created with `len` bytes under a name
        // only this process uses; once renamed, other processes map it
        // read-only and access every field they share with us atomically.
        let mut map = unsafe { MmapMut::map_mut(&file) }.map_err(io_err)?;
        map[0..8].copy_from_slice(&MAGIC);
        map[8..12].copy_from_slice(&STATE_LAYOUT_VERSION.to_le_bytes());
        map[12..16].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
        map[16..20].copy_from_slice(&n_workers.to_le_bytes());
        map[20..24].copy_from_slice(&(Counter::COUNT as u32).to_le_bytes());
        map[24..28].copy_from_slice(&(stride as u32).to_le_bytes());
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        map[40..48].copy_from_slice(&now_ms.to_le_bytes());
        for (i, lcore) in lcores.iter().enumerate() {
            let off = HEADER_LEN + i * stride;
            map[off..off + 8].copy_from_slice(&u64::from(*lcore).to_le_bytes());
        }
        if let Err(e) = std::fs::rename(&tmp, path) {
            let _ = std::fs::remove_file(&tmp);
            return Err(io_err(e));
        }
        let region = StateRegion {
            map: Map::Rw(map),
            path: path.to_owned(),
            n_workers: lcores.len(),
            n_counters: Counter::COUNT,
            stride,
        };
        region.set_pid(std::process::id());
        region.set_run_state(RunState::Starting);
        Ok(region)
    }

    /// Maps an existing region read-only and validates its header.
    pub fn open(path: &Path) -> Result<StateRegion, StateError> {
        let io_err = |source| StateError::Io {
            path: path.to_owned(),
            source,
        };
        // Never through a symlink, and only a file root or this user made
        // that nobody else can write: forged worker states would steer
        // border-mgmt's reuse of table memory.
        let file = files::open_trusted(path).map_err(|e| file_error(path, e))?;
        // SAFETY: mapped read-only; the writer (border-dp) only ever changes
        // fields this reader accesses through atomics, and the file length is
        // validated below before any field beyond the header is read.
        let map = unsafe { Mmap::map(&file) }.map_err(io_err)?;
        Self::validate(Map::Ro(map), path)
    }

    fn validate(map: Map, path: &Path) -> Result<StateRegion, StateError> {
        let corrupt = |what: String| StateError::Corrupt {
            path: path.to_owned(),
            what,
        };
        let len = map.len();
        // Magic and version first: another layout's header may be shorter.
        if len < HEADER_FIXED {
            return Err(corrupt(format!("{len} bytes is shorter than the header")));
        }
        // SAFETY: `len >= HEADER_FIXED` was checked, so the first HEADER_FIXED
        // bytes are mapped and readable for the lifetime of `map`.
        let head = unsafe { std::slice::from_raw_parts(map.as_ptr(), HEADER_FIXED) };
        if head[0..8] != MAGIC {
            return Err(StateError::BadMagic {
                path: path.to_owned(),
            });
        }
        let u32_at =
            |o: usize| u32::from_le_bytes([head[o], head[o + 1], head[o + 2], head[o + 3]]);
        let version = u32_at(8);
        if version != STATE_LAYOUT_VERSION {
            return Err(StateError::Version {
                path: path.to_owned(),
                found: version,
                expected: STATE_LAYOUT_VERSION,
            });
        }
        if len < HEADER_LEN {
            return Err(corrupt(format!("{len} bytes is shorter than the header")));
        }
        let header_len = u32_at(12) as usize;
        let n_workers = u32_at(16);
        let n_counters = u32_at(20) as usize;
        let stride = u32_at(24) as usize;
        if header_len != HEADER_LEN || n_counters != Counter::COUNT || stride != worker_stride() {
            return Err(corrupt(format!(
                "header_len {header_len}, {n_counters} counters, stride {stride} do not match layout version {version}"
            )));
        }
        if n_workers > MAX_WORKERS {
            return Err(corrupt(format!("{n_workers} workers")));
        }
        let need = HEADER_LEN + stride * n_workers as usize;
        if len < need {
            return Err(corrupt(format!(
                "{len} bytes, but {n_workers} workers need {need}"
            )));
        }
        Ok(StateRegion {
            map,
            path: path.to_owned(),
            n_workers: n_workers as usize,
            n_counters,
            stride,
        })
    }

    fn word(&self, offset: usize) -> &AtomicU64 {
        assert!(offset.is_multiple_of(8) && offset + 8 <= self.map.len());
        // SAFETY: the mapping is page-aligned and `offset` is a multiple of 8
        // inside it (asserted above), so the pointer is valid and aligned for
        // AtomicU64, which has the layout of u64. The reference lives no longer
        // than `self`, which owns the mapping. Concurrent writers in other
        // processes only use atomic stores on these words.
        unsafe { &*(self.map.as_ptr().add(offset) as *const AtomicU64) }
    }

    /// Path of the backing file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of worker blocks.
    pub fn n_workers(&self) -> usize {
        self.n_workers
    }

    pub fn pid(&self) -> u32 {
        (self.word(24).load(Ordering::Relaxed) >> 32) as u32
    }

    fn set_pid(&self, pid: u32) {
        let w = self.word(24);
        let stride = w.load(Ordering::Relaxed) & 0xffff_ffff;
        w.store(stride | (u64::from(pid) << 32), Ordering::Relaxed);
    }

    pub fn run_state(&self) -> RunState {
        RunState::from_raw(self.word(32).load(Ordering::Acquire))
    }

    pub fn set_run_state(&self, s: RunState) {
        self.word(32).store(s.to_raw(), Ordering::Release);
    }

    /// The block of worker `i`, or None if out of range.
    pub fn worker(&self, i: usize) -> Option<WorkerState<'_>> {
        (i < self.n_workers).then(|| WorkerState {
            region: self,
            base: HEADER_LEN + i * self.stride,
        })
    }

    /// Sum of one counter over all workers.
    pub fn total(&self, c: Counter) -> u64 {
        (0..self.n_workers)
            .filter_map(|i| self.worker(i))
            .map(|w| w.get(c))
            .sum()
    }

    /// One VIP statistic (by [`vip_stat_key`]) summed over workers.
    pub fn vip_total(&self, key: u32, stat: FlowStat) -> u64 {
        (0..self.n_workers)
            .filter_map(|i| self.worker(i))
            .map(|w| w.vip_stats().total(key, stat))
            .sum()
    }

    /// One backend statistic (by backend id) summed over workers.
    pub fn backend_total(&self, key: u32, stat: FlowStat) -> u64 {
        (0..self.n_workers)
            .filter_map(|i| self.worker(i))
            .map(|w| w.backend_stats().total(key, stat))
            .sum()
    }

    /// Full-NAT tuple use per local address, summed over workers (each
    /// worker owns its own ports of every address), in the order the
    /// addresses first appear.
    pub fn local_pool_totals(&self) -> Vec<LocalPoolUse> {
        let mut out: Vec<LocalPoolUse> = Vec::new();
        for w in (0..self.n_workers).filter_map(|i| self.worker(i)) {
            for u in w.local_pools().iter() {
                match out.iter_mut().find(|o| o.addr == u.addr) {
                    Some(o) => {
                        o.tuples += u.tuples;
                        o.in_use += u.in_use;
                        o.resting += u.resting;
                    }
                    None => out.push(u),
                }
            }
        }
        out
    }

    fn port_slot(&self, slot: usize) -> usize {
        HEADER_FIXED + slot * PORT_SLOT_LEN
    }

    /// Names the port slots, in order (border-dp, once, before it copies
    /// any statistics). Names are cut to [`PORT_NAME_LEN`] bytes; ports
    /// beyond [`MAX_PORT_SLOTS`] get no slot. Returns the slots named.
    pub fn name_ports(&self, ports: &[(&str, PortRole)]) -> usize {
        for (slot, (name, role)) in ports.iter().take(MAX_PORT_SLOTS).enumerate() {
            let base = self.port_slot(slot);
            let mut bytes = [0u8; PORT_NAME_LEN];
            let n = name.len().min(PORT_NAME_LEN);
            bytes[..n].copy_from_slice(&name.as_bytes()[..n]);
            for (i, chunk) in bytes.chunks_exact(8).enumerate() {
                let word = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
                self.word(base + 8 + i * 8).store(word, Ordering::Relaxed);
            }
            let role = match role {
                PortRole::Data => 0u64,
                PortRole::Twin => 1,
            };
            // Release: a reader that sees the tag sees the name.
            self.word(base)
                .store(NAMED | role << 8 | n as u64, Ordering::Release);
        }
        ports.len().min(MAX_PORT_SLOTS)
    }

    /// Copies one port's statistics (values in [`PortStat::ALL`] order)
    /// into `slot`. Single writer: border-dp's main thread.
    pub fn set_port_stats(&self, slot: usize, stats: &[u64; PortStat::COUNT], now_unix_ms: u64) {
        if slot >= MAX_PORT_SLOTS {
            return;
        }
        let base = self.port_slot(slot);
        for (i, v) in stats.iter().enumerate() {
            self.word(base + 48 + i * 8).store(*v, Ordering::Relaxed);
        }
        self.word(base + 40).store(now_unix_ms, Ordering::Release);
    }

    /// Every named port slot, in the order border-dp named them.
    pub fn ports(&self) -> Vec<PortSnapshot> {
        let mut out = Vec::new();
        for slot in 0..MAX_PORT_SLOTS {
            let base = self.port_slot(slot);
            let tag = self.word(base).load(Ordering::Acquire);
            if tag & NAMED == 0 {
                break;
            }
            let len = ((tag & 0xff) as usize).min(PORT_NAME_LEN);
            let mut bytes = [0u8; PORT_NAME_LEN];
            for (i, chunk) in bytes.chunks_exact_mut(8).enumerate() {
                let word = self.word(base + 8 + i * 8).load(Ordering::Relaxed);
                chunk.copy_from_slice(&word.to_le_bytes());
            }
            let role = if (tag >> 8) & 0xff == 1 {
                PortRole::Twin
            } else {
                PortRole::Data
            };
            let updated_unix_ms = self.word(base + 40).load(Ordering::Acquire);
            let mut stats = [0u64; PortStat::COUNT];
            for (i, v) in stats.iter_mut().enumerate() {
                *v = self.word(base + 48 + i * 8).load(Ordering::Relaxed);
            }
            out.push(PortSnapshot {
                name: String::from_utf8_lossy(&bytes[..len]).into_owned(),
                role,
                updated_unix_ms,
                stats,
            });
        }
        out
    }

    /// Snapshot of every counter summed over workers, in index order.
    pub fn totals(&self) -> Vec<(Counter, u64)> {
        Counter::ALL.iter().map(|&c| (c, self.total(c))).collect()
    }
}

/// One worker's block in the state region.
#[derive(Clone, Copy)]
pub struct WorkerState<'a> {
    region: &'a StateRegion,
    base: usize,
}

impl<'a> WorkerState<'a> {
    pub fn lcore(&self) -> u64 {
        self.region.word(self.base).load(Ordering::Relaxed)
    }
    pub fn applied_generation(&self) -> u64 {
        self.region.word(self.base + 8).load(Ordering::Acquire)
    }
    pub fn set_applied_generation(&self, g: u64) {
        self.region.word(self.base + 8).store(g, Ordering::Release)
    }
    pub fn heartbeat(&self) -> u64 {
        self.region.word(self.base + 16).load(Ordering::Relaxed)
    }
    pub fn get(&self, c: Counter) -> u64 {
        self.counter_word(c).load(Ordering::Relaxed)
    }
    /// Resolves the counter words once so the hot loop does plain adds.
    pub fn counters(&self) -> CounterBlock<'a> {
        let first = self.base + WORKER_FIXED;
        let n = self.region.n_counters;
        assert!(first.is_multiple_of(8) && first + n * 8 <= self.region.map.len());
        // SAFETY: the block's counter words lie inside the mapping (asserted),
        // start 8-aligned in a page-aligned mapping, and AtomicU64 has the
        // layout of u64; the slice borrows the region, which owns the mapping.
        let words = unsafe {
            std::slice::from_raw_parts(self.region.map.as_ptr().add(first) as *const AtomicU64, n)
        };
        CounterBlock {
            heartbeat: self.region.word(self.base + 16),
            words,
        }
    }
    fn words(&self, first: usize, n: usize) -> &'a [AtomicU64] {
        assert!(first.is_multiple_of(8) && first + n * 8 <= self.region.map.len());
        // SAFETY: the words lie inside the mapping (asserted), start 8-aligned
        // in a page-aligned mapping, and AtomicU64 has the layout of u64; the
        // slice borrows the region, which owns the mapping.
        unsafe {
            std::slice::from_raw_parts(self.region.map.as_ptr().add(first) as *const AtomicU64, n)
        }
    }

    /// The worker's per-VIP statistics.
    pub fn vip_stats(&self) -> FlowStats<'a> {
        FlowStats(self.words(self.base + counters_len(), MAX_VIPS * FLOW_WORDS))
    }

    /// The worker's per-backend statistics.
    pub fn backend_stats(&self) -> FlowStats<'a> {
        FlowStats(self.words(
            self.base + counters_len() + MAX_VIPS * FLOW_WORDS * 8,
            MAX_BACKENDS * FLOW_WORDS,
        ))
    }

    /// The worker's full-NAT local-address pool use.
    pub fn local_pools(&self) -> LocalPoolStats<'a> {
        LocalPoolStats(self.words(
            self.base + counters_len() + (MAX_VIPS + MAX_BACKENDS) * FLOW_WORDS * 8,
            MAX_LOCAL_POOLS * POOL_WORDS,
        ))
    }

    fn counter_word(&self, c: Counter) -> &'a AtomicU64 {
        self.region.word(self.base + WORKER_FIXED + c.index() * 8)
    }
}

/// Statistics of one worker: an open-addressing table of slots keyed by a
/// stable 32-bit key (a VIP's [`vip_stat_key`], a backend's id), so counters
/// follow a VIP or backend across table generations and config reorderings.
/// Only the owning worker writes; it resolves keys to slots when it adopts a
/// table ([`FlowStats::slot_for`]) and bumps slots by index on the fast path.
/// Slots are never freed: a backend that comes back finds its counters.
#[derive(Clone, Copy)]
pub struct FlowStats<'a>(&'a [AtomicU64]);

impl<'a> FlowStats<'a> {
    /// Statistics backed by leaked process memory, for tests and benchmarks.
    pub fn detached(slots: usize) -> FlowStats<'static> {
        let v: Vec<AtomicU64> = (0..slots * FLOW_WORDS).map(|_| AtomicU64::new(0)).collect();
        FlowStats(Box::leak(v.into_boxed_slice()))
    }

    fn slots(&self) -> usize {
        self.0.len() / FLOW_WORDS
    }

    fn probe(&self, key: u32) -> impl Iterator<Item = usize> {
        let n = self.slots();
        let start = (u64::from(key).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % n.max(1);
        (0..n).map(move |i| (start + i) % n)
    }

    /// The slot of `key`, claiming a free one (counters zeroed) if it has
    /// none. None when every slot is taken. Writer (owning worker) only.
    pub fn slot_for(&self, key: u32) -> Option<u32> {
        let key = u64::from(stat_key(key));
        for slot in self.probe(key as u32) {
            let w = &self.0[slot * FLOW_WORDS];
            match w.load(Ordering::Acquire) {
                k if k == key => return Some(slot as u32),
                0 => {
                    for word in &self.0[slot * FLOW_WORDS + 1..(slot + 1) * FLOW_WORDS] {
                        word.store(0, Ordering::Relaxed);
                    }
                    w.store(key, Ordering::Release);
                    return Some(slot as u32);
                }
                _ => {}
            }
        }
        None
    }

    /// The slot of `key`, if it has one.
    pub fn find(&self, key: u32) -> Option<u32> {
        let key = u64::from(stat_key(key));
        for slot in self.probe(key as u32) {
            match self.0[slot * FLOW_WORDS].load(Ordering::Acquire) {
                k if k == key => return Some(slot as u32),
                0 => return None,
                _ => {}
            }
        }
        None
    }

    #[inline]
    fn word(&self, slot: u32, stat: FlowStat) -> Option<&AtomicU64> {
        self.0.get(slot as usize * FLOW_WORDS + 1 + stat as usize)
    }

    #[inline]
    pub fn add(&self, slot: u32, stat: FlowStat, n: u64) {
        if let Some(w) = self.word(slot, stat) {
            w.store(w.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
        }
    }

    #[inline]
    pub fn sub(&self, slot: u32, stat: FlowStat, n: u64) {
        if let Some(w) = self.word(slot, stat) {
            w.store(w.load(Ordering::Relaxed).wrapping_sub(n), Ordering::Relaxed);
        }
    }

    /// A statistic by slot.
    #[inline]
    pub fn get(&self, slot: u32, stat: FlowStat) -> u64 {
        self.word(slot, stat)
            .map_or(0, |w| w.load(Ordering::Relaxed))
    }

    /// A statistic by key (0 when the key has no slot).
    pub fn total(&self, key: u32, stat: FlowStat) -> u64 {
        self.find(key).map_or(0, |s| self.get(s, stat))
    }
}

/// Full-NAT tuple use of one local address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalPoolUse {
    pub addr: std::net::IpAddr,
    /// Tuples (ports) of the address the worker(s) own.
    pub tuples: u64,
    /// Held by connection-table entries.
    pub in_use: u64,
    /// Free but resting after their last connection.
    pub resting: u64,
}

/// One worker's full-NAT local-address pool use: slot `i` is the worker's
/// `i`-th local address, rewritten by the worker about once a second (a
/// reader may see one slot's figures from two consecutive passes).
#[derive(Clone, Copy)]
pub struct LocalPoolStats<'a>(&'a [AtomicU64]);

impl LocalPoolStats<'_> {
    /// Pool statistics backed by leaked process memory (tests, benchmarks).
    pub fn detached() -> LocalPoolStats<'static> {
        let v: Vec<AtomicU64> = (0..MAX_LOCAL_POOLS * POOL_WORDS)
            .map(|_| AtomicU64::new(0))
            .collect();
        LocalPoolStats(Box::leak(v.into_boxed_slice()))
    }

    /// Writes slot `i` (ignored past [`MAX_LOCAL_POOLS`]). Owning worker only.
    pub fn set(&self, i: usize, addr16: [u8; 16], tuples: u64, in_use: u64, resting: u64) {
        let Some(w) = self.0.get(i * POOL_WORDS..(i + 1) * POOL_WORDS) else {
            return;
        };
        let a = u128::from_be_bytes(addr16);
        let values = [1, (a >> 64) as u64, a as u64, tuples, in_use, resting];
        for (word, v) in w.iter().zip(values) {
            word.store(v, Ordering::Relaxed);
        }
    }

    /// Empties the slots from `i` on (the worker has fewer addresses now).
    pub fn clear_from(&self, i: usize) {
        for w in self.0.iter().skip(i * POOL_WORDS).step_by(POOL_WORDS) {
            w.store(0, Ordering::Relaxed);
        }
    }

    /// The addresses shown, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = LocalPoolUse> + '_ {
        self.0
            .chunks_exact(POOL_WORDS)
            .map(|w| {
                w.iter()
                    .map(|x| x.load(Ordering::Relaxed))
                    .collect::<Vec<u64>>()
            })
            .filter(|w| w[0] == 1)
            .map(|w| {
                let a = std::net::Ipv6Addr::from(u128::from(w[1]) << 64 | u128::from(w[2]));
                LocalPoolUse {
                    addr: a
                        .to_ipv4_mapped()
                        .map_or(std::net::IpAddr::V6(a), std::net::IpAddr::V4),
                    tuples: w[3],
                    in_use: w[4],
                    resting: w[5],
                }
            })
    }
}

/// The counters of one worker, resolved to atomics. Only the owning worker
/// may call the mutating methods (single writer).
pub struct CounterBlock<'a> {
    heartbeat: &'a AtomicU64,
    words: &'a [AtomicU64],
}

impl CounterBlock<'_> {
    /// Adds `n` to a counter. Single writer: a relaxed load and store, no lock prefix.
    #[inline]
    pub fn add(&self, c: Counter, n: u64) {
        let w = &self.words[c.index()];
        w.store(w.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }
    #[inline]
    pub fn inc(&self, c: Counter) {
        self.add(c, 1)
    }
    #[inline]
    pub fn get(&self, c: Counter) -> u64 {
        self.words[c.index()].load(Ordering::Relaxed)
    }
    /// Overwrites a counter with a value the worker kept locally.
    #[inline]
    pub fn set(&self, c: Counter, v: u64) {
        self.words[c.index()].store(v, Ordering::Relaxed);
    }
    #[inline]
    pub fn beat(&self) {
        self.add_heartbeat()
    }
    fn add_heartbeat(&self) {
        let w = self.heartbeat;
        w.store(w.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("border-state-test-{}-{name}", std::process::id()))
    }

    #[test]
    fn local_pool_use_sums_over_workers_by_address() {
        let path = tmp("pools");
        let r = StateRegion::create(&path, &[1, 2]).unwrap();
        let v4 = |a: [u8; 4]| std::net::Ipv4Addr::from(a).to_ipv6_mapped().octets();
        let v6: std::net::Ipv6Addr = "fd00::1".parse().unwrap();
        let (w0, w1) = (r.worker(0).unwrap(), r.worker(1).unwrap());
        w0.local_pools().set(0, v4([10, 0, 0, 1]), 100, 7, 3);
        w0.local_pools().set(1, v6.octets(), 50, 1, 0);
        w1.local_pools().set(0, v4([10, 0, 0, 1]), 100, 2, 1);
        let reader = StateRegion::open(&path).unwrap();
        let totals = reader.local_pool_totals();
        let a: std::net::IpAddr = "10.0.0.1".parse().unwrap();
        assert_eq!(
            totals,
            [
                LocalPoolUse {
                    addr: a,
                    tuples: 200,
                    in_use: 9,
                    resting: 4
                },
                LocalPoolUse {
                    addr: v6.into(),
                    tuples: 50,
                    in_use: 1,
                    resting: 0
                },
            ]
        );
        w0.local_pools().clear_from(1);
        assert_eq!(reader.local_pool_totals().len(), 1);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn writer_and_reader_agree() {
        let p = tmp("agree");
        let w = StateRegion::create(&p, &[1, 3]).unwrap();
        let block = w.worker(1).unwrap().counters();
        block.add(Counter::RxPackets, 5);
        block.inc(Counter::DropMalformed);
        block.beat();
        w.worker(0).unwrap().set_applied_generation(7);
        w.set_run_state(RunState::Running);
        let s1 = w.worker(1).unwrap().vip_stats().slot_for(7).unwrap();
        w.worker(1)
            .unwrap()
            .vip_stats()
            .add(s1, FlowStat::Packets, 3);
        let s0 = w.worker(0).unwrap().vip_stats().slot_for(7).unwrap();
        w.worker(0)
            .unwrap()
            .vip_stats()
            .add(s0, FlowStat::Packets, 2);
        let b = w
            .worker(0)
            .unwrap()
            .backend_stats()
            .slot_for(65535)
            .unwrap();
        w.worker(0)
            .unwrap()
            .backend_stats()
            .add(b, FlowStat::Bytes, 9);
        w.worker(0)
            .unwrap()
            .backend_stats()
            .add(u32::MAX, FlowStat::Bytes, 9);

        let r = StateRegion::open(&p).unwrap();
        assert_eq!(r.n_workers(), 2);
        assert_eq!(r.pid(), std::process::id());
        assert_eq!(r.run_state(), RunState::Running);
        assert_eq!(r.worker(1).unwrap().lcore(), 3);
        assert_eq!(r.worker(1).unwrap().get(Counter::RxPackets), 5);
        assert_eq!(r.worker(1).unwrap().heartbeat(), 1);
        assert_eq!(r.worker(0).unwrap().applied_generation(), 7);
        assert_eq!(r.total(Counter::DropMalformed), 1);
        assert_eq!(r.vip_total(7, FlowStat::Packets), 5);
        assert_eq!(r.backend_total(65535, FlowStat::Bytes), 9);
        assert_eq!(
            r.backend_total(65536, FlowStat::Bytes),
            0,
            "unknown keys read 0"
        );
        assert_eq!(r.worker(0).unwrap().vip_stats().find(8), None);
        assert!(r.worker(2).is_none());
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn stat_slots_are_stable_and_bounded() {
        let s = FlowStats::detached(8);
        let a = s.slot_for(42).unwrap();
        assert_eq!(s.slot_for(42), Some(a));
        s.add(a, FlowStat::NewConnections, 2);
        let keys: Vec<u32> = (100..107).collect();
        let slots: Vec<u32> = keys.iter().map(|k| s.slot_for(*k).unwrap()).collect();
        let mut all = slots.clone();
        all.push(a);
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 8, "distinct keys get distinct slots");
        assert_eq!(s.slot_for(999), None, "full");
        assert_eq!(s.total(42, FlowStat::NewConnections), 2);
        assert_eq!(s.find(0), s.find(1), "key 0 is stored as 1");
        assert_eq!(vip_stat_key("web"), vip_stat_key("web"));
        assert_ne!(vip_stat_key("web"), vip_stat_key("web6"));
    }

    #[test]
    fn port_stats_round_trip() {
        let p = tmp("ports");
        let w = StateRegion::create(&p, &[1, 2]).unwrap();
        assert_eq!(StateRegion::open(&p).unwrap().ports(), vec![]);
        let long = "x".repeat(40);
        let named = w.name_ports(&[
            ("ext", PortRole::Data),
            ("kps-ext", PortRole::Twin),
            (&long, PortRole::Data),
        ]);
        assert_eq!(named, 3);
        let mut stats = [0u64; PortStat::COUNT];
        for (i, v) in stats.iter_mut().enumerate() {
            *v = 100 + i as u64;
        }
        w.set_port_stats(1, &stats, 1234);
        w.set_port_stats(MAX_PORT_SLOTS, &stats, 1); // no such slot: ignored
        w.worker(0).unwrap().counters().add(Counter::RxPackets, 3);

        let r = StateRegion::open(&p).unwrap();
        let ports = r.ports();
        assert_eq!(ports.len(), 3);
        assert_eq!(ports[0].name, "ext");
        assert_eq!(ports[0].role, PortRole::Data);
        assert_eq!(ports[0].updated_unix_ms, 0);
        assert_eq!(ports[0].stats, [0; PortStat::COUNT]);
        assert_eq!(ports[1].name, "kps-ext");
        assert_eq!(ports[1].role, PortRole::Twin);
        assert_eq!(ports[1].updated_unix_ms, 1234);
        assert_eq!(ports[1].get(PortStat::Ipackets), 100);
        assert_eq!(ports[1].get(PortStat::RxNombuf), 107);
        assert_eq!(ports[2].name, "x".repeat(PORT_NAME_LEN), "cut, not refused");
        // The port slots live in the header: worker blocks are untouched.
        assert_eq!(r.total(Counter::RxPackets), 3);
        assert_eq!(r.worker(1).unwrap().lcore(), 2);

        let all: Vec<(&str, PortRole)> = (0..MAX_PORT_SLOTS + 2)
            .map(|_| ("p", PortRole::Data))
            .collect();
        assert_eq!(w.name_ports(&all), MAX_PORT_SLOTS);
        assert_eq!(r.ports().len(), MAX_PORT_SLOTS);
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn port_stat_names_are_unique_and_in_order() {
        for (i, s) in PortStat::ALL.iter().enumerate() {
            assert_eq!(*s as usize, i);
            assert!(!s.help().is_empty());
        }
        let mut names: Vec<_> = PortStat::ALL.iter().map(|s| s.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), PortStat::COUNT);
    }

    #[test]
    fn garbage_is_refused_with_a_reason() {
        let p = tmp("garbage");
        std::fs::write(&p, b"short").unwrap();
        assert!(matches!(
            StateRegion::open(&p),
            Err(StateError::Corrupt { .. })
        ));
        std::fs::write(&p, vec![0xAB; 4096]).unwrap();
        assert!(matches!(
            StateRegion::open(&p),
            Err(StateError::BadMagic { .. })
        ));

        let w = StateRegion::create(&p, &[1]).unwrap();
        drop(w);
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[8] = 99;
        std::fs::write(&p, &bytes).unwrap();
        let e = StateRegion::open(&p).unwrap_err().to_string();
        assert!(
            e.contains("layout version 99")
                && e.contains(&format!("speaks {STATE_LAYOUT_VERSION}")),
            "{e}"
        );

        bytes[8] = STATE_LAYOUT_VERSION as u8;
        bytes[16..20].copy_from_slice(&5u32.to_le_bytes()); // claims 5 workers
        std::fs::write(&p, &bytes).unwrap();
        let e = StateRegion::open(&p).unwrap_err().to_string();
        assert!(e.contains("5 workers need"), "{e}");
        std::fs::remove_file(&p).unwrap();
    }
}
