//! The configuration model: one TOML file configures both processes.
//!
//! [`Config::from_file`] / [`Config::from_toml_str`] parse, check every rule
//! and return a fully defaulted, validated [`Config`], or the first error in
//! file order as a [`ConfigError`] naming file, line, column and key path.
//! The format is documented key by key in `docs/config.md`.
//!
//! This module does no I/O other than reading the config file.

mod error;
mod net;
mod probe;
mod raw;
mod reparse;
mod validate;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use error::ConfigError;
pub use net::{format_mac, is_prime, next_prime, IpNet};
pub use probe::{compile_expect_regex, DnsProbe, DnsRcode, DnsType, UdpExpect, UdpProbe};
pub use reparse::ConfigText;

/// Default `dataplane.conntrack_per_worker`.
pub const DEFAULT_CONNTRACK_PER_WORKER: u32 = 1 << 20;
/// Bounds of `dataplane.conntrack_per_worker`.
pub const CONNTRACK_PER_WORKER_RANGE: std::ops::RangeInclusive<u32> = 1024..=(1 << 27);
/// lcore ids must be below this (RTE_MAX_LCORE of Debian's DPDK 22.11 build).
pub const MAX_LCORE: u32 = 128;
/// Upper bound of every `dataplane.timeouts` value, in seconds (7 days).
pub const MAX_TIMEOUT_SECS: u32 = 7 * 24 * 3600;
/// Default `port.local_port_range` when `local_addresses` is set: below the
/// Linux default ephemeral range (32768..=60999) so the kernel twin keeps its own.
pub const DEFAULT_LOCAL_PORT_RANGE: (u16, u16) = (1024, 32767);
/// Default `vip.maglev_table_size` (prime).
pub const DEFAULT_MAGLEV_TABLE_SIZE: u32 = 65537;
/// Upper bound of `vip.maglev_table_size`.
pub const MAX_MAGLEV_TABLE_SIZE: u32 = 1 << 24;
/// Default `vip.proxy_protocol_max_len`: nginx 1.22 reads at most 107 bytes.
pub const DEFAULT_PROXY_PROTOCOL_MAX_LEN: u16 = 107;
/// PPv2 fixed header: 12-byte signature, ver/cmd, family, 2-byte length.
pub const PPV2_FIXED_LEN: u16 = 16;
/// Upper bound of `vip.proxy_protocol_max_len` (the length field is 16 bits).
pub const MAX_PROXY_PROTOCOL_MAX_LEN: u16 = u16::MAX - PPV2_FIXED_LEN;
/// Most `[[port]]` entries: RTE_MAX_ETHPORTS of Debian's DPDK 22.11 build
/// is 32, and each port's kernel twin is a device too.
pub const MAX_PORTS: usize = 16;
/// Largest backend weight.
pub const MAX_WEIGHT: u32 = 65535;
/// Largest Linux interface name, in bytes (IFNAMSIZ - 1).
pub const MAX_IFNAME_LEN: usize = 15;

/// The whole file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Names the shared-memory regions and the default mgmt socket.
    pub instance: String,
    /// Availability zone of this appliance.
    pub zone: Option<String>,
    /// `[dataplane]`.
    pub dataplane: Dataplane,
    /// `[[port]]`, in file order (at least one).
    pub ports: Vec<Port>,
    /// `[mgmt]`.
    pub mgmt: Mgmt,
    /// `[[vip]]`, in file order (may be empty).
    pub vips: Vec<Vip>,
    /// `[records]`: connection records (default none: no meters, no records).
    pub records: Option<Records>,
}

/// `[records]`: one record per connection when it ends, exported by
/// border-mgmt as IPFIX and/or JSON lines (docs/records.md). Read at start
/// by both processes: changing it takes a restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Records {
    /// Records each worker's ring holds until border-mgmt drains them: a
    /// power of two in [`RECORD_RING_SLOTS`] (default 65536).
    pub ring_slots: u32,
    /// Also record connections that carried no payload (health checks,
    /// port scans); default false: they are only counted.
    pub log_empty: bool,
    /// `[[records.ipfix]]`: IPFIX collectors (UDP).
    pub ipfix: Vec<IpfixCollector>,
    /// `[records.json]`: a JSON-lines file.
    pub json: Option<JsonLog>,
}

/// Lowest and highest `records.ring_slots`.
pub const RECORD_RING_SLOTS: std::ops::RangeInclusive<u32> = 1024..=(1 << 20);

/// `[[records.ipfix]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpfixCollector {
    /// `ip:port` the IPFIX messages go to over UDP.
    pub collector: SocketAddr,
    /// The Observation Domain ID of the messages (default 1).
    pub observation_domain: u32,
    /// Seconds between resends of the template (UDP: a collector that
    /// restarted learns it again; default 60).
    pub template_interval_s: u32,
}

