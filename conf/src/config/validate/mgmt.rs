//! `[mgmt]`: where border-mgmt listens, its TLS, its health peers and the
//! operators' group (`[mgmt.agent]`, `[mgmt.bgp]` and `[mgmt.limits]` are
//! checked in their own files).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use toml::Spanned as S;

use super::super::net::parse_hex;
use super::super::raw::{RawMgmt, RawPeer, RawTls};
use super::super::{Config, Listen, Mgmt, MgmtLimits, MgmtTls, Peer};
use super::{at, or, List, Validator, MAX_NAME};

/// Longest group name (useradd's limit).
const MAX_GROUP: usize = 32;
/// Longest unix socket path (sun_path is 108 bytes with the NUL).
const MAX_UNIX_PATH: usize = 107;

/// `unix:///absolute/path` or `tcp://ip:port`.
pub(in super::super) fn parse_listen(s: &str) -> Result<Listen, String> {
    let expected = "expected \"unix:///absolute/path\" or \"tcp://ip:port\"";
    if let Some(path) = s.strip_prefix("unix://") {
        if !path.starts_with('/') || path.ends_with('/') {
            return Err(format!(
                "{s:?} does not name an absolute socket path ({expected})"
            ));
        }
        if path.contains('\0') {
            return Err(format!("{s:?} contains a NUL character ({expected})"));
        }
        if path.len() > MAX_UNIX_PATH {
            return Err(format!(
                "socket path is {} bytes long (expected at most {MAX_UNIX_PATH})",
                path.len()
            ));
        }
        return Ok(Listen::Unix(PathBuf::from(path)));
    }
    if let Some(addr) = s.strip_prefix("tcp://") {
        return match addr.parse::<SocketAddr>() {
            Ok(a) if a.port() != 0 => Ok(Listen::Tcp(a)),
            Ok(_) => Err(format!("{s:?} has port 0 (expected a port 1..=65535)")),
            Err(_) => Err(format!(
                "{s:?} is not tcp://ip:port (expected e.g. \"tcp://0.0.0.0:50051\" or \"tcp://[::1]:50051\")"
            )),
        };
    }
    Err(format!("{s:?} is not a listen address ({expected})"))
}

impl Validator {
    pub(super) fn mgmt(&mut self, m: Option<&S<RawMgmt>>, instance: &str) -> Mgmt {
        let Some(sm) = m else {
            return Mgmt {
                listen: Config::default_mgmt_listen(instance),
                metrics_listen: None,
                tls: None,
                peers: Vec::new(),
                quorum: 1,
                bgp: None,
                operators_group: None,
                limits: MgmtLimits::default(),
                agent: None,
            };
        };
        let m = sm.get_ref();
        let listen = m.listen.as_ref().map_or_else(
            || Config::default_mgmt_listen(instance),
            |l| l.get_ref().clone(),
        );
        let mut tcp_listen = None;
        if let Some(l) = &m.listen {
            match parse_listen(&listen) {
                Err(msg) => self.err(at(l), "mgmt.listen", msg),
                Ok(Listen::Tcp(a)) => {
                    tcp_listen = Some(a);
                    if m.tls.is_none() {
                        self.err(
                            at(l),
                            "mgmt.listen",
                            format!("tcp listen {a} requires [mgmt.tls] (mutual TLS with pinned client fingerprints), or use a unix:// socket"),
                        );
                    }
                }
                Ok(Listen::Unix(_)) => {}
            }
        }
        let metrics_listen = m.metrics_listen.as_ref().and_then(|s| {
            match s.get_ref().parse::<SocketAddr>() {
                Ok(a) if a.port() == 0 => {
                    self.err(at(s), "mgmt.metrics_listen", format!("{a} has port 0 (expected a port 1..=65535)"));
                    None
                }
                Ok(a) if Some(a) == tcp_listen => {
                    self.err(at(s), "mgmt.metrics_listen", format!("{a} is also mgmt.listen (expected a different socket)"));
                    None
                }
                Ok(a) => Some(a),
                Err(_) => {
                    self.err(
                        at(s),
                        "mgmt.metrics_listen",
                        format!("{:?} is not ip:port (expected e.g. \"127.0.0.1:9108\" or \"[::1]:9108\")", s.get_ref()),
                    );
                    None
                }
            }
        });
        let tls = m.tls.as_ref().map(|t| self.tls(t));
        let peers = self.peers(m.peer.as_ref(), &listen, m.tls.is_some());
        let quorum = or(&m.quorum, 1);
        if let Some(q) = &m.quorum {
            let checkers = 1 + peers.len() as u32;
            if quorum == 0 || quorum > checkers {
                let n = peers.len();
                self.err(
                    at(q),
                    "mgmt.quorum",
                    format!(
                        "{quorum} is out of range (expected 1..={checkers}: the checkers are this border-mgmt plus {n} [[mgmt.peer]])"
                    ),
                );
            }
        }
        let bgp = m.bgp.as_ref().map(|b| self.bgp(b));
        let operators_group = m.operators_group.as_ref().map(|g| {
            self.name(g, "mgmt.operators_group", MAX_GROUP, true);
            g.get_ref().clone()
        });
        let limits = self.limits(m.limits.as_ref());
        let agent = m.agent.as_ref().map(|a| self.agent(a, m.tls.is_some()));
        Mgmt {
            listen,
            metrics_listen,
            tls,
            peers,
            quorum,
            bgp,
            operators_group,
            limits,
            agent,
        }
    }

