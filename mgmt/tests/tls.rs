//! A TCP listen with mutual TLS: a pinned client is served; a client whose
//! certificate is signed by the same CA but not pinned is refused, and so is
//! one signed by another CA.

mod common;

use common::ca::{client, mgmt_tls_section, Ca};
use common::{config_text, free_port, Running, TempDir};
use mgmt::pb;
use mgmt::tls::ClientTls;

async fn call(addr: std::net::SocketAddr, tls: &ClientTls) -> Result<u64, String> {
    let mut c = mgmt::client::connect_tls(addr, tls)
        .await
        .map_err(|e| e.to_string())?;
    c.get_config(pb::GetConfigRequest {})
        .await
        .map(|r| r.into_inner().generation)
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn pinned_client_is_served_unpinned_and_foreign_clients_are_refused() {
    let dir = TempDir::new("tls");
    let d = dir.0.clone();
    let ca = Ca::new("border test CA");
    ca.write(&d, "ca");
    ca.issue(&d, "server", &["127.0.0.1", "mgmt.test"]);
    let pinned = ca.issue(&d, "ops", &["ops"]);
    ca.issue(&d, "intruder", &["intruder"]);
    let other = Ca::new("someone else's CA");
    let foreign = other.issue(&d, "foreign", &["foreign"]);

    let port = free_port();
    let tls = mgmt_tls_section(&d, "server", &d.join("ca.pem"), &[&pinned, &foreign]);
    let text = config_text(&format!("tcp://127.0.0.1:{port}"), None, &tls);
    let mut r = Running::start_with(dir, text, d.join("unused.sock")).await;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));

    assert_eq!(call(addr, &client(&d, "ops")).await, Ok(1));
    // By name too.
    let mut named = client(&d, "ops");
    named.server_name = Some("mgmt.test".into());
    assert_eq!(call(addr, &named).await, Ok(1));

    // CA-valid but not pinned.
    let e = call(addr, &client(&d, "intruder")).await.unwrap_err();
    assert!(e.contains("AccessDenied"), "refused in the handshake: {e}");
    // Pinned fingerprint, but not signed by the client CA.
    let e = call(addr, &client(&d, "foreign")).await.unwrap_err();
    assert!(!e.is_empty());
    // No client certificate at all.
    let mut roots = rustls::RootCertStore::empty();
    for c in mgmt::tls::load_certs(&d.join("ca.pem")).unwrap() {
        roots.add(c).unwrap();
    }
    let mut anon = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    anon.alpn_protocols = vec![b"h2".to_vec()];
    let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
    let refused = match mgmt::client::connect_tls_with(addr, std::sync::Arc::new(anon), name).await
    {
        Err(_) => true,
        Ok(mut c) => c.get_config(pb::GetConfigRequest {}).await.is_err(),
    };
    assert!(refused, "a client without a certificate is refused");
    // The client helper insists on TLS material for tcp://.
    let e = mgmt::client::connect(&conf::Listen::Tcp(addr), None)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("needs mutual TLS"), "{e}");

    // The pinned client still works afterwards.
    assert_eq!(call(addr, &client(&d, "ops")).await, Ok(1));
    r.stop().await;
}