/// `[records.json]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonLog {
    /// Absolute path of the file records are appended to.
    pub path: std::path::PathBuf,
    /// The file is renamed to `path.1` (older ones shift to `.2`...) once
    /// it reaches this size (default 100 MiB).
    pub rotate_bytes: u64,
    /// Rotated files kept (default 5; 0: the file is truncated instead).
    pub keep: u32,
}

/// `[dataplane]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dataplane {
    /// EAL main lcore (default 0).
    pub main_lcore: u32,
    /// One poll-mode worker per lcore, in file order; distinct, not main_lcore.
    pub worker_lcores: Vec<u32>,
    /// The CPU of the main lcore and of each worker lcore, in that order
    /// (default: lcore N runs on CPU N). Lets more lcores than CPUs share
    /// cores, e.g. several adaptive workers on a small test VM.
    pub lcore_cpus: Option<Vec<u32>>,
    /// Default [`PollMode::Adaptive`].
    pub poll: PollMode,
    /// Extra EAL arguments (default empty); never lcore options.
    pub eal_args: Vec<String>,
    /// Connection-table entries per worker, preallocated.
    pub conntrack_per_worker: u32,
    /// Key of the stable flow hash (same on every appliance of a cluster).
    pub flow_hash_key: [u8; 16],
    /// `[dataplane.timeouts]`.
    pub timeouts: Timeouts,
    /// Serve DPDK's packet capture (`rte_pdump`) so `dpdk-dumpcap` and
    /// `borderctl capture` can attach (default false). Needs EAL
    /// multi-process: no `--no-shconf`, `--in-memory` or `--no-huge` in
    /// `eal_args` (docs/capture.md).
    pub capture: bool,
    /// ICMP echo requests each worker answers per second at most (to port
    /// addresses and VIPs; default 1000); the rest are dropped and counted.
    pub icmp_echo_per_second: u32,
}

/// How workers poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PollMode {
    /// Spin forever: for dedicated cores.
    Busy,
    /// Back off when idle.
    Adaptive,
}

/// Connection-tracking idle timeouts, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Timeouts {
    /// Half-open TCP (default 30).
    pub tcp_syn: u32,
    /// Established TCP (default 900).
    pub tcp_established: u32,
    /// TCP after FIN or RST (default 10).
    pub tcp_closing: u32,
    /// UDP flows (default 300).
    pub udp: u32,
    /// How long a full-NAT local tuple (local address, port, backend) rests
    /// after its TCP connection ended without timestamps before it is
    /// handed out again (default 60, Linux's TIME_WAIT). Connections with
    /// timestamps rest [`LOCAL_PORT_COOLDOWN_TS_MS`] instead: full-NAT
    /// moves their timestamps onto its own clock, so the backend accepts
    /// the reuse (RFC 6191).
    pub local_port_cooldown: u32,
}

/// How long a full-NAT local tuple rests after a connection that used TCP
/// timestamps (or a UDP flow) ended, in milliseconds.
pub const LOCAL_PORT_COOLDOWN_TS_MS: u64 = 1_000;

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            tcp_syn: 30,
            tcp_established: 900,
            tcp_closing: 10,
            udp: 300,
            local_port_cooldown: 60,
        }
    }
}

/// `[[port]]`: one DPDK port and its kernel twin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Port {
    /// Unique safe identifier.
    pub name: String,
    /// DPDK devargs, e.g. `net_tap0,iface=border-ext` or a PCI address.
    pub devargs: String,
    /// Interface addresses with prefix (may be empty).
    pub addresses: Vec<IpNet>,
    /// Next hop for non-local destinations; inside one of `addresses`.
    pub gateway: Option<IpAddr>,
    /// Kernel twin interface name (default `kni-<name>`).
    pub host_interface: String,
    /// Full-NAT source pool, each inside one of `addresses`.
    pub local_addresses: Vec<IpAddr>,
    /// Full-NAT source ports, inclusive. `Some` exactly when
    /// `local_addresses` is non-empty (default [`DEFAULT_LOCAL_PORT_RANGE`]).
    pub local_port_range: Option<(u16, u16)>,
    /// Fixed unicast MAC address; `None` keeps the device's own.
    pub mac: Option<[u8; 6]>,
    /// Largest IP packet the port sends or accepts, in bytes
    /// ([`DEFAULT_MTU`] unless set; [`MIN_MTU`]..=[`MAX_MTU`]).
    pub mtu: u16,
}

/// `port.mtu` when unset: plain Ethernet.
pub const DEFAULT_MTU: u16 = 1500;
/// Smallest `port.mtu`: IPv6's minimum link MTU.
pub const MIN_MTU: u16 = 1280;
/// Largest `port.mtu`: the common jumbo limit (9216-byte frames).
pub const MAX_MTU: u16 = 9198;

