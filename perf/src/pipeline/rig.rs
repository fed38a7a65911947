//! The appliance under test: its config (one VIP per case), a worker over
//! [`BenchPorts`] on a TSC clock the benchmark can move forward, and the
//! backends' neighbours seeded.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use conf::state::FlowStats;
use conf::Config;
use dataplane::lb::Lb;
use dataplane::neigh::NeighborSync;
use dataplane::pipeline::Pipeline;
use dataplane::port::ports_from_config;
use dataplane::standalone::{adopted_from_config, OneShot};
use dataplane::worker::{Clock, Handoff, Poll, Worker};

use super::ports::BenchPorts;
use super::RECORDS;
use crate::clock;

pub(super) const EXT: usize = 0;
pub(super) const INT: usize = 1;
pub(super) const EXT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x01, 0x01];
pub(super) const INT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x02, 0x01];
pub(super) const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0xc1, 0x01];

pub(super) fn backend_v4(k: u32) -> Ipv4Addr {
    Ipv4Addr::new(10, 2, (k / 200) as u8, (k % 200 + 10) as u8)
}

pub(super) fn backend_v6(k: u32) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 2, 0, 0, 0, 0, 0, 0x10 + k as u16)
}

pub(super) fn backend_mac(ip: IpAddr) -> [u8; 6] {
    let o = match ip {
        IpAddr::V4(a) => a.octets()[2..4].try_into().unwrap(),
        IpAddr::V6(a) => a.octets()[14..16].try_into().unwrap(),
    };
    let o: [u8; 2] = o;
    [0x02, 0, 0, if ip.is_ipv4() { 4 } else { 6 }, o[0], o[1]]
}

/// The VIPs of the benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Vip {
    FullNat4,
    Dnat4,
    FullNat6,
    /// Full-NAT IPv4 with a PROXY protocol v2 header in the client's stream.
    Proxy4,
    /// Full-NAT IPv4 with `syn_proxy = "always"`: SYNs get cookie SYN-ACKs.
    SynProxy4,
    /// Direct server return, IPv4, only the MAC written (`encap = "none"`).
    Dsr4,
    /// Direct server return, IPv4, IPIP (`encap = "ipip"`).
    DsrIpip4,
    /// Direct server return, IPv4, GUE over IPv4 (`encap = "gue"`).
    DsrGue4,
    /// DNAT IPv6 (what the IPv6 DSR rows compare with).
    Dnat6,
    /// Direct server return, IPv6, only the MAC written.
    Dsr6,
    /// Direct server return, IPv6, IP6IP6 (`encap = "ipip"`).
    DsrIpip6,
    /// Direct server return, IPv6, GUE over IPv6 (`encap = "gue"`).
    DsrGue6,
    /// Full-NAT IPv4 with `persistence_timeout`: a new flow looks its
    /// client's pin up first.
    Persist4,
}

