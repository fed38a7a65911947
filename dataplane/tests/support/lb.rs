//! Fixtures shared by the load-balancer pipeline tests (`lb_*.rs`,
//! `pipeline_*.rs`): a two-port appliance built from a config, workers over
//! in-memory ports with a controllable clock and table feed, frames built
//! with etherparse, and a decoder that checks every checksum of what the
//! pipeline sent with etherparse's own calculations.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use conf::counters::Counter;
use conf::state::{FlowStat, FlowStats};
use conf::Config;
use dataplane::conntrack::Timeouts;
use dataplane::io::MemPorts;
use dataplane::lb::{Adopted, Lb};
use dataplane::neigh::NeighborSync;
use dataplane::pipeline::Pipeline;
use dataplane::port::ports_from_config;
use dataplane::standalone::adopted_from_config;
use dataplane::verdict::Verdict;
use dataplane::wire::parse_frame;
use dataplane::worker::{Clock, Handoff, Poll, TablePoll, TableSource, Worker};
use etherparse::{
    Icmpv4Type, Icmpv6Type, IpNumber, Ipv4HeaderSlice, Ipv6HeaderSlice, LinkSlice, NetSlice,
    PacketBuilder, SlicedPacket, TcpHeader, TcpSlice, TransportSlice, UdpHeader,
};

pub const EXT: usize = 0;
pub const INT: usize = 1;
pub const EXT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x01, 0x01];
pub const INT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x02, 0x01];
pub const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0xc1, 0x01];
/// A router on the client side that sends ICMP errors.
pub const ROUTER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0xc1, 0xfe];

pub const CLIENT4: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 50);
pub const CLIENT6: Ipv6Addr = Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 0x50);
pub const ROUTER4: Ipv4Addr = Ipv4Addr::new(10, 2, 0, 254);
pub const ROUTER6: Ipv6Addr = Ipv6Addr::new(0xfd00, 2, 0, 0, 0, 0, 0, 0xfe);
/// Full-NAT VIP: TCP 80 (VIP id 0) and UDP 53 (VIP id 1).
pub const VIP4: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 100);
/// Full-NAT VIP, TCP 80 (VIP id 2).
pub const VIP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 0x100);
/// DNAT VIP, TCP 80 (VIP id 3).
pub const DNAT4: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 101);
/// DNAT VIP, TCP 80 (VIP id 4).
pub const DNAT6: Ipv6Addr = Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 0x101);
/// Full-NAT VIP without backends, TCP 80 (VIP id 5).
pub const EMPTY4: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 102);
/// The `int` port's address, also its full-NAT pool address.
pub const LOCAL4: Ipv4Addr = Ipv4Addr::new(10, 2, 0, 1);
pub const LOCAL6: Ipv6Addr = Ipv6Addr::new(0xfd00, 2, 0, 0, 0, 0, 0, 1);
pub const POOL: (u16, u16) = (1024, 32767);

pub const VIP_TCP4: u32 = 0;
pub const VIP_UDP4: u32 = 1;
pub const VIP_TCP6: u32 = 2;
pub const VIP_DNAT4: u32 = 3;
pub const VIP_DNAT6: u32 = 4;
pub const VIP_EMPTY: u32 = 5;

/// Backend `i` of the full-NAT IPv4 VIPs: 10.2.0.(11 + i).
pub fn fnat_backend4(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 2, 0, 11 + i)
}
/// Backend `i` of the full-NAT IPv6 VIP: fd00:2::(0x11 + i).
pub fn fnat_backend6(i: u8) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 2, 0, 0, 0, 0, 0, 0x11 + u16::from(i))
}
/// Backend `i` of the DNAT IPv4 VIP: 10.2.0.(21 + i).
pub fn dnat_backend4(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 2, 0, 21 + i)
}
/// Backend `i` of the DNAT IPv6 VIP: fd00:2::(0x21 + i).
pub fn dnat_backend6(i: u8) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 2, 0, 0, 0, 0, 0, 0x21 + u16::from(i))
}

/// The MAC the test gives a host on the backend side: derived from its
/// address's last byte so an expected MAC follows from the chosen backend.
pub fn host_mac(ip: IpAddr) -> [u8; 6] {
    let last = match ip {
        IpAddr::V4(a) => a.octets()[3],
        IpAddr::V6(a) => a.octets()[15],
    };
    [0x02, 0, 0, 0, if ip.is_ipv4() { 0xb4 } else { 0xb6 }, last]
}

/// Every backend address of [`config_text`] with `tcp4_weights.len()` TCP backends.
pub fn all_backends(n_tcp4: usize) -> Vec<IpAddr> {
    let mut v: Vec<IpAddr> = (0..n_tcp4.max(3) as u8)
        .map(|i| fnat_backend4(i).into())
        .collect();
    v.extend((0..3).map(|i| IpAddr::from(fnat_backend6(i))));
    v.extend((0..3).map(|i| IpAddr::from(dnat_backend4(i))));
    v.extend((0..3).map(|i| IpAddr::from(dnat_backend6(i))));
    v
}

