//! Telemetry commands answer on DPDK's socket when EAL runs with the flags
//! border uses (`--no-huge --no-shconf --file-prefix=...`): a client that
//! speaks the socket's protocol (SOCK_SEQPACKET, a JSON hello, then one
//! JSON reply per command) sees the handler's dictionary, its parameters,
//! `null` for a failed or dropped handler, and DPDK's own port commands.
//! One test: EAL starts once per process.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

use dpdk_ffi::{telemetry_socket_path, Eal, Mempool, Port, TelemetryCommand, DEFAULT_DATA_ROOM};

/// A SOCK_SEQPACKET connection: std has no type for it, so the socket is
/// made by libc and driven through UnixStream's read/write (one message per
/// call on a seqpacket socket).
fn connect(path: &std::path::Path) -> UnixStream {
    use std::os::fd::FromRawFd;
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: plain socket(2); the fd is owned by the UnixStream below.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0) };
    assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
    // SAFETY: zeroed sockaddr_un is valid; the path fits (checked below).
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = c_path.as_bytes_with_nul();
    assert!(bytes.len() <= addr.sun_path.len());
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: addr is a valid sockaddr_un of the given size; fd is ours.
    let rc = unsafe {
        libc::connect(
            fd,
            (&addr as *const libc::sockaddr_un).cast(),
            std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
        )
    };
    assert_eq!(
        rc,
        0,
        "connect {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    // SAFETY: fd is an open socket nobody else owns.
    unsafe { UnixStream::from_raw_fd(fd) }
}

fn read_json(s: &mut UnixStream) -> serde_json::Value {
    let mut buf = vec![0u8; 65536];
    let n = s.read(&mut buf).expect("telemetry reply");
    serde_json::from_slice(&buf[..n]).unwrap_or_else(|e| {
        panic!(
            "reply is not JSON ({e}): {}",
            String::from_utf8_lossy(&buf[..n])
        )
    })
}

fn ask(s: &mut UnixStream, cmd: &str) -> serde_json::Value {
    s.write_all(cmd.as_bytes()).unwrap();
    read_json(s)
}

#[test]
fn commands_answer_on_the_telemetry_socket() {
    let prefix = format!("border-ffi-tel-{}", std::process::id());
    let args: Vec<String> = [
        "-l",
        "0",
        "--no-huge",
        "-m",
        "128",
        "--no-pci",
        "--no-shconf",
        "--log-level=lib.eal:warning",
        "--vdev=net_null0",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!("--file-prefix={prefix}")])
    .collect();
    let eal = Eal::init(&args).expect("EAL init");

    let hits = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let seen = hits.clone();
    let echo = TelemetryCommand::register("/test/echo", "echoes its parameters", move |p, d| {
        let n = seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        d.u64("calls", n);
        d.string("params", p);
        d.string("too_long", &"x".repeat(200));
        // DPDK takes names of A-Za-z0-9_/ only.
        d.u64("not-valid", 1);
        d.u64("is/valid_1", 1);
        assert_eq!(d.refused(), 2);
        true
    })
    .expect("register");
    let _fail = TelemetryCommand::register("/test/fail", "always fails", |_, _| false).unwrap();
    let _panics =
        TelemetryCommand::register("/test/panics", "panics", |_, _| panic!("handler bug")).unwrap();

    let path = telemetry_socket_path().expect("telemetry socket exists with --no-shconf");
    assert!(
        path.ends_with(format!("dpdk/{prefix}/dpdk_telemetry.v2")),
        "{}",
        path.display()
    );
    let mut s = connect(&path);
    let hello = read_json(&mut s);
    assert_eq!(hello["pid"], std::process::id());

    let list = ask(&mut s, "/");
    let cmds: Vec<&str> = list["/"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert!(cmds.contains(&"/test/echo"), "{cmds:?}");
    assert!(cmds.contains(&"/ethdev/stats"), "{cmds:?}");

    let r = ask(&mut s, "/test/echo,web,0");
    assert_eq!(r["/test/echo"]["calls"], 1, "{r}");
    assert_eq!(r["/test/echo"]["params"], "web,0", "{r}");
    assert!(r["/test/echo"].get("too_long").is_none(), "{r}");
    assert!(r["/test/echo"].get("not-valid").is_none(), "{r}");
    assert_eq!(r["/test/echo"]["is/valid_1"], 1, "{r}");
    let r = ask(&mut s, "/test/echo");
    assert_eq!(r["/test/echo"]["calls"], 2, "{r}");
    assert_eq!(r["/test/echo"]["params"], "", "{r}");
    let r = ask(&mut s, "/help,/test/echo");
    assert_eq!(r["/help"]["/test/echo"], "echoes its parameters", "{r}");
    assert!(ask(&mut s, "/test/fail")["/test/fail"].is_null());
    assert!(ask(&mut s, "/test/panics")["/test/panics"].is_null());

    // DPDK's own port commands sit beside ours.
    let pool = Mempool::pktmbuf("tel", 1023, 32, DEFAULT_DATA_ROOM, -1).unwrap();
    let mut port = Port::by_name("net_null0").unwrap();
    port.configure(1, 1, 64, 64, &pool).unwrap();
    port.start().unwrap();
    let r = ask(&mut s, &format!("/ethdev/stats,{}", port.port_id()));
    assert!(r["/ethdev/stats"]["ipackets"].is_u64(), "{r}");
    assert_eq!(
        dpdk_ffi::port_stats(port.port_id()).unwrap(),
        port.stats().unwrap()
    );

    // A dropped command answers null; registering it again revives it.
    drop(echo);
    assert!(ask(&mut s, "/test/echo")["/test/echo"].is_null());
    let _again = TelemetryCommand::register("/test/echo", "again", |_, d| {
        d.u64("again", 1);
        true
    })
    .unwrap();
    assert_eq!(ask(&mut s, "/test/echo")["/test/echo"]["again"], 1);
    assert_eq!(hits.load(std::sync::atomic::Ordering::Relaxed), 2);

    drop(s);
    drop(port);
    drop(pool);
    drop(eal);
}
