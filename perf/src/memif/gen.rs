//! `border-perf gen`: a DPDK traffic generator with two memif ports, in the
//! manner of a TRex run on one machine.
//!
//! - The *client* port faces the device under test's client side: it opens
//!   TCP connections to a VIP from scattered client addresses
//!   ([`super::flows`]), answers the handshakes and counts what comes back.
//! - The *backend* port faces the device's backend side and plays every
//!   backend at once: it answers ARP for any address, a SYN with a SYN-ACK,
//!   data with an ACK and a FIN with a FIN-ACK, in place in the received
//!   buffer, back to whoever sent it (border's MAC, so DNAT replies go back
//!   through border as they must).
//!
//! Phases (each on its own VIP, with fresh client ends):
//! - `fullnat`, `dnat`, `ppv2`: established flows. `--flows` handshakes
//!   first, then data segments round-robin over the flows, each answered by
//!   an ACK: the measured packets are the segments and the ACKs.
//! - `new`: new connections, each SYN, SYN-ACK, FIN-ACK, FIN-ACK, ACK with
//!   fresh client ends, `--window` of them open at a time.
//!
//! The loop is one thread; frames are precomputed or answered in place, so
//! it allocates nothing but mbufs. At most `--window` packets (or new
//! connections) are outstanding; when nothing comes back for 1 ms (a frame
//! was lost, or a process was preempted) the
//! window is reopened and the stall counted.
//! Generated frames the memif ring does not take wait for the next try, so
//! the device's back-pressure costs no wasted frames.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use dpdk_ffi::{Eal, Mbuf, MbufBurst, Mempool, Port, RxQueue, TxQueue, DEFAULT_DATA_ROOM};

use super::flows::{client_isn, client_of, id_of};
use super::frames::{self, End, Kind, Segment, ACK, FIN, PSH, SYN};

const BURST: usize = 32;
const STALL: Duration = Duration::from_millis(1);
const WARMUP: Duration = Duration::from_millis(300);
/// Longest data payload: a data frame is at most 64 bytes.
const MAX_PAYLOAD: usize = 64 - frames::HEADERS;

/// The phases the generator knows, in the order they run.
pub const PHASES: [&str; 4] = ["fullnat", "dnat", "ppv2", "new"];

/// Options of `border-perf gen`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// memif socket of the client-side port (this process is the memif server).
    #[arg(long)]
    pub client_socket: PathBuf,
    /// memif socket of the backend-side port.
    #[arg(long, required_unless_present = "loopback")]
    pub backend_socket: Option<PathBuf>,
    /// MAC of the device's client-side port (destination of client frames).
    #[arg(long, default_value = "02:00:00:00:00:fe", value_parser = parse_mac)]
    pub dut_client_mac: [u8; 6],
    /// Full-NAT VIP (phases `fullnat` and `new`).
    #[arg(long, default_value = "10.71.0.10:80")]
    pub vip_fullnat: SocketAddrV4,
    /// DNAT VIP.
    #[arg(long, default_value = "10.71.0.11:80")]
    pub vip_dnat: SocketAddrV4,
    /// Full-NAT VIP with PROXY protocol v2.
    #[arg(long, default_value = "10.71.0.12:80")]
    pub vip_ppv2: SocketAddrV4,
    /// Phases to run, comma-separated: fullnat, dnat, ppv2, new.
    #[arg(long, value_delimiter = ',', default_value = "fullnat,dnat,ppv2,new")]
    pub phases: Vec<String>,
    /// Established flows per phase.
    #[arg(long, default_value_t = 1024)]
    pub flows: u32,
    /// Measured seconds per phase (after a 0.3 s warm-up).
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Packets (established) or connections (`new`) outstanding at most.
    #[arg(long, default_value_t = 512)]
    pub window: u32,
    /// Data payload bytes per segment (the frame is 54 + this, at most 64).
    #[arg(long, default_value_t = 6)]
    pub payload: usize,
    /// CPU the generator's one lcore runs on.
    #[arg(long, default_value_t = 0)]
    pub cpu: u32,
    /// Seconds to wait for both memif links to come up.
    #[arg(long, default_value_t = 30.0)]
    pub link_timeout: f64,
    /// Writes the results here as JSON (one object per phase in `phases`).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// After writing the results, keep the ports open until killed, so the
    /// device under test can be stopped first (the runner does).
    #[arg(long)]
    pub hold: bool,
    /// No device: the backend port is the memif client of the client
    /// port's own socket, so what the client side sends reaches the backend
    /// side directly and back. Measures the generator's own ceiling (both
    /// ends on its one lcore); --backend-socket is not used.
    #[arg(long)]
    pub loopback: bool,
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        return Err(format!("{s:?}: want six hex pairs separated by ':'"));
    }
    let mut mac = [0u8; 6];
    for (m, p) in mac.iter_mut().zip(parts) {
        *m = u8::from_str_radix(p, 16).map_err(|_| format!("{s:?}: {p:?} is not a hex byte"))?;
    }
    Ok(mac)
}

