//! Where the registry's Redis is and how to reach it (docs/fleet.md):
//! `redis://` or `rediss://` (TLS, the server verified against
//! `redis_ca`, the gateway's own certificate presented for Redis's
//! `tls-auth-clients`), an ACL user and password from the URL's userinfo.
//! The password is a secret: [`RedisUrl`]'s `Display` and `Debug` print
//! `***` in its place, and nothing here puts the URL as written into an
//! error.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use rustls::pki_types::ServerName;

/// The default Redis port.
const DEFAULT_PORT: u16 = 6379;

/// A parsed `redis://` / `rediss://` URL.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisUrl {
    /// `rediss://`: TLS.
    pub tls: bool,
    /// Host name or IP address (IPv6 without brackets).
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Database number.
    pub db: i64,
    /// ACL user (`AUTH user password`), if any.
    pub username: Option<String>,
    /// Password (secret), if any.
    password: Option<String>,
}

impl RedisUrl {
    /// Parses `s`. The error is one line that never contains the password.
    pub fn parse(s: &str) -> Result<RedisUrl, String> {
        let expected =
            "expected \"redis://[user:password@]host[:port][/db]\" or \"rediss://...\" for TLS";
        let (tls, rest) = if let Some(r) = s.strip_prefix("rediss://") {
            (true, r)
        } else if let Some(r) = s.strip_prefix("redis://") {
            (false, r)
        } else {
            return Err(format!(
                "{:?} is not a Redis URL ({expected})",
                scheme_of(s)
            ));
        };
        // The userinfo ends at the last '@' (a password may contain '@'
        // only percent-encoded, but be lenient about where it ends).
        let (userinfo, hostpart) = match rest.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, rest),
        };
        let shown = |what: &str| {
            let mut u = RedisUrl {
                tls,
                host: String::new(),
                port: 0,
                db: 0,
                username: None,
                password: userinfo.map(|_| String::new()),
            };
            u.host = what.to_string();
            u
        };
        if hostpart.contains(['?', '#']) {
            return Err(format!(
                "{}: query strings and fragments are not supported ({expected})",
                shown(hostpart.split(['?', '#']).next().unwrap_or(""))
            ));
        }
        let (authority, db) = match hostpart.split_once('/') {
            Some((a, "")) => (a, 0),
            Some((a, d)) => match d.parse::<i64>() {
                Ok(n) if (0..=1_000_000).contains(&n) => (a, n),
                _ => {
                    return Err(format!(
                        "{}: `/{d}` is not a database number ({expected})",
                        shown(a)
                    ))
                }
            },
            None => (hostpart, 0),
        };
        let (host, port) =
            split_host_port(authority).map_err(|why| format!("{why} ({expected})"))?;
        let (username, password) = match userinfo {
            None => (None, None),
            Some(u) => {
                let (user, pass) = match u.split_once(':') {
                    Some((user, pass)) => (user, Some(pass)),
                    None => (u, None),
                };
                let user = percent_decode(user)
                    .ok_or("the user name in the Redis URL is not valid percent-encoded UTF-8")?;
                let pass = match pass {
                    Some(p) => Some(percent_decode(p).ok_or(
                        "the password in the Redis URL is not valid percent-encoded UTF-8 (not shown)",
                    )?),
                    None => None,
                };
                ((!user.is_empty()).then_some(user), pass)
            }
        };
        Ok(RedisUrl {
            tls,
            host,
            port,
            db,
            username,
            password,
        })
    }

    /// The connection settings the redis crate needs (the secret inside).
    fn connection_info(&self) -> redis::RedisConnectionInfo {
        let mut info = redis::RedisConnectionInfo::default().set_db(self.db);
        if let Some(u) = &self.username {
            info = info.set_username(u);
        }
        if let Some(p) = &self.password {
            info = info.set_password(p);
        }
        info
    }

    /// Connects (TCP, then TLS with `tls`, then AUTH and SELECT), bounded
    /// by `timeout`. Errors name the redacted URL.
    pub async fn connect(
        &self,
        tls: Option<&tokio_rustls::TlsConnector>,
        timeout: Duration,
    ) -> Result<MultiplexedConnection, String> {
        tokio::time::timeout(timeout, self.connect_inner(tls))
            .await
            .map_err(|_| format!("{self}: no connection within {timeout:?}"))?
            .map_err(|e| format!("{self}: {}", self.redact(&e)))
    }

    async fn connect_inner(
        &self,
        tls: Option<&tokio_rustls::TlsConnector>,
    ) -> Result<MultiplexedConnection, String> {
        let tcp = tokio::net::TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let _ = tcp.set_nodelay(true);
        let info = self.connection_info();
        match (self.tls, tls) {
            (false, _) => start(&info, tcp).await,
            (true, None) => Err("rediss:// needs redis_ca".into()),
            (true, Some(connector)) => {
                let name = ServerName::try_from(self.host.clone())
                    .map_err(|_| format!("`{}` is not a valid TLS server name", self.host))?;
                let stream = connector
                    .connect(name, tcp)
                    .await
                    .map_err(|e| format!("TLS: {e}"))?;
                start(&info, stream).await
            }
        }
    }

    /// `text` with the password, if it appears, replaced by `***`.
    pub fn redact(&self, text: &str) -> String {
        match &self.password {
            Some(p) if !p.is_empty() => text.replace(p.as_str(), "***"),
            _ => text.to_string(),
        }
    }
}

