//! `borderctl status`: border-mgmt's GetStatus (publisher, workers, every
//! backend and why), or border-dp's state region when border-mgmt is away
//! or with `--local` (`status_local`).

use std::process::ExitCode;
use std::time::Duration;

use mgmt::pb;
use serde::Serialize;

use crate::bgp::BgpView;
use crate::cli::Target;
use crate::conn::{runtime, Failure, Res};
use crate::output::{self, exit, human_bytes, plural, utc, yes_no, Render, Table, Text};
use crate::status_local;

pub fn run(target: &Target, json: bool, local: bool, sample: Duration) -> Res {
    if local {
        let Some((config, instance)) = target.local_instance() else {
            return Err(Failure::Other(
                "--local needs --config FILE or --instance NAME".into(),
            ));
        };
        return status_local::run(config, instance, json, sample);
    }
    let rt = runtime()?;
    let answer = rt.block_on(async {
        let mut api = target.connect().await?;
        let st = api
            .call(|mut c| async move { c.get_status(pb::GetStatusRequest {}).await })
            .await?;
        Ok::<_, Failure>((api.shown, st))
    });
    match answer {
        Ok((shown, st)) => {
            let view = StatusView::new(shown, &st);
            output::print(&view, json)?;
            Ok(exit_code(&view))
        }
        Err(Failure::Unreachable(why)) => {
            let Some((config, instance)) = target.local_instance() else {
                return Err(Failure::Unreachable(why));
            };
            if let Err(e) = target.open_local() {
                return Err(both_away(&why, e));
            }
            output::note(
                &format!("{why}; showing border-dp's state region on this machine"),
                json,
            );
            status_local::run(config, instance, json, sample)
        }
        Err(e) => Err(e),
    }
}

/// border-mgmt is away and the state region could not be read either: one
/// line with both reasons; unreachable when border-dp is not there either.
pub fn both_away(mgmt: &str, local: Failure) -> Failure {
    match local {
        Failure::Unreachable(e) => Failure::Unreachable(format!("{mgmt}; and {e}")),
        Failure::Denied(e) | Failure::Other(e) => Failure::Other(format!("{mgmt}; and {e}")),
    }
}

/// A backend state as borderctl shows it: `UP`, `DOWN`, `DRAINING`,
/// `KILLED`.
pub fn state_name(s: i32) -> &'static str {
    match pb::BackendState::try_from(s) {
        Ok(pb::BackendState::Up) => "UP",
        Ok(pb::BackendState::Down) => "DOWN",
        Ok(pb::BackendState::Draining) => "DRAINING",
        Ok(pb::BackendState::Killed) => "KILLED",
        _ => "UNKNOWN",
    }
}

/// One backend of a VIP (status, drain/undrain/weight, backend events).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct BackendView {
    pub address: String,
    pub id: u32,
    pub state: &'static str,
    pub reason: String,
    pub weight: u32,
    pub config_weight: u32,
    pub weight_overridden: bool,
    pub drained: bool,
    pub killed: bool,
    pub ring_slots: u32,
    pub zone: String,
}

impl From<&pb::BackendStatus> for BackendView {
    fn from(b: &pb::BackendStatus) -> BackendView {
        BackendView {
            address: b.address.clone(),
            id: b.id,
            state: state_name(b.state),
            reason: b.reason.clone(),
            weight: b.weight,
            config_weight: b.config_weight,
            weight_overridden: b.weight_overridden,
            drained: b.drained,
            killed: b.killed,
            ring_slots: b.ring_slots,
            zone: b.zone.clone(),
        }
    }
}

impl BackendView {
    /// `3`, or `0 (config 3)` when the operator overrode it.
    pub fn weight_text(&self) -> String {
        if self.weight_overridden {
            format!("{} (config {})", self.weight, self.config_weight)
        } else {
            self.weight.to_string()
        }
    }

    /// `10.0.0.1:80: DRAINING, weight 3, 0 ring slots: why`.
    pub fn summary(&self) -> String {
        format!(
            "{}: {}, weight {}, {} ring slots: {}",
            self.address,
            self.state,
            self.weight_text(),
            self.ring_slots,
            self.reason
        )
    }
}