/// The appliance's config. `tcp4_weights` gives the backends of the full-NAT
/// TCP VIP 10.1.0.100:80 (10.2.0.11, .12, ... with these weights); the
/// other VIPs have three backends of weight 1.
pub fn config_text(tcp4_weights: &[u32]) -> String {
    let mut c = String::from(
        r#"
instance = "lbtest"
[dataplane]
main_lcore = 0
worker_lcores = [1]
conntrack_per_worker = 1024
flow_hash_key = "00112233445566778899aabbccddeeff"

[[port]]
name = "ext"
devargs = "net_null0"
addresses = ["10.1.0.1/24", "fd00:1::1/64"]

[[port]]
name = "int"
devargs = "net_null1"
addresses = ["10.2.0.1/24", "fd00:2::1/64"]
local_addresses = ["10.2.0.1", "fd00:2::1"]
local_port_range = [1024, 32767]

[mgmt]
listen = "unix:///run/border/lbtest.sock"
"#,
    );
    let vip = |c: &mut String, name: &str, addr: &str, port: u16, proto: &str, mode: &str| {
        c.push_str(&format!(
            "\n[[vip]]\nname = \"{name}\"\naddress = \"{addr}\"\nport = {port}\nprotocol = \"{proto}\"\nmode = \"{mode}\"\nmaglev_table_size = 1021\n"
        ));
    };
    let backend = |c: &mut String, addr: IpAddr, port: u16, weight: u32| {
        c.push_str(&format!(
            "[[vip.backend]]\naddress = \"{addr}\"\nport = {port}\nweight = {weight}\n"
        ));
    };
    vip(&mut c, "tcp4", "10.1.0.100", 80, "tcp", "fullnat");
    for (i, w) in tcp4_weights.iter().enumerate() {
        backend(&mut c, fnat_backend4(i as u8).into(), 8080, *w);
    }
    vip(&mut c, "udp4", "10.1.0.100", 53, "udp", "fullnat");
    for i in 0..3 {
        backend(&mut c, fnat_backend4(i).into(), 5353, 1);
    }
    vip(&mut c, "tcp6", "fd00:1::100", 80, "tcp", "fullnat");
    for i in 0..3 {
        backend(&mut c, fnat_backend6(i).into(), 8080, 1);
    }
    vip(&mut c, "dnat4", "10.1.0.101", 80, "tcp", "dnat");
    for i in 0..3 {
        backend(&mut c, dnat_backend4(i).into(), 8080, 1);
    }
    vip(&mut c, "dnat6", "fd00:1::101", 80, "tcp", "dnat");
    for i in 0..3 {
        backend(&mut c, dnat_backend6(i).into(), 8080, 1);
    }
    vip(&mut c, "empty", "10.1.0.102", 80, "tcp", "fullnat");
    c
}

pub fn config(tcp4_weights: &[u32]) -> Config {
    Config::from_toml_str(&config_text(tcp4_weights), "lbtest.toml").expect("test config")
}

pub fn tables(tcp4_weights: &[u32], generation: u64) -> Adopted<'static> {
    adopted_from_config(&config(tcp4_weights), generation).expect("tables")
}

