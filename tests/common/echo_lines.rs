//! Long-lived echo streams through a VIP, a line every [`CADENCE`], each
//! read back whole and compared: what the restart tests watch across a
//! border-dp restart.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::in_netns;

/// Bytes of one line.
pub const LINE: usize = 48;
/// How often a stream sends a line.
pub const CADENCE: Duration = Duration::from_millis(20);

/// What one flow saw: the times of its echoes, and its error if it ended.
#[derive(Default)]
pub struct Seen {
    pub echoes: Vec<Instant>,
    pub error: Option<String>,
}

pub type Shared = Arc<Mutex<Seen>>;

/// Line `seq` of flow `flow`: its name, number and bytes that change with both.
pub fn line(flow: u8, seq: u64) -> [u8; LINE] {
    let mut b = [0u8; LINE];
    let text = format!("flow {flow} line {seq:>12} ");
    b[..text.len()].copy_from_slice(text.as_bytes());
    for (i, x) in b.iter_mut().enumerate().skip(text.len()) {
        *x = (seq as u8).wrapping_mul(31).wrapping_add(i as u8) | 0x40;
    }
    b[LINE - 1] = b'\n';
    b
}

/// A TCP stream from namespace `ns` to `vip:port` until `stop`.
pub fn tcp_stream(ns: &str, vip: &str, flow: u8, port: u16, stop: Arc<AtomicBool>) -> Shared {
    let seen: Shared = Arc::default();
    let out = seen.clone();
    let addr: SocketAddr = format!("{vip}:{port}").parse().unwrap();
    in_netns(ns, move || {
        let fail = |e: String| out.lock().unwrap().error = Some(e);
        let mut s = match TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
            Ok(s) => s,
            Err(e) => return fail(format!("connect: {e}")),
        };
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.set_nodelay(true).unwrap();
        let mut seq = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let l = line(flow, seq);
            if let Err(e) = s.write_all(&l) {
                return fail(format!("write line {seq}: {e}"));
            }
            let mut back = [0u8; LINE];
            if let Err(e) = s.read_exact(&mut back) {
                return fail(format!("read line {seq}: {e}"));
            }
            if back != l {
                return fail(format!(
                    "line {seq} came back as {:?}",
                    String::from_utf8_lossy(&back)
                ));
            }
            out.lock().unwrap().echoes.push(Instant::now());
            seq += 1;
            std::thread::sleep(CADENCE);
        }
    });
    seen
}
