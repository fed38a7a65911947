//! Semantic validation: raw spanned values -> [`Config`], or the first
//! broken rule in file order.
//!
//! Every check records a [`Diag`] at the span of the offending value (or of
//! the enclosing table header when the value is a default) and carries on
//! with a fallback, so all findings are collected; the earliest in the file
//! wins. Checks that depend on other sections (VIP on a port, full-NAT
//! pools) only run when those sections were clean, so a broken port never
//! produces a misleading VIP error.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use toml::Spanned as S;

use super::error::Diag;
use super::net::{family, parse_hex, parse_mac};
use super::raw::{
    RawBackend, RawConfig, RawDataplane, RawHealth, RawMgmt, RawPeer, RawPort, RawTimeouts, RawTls,
    RawVip,
};
use super::*;

type List<T> = S<Vec<S<T>>>;

mod agent;
mod bgp;
mod limits;
mod probe_check;
mod records;
mod syn_proxy;
mod vip_limits;

pub(super) use vip_limits::MAX_RATE;

/// Default `dataplane.icmp_echo_per_second`.
const DEFAULT_ICMP_ECHO_PER_SECOND: u32 = 1000;

pub(super) use limits::rings_fit;

/// Longest `instance`, port and VIP name.
const MAX_NAME: usize = 32;
/// Longest zone name.
const MAX_ZONE: usize = 64;
/// Longest group name (useradd's limit).
const MAX_GROUP: usize = 32;
/// Longest health probe interval, in milliseconds (one hour).
const MAX_INTERVAL_MS: u32 = 3_600_000;
/// Longest unix socket path (sun_path is 108 bytes with the NUL).
const MAX_UNIX_PATH: usize = 107;
/// EAL options that border derives from `main_lcore` / `worker_lcores`.
const LCORE_OPTIONS: [&str; 3] = ["--lcores", "--main-lcore", "--master-lcore"];

pub(super) fn validate(raw: RawConfig) -> Result<Config, Diag> {
    let mut v = V { diags: Vec::new() };
    let config = v.config(&raw);
    match v
        .diags
        .into_iter()
        .enumerate()
        .min_by_key(|(i, d)| (d.at, *i))
    {
        Some((_, d)) => Err(d),
        None => Ok(config),
    }
}

struct V {
    diags: Vec<Diag>,
}

/// Validates one `[[vip]]` entry, parsed on its own, as entry `index` of
/// `config` (whose other sections are valid): the VIP, or `None` when the
/// entry breaks a rule (the caller then validates the whole text to report it).
pub(super) fn lone_vip(config: &Config, raw: &S<RawVip>, index: usize) -> Option<Vip> {
    let mut v = V { diags: Vec::new() };
    let key = format!("vip[{index}]");
    let vip = v.vip(raw, &key, &config.ports, true, config.zone.is_some());
    v.announce_needs_bgp([(index, raw)], config.mgmt.bgp.is_some());
    v.syn_proxy_dnat_needs_one_worker([(index, raw)], config.dataplane.worker_lcores.len());
    v.diags.is_empty().then_some(vip)
}

/// What a VIP repeats of an earlier one.
pub(super) enum Clash {
    /// Its name.
    Name,
    /// Its address, port and protocol.
    Listener,
}

/// VIP `vip` repeats `kind` of VIP `earlier`.
pub(super) struct Found {
    pub vip: usize,
    pub kind: Clash,
    pub earlier: usize,
}

/// The rules between VIPs: names are unique, and so is each (address, port,
/// protocol) a VIP listens on. Every repetition, named after the first VIP
/// that had it.
pub(super) fn clashes(vips: &[Vip]) -> Vec<Found> {
    let mut names: HashMap<&str, usize> = HashMap::new();
    let mut listeners: HashMap<(IpAddr, u16, Protocol), usize> = HashMap::new();
    let mut found = Vec::new();
    for (i, vip) in vips.iter().enumerate() {
        if let Some(&earlier) = names.get(vip.name.as_str()) {
            found.push(Found {
                vip: i,
                kind: Clash::Name,
                earlier,
            });
        } else {
            names.insert(&vip.name, i);
        }
        if !vip.address.is_unspecified() {
            let l = (vip.address, vip.port, vip.protocol);
            if let Some(&earlier) = listeners.get(&l) {
                found.push(Found {
                    vip: i,
                    kind: Clash::Listener,
                    earlier,
                });
            } else {
                listeners.insert(l, i);
            }
        }
    }
    found
}

fn at<T>(s: &S<T>) -> usize {
    s.span().start
}

/// Value of an optional key, or `default`.
/// EAL options without which `dpdk-dumpcap` cannot attach: no
/// multi-process socket (`--no-shconf`, `--in-memory`), or memory a
/// secondary process cannot map (`--no-huge`).
const CAPTURE_BLOCKING_EAL_ARGS: &[&str] = &["--no-shconf", "--in-memory", "--no-huge"];

fn or<T: Copy>(o: &Option<S<T>>, default: T) -> T {
    o.as_ref().map_or(default, |s| *s.get_ref())
}

/// Position of an optional key, or of the enclosing table.
fn pos<T>(o: &Option<S<T>>, table: usize) -> usize {
    o.as_ref().map_or(table, at)
}

fn quoted_list(options: &[&str]) -> String {
    let q: Vec<String> = options.iter().map(|o| format!("{o:?}")).collect();
    match q.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        Some((last, _)) => last.clone(),
        None => String::new(),
    }
}

