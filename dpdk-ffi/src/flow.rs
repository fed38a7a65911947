//! rte_flow steering of full-NAT replies to the worker that owns them.
//!
//! A full-NAT local port belongs to exactly one worker (`port & mask ==
//! worker`, see [`owner_mask`]). Where the NIC supports rte_flow, one rule per
//! (local address, protocol, worker) sends replies straight to that worker's
//! rx queue:
//!
//! `ETH / IPV4|IPV6 dst is <local address> / TCP|UDP dst port spec <worker>
//! mask <owner mask> -> QUEUE <worker>`
//!
//! Everything else keeps going through RSS. On NICs without rte_flow (net_tap
//! without the multiq qdisc, net_null, net_pcap, ...) installing fails with a
//! readable error and the port is left as it was.

use std::ffi::{c_void, CStr};
use std::fmt;
use std::marker::PhantomData;
use std::net::IpAddr;
use std::ptr::NonNull;

use crate::error::{rte_errno, strerror, DpdkError};
use crate::port::Port;
use crate::sys;

/// The bits of a local port that name its owner among `workers` workers
/// (`port & mask == worker`): the next power of two minus one, 0 for one
/// worker. Must agree with the dataplane's port ownership.
pub fn owner_mask(workers: usize) -> u16 {
    u16::try_from(workers.max(1).next_power_of_two() - 1).unwrap_or(u16::MAX)
}

/// Transport protocol a [`SteerRule`] matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SteerProto {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
}

impl fmt::Display for SteerProto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SteerProto::Tcp => "tcp",
            SteerProto::Udp => "udp",
        })
    }
}

/// One steering rule: packets of `proto` to `dst` whose destination port
/// satisfies `port & port_mask == port_spec` go to rx queue `queue`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SteerRule {
    /// Destination address (a full-NAT local address).
    pub dst: IpAddr,
    /// Transport protocol.
    pub proto: SteerProto,
    /// Destination port value, after masking (the owning worker's index).
    pub port_spec: u16,
    /// Destination port bits that are compared ([`owner_mask`]).
    pub port_mask: u16,
    /// Rx queue the packets go to (the owning worker's queue).
    pub queue: u16,
}

impl SteerRule {
    /// The rules that steer every full-NAT reply to `addrs` to the rx queue
    /// of its owner among `workers` workers (worker `w` reads rx queue `w`):
    /// one per address, protocol (TCP, UDP) and worker. None for fewer than
    /// two workers, where there is nothing to steer.
    pub fn owner_rules(addrs: &[IpAddr], workers: usize) -> Vec<SteerRule> {
        if workers < 2 {
            return Vec::new();
        }
        let mask = owner_mask(workers);
        let workers = u16::try_from(workers).unwrap_or(u16::MAX);
        let mut rules = Vec::with_capacity(addrs.len() * 2 * usize::from(workers));
        for &dst in addrs {
            for proto in [SteerProto::Tcp, SteerProto::Udp] {
                for w in 0..workers {
                    rules.push(SteerRule {
                        dst,
                        proto,
                        port_spec: w,
                        port_mask: mask,
                        queue: w,
                    });
                }
            }
        }
        rules
    }
}

impl fmt::Display for SteerRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} to {} port & {:#x} == {} -> queue {}",
            self.proto, self.dst, self.port_mask, self.port_spec, self.queue
        )
    }
}

/// Spec and mask of the L3 item.
enum L3Items {
    V4 {
        spec: sys::rte_flow_item_ipv4,
        mask: sys::rte_flow_item_ipv4,
    },
    V6 {
        spec: sys::rte_flow_item_ipv6,
        mask: sys::rte_flow_item_ipv6,
    },
}

/// Spec and mask of the L4 item.
enum L4Items {
    Tcp {
        spec: sys::rte_flow_item_tcp,
        mask: sys::rte_flow_item_tcp,
    },
    Udp {
        spec: sys::rte_flow_item_udp,
        mask: sys::rte_flow_item_udp,
    },
}

/// Everything a rule's pattern and actions point at. [`RuleItems::pattern`]
/// borrows it, so the compiler keeps it alive until DPDK has read it.
struct RuleItems {
    attr: sys::rte_flow_attr,
    l3: L3Items,
    l4: L4Items,
    queue: sys::rte_flow_action_queue,
}

