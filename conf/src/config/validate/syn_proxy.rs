//! `vip.syn_proxy`: SYN cookies per VIP (docs/reliability.md).

use super::super::raw::RawVip;
use super::super::{Protocol, SynProxy};
use super::{at, Validator};
use toml::Spanned as S;

impl Validator {
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

    /// A DNAT VIP's replies go from the backend to the client, to whichever
    /// worker the NIC's hash of that direction picks: with several workers
    /// it may not be the one holding a cookie connection's sequence
    /// translation (full-NAT replies come to a local port, which names its
    /// worker). An error rather than connections that break.
    pub(super) fn syn_proxy_dnat_needs_one_worker<'a>(
        &mut self,
        vips: impl IntoIterator<Item = (usize, &'a S<RawVip>)>,
        workers: usize,
    ) {
        if workers <= 1 {
            return;
        }
        for (i, sv) in vips {
            let v = sv.get_ref();
            let (Some(sp), Some(mode)) = (&v.syn_proxy, &v.mode) else {
                continue;
            };
            if sp.get_ref() != "off" && mode.get_ref() == "dnat" {
                self.err(
                    at(sp),
                    format!("vip[{i}].syn_proxy"),
                    format!(
                        "{:?} on a DNAT VIP needs one worker ({workers} in dataplane.worker_lcores): the backend's replies may reach a worker without the cookie connection's sequence translation (expected mode = \"fullnat\", one worker, or syn_proxy = \"off\")",
                        sp.get_ref()
                    ),
                );
            }
        }
    }
}