impl Vip {
    pub(super) fn addr(self) -> IpAddr {
        match self {
            Vip::FullNat4 => Ipv4Addr::new(10, 1, 0, 100).into(),
            Vip::Dnat4 => Ipv4Addr::new(10, 1, 0, 101).into(),
            Vip::FullNat6 => Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 0x100).into(),
            Vip::Proxy4 => Ipv4Addr::new(10, 1, 0, 102).into(),
            Vip::SynProxy4 => Ipv4Addr::new(10, 1, 0, 103).into(),
            Vip::Dsr4 => Ipv4Addr::new(10, 1, 0, 104).into(),
            Vip::DsrIpip4 => Ipv4Addr::new(10, 1, 0, 105).into(),
            Vip::Persist4 => Ipv4Addr::new(10, 1, 0, 106).into(),
            Vip::DsrGue4 => Ipv4Addr::new(10, 1, 0, 107).into(),
            Vip::Dnat6 => Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 0x101).into(),
            Vip::Dsr6 => Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 0x104).into(),
            Vip::DsrIpip6 => Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 0x105).into(),
            Vip::DsrGue6 => Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 0x107).into(),
        }
    }
    pub(super) fn name(self) -> &'static str {
        match self {
            Vip::FullNat4 => "full-NAT IPv4",
            Vip::Dnat4 => "DNAT IPv4",
            Vip::FullNat6 => "full-NAT IPv6",
            Vip::Proxy4 => "full-NAT IPv4 + PROXY v2",
            Vip::SynProxy4 => "full-NAT IPv4 + SYN proxy",
            Vip::Dsr4 => "DSR IPv4",
            Vip::DsrIpip4 => "DSR IPIP IPv4",
            Vip::DsrGue4 => "DSR GUE IPv4",
            Vip::Dnat6 => "DNAT IPv6",
            Vip::Dsr6 => "DSR IPv6",
            Vip::DsrIpip6 => "DSR IP6IP6 IPv6",
            Vip::DsrGue6 => "DSR GUE IPv6",
            Vip::Persist4 => "full-NAT IPv4 + persistence",
        }
    }

    /// Direct server return: the client's direction only.
    pub(super) fn is_dsr(self) -> bool {
        matches!(
            self,
            Vip::Dsr4 | Vip::DsrIpip4 | Vip::DsrGue4 | Vip::Dsr6 | Vip::DsrIpip6 | Vip::DsrGue6
        )
    }

    /// IPv6 clients and backends.
    pub(super) fn is_v6(self) -> bool {
        matches!(
            self,
            Vip::FullNat6 | Vip::Dnat6 | Vip::Dsr6 | Vip::DsrIpip6 | Vip::DsrGue6
        )
    }
}

pub(super) fn config_text(backends: u32) -> String {
    let mut c = String::from(
        r#"
instance = "bench"
[dataplane]
main_lcore = 0
worker_lcores = [1]
flow_hash_key = "00112233445566778899aabbccddeeff"

[[port]]
name = "ext"
devargs = "net_null0"
addresses = ["10.1.0.1/24", "fd00:1::1/64"]

[[port]]
name = "int"
devargs = "net_null1"
addresses = ["10.2.0.1/16", "fd00:2::1/64"]
local_addresses = ["10.2.0.1", "fd00:2::1"]
local_port_range = [1024, 65535]

[mgmt]
listen = "unix:///run/border/bench.sock"
"#,
    );
    for (name, vip, mode, proxy, syn_proxy) in [
        ("fnat4", Vip::FullNat4, "fullnat", "none", "off"),
        ("dnat4", Vip::Dnat4, "dnat", "none", "off"),
        ("fnat6", Vip::FullNat6, "fullnat", "none", "off"),
        ("pp4", Vip::Proxy4, "fullnat", "v2", "off"),
        ("sp4", Vip::SynProxy4, "fullnat", "none", "always"),
        ("dsr4", Vip::Dsr4, "dsr", "none", "off"),
        ("dsripip4", Vip::DsrIpip4, "dsr", "none", "off"),
        ("dsrgue4", Vip::DsrGue4, "dsr", "none", "off"),
        ("persist4", Vip::Persist4, "fullnat", "none", "off"),
        ("dnat6", Vip::Dnat6, "dnat", "none", "off"),
        ("dsr6", Vip::Dsr6, "dsr", "none", "off"),
        ("dsripip6", Vip::DsrIpip6, "dsr", "none", "off"),
        ("dsrgue6", Vip::DsrGue6, "dsr", "none", "off"),
    ] {
        c.push_str(&format!(
            "\n[[vip]]\nname = \"{name}\"\naddress = \"{}\"\nport = 80\nprotocol = \"tcp\"\nmode = \"{mode}\"\nproxy_protocol = \"{proxy}\"\nsyn_proxy = \"{syn_proxy}\"\n",
            vip.addr()
        ));
        match vip {
            Vip::DsrIpip4 | Vip::DsrIpip6 => c.push_str("encap = \"ipip\"\n"),
            Vip::DsrGue4 | Vip::DsrGue6 => c.push_str("encap = \"gue\"\n"),
            _ => {}
        }
        if vip == Vip::Persist4 {
            c.push_str("persistence_timeout = 300\n");
        }
        // A DSR backend listens on the VIP's port.
        let port = if vip.is_dsr() { 80 } else { 8080 };
        for k in 0..backends {
            let b: IpAddr = if vip.is_v6() {
                backend_v6(k).into()
            } else {
                backend_v4(k).into()
            };
            c.push_str(&format!(
                "[[vip.backend]]\naddress = \"{b}\"\nport = {port}\n"
            ));
        }
    }
    c
}