/// The C arrays for one rule, pointing into a [`RuleItems`] that outlives it.
struct Pattern<'a> {
    items: [sys::rte_flow_item; 4],
    actions: [sys::rte_flow_action; 2],
    _items: PhantomData<&'a RuleItems>,
}

fn void<T>(r: &T) -> *const c_void {
    (r as *const T).cast()
}

impl RuleItems {
    fn new(rule: &SteerRule) -> RuleItems {
        let mut attr = sys::rte_flow_attr::default();
        attr.set_ingress(1);
        let l3 = match rule.dst {
            IpAddr::V4(a) => {
                let mut spec = sys::rte_flow_item_ipv4::default();
                let mut mask = sys::rte_flow_item_ipv4::default();
                // rte_be32_t: the address's bytes in network order.
                spec.hdr.dst_addr = u32::from_ne_bytes(a.octets());
                mask.hdr.dst_addr = u32::MAX;
                L3Items::V4 { spec, mask }
            }
            IpAddr::V6(a) => {
                let mut spec = sys::rte_flow_item_ipv6::default();
                let mut mask = sys::rte_flow_item_ipv6::default();
                spec.hdr.dst_addr = a.octets();
                mask.hdr.dst_addr = [0xff; 16];
                L3Items::V6 { spec, mask }
            }
        };
        // rte_be16_t: the port's bytes in network order.
        let (port_spec, port_mask) = (rule.port_spec.to_be(), rule.port_mask.to_be());
        let l4 = match rule.proto {
            SteerProto::Tcp => {
                let mut spec = sys::rte_flow_item_tcp::default();
                let mut mask = sys::rte_flow_item_tcp::default();
                spec.hdr.dst_port = port_spec;
                mask.hdr.dst_port = port_mask;
                L4Items::Tcp { spec, mask }
            }
            SteerProto::Udp => {
                let mut spec = sys::rte_flow_item_udp::default();
                let mut mask = sys::rte_flow_item_udp::default();
                spec.hdr.dst_port = port_spec;
                mask.hdr.dst_port = port_mask;
                L4Items::Udp { spec, mask }
            }
        };
        RuleItems {
            attr,
            l3,
            l4,
            queue: sys::rte_flow_action_queue { index: rule.queue },
        }
    }

    fn pattern(&self) -> Pattern<'_> {
        let item = |type_, spec, mask| sys::rte_flow_item {
            type_,
            spec,
            last: std::ptr::null(),
            mask,
        };
        let null = std::ptr::null();
        let l3 = match &self.l3 {
            L3Items::V4 { spec, mask } => {
                item(sys::RTE_FLOW_ITEM_TYPE_IPV4, void(spec), void(mask))
            }
            L3Items::V6 { spec, mask } => {
                item(sys::RTE_FLOW_ITEM_TYPE_IPV6, void(spec), void(mask))
            }
        };
        let l4 = match &self.l4 {
            L4Items::Tcp { spec, mask } => {
                item(sys::RTE_FLOW_ITEM_TYPE_TCP, void(spec), void(mask))
            }
            L4Items::Udp { spec, mask } => {
                item(sys::RTE_FLOW_ITEM_TYPE_UDP, void(spec), void(mask))
            }
        };
        Pattern {
            items: [
                // Any Ethernet header (no spec, no mask).
                item(sys::RTE_FLOW_ITEM_TYPE_ETH, null, null),
                l3,
                l4,
                item(sys::RTE_FLOW_ITEM_TYPE_END, null, null),
            ],
            actions: [
                sys::rte_flow_action {
                    type_: sys::RTE_FLOW_ACTION_TYPE_QUEUE,
                    conf: void(&self.queue),
                },
                sys::rte_flow_action {
                    type_: sys::RTE_FLOW_ACTION_TYPE_END,
                    conf: null,
                },
            ],
            _items: PhantomData,
        }
    }
}

