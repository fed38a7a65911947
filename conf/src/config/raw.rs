//! The file as written: serde targets with spans, no semantics yet.
//!
//! Every field is wrapped in [`Spanned`] so semantic validation can point at
//! the offending value. Enumerations and addresses stay strings here and are
//! parsed in `validate`, so every error has the same shape. Duration keys
//! take a number in the key's unit or a string (`"5s"`, `"300ms"`), read
//! here into that unit (`crate::duration`).

use serde::Deserialize;

use crate::duration::{self, Ms, Sec};
use toml::Spanned as S;

type List<T> = S<Vec<S<T>>>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawConfig {
    pub instance: S<String>,
    pub zone: Option<S<String>>,
    pub dataplane: S<RawDataplane>,
    pub port: Option<List<RawPort>>,
    pub mgmt: Option<S<RawMgmt>>,
    pub vip: Option<List<RawVip>>,
    pub records: Option<S<RawRecords>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawRecords {
    pub ring_slots: Option<S<u32>>,
    pub log_empty: Option<S<bool>>,
    pub ipfix: Option<List<RawIpfix>>,
    pub json: Option<S<RawJsonLog>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawIpfix {
    pub collector: S<String>,
    pub observation_domain: Option<S<u32>>,
    #[serde(default, deserialize_with = "duration::spanned::<Sec, _>")]
    pub template_interval_s: Option<S<u32>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawJsonLog {
    pub path: S<String>,
    pub rotate_bytes: Option<S<u64>>,
    pub keep: Option<S<u32>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawDataplane {
    pub main_lcore: Option<S<u32>>,
    pub worker_lcores: List<u32>,
    pub lcore_cpus: Option<List<u32>>,
    pub poll: Option<S<String>>,
    pub eal_args: Option<List<String>>,
    pub conntrack_per_worker: Option<S<u32>>,
    pub flow_hash_key: S<String>,
    pub timeouts: Option<S<RawTimeouts>>,
    pub capture: Option<S<bool>>,
    pub icmp_echo_per_second: Option<S<u32>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawTimeouts {
    #[serde(default, deserialize_with = "duration::spanned::<Sec, _>")]
    pub tcp_syn: Option<S<u32>>,
    #[serde(default, deserialize_with = "duration::spanned::<Sec, _>")]
    pub tcp_established: Option<S<u32>>,
    #[serde(default, deserialize_with = "duration::spanned::<Sec, _>")]
    pub tcp_closing: Option<S<u32>>,
    #[serde(default, deserialize_with = "duration::spanned::<Sec, _>")]
    pub udp: Option<S<u32>>,
    #[serde(default, deserialize_with = "duration::spanned::<Sec, _>")]
    pub local_port_cooldown: Option<S<u32>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawPort {
    pub name: S<String>,
    pub devargs: S<String>,
    pub addresses: Option<List<String>>,
    pub gateway: Option<S<String>>,
    pub host_interface: Option<S<String>>,
    pub local_addresses: Option<List<String>>,
    pub local_port_range: Option<List<u16>>,
    pub mac: Option<S<String>>,
    pub mtu: Option<S<u32>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawMgmt {
    pub listen: Option<S<String>>,
    pub metrics_listen: Option<S<String>>,
    pub tls: Option<S<RawTls>>,
    pub peer: Option<List<RawPeer>>,
    pub quorum: Option<S<u32>>,
    pub operators_group: Option<S<String>>,
    pub bgp: Option<S<RawBgp>>,
    pub limits: Option<S<RawLimits>>,
    pub agent: Option<S<RawAgent>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawLimits {
    pub watch_streams: Option<S<u32>>,
    pub watch_streams_per_connection: Option<S<u32>>,
    pub tls_handshakes: Option<S<u32>>,
    #[serde(default, deserialize_with = "duration::spanned::<Ms, _>")]
    pub tls_handshake_timeout_ms: Option<S<u32>>,
    pub metrics_connections: Option<S<u32>>,
    pub note_max_bytes: Option<S<u32>>,
    pub ring_memory_mib: Option<S<u32>>,
    pub streams_per_connection: Option<S<u32>>,
    pub request_memory_mib: Option<S<u32>>,
    pub operator_reserve_mib: Option<S<u32>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawAgent {
    pub id: S<String>,
    pub gateways: List<String>,
    pub min_idle: Option<S<u32>>,
    pub grow_by: Option<S<u32>>,
    pub max_tunnels: Option<S<u32>>,
    #[serde(default, deserialize_with = "duration::spanned::<Ms, _>")]
    pub idle_timeout_ms: Option<S<u32>>,
    #[serde(default, deserialize_with = "duration::spanned::<Ms, _>")]
    pub backoff_min_ms: Option<S<u32>>,
    #[serde(default, deserialize_with = "duration::spanned::<Ms, _>")]
    pub backoff_max_ms: Option<S<u32>>,
    pub gateway_fingerprints: Option<List<String>>,
    #[serde(default, deserialize_with = "duration::spanned::<Ms, _>")]
    pub backoff_reset_after_ms: Option<S<u32>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawBgp {
    pub api: Option<S<String>>,
    pub communities: Option<List<String>>,
    #[serde(default, deserialize_with = "duration::spanned::<Ms, _>")]
    pub withdraw_grace_ms: Option<S<u32>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawPeer {
    pub address: S<String>,
    pub name: Option<S<String>>,
    pub trusted: Option<S<bool>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawTls {
    pub cert: S<String>,
    pub key: S<String>,
    pub client_ca: S<String>,
    pub client_fingerprints: Option<List<String>>,
    pub reader_fingerprints: Option<List<String>>,
    pub peer_fingerprints: Option<List<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawVip {
    pub name: S<String>,
    pub address: S<String>,
    pub port: S<u16>,
    pub protocol: Option<S<String>>,
    pub mode: Option<S<String>>,
    pub encap: Option<S<String>>,
    pub health_target: Option<S<String>>,
    pub proxy_protocol: Option<S<String>>,
    pub proxy_protocol_send_on_connect: Option<S<bool>>,
    pub proxy_protocol_tlvs: Option<List<String>>,
    pub proxy_protocol_max_len: Option<S<u32>>,
    pub maglev_table_size: Option<S<u64>>,
    pub zone_affinity: Option<S<bool>>,
    pub translate_timestamps: Option<S<bool>>,
    pub syn_proxy: Option<S<String>>,
    pub hash: Option<S<String>>,
    #[serde(default, deserialize_with = "duration::spanned::<Sec, _>")]
    pub persistence_timeout: Option<S<u32>>,
    pub announce: Option<S<String>>,
    pub health: Option<S<RawHealth>>,
    pub backend: Option<List<RawBackend>>,
    pub limits: Option<S<RawVipLimits>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawVipLimits {
    pub max_connections: Option<S<u32>>,
    pub new_connections_per_second: Option<S<u32>>,
    pub new_connections_burst: Option<S<u32>>,
    pub syn_per_source_per_second: Option<S<u32>>,
    pub udp_flows_per_source_per_second: Option<S<u32>>,
    pub per_source_burst: Option<S<u32>>,
    pub source_prefix_v4: Option<S<u32>>,
    pub source_prefix_v6: Option<S<u32>>,
    pub source_table_size: Option<S<u32>>,
    pub allow: Option<List<String>>,
    pub deny: Option<List<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawHealth {
    pub kind: S<String>,
    pub path: Option<S<String>>,
    pub expect_status: Option<List<u16>>,
    #[serde(default, deserialize_with = "duration::spanned::<Ms, _>")]
    pub interval_ms: Option<S<u32>>,
    #[serde(default, deserialize_with = "duration::spanned::<Ms, _>")]
    pub timeout_ms: Option<S<u32>>,
    pub rise: Option<S<u32>>,
    pub fall: Option<S<u32>>,
    pub send_proxy_v2: Option<S<bool>>,
    pub weight_header: Option<S<bool>>,
    pub sni: Option<S<String>>,
    pub on_down: Option<S<String>>,
    pub agent_port: Option<S<u16>>,
    pub port: Option<S<u16>>,
    pub query: Option<S<String>>,
    pub query_type: Option<S<String>>,
    pub expect_rcode: Option<List<String>>,
    pub send: Option<S<String>>,
    pub send_hex: Option<S<String>>,
    pub expect: Option<S<String>>,
    pub expect_regex: Option<S<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawBackend {
    pub address: S<String>,
    pub port: S<u16>,
    pub weight: Option<S<u32>>,
    pub zone: Option<S<String>>,
    pub max_connections: Option<S<u32>>,
}

/// One `[[vip]]` entry parsed on its own (see `reparse`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawVipEntry {
    pub vip: List<RawVip>,
}