fn nets(ns: &[IpNet]) -> String {
    if ns.is_empty() {
        return "none".to_owned();
    }
    ns.iter()
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `unix:///absolute/path` or `tcp://ip:port`.
pub(super) fn parse_listen(s: &str) -> Result<Listen, String> {
    let expected = "expected \"unix:///absolute/path\" or \"tcp://ip:port\"";
    if let Some(path) = s.strip_prefix("unix://") {
        if !path.starts_with('/') || path.ends_with('/') {
            return Err(format!(
                "{s:?} does not name an absolute socket path ({expected})"
            ));
        }
        if path.contains('\0') {
            return Err(format!("{s:?} contains a NUL character ({expected})"));
        }
        if path.len() > MAX_UNIX_PATH {
            return Err(format!(
                "socket path is {} bytes long (expected at most {MAX_UNIX_PATH})",
                path.len()
            ));
        }
        return Ok(Listen::Unix(PathBuf::from(path)));
    }
    if let Some(addr) = s.strip_prefix("tcp://") {
        return match addr.parse::<SocketAddr>() {
            Ok(a) if a.port() != 0 => Ok(Listen::Tcp(a)),
            Ok(_) => Err(format!("{s:?} has port 0 (expected a port 1..=65535)")),
            Err(_) => Err(format!(
                "{s:?} is not tcp://ip:port (expected e.g. \"tcp://0.0.0.0:50051\" or \"tcp://[::1]:50051\")"
            )),
        };
    }
    Err(format!("{s:?} is not a listen address ({expected})"))
}

/// Everything about one port that cross-port and VIP checks need.
struct PortInfo {
    range_at: usize,
    range_default: bool,
}

/// A VIP's PROXY protocol options besides the version.
struct ProxyOptions {
    send_on_connect: bool,
    tlvs: Vec<PpTlv>,
    max_len: u16,
}

impl V {
    fn err(&mut self, at: usize, key: impl Into<String>, message: impl Into<String>) {
        self.diags.push(Diag {
            at,
            key: key.into(),
            message: message.into(),
        });
    }

    /// Checks a name made of A-Z a-z 0-9 _ - (and `.` if `dot`), 1..=max chars.
    fn name(&mut self, s: &S<String>, key: &str, max: usize, dot: bool) {
        let value = s.get_ref();
        let charset = if dot {
            "A-Z a-z 0-9 _ - ."
        } else {
            "A-Z a-z 0-9 _ -"
        };
        let count = value.chars().count();
        if count == 0 {
            self.err(
                at(s),
                key,
                format!("must not be empty (expected 1..={max} characters from {charset})"),
            );
        } else if count > max {
            self.err(
                at(s),
                key,
                format!("{value:?} is {count} characters long (expected at most {max})"),
            );
        } else if let Some(c) = value
            .chars()
            .find(|&c| !(c.is_ascii_alphanumeric() || c == '_' || c == '-' || (dot && c == '.')))
        {
            self.err(
                at(s),
                key,
                format!("{value:?} contains {c:?} (expected only {charset})"),
            );
        }
    }

    fn choice<T: Copy>(
        &mut self,
        s: &Option<S<String>>,
        key: &str,
        options: &[(&str, T)],
        default: T,
    ) -> T {
        let Some(s) = s else { return default };
        let value = s.get_ref();
        if let Some((_, t)) = options.iter().find(|(name, _)| name == value) {
            return *t;
        }
        let names: Vec<&str> = options.iter().map(|(n, _)| *n).collect();
        self.err(
            at(s),
            key,
            format!("unknown value {value:?} (expected {})", quoted_list(&names)),
        );
        default
    }

    fn ip(&mut self, s: &S<String>, key: &str) -> Option<IpAddr> {
        match s.get_ref().parse::<IpAddr>() {
            Ok(ip) => Some(ip),
            Err(_) => {
                self.err(
                    at(s),
                    key,
                    format!(
                        "{:?} is not an IP address (expected e.g. \"10.0.0.1\" or \"2001:db8::1\")",
                        s.get_ref()
                    ),
                );
                None
            }
        }
    }

    /// An optional value that must be in 1..=max; `unit` follows the range.
    fn nonzero(&mut self, s: &Option<S<u32>>, key: &str, max: u32, unit: &str) {
        if let Some(s) = s {
            let n = *s.get_ref();
            if n == 0 || n > max {
                self.err(
                    at(s),
                    key,
                    format!("{n} is out of range (expected 1..={max}{unit})"),
                );
            }
        }
    }

    fn config(&mut self, raw: &RawConfig) -> Config {
        self.name(&raw.instance, "instance", MAX_NAME, false);
        let instance = raw.instance.get_ref().clone();
        let zone = raw.zone.as_ref().map(|z| {
            self.name(z, "zone", MAX_ZONE, true);
            z.get_ref().clone()
        });
        let dataplane = self.dataplane(&raw.dataplane);
        let before = self.diags.len();
        let ports = self.ports(raw.port.as_ref());
        let ports_ok = self.diags.len() == before;
        let mgmt = self.mgmt(raw.mgmt.as_ref(), &instance);
        let before = self.diags.len();
        let vips = self.vips(raw.vip.as_ref(), &ports, ports_ok, zone.is_some());
        let raw_vips: &[S<RawVip>] = raw.vip.as_ref().map_or(&[], |l| l.get_ref());
        if self.diags.len() == before && vips.len() == raw_vips.len() {
            self.ring_budget(raw_vips, &vips, mgmt.limits.ring_memory_mib);
        }
        self.announce_needs_bgp(raw_vips.iter().enumerate(), mgmt.bgp.is_some());
        self.syn_proxy_dnat_needs_one_worker(
            raw_vips.iter().enumerate(),
            dataplane.worker_lcores.len(),
        );
        let records = raw.records.as_ref().map(|r| self.records(r));
        Config {
            instance,
            zone,
            dataplane,
            ports,
            mgmt,
            vips,
            records,
        }
    }

    fn dataplane(&mut self, sd: &S<RawDataplane>) -> Dataplane {
        let d = sd.get_ref();
        let main_lcore = or(&d.main_lcore, 0);
        if let Some(m) = &d.main_lcore {
            if main_lcore >= MAX_LCORE {
                self.err(
                    at(m),
                    "dataplane.main_lcore",
                    format!(
                        "{main_lcore} is out of range (expected an lcore id 0..={})",
                        MAX_LCORE - 1
                    ),
                );
            }
        }

        let workers = d.worker_lcores.get_ref();
        if workers.is_empty() {
            self.err(
                at(&d.worker_lcores),
                "dataplane.worker_lcores",
                "must list at least one lcore (expected e.g. [1])",
            );
        }
        let mut seen: HashMap<u32, usize> = HashMap::new();
        for (i, w) in workers.iter().enumerate() {
            let key = format!("dataplane.worker_lcores[{i}]");
            let n = *w.get_ref();
            if n >= MAX_LCORE {
                self.err(
                    at(w),
                    &key,
                    format!(
                        "{n} is out of range (expected an lcore id 0..={})",
                        MAX_LCORE - 1
                    ),
                );
            } else if n == main_lcore {
                self.err(
                    at(w),
                    &key,
                    format!("lcore {n} is the main_lcore (expected worker lcores other than main_lcore {main_lcore})"),
                );
            } else if let Some(j) = seen.get(&n) {
                self.err(
                    at(w),
                    &key,
                    format!("lcore {n} is listed twice (also worker_lcores[{j}]; expected distinct lcores)"),
                );
            } else {
                seen.insert(n, i);
            }
        }
        let worker_lcores: Vec<u32> = workers.iter().map(|w| *w.get_ref()).collect();

        let lcore_cpus = d.lcore_cpus.as_ref().map(|list| {
            let cpus: Vec<u32> = list.get_ref().iter().map(|c| *c.get_ref()).collect();
            if cpus.len() != worker_lcores.len() + 1 {
                self.err(
                    at(list),
                    "dataplane.lcore_cpus",
                    format!(
                        "lists {} CPUs (expected {}: one for main_lcore, then one per worker_lcores entry)",
                        cpus.len(),
                        worker_lcores.len() + 1
                    ),
                );
            }
            for (i, c) in list.get_ref().iter().enumerate() {
                if *c.get_ref() >= MAX_LCORE {
                    self.err(
                        at(c),
                        format!("dataplane.lcore_cpus[{i}]"),
                        format!("{} is out of range (expected a CPU id 0..={})", c.get_ref(), MAX_LCORE - 1),
                    );
                }
            }
            cpus
        });

        let poll = self.choice(
            &d.poll,
            "dataplane.poll",
            &[("busy", PollMode::Busy), ("adaptive", PollMode::Adaptive)],
            PollMode::Adaptive,
        );

        let eal_args = self.eal_args(d);

        let conntrack_per_worker = or(&d.conntrack_per_worker, DEFAULT_CONNTRACK_PER_WORKER);
        if let Some(c) = &d.conntrack_per_worker {
            if !CONNTRACK_PER_WORKER_RANGE.contains(&conntrack_per_worker) {
                self.err(
                    at(c),
                    "dataplane.conntrack_per_worker",
                    format!(
                        "{conntrack_per_worker} is out of range (expected {}..={} entries)",
                        CONNTRACK_PER_WORKER_RANGE.start(),
                        CONNTRACK_PER_WORKER_RANGE.end()
                    ),
                );
            }
        }

        let flow_hash_key = self.flow_hash_key(d);
        let capture = self.capture(d, &eal_args);
        self.nonzero(
            &d.icmp_echo_per_second,
            "dataplane.icmp_echo_per_second",
            MAX_RATE,
            " per second",
        );
        let icmp_echo_per_second = or(&d.icmp_echo_per_second, DEFAULT_ICMP_ECHO_PER_SECOND);

        let timeouts = match &d.timeouts {
            Some(t) => self.timeouts(t.get_ref()),
            None => Timeouts::default(),
        };

        Dataplane {
            main_lcore,
            worker_lcores,
            lcore_cpus,
            poll,
            eal_args,
            conntrack_per_worker,
            flow_hash_key,
            timeouts,
            capture,
            icmp_echo_per_second,
        }
    }

    /// `capture`: DPDK's packet capture needs EAL multi-process, which
    /// these EAL options turn off (docs/capture.md).
    fn capture(&mut self, d: &RawDataplane, eal_args: &[String]) -> bool {
        let Some(c) = &d.capture else { return false };
        if !*c.get_ref() {
            return false;
        }
        let blocking: Vec<&str> = eal_args
            .iter()
            .map(String::as_str)
            .filter(|a| CAPTURE_BLOCKING_EAL_ARGS.contains(a))
            .collect();
        if !blocking.is_empty() {
            self.err(
                at(c),
                "dataplane.capture",
                format!(
                    "needs EAL multi-process and hugepages: remove {} from eal_args",
                    blocking.join(", ")
                ),
            );
        }
        true
    }

    /// `eal_args`: passed to DPDK as given, without the lcore options
    /// border derives itself.
    fn eal_args(&mut self, d: &RawDataplane) -> Vec<String> {
        let mut eal_args = Vec::new();
        if let Some(args) = &d.eal_args {
            for (i, a) in args.get_ref().iter().enumerate() {
                let key = format!("dataplane.eal_args[{i}]");
                let s = a.get_ref();
                let lcore_opt = LCORE_OPTIONS
                    .iter()
                    .any(|o| s == o || s.strip_prefix(o).is_some_and(|r| r.starts_with('=')))
                    || (!s.starts_with("--") && (s.starts_with("-l") || s.starts_with("-c")));
                if s.contains('\0') {
                    self.err(at(a), &key, "contains a NUL character");
                } else if lcore_opt {
                    self.err(
                        at(a),
                        &key,
                        format!("{s:?} is derived from main_lcore and worker_lcores (remove it from eal_args)"),
                    );
                }
                eal_args.push(s.clone());
            }
        }
        eal_args
    }

    /// `flow_hash_key`: exactly 16 bytes in hex.
    fn flow_hash_key(&mut self, d: &RawDataplane) -> [u8; 16] {
        let key_text = d.flow_hash_key.get_ref();
        match parse_hex::<16>(key_text) {
            Some(k) => k,
            None => {
                let n = key_text.chars().count();
                let msg = if n != 32 {
                    format!("is {n} characters long (expected exactly 32 hex digits, 16 bytes, e.g. \"00112233445566778899aabbccddeeff\")")
                } else {
                    let c = key_text
                        .chars()
                        .find(|c| !c.is_ascii_hexdigit())
                        .unwrap_or('?');
                    format!("contains {c:?} (expected exactly 32 hex digits 0-9 a-f)")
                };
                self.err(at(&d.flow_hash_key), "dataplane.flow_hash_key", msg);
                [0; 16]
            }
        }
    }

    fn timeouts(&mut self, t: &RawTimeouts) -> Timeouts {
        let def = Timeouts::default();
        let unit = " seconds";
        self.nonzero(
            &t.tcp_syn,
            "dataplane.timeouts.tcp_syn",
            MAX_TIMEOUT_SECS,
            unit,
        );
        self.nonzero(
            &t.tcp_established,
            "dataplane.timeouts.tcp_established",
            MAX_TIMEOUT_SECS,
            unit,
        );
        self.nonzero(
            &t.tcp_closing,
            "dataplane.timeouts.tcp_closing",
            MAX_TIMEOUT_SECS,
            unit,
        );
        self.nonzero(&t.udp, "dataplane.timeouts.udp", MAX_TIMEOUT_SECS, unit);
        if let Some(s) = &t.local_port_cooldown {
            let n = *s.get_ref();
            if n > MAX_TIMEOUT_SECS {
                self.err(
                    at(s),
                    "dataplane.timeouts.local_port_cooldown",
                    format!("{n} is out of range (expected 0..={MAX_TIMEOUT_SECS}{unit})"),
                );
            }
        }
        Timeouts {
            tcp_syn: or(&t.tcp_syn, def.tcp_syn),
            tcp_established: or(&t.tcp_established, def.tcp_established),
            tcp_closing: or(&t.tcp_closing, def.tcp_closing),
            udp: or(&t.udp, def.udp),
            local_port_cooldown: or(&t.local_port_cooldown, def.local_port_cooldown),
        }
    }

    fn ports(&mut self, list: Option<&List<RawPort>>) -> Vec<Port> {
        let items: &[S<RawPort>] = list.map_or(&[], |l| l.get_ref());
        if items.is_empty() {
            self.err(
                list.map_or(0, at),
                "port",
                "at least one [[port]] is required",
            );
        }
        if items.len() > crate::config::MAX_PORTS {
            self.err(
                at(&items[crate::config::MAX_PORTS]),
                "port",
                format!(
                    "has {} entries (expected at most {}: DPDK 22.11 holds 32 devices, a port and its kernel twin take two)",
                    items.len(),
                    crate::config::MAX_PORTS
                ),
            );
        }
        let mut ports = Vec::new();
        let mut names: HashMap<String, usize> = HashMap::new();
        let mut devices: HashMap<String, usize> = HashMap::new();
        let mut ifnames: HashMap<String, usize> = HashMap::new();
        let mut macs: HashMap<[u8; 6], usize> = HashMap::new();
        for (i, sp) in items.iter().enumerate() {
            let key = format!("port[{i}]");
            let (port, info) = self.port(sp, &key);
            let dup_name = names.contains_key(&port.name);
            if let Some(j) = names.get(&port.name) {
                self.err(
                    at(&sp.get_ref().name),
                    format!("{key}.name"),
                    format!(
                        "{:?} is already the name of port[{j}] (expected unique port names)",
                        port.name
                    ),
                );
            } else {
                names.insert(port.name.clone(), i);
            }
            let dev = port.device_name().to_owned();
            if let Some(j) = devices.get(&dev) {
                let other = ports.get(*j).map_or("", |p: &Port| p.name.as_str());
                self.err(
                    at(&sp.get_ref().devargs),
                    format!("{key}.devargs"),
                    format!("device {dev:?} is already used by port {other:?} (port[{j}])"),
                );
            } else if !dev.is_empty() {
                devices.insert(dev, i);
            }
            if dup_name {
                // Same name, same default host_interface: one error is enough.
            } else if let Some(j) = ifnames.get(&port.host_interface) {
                self.err(
                    pos(&sp.get_ref().host_interface, at(sp)),
                    format!("{key}.host_interface"),
                    format!(
                        "{:?} is already the host_interface of port[{j}] (expected unique names)",
                        port.host_interface
                    ),
                );
            } else {
                ifnames.insert(port.host_interface.clone(), i);
            }
            if let (Some(mac), Some(smac)) = (port.mac, &sp.get_ref().mac) {
                if let Some(j) = macs.get(&mac) {
                    self.err(
                        at(smac),
                        format!("{key}.mac"),
                        format!(
                            "{} is already the mac of port[{j}] (expected unique MAC addresses)",
                            format_mac(&mac)
                        ),
                    );
                } else {
                    macs.insert(mac, i);
                }
            }
            // Full-NAT port ranges must not overlap on a shared local address.
            if let Some((lo, hi)) = port.local_port_range {
                for (j, other) in ports.iter().enumerate() {
                    let Some((olo, ohi)) = other.local_port_range else {
                        continue;
                    };
                    let shared = port
                        .local_addresses
                        .iter()
                        .find(|a| other.local_addresses.contains(a));
                    if let Some(shared) = shared {
                        if lo <= ohi && olo <= hi {
                            self.err(
                                info.range_at,
                                format!("{key}.local_port_range"),
                                format!(
                                    "[{lo}, {hi}]{} overlaps [{olo}, {ohi}] of port {:?} (port[{j}]), which shares local address {shared} (expected disjoint ranges)",
                                    if info.range_default { " (the default)" } else { "" },
                                    other.name
                                ),
                            );
                        }
                    }
                }
            }
            ports.push(port);
        }
        ports
    }

    fn port(&mut self, sp: &S<RawPort>, key: &str) -> (Port, PortInfo) {
        let p = sp.get_ref();
        self.name(&p.name, &format!("{key}.name"), MAX_NAME, false);
        let name = p.name.get_ref().clone();
        let devargs = self.port_devargs(p, key);
        let addresses = self.port_addresses(p, key);
        let gateway = self.port_gateway(p, key, &addresses);
        let host_interface = self.port_host_interface(p, key, &name);
        let local_addresses = self.port_local_addresses(p, key, &addresses);
        let (local_port_range, range_at) = self.port_local_range(sp, key, &local_addresses);
        let mac = self.port_mac(p, key);
        (
            Port {
                name,
                devargs,
                addresses,
                gateway,
                host_interface,
                local_addresses,
                local_port_range,
                mac,
            },
            PortInfo {
                range_at,
                range_default: p.local_port_range.is_none(),
            },
        )
    }

    /// `devargs`: a device name before the first comma.
    fn port_devargs(&mut self, p: &RawPort, key: &str) -> String {
        let devargs = p.devargs.get_ref().clone();
        let dev = device_name(&devargs);
        if devargs.is_empty() {
            self.err(
                at(&p.devargs),
                format!("{key}.devargs"),
                "must not be empty (expected DPDK devargs, e.g. \"net_tap0,iface=border-ext\" or \"0000:01:00.0\")",
            );
        } else if dev.is_empty() || dev.chars().any(|c| c.is_whitespace() || c.is_control()) {
            self.err(
                at(&p.devargs),
                format!("{key}.devargs"),
                format!("{devargs:?} has no valid device name before the first comma (expected e.g. \"net_tap0,iface=border-ext\")"),
            );
        } else if devargs.contains('\0') {
            self.err(
                at(&p.devargs),
                format!("{key}.devargs"),
                "contains a NUL character",
            );
        }
        devargs
    }

    /// `addresses`: unicast interface addresses with their subnets, once each.
    fn port_addresses(&mut self, p: &RawPort, key: &str) -> Vec<IpNet> {
        let mut addresses: Vec<IpNet> = Vec::new();
        if let Some(list) = &p.addresses {
            for (i, a) in list.get_ref().iter().enumerate() {
                let akey = format!("{key}.addresses[{i}]");
                match a.get_ref().parse::<IpNet>() {
                    Ok(n) if n.addr.is_unspecified() || n.addr.is_multicast() => self.err(
                        at(a),
                        akey,
                        format!(
                            "{} is not a unicast address (expected an interface address)",
                            n.addr
                        ),
                    ),
                    Ok(n) => {
                        if let Some(j) = addresses.iter().position(|o| o.addr == n.addr) {
                            self.err(
                                at(a),
                                akey,
                                format!("{} is listed twice (also addresses[{j}])", n.addr),
                            );
                        } else {
                            addresses.push(n);
                        }
                    }
                    Err(msg) => self.err(at(a), akey, msg),
                }
            }
        }
        addresses
    }

    /// `gateway`: a next hop inside one of the port's subnets.
    fn port_gateway(&mut self, p: &RawPort, key: &str, addresses: &[IpNet]) -> Option<IpAddr> {
        p.gateway.as_ref().and_then(|g| {
            let gkey = format!("{key}.gateway");
            let ip = self.ip(g, &gkey)?;
            if addresses.iter().any(|n| n.addr == ip) {
                self.err(
                    at(g),
                    gkey,
                    format!("{ip} is this port's own address (expected a next hop on the subnet)"),
                );
            } else if !addresses.iter().any(|n| n.contains(ip)) {
                self.err(
                    at(g),
                    gkey,
                    format!(
                        "{ip} is not inside any of this port's subnets (addresses: {})",
                        nets(addresses)
                    ),
                );
            }
            Some(ip)
        })
    }

    /// `host_interface`: a valid interface name (by default `kni-<name>`).
    fn port_host_interface(&mut self, p: &RawPort, key: &str, name: &str) -> String {
        match &p.host_interface {
            Some(h) => {
                let hkey = format!("{key}.host_interface");
                let s = h.get_ref();
                if let Some(msg) = ifname_problem(s) {
                    self.err(at(h), hkey, msg);
                }
                s.clone()
            }
            None => {
                let s = format!("kni-{name}");
                if s.len() > MAX_IFNAME_LEN && !name.is_empty() {
                    self.err(
                        at(&p.name),
                        format!("{key}.name"),
                        format!(
                            "the default host_interface {s:?} is {} bytes, longer than {MAX_IFNAME_LEN} (expected a shorter name, or set host_interface)",
                            s.len()
                        ),
                    );
                }
                s
            }
        }
    }

    /// `local_addresses`: full-NAT source addresses inside the port's subnets.
    fn port_local_addresses(&mut self, p: &RawPort, key: &str, addresses: &[IpNet]) -> Vec<IpAddr> {
        let mut local_addresses: Vec<IpAddr> = Vec::new();
        if let Some(list) = &p.local_addresses {
            for (i, a) in list.get_ref().iter().enumerate() {
                let lkey = format!("{key}.local_addresses[{i}]");
                let Some(ip) = self.ip(a, &lkey) else {
                    continue;
                };
                if let Some(j) = local_addresses.iter().position(|o| *o == ip) {
                    self.err(
                        at(a),
                        lkey,
                        format!("{ip} is listed twice (also local_addresses[{j}])"),
                    );
                } else if !addresses.iter().any(|n| n.contains(ip)) {
                    self.err(
                        at(a),
                        lkey,
                        format!(
                            "{ip} is not inside any of this port's subnets (addresses: {}; expected a local address on this port)",
                            nets(addresses)
                        ),
                    );
                } else {
                    local_addresses.push(ip);
                }
            }
        }
        local_addresses
    }

    /// `local_port_range` (the default when local addresses are set, none
    /// without), and where it was written (or the port's table).
    fn port_local_range(
        &mut self,
        sp: &S<RawPort>,
        key: &str,
        local_addresses: &[IpAddr],
    ) -> (Option<(u16, u16)>, usize) {
        let p = sp.get_ref();
        let table_at = at(sp);
        let mut range_at = table_at;
        let local_port_range = match &p.local_port_range {
            Some(r) => {
                range_at = at(r);
                let rkey = format!("{key}.local_port_range");
                match r.get_ref().as_slice() {
                    [lo, hi] => {
                        let (l, h) = (*lo.get_ref(), *hi.get_ref());
                        if l == 0 {
                            self.err(
                                at(lo),
                                format!("{rkey}[0]"),
                                "0 is not a usable port (expected 1..=65535)",
                            );
                        } else if l > h {
                            self.err(
                                at(r),
                                rkey.clone(),
                                format!("low {l} is above high {h} (expected [low, high] with low <= high)"),
                            );
                        }
                        if p.local_addresses.is_none() {
                            self.err(
                                at(r),
                                rkey,
                                "is set but local_addresses is not (expected local_addresses for the full-NAT pool)",
                            );
                        }
                        Some((l, h))
                    }
                    other => {
                        self.err(
                            at(r),
                            rkey,
                            format!(
                                "has {} element{} (expected two ports [low, high], e.g. [1024, 32767])",
                                other.len(),
                                if other.len() == 1 { "" } else { "s" }
                            ),
                        );
                        None
                    }
                }
            }
            None => None,
        };
        let local_port_range = if local_addresses.is_empty() {
            None
        } else {
            Some(local_port_range.unwrap_or(DEFAULT_LOCAL_PORT_RANGE))
        };
        (local_port_range, range_at)
    }

    /// `mac`: a unicast MAC address.
    fn port_mac(&mut self, p: &RawPort, key: &str) -> Option<[u8; 6]> {
        p.mac.as_ref().and_then(|m| {
            let mkey = format!("{key}.mac");
            match parse_mac(m.get_ref()) {
                None => {
                    self.err(
                        at(m),
                        mkey,
                        format!("{:?} is not a MAC address (expected six hex pairs, e.g. \"02:00:00:00:00:01\")", m.get_ref()),
                    );
                    None
                }
                Some(mac) if mac[0] & 1 == 1 || mac == [0; 6] => {
                    self.err(
                        at(m),
                        mkey,
                        format!("{} is not a unicast address (expected the first octet even and not all zeros, e.g. \"02:00:00:00:00:01\")", format_mac(&mac)),
                    );
                    None
                }
                Some(mac) => Some(mac),
            }
        })
    }

    fn mgmt(&mut self, m: Option<&S<RawMgmt>>, instance: &str) -> Mgmt {
        let Some(sm) = m else {
            return Mgmt {
                listen: Config::default_mgmt_listen(instance),
                metrics_listen: None,
                tls: None,
                peers: Vec::new(),
                quorum: 1,
                bgp: None,
                operators_group: None,
                limits: MgmtLimits::default(),
                agent: None,
            };
        };
        let m = sm.get_ref();
        let listen = m.listen.as_ref().map_or_else(
            || Config::default_mgmt_listen(instance),
            |l| l.get_ref().clone(),
        );
        let mut tcp_listen = None;
        if let Some(l) = &m.listen {
            match parse_listen(&listen) {
                Err(msg) => self.err(at(l), "mgmt.listen", msg),
                Ok(Listen::Tcp(a)) => {
                    tcp_listen = Some(a);
                    if m.tls.is_none() {
                        self.err(
                            at(l),
                            "mgmt.listen",
                            format!("tcp listen {a} requires [mgmt.tls] (mutual TLS with pinned client fingerprints), or use a unix:// socket"),
                        );
                    }
                }
                Ok(Listen::Unix(_)) => {}
            }
        }
        let metrics_listen = m.metrics_listen.as_ref().and_then(|s| {
            match s.get_ref().parse::<SocketAddr>() {
                Ok(a) if a.port() == 0 => {
                    self.err(at(s), "mgmt.metrics_listen", format!("{a} has port 0 (expected a port 1..=65535)"));
                    None
                }
                Ok(a) if Some(a) == tcp_listen => {
                    self.err(at(s), "mgmt.metrics_listen", format!("{a} is also mgmt.listen (expected a different socket)"));
                    None
                }
                Ok(a) => Some(a),
                Err(_) => {
                    self.err(
                        at(s),
                        "mgmt.metrics_listen",
                        format!("{:?} is not ip:port (expected e.g. \"127.0.0.1:9108\" or \"[::1]:9108\")", s.get_ref()),
                    );
                    None
                }
            }
        });
        let tls = m.tls.as_ref().map(|t| self.tls(t));
        let peers = self.peers(m.peer.as_ref(), &listen, m.tls.is_some());
        let quorum = or(&m.quorum, 1);
        if let Some(q) = &m.quorum {
            let checkers = 1 + peers.len() as u32;
            if quorum == 0 || quorum > checkers {
                let n = peers.len();
                self.err(
                    at(q),
                    "mgmt.quorum",
                    format!(
                        "{quorum} is out of range (expected 1..={checkers}: the checkers are this border-mgmt plus {n} [[mgmt.peer]])"
                    ),
                );
            }
        }
        let bgp = m.bgp.as_ref().map(|b| self.bgp(b));
        let operators_group = m.operators_group.as_ref().map(|g| {
            self.name(g, "mgmt.operators_group", MAX_GROUP, true);
            g.get_ref().clone()
        });
        let limits = self.limits(m.limits.as_ref());
        let agent = m.agent.as_ref().map(|a| self.agent(a, m.tls.is_some()));
        Mgmt {
            listen,
            metrics_listen,
            tls,
            peers,
            quorum,
            bgp,
            operators_group,
            limits,
            agent,
        }
    }

    fn peers(&mut self, list: Option<&List<RawPeer>>, listen: &str, have_tls: bool) -> Vec<Peer> {
        let items: &[S<RawPeer>] = list.map_or(&[], |l| l.get_ref());
        let own = parse_listen(listen).ok();
        let mut out: Vec<Peer> = Vec::new();
        let mut seen: HashMap<Listen, usize> = HashMap::new();
        let mut names: HashMap<String, usize> = HashMap::new();
        for (i, sp) in items.iter().enumerate() {
            let p = sp.get_ref();
            let key = format!("mgmt.peer[{i}]");
            let akey = format!("{key}.address");
            let name = p.name.as_ref().map(|n| {
                self.name(n, &format!("{key}.name"), MAX_NAME, true);
                if let Some(j) = names.insert(n.get_ref().clone(), i) {
                    self.err(
                        at(n),
                        format!("{key}.name"),
                        format!(
                            "{:?} is also the name of mgmt.peer[{j}] (expected unique peer names)",
                            n.get_ref()
                        ),
                    );
                }
                n.get_ref().clone()
            });
            let address = match parse_listen(p.address.get_ref()) {
                Err(msg) => {
                    self.err(at(&p.address), &akey, msg);
                    continue;
                }
                Ok(a) => a,
            };
            if Some(&address) == own.as_ref() {
                self.err(
                    at(&p.address),
                    &akey,
                    format!(
                        "{:?} is this border-mgmt's own mgmt.listen (expected another border-mgmt)",
                        p.address.get_ref()
                    ),
                );
            }
            if let Some(j) = seen.insert(address.clone(), i) {
                self.err(
                    at(&p.address),
                    &akey,
                    format!(
                        "{:?} is also mgmt.peer[{j}] (expected each peer once)",
                        p.address.get_ref()
                    ),
                );
            }
            if let (Listen::Tcp(a), false) = (&address, have_tls) {
                self.err(
                    at(&p.address),
                    &akey,
                    format!("tcp peer {a} requires [mgmt.tls] (its cert and key are this border-mgmt's client identity), or use a unix:// socket"),
                );
            }
            out.push(Peer {
                address,
                name,
                trusted: or(&p.trusted, false),
            });
        }
        out
    }

    fn tls(&mut self, st: &S<RawTls>) -> MgmtTls {
        let (t, table_at) = (st.get_ref(), at(st));
        let mut path = |s: &S<String>, key: &str| {
            let p = s.get_ref();
            if p.is_empty() {
                self.err(
                    at(s),
                    key,
                    "must not be empty (expected a path to a PEM file)",
                );
            } else if p.contains('\0') {
                self.err(at(s), key, "contains a NUL character");
            }
            PathBuf::from(p)
        };
        let cert = path(&t.cert, "mgmt.tls.cert");
        let key = path(&t.key, "mgmt.tls.key");
        let client_ca = path(&t.client_ca, "mgmt.tls.client_ca");
        let lists = [
            ("client_fingerprints", &t.client_fingerprints),
            ("reader_fingerprints", &t.reader_fingerprints),
            ("peer_fingerprints", &t.peer_fingerprints),
        ];
        if lists
            .iter()
            .all(|(_, l)| l.as_ref().is_none_or(|l| l.get_ref().is_empty()))
        {
            self.err(
                t.client_fingerprints.as_ref().map_or(table_at, at),
                "mgmt.tls.client_fingerprints",
                "must list at least one pinned client certificate (expected [\"sha256:<64 hex digits>\"])",
            );
        }
        // Each fingerprint once, over all lists: one role per certificate.
        let mut seen: HashMap<String, String> = HashMap::new();
        let mut pinned: [Vec<String>; 3] = Default::default();
        for ((name, list), out) in lists.iter().zip(pinned.iter_mut()) {
            for (i, f) in list.iter().flat_map(|l| l.get_ref().iter().enumerate()) {
                let key = format!("mgmt.tls.{name}[{i}]");
                let hex = f
                    .get_ref()
                    .strip_prefix("sha256:")
                    .and_then(parse_hex::<32>);
                let Some(bytes) = hex else {
                    self.err(
                        at(f),
                        key,
                        format!("{:?} is not a certificate fingerprint (expected \"sha256:\" followed by 64 hex digits)", f.get_ref()),
                    );
                    continue;
                };
                let norm = format!(
                    "sha256:{}",
                    bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
                );
                let short = format!("{name}[{i}]");
                match seen.get(&norm) {
                    Some(earlier) if earlier.starts_with(name) => {
                        self.err(at(f), key, format!("is listed twice (also {earlier})"));
                    }
                    Some(earlier) => self.err(
                        at(f),
                        key,
                        format!("is also {earlier} (expected one role per certificate: client_fingerprints operators, reader_fingerprints readers, peer_fingerprints peers)"),
                    ),
                    None => {
                        seen.insert(norm.clone(), short);
                    }
                }
                out.push(norm);
            }
        }
        let [client_fingerprints, reader_fingerprints, peer_fingerprints] = pinned;
        MgmtTls {
            cert,
            key,
            client_ca,
            client_fingerprints,
            reader_fingerprints,
            peer_fingerprints,
        }
    }

    fn vips(
        &mut self,
        list: Option<&List<RawVip>>,
        ports: &[Port],
        ports_ok: bool,
        have_zone: bool,
    ) -> Vec<Vip> {
        let items: &[S<RawVip>] = list.map_or(&[], |l| l.get_ref());
        let vips: Vec<Vip> = items
            .iter()
            .enumerate()
            .map(|(i, sv)| self.vip(sv, &format!("vip[{i}]"), ports, ports_ok, have_zone))
            .collect();
        for clash in clashes(&vips) {
            let (vip, raw) = (&vips[clash.vip], items[clash.vip].get_ref());
            let key = format!("vip[{}]", clash.vip);
            match clash.kind {
                Clash::Name => self.err(
                    at(&raw.name),
                    format!("{key}.name"),
                    format!(
                        "{:?} is already the name of vip[{}] (expected unique VIP names)",
                        vip.name, clash.earlier
                    ),
                ),
                Clash::Listener => self.err(
                    at(&raw.address),
                    format!("{key}.address"),
                    format!(
                        "{} port {}/{} is already served by vip {:?} (vip[{}]) (expected each address, port and protocol once)",
                        vip.address, vip.port, vip.protocol, vips[clash.earlier].name, clash.earlier
                    ),
                ),
            }
        }
        vips
    }

    fn vip(
        &mut self,
        sv: &S<RawVip>,
        key: &str,
        ports: &[Port],
        ports_ok: bool,
        have_zone: bool,
    ) -> Vip {
        let v = sv.get_ref();
        self.name(&v.name, &format!("{key}.name"), MAX_NAME, false);
        let akey = format!("{key}.address");
        let address = self.ip(&v.address, &akey);
        let port = *v.port.get_ref();
        if port == 0 {
            self.err(
                at(&v.port),
                format!("{key}.port"),
                "0 is not a usable port (expected 1..=65535)",
            );
        }
        let protocol = self.choice(
            &v.protocol,
            &format!("{key}.protocol"),
            &[("tcp", Protocol::Tcp), ("udp", Protocol::Udp)],
            Protocol::Tcp,
        );
        let mode = self.choice(
            &v.mode,
            &format!("{key}.mode"),
            &[("fullnat", Mode::FullNat), ("dnat", Mode::Dnat)],
            Mode::FullNat,
        );
        let proxy_protocol = self.choice(
            &v.proxy_protocol,
            &format!("{key}.proxy_protocol"),
            &[("none", ProxyProtocol::None), ("v2", ProxyProtocol::V2)],
            ProxyProtocol::None,
        );

        if let (Some(ip), true) = (address, ports_ok) {
            self.vip_on_ports(sv, key, ports, ip, mode);
        }
        let pp = self.vip_proxy_protocol(sv, key, (protocol, proxy_protocol), address);
        let (backends, configured) = self.vip_backends(v, key, address);
        let limits = self.vip_limits(sv, key, (protocol, address), &backends);
        let maglev_table_size = self.maglev_table_size(sv, key, configured);

        let zone_affinity = or(&v.zone_affinity, false);
        if let (true, Some(z)) = (zone_affinity && !have_zone, &v.zone_affinity) {
            self.err(
                at(z),
                format!("{key}.zone_affinity"),
                "true needs the top-level `zone` of this appliance (expected zone = \"...\" at the top of the file, or zone_affinity = false)",
            );
        }

        let health = v
            .health
            .as_ref()
            .map(|h| self.health(h, &format!("{key}.health")));
        self.probe_over_protocol(v, key, protocol);

        Vip {
            name: v.name.get_ref().clone(),
            address: address.unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)),
            port,
            protocol,
            mode,
            proxy_protocol,
            proxy_protocol_send_on_connect: pp.send_on_connect,
            proxy_protocol_tlvs: pp.tlvs,
            proxy_protocol_max_len: pp.max_len,
            maglev_table_size,
            zone_affinity,
            translate_timestamps: or(&v.translate_timestamps, true),
            syn_proxy: self.syn_proxy(v, key, protocol),
            announce: self.announce(&v.announce, key),
            health,
            backends,
            limits,
        }
    }

    /// A VIP's address `ip` on the ports: on a port's subnet, outside
    /// the ports of the full-NAT pools it belongs to, and with a pool of its
    /// family when `mode` is full-NAT.
    fn vip_on_ports(&mut self, sv: &S<RawVip>, key: &str, ports: &[Port], ip: IpAddr, mode: Mode) {
        let v = sv.get_ref();
        let table_at = at(sv);
        let akey = format!("{key}.address");
        let port = *v.port.get_ref();
        if !ports.iter().any(|p| p.on_link(ip)) {
            let all: Vec<IpNet> = ports
                .iter()
                .flat_map(|p| p.addresses.iter().copied())
                .collect();
            self.err(
                at(&v.address),
                &akey,
                format!(
                    "{ip} is not on any port (expected an address inside the subnet of some port's addresses: {})",
                    nets(&all)
                ),
            );
        }
        // A VIP on a full-NAT source address must stay out of the pool's ports.
        for (j, p) in ports.iter().enumerate() {
            if let Some((lo, hi)) = p.local_port_range {
                if p.local_addresses.contains(&ip) && (lo..=hi).contains(&port) {
                    self.err(
                        at(&v.port),
                        format!("{key}.port"),
                        format!(
                            "{port} is inside local_port_range [{lo}, {hi}] of port {:?} (port[{j}]), whose full-NAT pool includes {ip} (expected a port outside the pool's range)",
                            p.name
                        ),
                    );
                }
            }
        }
        if mode == Mode::FullNat
            && !ports.iter().any(|p| {
                p.local_addresses
                    .iter()
                    .any(|l| l.is_ipv4() == ip.is_ipv4())
            })
        {
            self.err(
                pos(&v.mode, table_at),
                format!("{key}.mode"),
                format!(
                    "fullnat{} needs a full-NAT source pool of {fam}, but no port has {fam} local_addresses (expected local_addresses on some port, or mode = \"dnat\")",
                    if v.mode.is_none() { " (the default)" } else { "" },
                    fam = family(ip)
                ),
            );
        }
    }

    /// The PROXY protocol keys of a VIP of `protocol` whose
    /// `proxy_protocol` is given: only with v2, v2 only on TCP.
    fn vip_proxy_protocol(
        &mut self,
        sv: &S<RawVip>,
        key: &str,
        (protocol, proxy_protocol): (Protocol, ProxyProtocol),
        address: Option<IpAddr>,
    ) -> ProxyOptions {
        let v = sv.get_ref();
        let table_at = at(sv);
        let ppkey = format!("{key}.proxy_protocol");
        if proxy_protocol == ProxyProtocol::V2 && protocol == Protocol::Udp {
            self.err(
                pos(&v.proxy_protocol, table_at),
                &ppkey,
                "v2 is only supported on tcp VIPs (expected \"none\" with protocol = \"udp\")",
            );
        }
        if proxy_protocol == ProxyProtocol::None {
            let set = [
                (
                    "proxy_protocol_send_on_connect",
                    v.proxy_protocol_send_on_connect.as_ref().map(at),
                ),
                (
                    "proxy_protocol_tlvs",
                    v.proxy_protocol_tlvs.as_ref().map(at),
                ),
                (
                    "proxy_protocol_max_len",
                    v.proxy_protocol_max_len.as_ref().map(at),
                ),
            ];
            for (k, a) in set {
                if let Some(a) = a {
                    self.err(
                        a,
                        format!("{key}.{k}"),
                        "is only used with proxy_protocol = \"v2\" (expected proxy_protocol = \"v2\", or remove this key)",
                    );
                }
            }
        }
        let send_on_connect = or(&v.proxy_protocol_send_on_connect, false);
        ProxyOptions {
            send_on_connect,
            tlvs: self.proxy_protocol_tlvs(v, key, proxy_protocol, send_on_connect),
            max_len: self.proxy_protocol_max_len(v, key, address),
        }
    }

    /// `proxy_protocol_tlvs`: known TLVs, once each (default: unique_id with v2).
    fn proxy_protocol_tlvs(
        &mut self,
        v: &RawVip,
        key: &str,
        proxy_protocol: ProxyProtocol,
        proxy_protocol_send_on_connect: bool,
    ) -> Vec<PpTlv> {
        match &v.proxy_protocol_tlvs {
            Some(list) => {
                let mut tlvs: Vec<PpTlv> = Vec::new();
                for (i, t) in list.get_ref().iter().enumerate() {
                    let tkey = format!("{key}.proxy_protocol_tlvs[{i}]");
                    let tlv = self.choice(
                        &Some(t.clone()),
                        &tkey,
                        &[
                            ("unique_id", Some(PpTlv::UniqueId)),
                            ("crc32c", Some(PpTlv::Crc32c)),
                            ("authority", Some(PpTlv::Authority)),
                        ],
                        None,
                    );
                    if let Some(tlv) = tlv {
                        if let Some(j) = tlvs.iter().position(|o| *o == tlv) {
                            self.err(
                                at(t),
                                tkey,
                                format!("{tlv} is listed twice (also proxy_protocol_tlvs[{j}])"),
                            );
                        } else if tlv == PpTlv::Authority && proxy_protocol_send_on_connect {
                            // The authority is the SNI of the client's first
                            // data; a header sent at connect time leaves
                            // before it, so the TLV could never be filled.
                            self.err(
                                at(t),
                                tkey,
                                "authority cannot be sent with proxy_protocol_send_on_connect = true: the header then leaves right after the handshake, before the client's first data that the authority (TLS SNI) is read from (expected proxy_protocol_send_on_connect = false, or remove \"authority\")",
                            );
                        } else {
                            tlvs.push(tlv);
                        }
                    }
                }
                tlvs
            }
            None if proxy_protocol == ProxyProtocol::V2 => vec![PpTlv::UniqueId],
            None => Vec::new(),
        }
    }

    /// `proxy_protocol_max_len`: room for at least the header of the
    /// VIP's address family.
    fn proxy_protocol_max_len(&mut self, v: &RawVip, key: &str, address: Option<IpAddr>) -> u16 {
        let mut proxy_protocol_max_len = DEFAULT_PROXY_PROTOCOL_MAX_LEN;
        if let Some(m) = &v.proxy_protocol_max_len {
            let n = *m.get_ref();
            let v6 = address.is_some_and(|a| a.is_ipv6());
            let min = PPV2_FIXED_LEN + if v6 { 36 } else { 12 };
            if n < u32::from(min) {
                self.err(
                    at(m),
                    format!("{key}.proxy_protocol_max_len"),
                    format!(
                        "{n} is below the smallest header for an {} VIP (expected {min}..={MAX_PROXY_PROTOCOL_MAX_LEN}: 16 fixed + {} address bytes)",
                        if v6 { "IPv6" } else { "IPv4" },
                        min - PPV2_FIXED_LEN
                    ),
                );
            } else if n > u32::from(MAX_PROXY_PROTOCOL_MAX_LEN) {
                self.err(
                    at(m),
                    format!("{key}.proxy_protocol_max_len"),
                    format!("{n} is too large (expected {min}..={MAX_PROXY_PROTOCOL_MAX_LEN})"),
                );
            } else {
                proxy_protocol_max_len = u16::try_from(n).unwrap_or(DEFAULT_PROXY_PROTOCOL_MAX_LEN);
            }
        }
        proxy_protocol_max_len
    }

    /// The VIP's backends, each address and port once, and how many entries
    /// the config lists (valid or not).
    fn vip_backends(
        &mut self,
        v: &RawVip,
        key: &str,
        address: Option<IpAddr>,
    ) -> (Vec<Backend>, usize) {
        let mut backends: Vec<Backend> = Vec::new();
        let mut seen: HashMap<(IpAddr, u16), usize> = HashMap::new();
        let braw: &[S<RawBackend>] = v.backend.as_ref().map_or(&[], |l| l.get_ref());
        for (i, sb) in braw.iter().enumerate() {
            let bkey = format!("{key}.backend[{i}]");
            let Some(b) = self.backend(sb, &bkey, address) else {
                continue;
            };
            if let Some(j) = seen.get(&(b.address, b.port)) {
                self.err(
                    at(&sb.get_ref().address),
                    format!("{bkey}.address"),
                    format!("{}:{} is listed twice (also backend[{j}]; expected unique address and port)", b.address, b.port),
                );
            } else {
                seen.insert((b.address, b.port), i);
            }
            backends.push(b);
        }
        (backends, braw.len())
    }

    /// `maglev_table_size`: a prime of at least 100 slots per configured backend.
    fn maglev_table_size(&mut self, sv: &S<RawVip>, key: &str, configured: usize) -> u32 {
        let v = sv.get_ref();
        let table_at = at(sv);
        let m = or(&v.maglev_table_size, u64::from(DEFAULT_MAGLEV_TABLE_SIZE));
        let mkey = format!("{key}.maglev_table_size");
        let mat = pos(&v.maglev_table_size, table_at);
        let n = configured as u64;
        let need = 100 * n;
        if m > u64::from(MAX_MAGLEV_TABLE_SIZE) {
            self.err(
                mat,
                &mkey,
                format!("{m} is too large (expected a prime >= 100 x backends and <= {MAX_MAGLEV_TABLE_SIZE}, e.g. 65537)"),
            );
        } else if m < need.max(2) || !is_prime(m) {
            let suggestion = next_prime(m.max(need));
            let msg = if m >= need {
                format!("{m} is not prime (expected a prime >= 100 x backends, e.g. {suggestion})")
            } else {
                format!(
                    "{m} is {}less than 100 x {n} backends = {need} (expected a prime >= {need}, e.g. {suggestion})",
                    if is_prime(m) { "" } else { "not prime and " }
                )
            };
            self.err(mat, &mkey, msg);
        }
        u32::try_from(m).unwrap_or(DEFAULT_MAGLEV_TABLE_SIZE)
    }

    fn backend(&mut self, sb: &S<RawBackend>, key: &str, vip: Option<IpAddr>) -> Option<Backend> {
        let b = sb.get_ref();
        let akey = format!("{key}.address");
        let address = self.ip(&b.address, &akey);
        if let Some(ip) = address {
            let broadcast = matches!(ip, IpAddr::V4(a) if a.is_broadcast());
            if ip.is_unspecified() || ip.is_multicast() || broadcast {
                self.err(
                    at(&b.address),
                    &akey,
                    format!("{ip} is not a unicast address (expected a backend host address)"),
                );
            } else if let Some(vip) = vip {
                if vip.is_ipv4() != ip.is_ipv4() {
                    self.err(
                        at(&b.address),
                        &akey,
                        format!(
                            "{ip} is {} but the VIP is {} (expected the VIP's address family: translation between IPv4 and IPv6 is not supported)",
                            family(ip),
                            family(vip)
                        ),
                    );
                }
            }
        }
        let port = *b.port.get_ref();
        if port == 0 {
            self.err(
                at(&b.port),
                format!("{key}.port"),
                "0 is not a usable port (expected 1..=65535)",
            );
        }
        let weight = or(&b.weight, 1);
        if let Some(w) = &b.weight {
            if weight > MAX_WEIGHT {
                self.err(
                    at(w),
                    format!("{key}.weight"),
                    format!("{weight} is too large (expected 0..={MAX_WEIGHT}; 0 drains)"),
                );
            }
        }
        let zone = b.zone.as_ref().map(|z| {
            self.name(z, &format!("{key}.zone"), MAX_ZONE, true);
            z.get_ref().clone()
        });
        self.nonzero(
            &b.max_connections,
            &format!("{key}.max_connections"),
            u32::MAX,
            " connections; leave it out for no limit",
        );
        Some(Backend {
            address: address?,
            port,
            weight,
            zone,
            max_connections: or(&b.max_connections, 0),
        })
    }

    fn health(&mut self, sh: &S<RawHealth>, key: &str) -> Health {
        let h = sh.get_ref();
        let table_at = at(sh);
        let kind = self.choice(
            &Some(h.kind.clone()),
            &format!("{key}.kind"),
            &[
                ("tcp", HealthKind::Tcp),
                ("tls", HealthKind::Tls),
                ("http", HealthKind::Http),
                ("https", HealthKind::Https),
                ("agent", HealthKind::Agent),
                ("dns", HealthKind::Dns),
                ("udp", HealthKind::Udp),
            ],
            HealthKind::Tcp,
        );
        let http = kind.is_http();
        let only_http = "is only used by http and https checks (expected kind = \"http\" or \"https\", or remove this key)";

        let pkey = format!("{key}.path");
        let path = match (&h.path, http) {
            (Some(p), true) => {
                let s = p.get_ref();
                if !s.starts_with('/') {
                    self.err(
                        at(p),
                        &pkey,
                        format!("{s:?} does not start with '/' (expected e.g. \"/healthz\")"),
                    );
                } else if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
                    self.err(at(p), &pkey, format!("{s:?} contains spaces or control characters (expected a URL path, e.g. \"/healthz\")"));
                }
                Some(s.clone())
            }
            (None, true) => {
                self.err(
                    table_at,
                    &pkey,
                    format!("missing required key for kind = \"{kind}\" (expected e.g. path = \"/healthz\")"),
                );
                None
            }
            (Some(p), false) => {
                self.err(at(p), &pkey, only_http);
                None
            }
            (None, false) => None,
        };

        let ekey = format!("{key}.expect_status");
        let expect_status = match (&h.expect_status, http) {
            (Some(list), true) => {
                if list.get_ref().is_empty() {
                    self.err(
                        at(list),
                        &ekey,
                        "must list at least one status (expected e.g. [200])",
                    );
                }
                for (i, s) in list.get_ref().iter().enumerate() {
                    let n = *s.get_ref();
                    if !(100..=599).contains(&n) {
                        self.err(
                            at(s),
                            format!("{ekey}[{i}]"),
                            format!("{n} is not an HTTP status (expected 100..=599)"),
                        );
                    }
                }
                list.get_ref().iter().map(|s| *s.get_ref()).collect()
            }
            (None, true) => vec![200],
            (Some(list), false) => {
                self.err(at(list), &ekey, only_http);
                Vec::new()
            }
            (None, false) => Vec::new(),
        };

        let interval_ms = or(&h.interval_ms, 1000);
        let timeout_ms = or(&h.timeout_ms, 500);
        let ms = " milliseconds";
        self.nonzero(
            &h.interval_ms,
            &format!("{key}.interval_ms"),
            MAX_INTERVAL_MS,
            ms,
        );
        self.nonzero(
            &h.timeout_ms,
            &format!("{key}.timeout_ms"),
            MAX_INTERVAL_MS,
            ms,
        );
        if timeout_ms != 0 && interval_ms != 0 && timeout_ms >= interval_ms {
            let (a, which) = match (&h.timeout_ms, &h.interval_ms) {
                (Some(t), _) => (at(t), ""),
                (None, Some(i)) => (at(i), " (the default)"),
                (None, None) => (table_at, ""),
            };
            self.err(
                a,
                format!("{key}.timeout_ms"),
                format!("{timeout_ms}{which} is not less than interval_ms {interval_ms} (expected timeout_ms < interval_ms)"),
            );
        }
        self.nonzero(&h.rise, &format!("{key}.rise"), u32::MAX, "");
        self.nonzero(&h.fall, &format!("{key}.fall"), u32::MAX, "");

        let weight_header = or(&h.weight_header, false);
        if let (Some(w), false) = (&h.weight_header, http) {
            self.err(at(w), format!("{key}.weight_header"), only_http);
        }

        let sni = h.sni.as_ref().map(|s| {
            let name = s.get_ref();
            let skey = format!("{key}.sni");
            if !matches!(kind, HealthKind::Tls | HealthKind::Https) {
                self.err(at(s), &skey, "is only used by tls and https checks (expected kind = \"tls\" or \"https\", or remove this key)");
            } else if let Some(why) = dns_name_problem(name) {
                self.err(at(s), &skey, why);
            }
            name.clone()
        });

        let on_down = self.choice(
            &h.on_down,
            &format!("{key}.on_down"),
            &[("keep", OnDown::Keep), ("reset", OnDown::Reset)],
            OnDown::Keep,
        );

        if let (Some(pp), HealthKind::Agent) = (&h.send_proxy_v2, kind) {
            if *pp.get_ref() {
                self.err(at(pp), format!("{key}.send_proxy_v2"), "is not sent to an agent (expected an active check kind beside agent_port, or remove this key)");
            }
        }
        if let Some(p) = &h.agent_port {
            if *p.get_ref() == 0 {
                self.err(
                    at(p),
                    format!("{key}.agent_port"),
                    "0 is not a port (expected 1..=65535)",
                );
            }
        }

        let target = self.probe_target(h, key, kind, table_at);
        Health {
            kind,
            path,
            expect_status,
            interval_ms,
            timeout_ms,
            rise: or(&h.rise, 2),
            fall: or(&h.fall, 3),
            send_proxy_v2: or(&h.send_proxy_v2, false),
            weight_header,
            sni,
            on_down,
            agent_port: h.agent_port.as_ref().map(|p| *p.get_ref()),
            port: target.port,
            dns: target.dns,
            udp: target.udp,
        }
    }
}