/// Config and generation 1 for the default weights, built once per process
/// (the fuzz target builds a fresh appliance per input).
fn default_setup() -> &'static (Config, Adopted<'static>) {
    static CACHE: std::sync::OnceLock<(Config, Adopted<'static>)> = std::sync::OnceLock::new();
    CACHE.get_or_init(|| (config(&[1, 1, 1]), tables(&[1, 1, 1], 1)))
}

/// A clock the test moves by hand.
#[derive(Clone, Default)]
pub struct TestClock(pub Arc<AtomicU64>);

impl Clock for TestClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A table source the test publishes generations into.
#[derive(Clone, Default)]
pub struct Feed(pub Arc<Mutex<Option<Adopted<'static>>>>);

impl TableSource for Feed {
    fn poll(&mut self, _current: Option<u64>) -> TablePoll {
        match self.0.lock().unwrap().take() {
            Some(t) => TablePoll::New(Box::new(t)),
            None => TablePoll::Nothing,
        }
    }
    fn has_news(&self, _current: Option<u64>) -> bool {
        self.0.lock().unwrap().is_some()
    }
}

pub type TestWorker = Worker<MemPorts, TestClock, Feed>;

/// One worker of the appliance with handles on its clock, table feed and
/// per-VIP / per-backend statistics.
pub struct Node {
    pub w: TestWorker,
    pub clock: TestClock,
    pub feed: Feed,
    pub vip_stats: FlowStats<'static>,
    pub backend_stats: FlowStats<'static>,
}

/// How to build the workers of a test.
pub struct Setup {
    pub workers: usize,
    pub conntrack: usize,
    pub tcp4_weights: Vec<u32>,
    /// Teach every worker the MAC of every backend before the first poll.
    pub learn_backends: bool,
    /// Reuse one process-wide set of statistics per worker index instead of
    /// fresh (leaked) ones: for the fuzz target, which builds an appliance
    /// per input. Counts then carry over between appliances.
    pub shared_stats: bool,
    /// The `int` port's `local_port_range` (default `POOL`).
    pub pool: (u16, u16),
    pub timeouts: Timeouts,
    /// A replacement made in the config text (`from`, `to`).
    pub edit: Option<(&'static str, &'static str)>,
    /// `syn_proxy` of every TCP VIP (default: not set, "off").
    pub syn_proxy: Option<&'static str>,
    /// `mtu` of the `ext` and `int` ports (default: not set, 1500).
    pub mtu: Option<(u16, u16)>,
    /// Connection records into this region (worker `w` writes ring `w`),
    /// and `log_empty`.
    pub records: Option<(&'static conf::records::RecordsRegion, bool)>,
    /// Keep worker `w`'s table in the flows region `<prefix>-<w>`, and
    /// adopt these previous flows.
    pub flows: Option<(
        std::path::PathBuf,
        Option<std::sync::Arc<dataplane::flows_region::PreviousFlows>>,
    )>,
    /// Walks of the live connections served through this region (worker
    /// `w` through ring `w`).
    pub conns: Option<&'static conf::conns::ConnsRegion>,
    /// The generation of the flows regions `flows` creates.
    pub flows_generation: u64,
    /// The layout they are written in (default: this build's).
    pub flows_layout: Option<dataplane::flows_region::Layout>,
    /// Counts the workers that have adopted the previous flows.
    pub adopt_done: Option<std::sync::Arc<std::sync::atomic::AtomicUsize>>,
    /// Each worker stops adopting after this many entries (a crash).
    pub halt_after: Option<u64>,
    /// Keep worker `w`'s neighbour records and pins in the carry region
    /// `<prefix>-<w>`, and adopt these previous ones (with `flows`).
    pub carry: Option<(
        std::path::PathBuf,
        Option<std::sync::Arc<dataplane::carry_region::PreviousCarry>>,
    )>,
}

/// Statistics (VIP, backend) of worker `w` shared by every appliance built
/// with `shared_stats` (at most 8 workers).
fn shared_stats(w: usize) -> (FlowStats<'static>, FlowStats<'static>) {
    static STATS: std::sync::OnceLock<Vec<(FlowStats<'static>, FlowStats<'static>)>> =
        std::sync::OnceLock::new();
    STATS.get_or_init(|| {
        (0..8)
            .map(|_| (FlowStats::detached(64), FlowStats::detached(256)))
            .collect()
    })[w]
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            workers: 1,
            conntrack: 1024,
            tcp4_weights: vec![1, 1, 1],
            learn_backends: true,
            shared_stats: false,
            pool: POOL,
            timeouts: Timeouts::default(),
            edit: None,
            syn_proxy: None,
            mtu: None,
            records: None,
            flows: None,
            conns: None,
            flows_generation: 1,
            flows_layout: None,
            adopt_done: None,
            halt_after: None,
            carry: None,
        }
    }
}

/// Two workers (default setup), each polled once: generation 1 adopted.
pub fn two_workers() -> Vec<Node> {
    Setup {
        workers: 2,
        ..Setup::default()
    }
    .build_polled()
}

impl Setup {
    /// [`Setup::build`], then one poll of each worker: generation 1 adopted.
    pub fn build_polled(&self) -> Vec<Node> {
        let mut nodes = self.build();
        for n in &mut nodes {
            n.poll();
        }
        nodes
    }

    /// The workers, sharing handoff queues and neighbour inboxes, each with
    /// generation 1 queued in its feed (adopted by the first poll).
    pub fn build(&self) -> Vec<Node> {
        let (cfg, gen1) = if self.pool != POOL
            || self.edit.is_some()
            || self.syn_proxy.is_some()
            || self.mtu.is_some()
        {
            let mut text = config_text(&self.tcp4_weights).replace(
                "local_port_range = [1024, 32767]",
                &format!("local_port_range = [{}, {}]", self.pool.0, self.pool.1),
            );
            if let Some((from, to)) = self.edit {
                assert!(text.contains(from), "config edit: {from:?} not found");
                text = text.replacen(from, to, 1);
            }
            if let Some((ext, int)) = self.mtu {
                for (dev, mtu) in [("net_null0", ext), ("net_null1", int)] {
                    let line = format!("devargs = \"{dev}\"\n");
                    text = text.replacen(&line, &format!("{line}mtu = {mtu}\n"), 1);
                }
            }
            if let Some(sp) = self.syn_proxy {
                let with = format!("protocol = \"tcp\"\nsyn_proxy = \"{sp}\"\n");
                text = text.replace("protocol = \"tcp\"\n", &with);
            }
            let cfg = Config::from_toml_str(&text, "lbtest.toml").expect("test config");
            let gen1 = adopted_from_config(&cfg, 1).expect("tables");
            (cfg, gen1)
        } else if self.tcp4_weights == [1, 1, 1] {
            let (c, t) = default_setup();
            (c.clone(), t.clone())
        } else {
            (config(&self.tcp4_weights), tables(&self.tcp4_weights, 1))
        };
        let handoff = Handoff::new(self.workers);
        let sync = NeighborSync::new(self.workers);
        (0..self.workers)
            .map(|w| {
                let (vip_stats, backend_stats) = if self.shared_stats {
                    shared_stats(w)
                } else {
                    (FlowStats::detached(64), FlowStats::detached(256))
                };
                let mut lb = Lb::new(
                    w,
                    self.workers,
                    self.conntrack,
                    self.timeouts,
                    sync.clone(),
                    vip_stats,
                    backend_stats,
                );
                if let Some((prefix, previous)) = &self.flows {
                    let path = std::path::PathBuf::from(format!("{}-{w}", prefix.display()));
                    let words =
                        dataplane::conntrack::adopt::layout_words::<dataplane::lb::FlowRec>();
                    let bytes = dataplane::conntrack::adopt::slot_bytes::<dataplane::lb::FlowRec>();
                    let spec = dataplane::flows_region::Spec {
                        worker: w,
                        workers: self.workers,
                        capacity: self.conntrack,
                        slot_bytes: bytes,
                        words: &words,
                        meter_bytes: if self.records.is_some() {
                            dataplane::lb::METER_BYTES
                        } else {
                            0
                        },
                        generation: self.flows_generation,
                    };
                    let region = dataplane::flows_region::FlowsRegion::create_as(
                        &path,
                        &spec,
                        conf::os::files::Access::PRIVATE,
                        self.flows_layout
                            .unwrap_or_else(dataplane::flows_region::writing_layout),
                    )
                    .expect("flows region");
                    let (slab, meters) = region.into_parts::<
                        dataplane::conntrack::Entry<dataplane::lb::FlowRec>,
                        dataplane::lb::FlowMeter,
                    >();
                    lb.use_slab(slab);
                    if let Some(m) = meters {
                        lb.use_meters(m);
                    }
                    if let Some(p) = previous {
                        let mut prev = dataplane::lb::Previous::new(p.clone(), 0);
                        prev.done = self.adopt_done.clone();
                        prev.halt_after = self.halt_after.map(|n| (n, (|| {}) as fn()));
                        prev.carry = self.carry.as_ref().and_then(|(_, c)| c.clone());
                        lb.adopt_from(prev);
                    }
                }
                if let Some((prefix, _)) = &self.carry {
                    let path = std::path::PathBuf::from(format!("{}-{w}", prefix.display()));
                    let pins = dataplane::persist::Persist::new(dataplane::persist::entries_for(
                        self.conntrack,
                    ))
                    .capacity();
                    let region = dataplane::carry_region::CarryRegion::create(
                        &path,
                        (w, self.workers),
                        pins,
                        self.flows_generation,
                        conf::os::files::Access::PRIVATE,
                    )
                    .expect("carry region");
                    lb.use_carry(region.into_parts().expect("carry parts"));
                }
                if let Some((region, log_empty)) = self.records {
                    lb.enable_records(region.writer(w).expect("a ring per worker"), log_empty);
                }
                if let Some(region) = self.conns {
                    lb.enable_conns(region.exporter(w).expect("a ring per worker"));
                }
                if self.learn_backends {
                    for ip in all_backends(self.tcp4_weights.len()) {
                        lb.seed_neighbor(ip, host_mac(ip));
                    }
                }
                let pipeline =
                    Pipeline::new(ports_from_config(&cfg, &[EXT_MAC, INT_MAC], false), lb);
                let clock = TestClock::default();
                let feed = Feed::default();
                *feed.0.lock().unwrap() = Some(gen1.clone());
                let w = Worker::new(
                    MemPorts::new(2),
                    pipeline,
                    Poll::Busy,
                    clock.clone(),
                    feed.clone(),
                    handoff.clone(),
                );
                Node {
                    w,
                    clock,
                    feed,
                    vip_stats,
                    backend_stats,
                }
            })
            .collect()
    }

    /// The single worker of a one-worker setup, its tables adopted.
    pub fn node(&self) -> Node {
        let mut n = self.build().pop().expect("one worker");
        n.poll();
        n
    }
}

/// One worker with the default setup, tables adopted.
pub fn node() -> Node {
    Setup::default().node()
}

impl Node {
    pub fn poll(&mut self) -> usize {
        self.w.poll_once()
    }

    /// Receives `frame` on `port`, runs one poll iteration and returns what
    /// was sent on (ext, int).
    pub fn exchange(&mut self, port: usize, frame: &[u8]) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        self.w.io.inject(port, frame);
        self.poll();
        (self.w.io.take_tx(EXT), self.w.io.take_tx(INT))
    }

    /// Receives `frame` on `port` and returns the one frame sent out of
    /// `out` (panics if anything else was sent).
    pub fn forward(&mut self, port: usize, frame: &[u8], out: usize) -> Vec<u8> {
        let (ext, int) = self.exchange(port, frame);
        let (mine, other) = if out == EXT { (ext, int) } else { (int, ext) };
        assert!(
            other.is_empty(),
            "unexpected frames on the other port: {other:02x?}"
        );
        assert_eq!(
            mine.len(),
            1,
            "expected one frame out of port {out}: {mine:02x?}"
        );
        mine.into_iter().next().unwrap()
    }

    /// Receives `frame` and asserts nothing was sent.
    pub fn swallow(&mut self, port: usize, frame: &[u8]) {
        let (ext, int) = self.exchange(port, frame);
        assert!(
            ext.is_empty() && int.is_empty(),
            "sent {ext:02x?} {int:02x?}"
        );
    }

    pub fn counter(&self, c: Counter) -> u64 {
        self.w.pipeline.counters().get(c)
    }

    /// Non-zero drop counters, by name.
    pub fn drops(&self) -> Vec<(&'static str, u64)> {
        self.w
            .pipeline
            .counters()
            .nonzero()
            .into_iter()
            .filter(|(n, _)| n.starts_with("drop_"))
            .collect()
    }

    fn tables(&self) -> &Adopted<'static> {
        self.w.pipeline.lb().tables().expect("tables adopted")
    }

    /// A statistic of VIP `vip` (config position, see `VIP_*`), by its stable key.
    pub fn vip(&self, vip: u32, s: FlowStat) -> u64 {
        let key = self.tables().vips[vip as usize].stat_key;
        self.vip_stats.total(key, s)
    }

    /// A statistic of the backend at `addr` of VIP `vip`, by its stable id.
    pub fn backend(&self, vip: u32, addr: IpAddr, s: FlowStat) -> u64 {
        let id = self.tables().vips[vip as usize]
            .backends
            .iter()
            .find(|b| b.addr == addr)
            .unwrap_or_else(|| panic!("{addr} is no backend of VIP {vip}"))
            .id;
        self.backend_stats.total(id, s)
    }

    pub fn publish(&self, t: Adopted<'static>) {
        *self.feed.0.lock().unwrap() = Some(t);
    }

    pub fn advance_ms(&self, ms: u64) {
        self.clock.0.fetch_add(ms, Ordering::Relaxed);
    }

    pub fn learn(&mut self, ip: IpAddr, mac: [u8; 6]) {
        self.w.pipeline.learn(ip, mac);
    }
}