impl Port {
    /// The devargs device name: the part before the first comma.
    pub fn device_name(&self) -> &str {
        device_name(&self.devargs)
    }

    /// True if `ip` is inside one of this port's subnets.
    pub fn on_link(&self, ip: IpAddr) -> bool {
        self.addresses.iter().any(|n| n.contains(ip))
    }

    /// True if `ip` is one of this port's own interface addresses.
    pub fn has_address(&self, ip: IpAddr) -> bool {
        self.addresses.iter().any(|n| n.addr == ip)
    }
}

pub(crate) fn device_name(devargs: &str) -> &str {
    devargs.split(',').next().unwrap_or("")
}

/// `[mgmt]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mgmt {
    /// `unix:///path` or `tcp://ip:port` (default `unix:///run/border/<instance>.sock`).
    pub listen: String,
    /// Prometheus endpoint (default none).
    pub metrics_listen: Option<SocketAddr>,
    /// `[mgmt.tls]`; required when `listen` is TCP.
    pub tls: Option<MgmtTls>,
    /// `[[mgmt.peer]]`: other border-mgmt instances that check the same
    /// backends and share their observations (default none).
    pub peers: Vec<Peer>,
    /// Independent checkers (this one and its peers) that must see a backend
    /// fail before it goes down: `1..=1 + peers` (default 1).
    pub quorum: u32,
    /// `[mgmt.bgp]`: announce VIPs through gobgpd (default none: no BGP).
    pub bgp: Option<Bgp>,
    /// The group of the operators who may read the state region and call
    /// the API on the unix socket without root (default none: root only).
    /// Files border creates are then mode 0640 and the socket 0660 with
    /// this group. The name is resolved when a process starts, not here.
    pub operators_group: Option<String>,
    /// `[mgmt.limits]`: bounds on what API clients and the config may make
    /// border-mgmt hold (defaults: [`MgmtLimits::default`]).
    pub limits: MgmtLimits,
    /// `[mgmt.agent]`: dial out to border-gw gateways and serve the API
    /// over the tunnels (default none; docs/fleet.md).
    pub agent: Option<Agent>,
}

/// `[mgmt.limits]` (docs/security.md): every resource an API client, a
/// scraper or a config can grow is bounded. Read at start; `[mgmt]` is not
/// reloadable, so an API caller cannot raise them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MgmtLimits {
    /// Concurrent `WatchEvents` streams over all connections.
    pub watch_streams: u32,
    /// Concurrent `WatchEvents` streams on one connection.
    pub watch_streams_per_connection: u32,
    /// TLS handshakes in progress at once (`tcp://` listen); connections
    /// beyond it are closed at once.
    pub tls_handshakes: u32,
    /// How long one TLS handshake may take, in milliseconds.
    pub tls_handshake_timeout_ms: u32,
    /// Open connections to `metrics_listen`; more are closed at once.
    pub metrics_connections: u32,
    /// Longest operator note (`SetBackend.note`), in bytes.
    pub note_max_bytes: u32,
    /// Memory all VIPs' Maglev rings of one table generation may take, in
    /// MiB ([`RING_SLOT_BYTES`] a slot); the tables region holds several
    /// generations, so it can reach a multiple of this.
    pub ring_memory_mib: u32,
    /// HTTP/2 streams (calls of any kind) open at once on one connection.
    pub streams_per_connection: u32,
    /// Request bytes buffered at once, all callers together, in MiB
    /// a request frame beyond it is `RESOURCE_EXHAUSTED`.
    pub request_memory_mib: u32,
    /// Of `request_memory_mib`, what only operators may take (MiB):
    /// readers and peers share the rest.
    pub operator_reserve_mib: u32,
}

impl Default for MgmtLimits {
    fn default() -> MgmtLimits {
        MgmtLimits {
            watch_streams: 64,
            watch_streams_per_connection: 8,
            tls_handshakes: 32,
            tls_handshake_timeout_ms: 10_000,
            metrics_connections: 16,
            note_max_bytes: 1024,
            ring_memory_mib: 512,
            streams_per_connection: 128,
            request_memory_mib: 64,
            operator_reserve_mib: 16,
        }
    }
}

/// Bytes one Maglev ring slot takes in a table generation (a backend index).
pub const RING_SLOT_BYTES: u64 = 4;
/// Upper bound of `mgmt.limits.ring_memory_mib`: the tables region (at most
/// 16 GiB) holds 8 generations.
pub const MAX_RING_MEMORY_MIB: u32 = 2048;

impl Config {
    /// Bytes the Maglev rings of all VIPs take in one table generation.
    pub fn ring_bytes(&self) -> u64 {
        self.vips
            .iter()
            .map(|v| RING_SLOT_BYTES * u64::from(v.maglev_table_size))
            .sum()
    }
}