/// A clock on the TSC, like border-dp's, with an offset the benchmark can
/// move forward (to expire entries), and which it can stop while it sets
/// flows up (see [`Rig::freeze`]).
#[derive(Clone)]
pub(super) struct BenchClock {
    t0: u64,
    per_ms: u64,
    /// Added to the TSC's milliseconds, wrapping (a thaw takes the time
    /// spent frozen back off).
    offset_ms: Arc<AtomicU64>,
    /// The time it shows while frozen; [`RUNNING`] otherwise.
    frozen_ms: Arc<AtomicU64>,
}

/// `BenchClock::frozen_ms` of a running clock.
const RUNNING: u64 = u64::MAX;

impl BenchClock {
    fn running_ms(&self) -> u64 {
        let t = clock::cycles().unwrap_or(0);
        (t.wrapping_sub(self.t0) / self.per_ms).wrapping_add(self.offset_ms.load(Ordering::Relaxed))
    }
}

impl Clock for BenchClock {
    #[inline]
    fn now_ms(&self) -> u64 {
        match self.frozen_ms.load(Ordering::Relaxed) {
            RUNNING => self.running_ms(),
            frozen => frozen,
        }
    }
}

pub(super) type BenchWorker = Worker<BenchPorts, BenchClock, OneShot>;

pub(super) struct Rig {
    pub(super) w: BenchWorker,
    pub(super) hz: f64,
    clock: BenchClock,
    backends: Vec<IpAddr>,
    /// The connections region the worker serves walks through, as
    /// border-dp's workers always do.
    pub(super) conns: &'static conf::conns::ConnsRegion,
}

impl Rig {
    pub(super) fn new(
        cfg: &Config,
        backends: u32,
        conntrack: usize,
        tsc_hz: f64,
    ) -> anyhow::Result<Rig> {
        let tables = adopted_from_config(cfg, 1).map_err(|e| anyhow::anyhow!("tables: {e}"))?;
        let mut lb = Lb::new(
            0,
            1,
            conntrack,
            cfg.dataplane.timeouts,
            NeighborSync::new(1),
            FlowStats::detached(conf::state::MAX_VIPS),
            FlowStats::detached(conf::state::MAX_BACKENDS),
        );
        let mut all: Vec<IpAddr> = (0..backends).map(|k| backend_v4(k).into()).collect();
        all.extend((0..backends).map(|k| IpAddr::from(backend_v6(k))));
        for ip in &all {
            lb.seed_neighbor(*ip, backend_mac(*ip));
        }
        if RECORDS.load(Ordering::Relaxed) {
            lb.enable_records(bench_records_ring()?, false);
        }
        let conns = bench_conns_region()?;
        lb.enable_conns(
            conns
                .exporter(0)
                .ok_or_else(|| anyhow::anyhow!("connections region without a ring"))?,
        );
        let pipeline = Pipeline::new(ports_from_config(cfg, &[EXT_MAC, INT_MAC], false), lb);
        let clock = BenchClock {
            t0: clock::cycles().unwrap_or(0),
            per_ms: ((tsc_hz / 1e3) as u64).max(1),
            offset_ms: Arc::new(AtomicU64::new(0)),
            frozen_ms: Arc::new(AtomicU64::new(RUNNING)),
        };
        let io = BenchPorts::new(2, 4 * dataplane::io::BURST * 3);
        let mut w = Worker::new(
            io,
            pipeline,
            Poll::Busy,
            clock.clone(),
            OneShot(Some(tables)),
            Handoff::new(1),
        );
        w.poll_once();
        Ok(Rig {
            w,
            hz: tsc_hz,
            clock,
            backends: all,
            conns,
        })
    }

    /// Runs the worker until the port has handed out everything.
    pub(super) fn drain(&mut self) {
        while self.w.io.remaining() > 0 {
            self.w.poll_once();
        }
        self.w.poll_once();
    }

