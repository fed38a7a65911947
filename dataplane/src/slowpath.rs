//! In-place responders for traffic addressed to the appliance itself: ARP,
//! ICMPv4 echo, ICMPv6 echo and NDP neighbor solicitation.
//!
//! Each responder takes one Ethernet frame in a `&mut [u8]` and, when it
//! answers, overwrites that buffer with the reply and returns the reply's
//! length (`Outcome::Replied { len, .. }`, never more than the input; shorter
//! frames are zero-padded to the Ethernet minimum when the input had room).
//! The reply goes back out of the port the request came in on; the VLAN tag,
//! if any, is left as it was. Output is a pure function of the input bytes.
//!
//! The caller decides which addresses are owned (port addresses and VIPs
//! alike) through a closure or an [`OwnedAddrs`] implementation. Besides the
//! verdict, every outcome can carry a [`Neighbor`] binding (sender IP/MAC
//! from ARP, source IP + source link-layer option from NS, target +
//! target link-layer option from NA) and what kind of message it came in
//! ([`Hearing`]); the responders only report it, they remember nothing.
//! What the neighbour table may take from each kind is the load
//! balancer's call (see [`crate::neigh`]).
//!
//! Policy in one place:
//! - ARP request for an owned address: reply. For another address:
//!   `drop_arp_not_ours`. Gratuitous ARP (sender IP == target IP) and every ARP
//!   reply: to the host (kernel twin), which needs them for its own
//!   neighbour cache.
//! - ICMPv4/ICMPv6 echo request to an owned unicast address: reply (TTL/hop
//!   limit 64). Other ICMP to an owned address (echo replies for the
//!   kernel's pings, errors, RA/RS/MLD to multicast): to the host. Fragmented
//!   ICMP: to the host, which reassembles. ICMP errors about VIP flows must be
//!   matched by the pipeline *before* calling here.
//! - NS for an owned target: NA (hop limit 255, O set, S set unless the NS
//!   came from `::`, target link-layer option = port MAC). DAD probes (source
//!   `::`) are answered to all-nodes as RFC 4861 §7.2.4 requires; if the
//!   probe frame is too short to hold the NA with its mandatory option, it
//!   goes to the host instead.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use conf::counters::Counter;

use crate::wire::arp::{ArpPacket, OP_REPLY, OP_REQUEST, PACKET_LEN as ARP_LEN};
use crate::wire::ethernet::{self, MIN_FRAME_LEN, VLAN_TAG_LEN};
use crate::wire::icmpv4::{self, Icmpv4Packet};
use crate::wire::icmpv6::{self, na_flags, Icmpv6Packet, NdOption, NdiscRepr};
use crate::wire::ipv4::{self, Ipv4Packet, Ipv4Repr};
use crate::wire::ipv6::{self, Ipv6Packet, Ipv6Repr};
use crate::wire::{
    ip_proto, mac_is_unicast, parse_frame, Fragment, L3Kind, MacAddr, Parsed, WireError,
};

/// How many echo requests one worker answers: a token bucket of
/// `dataplane.icmp_echo_per_second` per second, one second deep, so a ping
/// flood costs at most that many replies (the rest count as
/// `icmp_echo_rate_limited`).
#[derive(Clone, Copy, Debug)]
pub struct EchoLimiter {
    bucket: crate::token_bucket::TokenBucket,
    per_second: u32,
}

impl EchoLimiter {
    /// Answers up to `per_second` requests per second (at least 1).
    pub fn new(per_second: u32) -> Self {
        let per_second = per_second.max(1);
        EchoLimiter {
            bucket: crate::token_bucket::TokenBucket::full(per_second, 0),
            per_second,
        }
    }

    /// Whether an echo request seen at `now_ms` may be answered.
    #[inline]
    pub fn answer(&mut self, now_ms: u64) -> bool {
        self.bucket.take(now_ms, self.per_second, self.per_second)
    }
}

