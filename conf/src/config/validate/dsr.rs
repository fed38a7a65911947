//! Direct server return: a VIP's `mode = "dsr"`, its `encap` and
//! `health_target`, and what a DSR VIP cannot have (docs/config.md,
//! "Direct server return").

use std::net::IpAddr;

use toml::Spanned as S;

use super::super::raw::RawVip;
use super::super::{Encap, Mode, Port};
use super::{at, Validator};

impl Validator {
    /// A VIP's `mode` and, for `"dsr"`, its `encap`.
    pub(super) fn vip_mode(&mut self, sv: &S<RawVip>, key: &str) -> Mode {
        let v = sv.get_ref();
        let mode = self.choice(
            &v.mode,
            &format!("{key}.mode"),
            &[
                ("fullnat", Mode::FullNat),
                ("dnat", Mode::Dnat),
                ("dsr", Mode::Dsr(Encap::None)),
            ],
            Mode::FullNat,
        );
        let encap = self.choice(
            &v.encap,
            &format!("{key}.encap"),
            &[
                ("none", Encap::None),
                ("ipip", Encap::Ipip),
                ("gue", Encap::Gue),
            ],
            Encap::None,
        );
        let only_dsr =
            "is only used with mode = \"dsr\" (expected mode = \"dsr\", or remove this key)";
        if !mode.is_dsr() {
            if let Some(e) = &v.encap {
                self.err(at(e), format!("{key}.encap"), only_dsr);
            }
            if let Some(t) = &v.health_target {
                self.err(at(t), format!("{key}.health_target"), only_dsr);
            }
            return mode;
        }
        let tkey = format!("{key}.health_target");
        let vip_target = self.choice(
            &v.health_target,
            &tkey,
            &[("backend", false), ("vip", true)],
            false,
        );
        if let (true, Some(t)) = (vip_target, &v.health_target) {
            self.err(
                at(t),
                tkey,
                "\"vip\" is not possible: border-mgmt's probes leave through the port's kernel twin, whose frames border-dp sends out as they are, never through a VIP's MAC rewrite or tunnel, and the kernel here has no ipip, fou or ip6_tunnel module to encapsulate them itself (expected health_target = \"backend\": probes to the backend's own address)",
            );
        }
        Mode::Dsr(encap)
    }

    /// What a DSR VIP cannot have: the backend receives the client's
    /// packet as it was sent and answers it itself, so border can
    /// translate no port, insert no PROXY header and splice no SYN
    /// cookie; with `encap = "none"` a backend must share a link with
    /// the appliance, since only its MAC is written.
    pub(super) fn dsr_rules(&mut self, sv: &S<RawVip>, key: &str, mode: Mode, ports: &[Port]) {
        let Mode::Dsr(encap) = mode else {
            return;
        };
        let v = sv.get_ref();
        let vport = *v.port.get_ref();
        if let Some(pp) = v.proxy_protocol.as_ref().filter(|p| p.get_ref() != "none") {
            self.err(
                at(pp),
                format!("{key}.proxy_protocol"),
                format!(
                    "{:?} cannot be used with mode = \"dsr\": the backend's answers do not pass border, which therefore cannot move the client's sequence numbers past a header it inserted (expected proxy_protocol = \"none\", or mode = \"fullnat\" or \"dnat\")",
                    pp.get_ref()
                ),
            );
        }
        if let Some(sp) = v.syn_proxy.as_ref().filter(|s| s.get_ref() != "off") {
            self.err(
                at(sp),
                format!("{key}.syn_proxy"),
                format!(
                    "{:?} cannot be used with mode = \"dsr\": the backend's SYN-ACK goes to the client directly, so border cannot splice the cookie handshake into the backend's (expected syn_proxy = \"off\")",
                    sp.get_ref()
                ),
            );
        }
        let backends = v.backend.as_ref().map_or(&[][..], |l| l.get_ref());
        for (i, sb) in backends.iter().enumerate() {
            let b = sb.get_ref();
            let bport = *b.port.get_ref();
            if bport != vport {
                self.err(
                    at(&b.port),
                    format!("{key}.backend[{i}].port"),
                    format!(
                        "{bport} differs from the VIP's port {vport}: with mode = \"dsr\" the backend gets the client's packet unchanged and answers from the VIP's address and port itself, so border cannot translate the port (expected port = {vport}, or mode = \"dnat\" or \"fullnat\")"
                    ),
                );
            }
            let addr: Option<IpAddr> = b.address.get_ref().parse().ok();
            if let (Encap::None, Some(ip)) = (encap, addr) {
                if !ports.is_empty() && !ports.iter().any(|p| p.on_link(ip)) {
                    self.err(
                        at(&b.address),
                        format!("{key}.backend[{i}].address"),
                        format!(
                            "{ip} is on no port's link: with encap = \"none\" border only writes the backend's MAC, so the backend must share a subnet with a port (expected an address in some port's subnet, or encap = \"ipip\" or \"gue\")"
                        ),
                    );
                }
            }
        }
    }
}