/// `[mgmt.agent]`: agent mode (docs/fleet.md). border-mgmt keeps a pool of
/// idle mutual-TLS tunnels to the first gateway that answers and serves
/// `border.v1` over each; `[mgmt.tls]` cert/key are its identity and its
/// `client_ca` verifies the gateways.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Agent {
    /// The appliance id the gateways route by (`border-appliance` metadata).
    pub id: String,
    /// Gateways in order of preference (at least one).
    pub gateways: Vec<GatewayAddr>,
    /// Open more tunnels when fewer than this many are idle (default 2).
    pub min_idle: u32,
    /// How many tunnels to open at once (default 10).
    pub grow_by: u32,
    /// Upper bound of open tunnels (default 500).
    pub max_tunnels: u32,
    /// An idle tunnel above `min_idle` closes after this long (default 60 s).
    pub idle_timeout_ms: u32,
    /// First reconnect backoff ceiling (default 500 ms).
    pub backoff_min_ms: u32,
    /// Largest reconnect backoff ceiling (default 30 s).
    pub backoff_max_ms: u32,
    /// The gateways' certificates (`sha256:<hex>`, lowercase): a tunnel to
    /// a gateway whose certificate is not one of these is closed before
    /// the preface (docs/fleet.md). At least one.
    pub gateway_fingerprints: Vec<String>,
    /// The failure count behind the backoff resets only once a tunnel has
    /// stayed up this long (default 5 s): a gateway that accepts tunnels
    /// and drops them is redialled at backoff speed, not pool speed.
    pub backoff_reset_after_ms: u32,
}

/// A gateway's agent listener: `tcp://host:port` (a DNS name or an IP).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GatewayAddr {
    /// Host name or IP address; also the TLS name its certificate must carry.
    pub host: String,
    /// 1..=65535.
    pub port: u16,
}

impl std::fmt::Display for GatewayAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "tcp://[{}]:{}", self.host, self.port)
        } else {
            write!(f, "tcp://{}:{}", self.host, self.port)
        }
    }
}

/// `[mgmt.bgp]`: gobgpd, which border-mgmt drives to announce and withdraw
/// VIP host routes (docs/bgp.md). gobgpd's own file configures the BGP side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bgp {
    /// gobgpd's gRPC API (default `127.0.0.1:50051`, gobgpd's own default).
    pub api: SocketAddr,
    /// Standard communities added to every announced route, each
    /// `asn << 16 | value` (written `"asn:value"`).
    pub communities: Vec<u32>,
    /// Pause between withdrawing every route and exiting on SIGTERM.
    pub withdraw_grace_ms: u32,
}

/// Default `mgmt.bgp.api`: gobgpd's default gRPC listener.
pub const DEFAULT_BGP_API: &str = "127.0.0.1:50051";
/// Upper bound of `mgmt.bgp.withdraw_grace_ms` (one minute).
pub const MAX_WITHDRAW_GRACE_MS: u32 = 60_000;

/// `[[mgmt.peer]]`: another border-mgmt whose health observations count as
/// votes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Its gRPC API (its `mgmt.listen`); TCP needs `[mgmt.tls]` here (this
    /// instance's certificate and key are the client identity).
    pub address: Listen,
    /// A label for logs and decisions (default: the address).
    pub name: Option<String>,
    /// A trusted checker: when its fresh view says a backend is down, the
    /// backend is down whatever the quorum says (docs/health.md).
    pub trusted: bool,
}

impl Peer {
    /// The address as written: `unix:///path` or `tcp://ip:port`.
    pub fn address_string(&self) -> String {
        match &self.address {
            Listen::Unix(p) => format!("unix://{}", p.display()),
            Listen::Tcp(a) => format!("tcp://{a}"),
        }
    }

    /// [`Peer::name`], or the address.
    pub fn label(&self) -> String {
        self.name.clone().unwrap_or_else(|| self.address_string())
    }
}

/// A parsed `mgmt.listen`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Listen {
    /// `unix:///absolute/path`.
    Unix(PathBuf),
    /// `tcp://ip:port`.
    Tcp(SocketAddr),
}

impl Mgmt {
    /// The parsed `listen`; always `Some` in a validated [`Config`].
    pub fn listen_addr(&self) -> Option<Listen> {
        validate::parse_listen(&self.listen).ok()
    }
}