/// Whether `p` is an ICMPv4 or ICMPv6 echo request.
#[inline]
pub fn is_echo_request(p: &Parsed) -> bool {
    match (p.l4_proto, p.icmp) {
        (ip_proto::ICMP, Some((t, _))) => t == icmpv4::msg_type::ECHO_REQUEST,
        (ip_proto::ICMPV6, Some((t, _))) => t == icmpv6::msg_type::ECHO_REQUEST,
        _ => false,
    }
}

/// TTL / hop limit of echo replies.
pub const REPLY_TTL: u8 = 64;
pub use crate::wire::icmpv6::ND_HOP_LIMIT;
/// ff02::1, all nodes.
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

/// Which addresses belong to the appliance (port addresses and VIPs).
pub trait OwnedAddrs {
    /// True when the appliance answers for this IPv4 address.
    fn owns_v4(&self, ip: Ipv4Addr) -> bool;
    /// True when the appliance answers for this IPv6 address.
    fn owns_v6(&self, ip: &Ipv6Addr) -> bool;
}

impl<T: OwnedAddrs + ?Sized> OwnedAddrs for &T {
    fn owns_v4(&self, ip: Ipv4Addr) -> bool {
        (**self).owns_v4(ip)
    }
    fn owns_v6(&self, ip: &Ipv6Addr) -> bool {
        (**self).owns_v6(ip)
    }
}

/// A plain list of addresses (linear scan; fine for tests and a few ports).
impl OwnedAddrs for [IpAddr] {
    fn owns_v4(&self, ip: Ipv4Addr) -> bool {
        self.contains(&IpAddr::V4(ip))
    }
    fn owns_v6(&self, ip: &Ipv6Addr) -> bool {
        self.contains(&IpAddr::V6(*ip))
    }
}

/// Two closures as an [`OwnedAddrs`].
#[derive(Debug, Clone, Copy)]
pub struct OwnedFn<F4, F6> {
    /// IPv4 predicate.
    pub v4: F4,
    /// IPv6 predicate.
    pub v6: F6,
}

impl<F4, F6> OwnedAddrs for OwnedFn<F4, F6>
where
    F4: Fn(Ipv4Addr) -> bool,
    F6: Fn(&Ipv6Addr) -> bool,
{
    fn owns_v4(&self, ip: Ipv4Addr) -> bool {
        (self.v4)(ip)
    }
    fn owns_v6(&self, ip: &Ipv6Addr) -> bool {
        (self.v6)(ip)
    }
}

/// An IP-to-MAC binding seen in a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Neighbor<A> {
    /// The neighbour's address.
    pub ip: A,
    /// Its link-layer address (always unicast).
    pub mac: MacAddr,
    /// The kind of message it came in.
    pub heard: Hearing,
}

/// The kind of message a [`Neighbor`] binding came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Hearing {
    /// An ARP reply to an owned address, or a solicited NA with the
    /// override flag to an owned address: it may answer a request of ours.
    Answer,
    /// A gratuitous ARP (request or reply), an unsolicited NA, or an NA
    /// without the override flag: the neighbour announces itself.
    Announcement,
    /// The sender of an ARP request or NS for an owned address (RFC 826's
    /// merge, RFC 4861 §7.2.3).
    Requester,
    /// A request or answer meant for another host.
    Overheard,
}

/// What to do with a frame handed to the slow path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome<A> {
    /// The buffer now holds a reply of `len` bytes; send it back out of the
    /// ingress port.
    Replied {
        /// Reply length (<= input length).
        len: usize,
        /// Binding learned from the request.
        learn: Option<Neighbor<A>>,
    },
    /// Not answered here; pass the (unmodified) frame to the kernel twin.
    ToHost {
        /// Binding learned from the frame.
        learn: Option<Neighbor<A>>,
    },
    /// Drop and count under `reason`. The buffer is unmodified.
    Drop {
        /// Why.
        reason: Counter,
        /// Binding learned from the frame (e.g. the sender of an ARP request
        /// for someone else); the caller decides whether to use it.
        learn: Option<Neighbor<A>>,
    },
}