// ---------------------------------------------------------------------------
// Frames.

pub mod flags {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
}

/// A TCP or UDP frame to build.
#[derive(Clone, Debug)]
pub struct Pkt {
    pub smac: [u8; 6],
    pub dmac: [u8; 6],
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub ttl: u8,
    /// TCP flags, or None for UDP.
    pub tcp: Option<u8>,
    pub seq: u32,
    pub ack: u32,
    pub payload: Vec<u8>,
    /// TCP timestamps option (TSval, TSecr), if any.
    pub ts: Option<(u32, u32)>,
}

pub fn sa(ip: impl Into<IpAddr>, port: u16) -> SocketAddr {
    SocketAddr::new(ip.into(), port)
}

impl Pkt {
    /// A TCP segment from the client side (client MAC -> ext port MAC).
    pub fn tcp(src: SocketAddr, dst: SocketAddr, flags: u8) -> Pkt {
        Pkt {
            smac: CLIENT_MAC,
            dmac: EXT_MAC,
            src,
            dst,
            ttl: 64,
            tcp: Some(flags),
            seq: 1000,
            // Every side starts at 1000: an ACK acknowledges the other's
            // SYN (what completes a handshake).
            ack: if flags & self::flags::ACK != 0 {
                1001
            } else {
                0
            },
            payload: Vec::new(),
            ts: None,
        }
    }

