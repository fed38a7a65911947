//! Mutual TLS for a TCP listen (DESIGN §6): rustls (ring), TLS 1.2/1.3, the
//! client must present a certificate that chains to `client_ca` AND whose
//! SHA-256 fingerprint is pinned in `client_fingerprints`. An unpinned client
//! is refused during the handshake, before any request is read.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use conf::MgmtTls;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use sha2::{Digest, Sha256};

/// Why TLS could not be set up. One line each.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or holds nothing usable.
    #[error("{}: {what}", path.display())]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// rustls refused the material.
    #[error("TLS setup: {0}")]
    Rustls(String),
}

/// `sha256:<64 lowercase hex>` of a DER certificate: what
/// `client_fingerprints` pins (`openssl x509 -in c.pem -outform DER | sha256sum`).
pub fn fingerprint(der: &[u8]) -> String {
    let d = Sha256::digest(der);
    let mut s = String::with_capacity(7 + 64);
    s.push_str("sha256:");
    for b in d {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Every certificate in a PEM file (at least one).
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = |what: String| TlsError::Pem {
        path: path.to_owned(),
        what,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| pem(format!("cannot read certificates: {e}")))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem(format!("bad PEM: {e}")))?;
    if certs.is_empty() {
        return Err(pem("no CERTIFICATE in the file".into()));
    }
    Ok(certs)
}

/// The private key in a PEM file.
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::Pem {
        path: path.to_owned(),
        what: format!("cannot read a private key: {e}"),
    })
}

fn roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for c in load_certs(path)? {
        roots.add(c).map_err(|e| TlsError::Pem {
            path: path.to_owned(),
            what: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(roots)
}

/// A client verifier that requires a CA-valid certificate whose fingerprint
/// is pinned.
#[derive(Debug)]
pub struct PinnedClientVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    pins: HashSet<String>,
}

impl PinnedClientVerifier {
    /// Chains to `roots`, and the end entity's fingerprint is one of `pins`
    /// (`sha256:<hex>`, compared case-insensitively).
    pub fn new(roots: RootCertStore, pins: &[String]) -> Result<PinnedClientVerifier, TlsError> {
        let inner = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .map_err(|e| TlsError::Rustls(e.to_string()))?;
        Ok(PinnedClientVerifier {
            inner,
            pins: pins.iter().map(|p| p.to_ascii_lowercase()).collect(),
        })
    }
}

impl ClientCertVerifier for PinnedClientVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let fp = fingerprint(end_entity);
        if self.pins.contains(&fp) {
            Ok(ClientCertVerified::assertion())
        } else {
            tracing::warn!(fingerprint = %fp, "client certificate is CA-valid but not pinned in [mgmt.tls].client_fingerprints: refused");
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The server side of `[mgmt.tls]`: its certificate and key, clients
/// verified against `client_ca` and pinned by fingerprint; ALPN h2.
pub fn server_config(tls: &MgmtTls) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let certs = load_certs(&tls.cert)?;
    let key = load_key(&tls.key)?;
    let verifier = PinnedClientVerifier::new(roots(&tls.client_ca)?, &tls.client_fingerprints)?;
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Rustls(e.to_string()))?
        .with_client_cert_verifier(Arc::new(verifier))
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::Rustls(format!("server certificate/key: {e}")))?;
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(cfg))
}

/// What a client needs for a TCP (mutual TLS) connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientTls {
    /// CA that signed the server's certificate (PEM).
    pub server_ca: PathBuf,
    /// The client's certificate chain (PEM); its fingerprint must be pinned
    /// on the server.
    pub cert: PathBuf,
    /// The client's private key (PEM).
    pub key: PathBuf,
    /// Name to verify the server certificate against; default: the IP
    /// address connected to.
    pub server_name: Option<String>,
}

/// The client side: trusts `server_ca`, presents `cert`/`key`; ALPN h2.
pub fn client_config(tls: &ClientTls) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let certs = load_certs(&tls.cert)?;
    let key = load_key(&tls.key)?;
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Rustls(e.to_string()))?
        .with_root_certificates(roots(&tls.server_ca)?)
        .with_client_auth_cert(certs, key)
        .map_err(|e| TlsError::Rustls(format!("client certificate/key: {e}")))?;
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(cfg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_format() {
        let f = fingerprint(b"abc");
        assert_eq!(
            f,
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