/// Outcome of [`arp`].
pub type ArpOutcome = Outcome<Ipv4Addr>;
/// Outcome of [`icmpv4`] (never carries a binding).
pub type Icmpv4Outcome = Outcome<Ipv4Addr>;
/// Outcome of [`icmpv6`].
pub type Icmpv6Outcome = Outcome<Ipv6Addr>;
/// Outcome of [`respond`].
pub type SlowOutcome = Outcome<IpAddr>;

impl<A> Outcome<A> {
    fn drop(reason: Counter) -> Self {
        Outcome::Drop {
            reason,
            learn: None,
        }
    }

    /// The binding carried by any variant.
    pub fn learn(&self) -> Option<&Neighbor<A>> {
        match self {
            Outcome::Replied { learn, .. }
            | Outcome::ToHost { learn }
            | Outcome::Drop { learn, .. } => learn.as_ref(),
        }
    }

    /// Convert the address type of the binding.
    pub fn map_addr<B>(self, f: impl FnOnce(A) -> B) -> Outcome<B> {
        let m = |l: Option<Neighbor<A>>| {
            l.map(|n| Neighbor {
                ip: f(n.ip),
                mac: n.mac,
                heard: n.heard,
            })
        };
        match self {
            Outcome::Replied { len, learn } => Outcome::Replied {
                len,
                learn: m(learn),
            },
            Outcome::ToHost { learn } => Outcome::ToHost { learn: m(learn) },
            Outcome::Drop { reason, learn } => Outcome::Drop {
                reason,
                learn: m(learn),
            },
        }
    }
}

/// Handle any frame addressed to the appliance: ARP, ICMPv4, ICMPv6/NDP
/// are answered or classified as by [`arp`], [`icmpv4`], [`icmpv6`]; other IP
/// traffic to an owned address goes to the host (`drop_not_local` otherwise);
/// non-IP, non-ARP EtherTypes (LLDP, ...) go to the host.
pub fn respond(
    buf: &mut [u8],
    port_mac: MacAddr,
    owned: &(impl OwnedAddrs + ?Sized),
) -> SlowOutcome {
    match parse_frame(buf) {
        Ok(p) => respond_parsed(buf, &p, port_mac, owned),
        Err(m) => Outcome::drop(m.counter()),
    }
}

/// [`respond`] for a frame the caller already parsed; `p` must come from
/// `parse_frame(buf)` (if it does not, the result is a drop, never a panic).
pub fn respond_parsed(
    buf: &mut [u8],
    p: &Parsed,
    port_mac: MacAddr,
    owned: &(impl OwnedAddrs + ?Sized),
) -> SlowOutcome {
    if !consistent(buf, p) {
        return Outcome::drop(Counter::DropSlowpathUnhandled);
    }
    match p.l3 {
        L3Kind::Arp => arp_parsed(buf, p, port_mac, |ip| owned.owns_v4(ip)).map_addr(IpAddr::V4),
        L3Kind::Ipv4 if p.l4_proto == ip_proto::ICMP => {
            icmpv4_parsed(buf, p, port_mac, |ip| owned.owns_v4(ip)).map_addr(IpAddr::V4)
        }
        L3Kind::Ipv6 if p.l4_proto == ip_proto::ICMPV6 => {
            icmpv6_parsed(buf, p, port_mac, |ip| owned.owns_v6(ip)).map_addr(IpAddr::V6)
        }
        L3Kind::Ipv4 => match Ipv4Packet::new_checked(&buf[p.l3_offset..p.l3_end]) {
            Ok(ip) if owned.owns_v4(ip.dst_addr()) => Outcome::ToHost { learn: None },
            Ok(_) => Outcome::drop(Counter::DropNotLocal),
            Err(_) => Outcome::drop(Counter::DropSlowpathUnhandled),
        },
        L3Kind::Ipv6 => match Ipv6Packet::new_checked(&buf[p.l3_offset..p.l3_end]) {
            Ok(ip) if owned.owns_v6(&ip.dst_addr()) => Outcome::ToHost { learn: None },
            Ok(_) => Outcome::drop(Counter::DropNotLocal),
            Err(_) => Outcome::drop(Counter::DropSlowpathUnhandled),
        },
        L3Kind::Other(_) => Outcome::ToHost { learn: None },
    }
}

