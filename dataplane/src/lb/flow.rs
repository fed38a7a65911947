//! What a worker remembers per flow, shared by every stage: the record
//! ([`FlowRec`]) and its bits, the checksum changes fixed with its keys
//! ([`flow_deltas`]), the mapping of a PROXY flow's numbers back to the
//! client's ([`client_space`]), the statistics of a forwarded packet
//! ([`count_forwarded`]) and why an entry goes ([`Ending`]).

use conf::records::EndReason;
use conf::state::{FlowStat, FlowStats};
use conf::Mode;

use crate::conntrack::{FlowKey, State};
use crate::encap::TunnelConsts;
use crate::nat;
use crate::neigh::Slot;
use crate::ppv2::PpFlow;
use crate::wire::ip_proto;

/// What a worker remembers about one connection, next to the entry's two
/// keys: the original key is the client's packets as they arrive (client ->
/// VIP), the reply key the backend's (backend -> local address for full-NAT,
/// backend -> client for DNAT). The addresses and ports a packet is
/// translated to are those of the other direction's key, so they are not
/// stored twice.
///
/// What every packet needs comes first (32 bytes, in the entry's second
/// cache line with the deadline and the end of the keys); the PROXY
/// protocol state and the connection id, which only PROXY flows read,
/// come after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct FlowRec {
    /// Statistics slots of the VIP and the backend (see `FlowStats`).
    pub vip_slot: u32,
    pub backend_slot: u32,
    /// What full-NAT adds to the client's TCP timestamps (TSval) on the
    /// way to the backend, and takes off the backend's echoes (TSecr), when
    /// [`FLOW_TS`] is set: see [`crate::local_ports`].
    pub ts_delta: u32,
    /// The backend's next hop in the worker's neighbour table.
    pub hop: Slot,
    /// Checksum changes of the client's packets' rewrite (to the reply key
    /// reversed) and of the backend's (to the original key reversed, for
    /// full-NAT), fixed with the keys. A DSR flow rewrites nothing: these
    /// 8 bytes hold its tunnel's constants instead ([`FlowRec::tunnel`]).
    pub fwd: nat::Deltas,
    pub rev: nat::Deltas,
    pub client_mac: [u8; 6],
    /// Where the client's packets came from: reply out of this port to this MAC.
    pub client_port: u8,
    /// The data port the backend is reached through.
    pub backend_port: u8,
    pub mode: Mode,
    /// [`FLOW_PP`], [`FLOW_TS`], [`FLOW_TS_ECHOED`], [`FLOW_SP`],
    /// [`FLOW_PERSIST`], [`FLOW_TUNNEL`], [`FLOW_COUNTED_VIP`], [`FLOW_COUNTED_BACKEND`].
    pub bits: u8,
    /// This connection's id: worker number in the top 16 bits, the
    /// worker's connection counter below (the PPv2 `UNIQUE_ID`).
    pub conn_id: u64,
    /// PROXY protocol v2 state (off unless the VIP has it).
    pub proxy: PpFlow,
}

/// `FlowRec::bits`: `proxy.is_on()`, fixed when the connection starts.
pub const FLOW_PP: u8 = 1;

/// The client's SYN carried timestamps and `ts_delta` translates them.
pub const FLOW_TS: u8 = 2;

/// The backend's SYN-ACK carried timestamps too: the connection uses them,
/// so its local tuple may be reused soon after it closes (RFC 6191).
pub const FLOW_TS_ECHOED: u8 = 4;

/// A SYN proxy connection: the client's handshake was with border's
/// cookie, the backend's numbers are spliced (`lb/synproxy.rs`).
pub const FLOW_SP: u8 = 8;

/// The flow holds its client's persistence pin (`persistence_timeout`,
/// see `persist.rs`) until its entry goes.
pub const FLOW_PERSIST: u8 = 0x10;

/// A DSR flow's record holds its tunnel's constants ([`FlowRec::tunnel`];
/// or it has no tunnel, `encap = "none"`), worked out at its first packet
/// by this process (adoption clears it: the ports may have changed).
pub const FLOW_TUNNEL: u8 = 0x20;

/// The flow holds one of its VIP's open-connection count (`[vip.limits]`,
/// see `admit.rs`).
pub const FLOW_COUNTED_VIP: u8 = 0x40;

/// The flow holds one of its backend's count.
pub const FLOW_COUNTED_BACKEND: u8 = 0x80;

/// Both.
pub const FLOW_COUNTED: u8 = FLOW_COUNTED_VIP | FLOW_COUNTED_BACKEND;

impl FlowRec {
    #[inline(always)]
    pub fn pp_on(&self) -> bool {
        self.bits & FLOW_PP != 0
    }

    #[inline(always)]
    pub fn ts_on(&self) -> bool {
        self.bits & FLOW_TS != 0
    }