/// Why `s` cannot be a TLS server name (a DNS name, RFC 6066), if it cannot.
fn dns_name_problem(s: &str) -> Option<String> {
    let expected = "expected a DNS name, e.g. \"www.example.com\"";
    if s.is_empty() || s.len() > 253 {
        return Some(format!(
            "{s:?} is {} bytes long ({expected} of 1..=253 bytes)",
            s.len()
        ));
    }
    if s.parse::<IpAddr>().is_ok() {
        return Some(format!(
            "{s:?} is an IP address (TLS sends no SNI for addresses; {expected}, or remove this key)"
        ));
    }
    for label in s.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Some(format!(
                "{s:?} has an empty or longer than 63 bytes label ({expected})"
            ));
        }
        if let Some(c) = label
            .chars()
            .find(|&c| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        {
            return Some(format!("{s:?} contains {c:?} ({expected})"));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Some(format!(
                "{s:?} has a label starting or ending with '-' ({expected})"
            ));
        }
    }
    None
}

/// Why `s` cannot be a Linux interface name, if it cannot.
fn ifname_problem(s: &str) -> Option<String> {
    if s.is_empty() {
        return Some(
            "must not be empty (expected 1..=15 characters from A-Z a-z 0-9 _ - .)".to_owned(),
        );
    }
    if s.len() > MAX_IFNAME_LEN {
        return Some(format!(
            "{s:?} is {} bytes long (expected at most {MAX_IFNAME_LEN}, the Linux IFNAMSIZ limit)",
            s.len()
        ));
    }
    if s == "." || s == ".." {
        return Some(format!("{s:?} is not a valid interface name"));
    }
    s.chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.'))
        .map(|c| format!("{s:?} contains {c:?} (expected only A-Z a-z 0-9 _ - .)"))
}
