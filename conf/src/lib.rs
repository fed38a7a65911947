//! What border's processes share: the config model and its validation, the
//! shared-memory layouts (state region, counters, tables region), the stable
//! flow hash, the Maglev table builder, and the few system calls several
//! crates make (`os`). See docs/design.md §1 and §3.
pub mod config;
pub mod conns;
pub mod counters;
pub mod duration;
pub mod ephemeral;
pub mod flowhash;
pub mod maglev;
pub mod os;
pub mod records;
pub mod state;
pub mod tables;
mod worker_rings;
pub use worker_rings::RegionError;

pub use config::{
    check_config_file, Agent, Announce, Backend, Bgp, ClientRole, Config, ConfigError, ConfigText,
    Dataplane, DnsProbe, DnsRcode, DnsType, Encap, FlowHashFields, GatewayAddr, Health, HealthKind,
    IpNet, IpfixCollector, JsonLog, Listen, Mgmt, MgmtLimits, MgmtTls, Mode, OnDown, Peer,
    PollMode, Port, PpTlv, Protocol, ProxyProtocol, Records, SynProxy, Timeouts, UdpExpect,
    UdpProbe, Vip, VipLimits, DEFAULT_MTU, GUE_PORT, MAX_MTU, MIN_MTU,
};
