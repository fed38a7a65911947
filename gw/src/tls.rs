//! border-gw's TLS: both listeners require a client certificate that chains
//! to `tls.client_ca`; which fingerprints may do what is checked right after
//! the handshake (per appliance id for tunnels, `api_fingerprints` for
//! calls), so the refusal is logged with the id and the fingerprint.

use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;

use crate::config::GwConfig;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn roots(cfg: &GwConfig) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for c in mgmt::tls::load_certs(&cfg.client_ca).map_err(|e| e.to_string())? {
        roots.add(c).map_err(|e| {
            format!(
                "{}: not a usable CA certificate: {e}",
                cfg.client_ca.display()
            )
        })?;
    }
    Ok(roots)
}

/// A listener's server config: client certificates required and chained to
/// `client_ca`; ALPN `alpn`.
pub fn server_config(cfg: &GwConfig, alpn: &[u8]) -> Result<Arc<rustls::ServerConfig>, String> {
    let certs = mgmt::tls::load_certs(&cfg.cert).map_err(|e| e.to_string())?;
    let key = mgmt::tls::load_key(&cfg.key).map_err(|e| e.to_string())?;
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots(cfg)?), provider())
        .build()
        .map_err(|e| format!("TLS setup: {e}"))?;
    let mut sc = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(|e| format!("{}: server certificate/key: {e}", cfg.cert.display()))?;
    sc.alpn_protocols = vec![alpn.to_vec()];
    Ok(Arc::new(sc))
}

/// The client side towards other gateways' api listeners: this gateway's
/// certificate, their certificates verified against `client_ca`; ALPN h2.
pub fn peer_client_config(cfg: &GwConfig) -> Result<Arc<rustls::ClientConfig>, String> {
    mgmt::tls::client_config(&mgmt::tls::ClientTls {
        server_ca: cfg.client_ca.clone(),
        cert: cfg.cert.clone(),
        key: cfg.key.clone(),
        server_name: None,
    })
    .map_err(|e| e.to_string())
}

/// The fingerprint of the end-entity certificate a TLS peer presented.
pub fn peer_fingerprint(certs: Option<&[CertificateDer<'_>]>) -> Option<String> {
    certs
        .and_then(|c| c.first())
        .map(|c| mgmt::tls::fingerprint(c))
}