    /// A UDP datagram from the client side.
    pub fn udp(src: SocketAddr, dst: SocketAddr, payload: &[u8]) -> Pkt {
        Pkt {
            tcp: None,
            payload: payload.to_vec(),
            ..Pkt::tcp(src, dst, 0)
        }
    }

    /// The same packet sent by a backend-side host (its MAC -> int port MAC).
    pub fn by_backend(mut self) -> Pkt {
        self.smac = host_mac(self.src.ip());
        self.dmac = INT_MAC;
        self
    }

    pub fn payload(mut self, p: &[u8]) -> Pkt {
        self.payload = p.to_vec();
        self
    }

    /// With a TCP timestamps option (after two NOPs, as Linux sends it).
    pub fn timestamps(mut self, tsval: u32, tsecr: u32) -> Pkt {
        self.ts = Some((tsval, tsecr));
        self
    }

    pub fn ttl(mut self, ttl: u8) -> Pkt {
        self.ttl = ttl;
        self
    }

    pub fn macs(mut self, smac: [u8; 6], dmac: [u8; 6]) -> Pkt {
        self.smac = smac;
        self.dmac = dmac;
        self
    }

    /// The IP packet (no Ethernet header).
    pub fn ip_bytes(&self) -> Vec<u8> {
        self.build()[14..].to_vec()
    }

    pub fn build(&self) -> Vec<u8> {
        let b = PacketBuilder::ethernet2(self.smac, self.dmac);
        let b = match (self.src.ip(), self.dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => b.ipv4(s.octets(), d.octets(), self.ttl),
            (IpAddr::V6(s), IpAddr::V6(d)) => b.ipv6(s.octets(), d.octets(), self.ttl),
            _ => panic!("mixed families"),
        };
        let mut out = Vec::new();
        match self.tcp {
            Some(f) => {
                let mut h = TcpHeader::new(self.src.port(), self.dst.port(), self.seq, 64240);
                h.fin = f & flags::FIN != 0;
                h.syn = f & flags::SYN != 0;
                h.rst = f & flags::RST != 0;
                h.psh = f & flags::PSH != 0;
                h.ack = f & flags::ACK != 0;
                h.acknowledgment_number = self.ack;
                if let Some((v, e)) = self.ts {
                    use etherparse::TcpOptionElement::{Noop, Timestamp};
                    h.set_options(&[Noop, Noop, Timestamp(v, e)])
                        .expect("room for timestamps");
                }
                b.tcp_header(h).write(&mut out, &self.payload).unwrap();
            }
            None => b
                .udp(self.src.port(), self.dst.port())
                .write(&mut out, &self.payload)
                .unwrap(),
        }
        out
    }
}

/// An ICMPv4 "fragmentation needed" from `src` to `dst` quoting `quoted`
/// (an IP packet), sent by `smac` to `dmac`.
pub fn icmp4_frag_needed(
    smac: [u8; 6],
    dmac: [u8; 6],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    mtu: u16,
    quoted: &[u8],
) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ethernet2(smac, dmac)
        .ipv4(src.octets(), dst.octets(), 64)
        .icmpv4(Icmpv4Type::DestinationUnreachable(
            etherparse::icmpv4::DestUnreachableHeader::FragmentationNeeded { next_hop_mtu: mtu },
        ))
        .write(&mut out, quoted)
        .unwrap();
    out
}

