//! Live connections for ListConnections (`borderctl conns`): one walk of
//! every worker's connection table through the connections region
//! (`conf::conns`), filtered here, on border-mgmt's side, so a worker
//! never does more than copy entries.
//!
//! One walk runs at a time (a second caller waits for the first). Each
//! record is one entry as its worker saw it at one instant; the listing
//! is not one instant of the whole table (docs/api.md, "Live connections").

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use conf::conns::{ConnsRegion, LiveConn};
use conf::os::files::Access;
use conf::IpNet;

/// How long a worker may leave a walk unanswered (not started, or no
/// record taken) before the listing fails: far longer than a worker's
/// longest sleep (10 ms) or a table adoption.
pub const WORKER_ANSWER: Duration = Duration::from_secs(5);

/// Records taken from one ring per round.
const TAKE_PER_ROUND: usize = 4096;

/// What a listing keeps: every given part must match.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// The VIP's address, and its port if given.
    pub vip: Option<(IpAddr, Option<u16>)>,
    pub backend: Option<(IpAddr, Option<u16>)>,
    /// The client's address is in this prefix.
    pub client: Option<IpNet>,
}

/// `addr`, `addr:port` or `[addr6]:port`.
fn endpoint(what: &str, s: &str) -> Result<(IpAddr, Option<u16>), String> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok((ip, None));
    }
    s.parse::<SocketAddr>()
        .map(|sa| (sa.ip(), Some(sa.port())))
        .map_err(|_| {
            format!("{what} {s:?} is not an address or address:port (e.g. 192.0.2.10, 192.0.2.10:443, [2001:db8::10]:443)")
        })
}

impl Filter {
    /// The filter of a request's strings; an empty string is no filter.
    pub fn parse(vip: &str, backend: &str, client: &str) -> Result<Filter, String> {
        let opt = |s: &str| (!s.is_empty()).then_some(s.to_owned());
        Ok(Filter {
            vip: opt(vip).map(|s| endpoint("vip", &s)).transpose()?,
            backend: opt(backend).map(|s| endpoint("backend", &s)).transpose()?,
            client: match opt(client) {
                None => None,
                Some(s) if s.contains('/') => Some(
                    s.parse::<IpNet>()
                        .map_err(|e| format!("client prefix: {e}"))?,
                ),
                Some(s) => {
                    let ip: IpAddr = s.parse().map_err(|_| {
                        format!("client {s:?} is not an address or prefix (e.g. 198.51.100.0/24)")
                    })?;
                    let len = if ip.is_ipv4() { 32 } else { 128 };
                    IpNet::new(ip, len)
                }
            },
        })
    }

    pub fn matches(&self, c: &LiveConn) -> bool {
        let at = |want: &Option<(IpAddr, Option<u16>)>, ip: IpAddr, port: u16| match want {
            None => true,
            Some((a, p)) => *a == ip && p.is_none_or(|p| p == port),
        };
        at(&self.vip, c.vip_ip(), c.vip_port)
            && at(&self.backend, c.backend_ip(), c.backend_port)
            && self.client.is_none_or(|n| n.contains(c.client_ip()))
    }
}

/// Why a listing failed.
#[derive(Debug, thiserror::Error)]
pub enum WalkError {
    #[error("border-dp is not running (no connections region at {0}): start it, then list again")]
    NoRegion(PathBuf),
    #[error("{0}")]
    Region(#[from] conf::conns::ConnsError),
    #[error("border-dp (pid {0}) that made the connections region is not running")]
    DpGone(u32),
    #[error("worker {worker} did not answer the listing for {secs} s (stalled or stopped? see `borderctl status`)")]
    Unanswered { worker: usize, secs: u64 },
}

/// What a finished listing counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WalkTotals {
    /// Records the workers sent.
    pub seen: u64,
    /// Records the filter kept and `each` took.
    pub listed: u64,
    /// Slots skipped as torn (never seen with a correct border-dp) and
    /// records that failed their checks.
    pub torn: u64,
    pub malformed: u64,
}

/// The walks of one instance's connections region, one at a time.
#[derive(Debug)]
pub struct Walker {
    path: PathBuf,
    one_at_a_time: Mutex<u64>,
}