/// AUTH, SELECT and the connection's driver task over `stream`.
async fn start<S>(
    info: &redis::RedisConnectionInfo,
    stream: S,
) -> Result<MultiplexedConnection, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let config = redis::AsyncConnectionConfig::new();
    let (conn, driver) = MultiplexedConnection::new_with_config(info, stream, config)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(driver);
    Ok(conn)
}

/// The TLS client towards a `rediss://` Redis: its certificate verified
/// against `ca`, this gateway's `cert`/`key` presented (Redis's
/// `tls-auth-clients yes`, its default with TLS, asks for one); no ALPN.
pub fn tls_connector(
    ca: &std::path::Path,
    cert: &std::path::Path,
    key: &std::path::Path,
) -> Result<tokio_rustls::TlsConnector, String> {
    let cfg = mgmt::tls::client_config(&mgmt::tls::ClientTls {
        server_ca: ca.to_path_buf(),
        cert: cert.to_path_buf(),
        key: key.to_path_buf(),
        server_name: None,
    })
    .map_err(|e| format!("redis_ca: {e}"))?;
    let mut cfg = Arc::unwrap_or_clone(cfg);
    cfg.alpn_protocols.clear();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(cfg)))
}

/// The scheme part of a string that is not a Redis URL, without anything
/// after `://` (which could hold a secret).
fn scheme_of(s: &str) -> String {
    match s.split_once("://") {
        Some((scheme, _)) => format!("{scheme}://..."),
        None => "(no scheme)".to_string(),
    }
}

/// `host[:port]`, IPv6 in brackets.
fn split_host_port(s: &str) -> Result<(String, u16), String> {
    let (host, port) = if let Some(v6) = s.strip_prefix('[') {
        let (h, after) = v6
            .split_once(']')
            .ok_or_else(|| format!("`{s}` has an unclosed `[`"))?;
        if h.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!("`{h}` is not an IPv6 address"));
        }
        match after.strip_prefix(':') {
            Some(p) => (h, Some(p)),
            None if after.is_empty() => (h, None),
            None => return Err(format!("`{s}` is not host:port")),
        }
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    let host_ok = !host.is_empty()
        && host.len() <= 253
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-:".contains(c));
    if !host_ok {
        return Err(format!("`{host}` is not a host name or IP address"));
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("`{p}` is not a port 1..=65535"))?,
    };
    Ok((host.to_string(), port))
}

/// `%XX` decoding into UTF-8; `None` for a bad escape or bytes.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

impl std::fmt::Display for RedisUrl {
    /// The URL with the password as `***`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.tls { "rediss://" } else { "redis://" })?;
        match (&self.username, &self.password) {
            (Some(u), Some(_)) => write!(f, "{u}:***@")?,
            (Some(u), None) => write!(f, "{u}@")?,
            (None, Some(_)) => f.write_str(":***@")?,
            (None, None) => {}
        }
        if self.host.contains(':') {
            write!(f, "[{}]", self.host)?;
        } else {
            f.write_str(&self.host)?;
        }
        if self.port != 0 {
            write!(f, ":{}", self.port)?;
            write!(f, "/{}", self.db)?;
        }
        Ok(())
    }
}

impl std::fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RedisUrl({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_with_tls_users_and_defaults() {
        let u = RedisUrl::parse("rediss://border-gw:s3cr%40t@redis.example.net:6380/2").unwrap();
        assert!(u.tls);
        assert_eq!(
            (u.host.as_str(), u.port, u.db),
            ("redis.example.net", 6380, 2)
        );
        assert_eq!(u.username.as_deref(), Some("border-gw"));
        assert_eq!(u.password.as_deref(), Some("s3cr@t"));
        assert_eq!(
            u.to_string(),
            "rediss://border-gw:***@redis.example.net:6380/2"
        );
        assert!(!format!("{u:?}").contains("s3cr"));
        let u = RedisUrl::parse("redis://127.0.0.1").unwrap();
        assert_eq!(
            (u.tls, u.port, u.db, u.username, u.password),
            (false, 6379, 0, None, None)
        );
        let u = RedisUrl::parse("redis://:pw@[::1]:7000/0").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("::1", 7000));
        assert_eq!(u.to_string(), "redis://:***@[::1]:7000/0");
        assert_eq!(u.redact("WRONGPASS pw"), "WRONGPASS ***");
    }

    #[test]
    fn bad_urls_are_refused_without_the_password() {
        for bad in [
            "http://u:hunter2@h:1/0",
            "redis://u:hunter2@h:0/0",
            "redis://u:hunter2@h:1/x",
            "redis://u:hunter2@h:1/0?db=1",
            "redis://u:hunter2@/0",
            "hunter2",
            "redis://u:hunter2%zz@h:1/0",
        ] {
            let e = RedisUrl::parse(bad).unwrap_err();
            assert!(!e.contains("hunter2"), "{bad}: {e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }
}