/// An ICMPv6 "packet too big" from `src` to `dst` quoting `quoted`.
pub fn icmp6_too_big(
    smac: [u8; 6],
    dmac: [u8; 6],
    src: Ipv6Addr,
    dst: Ipv6Addr,
    mtu: u32,
    quoted: &[u8],
) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ethernet2(smac, dmac)
        .ipv6(src.octets(), dst.octets(), 64)
        .icmpv6(Icmpv6Type::PacketTooBig { mtu })
        .write(&mut out, quoted)
        .unwrap();
    out
}

// ---------------------------------------------------------------------------
// Decoding what the pipeline sent, with every checksum checked by etherparse.

/// A sent TCP/UDP frame, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub smac: [u8; 6],
    pub dmac: [u8; 6],
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub ttl: u8,
    pub tcp: Option<u8>,
    pub seq: u32,
    pub ack: u32,
    pub payload: Vec<u8>,
}

fn macs_of(p: &SlicedPacket<'_>) -> ([u8; 6], [u8; 6]) {
    match &p.link {
        Some(LinkSlice::Ethernet2(e)) => (e.source(), e.destination()),
        other => panic!("not Ethernet II: {other:?}"),
    }
}

fn tcp_flags(t: &TcpSlice<'_>) -> u8 {
    [
        (t.fin(), flags::FIN),
        (t.syn(), flags::SYN),
        (t.rst(), flags::RST),
        (t.psh(), flags::PSH),
        (t.ack(), flags::ACK),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .fold(0, |acc, (_, f)| acc | f)
}

/// Checks the transport checksum of a TCP/UDP segment `l4` (header and
/// payload) against etherparse's calculation over the given addresses.
/// Returns (sport, dport, flags, seq, ack, payload).
fn check_l4(
    proto: IpNumber,
    src: IpAddr,
    dst: IpAddr,
    l4: &[u8],
) -> (u16, u16, Option<u8>, u32, u32, Vec<u8>) {
    match proto {
        IpNumber::TCP => {
            let t = TcpSlice::from_slice(l4).expect("TCP header");
            let want = match (src, dst) {
                (IpAddr::V4(s), IpAddr::V4(d)) => t.calc_checksum_ipv4(s.octets(), d.octets()),
                (IpAddr::V6(s), IpAddr::V6(d)) => t.calc_checksum_ipv6(s.octets(), d.octets()),
                _ => unreachable!(),
            }
            .unwrap();
            assert_eq!(t.checksum(), want, "TCP checksum");
            (
                t.source_port(),
                t.destination_port(),
                Some(tcp_flags(&t)),
                t.sequence_number(),
                t.acknowledgment_number(),
                t.payload().to_vec(),
            )
        }
        IpNumber::UDP => {
            let (h, payload) = UdpHeader::from_slice(l4).expect("UDP header");
            let payload = &payload[..usize::from(h.length) - 8];
            let want = match (src, dst) {
                (IpAddr::V4(s), IpAddr::V4(d)) => {
                    h.calc_checksum_ipv4_raw(s.octets(), d.octets(), payload)
                }
                (IpAddr::V6(s), IpAddr::V6(d)) => {
                    h.calc_checksum_ipv6_raw(s.octets(), d.octets(), payload)
                }
                _ => unreachable!(),
            }
            .unwrap();
            assert_eq!(h.checksum, want, "UDP checksum");
            (
                h.source_port,
                h.destination_port,
                None,
                0,
                0,
                payload.to_vec(),
            )
        }
        other => panic!("not TCP/UDP: {other:?}"),
    }
}

/// The TCP timestamps option (TSval, TSecr) of a frame, if it has one.
pub fn timestamps_of(frame: &[u8]) -> Option<(u32, u32)> {
    let p = SlicedPacket::from_ethernet(frame).expect("etherparse parses the frame");
    let Some(TransportSlice::Tcp(t)) = &p.transport else {
        return None;
    };
    t.options_iterator().find_map(|o| match o {
        Ok(etherparse::TcpOptionElement::Timestamp(v, e)) => Some((v, e)),
        _ => None,
    })
}

/// Decodes a TCP/UDP frame and checks the IPv4 header checksum and the
/// TCP/UDP checksum with etherparse.
pub fn decode(frame: &[u8]) -> Seen {
    let p = SlicedPacket::from_ethernet(frame).expect("etherparse parses the frame");
    let (smac, dmac) = macs_of(&p);
    let (src, dst, ttl, proto, l4) = match &p.net {
        Some(NetSlice::Ipv4(ip)) => {
            let h = ip.header();
            assert_eq!(
                h.header_checksum(),
                h.to_header().calc_header_checksum(),
                "IPv4 header checksum"
            );
            (
                IpAddr::from(h.source_addr()),
                IpAddr::from(h.destination_addr()),
                h.ttl(),
                h.protocol(),
                ip.payload().payload,
            )
        }
        Some(NetSlice::Ipv6(ip)) => {
            let h = ip.header();
            (
                IpAddr::from(h.source_addr()),
                IpAddr::from(h.destination_addr()),
                h.hop_limit(),
                ip.payload().ip_number,
                ip.payload().payload,
            )
        }
        other => panic!("not IP: {other:?}"),
    };
    let (sport, dport, tcp, seq, ack, payload) = check_l4(proto, src, dst, l4);
    Seen {
        smac,
        dmac,
        src: SocketAddr::new(src, sport),
        dst: SocketAddr::new(dst, dport),
        ttl,
        tcp,
        seq,
        ack,
        payload,
    }
}

/// A sent ICMP error, decoded: outer addresses and MACs, the ICMP type and
/// code, and the quoted packet's addresses and ports. Checks the outer IPv4
/// header checksum, the ICMP/ICMPv6 checksum, the quoted IPv4 header
/// checksum and, when the quote holds the whole segment, its TCP/UDP
/// checksum.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeenIcmp {
    pub smac: [u8; 6],
    pub dmac: [u8; 6],
    pub src: IpAddr,
    pub dst: IpAddr,
    pub ttl: u8,
    pub kind: (u8, u8),
    pub inner_src: SocketAddr,
    pub inner_dst: SocketAddr,
}