/// Packet counts of one phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Frames the client port sent toward the device.
    pub client_tx: u64,
    /// Frames the client port received from the device.
    pub client_rx: u64,
    /// Frames the backend port received from the device.
    pub backend_rx: u64,
    /// Frames the backend port sent back.
    pub backend_tx: u64,
    /// Answers a memif tx ring did not take (freed, not sent).
    pub tx_full: u64,
    /// Generated frames a memif tx ring did not take at once (sent later).
    pub tx_retried: u64,
    /// SYN-ACKs the clients received.
    pub synacks: u64,
    /// ACKs of data the clients received.
    pub data_acks: u64,
    /// New-flow connections closed both ways.
    pub flows_done: u64,
    /// ARP requests answered (either port).
    pub arp_answered: u64,
    /// Frames that were none of the above (kernel twin chatter, stray RSTs).
    pub other: u64,
    /// Times the window was reopened after 1 ms without an answer.
    pub stalls: u64,
}

impl Counts {
    fn minus(&self, o: &Counts) -> Counts {
        Counts {
            client_tx: self.client_tx - o.client_tx,
            client_rx: self.client_rx - o.client_rx,
            backend_rx: self.backend_rx - o.backend_rx,
            backend_tx: self.backend_tx - o.backend_tx,
            tx_full: self.tx_full - o.tx_full,
            tx_retried: self.tx_retried - o.tx_retried,
            synacks: self.synacks - o.synacks,
            data_acks: self.data_acks - o.data_acks,
            flows_done: self.flows_done - o.flows_done,
            arp_answered: self.arp_answered - o.arp_answered,
            other: self.other - o.other,
            stalls: self.stalls - o.stalls,
        }
    }
}

/// The result of one phase.
#[derive(Debug, Clone)]
pub struct PhaseResult {
    /// Phase name.
    pub phase: String,
    /// Flows that completed the handshake (established phases).
    pub established: u32,
    /// Measured seconds.
    pub seconds: f64,
    /// Counts over the measured time.
    pub counts: Counts,
}

impl PhaseResult {
    /// Packets through the device per second, both directions (millions).
    pub fn mpps(&self) -> f64 {
        (self.counts.backend_rx + self.counts.client_rx) as f64 / self.seconds / 1e6
    }

    /// As JSON.
    pub fn to_json(&self) -> serde_json::Value {
        let c = &self.counts;
        serde_json::json!({
            "phase": self.phase,
            "established": self.established,
            "seconds": self.seconds,
            "mpps": self.mpps(),
            "forward_mpps": c.backend_rx as f64 / self.seconds / 1e6,
            "reverse_mpps": c.client_rx as f64 / self.seconds / 1e6,
            "new_flows_per_s": c.flows_done as f64 / self.seconds,
            "client_tx": c.client_tx,
            "client_rx": c.client_rx,
            "backend_rx": c.backend_rx,
            "backend_tx": c.backend_tx,
            "tx_full": c.tx_full,
            "tx_retried": c.tx_retried,
            "synacks": c.synacks,
            "data_acks": c.data_acks,
            "flows_done": c.flows_done,
            "arp_answered": c.arp_answered,
            "other": c.other,
            "stalls": c.stalls,
        })
    }
}

