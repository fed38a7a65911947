//! Mutual TLS for a TCP listen (docs/design.md §6): rustls (ring), TLS 1.2/1.3, the
//! client must present a certificate that chains to `client_ca` AND whose
//! SHA-256 fingerprint is pinned in `client_fingerprints`,
//! `reader_fingerprints` or `peer_fingerprints`. An unpinned client is
//! refused during the handshake, before any request is read; what a pinned
//! one may call is its role's (`crate::authz`).

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
            tracing::warn!(fingerprint = %fp, "client certificate is CA-valid but not pinned in [mgmt.tls] (client_fingerprints, reader_fingerprints or peer_fingerprints): refused");
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
/// verified against `client_ca` and pinned by fingerprint (any role);
/// ALPN h2.
pub fn server_config(tls: &MgmtTls) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let certs = load_certs(&tls.cert)?;
    let key = load_key(&tls.key)?;
    let pins: Vec<String> = tls.pins().map(|(f, _)| f.to_owned()).collect();
    let verifier = PinnedClientVerifier::new(roots(&tls.client_ca)?, &pins)?;
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

/// The server closed a mutual-TLS connection right after the handshake,
/// before sending anything: what a TLS 1.3 server does (sometimes without
/// an alert reaching the client) when it refuses the client's certificate.
#[derive(Debug, thiserror::Error)]
#[error("the server closed the connection right after the TLS handshake, before any data")]
pub struct ClosedAfterHandshake;

/// A TLS client stream whose first bytes from the server were read ahead
/// by [`connect_primed`]; they are read again first.
#[derive(Debug)]
pub struct Primed<S> {
    head: Vec<u8>,
    pos: usize,
    inner: S,
}

impl<S> Primed<S> {
    /// The stream underneath.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Primed<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if self.pos < self.head.len() {
            let n = (self.head.len() - self.pos).min(buf.remaining());
            let at = self.pos;
            buf.put_slice(&self.head[at..at + n]);
            self.pos += n;
            if self.pos == self.head.len() {
                self.head = Vec::new();
                self.pos = 0;
            }
            return std::task::Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Primed<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// A mutual-TLS client connection over `tcp` that is known to be accepted.
///
/// With TLS 1.3 the client's handshake is over before the server has
/// looked at the client certificate: a refused certificate only shows up
/// later, as an alert or a bare close racing the first request ("connection
/// closed", "broken pipe"). border-mgmt's server speaks first (HTTP/2
/// SETTINGS), so this waits up to `wait` for its first data: a refusal
/// becomes an error here, naming the alert (`received fatal alert:
/// AccessDenied`) or [`ClosedAfterHandshake`]. If nothing arrives within
/// `wait` the connection is returned as it is.
pub async fn connect_primed(
    connector: &tokio_rustls::TlsConnector,
    name: rustls::pki_types::ServerName<'static>,
    tcp: tokio::net::TcpStream,
    wait: std::time::Duration,
) -> std::io::Result<Primed<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>> {
    use tokio::io::AsyncReadExt;
    let mut s = connector.connect(name, tcp).await?;
    let mut head = vec![0u8; 4096];
    let n = match tokio::time::timeout(wait, s.read(&mut head)).await {
        Err(_) => 0,
        Ok(Ok(0)) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                ClosedAfterHandshake,
            ))
        }
        Ok(Ok(n)) => n,
        Ok(Err(e)) => return Err(e),
    };
    head.truncate(n);
    Ok(Primed {
        head,
        pos: 0,
        inner: s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn primed_stream_reads_the_head_first_then_the_rest() {
        use tokio::io::AsyncReadExt;
        let mut p = Primed {
            head: b"SETTINGS".to_vec(),
            pos: 0,
            inner: &b" and the rest"[..],
        };
        let mut small = [0u8; 3];
        p.read_exact(&mut small).await.unwrap();
        assert_eq!(&small, b"SET");
        let mut all = Vec::new();
        p.read_to_end(&mut all).await.unwrap();
        assert_eq!(all, b"TINGS and the rest");
    }

    #[test]
    fn fingerprint_format() {
        let f = fingerprint(b"abc");
        assert_eq!(
            f,
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