/// GetStatus as borderctl shows it.
#[derive(Debug, Serialize)]
pub struct StatusView {
    pub source: &'static str,
    pub server: String,
    pub instance: String,
    pub zone: String,
    /// border-dp runs and every worker is alive (the exit status).
    pub healthy: bool,
    pub publisher: PublisherView,
    pub dataplane: DataplaneView,
    pub vips: Vec<VipView>,
    /// BGP (docs/bgp.md); absent without [mgmt.bgp].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bgp: Option<BgpView>,
}

#[derive(Debug, Serialize)]
pub struct PublisherView {
    pub tables_path: String,
    pub published_generation: u64,
    pub arena_bytes: u64,
    pub arena_free_bytes: u64,
    pub pending: String,
    pub last_error: String,
    pub config_origin: String,
    pub config_applied_unix_ms: u64,
    /// The intent file the running config was restored from at start.
    pub config_restored_from: String,
    /// Where border-mgmt saves the applied config, drains and weights.
    pub state_dir: String,
}

#[derive(Debug, Serialize)]
pub struct DataplaneView {
    pub present: bool,
    pub pid: u32,
    pub pid_alive: bool,
    pub run_state: String,
    pub problem: String,
    pub findings: Vec<FindingView>,
    pub workers: Vec<WorkerView>,
}

#[derive(Debug, Serialize)]
pub struct FindingView {
    pub kind: String,
    pub worker: u32,
    pub detail: String,
    /// The port a port's finding concerns (empty for a worker's).
    pub port: String,
}

#[derive(Debug, Serialize)]
pub struct WorkerView {
    pub index: u32,
    pub lcore: u64,
    pub applied_generation: u64,
    pub alive: bool,
    pub heartbeat: u64,
    pub heartbeat_age_ms: u64,
}

#[derive(Debug, Serialize)]
pub struct VipView {
    pub name: String,
    pub address: String,
    pub protocol: String,
    pub mode: String,
    pub fail_open: bool,
    pub zone_local: bool,
    pub backends: Vec<BackendView>,
}

impl StatusView {
    pub fn new(server: String, st: &pb::GetStatusResponse) -> StatusView {
        let p = st.publisher.clone().unwrap_or_default();
        let dp = st.dataplane.clone().unwrap_or_default();
        let dataplane = DataplaneView {
            present: dp.present,
            pid: dp.pid,
            pid_alive: dp.pid_alive,
            run_state: dp.run_state,
            problem: dp.problem,
            findings: dp
                .findings
                .into_iter()
                .map(|f| FindingView {
                    kind: f.kind,
                    worker: f.worker,
                    detail: f.detail,
                    port: f.port,
                })
                .collect(),
            workers: dp
                .workers
                .into_iter()
                .map(|w| WorkerView {
                    index: w.index,
                    lcore: w.lcore,
                    applied_generation: w.applied_generation,
                    alive: w.alive,
                    heartbeat: w.heartbeat,
                    heartbeat_age_ms: w.heartbeat_age_ms,
                })
                .collect(),
        };
        StatusView {
            source: "border-mgmt",
            server,
            instance: st.instance.clone(),
            zone: st.zone.clone(),
            healthy: dataplane.healthy(),
            publisher: PublisherView {
                tables_path: p.tables_path,
                published_generation: p.published_generation,
                arena_bytes: p.arena_bytes,
                arena_free_bytes: p.arena_free_bytes,
                pending: p.pending,
                last_error: p.last_error,
                config_origin: p.config_origin,
                config_applied_unix_ms: p.config_applied_unix_ms,
                config_restored_from: p.config_restored_from,
                state_dir: p.state_dir,
            },
            dataplane,
            vips: st.vips.iter().map(VipView::from).collect(),
            bgp: BgpView::from_pb(st.bgp.as_ref()),
        }
    }
}

