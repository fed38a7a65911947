//! Probes: one attempt against one backend, bounded by the probe's timeout
//! in time and by [`MAX_HEADER_BYTES`] in memory, whatever the backend does
//! (accepts and never answers, answers garbage, sends an endless header,
//! resets mid-handshake). Each attempt ends in a [`ProbeOutcome`] with a
//! reason in words.
//!
//! - `tcp`: connect (then close).
//! - `tls`: connect and a full TLS handshake (TLS 1.2 or 1.3), SNI from
//!   `sni`. The certificate chain is NOT verified (probes check that a
//!   backend terminates TLS, not who it is), but the handshake signature
//!   is: the backend must hold the key of the certificate it shows.
//! - `http` / `https`: `GET path HTTP/1.1` (`Connection: close`), the status
//!   must be in `expect_status`; the response header is read up to its end
//!   (at most [`MAX_HEADER_BYTES`]), the body is never read.
//! - `send_proxy_v2`: a PROXY protocol v2 LOCAL header goes first, right
//!   after the connect (before TLS).
//! - `agent`: the backend's agent answers on `agent_port` (HAProxy's
//!   agent-check protocol, [`super::agent`]); with another kind and
//!   `agent_port`, [`check`] asks the agent after the active probe, with a
//!   deadline of its own.
//! - `dns` / `udp`: one datagram each way ([`super::probe_dns`],
//!   [`super::probe_udp`]).
//! - `port`: every kind but agent probes that port of the backend's
//!   address instead of the backend's own port.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use conf::{DnsProbe, Health, HealthKind, UdpProbe};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{timeout_at, Instant};

use super::agent::{self, AgentResult};
use super::engine::{ProbeOutcome, WeightObs};

/// The largest HTTP response header a probe reads.
pub const MAX_HEADER_BYTES: usize = 8192;

/// The weight header (GCP's name).
pub const WEIGHT_HEADER: &str = "X-Load-Balancing-Endpoint-Weight";

/// A PROXY protocol v2 header with command LOCAL, family UNSPEC, no
/// addresses: "this connection is the proxy's own" (a health check).
pub const PPV2_LOCAL: [u8; 16] = [
    0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a, 0x20, 0x00, 0x00, 0x00,
];

/// What to probe and how: probes with equal specs are made once, however
/// many VIPs list the backend.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProbeSpec {
    /// Where the probe goes: the backend's address, and the probe's `port`
    /// or the backend's.
    pub addr: SocketAddr,
    /// Kind, as configured.
    pub kind: KindKey,
    /// Request path (http/https).
    pub path: String,
    /// Accepted statuses (http/https).
    pub expect_status: Vec<u16>,
    /// Interval.
    pub interval_ms: u32,
    /// Timeout of the whole attempt.
    pub timeout_ms: u32,
    /// PPv2 LOCAL header first.
    pub send_proxy_v2: bool,
    /// TLS server name (and HTTP Host).
    pub sni: Option<String>,
    /// The agent's port (`kind = "agent"`: the backend's port unless set).
    pub agent_port: Option<u16>,
    /// The query (dns).
    pub dns: Option<DnsProbe>,
    /// The datagram and the pattern (udp).
    pub udp: Option<UdpProbe>,
}

/// [`HealthKind`] with an order (for map keys).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KindKey {
    /// TCP connect.
    Tcp,
    /// TLS handshake.
    Tls,
    /// HTTP GET.
    Http,
    /// HTTPS GET.
    Https,
    /// The backend's agent (HAProxy agent-check).
    Agent,
    /// A DNS query over UDP.
    Dns,
    /// A datagram and its reply.
    Udp,
}

impl From<HealthKind> for KindKey {
    fn from(k: HealthKind) -> KindKey {
        match k {
            HealthKind::Tcp => KindKey::Tcp,
            HealthKind::Tls => KindKey::Tls,
            HealthKind::Http => KindKey::Http,
            HealthKind::Https => KindKey::Https,
            HealthKind::Agent => KindKey::Agent,
            HealthKind::Dns => KindKey::Dns,
            HealthKind::Udp => KindKey::Udp,
        }
    }
}

impl ProbeSpec {
    /// The probe of backend `addr` under `h`.
    pub fn new(addr: SocketAddr, h: &Health) -> ProbeSpec {
        ProbeSpec {
            addr: SocketAddr::new(addr.ip(), h.port.unwrap_or(addr.port())),
            kind: h.kind.into(),
            path: h.path.clone().unwrap_or_default(),
            expect_status: h.expect_status.clone(),
            interval_ms: h.interval_ms,
            timeout_ms: h.timeout_ms,
            send_proxy_v2: h.send_proxy_v2,
            sni: h.sni.clone(),
            agent_port: match h.kind {
                HealthKind::Agent => Some(h.agent_port.unwrap_or(addr.port())),
                _ => h.agent_port,
            },
            dns: h.dns.clone(),
            udp: h.udp.clone(),
        }
    }
}