fn error_part(t: sys::rte_flow_error_type) -> Option<&'static str> {
    Some(match t {
        sys::RTE_FLOW_ERROR_TYPE_HANDLE => "flow handle",
        sys::RTE_FLOW_ERROR_TYPE_ATTR_GROUP => "attribute group",
        sys::RTE_FLOW_ERROR_TYPE_ATTR_PRIORITY => "attribute priority",
        sys::RTE_FLOW_ERROR_TYPE_ATTR_INGRESS => "attribute ingress",
        sys::RTE_FLOW_ERROR_TYPE_ATTR_EGRESS => "attribute egress",
        sys::RTE_FLOW_ERROR_TYPE_ATTR_TRANSFER => "attribute transfer",
        sys::RTE_FLOW_ERROR_TYPE_ATTR => "attributes",
        sys::RTE_FLOW_ERROR_TYPE_ITEM_NUM => "pattern length",
        sys::RTE_FLOW_ERROR_TYPE_ITEM_SPEC => "item spec",
        sys::RTE_FLOW_ERROR_TYPE_ITEM_LAST => "item last",
        sys::RTE_FLOW_ERROR_TYPE_ITEM_MASK => "item mask",
        sys::RTE_FLOW_ERROR_TYPE_ITEM => "pattern item",
        sys::RTE_FLOW_ERROR_TYPE_ACTION_NUM => "action count",
        sys::RTE_FLOW_ERROR_TYPE_ACTION_CONF => "action conf",
        sys::RTE_FLOW_ERROR_TYPE_ACTION => "action",
        sys::RTE_FLOW_ERROR_TYPE_STATE => "state",
        _ => return None,
    })
}

impl Pattern<'_> {
    /// Which of our items or actions `cause` (from an rte_flow_error) is.
    fn name_of(&self, cause: *const c_void) -> Option<&'static str> {
        const ITEMS: [&str; 4] = ["eth", "ip", "l4", "end"];
        const ACTIONS: [&str; 2] = ["queue", "end"];
        if let Some(i) = self
            .items
            .iter()
            .position(|it| std::ptr::eq(void(it), cause))
        {
            return Some(match (i, self.items[i].type_) {
                (1, sys::RTE_FLOW_ITEM_TYPE_IPV4) => "ipv4",
                (1, _) => "ipv6",
                (2, sys::RTE_FLOW_ITEM_TYPE_TCP) => "tcp",
                (2, _) => "udp",
                (i, _) => ITEMS[i],
            });
        }
        let a = self
            .actions
            .iter()
            .position(|a| std::ptr::eq(void(a), cause))?;
        Some(ACTIONS[a])
    }
}

/// Text of a failed rte_flow call: the PMD's message (copied, it may be
/// static or per-call), the errno, and the part of the rule it objects to
/// (`cause`: the name of the item or action `err.cause` points at).
fn flow_error_text(err: &sys::rte_flow_error, errno: i32, cause: Option<&str>) -> String {
    let errno_text = strerror(errno);
    let msg = if err.message.is_null() {
        None
    } else {
        // SAFETY: a non-NULL message is a NUL-terminated string the PMD set
        // for this call; we copy it at once.
        Some(
            unsafe { CStr::from_ptr(err.message) }
                .to_string_lossy()
                .into_owned(),
        )
    };
    let mut text = match msg {
        Some(m) if !m.is_empty() && m != errno_text => format!("{m} ({errno_text})"),
        _ => errno_text,
    };
    match (error_part(err.type_), cause) {
        (Some(part), Some(c)) => text.push_str(&format!(" [{part}: {c}]")),
        (Some(part), None) => text.push_str(&format!(" [{part}]")),
        (None, Some(c)) => text.push_str(&format!(" [{c}]")),
        (None, None) => {}
    }
    text
}