/// `[mgmt.tls]`: mutual TLS for the gRPC API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MgmtTls {
    /// Server certificate chain (PEM).
    pub cert: PathBuf,
    /// Server private key (PEM).
    pub key: PathBuf,
    /// CA that signs client certificates (PEM).
    pub client_ca: PathBuf,
    /// Pinned client certificates with role [`ClientRole::Operator`],
    /// `sha256:<64 lowercase hex>`. Together with the two lists below at
    /// least one certificate is pinned, and each only once.
    pub client_fingerprints: Vec<String>,
    /// Pinned certificates with role [`ClientRole::Reader`].
    pub reader_fingerprints: Vec<String>,
    /// Pinned certificates with role [`ClientRole::Peer`].
    pub peer_fingerprints: Vec<String>,
}

impl MgmtTls {
    /// Every pinned fingerprint with its role.
    pub fn pins(&self) -> impl Iterator<Item = (&str, ClientRole)> {
        fn role(list: &[String], r: ClientRole) -> impl Iterator<Item = (&str, ClientRole)> {
            list.iter().map(move |f| (f.as_str(), r))
        }
        role(&self.client_fingerprints, ClientRole::Operator)
            .chain(role(&self.reader_fingerprints, ClientRole::Reader))
            .chain(role(&self.peer_fingerprints, ClientRole::Peer))
    }

    /// The role of a pinned fingerprint (`sha256:<hex>`, either case).
    pub fn role_of(&self, fingerprint: &str) -> Option<ClientRole> {
        let fp = fingerprint.to_ascii_lowercase();
        self.pins().find(|(f, _)| *f == fp).map(|(_, r)| r)
    }
}

/// What a caller of the gRPC API may call (docs/api.md, *Roles*).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClientRole {
    /// Everything (`client_fingerprints`, and allowed unix-socket callers).
    Operator,
    /// The `Get*` calls and `WatchEvents` (`reader_fingerprints`).
    Reader,
    /// `border.v1.BorderHealth` only: another appliance's border-mgmt
    /// (`peer_fingerprints`).
    Peer,
}

impl ClientRole {
    /// `operator`, `reader` or `peer`.
    pub fn as_str(self) -> &'static str {
        match self {
            ClientRole::Operator => "operator",
            ClientRole::Reader => "reader",
            ClientRole::Peer => "peer",
        }
    }
}

/// `[[vip]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vip {
    /// Unique safe identifier.
    pub name: String,
    /// Inside the subnet of some port's `addresses`.
    pub address: IpAddr,
    /// 1..=65535.
    pub port: u16,
    /// Default [`Protocol::Tcp`].
    pub protocol: Protocol,
    /// Default [`Mode::FullNat`].
    pub mode: Mode,
    /// Default [`ProxyProtocol::None`].
    pub proxy_protocol: ProxyProtocol,
    /// Send the PPv2 header as its own segment right after the handshake.
    pub proxy_protocol_send_on_connect: bool,
    /// Default `[UniqueId]` (with proxy_protocol = v2; empty with none).
    pub proxy_protocol_tlvs: Vec<PpTlv>,
    /// Upper bound of the whole PPv2 header in bytes (default 107).
    pub proxy_protocol_max_len: u16,
    /// Maglev ring size M: prime, >= 100 x backends (default 65537).
    pub maglev_table_size: u32,
    /// Prefer backends of this appliance's zone while any is healthy.
    pub zone_affinity: bool,
    /// Full-NAT TCP: move the client's timestamps onto the appliance's
    /// clock so a backend accepts a reused local tuple (default true).
    pub translate_timestamps: bool,
    /// TCP: whether border answers clients' SYNs with SYN cookies itself
    /// (default [`SynProxy::Off`]).
    pub syn_proxy: SynProxy,
    /// What the flow hash of a new flow's Maglev pick covers (default
    /// [`FlowHashFields::FiveTuple`]).
    pub hash: FlowHashFields,
    /// `persistence_timeout` in seconds (0: off): a client address keeps
    /// the backend it was given while it opens new flows at most this far
    /// apart, or has any flow open (docs/design.md §2, "Persistence").
    pub persistence_timeout: u32,
    /// When the VIP is announced over BGP (default [`Announce::Healthy`]);
    /// meaningful only with `[mgmt.bgp]`.
    pub announce: Announce,
    /// `[vip.health]`; `None` means backends are never probed.
    pub health: Option<Health>,
    /// `[[vip.backend]]`, in file order; same address family as `address`.
    pub backends: Vec<Backend>,
    /// `[vip.limits]`: admission of new flows (default: none).
    pub limits: VipLimits,
}