/// Answer an ARP request for an owned address in place: op 2, sender =
/// (`port_mac`, requested IP), target = the requester; Ethernet destination
/// = requester's hardware address, source = `port_mac`.
pub fn arp(buf: &mut [u8], port_mac: MacAddr, is_owned: impl Fn(Ipv4Addr) -> bool) -> ArpOutcome {
    match parse_frame(buf) {
        Ok(p) => arp_parsed(buf, &p, port_mac, is_owned),
        Err(m) => Outcome::drop(m.counter()),
    }
}

/// [`arp`] for an already parsed frame.
pub fn arp_parsed(
    buf: &mut [u8],
    p: &Parsed,
    port_mac: MacAddr,
    is_owned: impl Fn(Ipv4Addr) -> bool,
) -> ArpOutcome {
    if p.l3 != L3Kind::Arp || !consistent(buf, p) {
        return Outcome::drop(Counter::DropSlowpathUnhandled);
    }
    let l3 = p.l3_offset;
    let Ok(a) = ArpPacket::new_checked(&buf[l3..p.l3_end]) else {
        return Outcome::drop(Counter::DropSlowpathUnhandled);
    };
    let (op, sha, spa, tpa) = (a.operation(), a.sender_hw(), a.sender_ip(), a.target_ip());
    if !mac_is_unicast(&sha) || spa.is_broadcast() || spa.is_multicast() {
        return Outcome::drop(Counter::DropArpBadSender);
    }
    let heard = if spa == tpa {
        Hearing::Announcement
    } else if !is_owned(tpa) {
        Hearing::Overheard
    } else if op == OP_REPLY {
        Hearing::Answer
    } else {
        Hearing::Requester
    };
    // An ARP probe (RFC 5227) has sender IP 0.0.0.0: nothing to learn.
    let learn = (!spa.is_unspecified()).then_some(Neighbor {
        ip: spa,
        mac: sha,
        heard,
    });
    match op {
        OP_REQUEST => {}
        OP_REPLY => return Outcome::ToHost { learn },
        _ => {
            return Outcome::Drop {
                reason: Counter::DropArpBadOp,
                learn: None,
            }
        }
    }
    if spa == tpa {
        // Gratuitous ARP announcement: for the host's cache, no reply.
        return Outcome::ToHost { learn };
    }
    if !is_owned(tpa) {
        return Outcome::Drop {
            reason: Counter::DropArpNotOurs,
            learn,
        };
    }
    let Ok(mut r) = ArpPacket::new_checked(&mut buf[l3..p.l3_end]) else {
        return Outcome::drop(Counter::DropSlowpathUnhandled);
    };
    r.set_operation(OP_REPLY);
    r.set_sender_hw(port_mac);
    r.set_sender_ip(tpa);
    r.set_target_hw(sha);
    r.set_target_ip(spa);
    if ethernet::set_addrs(buf, sha, port_mac).is_err() {
        return Outcome::drop(Counter::DropSlowpathUnhandled);
    }
    let len = finish(buf, l3 + ARP_LEN, p);
    Outcome::Replied { len, learn }
}

/// Answer an ICMPv4 echo request to an owned address in place: MACs
/// swapped (source = `port_mac`), addresses swapped, TTL 64, type 0, IP
/// options dropped (IHL 5), identification, TOS and DF kept, both checksums
/// valid. Other ICMP to an owned address goes to the host.
pub fn icmpv4(
    buf: &mut [u8],
    port_mac: MacAddr,
    is_owned: impl Fn(Ipv4Addr) -> bool,
) -> Icmpv4Outcome {
    match parse_frame(buf) {
        Ok(p) => icmpv4_parsed(buf, &p, port_mac, is_owned),
        Err(m) => Outcome::drop(m.counter()),
    }
}

fn v4_source_ok(a: Ipv4Addr) -> bool {
    !(a.is_unspecified()
        || a.is_broadcast()
        || a.is_multicast()
        || a.is_loopback()
        || a.octets()[0] >= 240)
}