/// What the client side does with a SYN-ACK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientMode {
    /// Complete the handshake (ACK) and note the server's next sequence.
    Establish,
    /// Close at once (FIN-ACK): the `new` phase.
    Close,
}

struct Queues {
    rx: RxQueue,
    tx: TxQueue,
    mac: [u8; 6],
}

/// Per-flow data of an established phase.
struct Flows {
    base: u32,
    templates: Vec<[u8; 64]>,
    partial: Vec<u32>,
    seq: Vec<u32>,
    server_next: Vec<u32>,
    established: Vec<bool>,
    len: usize,
}

struct Gen {
    pool: Mempool,
    client: Queues,
    backend: Queues,
    dut_mac: [u8; 6],
    c: Counts,
    in_flight: u64,
    last_rx: Instant,
    mode: ClientMode,
    flows: Option<Flows>,
    /// Generated client frames the ring has not taken yet.
    pending: MbufBurst<BURST>,
    next_id: u32,
    payload: usize,
}

/// Runs the generator: EAL, two memif server ports, every phase.
pub fn run(a: &Args) -> anyhow::Result<Vec<PhaseResult>> {
    for p in &a.phases {
        if !PHASES.contains(&p.as_str()) {
            bail!("unknown phase {p:?} (known: {})", PHASES.join(", "));
        }
    }
    if a.payload == 0 || a.payload > MAX_PAYLOAD {
        bail!("--payload must be 1..={MAX_PAYLOAD}");
    }
    if a.flows == 0 || a.window == 0 {
        bail!("--flows and --window must be at least 1");
    }
    let eal_args = vec![
        "--no-huge".to_string(),
        "-m".into(),
        "256".into(),
        "--no-pci".into(),
        "--no-shconf".into(),
        format!("--file-prefix=border-gen-{}", std::process::id()),
        format!("--lcores=0@{}", a.cpu),
        "--log-level=lib.eal:error".into(),
        memif_vdev(0, "server", &a.client_socket),
        match (&a.backend_socket, a.loopback) {
            (_, true) => memif_vdev(1, "client", &a.client_socket),
            (Some(backend), false) => memif_vdev(1, "server", backend),
            (None, false) => bail!("--backend-socket is needed without --loopback"),
        },
    ];
    let eal = Eal::init(&eal_args).context("EAL init")?;
    let pool = Mempool::pktmbuf("gen", 16383, 256, DEFAULT_DATA_ROOM, -1)?;
    let mut client_port = Port::by_name("net_memif0")?;
    let mut backend_port = Port::by_name("net_memif1")?;
    for p in [&mut client_port, &mut backend_port] {
        p.configure(1, 1, 1024, 1024, &pool)?;
        p.start()?;
    }
    let deadline = Instant::now() + Duration::from_secs_f64(a.link_timeout);
    while !(client_port.link()?.up && backend_port.link()?.up) {
        if Instant::now() > deadline {
            let backend = match (&a.backend_socket, a.loopback) {
                (_, true) => "its own client port (loopback)".to_string(),
                (Some(b), false) => b.display().to_string(),
                (None, false) => "-".to_string(),
            };
            bail!(
                "memif links not up after {} s (is the device under test connected to {} and {backend}?)",
                a.link_timeout,
                a.client_socket.display(),
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut g = Gen {
        client: Queues {
            rx: client_port.rx_queue(0)?,
            tx: client_port.tx_queue(0)?,
            mac: client_port.mac_addr()?,
        },
        backend: Queues {
            rx: backend_port.rx_queue(0)?,
            tx: backend_port.tx_queue(0)?,
            mac: backend_port.mac_addr()?,
        },
        pool,
        dut_mac: a.dut_client_mac,
        c: Counts::default(),
        in_flight: 0,
        last_rx: Instant::now(),
        mode: ClientMode::Establish,
        flows: None,
        pending: MbufBurst::new(),
        next_id: 0,
        payload: a.payload,
    };
    let measure = Duration::from_secs_f64(a.seconds);
    let mut out = Vec::new();
    for p in &a.phases {
        let r = match p.as_str() {
            "fullnat" => g.established_phase(p, a.vip_fullnat, a, measure),
            "dnat" => g.established_phase(p, a.vip_dnat, a, measure),
            "ppv2" => g.established_phase(p, a.vip_ppv2, a, measure),
            _ => g.new_flow_phase(p, a.vip_fullnat, a, measure),
        };
        eprintln!(
            "gen: {p}: {:.3} Mpps through the device, {:?}",
            r.mpps(),
            r.counts
        );
        out.push(r);
    }
    drop(g);
    if let Some(path) = &a.json {
        // Written whole under a temporary name, then renamed: a reader
        // waiting for the file never sees half of it.
        let v: Vec<_> = out.iter().map(PhaseResult::to_json).collect();
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_string_pretty(&v)? + "\n")
            .with_context(|| format!("write {}", tmp.display()))?;
        std::fs::rename(&tmp, path).with_context(|| format!("write {}", path.display()))?;
    }
    if a.hold {
        // The device goes first; leaving now would pull the memif regions
        // from under a forwarder still inside rx_burst (testpmd crashes).
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    for p in [&mut client_port, &mut backend_port] {
        let _ = p.stop();
    }
    // Closing the ports removes the memif socket files. rte_eal_cleanup is
    // skipped on purpose: in DPDK 22.11 it unmaps memory while the
    // interrupt thread still walks memif's handlers, a SIGSEGV about one
    // exit in five. The process is about to exit; the OS reclaims the rest.
    drop(client_port);
    drop(backend_port);
    std::mem::forget(eal);
    Ok(out)
}

/// `--vdev` for memif `index` on `socket` (a filesystem socket: border-dp
/// may run in another network namespace, where an abstract one is invisible).
pub fn memif_vdev(index: u32, role: &str, socket: &std::path::Path) -> String {
    format!(
        "--vdev=net_memif{index},role={role},socket={},socket-abstract=no,id=0",
        socket.display()
    )
}

impl Gen {
    fn established_phase(
        &mut self,
        name: &str,
        vip: SocketAddrV4,
        a: &Args,
        measure: Duration,
    ) -> PhaseResult {
        self.mode = ClientMode::Establish;
        self.flows = Some(self.build_flows(vip, a.flows));
        self.handshake(a.window);
        let established = self
            .flows
            .as_ref()
            .map_or(0, |f| f.established.iter().filter(|&&e| e).count() as u32);
        let order: Vec<usize> = self
            .flows
            .as_ref()
            .map(|f| (0..f.len).filter(|&i| f.established[i]).collect())
            .unwrap_or_default();
        let mut next = 0usize;
        let counts = self.measured(measure, |g| {
            if !order.is_empty() {
                g.send_data(&order, &mut next, a.window);
            }
        });
        self.flows = None;
        PhaseResult {
            phase: name.to_string(),
            established,
            seconds: measure.as_secs_f64(),
            counts,
        }
    }

    fn new_flow_phase(
        &mut self,
        name: &str,
        vip: SocketAddrV4,
        a: &Args,
        measure: Duration,
    ) -> PhaseResult {
        self.mode = ClientMode::Close;
        self.in_flight = 0;
        let v = End {
            mac: self.dut_mac,
            ip: *vip.ip(),
            port: vip.port(),
        };
        let counts = self.measured(measure, |g| g.send_syns(v, a.window));
        PhaseResult {
            phase: name.to_string(),
            established: 0,
            seconds: measure.as_secs_f64(),
            counts,
        }
    }

    /// Runs `send` and the answering loop for the warm-up, then for
    /// `measure`, and returns the counts of the measured part.
    fn measured(&mut self, measure: Duration, mut send: impl FnMut(&mut Gen)) -> Counts {
        let start = Instant::now();
        let mut before = None;
        loop {
            send(self);
            self.service();
            let now = Instant::now();
            if before.is_none() && now >= start + WARMUP {
                before = Some(self.c);
            }
            if now >= start + WARMUP + measure {
                break;
            }
        }
        let counts = self.c.minus(&before.unwrap_or_default());
        // Let what is still on the way arrive so the next phase starts clean.
        let drain_until = Instant::now() + Duration::from_millis(100);
        while Instant::now() < drain_until {
            self.service();
        }
        self.pending.clear();
        self.in_flight = 0;
        counts
    }

    fn build_flows(&mut self, vip: SocketAddrV4, n: u32) -> Flows {
        let base = self.next_id;
        self.next_id = self.next_id.wrapping_add(n);
        let v = End {
            mac: self.dut_mac,
            ip: *vip.ip(),
            port: vip.port(),
        };
        let payload = [b'x'; MAX_PAYLOAD];
        let mut f = Flows {
            base,
            templates: Vec::with_capacity(n as usize),
            partial: Vec::with_capacity(n as usize),
            seq: Vec::with_capacity(n as usize),
            server_next: vec![0; n as usize],
            established: vec![false; n as usize],
            len: n as usize,
        };
        for i in 0..n {
            let id = base.wrapping_add(i);
            let (ip, port) = client_of(id);
            let c = End {
                mac: self.client.mac,
                ip,
                port,
            };
            let mut t = [0u8; 64];
            frames::build_tcp(
                &mut t,
                c,
                v,
                Segment {
                    seq: 0,
                    ack: 0,
                    flags: ACK | PSH,
                    payload: &payload[..self.payload],
                },
            );
            f.partial.push(frames::partial_tcp_sum(&t));
            f.templates.push(t);
            f.seq.push(client_isn(id).wrapping_add(1));
        }
        f
    }

    /// Sends every flow's SYN (a window at a time) and answers until all
    /// are established; SYNs of flows still waiting are sent again each
    /// second, for at most 10 s.
    fn handshake(&mut self, window: u32) {
        let Some(n) = self.flows.as_ref().map(|f| f.len) else {
            return;
        };
        let v = {
            let f = self.flows.as_ref().expect("flows");
            let t = &f.templates[0];
            End {
                mac: self.dut_mac,
                ip: Ipv4Addr::new(t[30], t[31], t[32], t[33]),
                port: u16::from_be_bytes([t[36], t[37]]),
            }
        };
        let start = Instant::now();
        let mut round_start = start;
        let mut next = 0usize;
        loop {
            let f = self.flows.as_ref().expect("flows");
            let done = f.established.iter().filter(|&&e| e).count();
            if done == n || start.elapsed() > Duration::from_secs(10) {
                break;
            }
            if round_start.elapsed() > Duration::from_secs(1) {
                round_start = Instant::now();
                next = 0;
            }
            // A window's worth of SYNs at a time, passing over established flows.
            if self.flush_pending() {
                while next < n
                    && !self.pending.is_full()
                    && (next as u64) < self.c.synacks + u64::from(window)
                {
                    let f = self.flows.as_ref().expect("flows");
                    if !f.established[next] {
                        let id = f.base.wrapping_add(next as u32);
                        if let Some(m) = self.syn_frame(id, v) {
                            let _ = self.pending.push(m);
                        }
                    }
                    next += 1;
                }
                self.flush_pending();
            }
            self.service();
        }
        // Let the last handshake ACKs reach the backend.
        let until = Instant::now() + Duration::from_millis(50);
        while Instant::now() < until {
            self.service();
        }
    }

    fn syn_frame(&mut self, id: u32, vip: End) -> Option<Mbuf> {
        let mut m = self.pool.alloc()?;
        let (ip, port) = client_of(id);
        let c = End {
            mac: self.client.mac,
            ip,
            port,
        };
        let buf = m.append(frames::HEADERS).ok()?;
        frames::build_tcp(
            buf,
            c,
            vip,
            Segment {
                seq: client_isn(id),
                ack: 0,
                flags: SYN,
                payload: &[],
            },
        );
        Some(m)
    }

    fn send_syns(&mut self, vip: End, window: u32) {
        self.reopen_if_stalled();
        if !self.flush_pending() {
            return;
        }
        let room = u64::from(window).saturating_sub(self.in_flight);
        let k = (room as usize).min(BURST);
        for _ in 0..k {
            let id = self.next_id;
            self.next_id = self.next_id.wrapping_add(1);
            match self.syn_frame(id, vip) {
                Some(m) => {
                    let _ = self.pending.push(m);
                }
                None => break,
            }
        }
        self.in_flight += self.pending.len() as u64;
        self.flush_pending();
    }

    fn send_data(&mut self, order: &[usize], next: &mut usize, window: u32) {
        self.reopen_if_stalled();
        if !self.flush_pending() {
            return;
        }
        let room = u64::from(window).saturating_sub(self.in_flight);
        let k = (room as usize).min(BURST);
        if k == 0 || !self.pool.alloc_bulk(&mut self.pending, k) {
            return;
        }
        let len = frames::HEADERS + self.payload;
        let f = self.flows.as_mut().expect("flows");
        for m in self.pending.iter_mut() {
            let i = order[*next];
            *next = (*next + 1) % order.len();
            let Ok(buf) = m.append(len) else { continue };
            buf.copy_from_slice(&f.templates[i][..len]);
            frames::set_seq_ack(buf, f.partial[i], f.seq[i], f.server_next[i]);
            f.seq[i] = f.seq[i].wrapping_add(self.payload as u32);
        }
        self.in_flight += k as u64;
        self.flush_pending();
    }

    fn reopen_if_stalled(&mut self) {
        if self.in_flight > 0 && self.last_rx.elapsed() > STALL {
            self.in_flight = self.pending.len() as u64;
            self.c.stalls += 1;
            self.last_rx = Instant::now();
        }
    }

    /// Sends what the clients have pending; what the ring does not take
    /// stays pending for the next try (the device's back-pressure).
    /// True when nothing is left.
    fn flush_pending(&mut self) -> bool {
        if self.pending.is_empty() {
            return true;
        }
        let want = self.pending.len() as u64;
        let sent = self.client.tx.tx_burst(&mut self.pending) as u64;
        self.c.client_tx += sent;
        self.c.tx_retried += want - sent;
        self.pending.is_empty()
    }

    /// One pass of both answering sides.
    fn service(&mut self) {
        self.serve_backend();
        self.serve_client();
    }

    /// The backends: answer what border (or testpmd) delivered.
    fn serve_backend(&mut self) {
        let mut rx: MbufBurst<BURST> = MbufBurst::new();
        let got = self.backend.rx.rx_burst(&mut rx);
        if got == 0 {
            return;
        }
        self.c.backend_rx += got as u64;
        let mut tx: MbufBurst<BURST> = MbufBurst::new();
        for mut m in rx.drain() {
            let answered = match frames::classify(m.data()) {
                Kind::ArpRequest => {
                    self.c.arp_answered += 1;
                    frames::answer_arp(m.data_mut(), self.backend.mac)
                }
                Kind::Tcp {
                    flags,
                    payload,
                    seq,
                    ack,
                } => {
                    let p = payload as u32;
                    if flags & SYN != 0 && flags & ACK == 0 {
                        Some(frames::answer_tcp(
                            m.data_mut(),
                            SYN | ACK,
                            seq ^ 0x5a5a_0000,
                            seq.wrapping_add(1),
                        ))
                    } else if flags & FIN != 0 {
                        Some(frames::answer_tcp(
                            m.data_mut(),
                            FIN | ACK,
                            ack,
                            seq.wrapping_add(p + 1),
                        ))
                    } else if payload > 0 {
                        Some(frames::answer_tcp(
                            m.data_mut(),
                            ACK,
                            ack,
                            seq.wrapping_add(p),
                        ))
                    } else {
                        None
                    }
                }
                Kind::Other => {
                    self.c.other += 1;
                    None
                }
            };
            if let Some(len) = answered {
                if shrink(&mut m, len) {
                    let _ = tx.push(m);
                }
            }
        }
        let want = tx.len() as u64;
        let sent = self.backend.tx.tx_burst(&mut tx) as u64;
        self.c.backend_tx += sent;
        self.c.tx_full += want - sent;
        tx.clear();
    }

    /// The clients: count answers, complete or close handshakes.
    fn serve_client(&mut self) {
        let mut rx: MbufBurst<BURST> = MbufBurst::new();
        let got = self.client.rx.rx_burst(&mut rx);
        if got == 0 {
            return;
        }
        self.c.client_rx += got as u64;
        self.last_rx = Instant::now();
        let mut tx: MbufBurst<BURST> = MbufBurst::new();
        for mut m in rx.drain() {
            let answered = match frames::classify(m.data()) {
                Kind::ArpRequest => {
                    self.c.arp_answered += 1;
                    frames::answer_arp(m.data_mut(), self.client.mac)
                }
                Kind::Tcp {
                    flags, seq, ack, ..
                } if flags & (SYN | ACK) == SYN | ACK => {
                    self.c.synacks += 1;
                    match self.mode {
                        ClientMode::Establish => {
                            self.note_established(m.data(), seq);
                            Some(frames::answer_tcp(
                                m.data_mut(),
                                ACK,
                                ack,
                                seq.wrapping_add(1),
                            ))
                        }
                        ClientMode::Close => Some(frames::answer_tcp(
                            m.data_mut(),
                            FIN | ACK,
                            ack,
                            seq.wrapping_add(1),
                        )),
                    }
                }
                Kind::Tcp {
                    flags, seq, ack, ..
                } if flags & FIN != 0 => {
                    self.c.flows_done += 1;
                    self.in_flight = self.in_flight.saturating_sub(1);
                    Some(frames::answer_tcp(
                        m.data_mut(),
                        ACK,
                        ack,
                        seq.wrapping_add(1),
                    ))
                }
                Kind::Tcp { flags, .. } if flags & ACK != 0 => {
                    self.c.data_acks += 1;
                    self.in_flight = self.in_flight.saturating_sub(1);
                    None
                }
                _ => {
                    self.c.other += 1;
                    None
                }
            };
            if let Some(len) = answered {
                if shrink(&mut m, len) {
                    let _ = tx.push(m);
                }
            }
        }
        let want = tx.len() as u64;
        let sent = self.client.tx.tx_burst(&mut tx) as u64;
        self.c.client_tx += sent;
        self.c.tx_full += want - sent;
        tx.clear();
    }

    fn note_established(&mut self, frame: &[u8], server_seq: u32) {
        let Some(f) = self.flows.as_mut() else { return };
        let (ip, port) = frames::tcp_dst(frame);
        let Some(id) = id_of(ip, port) else { return };
        let i = id.wrapping_sub(f.base) as usize;
        if i < f.len {
            f.established[i] = true;
            f.server_next[i] = server_seq.wrapping_add(1);
        }
    }
}

/// Trims an answered mbuf to `len` bytes; false if it is not one segment.
fn shrink(m: &mut Mbuf, len: usize) -> bool {
    let cur = m.data_len() as usize;
    m.is_contiguous() && cur >= len && m.trim(cur - len).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_parse() {
        assert_eq!(parse_mac("02:00:0a:0B:ff:01"), Ok([2, 0, 10, 11, 255, 1]));
        assert!(parse_mac("02:00").is_err());
        assert!(parse_mac("02:00:00:00:00:zz").is_err());
    }
}