/// `[vip.limits]`: which new flows a VIP admits (docs/config.md). A 0
/// means no limit; border-dp's workers enforce them
/// (`dataplane/src/lb/admit.rs`), and a change takes effect with the next
/// table generation, without a restart.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct VipLimits {
    /// Open connections at most (all workers together; a connection stops
    /// counting once it closes).
    pub max_connections: u32,
    /// New flows per second admitted by each worker's token bucket.
    pub new_connections_per_second: u32,
    /// That bucket's depth (default: the rate).
    pub new_connections_burst: u32,
    /// New flows per second from one source prefix (`syn_per_source_per_second`
    /// on a TCP VIP, `udp_flows_per_source_per_second` on a UDP VIP).
    pub per_source_per_second: u32,
    /// Depth of each source prefix's bucket (default: the rate).
    pub per_source_burst: u32,
    /// Length of the IPv4 source prefix one bucket covers (default 24).
    pub source_prefix_v4: u8,
    /// Length of the IPv6 source prefix one bucket covers (default 64).
    pub source_prefix_v6: u8,
    /// Source prefixes each worker tracks at most (a power of two).
    pub source_table_size: u32,
    /// Sources allowed to open flows (empty: all but `deny`); the longest
    /// matching prefix of `allow` and `deny` decides.
    pub allow: Vec<IpNet>,
    /// Sources refused.
    pub deny: Vec<IpNet>,
}

impl Default for VipLimits {
    /// No limit, no list; the defaults of the per-source table.
    fn default() -> Self {
        VipLimits {
            max_connections: 0,
            new_connections_per_second: 0,
            new_connections_burst: 0,
            per_source_per_second: 0,
            per_source_burst: 0,
            source_prefix_v4: Self::DEFAULT_PREFIX_V4,
            source_prefix_v6: Self::DEFAULT_PREFIX_V6,
            source_table_size: Self::DEFAULT_SOURCE_TABLE,
            allow: Vec::new(),
            deny: Vec::new(),
        }
    }
}

impl VipLimits {
    /// Default `source_prefix_v4`.
    pub const DEFAULT_PREFIX_V4: u8 = 24;
    /// Default `source_prefix_v6`.
    pub const DEFAULT_PREFIX_V6: u8 = 64;
    /// Default `source_table_size`.
    pub const DEFAULT_SOURCE_TABLE: u32 = 16_384;
    /// Largest `source_table_size`.
    pub const MAX_SOURCE_TABLE: u32 = 1 << 22;
    /// Most entries of `allow` and `deny` together.
    pub const MAX_PREFIXES: usize = 65_536;

    /// Whether any limit or list is set.
    pub fn any(&self) -> bool {
        self.max_connections > 0
            || self.new_connections_per_second > 0
            || self.per_source_per_second > 0
            || !self.allow.is_empty()
            || !self.deny.is_empty()
    }
}

/// `vip.announce`: when border-mgmt announces the VIP's host route over BGP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Announce {
    /// border-dp alive, the current generation adopted, and at least one
    /// eligible backend (a VIP in fail-open has none).
    #[default]
    Healthy,
    /// Whenever border-dp is alive.
    Always,
    /// Never.
    Never,
}

/// Transport protocol of a VIP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
}

/// Forwarding mode of a VIP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Source becomes a local address:port from a port's pool.
    FullNat,
    /// Destination rewrite only; backends route replies through the appliance.
    Dnat,
    /// Direct server return: the client's packet reaches the backend
    /// unchanged (its MAC rewritten, or encapsulated), and the backend,
    /// holding the VIP itself, answers the client directly.
    Dsr(Encap),
}

impl Mode {
    /// True for every direct-server-return mode.
    pub fn is_dsr(self) -> bool {
        matches!(self, Mode::Dsr(_))
    }
}

/// `vip.encap`: how a DSR VIP's packets reach the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Encap {
    /// Only the destination MAC is rewritten (IPVS "gatewaying"): the
    /// backend shares a link with the appliance.
    #[default]
    None,
    /// IP in IP: IPIP (IPv4 in IPv4) or IP6IP6 (IPv6 in IPv6).
    Ipip,
    /// Generic UDP Encapsulation (variant 0, 4-byte header) to UDP port
    /// [`GUE_PORT`].
    Gue,
}

/// The UDP port GUE-encapsulated packets are sent to (Katran's default).
pub const GUE_PORT: u16 = 6080;

/// `vip.syn_proxy`: border answers a client's SYN with a SYN cookie and
/// opens the backend's connection only once the client's ACK proved it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SynProxy {
    /// Every SYN goes to a backend.
    #[default]
    Off,
    /// Cookies while the worker's half-open connections are under pressure.
    Auto,
    /// Cookies for every SYN.
    Always,
}

/// `vip.hash`: which fields of a new flow pick its backend. Stateless:
/// every appliance and worker computes the same pick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FlowHashFields {
    /// Source and destination address and port, and the protocol.
    #[default]
    FiveTuple,
    /// The same with the source port left out (hashed as 0): every
    /// connection of one client address goes to the same backend while
    /// the backend set stays the same (Katran's "no source port" hash).
    Source,
}