/// [`icmpv4`] for an already parsed frame.
pub fn icmpv4_parsed(
    buf: &mut [u8],
    p: &Parsed,
    port_mac: MacAddr,
    is_owned: impl Fn(Ipv4Addr) -> bool,
) -> Icmpv4Outcome {
    if p.l3 != L3Kind::Ipv4 || p.l4_proto != ip_proto::ICMP || !consistent(buf, p) {
        return Outcome::drop(Counter::DropSlowpathUnhandled);
    }
    let l3 = p.l3_offset;
    let Ok(ip) = Ipv4Packet::new_checked(&buf[l3..p.l3_end]) else {
        return Outcome::drop(Counter::DropSlowpathUnhandled);
    };
    if p.l4_offset != l3 + ip.header_len() {
        return Outcome::drop(Counter::DropSlowpathUnhandled);
    }
    let request = Ipv4Repr::parse(&ip);
    let (src, dst) = (request.src_addr, request.dst_addr);
    if !is_owned(dst) {
        return Outcome::drop(Counter::DropIcmpNotOurs);
    }
    if p.fragment != Fragment::None {
        return Outcome::ToHost { learn: None };
    }
    let Ok(icmp) = Icmpv4Packet::new_checked(&buf[p.l4_offset..p.l3_end]) else {
        return Outcome::drop(Counter::DropSlowpathUnhandled);
    };
    if icmp.msg_type() != icmpv4::msg_type::ECHO_REQUEST || icmp.code() != 0 {
        return Outcome::ToHost { learn: None };
    }
    let Ok(eth_src) = ethernet::src_addr(buf) else {
        return Outcome::drop(Counter::DropSlowpathUnhandled);
    };
    if !v4_source_ok(src) || !mac_is_unicast(&eth_src) {
        return Outcome::drop(Counter::DropIcmpBadSource);
    }
    if !icmp.verify_checksum() {
        return Outcome::drop(Counter::DropIcmpBadChecksum);
    }

    // The message moves up over any IP options; the reply's header has
    // none (its total length is at most the request's).
    let icmp_len = p.l3_end - p.l4_offset;
    let new_l4 = l3 + ipv4::MIN_HEADER_LEN;
    if p.l4_offset != new_l4 {
        buf.copy_within(p.l4_offset..p.l3_end, new_l4);
    }
    let reply = Ipv4Repr {
        src_addr: dst,
        dst_addr: src,
        protocol: ip_proto::ICMP,
        ttl: REPLY_TTL,
        payload_len: icmp_len,
        ..request
    };
    if write_echo_reply_v4(buf, l3, &reply, [eth_src, port_mac]).is_err() {
        return Outcome::drop(Counter::DropSlowpathUnhandled);
    }
    let len = finish(buf, new_l4 + icmp_len, p);
    Outcome::Replied { len, learn: None }
}

/// Writes the header `ip` at `l3` over an echo request whose message
/// already follows it, turns the message into the reply (type 0, checksum
/// updated) and addresses the frame `[dst, src]`.
fn write_echo_reply_v4(
    buf: &mut [u8],
    l3: usize,
    ip: &Ipv4Repr,
    [dst, src]: [MacAddr; 2],
) -> Result<(), WireError> {
    let end = l3 + ipv4::MIN_HEADER_LEN + ip.payload_len;
    let mut packet = ip.emit(buf.get_mut(l3..end).ok_or(WireError::Truncated)?)?;
    Icmpv4Packet::new_checked(packet.payload_mut())?.rewrite_msg_type(icmpv4::msg_type::ECHO_REPLY);
    ethernet::set_addrs(buf, dst, src)
}

/// Answer an ICMPv6 echo request to an owned address, or an NDP neighbor
/// solicitation for an owned target, in place. Extension headers are not
/// copied into replies. See the module docs for the full policy.
pub fn icmpv6(
    buf: &mut [u8],
    port_mac: MacAddr,
    is_owned: impl Fn(&Ipv6Addr) -> bool,
) -> Icmpv6Outcome {
    match parse_frame(buf) {
        Ok(p) => icmpv6_parsed(buf, &p, port_mac, is_owned),
        Err(m) => Outcome::drop(m.counter()),
    }
}

