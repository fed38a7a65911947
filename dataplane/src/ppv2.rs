//! PROXY protocol v2 insertion into TCP streams (docs/design.md §4).
//!
//! - [`header`]: the header encoder (addresses, `UNIQUE_ID`, `CRC32C`,
//!   `AUTHORITY`), bounded by `proxy_protocol_max_len`.
//! - [`tls`]: the server name of a TLS ClientHello, for `AUTHORITY`.
//! - [`seg`]: in-place segment surgery with incremental checksums.
//! - [`flow`]: the per-connection state and the per-segment rules
//!   (sequence/ACK/SACK translation, MSS clamp, insertion, re-insertion
//!   into retransmitted first segments, payload splits).
//! - [`queue`]: the bounded emit queue and retransmission timers a worker
//!   drains (split tails, standalone header retransmissions).
//!
//! The VIP settings travel as a [`PpConfig`] (all off by default) from
//! whatever builds the worker's tables into [`crate::lb::VipRt`], and from
//! there into each connection's [`flow::PpFlow`].

pub mod flow;
pub mod header;
pub mod queue;
pub mod seg;
pub mod tls;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub use flow::{Departure, Ends, PpFlow};
pub use header::Header;

use crate::conntrack::EntryId;

/// A VIP's PROXY protocol settings as a worker needs them. `Default` is off.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PpConfig {
    /// `proxy_protocol = "v2"` on a TCP VIP.
    pub enabled: bool,
    /// `proxy_protocol_send_on_connect`.
    pub send_on_connect: bool,
    /// `proxy_protocol_tlvs` contains `unique_id`.
    pub unique_id: bool,
    /// `proxy_protocol_tlvs` contains `crc32c`.
    pub crc32c: bool,
    /// `proxy_protocol_tlvs` contains `authority` (ignored with
    /// `send_on_connect`: the header then goes out before any client data).
    pub authority: bool,
    /// `proxy_protocol_max_len`: upper bound of the header in bytes.
    pub max_len: u16,
}

impl PpConfig {
    /// Off.
    pub const OFF: PpConfig = PpConfig {
        enabled: false,
        send_on_connect: false,
        unique_id: false,
        crc32c: false,
        authority: false,
        max_len: 0,
    };

    /// The settings of a configured VIP.
    pub fn from_vip(v: &conf::Vip) -> PpConfig {
        if v.proxy_protocol != conf::ProxyProtocol::V2 || v.protocol != conf::Protocol::Tcp {
            return PpConfig::OFF;
        }
        let has = |t: conf::PpTlv| v.proxy_protocol_tlvs.contains(&t);
        PpConfig {
            enabled: true,
            send_on_connect: v.proxy_protocol_send_on_connect,
            unique_id: has(conf::PpTlv::UniqueId),
            crc32c: has(conf::PpTlv::Crc32c),
            authority: has(conf::PpTlv::Authority),
            max_len: v.proxy_protocol_max_len,
        }
    }

    fn sample(&self, v6: bool, authority: Option<&'static [u8]>) -> Header<'static> {
        let (a, b): (IpAddr, IpAddr) = if v6 {
            (Ipv6Addr::UNSPECIFIED.into(), Ipv6Addr::UNSPECIFIED.into())
        } else {
            (Ipv4Addr::UNSPECIFIED.into(), Ipv4Addr::UNSPECIFIED.into())
        };
        Header {
            src: (a, 0),
            dst: (b, 0),
            unique_id: self.unique_id.then_some(0),
            authority,
            crc32c: self.crc32c,
            max_len: self.max_len,
        }
    }

    /// The header length when it does not depend on the connection's first
    /// segment (no `AUTHORITY`, or `send_on_connect`), else `None`.
    pub fn fixed_len(&self, v6: bool) -> Option<u16> {
        if self.authority && !self.send_on_connect {
            return None;
        }
        self.sample(v6, None).encoded_len().map(|l| l as u16)
    }

    /// The longest header this VIP can produce: what the backend's MSS is
    /// lowered by.
    pub fn clamp_len(&self, v6: bool) -> u16 {
        if !self.enabled {
            return 0;
        }
        self.fixed_len(v6).unwrap_or_else(|| {
            let bare = self.sample(v6, None).encoded_len().unwrap_or(0);
            let limit = usize::from(self.max_len).min(header::MAX_HEADER_LEN);
            let longest = bare + 3 + header::MAX_AUTHORITY_LEN;
            longest.min(limit).max(bare) as u16
        })
    }
}

/// A worker's PROXY machinery: frames to emit and header retransmission timers.
#[derive(Default)]
pub struct PpWorker {
    pub emits: queue::EmitQueue,
    pub timers: queue::Timers<EntryId>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(authority: bool, soc: bool, max_len: u16) -> PpConfig {
        PpConfig {
            enabled: true,
            send_on_connect: soc,
            unique_id: true,
            crc32c: true,
            authority,
            max_len,
        }
    }

    #[test]
    fn lengths() {
        assert_eq!(cfg(false, false, 107).fixed_len(false), Some(28 + 19 + 7));
        assert_eq!(cfg(false, false, 107).fixed_len(true), Some(52 + 19 + 7));
        assert_eq!(cfg(true, false, 107).fixed_len(false), None);
        assert_eq!(cfg(true, true, 107).fixed_len(false), Some(54));
        assert_eq!(cfg(true, false, 107).clamp_len(false), 107);
        assert_eq!(cfg(true, false, 2000).clamp_len(false), 54 + 258);
        assert_eq!(cfg(false, false, 40).clamp_len(false), 28 + 7);
        assert_eq!(PpConfig::OFF.clamp_len(false), 0);
    }
}
