//! gobgpd's gRPC API (vendored `proto/gobgp`, client only) and the requests
//! border sends: AddPath / DeletePath of a VIP host route in the global
//! table, ListPeer for the neighbours' session state.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use prost::Message;
use prost_types::Any;
use tonic::transport::{Channel, Endpoint};

use super::reconcile::Route;

/// The generated types and client of gobgpd's API (package `apipb`).
#[allow(missing_docs, clippy::all)]
pub mod apipb {
    tonic::include_proto!("apipb");
}

/// The client type.
pub type Client = apipb::gobgp_api_client::GobgpApiClient<Channel>;

/// How long one call to gobgpd may take: a withdraw must not wait behind a
/// hung gobgpd for longer than the 1 s budget.
pub const CALL_TIMEOUT: Duration = Duration::from_millis(500);

/// A lazily connecting client for gobgpd at `api`: the first call (and each
/// after a broken connection) dials; every call times out after
/// [`CALL_TIMEOUT`].
pub fn client(api: SocketAddr) -> Client {
    let endpoint = Endpoint::from_shared(format!("http://{api}"))
        .expect("an ip:port makes a valid URI")
        .connect_timeout(CALL_TIMEOUT)
        .timeout(CALL_TIMEOUT);
    Client::new(endpoint.connect_lazy())
}

fn any<M: Message>(type_name: &str, m: &M) -> Any {
    Any {
        type_url: format!("type.googleapis.com/apipb.{type_name}"),
        value: m.encode_to_vec(),
    }
}

fn family(prefix: IpAddr) -> apipb::Family {
    use apipb::family::{Afi, Safi};
    let afi = if prefix.is_ipv4() { Afi::Ip } else { Afi::Ip6 };
    apipb::Family {
        afi: afi as i32,
        safi: Safi::Unicast as i32,
    }
}

/// The route as a gobgpd path: NLRI `prefix/32` (or /128), ORIGIN IGP, the
/// next hop (NEXT_HOP for IPv4, MP_REACH_NLRI for IPv6) and the
/// communities, if any.
pub fn path(route: &Route) -> apipb::Path {
    let len = if route.prefix.is_ipv4() { 32 } else { 128 };
    let nlri = any(
        "IPAddressPrefix",
        &apipb::IpAddressPrefix {
            prefix_len: len,
            prefix: route.prefix.to_string(),
        },
    );
    let mut pattrs = vec![any(
        "OriginAttribute",
        &apipb::OriginAttribute { origin: 0 },
    )];
    if route.prefix.is_ipv4() {
        pattrs.push(any(
            "NextHopAttribute",
            &apipb::NextHopAttribute {
                next_hop: route.next_hop.to_string(),
            },
        ));
    } else {
        pattrs.push(any(
            "MpReachNLRIAttribute",
            &apipb::MpReachNlriAttribute {
                family: Some(family(route.prefix)),
                next_hops: vec![route.next_hop.to_string()],
                nlris: vec![nlri.clone()],
            },
        ));
    }
    if !route.communities.is_empty() {
        pattrs.push(any(
            "CommunitiesAttribute",
            &apipb::CommunitiesAttribute {
                communities: route.communities.clone(),
            },
        ));
    }
    apipb::Path {
        nlri: Some(nlri),
        pattrs,
        family: Some(family(route.prefix)),
        ..Default::default()
    }
}

/// AddPath of `route` into the global table.
pub fn add_request(route: &Route) -> apipb::AddPathRequest {
    apipb::AddPathRequest {
        table_type: apipb::TableType::Global as i32,
        vrf_id: String::new(),
        path: Some(path(route)),
    }
}

/// DeletePath of `route` from the global table.
pub fn delete_request(route: &Route) -> apipb::DeletePathRequest {
    apipb::DeletePathRequest {
        table_type: apipb::TableType::Global as i32,
        vrf_id: String::new(),
        family: Some(family(route.prefix)),
        path: Some(path(route)),
        uuid: Vec::new(),
    }
}

/// A BGP session state in words, as `gobgp neighbor` prints them.
pub fn session_state_name(state: i32) -> &'static str {
    use apipb::peer_state::SessionState as S;
    match S::try_from(state) {
        Ok(S::Idle) => "idle",
        Ok(S::Connect) => "connect",
        Ok(S::Active) => "active",
        Ok(S::Opensent) => "opensent",
        Ok(S::Openconfirm) => "openconfirm",
        Ok(S::Established) => "established",
        Ok(S::Unknown) | Err(_) => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(prefix: &str, next_hop: &str) -> Route {
        Route {
            prefix: prefix.parse().unwrap(),
            next_hop: next_hop.parse().unwrap(),
            communities: vec![65000 << 16 | 100],
        }
    }

    #[test]
    fn ipv4_path_carries_prefix_origin_next_hop_and_communities() {
        let p = path(&route("10.71.9.1", "10.71.0.1"));
        let nlri = apipb::IpAddressPrefix::decode(&*p.nlri.as_ref().unwrap().value).unwrap();
        assert_eq!((nlri.prefix.as_str(), nlri.prefix_len), ("10.71.9.1", 32));
        let urls: Vec<&str> = p.pattrs.iter().map(|a| a.type_url.as_str()).collect();
        assert_eq!(
            urls,
            [
                "type.googleapis.com/apipb.OriginAttribute",
                "type.googleapis.com/apipb.NextHopAttribute",
                "type.googleapis.com/apipb.CommunitiesAttribute"
            ]
        );
        let nh = apipb::NextHopAttribute::decode(&*p.pattrs[1].value).unwrap();
        assert_eq!(nh.next_hop, "10.71.0.1");
        let c = apipb::CommunitiesAttribute::decode(&*p.pattrs[2].value).unwrap();
        assert_eq!(c.communities, [65000 << 16 | 100]);
        assert_eq!(p.family.unwrap().afi, apipb::family::Afi::Ip as i32);
    }

    #[test]
    fn ipv6_path_carries_its_next_hop_in_mp_reach() {
        let p = path(&route("2001:db8::100", "2001:db8::1"));
        let mp = apipb::MpReachNlriAttribute::decode(&*p.pattrs[1].value).unwrap();
        assert_eq!(mp.next_hops, ["2001:db8::1"]);
        let nlri = apipb::IpAddressPrefix::decode(&*mp.nlris[0].value).unwrap();
        assert_eq!(nlri.prefix_len, 128);
        assert_eq!(p.family.unwrap().afi, apipb::family::Afi::Ip6 as i32);
    }

    #[test]
    fn session_states_have_names() {
        assert_eq!(session_state_name(6), "established");
        assert_eq!(session_state_name(3), "active");
        assert_eq!(session_state_name(99), "unknown");
    }
}