/// [`icmpv6`] for an already parsed frame.
pub fn icmpv6_parsed(
    buf: &mut [u8],
    p: &Parsed,
    port_mac: MacAddr,
    is_owned: impl Fn(&Ipv6Addr) -> bool,
) -> Icmpv6Outcome {
    if p.l3 != L3Kind::Ipv6
        || p.l4_proto != ip_proto::ICMPV6
        || !consistent(buf, p)
        || p.l4_offset < p.l3_offset + ipv6::HEADER_LEN
    {
        return Outcome::drop(Counter::DropSlowpathUnhandled);
    }
    let Ok(ip) = Ipv6Packet::new_checked(&buf[p.l3_offset..p.l3_end]) else {
        return Outcome::drop(Counter::DropSlowpathUnhandled);
    };
    let h = V6Hdr {
        src: ip.src_addr(),
        dst: ip.dst_addr(),
        hop: ip.hop_limit(),
        request: Ipv6Repr::parse(&ip),
    };
    let dst_owned = is_owned(&h.dst);
    let for_host = dst_owned || h.dst.is_multicast();
    if p.fragment != Fragment::None {
        return if for_host {
            Outcome::ToHost { learn: None }
        } else {
            Outcome::drop(Counter::DropIcmpNotOurs)
        };
    }
    let Ok(icmp) = Icmpv6Packet::new_checked(&buf[p.l4_offset..p.l3_end]) else {
        return Outcome::drop(Counter::DropSlowpathUnhandled);
    };
    match icmp.msg_type() {
        icmpv6::msg_type::ECHO_REQUEST if dst_owned => echo_v6(buf, p, port_mac, &h),
        icmpv6::msg_type::NEIGHBOR_SOLICIT => neighbor_solicit(buf, p, port_mac, &h, is_owned),
        icmpv6::msg_type::NEIGHBOR_ADVERT => neighbor_advert(buf, p, &h, for_host),
        _ if for_host => Outcome::ToHost { learn: None },
        _ => Outcome::drop(Counter::DropIcmpNotOurs),
    }
}

struct V6Hdr {
    src: Ipv6Addr,
    dst: Ipv6Addr,
    hop: u8,
    /// The whole fixed header, whose traffic class and flow label an echo
    /// reply keeps.
    request: Ipv6Repr,
}

fn echo_v6(buf: &mut [u8], p: &Parsed, port_mac: MacAddr, h: &V6Hdr) -> Icmpv6Outcome {
    let Ok(icmp) = Icmpv6Packet::new_checked(&buf[p.l4_offset..p.l3_end]) else {
        return Outcome::drop(Counter::DropSlowpathUnhandled);
    };
    if icmp.code() != 0 {
        return Outcome::ToHost { learn: None };
    }
    let Ok(eth_src) = ethernet::src_addr(buf) else {
        return Outcome::drop(Counter::DropSlowpathUnhandled);
    };
    if h.src.is_unspecified()
        || h.src.is_multicast()
        || h.src.is_loopback()
        || !mac_is_unicast(&eth_src)
    {
        return Outcome::drop(Counter::DropIcmpBadSource);
    }
    if !icmp.verify_checksum(&h.src, &h.dst) {
        return Outcome::drop(Counter::DropIcmpBadChecksum);
    }
    let l3 = p.l3_offset;
    let icmp_len = p.l3_end - p.l4_offset;
    let new_l4 = l3 + ipv6::HEADER_LEN;
    if p.l4_offset != new_l4 {
        buf.copy_within(p.l4_offset..p.l3_end, new_l4);
    }
    // Traffic class and flow label are kept; extension headers are not.
    let reply = Ipv6Repr {
        src_addr: h.dst,
        dst_addr: h.src,
        next_header: ip_proto::ICMPV6,
        hop_limit: REPLY_TTL,
        payload_len: icmp_len,
        ..h.request
    };
    if write_echo_reply_v6(buf, l3, &reply, [eth_src, port_mac]).is_err() {
        return Outcome::drop(Counter::DropSlowpathUnhandled);
    }
    let len = finish(buf, new_l4 + icmp_len, p);
    Outcome::Replied { len, learn: None }
}

