//! Health peers over `tcp://` with mutual TLS (docs/health.md, "Several
//! appliances"): in-process border-mgmt instances on 127.0.0.1 ephemeral
//! ports, each with `[mgmt.tls]` (its certificate is both its server and its
//! client identity) and its peers' fingerprints pinned. Observations flow and
//! a peer's checker counts toward the quorum; a peer whose client certificate
//! is not pinned is refused in the handshake, and a peer whose server
//! certificate comes from another CA is not believed; either is a silent
//! checker, for the border-mgmt that asks it, with a reason that says what
//! is wrong, and takes nothing down. Pinning gates who may ask: the side that
//! refuses a peer's calls still hears that peer when it asks it.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use common::backend::{eventually, Backend};
use common::ca::{client, mgmt_tls_section, Ca};
use common::{free_port, Running, TempDir};
use mgmt::pb;
use mgmt::tls::ClientTls;

/// One border-mgmt to start: listens on `port` with `<stem>.pem` as its
/// identity, trusts `client_ca`, pins `pins`, asks `peers` (ports on
/// 127.0.0.1).
struct Node<'a> {
    instance: &'a str,
    port: u16,
    stem: &'a str,
    client_ca: &'a Path,
    pins: Vec<&'a str>,
    peers: Vec<u16>,
}

fn config(n: &Node, quorum: u32, backends: &[&Backend], certs: &Path) -> String {
    let listen = format!("tcp://127.0.0.1:{}", n.port);
    let mut t = common::health_config_head(n.instance, &listen, quorum);
    for p in &n.peers {
        t.push_str(&format!(
            "[[mgmt.peer]]\naddress = \"tcp://127.0.0.1:{p}\"\n"
        ));
    }
    t.push_str(&mgmt_tls_section(certs, n.stem, n.client_ca, &n.pins));
    t.push_str(&common::web_vip_checked("", backends));
    t
}

async fn start(n: &Node<'_>, quorum: u32, backends: &[&Backend], certs: &Path) -> Running {
    let dir = TempDir::new(n.instance);
    let unused = dir.0.join("unused.sock");
    Running::start_with(dir, config(n, quorum, backends, certs), unused).await
}

fn at(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// GetStatus's only VIP, asked over TCP as the operator `ops`.
async fn status(port: u16, ops: &ClientTls) -> pb::VipStatus {
    let mut c = mgmt::client::connect_tls(at(port), ops).await.unwrap();
    c.get_status(pb::GetStatusRequest {})
        .await
        .unwrap()
        .into_inner()
        .vips
        .remove(0)
}

async fn health(port: u16, ops: &ClientTls) -> pb::GetHealthResponse {
    let mut c = mgmt::health::service::connect(&conf::Listen::Tcp(at(port)), Some(ops))
        .await
        .unwrap();
    c.get_health(pb::GetHealthRequest {})
        .await
        .unwrap()
        .into_inner()
}

/// The checker status of the peer at `port`, as `h` reports it.
fn peer(h: &pb::GetHealthResponse, port: u16) -> pb::CheckerStatus {
    let addr = format!("tcp://127.0.0.1:{port}");
    h.checkers
        .iter()
        .find(|c| c.address == addr)
        .unwrap_or_else(|| panic!("no checker at {addr}: {:?}", h.checkers))
        .clone()
}

fn backend_of<'a>(v: &'a pb::VipStatus, b: &Backend) -> &'a pb::BackendStatus {
    v.backends
        .iter()
        .find(|x| x.address == b.addr.to_string())
        .unwrap()
}