impl From<&pb::VipStatus> for VipView {
    fn from(v: &pb::VipStatus) -> VipView {
        VipView {
            name: v.name.clone(),
            address: v.address.clone(),
            protocol: v.protocol.clone(),
            mode: v.mode.clone(),
            fail_open: v.fail_open,
            zone_local: v.zone_local,
            backends: v.backends.iter().map(BackendView::from).collect(),
        }
    }
}

impl DataplaneView {
    fn healthy(&self) -> bool {
        self.present
            && self.pid_alive
            && self.run_state == "running"
            && !self.workers.is_empty()
            && self.workers.iter().all(|w| w.alive)
    }
}

impl Render for StatusView {
    fn render(&self) -> Text {
        let mut t = self.summary();
        if !self.dataplane.workers.is_empty() {
            t.blank();
            t.table(&self.workers_table());
        }
        t.blank();
        if self.vips.is_empty() {
            t.line("(no VIPs configured)");
            return t;
        }
        t.table(&self.vips_table());
        t.blank();
        t.table(&self.backends_table());
        if let Some(b) = &self.bgp {
            t.blank();
            b.render(&mut t);
        }
        t
    }
}

impl StatusView {
    /// The lines above the tables: instance, publisher, config, border-dp.
    fn summary(&self) -> Text {
        let (p, dp) = (&self.publisher, &self.dataplane);
        let mut t = Text::default();
        let zone = if self.zone.is_empty() {
            String::new()
        } else {
            format!(" (zone {})", self.zone)
        };
        t.line(format!("instance      {}{zone}", self.instance));
        t.line(format!(
            "border-mgmt   {}: generation {} published; arena {} ({} free)",
            self.server,
            p.published_generation,
            human_bytes(p.arena_bytes),
            human_bytes(p.arena_free_bytes)
        ));
        t.line(format!(
            "config        {}, applied {}{}",
            p.config_origin,
            utc(p.config_applied_unix_ms),
            config_source(&p.config_restored_from, &p.state_dir)
        ));
        if !p.pending.is_empty() {
            t.line(format!(
                "pending       {} (border-mgmt retries by itself)",
                p.pending
            ));
        }
        if !p.last_error.is_empty() {
            t.line(format!("last error    {}", p.last_error));
        }
        if dp.present {
            t.line(format!(
                "border-dp     pid {} ({}), {}; {} worker{}",
                dp.pid,
                if dp.pid_alive { "alive" } else { "gone" },
                dp.run_state,
                dp.workers.len(),
                plural(dp.workers.len())
            ));
        } else {
            t.line("border-dp     not running (no state region)");
        }
        if !dp.problem.is_empty() {
            t.line(format!("              problem: {}", dp.problem));
        }
        for f in &dp.findings {
            let about = if f.port.is_empty() {
                format!("worker {}", f.worker)
            } else {
                format!("port {}", f.port)
            };
            t.line(format!("              {} ({about}): {}", f.kind, f.detail));
        }
        t
    }

    fn workers_table(&self) -> Table {
        let published = self.publisher.published_generation;
        let mut t = Table::new(&[
            ("WORKER", false),
            ("LCORE", true),
            ("GENERATION", true),
            ("ALIVE", false),
            ("HEARTBEAT AGE", true),
        ]);
        for w in &self.dataplane.workers {
            let generation = if w.applied_generation == published {
                w.applied_generation.to_string()
            } else {
                format!("{} (behind)", w.applied_generation)
            };
            t.row(vec![
                w.index.to_string(),
                w.lcore.to_string(),
                generation,
                yes_no(w.alive),
                format!("{} ms", w.heartbeat_age_ms),
            ]);
        }
        t
    }

    fn vips_table(&self) -> Table {
        let mut t = Table::new(&[
            ("VIP", false),
            ("ADDRESS", false),
            ("PROTO", false),
            ("MODE", false),
            ("BACKENDS UP", true),
            ("NOTE", false),
        ]);
        for v in &self.vips {
            let up = v.backends.iter().filter(|b| b.state == "UP").count();
            let mut note = Vec::new();
            if v.fail_open {
                note.push("fail-open: no backend eligible, every backend serves");
            }
            if v.zone_local {
                note.push("zone-local");
            }
            t.row(vec![
                v.name.clone(),
                v.address.clone(),
                v.protocol.clone(),
                v.mode.clone(),
                format!("{up}/{}", v.backends.len()),
                note.join("; "),
            ]);
        }
        t
    }