/// [`write_echo_reply_v4`] for IPv6. Swapping the addresses leaves the
/// pseudo-header sum unchanged, so only the type's change enters the
/// checksum.
fn write_echo_reply_v6(
    buf: &mut [u8],
    l3: usize,
    ip: &Ipv6Repr,
    [dst, src]: [MacAddr; 2],
) -> Result<(), WireError> {
    let end = l3 + ipv6::HEADER_LEN + ip.payload_len;
    let mut packet = ip.emit(buf.get_mut(l3..end).ok_or(WireError::Truncated)?)?;
    Icmpv6Packet::new_checked(packet.payload_mut())?.rewrite_msg_type(icmpv6::msg_type::ECHO_REPLY);
    ethernet::set_addrs(buf, dst, src)
}

fn neighbor_solicit(
    buf: &mut [u8],
    p: &Parsed,
    port_mac: MacAddr,
    h: &V6Hdr,
    is_owned: impl Fn(&Ipv6Addr) -> bool,
) -> Icmpv6Outcome {
    if h.hop != ND_HOP_LIMIT {
        return Outcome::drop(Counter::DropNdBadHopLimit);
    }
    let Ok(icmp) = Icmpv6Packet::new_checked(&buf[p.l4_offset..p.l3_end]) else {
        return Outcome::drop(Counter::DropSlowpathUnhandled);
    };
    let Some(target) = icmp.nd_target() else {
        return Outcome::drop(Counter::DropNdInvalid);
    };
    if icmp.code() != 0 {
        return Outcome::drop(Counter::DropNdInvalid);
    }
    if !icmp.verify_checksum(&h.src, &h.dst) {
        return Outcome::drop(Counter::DropIcmpBadChecksum);
    }
    let mut slla = None;
    for o in icmp.nd_options() {
        match o {
            Ok(NdOption::SourceLinkAddr(m)) => slla = Some(m),
            Ok(_) => {}
            Err(_) => return Outcome::drop(Counter::DropNdBadOption),
        }
    }
    let dad = h.src.is_unspecified();
    let bad_dst = h.dst.is_multicast() && h.dst != icmpv6::solicited_node(&target);
    if target.is_multicast()
        || h.src.is_multicast()
        || bad_dst
        || (dad && (!h.dst.is_multicast() || slla.is_some()))
    {
        return Outcome::drop(Counter::DropNdInvalid);
    }
    let heard = if is_owned(&target) {
        Hearing::Requester
    } else {
        Hearing::Overheard
    };
    let learn = if dad {
        None
    } else {
        slla.filter(mac_is_unicast).map(|mac| Neighbor {
            ip: h.src,
            mac,
            heard,
        })
    };
    if !is_owned(&target) {
        return Outcome::Drop {
            reason: Counter::DropNdNotOurs,
            learn,
        };
    }
    let eth_src = ethernet::src_addr(buf).unwrap_or_default();
    if !mac_is_unicast(&eth_src) {
        return Outcome::Drop {
            reason: Counter::DropNdInvalid,
            learn,
        };
    }
    let l3 = p.l3_offset;
    let na_l4 = l3 + ipv6::HEADER_LEN;
    let with_tlla = buf.len() >= na_l4 + icmpv6::ND_NEIGHBOR_LEN + 8;
    if !with_tlla && h.dst.is_multicast() {
        // A multicast solicitation must be answered with the target
        // link-layer option (RFC 4861 §4.4) and there is no room for it.
        return Outcome::ToHost { learn };
    }
    let icmp_len = icmpv6::ND_NEIGHBOR_LEN + if with_tlla { 8 } else { 0 };
    let (reply_ip, reply_mac) = if dad {
        (ALL_NODES, icmpv6::multicast_mac(&ALL_NODES))
    } else {
        (h.src, eth_src)
    };
    let na = NdiscRepr::NeighborAdvert {
        flags: na_flags::OVERRIDE | if dad { 0 } else { na_flags::SOLICITED },
        target_addr: target,
        lladdr: with_tlla.then_some(port_mac),
    };
    let ip = Ipv6Repr {
        src_addr: target,
        dst_addr: reply_ip,
        next_header: ip_proto::ICMPV6,
        hop_limit: ND_HOP_LIMIT,
        traffic_class: 0,
        flow_label: 0,
        payload_len: icmp_len,
    };
    if write_neighbor_advert(buf, l3, &ip, &na, [reply_mac, port_mac]).is_err() {
        return Outcome::drop(Counter::DropSlowpathUnhandled);
    }
    let len = finish(buf, na_l4 + icmp_len, p);
    Outcome::Replied { len, learn }
}

