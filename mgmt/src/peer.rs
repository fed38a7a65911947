//! Who may call the API on the unix socket: the kernel's `SO_PEERCRED` of
//! the connection (tonic hands it to every request as
//! [`UdsConnectInfo`]) checked against root, border-mgmt's own user and the
//! operators' group (`[mgmt] operators_group`). The socket's mode (0600, or
//! 0660 with that group) already keeps others from connecting; this check
//! still holds if the file's mode or a directory on its path is opened up
//! by mistake, or a descriptor is passed to another process. A refused
//! call is answered `PERMISSION_DENIED`, logged and counted
//! ([`refused_calls`], metric `border_mgmt_api_refused_total`).
//! TCP connections are authenticated by mutual TLS instead (`crate::tls`).

use std::sync::atomic::{AtomicU64, Ordering};

use tonic::transport::server::UdsConnectInfo;
use tonic::{Request, Status};

/// Calls refused by [`PeerPolicy`] since this process started.
static REFUSED: AtomicU64 = AtomicU64::new(0);

/// API calls refused because of the caller's unix credentials, since start.
pub fn refused_calls() -> u64 {
    REFUSED.load(Ordering::Relaxed)
}

/// The unix users and group allowed to call the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerPolicy {
    /// border-mgmt's own effective uid (root is always allowed too).
    pub own_uid: u32,
    /// The operators' group, if configured.
    pub group: Option<u32>,
}

impl PeerPolicy {
    /// Root, this process's user and `group`.
    pub fn new(group: Option<u32>) -> PeerPolicy {
        PeerPolicy {
            own_uid: conf::os::files::euid(),
            group,
        }
    }

    /// Whether a process with these credentials may call: root, our own
    /// user, or a member of the operators' group (primary group, or among
    /// `supplementary`, the groups of the calling process).
    pub fn allows(&self, uid: u32, gid: u32, supplementary: &[u32]) -> bool {
        uid == 0
            || uid == self.own_uid
            || self
                .group
                .is_some_and(|g| gid == g || supplementary.contains(&g))
    }

    /// A tonic interceptor: passes calls that did not come over a unix
    /// socket (TCP, where mutual TLS decides) and unix callers
    /// [`PeerPolicy::allows`]; refuses the rest with `PERMISSION_DENIED`.
    #[allow(clippy::result_large_err)]
    pub fn check(&self, req: Request<()>) -> Result<Request<()>, Status> {
        let Some(info) = req.extensions().get::<UdsConnectInfo>() else {
            return Ok(req);
        };
        let cred = info.peer_cred;
        let allowed = cred.is_some_and(|c| {
            let groups = c
                .pid()
                .and_then(|p| u32::try_from(p).ok())
                .map(conf::os::files::process_groups)
                .unwrap_or_default();
            self.allows(c.uid(), c.gid(), &groups)
        });
        if allowed {
            return Ok(req);
        }
        let n = REFUSED.fetch_add(1, Ordering::Relaxed) + 1;
        let (uid, gid, pid) = cred.map_or((None, None, None), |c| {
            (Some(c.uid()), Some(c.gid()), c.pid())
        });
        tracing::warn!(
            ?uid,
            ?gid,
            ?pid,
            refused_total = n,
            "api: call refused: the caller is not root, border-mgmt's user or in mgmt.operators_group"
        );
        Err(Status::permission_denied(
            "border-mgmt: this unix user may not call the API (root, border-mgmt's user and mgmt.operators_group may)",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_our_user_and_the_group_are_allowed_others_not() {
        let p = PeerPolicy {
            own_uid: 998,
            group: Some(500),
        };
        assert!(p.allows(0, 0, &[]));
        assert!(p.allows(998, 998, &[]));
        assert!(p.allows(1000, 500, &[]), "primary group");
        assert!(p.allows(1000, 1000, &[27, 500]), "supplementary group");
        assert!(!p.allows(65534, 65534, &[65534]));
        let no_group = PeerPolicy {
            own_uid: 0,
            group: None,
        };
        assert!(!no_group.allows(1000, 500, &[500]));
    }

    #[test]
    fn calls_from_tcp_pass_to_tls_and_unknown_unix_callers_are_refused() {
        let p = PeerPolicy {
            own_uid: 0,
            group: None,
        };
        assert!(p.check(Request::new(())).is_ok(), "no unix connect info");
        let before = refused_calls();
        let mut r = Request::new(());
        r.extensions_mut().insert(UdsConnectInfo {
            peer_addr: None,
            peer_cred: None,
        });
        let e = p.check(r).unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
        assert!(refused_calls() > before);
    }
}