impl Walker {
    pub fn new(path: PathBuf) -> Walker {
        Walker {
            path,
            one_at_a_time: Mutex::new(0),
        }
    }

    /// Walks every worker's table, passing each record `filter` keeps to
    /// `each` until it returns false (the caller went away, or has enough).
    /// Blocks: run it off the async threads.
    pub fn walk(
        &self,
        access: Access,
        filter: &Filter,
        mut each: impl FnMut(LiveConn) -> bool,
    ) -> Result<WalkTotals, WalkError> {
        let mut last = self.one_at_a_time.lock().unwrap_or_else(|p| p.into_inner());
        if !self.path.exists() {
            return Err(WalkError::NoRegion(self.path.clone()));
        }
        let region = ConnsRegion::open(&self.path, access)?;
        if !conf::os::process_alive(region.pid()) {
            return Err(WalkError::DpGone(region.pid()));
        }
        // A walk id this region has not served: the stamps of a previous
        // walk's slots never match it.
        let id = next_walk_id(*last);
        *last = id;
        let n = region.n_workers();
        for w in 0..n {
            region.request(w, id);
        }
        let result = drain_walk(&region, id, filter, WORKER_ANSWER, &mut each);
        for w in 0..n {
            region.cancel(w);
        }
        result
    }
}

/// A non-zero walk id after `last`, whose low 32 bits (what a slot's stamp
/// keeps) differ from `last`'s and from a restarted border-mgmt's.
fn next_walk_id(last: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let id = u64::from(nanos | 1);
    if id == last {
        id.wrapping_add(2)
    } else {
        id
    }
}