fn fail(reason: impl Into<String>) -> ProbeOutcome {
    ProbeOutcome {
        ok: false,
        reason: reason.into(),
        weight: None,
    }
}

fn pass(reason: impl Into<String>) -> ProbeOutcome {
    ProbeOutcome {
        ok: true,
        reason: reason.into(),
        weight: None,
    }
}

/// An OS error in words, without "(os error N)".
fn io_words(e: &std::io::Error) -> String {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::ConnectionRefused => "refused".into(),
        K::ConnectionReset => "connection reset".into(),
        K::ConnectionAborted => "connection aborted".into(),
        K::UnexpectedEof => "connection closed by the backend".into(),
        K::BrokenPipe => "connection closed by the backend (broken pipe)".into(),
        _ => {
            let s = e.to_string();
            match s.find(" (os error") {
                Some(i) => s[..i].to_string(),
                None => s,
            }
        }
    }
}

/// The rustls client configs of probes: certificate chains are not
/// verified; handshake signatures are.
#[derive(Clone, Debug)]
pub struct ProbeTls {
    /// For `tls` (no ALPN).
    pub plain: Arc<rustls::ClientConfig>,
    /// For `https` (ALPN http/1.1).
    pub http: Arc<rustls::ClientConfig>,
}

impl ProbeTls {
    /// Builds both configs (ring provider, TLS 1.2 and 1.3).
    pub fn new() -> ProbeTls {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let make = |alpn: &[&[u8]]| {
            let mut c = rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .expect("ring supports the default protocol versions")
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCert(provider.clone())))
                .with_no_client_auth();
            c.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
            c.resumption = rustls::client::Resumption::disabled();
            Arc::new(c)
        };
        ProbeTls {
            plain: make(&[]),
            http: make(&[b"http/1.1"]),
        }
    }
}

impl Default for ProbeTls {
    fn default() -> Self {
        ProbeTls::new()
    }
}

/// Accepts any certificate chain; checks the handshake signatures.
#[derive(Debug)]
struct AnyCert(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Runs one check: the probe, and the agent's answer when the spec has an
/// agent. Never takes (much) longer than `spec.timeout_ms`, twice that with
/// an agent beside an active probe.
pub async fn check(spec: &ProbeSpec, tls: &ProbeTls) -> (ProbeOutcome, Option<AgentResult>) {
    let Some(port) = spec.agent_port else {
        return (probe(spec, tls).await, None);
    };
    let out = if spec.kind == KindKey::Agent {
        None
    } else {
        Some(probe(spec, tls).await)
    };
    let deadline = Instant::now() + Duration::from_millis(u64::from(spec.timeout_ms));
    let answer = agent::ask(
        SocketAddr::new(spec.addr.ip(), port),
        deadline,
        spec.timeout_ms,
    )
    .await;
    let out = out.unwrap_or_else(|| agent_outcome(&answer));
    (out, Some(answer))
}

/// The probe result of an agent that is the check: it passes when the
/// agent answers (what it says is applied by the engine).
fn agent_outcome(answer: &AgentResult) -> ProbeOutcome {
    match answer {
        Ok(a) => pass(format!("agent says {:?}", a.text)),
        Err(e) => fail(e.clone()),
    }
}

/// Runs one probe. Never takes (much) longer than `spec.timeout_ms`.
pub async fn probe(spec: &ProbeSpec, tls: &ProbeTls) -> ProbeOutcome {
    let t = spec.timeout_ms;
    let deadline = Instant::now() + Duration::from_millis(u64::from(t));
    if spec.kind == KindKey::Agent {
        let port = spec.agent_port.unwrap_or(spec.addr.port());
        let answer = agent::ask(SocketAddr::new(spec.addr.ip(), port), deadline, t).await;
        return agent_outcome(&answer);
    }
    match (spec.kind, &spec.dns, &spec.udp) {
        (KindKey::Dns, Some(d), _) => {
            return super::probe_dns::probe(spec.addr, d, deadline, t).await
        }
        (KindKey::Udp, _, Some(u)) => {
            return super::probe_udp::probe(spec.addr, u, deadline, t).await
        }
        (KindKey::Dns | KindKey::Udp, _, _) => {
            return fail(format!("no {:?} probe settings", spec.kind))
        }
        _ => {}
    }
    let mut tcp = match timeout_at(deadline, TcpStream::connect(spec.addr)).await {
        Err(_) => return fail(format!("connect timeout after {t} ms")),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            return fail("connect refused")
        }
        Ok(Err(e)) => return fail(format!("connect failed: {}", io_words(&e))),
        Ok(Ok(s)) => s,
    };
    let _ = tcp.set_nodelay(true);
    if spec.send_proxy_v2 {
        match timeout_at(deadline, tcp.write_all(&PPV2_LOCAL)).await {
            Err(_) => return fail(format!("PROXY header write timeout after {t} ms")),
            Ok(Err(e)) => return fail(format!("PROXY header write failed: {}", io_words(&e))),
            Ok(Ok(())) => {}
        }
    }
    match spec.kind {
        // Agent, dns and udp probes returned above.
        KindKey::Tcp | KindKey::Agent | KindKey::Dns | KindKey::Udp => pass("TCP connect ok"),
        KindKey::Http => http_get(tcp, spec, deadline).await,
        KindKey::Tls | KindKey::Https => {
            let cfg = if spec.kind == KindKey::Https {
                tls.http.clone()
            } else {
                tls.plain.clone()
            };
            let name = match spec
                .sni
                .as_deref()
                .map(|s| ServerName::try_from(s.to_string()))
            {
                Some(Ok(n)) => n,
                Some(Err(_)) => return fail("invalid TLS server name"),
                None => ServerName::IpAddress(spec.addr.ip().into()),
            };
            let connector = tokio_rustls::TlsConnector::from(cfg);
            let s = match timeout_at(deadline, connector.connect(name, tcp)).await {
                Err(_) => return fail(format!("TLS handshake timeout after {t} ms")),
                Ok(Err(e)) => return fail(format!("TLS handshake failed: {}", tls_words(&e))),
                Ok(Ok(s)) => s,
            };
            if spec.kind == KindKey::Tls {
                let v = s
                    .get_ref()
                    .1
                    .protocol_version()
                    .map_or("TLS".to_string(), |v| {
                        format!("{v:?}").replace("TLSv1_", "TLS 1.")
                    });
                pass(format!("TLS handshake ok ({v})"))
            } else {
                http_get(s, spec, deadline).await
            }
        }
    }
}

