//! Connection records from the records region to a real IPFIX collector
//! (Debian's nfcapd, read back with nfdump) and to JSON-lines files
//! (docs/records.md). The test plays border-dp: it creates the region and
//! pushes records with the workers' writer.

mod common;
#[path = "../../tests/common/nfcapd.rs"]
mod nfcapd;

use std::io::{Seek, SeekFrom, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::TempDir;
use conf::os::files::Access;
use conf::records::{
    ConnRecord, EndReason, RecordsRegion, REC_FULL_NAT, REC_PAYLOAD, REC_PROXY_SENT,
};
use conf::{IpfixCollector, JsonLog, Records};
use mgmt::records::drain::{self, Drain};
use mgmt::records::ipfix::flow_end_reason;
use mgmt::records::{RecordsReport, RecordsStats, VipNames};
use nfcapd::Nfcapd;

/// Unix ms of the workers' clock 0 in these tests.
const CLOCK_OFFSET_MS: i64 = 1_764_633_600_000;

fn addr16(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// A record of a connection `client` -> `vip`, forwarded as `local` ->
/// `backend`, with distinct counts derived from `n`.
fn record(
    n: u64,
    client: SocketAddr,
    vip: SocketAddr,
    local: SocketAddr,
    backend: SocketAddr,
) -> ConnRecord {
    let v6 = client.is_ipv6();
    ConnRecord {
        start_ms: 10_000 + n * 1000,
        end_ms: 10_000 + n * 1000 + 750,
        conn_id: 0xb0d0_0000_0000_0000 | n,
        packets: [10 + n, 8 + n],
        octets: [1000 + n, 5000 + n],
        client: addr16(client.ip()),
        vip: addr16(vip.ip()),
        backend: addr16(backend.ip()),
        local: addr16(local.ip()),
        client_port: client.port(),
        vip_port: vip.port(),
        backend_port: backend.port(),
        local_port: local.port(),
        proto: if n % 4 == 3 { 17 } else { 6 },
        client_v6: v6,
        backend_v6: v6,
        end: EndReason::ALL[n as usize % EndReason::ALL.len()],
        flags: REC_FULL_NAT | REC_PAYLOAD,
        worker: 0,
    }
}

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn v4_record(n: u64) -> ConnRecord {
    record(
        n,
        sa(&format!("192.0.2.{}:{}", 10 + n, 40_000 + n)),
        sa("198.51.100.10:80"),
        sa(&format!("10.0.0.2:{}", 1024 + n)),
        sa(&format!("10.0.1.{}:8080", 1 + n)),
    )
}

fn v6_record(n: u64) -> ConnRecord {
    record(
        n,
        sa(&format!("[2001:db8::{:x}]:{}", 0x10 + n, 50_000 + n)),
        sa("[2001:db8:100::10]:443"),
        sa(&format!("[2001:db8::2]:{}", 2048 + n)),
        sa(&format!("[2001:db8:1::{:x}]:8443", 1 + n)),
    )
}

fn region(dir: &Path, workers: usize) -> RecordsRegion {
    let r = RecordsRegion::create(&dir.join("records"), workers, 1024, Access::PRIVATE).unwrap();
    r.set_clock_offset_ms(CLOCK_OFFSET_MS);
    r
}

fn records_cfg(ipfix: Option<SocketAddr>, json: Option<JsonLog>) -> Records {
    Records {
        ring_slots: 1024,
        log_empty: false,
        ipfix: ipfix
            .map(|collector| IpfixCollector {
                collector,
                observation_domain: 5,
                template_interval_s: 60,
            })
            .into_iter()
            .collect(),
        json,
    }
}

fn new_drain(dir: &Path, cfg: &Records, names: VipNames) -> (Drain, Arc<RecordsStats>) {
    let stats = Arc::new(RecordsStats::default());
    let d = drain::from_config(
        cfg,
        dir.join("records"),
        Access::PRIVATE,
        stats.clone(),
        Arc::new(move || names.clone()),
    );
    (d, stats)
}

/// Runs passes until `done` holds for the report (at most 5 s).
fn pass_until(
    d: &mut Drain,
    stats: &RecordsStats,
    done: impl Fn(&RecordsReport) -> bool,
) -> RecordsReport {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        d.pass(Instant::now());
        let r = stats.report();
        if done(&r) {
            return r;
        }
        assert!(Instant::now() < deadline, "drain did not get there: {r:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn exported(r: &RecordsReport, kind: &str) -> (u64, u64) {
    r.exporters
        .iter()
        .find(|e| e.kind == kind)
        .map(|e| (e.sent, e.failed))
        .unwrap_or_else(|| panic!("no {kind} exporter in {r:?}"))
}

/// What nfdump must show for `rec`.
fn assert_flow(flows: &[nfcapd::Flow], rec: &ConnRecord) {
    let client = SocketAddr::new(rec.client_ip(), rec.client_port);
    let f = flows
        .iter()
        .find(|f| f.src == client)
        .unwrap_or_else(|| panic!("no flow from {client} in {flows:#?}"));
    assert_eq!(f.dst, SocketAddr::new(rec.vip_ip(), rec.vip_port));
    assert_eq!(f.proto, rec.proto);
    assert_eq!(f.start_ms, (rec.start_ms as i64 + CLOCK_OFFSET_MS) as u64);
    assert_eq!(f.duration_ms, rec.end_ms - rec.start_ms);
    assert_eq!((f.in_packets, f.in_bytes), (rec.packets[0], rec.octets[0]));
    assert_eq!(
        (f.out_packets, f.out_bytes),
        (rec.packets[1], rec.octets[1])
    );
    assert_eq!(f.end_reason, flow_end_reason(rec.end).to_string());
    if !rec.client_v6 {
        // nfdump 1.7.1 reads the IPv4 post-NAT elements only (225-228);
        // the IPv6 ones (281, 282) are checked on bytes in ipfix/tests.rs.
        assert_eq!(
            f.xlate_src,
            Some(SocketAddr::new(rec.local_ip(), rec.local_port))
        );
        assert_eq!(
            f.xlate_dst,
            Some(SocketAddr::new(rec.backend_ip(), rec.backend_port))
        );
    }
}

#[test]
fn nfcapd_receives_ipv4_and_ipv6_records_with_every_field() {
    let dir = TempDir::new("rec-ipfix");
    let nf = Nfcapd::start(&dir.0.join("nfcapd"), false);
    let region = region(&dir.0, 2);
    let recs = [
        v4_record(0),
        v4_record(1),
        v6_record(2),
        v4_record(3),
        v6_record(4),
        v6_record(7),
    ];
    for (i, r) in recs.iter().enumerate() {
        assert!(region.writer(i % 2).unwrap().push(r));
    }
    let (mut d, stats) = new_drain(
        &dir.0,
        &records_cfg(Some(nf.addr()), None),
        VipNames::default(),
    );
    let r = pass_until(&mut d, &stats, |r| exported(r, "ipfix").0 == 6);
    assert_eq!((r.read, r.malformed), (6, 0));
    assert!(r.attached);
    assert_eq!(r.pending, vec![0, 0]);
    assert_eq!(exported(&r, "ipfix"), (6, 0));
    std::thread::sleep(Duration::from_millis(300));
    let flows = nf.stop_and_read();
    assert_eq!(flows.len(), 6, "{flows:#?}");
    for rec in &recs {
        assert_flow(&flows, rec);
    }
}

fn json_cfg(path: PathBuf, rotate_bytes: u64, keep: u32) -> JsonLog {
    JsonLog {
        path,
        rotate_bytes,
        keep,
    }
}

fn lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {l:?}: {e}", path.display()))
        })
        .collect()
}