fn drain_walk(
    region: &ConnsRegion,
    id: u64,
    filter: &Filter,
    answer: Duration,
    each: &mut impl FnMut(LiveConn) -> bool,
) -> Result<WalkTotals, WalkError> {
    let n = region.n_workers();
    let mut totals = WalkTotals::default();
    let mut done = vec![false; n];
    let mut progress = vec![Instant::now(); n];
    let mut wanted = true;
    while wanted && done.iter().any(|d| !d) {
        let mut took = 0;
        for w in 0..n {
            if done[w] {
                continue;
            }
            let t = region.take(w, id, TAKE_PER_ROUND, |r| match r {
                Err(_) => totals.malformed += 1,
                Ok(c) => {
                    totals.seen += 1;
                    if wanted && filter.matches(&c) {
                        totals.listed += 1;
                        wanted = each(c);
                    }
                }
            });
            totals.torn += t.torn as u64;
            took += t.records + t.torn;
            if t.records + t.torn > 0 {
                progress[w] = Instant::now();
            }
            done[w] = t.done;
            if !t.done && progress[w].elapsed() >= answer {
                return Err(WalkError::Unanswered {
                    worker: w,
                    secs: answer.as_secs(),
                });
            }
        }
        if took == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    Ok(totals)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(client: &str, vip: &str, backend: &str) -> LiveConn {
        let sa = |s: &str| s.parse::<SocketAddr>().unwrap();
        let mapped = |a: SocketAddr| match a.ip() {
            IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
            IpAddr::V6(v6) => v6.octets(),
        };
        let (c, v, b) = (sa(client), sa(vip), sa(backend));
        LiveConn {
            client: mapped(c),
            client_port: c.port(),
            vip: mapped(v),
            vip_port: v.port(),
            backend: mapped(b),
            backend_port: b.port(),
            client_v6: c.is_ipv6(),
            backend_v6: b.is_ipv6(),
            ..LiveConn::default()
        }
    }

    #[test]
    fn a_filter_keeps_what_every_given_part_matches() {
        let c = conn("198.51.100.7:40000", "192.0.2.10:443", "10.0.0.11:8443");
        let keeps = |v: &str, b: &str, cl: &str| Filter::parse(v, b, cl).unwrap().matches(&c);
        assert!(keeps("", "", ""));
        assert!(keeps("192.0.2.10", "", ""));
        assert!(keeps("192.0.2.10:443", "10.0.0.11", "198.51.100.0/24"));
        assert!(keeps("", "10.0.0.11:8443", "198.51.100.7"));
        assert!(!keeps("192.0.2.10:80", "", ""));
        assert!(!keeps("192.0.2.11", "", ""));
        assert!(!keeps("", "10.0.0.12", ""));
        assert!(!keeps("", "", "198.51.101.0/24"));
        assert!(!keeps("", "", "2001:db8::/32"));
        let c6 = conn(
            "[2001:db8::7]:40000",
            "[2001:db8::10]:443",
            "[fd00::11]:443",
        );
        let f = Filter::parse("[2001:db8::10]:443", "fd00::11", "2001:db8::/64").unwrap();
        assert!(f.matches(&c6));
    }

    #[test]
    fn a_bad_filter_says_what_it_expected() {
        let e = Filter::parse("192.0.2.300", "", "").unwrap_err();
        assert!(e.contains("vip \"192.0.2.300\""), "{e}");
        let e = Filter::parse("", "", "10.0.0.0/33").unwrap_err();
        assert!(e.contains("client prefix"), "{e}");
        let e = Filter::parse("", "backend", "").unwrap_err();
        assert!(e.contains("backend"), "{e}");
    }

    #[test]
    fn without_border_dp_a_walk_says_so() {
        let w = Walker::new(std::env::temp_dir().join("border-conns-none-such"));
        let e = w
            .walk(Access::PRIVATE, &Filter::default(), |_| true)
            .unwrap_err();
        assert!(matches!(e, WalkError::NoRegion(_)), "{e}");
    }

    #[test]
    fn a_worker_that_never_answers_fails_the_walk_in_time() {
        let path = std::env::temp_dir().join(format!("border-conns-mute-{}", std::process::id()));
        let _r = ConnsRegion::create(&path, 1, 8, Access::PRIVATE).unwrap();
        let region = ConnsRegion::open(&path, Access::PRIVATE).unwrap();
        region.request(0, 3);
        let started = Instant::now();
        let answer = Duration::from_millis(200);
        let e = drain_walk(&region, 3, &Filter::default(), answer, &mut |_| true).unwrap_err();
        assert!(matches!(e, WalkError::Unanswered { worker: 0, .. }), "{e}");
        assert!(started.elapsed() >= answer);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_walk_takes_every_worker_s_records_through_the_filter() {
        let path = std::env::temp_dir().join(format!("border-conns-walk-{}", std::process::id()));
        let region = ConnsRegion::create(&path, 2, 8, Access::PRIVATE).unwrap();
        let region: &'static ConnsRegion = Box::leak(Box::new(region));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        // Two workers of 100 connections each, from 198.51.100.x and
        // 198.51.101.x, copying 5 per poll.
        let workers: Vec<_> = (0..2u8)
            .map(|w| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = region.exporter(usize::from(w)).unwrap();
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        if x.walking() {
                            let (mut room, mut c) = (x.room().min(5), x.cursor());
                            while room > 0 && c < 100 {
                                let client = format!("198.51.{}.{}:4000", 100 + w, c);
                                x.push(&conn(&client, "192.0.2.10:443", "10.0.0.11:80"));
                                (room, c) = (room - 1, c + 1);
                            }
                            x.set_cursor(c);
                            if c == 100 {
                                x.finish();
                            }
                        }
                        std::thread::yield_now();
                    }
                })
            })
            .collect();
        let walker = Walker::new(path.clone());
        let mut got = Vec::new();
        let all = walker.walk(Access::PRIVATE, &Filter::default(), |c| {
            got.push(c.client_ip());
            true
        });
        assert_eq!(all.unwrap().listed, 200);
        assert_eq!(got.len(), 200);
        let f = Filter::parse("", "", "198.51.101.0/24").unwrap();
        let some = walker.walk(Access::PRIVATE, &f, |_| true).unwrap();
        assert_eq!((some.seen, some.listed, some.torn), (200, 100, 0));
        let mut k = 0;
        let first = walker.walk(Access::PRIVATE, &Filter::default(), |_| {
            k += 1;
            k < 3
        });
        assert_eq!(first.unwrap().listed, 3, "the walk stops when told");
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in workers {
            t.join().unwrap();
        }
        let _ = std::fs::remove_file(&path);
    }
}