fn up(v: &pb::VipStatus, b: &Backend) -> bool {
    let s = backend_of(v, b);
    s.state == pb::BackendState::Up as i32 && s.ring_slots > 0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_peers_share_observations_over_mutual_tls_and_make_the_quorum() {
    let (a, b) = (Backend::start().await, Backend::start().await);
    let certs = TempDir::new("hpt-certs");
    let d = certs.0.as_path();
    let ca = Ca::new("border peers CA");
    ca.write(d, "ca");
    let fp0 = ca.issue(d, "lb0", &["127.0.0.1"]);
    let fp1 = ca.issue(d, "lb1", &["127.0.0.1"]);
    let fp_ops = ca.issue(d, "ops", &["ops"]);
    let ops = client(d, "ops");
    let (p0, p1) = (free_port(), free_port());
    let ca_pem = d.join("ca.pem");
    let n0 = Node {
        instance: "hpt-lb0",
        port: p0,
        stem: "lb0",
        client_ca: &ca_pem,
        pins: vec![&fp_ops, &fp1],
        peers: vec![p1],
    };
    let n1 = Node {
        instance: "hpt-lb1",
        port: p1,
        stem: "lb1",
        client_ca: &ca_pem,
        pins: vec![&fp_ops, &fp0],
        peers: vec![p0],
    };
    let mut r0 = start(&n0, 2, &[&a, &b], d).await;
    let mut r1 = start(&n1, 2, &[&a, &b], d).await;
    let within = Duration::from_secs(15);

    // Each hears the other over TCP + mutual TLS: two fresh checkers.
    for (port, other, other_id) in [(p0, p1, "hpt-lb1"), (p1, p0, "hpt-lb0")] {
        let h = eventually("the peer fresh", within, async || {
            let h = health(port, &ops).await;
            (h.checkers.len() == 2 && h.checkers.iter().all(|c| c.fresh && c.error.is_empty()))
                .then_some(h)
        })
        .await;
        let c = peer(&h, other);
        assert!(c.id.ends_with(&format!("/{other_id}")), "{c:?}");
        assert_eq!(h.quorum, 2);
    }

    // A fails for both: quorum 2 is only reachable with the peer's vote,
    // so the verdict on either side is the two checkers' together.
    a.set(503);
    for port in [p0, p1] {
        let v = eventually("a down by quorum", within, async || {
            let v = status(port, &ops).await;
            (backend_of(&v, &a).state == pb::BackendState::Down as i32).then_some(v)
        })
        .await;
        let reason = &backend_of(&v, &a).reason;
        assert!(
            reason.starts_with("down: 2 of 2 checkers see it fail (quorum 2): ")
                && reason.contains("/hpt-lb0: HTTP 503")
                && reason.contains("/hpt-lb1: HTTP 503"),
            "{reason}"
        );
        assert_eq!(backend_of(&v, &a).ring_slots, 0);
        assert!(up(&v, &b), "{v:?}");
        let h = health(port, &ops).await;
        let bh = h.vips[0]
            .backends
            .iter()
            .find(|x| x.address == a.addr.to_string())
            .unwrap();
        assert_eq!(bh.checkers.len(), 2, "{:?}", bh.checkers);
    }
    a.set(200);
    for port in [p0, p1] {
        eventually("a up again", within, async || {
            up(&status(port, &ops).await, &a).then_some(())
        })
        .await;
    }
    r0.stop().await;
    r1.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unpinned_and_foreign_ca_peers_are_refused_with_a_reason_and_take_nothing_down() {
    let (a, b) = (Backend::start().await, Backend::start().await);
    let certs = TempDir::new("hpt-bad-certs");
    let d = certs.0.as_path();
    let ca = Ca::new("border peers CA");
    ca.write(d, "ca");
    let other = Ca::new("someone else's CA");
    other.write(d, "other-ca");
    let fp_x = ca.issue(d, "x", &["127.0.0.1"]);
    // Y: signed by the right CA, but X does not pin it.
    let fp_y = ca.issue(d, "y", &["127.0.0.1"]);
    // Z: its server certificate comes from another CA (it pins X, so X's
    // client certificate would be accepted: only the server side is wrong).
    let _fp_z = other.issue(d, "z", &["127.0.0.1"]);
    let fp_ops = ca.issue(d, "ops", &["ops"]);
    let ops = client(d, "ops");
    let mut ops_z = client(d, "ops");
    ops_z.server_ca = d.join("other-ca.pem");
    let (px, py, pz) = (free_port(), free_port(), free_port());
    let ca_pem = d.join("ca.pem");
    let x = Node {
        instance: "hpt-x",
        port: px,
        stem: "x",
        client_ca: &ca_pem,
        pins: vec![&fp_ops],
        peers: vec![py, pz],
    };
    let y = Node {
        instance: "hpt-y",
        port: py,
        stem: "y",
        client_ca: &ca_pem,
        pins: vec![&fp_ops, &fp_x],
        peers: vec![px],
    };
    let z = Node {
        instance: "hpt-z",
        port: pz,
        stem: "z",
        client_ca: &ca_pem,
        pins: vec![&fp_ops, &fp_x],
        peers: vec![],
    };
    let mut rx = start(&x, 2, &[&a, &b], d).await;
    let mut ry = start(&y, 2, &[&a, &b], d).await;
    let mut rz = start(&z, 1, &[&a, &b], d).await;
    let within = Duration::from_secs(15);

    let all_up = async |port: u16, ops: &ClientTls| {
        let v = status(port, ops).await;
        assert!(up(&v, &a) && up(&v, &b), "nothing goes down: {v:?}");
    };

    // Y asks X and is refused in the handshake (Y's certificate is not
    // pinned at X): X is a silent checker for Y, and Y's reason says which
    // certificate to pin where.
    let refused = |e: &str| {
        e.contains(&format!(
            "tcp://127.0.0.1:{px} refused this border-mgmt's client certificate"
        ))
    };
    eventually("y's reason about x", within, async || {
        refused(&peer(&health(py, &ops).await, px).error).then_some(())
    })
    .await;
    // X asks Z and does not believe its server certificate.
    let foreign = |e: &str| {
        e.starts_with(&format!(
            "the server certificate of tcp://127.0.0.1:{pz} is not signed by this border-mgmt's [mgmt.tls].client_ca ({})",
            ca_pem.display()
        )) && e.contains("invalid peer certificate: UnknownIssuer")
    };
    eventually("x's reason about z", within, async || {
        foreign(&peer(&health(px, &ops).await, pz).error).then_some(())
    })
    .await;
    // X started before Y: it hears Y from its next round on.
    eventually("x hears y", within, async || {
        peer(&health(px, &ops).await, py).fresh.then_some(())
    })
    .await;
    // Over several rounds of asking (one a second) the reasons stay exactly
    // that (a refusal is not reported as a bare "connection closed" one
    // time and an alert the next), the refused peers stay silent, and
    // nothing goes down anywhere.
    let t0 = std::time::Instant::now();
    while t0.elapsed() < Duration::from_millis(3500) {
        let hy = health(py, &ops).await;
        let x_for_y = peer(&hy, px);
        assert!(refused(&x_for_y.error), "{x_for_y:?}");
        assert!(
            x_for_y.error.contains(&fp_y)
                && x_for_y.error.contains("client_fingerprints")
                && x_for_y.error.contains("AccessDenied"),
            "{x_for_y:?}"
        );
        assert!(!x_for_y.fresh && x_for_y.id.is_empty(), "{x_for_y:?}");
        let hx = health(px, &ops).await;
        let z_for_x = peer(&hx, pz);
        assert!(foreign(&z_for_x.error), "{z_for_x:?}");
        assert!(!z_for_x.fresh && z_for_x.id.is_empty(), "{z_for_x:?}");
        // Pinning decides who may ask X, not whom X believes: X's own calls
        // to Y are accepted by Y (X is pinned there) and Y's server
        // certificate chains to X's client_ca, so Y is a fresh checker for X.
        let y_for_x = peer(&hx, py);
        assert!(
            y_for_x.fresh && y_for_x.error.is_empty() && y_for_x.id.ends_with("/hpt-y"),
            "{y_for_x:?}"
        );
        for port in [px, py] {
            all_up(port, &ops).await;
        }
        all_up(pz, &ops_z).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A fails everywhere. Y hears only itself: one down vote is fewer than
    // its quorum 2, so the silent X keeps A up at Y rather than Y deciding
    // alone. X counts its own vote and Y's: down by quorum.
    a.set(503);
    let v = eventually("a down at x", within, async || {
        let v = status(px, &ops).await;
        (backend_of(&v, &a).state == pb::BackendState::Down as i32).then_some(v)
    })
    .await;
    let reason = &backend_of(&v, &a).reason;
    assert!(
        reason.contains("checkers see it fail (quorum 2)")
            && reason.contains("/hpt-x: HTTP 503")
            && reason.contains("/hpt-y: HTTP 503"),
        "{reason}"
    );
    let v = eventually("y sees a fail, alone", within, async || {
        let v = status(py, &ops).await;
        backend_of(&v, &a)
            .reason
            .contains("fewer than quorum 2")
            .then_some(v)
    })
    .await;
    let s = backend_of(&v, &a);
    assert!(up(&v, &a), "{s:?}");
    assert!(s.reason.contains("/hpt-y: HTTP 503"), "{s:?}");
    assert!(!s.reason.contains("/hpt-x"), "{s:?}");

    rx.stop().await;
    ry.stop().await;
    rz.stop().await;
}
