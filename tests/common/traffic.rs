//! Real traffic through the appliance: TCP and UDP backends in a
//! namespace, clients that name the backend they reached, and streams
//! whose every echoed byte is checked.

use std::time::{Duration, Instant};

use super::netns::{in_netns, wait_until};

/// Server threads in a namespace, one per named address, each polling its
/// stop flag; stopped and joined on drop.
struct NsServers {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl NsServers {
    /// Runs `serve(name, addr, stop, ready)` in namespace `ns` for each of
    /// `addrs`, waiting up to 10 s for each to send `ready` (or panicking
    /// with `what`).
    fn start<F>(ns: &str, addrs: &[(&str, std::net::SocketAddr)], what: &str, serve: F) -> NsServers
    where
        F: Fn(
                String,
                std::net::SocketAddr,
                &std::sync::atomic::AtomicBool,
                std::sync::mpsc::Sender<()>,
            ) + Clone
            + Send
            + 'static,
    {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut threads = Vec::new();
        for (name, addr) in addrs {
            let (name, addr, stop) = (name.to_string(), *addr, stop.clone());
            let (ready_tx, ready_rx) = std::sync::mpsc::channel();
            let serve = serve.clone();
            threads.push(in_netns(ns, move || serve(name, addr, &stop, ready_tx)));
            ready_rx.recv_timeout(Duration::from_secs(10)).expect(what);
        }
        NsServers { stop, threads }
    }
}

impl Drop for NsServers {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// TCP servers in a namespace: each answers a connection with its name, the
/// peer address it sees and a newline, then echoes every byte back until the
/// client closes.
pub struct TcpBackends(NsServers);

impl TcpBackends {
    pub fn start(ns: &str, addrs: &[(&str, std::net::SocketAddr)]) -> TcpBackends {
        use std::sync::atomic::Ordering;
        TcpBackends(NsServers::start(
            ns,
            addrs,
            "backend listening",
            |name, addr, stop, ready| {
                let l = std::net::TcpListener::bind(addr)
                    .unwrap_or_else(|e| panic!("bind {addr}: {e}"));
                l.set_nonblocking(true).unwrap();
                ready.send(()).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    match l.accept() {
                        Ok((mut s, peer)) => {
                            let name = name.clone();
                            std::thread::spawn(move || {
                                use std::io::{Read, Write};
                                s.set_nonblocking(false).unwrap();
                                let _ = s.write_all(format!("{name} {}\n", peer.ip()).as_bytes());
                                let mut buf = [0u8; 65536];
                                loop {
                                    match s.read(&mut buf) {
                                        Ok(0) | Err(_) => break,
                                        Ok(n) => {
                                            if s.write_all(&buf[..n]).is_err() {
                                                break;
                                            }
                                        }
                                    }
                                }
                            });
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(2)),
                    }
                }
            },
        ))
    }
}

/// UDP servers in a namespace: each answers a datagram with `name:` + payload.
pub struct UdpBackends(NsServers);

impl UdpBackends {
    pub fn start(ns: &str, addrs: &[(&str, std::net::SocketAddr)]) -> UdpBackends {
        use std::sync::atomic::Ordering;
        UdpBackends(NsServers::start(
            ns,
            addrs,
            "backend bound",
            |name, addr, stop, ready| {
                let s =
                    std::net::UdpSocket::bind(addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
                s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
                ready.send(()).unwrap();
                let mut buf = [0u8; 2048];
                while !stop.load(Ordering::Relaxed) {
                    if let Ok((n, from)) = s.recv_from(&mut buf) {
                        let mut reply = format!("{name}:").into_bytes();
                        reply.extend_from_slice(&buf[..n]);
                        let _ = s.send_to(&reply, from);
                    }
                }
            },
        ))
    }
}

/// Opens `n` TCP connections to `vip` from namespace `ns` (each from a new
/// source port) and returns the name each was answered with.
pub fn tcp_names(ns: &str, vip: std::net::SocketAddr, n: usize) -> Vec<String> {
    in_netns(ns, move || {
        use std::io::{BufRead, BufReader};
        (0..n)
            .map(|i| {
                let s = connect_retry(vip, Duration::from_secs(10))
                    .unwrap_or_else(|e| panic!("connection {i} to {vip}: {e}"));
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let mut line = String::new();
                BufReader::new(s)
                    .read_line(&mut line)
                    .unwrap_or_else(|e| panic!("connection {i} to {vip}: read: {e}"));
                line.trim().to_string()
            })
            .collect()
    })
    .join()
    .unwrap()
}

/// connect() that retries refused/unreachable attempts until `within` passes
/// (the first SYN may be dropped while the appliance resolves a next hop).
pub fn connect_retry(
    addr: std::net::SocketAddr,
    within: Duration,
) -> std::io::Result<std::net::TcpStream> {
    let start = Instant::now();
    loop {
        match std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
            Ok(s) => return Ok(s),
            Err(e) if start.elapsed() > within => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Counts how often each name occurs.
pub fn tally(names: &[String]) -> std::collections::BTreeMap<String, usize> {
    let mut m = std::collections::BTreeMap::new();
    for n in names {
        *m.entry(n.clone()).or_insert(0) += 1;
    }
    m
}

/// Deterministic bytes of stream `id` at `offset`.
pub fn pattern(id: u64, offset: u64, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        let x =
            (offset + i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ id.wrapping_mul(0xC2B2_AE3D);
        *b = (x >> 29) as u8;
    }
}

/// Reads the greeting line of a [`TcpBackends`] server byte by byte (so no
/// echoed byte is consumed with it): "name peer-ip".
pub fn read_greeting(s: &mut std::net::TcpStream) -> std::io::Result<String> {
    use std::io::Read;
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    loop {
        s.read_exact(&mut b)?;
        if b[0] == b'\n' {
            return Ok(String::from_utf8_lossy(&line).into_owned());
        }
        line.push(b[0]);
        if line.len() > 200 {
            return Err(std::io::Error::other("greeting too long"));
        }
    }
}

/// Sends `len` pattern bytes of stream `id` from `offset` in `chunk`-sized
/// pieces and checks that exactly they come back.
pub fn echo_exact(
    s: &mut std::net::TcpStream,
    id: u64,
    offset: u64,
    len: usize,
    chunk: usize,
) -> std::io::Result<()> {
    use std::io::{Read, Write};
    let mut sent = vec![0u8; chunk];
    let mut got = vec![0u8; chunk];
    let mut done = 0;
    while done < len {
        let n = chunk.min(len - done);
        pattern(id, offset + done as u64, &mut sent[..n]);
        s.write_all(&sent[..n])?;
        s.read_exact(&mut got[..n])?;
        if got[..n] != sent[..n] {
            let at = got[..n].iter().zip(&sent[..n]).position(|(a, b)| a != b);
            return Err(std::io::Error::other(format!(
                "echo differs at byte {}",
                offset + done as u64 + at.unwrap_or(0) as u64
            )));
        }
        done += n;
    }
    Ok(())
}

/// What one long-lived stream did.
#[derive(Debug, Clone)]
pub struct StreamReport {
    pub id: u64,
    /// The backend that greeted it.
    pub backend: String,
    /// Bytes sent and verified on the echo.
    pub bytes: u64,
    /// The first error, if any (the stream stops there).
    pub error: Option<String>,
    /// That error's kind (`ConnectionReset` for a RST) and when it came.
    pub error_kind: Option<std::io::ErrorKind>,
    pub failed_at: Option<Instant>,
}

/// Long-lived TCP connections from namespace `ns` to `vip`, each streaming
/// pattern bytes in `chunk`-sized round trips and checking every echoed
/// byte, until [`EchoStreams::finish`] closes them cleanly.
pub struct EchoStreams {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    verified: std::sync::Arc<Vec<std::sync::atomic::AtomicU64>>,
    failed: std::sync::Arc<Vec<std::sync::atomic::AtomicBool>>,
    threads: Vec<std::thread::JoinHandle<StreamReport>>,
}

impl EchoStreams {
    /// Opens `n` connections (ids `first_id..`) and returns once every one
    /// has its greeting. Each waits `pace` between round trips.
    pub fn start(
        ns: &str,
        vip: std::net::SocketAddr,
        n: usize,
        chunk: usize,
        pace: Duration,
        first_id: u64,
    ) -> EchoStreams {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        use std::sync::Arc;
        let stop = Arc::new(AtomicBool::new(false));
        let verified: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
        let failed: Arc<Vec<AtomicBool>> =
            Arc::new((0..n).map(|_| AtomicBool::new(false)).collect());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let threads = (0..n)
            .map(|i| {
                let (stop, verified, ready) = (stop.clone(), verified.clone(), ready_tx.clone());
                let failed = failed.clone();
                let id = first_id + i as u64;
                in_netns(ns, move || {
                    let mut r = StreamReport {
                        id,
                        backend: String::new(),
                        bytes: 0,
                        error: None,
                        error_kind: None,
                        failed_at: None,
                    };
                    let mut s = match connect_retry(vip, Duration::from_secs(10)) {
                        Ok(s) => s,
                        Err(e) => {
                            r.error = Some(format!("connect: {e}"));
                            let _ = ready.send(());
                            return r;
                        }
                    };
                    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                    s.set_nodelay(true).unwrap();
                    match read_greeting(&mut s) {
                        Ok(g) => r.backend = g.split_whitespace().next().unwrap_or("").to_string(),
                        Err(e) => r.error = Some(format!("greeting: {e}")),
                    }
                    let _ = ready.send(());
                    while r.error.is_none() && !stop.load(Ordering::Relaxed) {
                        match echo_exact(&mut s, id, r.bytes, chunk, chunk) {
                            Ok(()) => {
                                r.bytes += chunk as u64;
                                verified[i].store(r.bytes, Ordering::Relaxed);
                                if !pace.is_zero() {
                                    std::thread::sleep(pace);
                                }
                            }
                            Err(e) => {
                                r.error = Some(format!("after {} bytes: {e}", r.bytes));
                                r.error_kind = Some(e.kind());
                                r.failed_at = Some(Instant::now());
                                failed[i].store(true, Ordering::Relaxed);
                            }
                        }
                    }
                    if r.error.is_none() {
                        // A clean close: FIN, the echo server closes too.
                        use std::io::Read;
                        let _ = s.shutdown(std::net::Shutdown::Write);
                        let mut rest = Vec::new();
                        match s.read_to_end(&mut rest) {
                            Ok(0) => {}
                            Ok(n) => r.error = Some(format!("{n} unexpected bytes at close")),
                            Err(e) => r.error = Some(format!("close: {e}")),
                        }
                    }
                    r
                })
            })
            .collect();
        for _ in 0..n {
            ready_rx
                .recv_timeout(Duration::from_secs(30))
                .expect("stream connected");
        }
        EchoStreams {
            stop,
            verified,
            failed,
            threads,
        }
    }

    /// Per stream: whether it has stopped on an error.
    pub fn failed(&self) -> Vec<bool> {
        self.failed
            .iter()
            .map(|f| f.load(std::sync::atomic::Ordering::Relaxed))
            .collect()
    }

    /// Bytes verified so far, per stream.
    pub fn progress(&self) -> Vec<u64> {
        self.verified
            .iter()
            .map(|v| v.load(std::sync::atomic::Ordering::Relaxed))
            .collect()
    }

    /// Waits (10 s at most) until every stream has verified more bytes than
    /// in `since`: all of them are moving.
    pub fn wait_all_moving(&self, since: &[u64]) {
        wait_until("every stream moving", Duration::from_secs(10), || {
            self.progress()
                .iter()
                .zip(since)
                .all(|(now, then)| now > then)
        });
    }

    /// Stops, closes every connection cleanly and reports.
    pub fn finish(mut self) -> Vec<StreamReport> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.threads
            .drain(..)
            .map(|t| t.join().expect("stream thread"))
            .collect()
    }
}

impl Drop for EchoStreams {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// What a [`NewConnections`] loop did.
#[derive(Debug, Clone, Default)]
pub struct NewConnReport {
    /// Connections that greeted, echoed `bytes` exactly and closed cleanly.
    pub ok: u64,
    /// Backend name -> connections.
    pub backends: std::collections::BTreeMap<String, u64>,
    /// Every failure, in words.
    pub errors: Vec<String>,
    /// Microseconds each successful connection took to connect.
    pub connect_us: Vec<u64>,
}

/// A loop in namespace `ns` opening new connections to `vip` one after the
/// other: greeting, `bytes` echoed and checked, clean close.
pub struct NewConnections {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<NewConnReport>>,
}

impl NewConnections {
    pub fn start(ns: &str, vip: std::net::SocketAddr, bytes: usize, id: u64) -> NewConnections {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = in_netns(ns, move || {
            let mut r = NewConnReport::default();
            let mut k = 0u64;
            while !flag.load(Ordering::Relaxed) {
                k += 1;
                let mut one = || -> std::io::Result<String> {
                    use std::io::Read;
                    let t0 = std::time::Instant::now();
                    let mut s = std::net::TcpStream::connect_timeout(&vip, Duration::from_secs(5))?;
                    r.connect_us.push(t0.elapsed().as_micros() as u64);
                    s.set_read_timeout(Some(Duration::from_secs(10)))?;
                    s.set_nodelay(true)?;
                    let g = read_greeting(&mut s)?;
                    echo_exact(&mut s, id << 32 | k, 0, bytes, bytes.min(16 << 10))?;
                    s.shutdown(std::net::Shutdown::Write)?;
                    let mut rest = Vec::new();
                    if s.read_to_end(&mut rest)? != 0 {
                        return Err(std::io::Error::other("unexpected bytes at close"));
                    }
                    Ok(g.split_whitespace().next().unwrap_or("").to_string())
                };
                match one() {
                    Ok(name) => {
                        r.ok += 1;
                        *r.backends.entry(name).or_insert(0) += 1;
                    }
                    Err(e) => r.errors.push(format!("connection {k}: {e}")),
                }
            }
            r
        });
        NewConnections {
            stop,
            thread: Some(thread),
        }
    }

    pub fn finish(mut self) -> NewConnReport {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread
            .take()
            .unwrap()
            .join()
            .expect("new-connection thread")
    }
}

impl Drop for NewConnections {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A TCP connection from `src` (any port) to `to`.
pub fn connect_from(
    src: std::net::Ipv4Addr,
    to: std::net::SocketAddr,
) -> std::io::Result<std::net::TcpStream> {
    let std::net::SocketAddr::V4(to) = to else {
        panic!("IPv4 only")
    };
    let sockaddr = |ip: std::net::Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(ip.octets()),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: plain socket calls on a descriptor this function owns; the
    // addresses live on the stack for the duration of each call.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let stream = <std::net::TcpStream as std::os::fd::FromRawFd>::from_raw_fd(fd);
        let local = sockaddr(src, 0);
        if libc::bind(fd, (&local as *const libc::sockaddr_in).cast(), len) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let remote = sockaddr(*to.ip(), to.port());
        if libc::connect(fd, (&remote as *const libc::sockaddr_in).cast(), len) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(stream)
    }
}