/// PROXY protocol towards backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProxyProtocol {
    /// No header.
    None,
    /// PROXY protocol v2 header in the first client data segment.
    V2,
}

/// PPv2 TLVs to include.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PpTlv {
    /// PP2_TYPE_UNIQUE_ID: the connection id.
    UniqueId,
    /// PP2_TYPE_CRC32C over the header.
    Crc32c,
    /// PP2_TYPE_AUTHORITY: SNI of a TLS ClientHello in the first segment.
    Authority,
}

/// `[vip.health]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// Probe kind.
    pub kind: HealthKind,
    /// Request path, `Some` exactly for http/https.
    pub path: Option<String>,
    /// Accepted statuses for http/https (default `[200]`); empty otherwise.
    pub expect_status: Vec<u16>,
    /// Probe interval (default 1000).
    pub interval_ms: u32,
    /// Probe timeout, < interval_ms (default 500).
    pub timeout_ms: u32,
    /// Consecutive successes to become healthy (default 2).
    pub rise: u32,
    /// Consecutive failures to become unhealthy (default 3).
    pub fall: u32,
    /// Start each probe with a PPv2 LOCAL header.
    pub send_proxy_v2: bool,
    /// Honour `X-Load-Balancing-Endpoint-Weight` (http/https only).
    pub weight_header: bool,
    /// TLS server name sent by tls/https probes (and the HTTP `Host`); `None`:
    /// no SNI, `Host` is the backend's `addr:port`.
    pub sni: Option<String>,
    /// What happens to established connections to a backend health takes
    /// down (default [`OnDown::Keep`]).
    pub on_down: OnDown,
    /// The port of the backend's agent (HAProxy's agent-check protocol):
    /// with `kind = "agent"` the agent is the check (default: the backend's
    /// port); with another kind an agent check runs beside it.
    pub agent_port: Option<u16>,
    /// Where the probe goes, when not the backend's own port (every kind
    /// but agent, which has `agent_port`).
    pub port: Option<u16>,
    /// `Some` exactly for `kind = "dns"`: the query and the answers that pass.
    pub dns: Option<DnsProbe>,
    /// `Some` exactly for `kind = "udp"`: what is sent and what the reply
    /// must match.
    pub udp: Option<UdpProbe>,
}

/// `vip.health.on_down`: established connections to a backend that health
/// takes down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OnDown {
    /// Keep them on the backend until they end.
    #[default]
    Keep,
    /// Reset them: the next packet of such a TCP connection, from either
    /// end, is answered with a RST; UDP flows are forgotten.
    Reset,
}

/// Health probe kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HealthKind {
    /// TCP connect.
    Tcp,
    /// Full TLS handshake.
    Tls,
    /// HTTP request.
    Http,
    /// HTTP over TLS.
    Https,
    /// The backend's agent says how it is (HAProxy's agent-check protocol).
    Agent,
    /// A DNS query over UDP, answered by a DNS response.
    Dns,
    /// A datagram, answered by one that matches a pattern.
    Udp,
}

impl HealthKind {
    /// True for http and https.
    pub fn is_http(self) -> bool {
        matches!(self, HealthKind::Http | HealthKind::Https)
    }
}

/// `[[vip.backend]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backend {
    /// Backend address.
    pub address: IpAddr,
    /// 1..=65535.
    pub port: u16,
    /// 0..=65535 (default 1); 0 drains.
    pub weight: u32,
    /// Availability zone of the backend.
    pub zone: Option<String>,
    /// Open connections at most (0: no limit); `[vip.limits]`'s
    /// `max_connections` semantics.
    pub max_connections: u32,
}