    /// A DSR flow's tunnel constants, valid with [`FLOW_TUNNEL`]: kept in
    /// `fwd` and `rev`, which only NAT flows use, so the entry keeps its
    /// size and layout.
    #[inline(always)]
    pub fn tunnel(&self) -> TunnelConsts {
        TunnelConsts {
            src: (u32::from(self.fwd.ip) << 16) | u32::from(self.fwd.l4),
            aux: (u32::from(self.rev.ip) << 16) | u32::from(self.rev.l4),
        }
    }

    /// Keeps `c` as the flow's tunnel constants (see [`FlowRec::tunnel`]).
    pub fn set_tunnel(&mut self, c: TunnelConsts) {
        self.fwd = nat::Deltas {
            ip: (c.src >> 16) as u16,
            l4: c.src as u16,
        };
        self.rev = nat::Deltas {
            ip: (c.aux >> 16) as u16,
            l4: c.aux as u16,
        };
    }

    /// Whether the local tuple of this connection (its `reply` key) may be
    /// reused soon after it ends: it used timestamps both ways, or it is
    /// UDP (no TIME_WAIT).
    pub fn rests_briefly(&self, reply: &FlowKey) -> bool {
        reply.proto != ip_proto::TCP
            || self.bits & (FLOW_TS | FLOW_TS_ECHOED) == FLOW_TS | FLOW_TS_ECHOED
    }
}

impl Default for FlowRec {
    fn default() -> Self {
        FlowRec {
            vip_slot: u32::MAX,
            backend_slot: u32::MAX,
            ts_delta: 0,
            hop: Slot::NONE,
            fwd: nat::Deltas::default(),
            rev: nat::Deltas::default(),
            client_mac: [0; 6],
            client_port: 0,
            backend_port: 0,
            mode: Mode::FullNat,
            bits: 0,
            conn_id: 0,
            proxy: PpFlow::default(),
        }
    }
}

/// A sequence or acknowledgement number of the client's sequence space as
/// the backend sees it (shifted by a PROXY header) taken back to the
/// client's numbering, as `PpFlow::map_backend` does: numbers past the
/// header move back by its length, numbers inside it map to the client's
/// first data byte. Unchanged for flows without a header sent.
#[inline(always)]
pub(super) fn client_space(rec: &FlowRec, n: u32) -> u32 {
    let pp = &rec.proxy;
    if !rec.pp_on() || !pp.committed() || !pp.sent() {
        return n;
    }
    let l = u32::from(pp.hdr_len);
    let c1 = pp.client_isn.wrapping_add(1);
    let into = n.wrapping_sub(c1) as i32;
    if into <= 0 {
        n
    } else if into as u32 <= l {
        c1
    } else {
        n.wrapping_sub(l)
    }
}

/// Counts a forwarded packet of `len` bytes of the flow `rec` in its VIP's
/// and its backend's statistics (the one place a packet is counted there).
#[inline(always)]
pub(super) fn count_forwarded(
    vip_stats: FlowStats<'static>,
    backend_stats: FlowStats<'static>,
    rec: &FlowRec,
    len: usize,
) {
    vip_stats.add(rec.vip_slot, FlowStat::Packets, 1);
    vip_stats.add(rec.vip_slot, FlowStat::Bytes, len as u64);
    backend_stats.add(rec.backend_slot, FlowStat::Packets, 1);
    backend_stats.add(rec.backend_slot, FlowStat::Bytes, len as u64);
}

/// The checksum changes of a flow's rewrites (see [`FlowRec::fwd`]).
pub(super) fn flow_deltas(
    mode: Mode,
    orig: &FlowKey,
    reply: &FlowKey,
) -> (nat::Deltas, nat::Deltas) {
    let (v4, src, dst) = (!orig.v6, (&orig.src, orig.sport), (&orig.dst, orig.dport));
    let to_backend = (&reply.src, reply.sport);
    match mode {
        Mode::FullNat => nat::deltas_both(v4, src, dst, (&reply.dst, reply.dport), to_backend),
        // The backend's packets to the client: from the VIP.
        Mode::Dnat => (
            nat::deltas(v4, src, dst, None, Some(to_backend)),
            nat::deltas(v4, to_backend, (&reply.dst, reply.dport), Some(dst), None),
        ),
        // The client's packet reaches the backend unchanged.
        Mode::Dsr(_) => (nat::Deltas::default(), nat::Deltas::default()),
    }
}

/// Why an entry goes, as its remover knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ending {
    /// Its own state says: expired, or replaced after it closed.
    AsItsState,
    /// Evicted from a full table (a SYN flood's half-open entries).
    Evicted,
    /// border reset it (its backend went down, `on_down = "reset"`).
    Reset,
}

impl Ending {
    pub(super) fn reason(self, state: State) -> EndReason {
        match (self, state) {
            (Ending::Evicted, _) => EndReason::Evicted,
            (Ending::Reset, _) => EndReason::Reset,
            (Ending::AsItsState, State::Closed) => EndReason::Rst,
            (Ending::AsItsState, State::FinWait | State::TimeWait) => EndReason::Fin,
            (Ending::AsItsState, _) => EndReason::Timeout,
        }
    }
}