    fn backends_table(&self) -> Table {
        let mut t = Table::new(&[
            ("VIP", false),
            ("BACKEND", false),
            ("STATE", false),
            ("WEIGHT", true),
            ("SLOTS", true),
            ("ZONE", false),
            ("REASON", false),
        ]);
        for v in &self.vips {
            for b in &v.backends {
                let zone = if b.zone.is_empty() { "-" } else { &b.zone };
                t.row(vec![
                    v.name.clone(),
                    b.address.clone(),
                    b.state.to_string(),
                    b.weight_text(),
                    b.ring_slots.to_string(),
                    zone.to_string(),
                    b.reason.clone(),
                ]);
            }
        }
        t
    }
}

/// How the running config got there, after its origin and time: restored
/// from the saved intent at start, and where changes are saved.
fn config_source(restored_from: &str, state_dir: &str) -> String {
    match (restored_from, state_dir) {
        ("", "") => "; not saved (no state directory)".into(),
        ("", dir) => format!("; saved in {dir}"),
        (file, _) => format!("; restored at start from {file}"),
    }
}

/// The exit status `status` gives for a view.
pub fn exit_code(view: &StatusView) -> ExitCode {
    exit(view.healthy)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A running instance with one worker behind and one VIP whose second
    /// backend is drained and re-weighted.
    fn fixture() -> pb::GetStatusResponse {
        let backend =
            |address: &str, id, state: pb::BackendState, reason: &str| pb::BackendStatus {
                address: address.into(),
                id,
                state: state as i32,
                reason: reason.into(),
                weight: 1,
                config_weight: 1,
                ring_slots: 32,
                ..Default::default()
            };
        let mut drained = backend(
            "10.20.0.12:8080",
            2,
            pb::BackendState::Draining,
            "drained by the operator: e2e",
        );
        drained.drained = true;
        drained.ring_slots = 0;
        drained.weight = 0;
        drained.weight_overridden = true;
        drained.zone = "b".into();
        pb::GetStatusResponse {
            instance: "lab".into(),
            zone: "a".into(),
            publisher: Some(pb::PublisherStatus {
                tables_path: "/dev/shm/border-lab-tables".into(),
                published_generation: 7,
                arena_bytes: 4 << 20,
                arena_free_bytes: 3 << 20,
                config_origin: "lab.toml".into(),
                config_applied_unix_ms: 951_782_400_123,
                ..Default::default()
            }),
            dataplane: Some(pb::DataplaneStatus {
                present: true,
                pid: 42,
                pid_alive: true,
                run_state: "running".into(),
                workers: vec![
                    pb::WorkerStatus {
                        index: 0,
                        lcore: 1,
                        applied_generation: 7,
                        alive: true,
                        heartbeat: 1000,
                        heartbeat_age_ms: 0,
                    },
                    pb::WorkerStatus {
                        index: 1,
                        lcore: 2,
                        applied_generation: 6,
                        alive: true,
                        heartbeat: 990,
                        heartbeat_age_ms: 1,
                    },
                ],
                ..Default::default()
            }),
            vips: vec![pb::VipStatus {
                name: "web".into(),
                address: "10.10.0.1:80".into(),
                protocol: "tcp".into(),
                mode: "fullnat".into(),
                backends: vec![
                    backend("10.20.0.11:8080", 1, pb::BackendState::Up, "up"),
                    drained,
                ],
                ..Default::default()
            }],
            bgp: None,
        }
    }

    #[test]
    fn status_json_has_the_keys_scripts_read() {
        let view = StatusView::new("unix:///run/border/lab.sock".into(), &fixture());
        let v = serde_json::to_value(&view).unwrap();
        assert_eq!(v["source"], "border-mgmt");
        assert_eq!(v["server"], "unix:///run/border/lab.sock");
        assert_eq!(v["healthy"], true);
        assert_eq!(v["publisher"]["published_generation"], 7);
        assert_eq!(v["publisher"]["config_applied_unix_ms"], 951_782_400_123u64);
        assert_eq!(v["dataplane"]["pid"], 42);
        assert_eq!(v["dataplane"]["workers"][1]["applied_generation"], 6);
        assert_eq!(v["dataplane"]["workers"][0]["alive"], true);
        assert_eq!(v["dataplane"]["findings"], serde_json::json!([]));
        let be = &v["vips"][0]["backends"][1];
        assert_eq!(be["address"], "10.20.0.12:8080");
        assert_eq!(be["state"], "DRAINING");
        assert_eq!(be["ring_slots"], 0);
        assert_eq!(be["weight_overridden"], true);
        let keys: Vec<&str> = be.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "address",
                "config_weight",
                "drained",
                "id",
                "killed",
                "reason",
                "ring_slots",
                "state",
                "weight",
                "weight_overridden",
                "zone"
            ]
        );
    }

    #[test]
    fn status_text_shows_workers_behind_and_overridden_weights() {
        let view = StatusView::new("unix:///run/border/lab.sock".into(), &fixture());
        let text = view.render().to_string();
        let want = "\
instance      lab (zone a)
border-mgmt   unix:///run/border/lab.sock: generation 7 published; arena 4.0 MiB (3.0 MiB free)
config        lab.toml, applied 2000-02-29T00:00:00.123Z; not saved (no state directory)
border-dp     pid 42 (alive), running; 2 workers

WORKER  LCORE  GENERATION  ALIVE  HEARTBEAT AGE
0           1           7  yes             0 ms
1           2  6 (behind)  yes             1 ms

VIP  ADDRESS       PROTO  MODE     BACKENDS UP  NOTE
web  10.10.0.1:80  tcp    fullnat          1/2

VIP  BACKEND          STATE           WEIGHT  SLOTS  ZONE  REASON
web  10.20.0.11:8080  UP                   1     32  -     up
web  10.20.0.12:8080  DRAINING  0 (config 1)      0  b     drained by the operator: e2e";
        assert_eq!(text, want);
        assert_eq!(exit_code(&view), ExitCode::SUCCESS);
    }

    #[test]
    fn status_says_where_the_running_config_came_from() {
        let mut st = fixture();
        let p = st.publisher.as_mut().unwrap();
        p.config_origin = "<api>".into();
        p.config_restored_from = "/var/lib/border/lab/intent.json".into();
        p.state_dir = "/var/lib/border/lab".into();
        let view = StatusView::new("x".into(), &st);
        let text = view.render().to_string();
        assert!(
            text.contains("\nconfig        <api>, applied 2000-02-29T00:00:00.123Z; restored at start from /var/lib/border/lab/intent.json\n"),
            "{text}"
        );
        let v = serde_json::to_value(&view).unwrap();
        assert_eq!(
            v["publisher"]["config_restored_from"],
            "/var/lib/border/lab/intent.json"
        );
        assert_eq!(v["publisher"]["state_dir"], "/var/lib/border/lab");
        st.publisher.as_mut().unwrap().config_restored_from.clear();
        let text = StatusView::new("x".into(), &st).render().to_string();
        assert!(
            text.contains(".123Z; saved in /var/lib/border/lab\n"),
            "{text}"
        );
    }

    #[test]
    fn a_stalled_worker_fails_the_status() {
        let mut st = fixture();
        st.dataplane.as_mut().unwrap().workers[1].alive = false;
        let view = StatusView::new("x".into(), &st);
        assert!(!view.healthy);
        assert_eq!(exit_code(&view), ExitCode::FAILURE);
        st.dataplane = None;
        let view = StatusView::new("x".into(), &st);
        assert!(!view.healthy);
        assert!(view
            .render()
            .to_string()
            .contains("border-dp     not running (no state region)"));
    }
}