macro_rules! names {
    ($ty:ident { $($variant:ident => $name:literal),* $(,)? }) => {
        impl $ty {
            /// The spelling used in the config file.
            pub fn as_str(self) -> &'static str {
                match self { $($ty::$variant => $name),* }
            }
        }
        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
names!(PollMode { Busy => "busy", Adaptive => "adaptive" });
names!(Protocol { Tcp => "tcp", Udp => "udp" });
names!(Encap { None => "none", Ipip => "ipip", Gue => "gue" });

impl Mode {
    /// The spelling used in the config file (`mode`; a DSR VIP's `encap`
    /// is [`Encap::as_str`]).
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::FullNat => "fullnat",
            Mode::Dnat => "dnat",
            Mode::Dsr(_) => "dsr",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
names!(ProxyProtocol { None => "none", V2 => "v2" });
names!(SynProxy { Off => "off", Auto => "auto", Always => "always" });
names!(PpTlv { UniqueId => "unique_id", Crc32c => "crc32c", Authority => "authority" });
names!(Announce { Healthy => "healthy", Always => "always", Never => "never" });
names!(HealthKind { Tcp => "tcp", Tls => "tls", Http => "http", Https => "https", Agent => "agent", Dns => "dns", Udp => "udp" });
names!(OnDown { Keep => "keep", Reset => "reset" });

impl Config {
    /// Reads and validates a config file. Relative `[mgmt.tls]` paths are
    /// resolved against the directory of the file. Errors name the path as given.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let bytes = std::fs::read(path).map_err(|source| ConfigError::Io {
            path: path.to_owned(),
            source,
        })?;
        let origin = path.display().to_string();
        let text = match std::str::from_utf8(&bytes) {
            Ok(t) => t,
            Err(e) => {
                let valid = bytes.get(..e.valid_up_to()).unwrap_or(&[]);
                let valid = std::str::from_utf8(valid).unwrap_or("");
                return Err(error::Diag {
                    at: valid.len(),
                    key: String::new(),
                    message: "invalid UTF-8 (a config file must be UTF-8)".to_owned(),
                }
                .into_error(valid, &origin));
            }
        };
        let mut config = Config::from_toml_str(text, &origin)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if let Some(tls) = &mut config.mgmt.tls {
                for p in [&mut tls.cert, &mut tls.key, &mut tls.client_ca] {
                    if p.is_relative() {
                        *p = dir.join(&*p);
                    }
                }
            }
        }
        Ok(config)
    }

    /// Parses and validates config text. `origin` names the text in errors
    /// (a file name, or e.g. `<api>`). Paths are kept as written.
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let (table, mut syntax) = toml::de::DeTable::parse_recoverable(text);
        // Key paths by span are only needed to explain an error, and indexing
        // every key of a large config costs as much as parsing it: the index
        // is built from a second parse when there is something to explain.
        let index = || error::SpanIndex::build(&toml::de::DeTable::parse_recoverable(text).0);
        syntax.sort_by_key(|e| e.span().map_or(0, |s| s.start));
        if let Some(e) = syntax.first() {
            return Err(index().error(text, origin, e));
        }
        let raw = raw::RawConfig::deserialize(toml::de::Deserializer::from(table))
            .map_err(|e| index().error(text, origin, &e))?;
        validate::validate(raw).map_err(|d| d.into_error(text, origin))
    }

    /// border-dp's EAL file prefix: `--file-prefix` of `eal_args`, else
    /// `border-<instance>` (what border-dp adds). Tools that attach to
    /// border-dp (`dpdk-dumpcap`, `dpdk-telemetry.py`) need it.
    pub fn eal_file_prefix(&self) -> String {
        let args = &self.dataplane.eal_args;
        for (i, a) in args.iter().enumerate() {
            if let Some(p) = a.strip_prefix("--file-prefix=") {
                return p.to_owned();
            }
            if a == "--file-prefix" {
                if let Some(p) = args.get(i + 1) {
                    return p.clone();
                }
            }
        }
        format!("border-{}", self.instance)
    }

    /// The port called `name`.
    pub fn port(&self, name: &str) -> Option<&Port> {
        self.ports.iter().find(|p| p.name == name)
    }

    /// Index into [`Config::ports`] of the port called `name`.
    pub fn port_index(&self, name: &str) -> Option<usize> {
        self.ports.iter().position(|p| p.name == name)
    }

    /// The VIP called `name`.
    pub fn vip(&self, name: &str) -> Option<&Vip> {
        self.vips.iter().find(|v| v.name == name)
    }

    /// Index of the first port whose subnets contain `ip` (where ARP/NDP for
    /// `ip` is answered).
    pub fn port_for_address(&self, ip: IpAddr) -> Option<usize> {
        self.ports.iter().position(|p| p.on_link(ip))
    }

    /// Every address the appliance answers ARP/NDP/ICMP echo for, as
    /// `(port index, address)`: each port's own addresses, plus every VIP
    /// address on the first port whose subnet contains it. Sorted, no duplicates.
    pub fn owned_addresses(&self) -> Vec<(usize, IpAddr)> {
        let mut out: Vec<(usize, IpAddr)> = self
            .ports
            .iter()
            .enumerate()
            .flat_map(|(i, p)| p.addresses.iter().map(move |n| (i, n.addr)))
            .collect();
        out.extend(
            self.vips
                .iter()
                .filter_map(|v| self.port_for_address(v.address).map(|i| (i, v.address))),
        );
        out.sort();
        out.dedup();
        out
    }

    /// The default `mgmt.listen` of an instance: `unix:///run/border/<instance>.sock`.
    pub fn default_mgmt_listen(instance: &str) -> String {
        format!("unix:///run/border/{instance}.sock")
    }
}

/// Reads and validates `path` for `border-dp --check-config FILE` (and
/// `border-mgmt`): same as [`Config::from_file`]; print the error with `{}`.
pub fn check_config_file(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
    Config::from_file(path.as_ref())
}
