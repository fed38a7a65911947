//! placeholder
pub mod config;
pub mod counters;
pub mod flowhash;
pub mod maglev;
pub mod state;
pub mod tables;

pub use config::{
    check_config_file, Backend, Config, ConfigError, ConfigText, Dataplane, Health, HealthKind,
    IpNet, Listen, Mgmt, MgmtTls, Mode, OnDown, Peer, PollMode, Port, PpTlv, Protocol,
    ProxyProtocol, Timeouts, Vip,
};
