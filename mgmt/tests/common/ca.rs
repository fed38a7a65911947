//! A test CA (rcgen) issuing certificates for `[mgmt.tls]` and TLS clients.

use std::path::Path;

use mgmt::tls::{fingerprint, ClientTls};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

/// A self-signed CA.
pub struct Ca(CertifiedIssuer<'static, KeyPair>);

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, name);
        Ca(CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap())
    }

    /// Writes `<stem>.pem` and `<stem>.key` in `dir`: a certificate for
    /// `names` (IP addresses become IP SANs) signed by this CA, usable for
    /// server and client auth (no EKU). Returns its fingerprint.
    pub fn issue(&self, dir: &Path, stem: &str, names: &[&str]) -> String {
        let mut p = CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .unwrap();
        p.distinguished_name.push(DnType::CommonName, stem);
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.0).unwrap();
        std::fs::write(dir.join(format!("{stem}.pem")), cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{stem}.key")), key.serialize_pem()).unwrap();
        fingerprint(cert.der())
    }

    /// Writes the CA certificate to `<stem>.pem` in `dir`.
    pub fn write(&self, dir: &Path, stem: &str) {
        std::fs::write(dir.join(format!("{stem}.pem")), self.0.pem()).unwrap();
    }
}

/// A client identity `<stem>.pem`/`<stem>.key` in `dir` trusting `ca.pem` there.
pub fn client(dir: &Path, stem: &str) -> ClientTls {
    ClientTls {
        server_ca: dir.join("ca.pem"),
        cert: dir.join(format!("{stem}.pem")),
        key: dir.join(format!("{stem}.key")),
        server_name: None,
    }
}

/// A `[mgmt.tls]` section: this border-mgmt's certificate `<stem>.pem`,
/// clients (and peers' server certificates) verified against `client_ca`,
/// `pins` pinned.
pub fn mgmt_tls_section(dir: &Path, stem: &str, client_ca: &Path, pins: &[&str]) -> String {
    let pins: Vec<String> = pins.iter().map(|p| format!("\"{p}\"")).collect();
    format!(
        "[mgmt.tls]\ncert = \"{}\"\nkey = \"{}\"\nclient_ca = \"{}\"\nclient_fingerprints = [{}]\n",
        dir.join(format!("{stem}.pem")).display(),
        dir.join(format!("{stem}.key")).display(),
        client_ca.display(),
        pins.join(", ")
    )
}