#[test]
fn json_rotates_at_the_size_bound_keeping_two_old_files() {
    let dir = TempDir::new("rec-json");
    let region = region(&dir.0, 1);
    let log = dir.0.join("log").join("records.jsonl");
    let cfg = records_cfg(None, Some(json_cfg(log.clone(), 4096, 2)));
    let (mut d, stats) = new_drain(&dir.0, &cfg, VipNames::default());
    let n = 60;
    let mut w = region.writer(0).unwrap();
    for i in 0..n {
        assert!(w.push(&v4_record(i)));
    }
    let r = pass_until(&mut d, &stats, |r| exported(r, "json").0 == n);
    assert_eq!(exported(&r, "json"), (n, 0));
    let mut names: Vec<String> = std::fs::read_dir(log.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["records.jsonl", "records.jsonl.1", "records.jsonl.2"]
    );
    let mut last_ids = Vec::new();
    for name in ["records.jsonl.2", "records.jsonl.1", "records.jsonl"] {
        let p = log.with_file_name(name);
        let meta = std::fs::metadata(&p).unwrap();
        assert!(meta.len() <= 4096, "{name}: {} bytes", meta.len());
        assert_eq!(meta.mode() & 0o777, 0o600, "{name}");
        for v in lines(&p) {
            last_ids.push(v["start_unix_ms"].as_u64().unwrap());
        }
    }
    // The files hold the newest records, in order, the last one last.
    let want: Vec<u64> = (n - last_ids.len() as u64..n)
        .map(|i| (10_000 + i * 1000) + CLOCK_OFFSET_MS as u64)
        .collect();
    assert_eq!(last_ids, want);
    assert!(last_ids.len() > 10);
}

