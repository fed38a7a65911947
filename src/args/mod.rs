//! Command-line pieces shared by the binaries: the daemons' command lines
//! (parsed by border-dp, border-mgmt and border-gw, rendered as man pages
//! by `borderctl`) and the duration values every binary's flags take.

pub mod daemons;
pub mod duration;