    fn peers(&mut self, list: Option<&List<RawPeer>>, listen: &str, have_tls: bool) -> Vec<Peer> {
        let items: &[S<RawPeer>] = list.map_or(&[], |l| l.get_ref());
        let own = parse_listen(listen).ok();
        let mut out: Vec<Peer> = Vec::new();
        let mut seen: HashMap<Listen, usize> = HashMap::new();
        let mut names: HashMap<String, usize> = HashMap::new();
        for (i, sp) in items.iter().enumerate() {
            let p = sp.get_ref();
            let key = format!("mgmt.peer[{i}]");
            let akey = format!("{key}.address");
            let name = p.name.as_ref().map(|n| {
                self.name(n, &format!("{key}.name"), MAX_NAME, true);
                if let Some(j) = names.insert(n.get_ref().clone(), i) {
                    self.err(
                        at(n),
                        format!("{key}.name"),
                        format!(
                            "{:?} is also the name of mgmt.peer[{j}] (expected unique peer names)",
                            n.get_ref()
                        ),
                    );
                }
                n.get_ref().clone()
            });
            let address = match parse_listen(p.address.get_ref()) {
                Err(msg) => {
                    self.err(at(&p.address), &akey, msg);
                    continue;
                }
                Ok(a) => a,
            };
            if Some(&address) == own.as_ref() {
                self.err(
                    at(&p.address),
                    &akey,
                    format!(
                        "{:?} is this border-mgmt's own mgmt.listen (expected another border-mgmt)",
                        p.address.get_ref()
                    ),
                );
            }
            if let Some(j) = seen.insert(address.clone(), i) {
                self.err(
                    at(&p.address),
                    &akey,
                    format!(
                        "{:?} is also mgmt.peer[{j}] (expected each peer once)",
                        p.address.get_ref()
                    ),
                );
            }
            if let (Listen::Tcp(a), false) = (&address, have_tls) {
                self.err(
                    at(&p.address),
                    &akey,
                    format!("tcp peer {a} requires [mgmt.tls] (its cert and key are this border-mgmt's client identity), or use a unix:// socket"),
                );
            }
            out.push(Peer {
                address,
                name,
                trusted: or(&p.trusted, false),
            });
        }
        out
    }

    fn tls(&mut self, st: &S<RawTls>) -> MgmtTls {
        let (t, table_at) = (st.get_ref(), at(st));
        let mut path = |s: &S<String>, key: &str| {
            let p = s.get_ref();
            if p.is_empty() {
                self.err(
                    at(s),
                    key,
                    "must not be empty (expected a path to a PEM file)",
                );
            } else if p.contains('\0') {
                self.err(at(s), key, "contains a NUL character");
            }
            PathBuf::from(p)
        };
        let cert = path(&t.cert, "mgmt.tls.cert");
        let key = path(&t.key, "mgmt.tls.key");
        let client_ca = path(&t.client_ca, "mgmt.tls.client_ca");
        let lists = [
            ("client_fingerprints", &t.client_fingerprints),
            ("reader_fingerprints", &t.reader_fingerprints),
            ("peer_fingerprints", &t.peer_fingerprints),
        ];
        if lists
            .iter()
            .all(|(_, l)| l.as_ref().is_none_or(|l| l.get_ref().is_empty()))
        {
            self.err(
                t.client_fingerprints.as_ref().map_or(table_at, at),
                "mgmt.tls.client_fingerprints",
                "must list at least one pinned client certificate (expected [\"sha256:<64 hex digits>\"])",
            );
        }
        // Each fingerprint once, over all lists: one role per certificate.
        let mut seen: HashMap<String, String> = HashMap::new();
        let mut pinned: [Vec<String>; 3] = Default::default();
        for ((name, list), out) in lists.iter().zip(pinned.iter_mut()) {
            for (i, f) in list.iter().flat_map(|l| l.get_ref().iter().enumerate()) {
                let key = format!("mgmt.tls.{name}[{i}]");
                let hex = f
                    .get_ref()
                    .strip_prefix("sha256:")
                    .and_then(parse_hex::<32>);
                let Some(bytes) = hex else {
                    self.err(
                        at(f),
                        key,
                        format!("{:?} is not a certificate fingerprint (expected \"sha256:\" followed by 64 hex digits)", f.get_ref()),
                    );
                    continue;
                };
                let norm = format!(
                    "sha256:{}",
                    bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
                );
                let short = format!("{name}[{i}]");
                match seen.get(&norm) {
                    Some(earlier) if earlier.starts_with(name) => {
                        self.err(at(f), key, format!("is listed twice (also {earlier})"));
                    }
                    Some(earlier) => self.err(
                        at(f),
                        key,
                        format!("is also {earlier} (expected one role per certificate: client_fingerprints operators, reader_fingerprints readers, peer_fingerprints peers)"),
                    ),
                    None => {
                        seen.insert(norm.clone(), short);
                    }
                }
                out.push(norm);
            }
        }
        let [client_fingerprints, reader_fingerprints, peer_fingerprints] = pinned;
        MgmtTls {
            cert,
            key,
            client_ca,
            client_fingerprints,
            reader_fingerprints,
            peer_fingerprints,
        }
    }
}