impl Port {
    /// Installs `rules` on this (started) port: each is checked with
    /// `rte_flow_validate`, then created. On the first failure the rules
    /// created so far are destroyed again and the error says which rule the
    /// driver refused and why (e.g. `rte_flow not supported by net_null`,
    /// `net_tap does not support this rule: item not supported ... [pattern
    /// item: tcp]`); the port is left as it was and keeps working.
    ///
    /// The returned [`FlowRules`] borrows the port: it must be dropped (which
    /// destroys the rules) before the port can be stopped, reconfigured or
    /// closed.
    pub fn steer_local_ports(&self, rules: &[SteerRule]) -> Result<FlowRules<'_>, DpdkError> {
        let mut installed = FlowRules {
            port: self,
            flows: Vec::with_capacity(rules.len()),
        };
        let driver = self
            .info()
            .map(|i| i.driver_name)
            .unwrap_or_else(|_| self.name().to_string());
        let n = rules.len();
        for (i, rule) in rules.iter().enumerate() {
            let items = RuleItems::new(rule);
            let p = items.pattern();
            let what = |op: &str| {
                format!(
                    "port {} rte_flow {op} of rule {}/{n} ({rule})",
                    self.name(),
                    i + 1
                )
            };
            let fail = |op: &str, errno: i32, err: &sys::rte_flow_error| {
                let why = flow_error_text(err, errno, p.name_of(err.cause));
                let detail = match errno {
                    libc::ENOSYS => format!("rte_flow not supported by {driver}: {why}"),
                    libc::ENOTSUP => format!("{driver} does not support this rule: {why}"),
                    _ => format!("{driver} refused the rule: {why}"),
                };
                DpdkError::with_detail(what(op), errno, detail)
            };
            let mut err = sys::rte_flow_error::default();
            // SAFETY: attr, the END-terminated pattern and actions and what
            // they point at live in `items`/`p` until after the call; err is
            // a valid out-pointer. The port id is ours while `self` lives.
            let ret = unsafe {
                sys::rte_flow_validate(
                    self.port_id(),
                    &items.attr,
                    p.items.as_ptr(),
                    p.actions.as_ptr(),
                    &mut err,
                )
            };
            if ret != 0 {
                // `installed` drops here: what was created is destroyed.
                return Err(fail("validate", ret.saturating_neg(), &err));
            }
            let mut err = sys::rte_flow_error::default();
            // SAFETY: as for validate; DPDK copies the rule, it keeps no
            // pointer into `items` after returning.
            let flow = unsafe {
                sys::rte_flow_create(
                    self.port_id(),
                    &items.attr,
                    p.items.as_ptr(),
                    p.actions.as_ptr(),
                    &mut err,
                )
            };
            match NonNull::new(flow) {
                Some(f) => installed.flows.push(f),
                None => return Err(fail("create", rte_errno(), &err)),
            }
        }
        Ok(installed)
    }
}

/// Flow rules installed by [`Port::steer_local_ports`]. Dropping destroys
/// them (newest first, as rte_flow wants); if that fails, the port's rules
/// are flushed instead. Holding a borrow of the port guarantees this happens
/// before the port is stopped or closed.
pub struct FlowRules<'p> {
    port: &'p Port,
    flows: Vec<NonNull<sys::rte_flow>>,
}

impl fmt::Debug for FlowRules<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlowRules")
            .field("port", &self.port.name())
            .field("rules", &self.flows.len())
            .finish()
    }
}

impl FlowRules<'_> {
    /// How many rules are installed.
    pub fn len(&self) -> usize {
        self.flows.len()
    }

    /// True if no rule is installed.
    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    /// Destroys the rules now, reporting failure (dropping only logs it).
    pub fn destroy(mut self) -> Result<(), DpdkError> {
        self.destroy_all()
    }

    fn destroy_all(&mut self) -> Result<(), DpdkError> {
        let port_id = self.port.port_id();
        let mut first_error = None;
        while let Some(flow) = self.flows.pop() {
            let mut err = sys::rte_flow_error::default();
            // SAFETY: `flow` came from rte_flow_create on this port, which is
            // still open (we borrow it), and is destroyed once (popped).
            let ret = unsafe { sys::rte_flow_destroy(port_id, flow.as_ptr(), &mut err) };
            if ret != 0 && first_error.is_none() {
                let errno = ret.saturating_neg();
                first_error = Some(DpdkError::with_detail(
                    format!("port {} rte_flow destroy", self.port.name()),
                    errno,
                    flow_error_text(&err, errno, None),
                ));
            }
        }
        let Some(e) = first_error else {
            return Ok(());
        };
        let mut err = sys::rte_flow_error::default();
        // SAFETY: the port is open (borrowed); err is a valid out-pointer.
        // Every handle we had is gone from `flows`, none is used again.
        let ret = unsafe { sys::rte_flow_flush(port_id, &mut err) };
        if ret != 0 {
            let errno = ret.saturating_neg();
            return Err(DpdkError::with_detail(
                format!("port {} rte_flow destroy", self.port.name()),
                errno,
                format!(
                    "{e}; the flush fallback failed too: {}",
                    flow_error_text(&err, errno, None)
                ),
            ));
        }
        Err(e.hint("the port's flow rules were flushed instead"))
    }
}