pub fn decode_icmp(frame: &[u8]) -> SeenIcmp {
    let p = SlicedPacket::from_ethernet(frame).expect("etherparse parses the frame");
    let (smac, dmac) = macs_of(&p);
    let (src, dst, ttl) = match &p.net {
        Some(NetSlice::Ipv4(ip)) => {
            let h = ip.header();
            assert_eq!(
                h.header_checksum(),
                h.to_header().calc_header_checksum(),
                "outer IPv4 header checksum"
            );
            (
                IpAddr::from(h.source_addr()),
                IpAddr::from(h.destination_addr()),
                h.ttl(),
            )
        }
        Some(NetSlice::Ipv6(ip)) => {
            let h = ip.header();
            (
                IpAddr::from(h.source_addr()),
                IpAddr::from(h.destination_addr()),
                h.hop_limit(),
            )
        }
        other => panic!("not IP: {other:?}"),
    };
    let (kind, quote) = match &p.transport {
        Some(TransportSlice::Icmpv4(m)) => {
            assert_eq!(
                m.checksum(),
                m.icmp_type().calc_checksum(m.payload()),
                "ICMP checksum"
            );
            ((m.type_u8(), m.code_u8()), m.payload())
        }
        Some(TransportSlice::Icmpv6(m)) => {
            let (IpAddr::V6(s), IpAddr::V6(d)) = (src, dst) else {
                unreachable!()
            };
            assert!(
                m.is_checksum_valid(s.octets(), d.octets()),
                "ICMPv6 checksum"
            );
            ((m.type_u8(), m.code_u8()), m.payload())
        }
        other => panic!("not ICMP: {other:?}"),
    };
    let (isrc, idst, proto, l4) = if src.is_ipv4() {
        let h = Ipv4HeaderSlice::from_slice(quote).expect("quoted IPv4 header");
        assert_eq!(
            h.header_checksum(),
            h.to_header().calc_header_checksum(),
            "quoted IPv4 header checksum"
        );
        let l4 = &quote[h.slice().len()..];
        (
            IpAddr::from(h.source_addr()),
            IpAddr::from(h.destination_addr()),
            h.protocol(),
            l4,
        )
    } else {
        let h = Ipv6HeaderSlice::from_slice(quote).expect("quoted IPv6 header");
        (
            IpAddr::from(h.source_addr()),
            IpAddr::from(h.destination_addr()),
            h.next_header(),
            &quote[40..],
        )
    };
    let ports = (
        u16::from_be_bytes([l4[0], l4[1]]),
        u16::from_be_bytes([l4[2], l4[3]]),
    );
    // Only a quote of the whole packet has the whole segment to check.
    let whole = if src.is_ipv4() {
        usize::from(u16::from_be_bytes([quote[2], quote[3]])) == quote.len()
    } else {
        40 + usize::from(u16::from_be_bytes([quote[4], quote[5]])) == quote.len()
    };
    if proto == IpNumber::TCP && l4.len() >= 20 && whole {
        check_l4(proto, isrc, idst, l4);
    }
    SeenIcmp {
        smac,
        dmac,
        src,
        dst,
        ttl,
        kind,
        inner_src: SocketAddr::new(isrc, ports.0),
        inner_dst: SocketAddr::new(idst, ports.1),
    }
}

/// Recomputes the IPv4 header checksum of a frame (after a test edits the header).
pub fn fix_ipv4_checksum(frame: &mut [u8]) {
    let ihl = usize::from(frame[14] & 0x0f) * 4;
    frame[24] = 0;
    frame[25] = 0;
    let sum = Ipv4HeaderSlice::from_slice(&frame[14..14 + ihl])
        .unwrap()
        .to_header()
        .calc_header_checksum();
    frame[24..26].copy_from_slice(&sum.to_be_bytes());
}

// ---------------------------------------------------------------------------
// No-panic checks (the proptests of `pipeline_nopanic.rs` and the
// `pipeline` fuzz target).

