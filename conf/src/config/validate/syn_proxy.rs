//! `vip.syn_proxy` (issue 23: SYN cookies per VIP).

use super::super::raw::RawVip;
use super::super::{Protocol, SynProxy};
use super::{at, V};

impl V {
    /// A VIP's `syn_proxy`: one of the three names, and not "off" only on
    /// a TCP VIP (a UDP flow has no handshake to answer).
    pub(super) fn syn_proxy(&mut self, v: &RawVip, key: &str, protocol: Protocol) -> SynProxy {
        let skey = format!("{key}.syn_proxy");
        let sp = self.choice(
            &v.syn_proxy,
            &skey,
            &[
                ("off", SynProxy::Off),
                ("auto", SynProxy::Auto),
                ("always", SynProxy::Always),
            ],
            SynProxy::Off,
        );
        if let (Some(s), true) = (&v.syn_proxy, sp != SynProxy::Off) {
            if protocol == Protocol::Udp {
                self.err(
                    at(s),
                    skey,
                    format!(
                        "{:?} needs protocol = \"tcp\" (a UDP VIP has no handshake to answer; expected syn_proxy = \"off\")",
                        s.get_ref()
                    ),
                );
                return SynProxy::Off;
            }
        }
        sp
    }
}