/// Byte offset of worker 0's slot `i` in a region file (conf::records docs).
fn slot_offset(i: u64) -> u64 {
    128 + 128 + i * 192
}

#[test]
fn a_malformed_slot_is_counted_and_the_next_record_still_goes_out() {
    let dir = TempDir::new("rec-bad");
    let region = region(&dir.0, 1);
    let log = dir.0.join("records.jsonl");
    let cfg = records_cfg(None, Some(json_cfg(log.clone(), 1 << 20, 1)));
    let (mut d, stats) = new_drain(&dir.0, &cfg, VipNames::default());
    let mut w = region.writer(0).unwrap();
    assert!(w.push(&v4_record(1)));
    assert!(w.push(&v4_record(2)));
    // Garbage over the first slot, as a broken writer would leave it.
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.0.join("records"))
        .unwrap();
    f.seek(SeekFrom::Start(slot_offset(0))).unwrap();
    f.write_all(&[0xa5; 192]).unwrap();
    let r = pass_until(&mut d, &stats, |r| r.read == 2);
    assert_eq!((r.read, r.malformed), (2, 1));
    assert_eq!(exported(&r, "json"), (1, 0));
    let v = lines(&log);
    assert_eq!(v.len(), 1);
    assert_eq!(v[0]["client"], "192.0.2.12:40002");
    let mut o = mgmt::prom::Exposition::default();
    mgmt::records::stats::render(&mut o, Some(&r));
    let text = o.into_string();
    assert!(
        text.contains("border_records_malformed_total 1\n"),
        "{text}"
    );
    assert!(text.contains("border_records_read_total 2\n"), "{text}");
    // A record whose families disagree is not one border-dp writes either.
    let mut mixed = v4_record(3);
    mixed.backend_v6 = true;
    assert!(w.push(&mixed));
    assert!(w.push(&v4_record(4)));
    let r = pass_until(&mut d, &stats, |r| r.read == 4);
    assert_eq!((r.malformed, exported(&r, "json").0), (2, 2));
}

#[test]
fn a_json_write_error_is_counted_and_ipfix_keeps_flowing() {
    let dir = TempDir::new("rec-jsonerr");
    let nf = Nfcapd::start(&dir.0.join("nfcapd"), false);
    let region = region(&dir.0, 1);
    // The file's directory is a regular file: every open fails.
    std::fs::write(dir.0.join("not-a-dir"), b"").unwrap();
    let cfg = records_cfg(
        Some(nf.addr()),
        Some(json_cfg(
            dir.0.join("not-a-dir").join("records.jsonl"),
            1 << 20,
            1,
        )),
    );
    let (mut d, stats) = new_drain(&dir.0, &cfg, VipNames::default());
    let mut w = region.writer(0).unwrap();
    for i in 0..3 {
        assert!(w.push(&v4_record(i)));
    }
    let r = pass_until(&mut d, &stats, |r| exported(r, "ipfix").0 == 3);
    assert_eq!(exported(&r, "json"), (0, 3));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(nf.stop_and_read().len(), 3);
}