/// Writes a Neighbor Advertisement `na` under the header `ip` at `l3`,
/// addressed `[dst, src]`.
fn write_neighbor_advert(
    buf: &mut [u8],
    l3: usize,
    ip: &Ipv6Repr,
    na: &NdiscRepr,
    [dst, src]: [MacAddr; 2],
) -> Result<(), WireError> {
    let end = l3 + ipv6::HEADER_LEN + ip.payload_len;
    let mut packet = ip.emit(buf.get_mut(l3..end).ok_or(WireError::Truncated)?)?;
    na.emit(packet.payload_mut(), &ip.src_addr, &ip.dst_addr)?;
    ethernet::set_addrs(buf, dst, src)
}

fn neighbor_advert(buf: &[u8], p: &Parsed, h: &V6Hdr, for_host: bool) -> Icmpv6Outcome {
    if h.hop != ND_HOP_LIMIT {
        return Outcome::drop(Counter::DropNdBadHopLimit);
    }
    let Ok(icmp) = Icmpv6Packet::new_checked(&buf[p.l4_offset..p.l3_end]) else {
        return Outcome::drop(Counter::DropSlowpathUnhandled);
    };
    let Some(target) = icmp.nd_target() else {
        return Outcome::drop(Counter::DropNdInvalid);
    };
    if icmp.code() != 0
        || target.is_multicast()
        || (h.dst.is_multicast() && icmp.na_flags() & na_flags::SOLICITED != 0)
    {
        return Outcome::drop(Counter::DropNdInvalid);
    }
    if !icmp.verify_checksum(&h.src, &h.dst) {
        return Outcome::drop(Counter::DropIcmpBadChecksum);
    }
    let mut tlla = None;
    for o in icmp.nd_options() {
        match o {
            Ok(NdOption::TargetLinkAddr(m)) => tlla = Some(m),
            Ok(_) => {}
            Err(_) => return Outcome::drop(Counter::DropNdBadOption),
        }
    }
    let flags = icmp.na_flags();
    let heard = if !for_host {
        Hearing::Overheard
    } else if flags & na_flags::SOLICITED == 0 || flags & na_flags::OVERRIDE == 0 {
        // (A solicited NA to a multicast group was refused above.)
        Hearing::Announcement
    } else {
        Hearing::Answer
    };
    let learn = tlla.filter(mac_is_unicast).map(|mac| Neighbor {
        ip: target,
        mac,
        heard,
    });
    if for_host {
        Outcome::ToHost { learn }
    } else {
        Outcome::Drop {
            reason: Counter::DropIcmpNotOurs,
            learn,
        }
    }
}

/// True when `p` can describe `buf` (guards the `*_parsed` entry points
/// against a mismatched pair; parse_frame output always passes).
fn consistent(buf: &[u8], p: &Parsed) -> bool {
    p.l3_offset >= 14
        && p.l3_offset <= p.l4_offset
        && p.l4_offset <= p.l3_end
        && p.l4_offset + p.l4_len == p.l3_end
        && p.l3_end <= buf.len()
}

/// Zero-pad a reply ending at `end` up to the Ethernet minimum (60 bytes,
/// 64 when tagged) as far as the input frame allows, and return its length.
fn finish(buf: &mut [u8], end: usize, p: &Parsed) -> usize {
    let min = MIN_FRAME_LEN
        + if p.vlan_tci.is_some() {
            VLAN_TAG_LEN
        } else {
            0
        };
    let len = end.max(min.min(buf.len()));
    if let Some(pad) = buf.get_mut(end..len) {
        pad.fill(0);
    }
    len
}