    /// Replays `frames` once on `port` and returns what was sent.
    pub(super) fn exchange(&mut self, port: usize, frames: &[Vec<u8>]) -> Vec<(usize, Vec<u8>)> {
        self.w.io.capture = Some(Vec::with_capacity(frames.len()));
        self.w.io.load(port, frames, frames.len() as u64);
        self.drain();
        self.w.io.capture.take().unwrap_or_default()
    }

    /// Stops the worker's clock until [`Rig::thaw`]: the setup of many
    /// flows on a busy machine can take longer than the SYN timeout, and
    /// handshakes must not expire (nor give up their local tuples as stale
    /// half-open entries) before their last segment comes.
    pub(super) fn freeze(&mut self) {
        let now = self.clock.running_ms();
        self.clock.frozen_ms.store(now, Ordering::Relaxed);
    }

    /// Runs the clock again from where [`Rig::freeze`] stopped it: the
    /// setup took no time as far as the flows can tell.
    pub(super) fn thaw(&mut self) {
        let frozen = self.clock.frozen_ms.load(Ordering::Relaxed);
        if frozen == RUNNING {
            return;
        }
        let spent = self.clock.running_ms().wrapping_sub(frozen);
        self.clock.offset_ms.fetch_sub(spent, Ordering::Relaxed);
        self.clock.frozen_ms.store(RUNNING, Ordering::Relaxed);
    }

    /// Moves the clock by `ms` and keeps the neighbours fresh.
    pub(super) fn advance(&mut self, ms: u64) {
        self.clock.offset_ms.fetch_add(ms, Ordering::Relaxed);
        self.w.poll_once();
        for ip in self.backends.clone() {
            self.w.pipeline.learn(ip, backend_mac(ip));
        }
    }

    pub(super) fn drops(&self) -> u64 {
        self.w
            .pipeline
            .counters()
            .nonzero()
            .iter()
            .filter(|(n, _)| n.starts_with("drop_"))
            .map(|(_, v)| v)
            .sum()
    }
}

/// A connections region for one rig's worker, leaked like border-dp's.
fn bench_conns_region() -> anyhow::Result<&'static conf::conns::ConnsRegion> {
    let path = std::env::temp_dir().join(format!("border-perf-conns-{}", std::process::id()));
    let region = conf::conns::ConnsRegion::create(
        &path,
        1,
        conf::conns::RING_SLOTS,
        conf::os::files::Access::PRIVATE,
    )?;
    let _ = std::fs::remove_file(&path);
    Ok(Box::leak(Box::new(region)))
}

/// A records region for one rig's worker, leaked like the workers' own.
pub(super) fn bench_records_ring() -> anyhow::Result<conf::records::RecordWriter<'static>> {
    let path = std::env::temp_dir().join(format!("border-perf-records-{}", std::process::id()));
    let region =
        conf::records::RecordsRegion::create(&path, 1, 1 << 16, conf::os::files::Access::PRIVATE)?;
    let _ = std::fs::remove_file(&path);
    let region: &'static conf::records::RecordsRegion = Box::leak(Box::new(region));
    region
        .writer(0)
        .ok_or_else(|| anyhow::anyhow!("records region without a ring"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// While frozen the worker's clock stands still however long the
    /// setup takes, and thawed it goes on from where it stopped.
    #[test]
    fn a_frozen_clock_stands_still_and_thaws_where_it_stopped() {
        let cfg = Config::from_toml_str(&config_text(2), "bench.toml").unwrap();
        let hz = clock::tsc_hz(std::time::Duration::from_millis(20)).expect("TSC");
        let mut rig = Rig::new(&cfg, 2, 64, hz).unwrap();
        rig.advance(5_000);
        rig.freeze();
        let stopped = rig.clock.now_ms();
        assert!(stopped >= 5_000, "{stopped}");
        std::thread::sleep(std::time::Duration::from_millis(50));
        rig.w.poll_once();
        assert_eq!(rig.clock.now_ms(), stopped);
        rig.thaw();
        let after = rig.clock.now_ms();
        assert!(
            (stopped..stopped + 40).contains(&after),
            "{stopped} -> {after}"
        );
    }
}