#[test]
fn a_restarted_dataplane_replaces_the_region_and_no_record_is_lost() {
    let dir = TempDir::new("rec-switch");
    let log = dir.0.join("records.jsonl");
    let cfg = records_cfg(None, Some(json_cfg(log.clone(), 1 << 20, 1)));
    let (mut d, stats) = new_drain(&dir.0, &cfg, VipNames::default());
    // No region yet: not attached, no error.
    d.pass(Instant::now());
    assert!(!stats.report().attached);
    let old = region(&dir.0, 1);
    assert!(old.writer(0).unwrap().push(&v4_record(1)));
    pass_until(&mut d, &stats, |r| exported(r, "json").0 == 1);
    // The old border-dp writes its last record as the new one starts.
    assert!(old.writer(0).unwrap().push(&v4_record(2)));
    let new = region(&dir.0, 2);
    assert!(new.writer(1).unwrap().push(&v4_record(3)));
    let r = pass_until(&mut d, &stats, |r| exported(r, "json").0 == 3);
    assert_eq!(r.region_switches, 1);
    assert_eq!(r.pending, vec![0, 0]);
    let clients: Vec<String> = lines(&log)
        .iter()
        .map(|v| v["client"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        clients,
        ["192.0.2.11:40001", "192.0.2.12:40002", "192.0.2.13:40003"]
    );
}

/// border-mgmt with `[records]`: the drain runs beside the API, names the
/// VIP from the running config, and the metrics show it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn border_mgmt_drains_the_region_and_exports_metrics() {
    let dir = TempDir::new("rec-mgmt");
    let socket = dir.0.join("api.sock");
    let port = common::free_port();
    let log = dir.0.join("records.jsonl");
    let text = format!(
        "{}\n[records]\n[records.json]\npath = \"{}\"\n",
        common::config_text(&format!("unix://{}", socket.display()), Some(port), ""),
        log.display()
    );
    let region = region(&dir.0, 1);
    let rec = record(
        1,
        sa("192.0.2.50:41000"),
        sa("10.0.0.100:80"),
        sa("10.0.0.1:1500"),
        sa("10.0.1.1:8080"),
    );
    let mut proxied = rec;
    proxied.flags |= REC_PROXY_SENT;
    assert!(region.writer(0).unwrap().push(&proxied));
    let mut running = common::Running::start_with(dir, text, socket).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while !log.exists() || std::fs::read_to_string(&log).unwrap().is_empty() {
        assert!(Instant::now() < deadline, "no JSON record written");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let v = lines(&log);
    assert_eq!(v[0]["vip_name"], "web");
    assert_eq!(v[0]["unique_id"], format!("{:016x}", proxied.conn_id));
    assert_eq!(v[0]["local"], "10.0.0.1:1500");
    let metrics = http_get(port, "/metrics").await;
    for want in [
        "border_records_region_attached 1\n",
        "border_records_read_total 1\n",
        "border_records_pending{worker=\"0\"} 0\n",
    ] {
        assert!(metrics.contains(want), "{want:?} not in:\n{metrics}");
    }
    assert!(
        metrics.contains(&format!(
            "border_records_exported_total{{exporter=\"json\",target=\"{}\"}} 1\n",
            log.display()
        )),
        "{metrics}"
    );
    running.stop().await;
}

async fn http_get(port: u16, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

/// Two full rings of 65,536 records each drain completely to an IPFIX
/// collector (a UDP socket nobody reads: the kernel drops what does not
/// fit, as a slow collector would, and the drain counts it) and to a
/// JSON-lines file. It also prints the rate, the figure in docs/records.md:
/// `cargo test --release -p mgmt --test records_export -- --nocapture
/// drain_throughput` on a quiet box.
#[test]
fn drain_throughput() {
    const SLOTS: u64 = 65_536;
    const WORKERS: usize = 2;
    let dir = TempDir::new("rec-rate");
    let region = RecordsRegion::create(
        &dir.0.join("records"),
        WORKERS,
        SLOTS as u32,
        Access::PRIVATE,
    )
    .unwrap();
    region.set_clock_offset_ms(CLOCK_OFFSET_MS);
    for worker in 0..WORKERS {
        let mut w = region.writer(worker).unwrap();
        for i in 0..SLOTS {
            // The record builders make addresses from n: keep it small.
            let n = i % 200;
            let rec = if i % 2 == 0 {
                v4_record(n)
            } else {
                v6_record(n)
            };
            assert!(w.push(&rec), "worker {worker}: ring full at {i}");
        }
    }
    let sink = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let log = dir.0.join("records.jsonl");
    let mut cfg = records_cfg(
        Some(sink.local_addr().unwrap()),
        Some(json_cfg(log, 1 << 30, 1)),
    );
    cfg.ring_slots = SLOTS as u32;
    let (mut d, stats) = new_drain(&dir.0, &cfg, VipNames::default());
    let total = SLOTS * WORKERS as u64;
    let start = Instant::now();
    let deadline = start + Duration::from_secs(300);
    loop {
        d.pass(Instant::now());
        let r = stats.report();
        if exported(&r, "json").0 == total
            && exported(&r, "ipfix").0 + exported(&r, "ipfix").1 == total
        {
            break;
        }
        assert!(Instant::now() < deadline, "drain did not finish: {r:?}");
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "drain_throughput: {total} records to IPFIX and JSON in {secs:.3} s: {:.0} records/s",
        total as f64 / secs
    );
}
