//! The receiving side of PROXY protocol v2 (docs/ppv2.md, "Receiving the
//! header"): an acceptor for tokio listeners that sits behind a border VIP
//! with `proxy_protocol = "v2"`, or is reached directly.
//!
//! - **Sniff, don't demand.** [`Acceptor::accept`] peeks at a fresh
//!   connection: a v2 signature starts a header, which is read exactly;
//!   anything else (a TLS ClientHello, an HTTP/2 preface) passes with every
//!   byte intact. So the parser can be rolled out before the load balancer
//!   starts sending headers, and direct connections keep working.
//! - **Two addresses.** [`PeerInfo`] keeps the address the header claims
//!   and the one the socket measured as separate fields; the caller logs
//!   both.
//! - **Malformed headers** close that connection only, counted by reason
//!   ([`AcceptStats`]); a connection that closes before sending anything is
//!   [`Sniffed::Silent`] and worth no log line.
//! - **Inner connections.** [`ProxiedStream`] is tonic's `Connected`, so
//!   handlers of a server fed by the acceptor see both addresses; a front
//!   end that relays into a server over loopback records the real peer in a
//!   [`PeerTable`] under its inner connection's source port.
#![deny(unsafe_code)]

mod accept;
pub mod header;
mod peers;
mod stats;
mod stream;

pub use accept::{AcceptOptions, Acceptor, Refused, Sniffed};
pub use header::{Header, Malformed};
pub use peers::{PeerEntry, PeerTable};
pub use stats::{AcceptSnapshot, AcceptStats, Arrival};
pub use stream::{PeerInfo, ProxiedStream};