fn tls_words(e: &std::io::Error) -> String {
    // rustls reports its own errors as InvalidData with the rustls::Error inside.
    if let Some(inner) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        return inner.to_string();
    }
    io_words(e)
}

async fn http_get<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    spec: &ProbeSpec,
    deadline: Instant,
) -> ProbeOutcome {
    let t = spec.timeout_ms;
    let host = spec.sni.clone().unwrap_or_else(|| spec.addr.to_string());
    let req = format!(
        "GET {} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: border-health\r\nAccept: */*\r\nConnection: close\r\n\r\n",
        spec.path
    );
    match timeout_at(deadline, s.write_all(req.as_bytes())).await {
        Err(_) => return fail(format!("HTTP request write timeout after {t} ms")),
        Ok(Err(e)) => return fail(format!("HTTP request write failed: {}", io_words(&e))),
        Ok(Ok(())) => {}
    }
    let _ = timeout_at(deadline, s.flush()).await;
    let head = match timeout_at(deadline, read_head(&mut s)).await {
        Err(_) => return fail(format!("HTTP response timeout after {t} ms")),
        Ok(Err(why)) => return fail(why),
        Ok(Ok(h)) => h,
    };
    let resp = match parse_head(&head) {
        Ok(r) => r,
        Err(why) => return fail(why),
    };
    if !spec.expect_status.contains(&resp.status) {
        return fail(format!("HTTP {}", resp.status));
    }
    ProbeOutcome {
        ok: true,
        reason: format!("HTTP {}", resp.status),
        weight: Some(resp.weight),
    }
}

