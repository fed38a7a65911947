//! SYN proxy (`syn_proxy` per VIP, docs/design.md §4): border answers a
//! client's SYN itself with a cookie SYN-ACK and keeps no state; the
//! client's ACK proves the cookie, and only then does border open the
//! backend's connection and splice the two.
//!
//! - [`cookie`]: encoding and verifying the cookie (options included).
//! - [`segment`]: the SYN-ACK and the backend SYN, written in place.
//! - [`splice`]: the per-connection translation once both handshakes are done.
//! - [`hold`]: client segments held until the backend's handshake completes.
//! - [`auto`]: when `syn_proxy = "auto"` answers with cookies.
//!
//! The load balancer's side (when to answer, the splice) is in
//! `lb/synproxy.rs`.

pub mod cookie;
pub mod segment;

pub use cookie::{CookieSecret, SynOptions};
pub mod auto;
pub mod hold;
pub mod splice;

pub use splice::SpFlow;