impl Drop for FlowRules<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.destroy_all() {
            eprintln!("border dpdk-ffi: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;

    #[test]
    fn owner_mask_covers_every_worker_index() {
        assert_eq!(owner_mask(0), 0);
        assert_eq!(owner_mask(1), 0);
        assert_eq!(owner_mask(2), 1);
        assert_eq!(owner_mask(3), 3);
        assert_eq!(owner_mask(4), 3);
        assert_eq!(owner_mask(5), 7);
        assert_eq!(owner_mask(8), 7);
        assert_eq!(owner_mask(9), 15);
        for workers in 1..=64usize {
            let m = owner_mask(workers);
            for w in 0..workers {
                assert_eq!(usize::from(w as u16 & m), w, "{workers} workers");
            }
        }
    }

    #[test]
    fn owner_rules_one_per_address_protocol_and_worker() {
        assert!(SteerRule::owner_rules(&[Ipv4Addr::LOCALHOST.into()], 1).is_empty());
        let a: IpAddr = Ipv4Addr::new(10, 0, 0, 5).into();
        let b: IpAddr = "2001:db8::5".parse().unwrap();
        let rules = SteerRule::owner_rules(&[a, b], 3);
        assert_eq!(rules.len(), 2 * 2 * 3);
        for r in &rules {
            assert_eq!(r.port_mask, 3);
            assert_eq!(r.port_spec, r.queue);
            assert!(r.queue < 3, "no rule for the unused value 3: {r}");
        }
        assert_eq!(
            rules[..3].iter().map(|r| r.queue).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        assert!(rules[..3]
            .iter()
            .all(|r| r.dst == a && r.proto == SteerProto::Tcp));
        assert!(rules[3..6]
            .iter()
            .all(|r| r.dst == a && r.proto == SteerProto::Udp));
        assert!(rules[6..].iter().all(|r| r.dst == b));
        assert_eq!(
            rules[4].to_string(),
            "udp to 10.0.0.5 port & 0x3 == 1 -> queue 1"
        );
        let four = SteerRule::owner_rules(&[a], 4);
        assert_eq!(four.len(), 8);
        assert!(four.iter().all(|r| r.port_mask == 3));
        let two = SteerRule::owner_rules(&[a], 2);
        assert!(two.iter().all(|r| r.port_mask == 1 && r.port_spec < 2));
    }

    fn bytes<T>(v: &T) -> &[u8] {
        // SAFETY: only called with the rte_flow_item_* structs, which have
        // no padding (packed headers; sizes pinned by bindgen's layout
        // checks) and whose every byte was written (Default zeroes them);
        // the slice borrows `v` and covers exactly size_of::<T>() bytes.
        unsafe { std::slice::from_raw_parts(void(v).cast::<u8>(), std::mem::size_of::<T>()) }
    }

    #[test]
    fn ipv4_tcp_items_are_in_network_order() {
        let rule = SteerRule {
            dst: Ipv4Addr::new(192, 0, 2, 7).into(),
            proto: SteerProto::Tcp,
            port_spec: 2,
            port_mask: 0x0103,
            queue: 2,
        };
        let items = RuleItems::new(&rule);
        let L3Items::V4 { spec, mask } = &items.l3 else {
            panic!("not IPv4")
        };
        // dst_addr is the last 4 bytes of the 20-byte IPv4 header.
        assert_eq!(&bytes(spec)[16..20], &[192, 0, 2, 7]);
        assert_eq!(&bytes(mask)[16..20], &[0xff; 4]);
        assert!(bytes(spec)[..16].iter().all(|b| *b == 0));
        assert!(bytes(mask)[..16].iter().all(|b| *b == 0));
        let L4Items::Tcp { spec, mask } = &items.l4 else {
            panic!("not TCP")
        };
        // dst_port: bytes 2..4 of the TCP header, big-endian.
        assert_eq!(&bytes(spec)[..4], &[0, 0, 0, 2]);
        assert_eq!(&bytes(mask)[..4], &[0, 0, 0x01, 0x03]);
        assert!(bytes(mask)[4..].iter().all(|b| *b == 0));
        assert_eq!(items.attr.ingress(), 1);
        assert_eq!(items.attr.egress(), 0);
        assert_eq!(items.attr.transfer(), 0);
        assert_eq!(items.queue.index, 2);
    }

    #[test]
    fn ipv6_udp_items_carry_the_address_bytes() {
        let addr: Ipv6Addr = "2001:db8:1:2::a:b".parse().unwrap();
        let rule = SteerRule {
            dst: addr.into(),
            proto: SteerProto::Udp,
            port_spec: 1,
            port_mask: 1,
            queue: 1,
        };
        let items = RuleItems::new(&rule);
        let L3Items::V6 { spec, mask } = &items.l3 else {
            panic!("not IPv6")
        };
        // dst_addr: bytes 24..40 of the 40-byte IPv6 header.
        assert_eq!(&bytes(spec)[24..40], &addr.octets());
        assert_eq!(
            &bytes(spec)[24..40],
            &[0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 2, 0, 0, 0, 0, 0, 0x0a, 0, 0x0b]
        );
        assert_eq!(&bytes(mask)[24..40], &[0xff; 16]);
        assert!(bytes(spec)[..24].iter().all(|b| *b == 0));
        assert!(bytes(mask)[..24].iter().all(|b| *b == 0));
        assert!(bytes(mask)[40..].iter().all(|b| *b == 0), "no ext flags");
        let L4Items::Udp { spec, mask } = &items.l4 else {
            panic!("not UDP")
        };
        assert_eq!(bytes(spec), &[0, 0, 0, 1, 0, 0, 0, 0]);
        assert_eq!(bytes(mask), &[0, 0, 0, 1, 0, 0, 0, 0]);
    }

    #[test]
    fn pattern_points_into_the_items() {
        let rule = SteerRule {
            dst: Ipv4Addr::new(10, 1, 2, 3).into(),
            proto: SteerProto::Udp,
            port_spec: 0,
            port_mask: 1,
            queue: 0,
        };
        let items = RuleItems::new(&rule);
        let p = items.pattern();
        let types: Vec<_> = p.items.iter().map(|i| i.type_).collect();
        assert_eq!(
            types,
            [
                sys::RTE_FLOW_ITEM_TYPE_ETH,
                sys::RTE_FLOW_ITEM_TYPE_IPV4,
                sys::RTE_FLOW_ITEM_TYPE_UDP,
                sys::RTE_FLOW_ITEM_TYPE_END
            ]
        );
        assert!(p.items[0].spec.is_null() && p.items[0].mask.is_null());
        assert!(p.items.iter().all(|i| i.last.is_null()));
        let (L3Items::V4 { spec, mask }, L4Items::Udp { spec: s4, mask: m4 }) =
            (&items.l3, &items.l4)
        else {
            panic!("wrong items")
        };
        assert_eq!(p.items[1].spec, void(spec));
        assert_eq!(p.items[1].mask, void(mask));
        assert_eq!(p.items[2].spec, void(s4));
        assert_eq!(p.items[2].mask, void(m4));
        assert_eq!(p.actions[0].type_, sys::RTE_FLOW_ACTION_TYPE_QUEUE);
        assert_eq!(p.actions[0].conf, void(&items.queue));
        assert_eq!(p.actions[1].type_, sys::RTE_FLOW_ACTION_TYPE_END);
        assert!(p.actions[1].conf.is_null());
        // Error causes are named by what they point at.
        assert_eq!(p.name_of(void(&p.items[0])), Some("eth"));
        assert_eq!(p.name_of(void(&p.items[1])), Some("ipv4"));
        assert_eq!(p.name_of(void(&p.items[2])), Some("udp"));
        assert_eq!(p.name_of(void(&p.actions[0])), Some("queue"));
        assert_eq!(p.name_of(std::ptr::null()), None);
        assert_eq!(p.name_of(void(spec)), None);
    }

    #[test]
    fn flow_error_text_uses_the_pmd_message_and_part() {
        let msg = c"cannot match on dst port";
        let err = sys::rte_flow_error {
            type_: sys::RTE_FLOW_ERROR_TYPE_ITEM_MASK,
            cause: std::ptr::null(),
            message: msg.as_ptr(),
        };
        assert_eq!(
            flow_error_text(&err, libc::EINVAL, Some("tcp")),
            "cannot match on dst port (Invalid argument) [item mask: tcp]"
        );
        assert_eq!(
            flow_error_text(&err, libc::EINVAL, None),
            "cannot match on dst port (Invalid argument) [item mask]"
        );
        let none = sys::rte_flow_error::default();
        assert_eq!(
            flow_error_text(&none, libc::ENOSYS, None),
            "Function not implemented"
        );
    }
}