/// Reads up to the end of the response header (`\r\n\r\n`), at most
/// [`MAX_HEADER_BYTES`].
async fn read_head<S: AsyncRead + Unpin>(s: &mut S) -> Result<Vec<u8>, String> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = s
            .read(&mut chunk)
            .await
            .map_err(|e| format!("HTTP response read failed: {}", tls_words(&e)))?;
        if n == 0 {
            return Err(if buf.is_empty() {
                "connection closed without an HTTP response".to_string()
            } else {
                format!(
                    "connection closed after {} bytes, before the end of the HTTP response header",
                    buf.len()
                )
            });
        }
        let from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = find(&buf[from..], b"\r\n\r\n") {
            buf.truncate(from + i + 4);
            return Ok(buf);
        }
        if buf.len() > MAX_HEADER_BYTES {
            return Err(format!(
                "HTTP response header exceeds {MAX_HEADER_BYTES} bytes"
            ));
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A parsed response header.
#[derive(Debug, PartialEq, Eq)]
pub struct Head {
    /// Status code.
    pub status: u16,
    /// What the weight header said.
    pub weight: WeightObs,
}

/// Shows at most 40 characters of untrusted bytes.
fn shown(b: &[u8]) -> String {
    let s: String = String::from_utf8_lossy(b).chars().take(40).collect();
    format!("{s:?}")
}

/// Parses a response header (status line and fields, up to and including
/// the blank line).
pub fn parse_head(head: &[u8]) -> Result<Head, String> {
    let mut lines = head
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let status_line = lines.next().unwrap_or_default();
    let bad = || format!("not an HTTP response: status line {}", shown(status_line));
    let rest = status_line
        .strip_prefix(b"HTTP/1.1 ")
        .or_else(|| status_line.strip_prefix(b"HTTP/1.0 "))
        .ok_or_else(bad)?;
    let code = rest.get(..3).ok_or_else(bad)?;
    if !code.iter().all(u8::is_ascii_digit) || rest.get(3).is_some_and(|&b| b != b' ') {
        return Err(bad());
    }
    let status = std::str::from_utf8(code)
        .ok()
        .and_then(|c| c.parse::<u16>().ok())
        .filter(|c| (100..=599).contains(c))
        .ok_or_else(bad)?;
    let mut values: Vec<&[u8]> = Vec::new();
    for l in lines {
        if l.is_empty() {
            break;
        }
        let Some(colon) = l.iter().position(|&b| b == b':') else {
            return Err(format!("malformed HTTP header line {}", shown(l)));
        };
        if l[..colon].eq_ignore_ascii_case(WEIGHT_HEADER.as_bytes()) {
            values.push(l[colon + 1..].trim_ascii());
        }
    }
    Ok(Head {
        status,
        weight: weight_of(&values),
    })
}

/// The weight from the values of every weight header field.
pub fn weight_of(values: &[&[u8]]) -> WeightObs {
    let Some(first) = values.first() else {
        return WeightObs::Invalid(format!("no {WEIGHT_HEADER} header"));
    };
    if values.iter().any(|v| v != first) {
        return WeightObs::Invalid(format!(
            "{WEIGHT_HEADER} given {} times with different values",
            values.len()
        ));
    }
    if first.is_empty() || first.len() > 10 || !first.iter().all(u8::is_ascii_digit) {
        return WeightObs::Invalid(format!(
            "{WEIGHT_HEADER} {} is not a weight (expected an integer 0..={})",
            shown(first),
            conf::config::MAX_WEIGHT
        ));
    }
    match std::str::from_utf8(first)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    {
        Some(w) if w <= u64::from(conf::config::MAX_WEIGHT) => WeightObs::Value(w as u32),
        _ => WeightObs::Invalid(format!(
            "{WEIGHT_HEADER} {} is out of range (expected 0..={})",
            shown(first),
            conf::config::MAX_WEIGHT
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_status_and_weight() {
        let h =
            parse_head(b"HTTP/1.1 200 OK\r\nx-load-balancing-endpoint-weight: 7\r\n\r\n").unwrap();
        assert_eq!(
            h,
            Head {
                status: 200,
                weight: WeightObs::Value(7)
            }
        );
        let h = parse_head(b"HTTP/1.0 503 Busy\r\nServer: x\r\n\r\n").unwrap();
        assert_eq!(h.status, 503);
        assert!(matches!(h.weight, WeightObs::Invalid(ref w) if w.starts_with("no ")));
        assert!(parse_head(b"SSH-2.0-OpenSSH\r\n\r\n")
            .unwrap_err()
            .starts_with("not an HTTP response"));
        assert!(parse_head(b"HTTP/1.1 20x OK\r\n\r\n").is_err());
        assert!(parse_head(b"HTTP/1.1 2000 OK\r\n\r\n").is_err());
        assert!(parse_head(b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n").is_err());
        assert_eq!(parse_head(b"HTTP/1.1 204\r\n\r\n").unwrap().status, 204);
    }

    #[test]
    fn weight_values() {
        assert_eq!(weight_of(&[b"0"]), WeightObs::Value(0));
        assert_eq!(weight_of(&[b"65535"]), WeightObs::Value(65535));
        assert_eq!(weight_of(&[b"3", b"3"]), WeightObs::Value(3));
        for bad in [&b"65536"[..], b"-1", b"1.5", b"", b"abc", b"99999999999999"] {
            assert!(
                matches!(weight_of(&[bad]), WeightObs::Invalid(_)),
                "{bad:?}"
            );
        }
        assert!(
            matches!(weight_of(&[b"1", b"2"]), WeightObs::Invalid(ref w) if w.contains("different"))
        );
    }

    #[test]
    fn ppv2_local_header_is_valid() {
        assert_eq!(&PPV2_LOCAL[..12], b"\r\n\r\n\0\r\nQUIT\n");
        assert_eq!(PPV2_LOCAL[12], 0x20, "version 2, command LOCAL");
    }
}
