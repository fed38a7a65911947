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
use std::net::IpAddr;

use toml::Spanned as S;

use super::error::Diag;
use super::net::parse_hex;
use super::raw::{RawConfig, RawDataplane, RawTimeouts, RawVip};
use super::*;

type List<T> = S<Vec<S<T>>>;

mod agent;
mod bgp;
mod dsr;
mod health;
mod limits;
mod mgmt;
mod ports;
mod probe_check;
mod records;
mod syn_proxy;
mod vip_limits;
mod vips;

pub(super) use self::mgmt::parse_listen;

pub(super) use vip_limits::MAX_RATE;

/// Default `dataplane.icmp_echo_per_second`.
const DEFAULT_ICMP_ECHO_PER_SECOND: u32 = 1000;

pub(super) use limits::rings_fit;

/// Longest `instance`, port and VIP name.
const MAX_NAME: usize = 32;
/// Longest zone name.
const MAX_ZONE: usize = 64;
/// EAL options that border derives from `main_lcore` / `worker_lcores`.
const LCORE_OPTIONS: [&str; 3] = ["--lcores", "--main-lcore", "--master-lcore"];

pub(super) fn validate(raw: RawConfig) -> Result<Config, Diag> {
    let mut v = Validator { diags: Vec::new() };
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

/// Walks the raw config section by section (one file per section under
/// `validate/`), collecting every broken rule as a [`Diag`].
struct Validator {
    diags: Vec<Diag>,
}

/// Validates one `[[vip]]` entry, parsed on its own, as entry `index` of
/// `config` (whose other sections are valid): the VIP, or `None` when the
/// entry breaks a rule (the caller then validates the whole text to report it).
pub(super) fn lone_vip(config: &Config, raw: &S<RawVip>, index: usize) -> Option<Vip> {
    let mut v = Validator { diags: Vec::new() };
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

/// EAL options without which `dpdk-dumpcap` cannot attach: no
/// multi-process socket (`--no-shconf`, `--in-memory`), or memory a
/// secondary process cannot map (`--no-huge`).
const CAPTURE_BLOCKING_EAL_ARGS: &[&str] = &["--no-shconf", "--in-memory", "--no-huge"];

/// Value of an optional key, or `default`.
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

impl Validator {
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
}