/// Valid frames to mutate, from a worker that has forwarded the SYNs (so
/// the replies and ICMP errors match live entries).
pub fn seed_frames(n: &mut Node) -> Vec<(usize, Vec<u8>)> {
    let mut out = Vec::new();
    let flows = primers();
    for f in flows {
        let bytes = f.build();
        let sent = n.forward(EXT, &bytes, INT);
        let s = decode(&sent);
        let reply = Pkt {
            src: s.dst,
            dst: s.src,
            ..f.clone()
        }
        .by_backend();
        let reply = match reply.tcp {
            Some(_) => Pkt {
                tcp: Some(flags::SYN | flags::ACK),
                ..reply
            },
            None => reply,
        };
        out.push((INT, reply.build()));
        // A router on the backend side tells the quoted packet's source.
        let err = match s.src.ip() {
            IpAddr::V4(src) => icmp4_frag_needed(
                host_mac(ROUTER4.into()),
                INT_MAC,
                ROUTER4,
                src,
                1400,
                &sent[14..],
            ),
            IpAddr::V6(src) => icmp6_too_big(
                host_mac(ROUTER6.into()),
                INT_MAC,
                ROUTER6,
                src,
                1280,
                &sent[14..],
            ),
        };
        out.push((INT, err));
        out.push((EXT, bytes));
        out.push((
            EXT,
            Pkt {
                tcp: f.tcp.map(|_| flags::ACK),
                ..f
            }
            .payload(b"data")
            .build(),
        ));
    }
    let mut arp = Vec::new();
    etherparse::PacketBuilder::ethernet2(CLIENT_MAC, [0xff; 6])
        .arp(
            etherparse::ArpPacket::new(
                etherparse::ArpHardwareId::ETHERNET,
                etherparse::EtherType::IPV4,
                etherparse::ArpOperation::REQUEST,
                &CLIENT_MAC,
                &CLIENT4.octets(),
                &[0; 6],
                &VIP4.octets(),
            )
            .unwrap(),
        )
        .write(&mut arp)
        .unwrap();
    out.push((EXT, arp));
    let mut echo = Vec::new();
    etherparse::PacketBuilder::ethernet2(CLIENT_MAC, EXT_MAC)
        .ipv4(CLIENT4.octets(), VIP4.octets(), 64)
        .icmpv4_echo_request(1, 1)
        .write(&mut echo, b"ping")
        .unwrap();
    out.push((EXT, echo));
    out
}

/// Runs one frame and checks the verdict's promises.
pub fn check_verdict(p: &mut Pipeline, port: usize, mut frame: Vec<u8>) {
    let len_in = frame.len();
    let ports = p.ports().len();
    match p.process(port, &mut frame, len_in) {
        Verdict::Send { port: out, len } | Verdict::Park { port: out, len, .. } => {
            assert!(len <= len_in, "sent {len} of {len_in} bytes");
            assert!(out < ports, "sent on port {out} of {ports}");
            if let Err(m) = parse_frame(&frame[..len]) {
                panic!(
                    "sent a frame that does not parse ({m:?}): {:02x?}",
                    &frame[..len]
                );
            }
        }
        Verdict::Drop(c) => assert!(c.is_drop(), "{c:?} is not a drop counter"),
        Verdict::Handoff { worker } => {
            assert!(worker < 2 && worker != p.worker(), "handoff to {worker}")
        }
    }
}

/// The flows [`fuzz_rig`] starts: SYNs to every kind of VIP and a UDP request.
fn primers() -> [Pkt; 5] {
    [
        Pkt::tcp(sa(CLIENT4, 40000), sa(VIP4, 80), flags::SYN),
        Pkt::tcp(sa(CLIENT6, 40000), sa(VIP6, 80), flags::SYN),
        Pkt::tcp(sa(CLIENT4, 40001), sa(DNAT4, 80), flags::SYN),
        Pkt::tcp(sa(CLIENT6, 40001), sa(DNAT6, 80), flags::SYN),
        Pkt::udp(sa(CLIENT4, 40002), sa(VIP4, 53), b"query"),
    ]
}

/// A two-worker appliance, tables adopted, worker 0 with the live flows of
/// [`primers`], and frames of those flows to mutate ([`seed_frames`]).
/// Deterministic: every call gives the same local ports and backends, so
/// the seed frames are built once and the flows replayed per call.
pub fn fuzz_rig() -> (Vec<Node>, &'static [(usize, Vec<u8>)]) {
    type Seeds = (Vec<Vec<u8>>, Vec<(usize, Vec<u8>)>);
    static SEEDS: std::sync::OnceLock<Seeds> = std::sync::OnceLock::new();
    let build = || {
        let mut nodes = Setup {
            workers: 2,
            conntrack: 64,
            shared_stats: true,
            ..Setup::default()
        }
        .build_polled();
        nodes[1].learn(CLIENT4.into(), CLIENT_MAC);
        nodes[1].learn(CLIENT6.into(), CLIENT_MAC);
        nodes
    };
    let (syns, seeds) = SEEDS.get_or_init(|| {
        let seeds = seed_frames(&mut build()[0]);
        (primers().iter().map(Pkt::build).collect(), seeds)
    });
    let mut nodes = build();
    for syn in syns {
        let v = nodes[0]
            .w
            .pipeline
            .process(EXT, &mut syn.clone(), syn.len());
        assert!(matches!(v, Verdict::Send { port: INT, .. }), "{v:?}");
    }
    (nodes, seeds)
}

/// Generation `g` of `cfg` where `state(vip, backend address)` overrides
/// (weight, state) of a backend.
pub fn generation_with_states(
    cfg: &Config,
    g: u64,
    state: &dyn Fn(usize, IpAddr) -> Option<(u32, conf::tables::BackendState)>,
) -> Adopted<'static> {
    let ov = |vi: usize, bi: usize| state(vi, cfg.vips[vi].backends[bi].address);
    let gen = conf::tables::build_generation(cfg, &ov).expect("generation");
    Adopted::new(
        g,
        gen.flow_hash_key,
        dataplane::tables_source::inputs_from_generation(&gen),
        dataplane::routes::Routes::from_config(cfg),
    )
    .with_resets(dataplane::tables_source::resets_from_generation(&gen))
}

pub fn adopt_generation(n: &mut Node, t: Adopted<'static>) {
    let g = t.generation;
    n.publish(t);
    n.poll();
    assert_eq!(n.w.pipeline.generation(), Some(g));
}
