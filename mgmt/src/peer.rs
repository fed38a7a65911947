//! Who may call the API on the unix socket: the kernel's `SO_PEERCRED` and
//! `SO_PEERGROUPS` of the connection (the caller's user, group and
//! supplementary groups when it connected), checked against root,
//! border-mgmt's own user and the operators' group (`[mgmt]
//! operators_group`). The socket's mode (0600, or 0660 with that group)
//! already keeps others from connecting; this check still holds if the
//! file's mode or a directory on its path is opened up by mistake, or a
//! descriptor is passed to another process. Every call of a refused
//! caller is answered `PERMISSION_DENIED`, logged and counted (metric
//! `border_mgmt_api_refused_total`) by `crate::authz`, which also decides
//! for TCP connections (mutual TLS, roles of pinned certificates). This
//! module only decides who is allowed; it knows `authz`'s [`Caller`], not
//! the other way round.

use conf::MgmtLimits;

use crate::authz::{Caller, Identity};

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

    /// The [`Caller`] of unix connection `stream`: its `SO_PEERCRED` and
    /// `SO_PEERGROUPS`, both recorded by the kernel when it connected.
    pub fn caller_of(&self, stream: &tokio::net::UnixStream, limits: &MgmtLimits) -> Caller {
        use std::os::fd::AsFd;
        let groups = conf::os::peer_groups(stream.as_fd()).unwrap_or_default();
        self.caller(stream.peer_cred().ok(), &groups, limits)
    }

    /// The [`Caller`] of a unix connection with credentials `cred` and
    /// supplementary groups `groups` (`None`: the kernel gave no
    /// credentials, which is refused).
    pub fn caller(
        &self,
        cred: Option<tokio::net::unix::UCred>,
        groups: &[u32],
        limits: &MgmtLimits,
    ) -> Caller {
        let allowed = cred.is_some_and(|c| self.allows(c.uid(), c.gid(), groups));
        let identity = Identity::Unix {
            uid: cred.map(|c| c.uid()),
            gid: cred.map(|c| c.gid()),
            pid: cred.and_then(|c| c.pid()),
            allowed,
        };
        Caller::new(identity, limits)
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

    #[tokio::test]
    async fn a_caller_without_credentials_is_refused_one_with_allowed_ones_is_an_operator() {
        let p = PeerPolicy {
            own_uid: 0,
            group: None,
        };
        let limits = MgmtLimits::default();
        assert_eq!(p.caller(None, &[], &limits).role(), None);
        let (a, b) = tokio::net::UnixStream::pair().unwrap();
        let own = PeerPolicy::new(None);
        assert_eq!(
            own.caller_of(&a, &limits).role(),
            Some(conf::ClientRole::Operator)
        );
        drop((a, b));
    }
}
