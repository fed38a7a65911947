//! The one place where border-mgmt's own types ([`crate::model`], the
//! health checker's) and `border.v1`'s protobuf types meet: `From` impls
//! and converters used by the gRPC services ([`crate::service`],
//! [`crate::health::service`]).

use std::net::SocketAddr;

use conf::tables::BackendState;

use crate::bgp::BgpReport;
use crate::findings::{Finding, Subject};
use crate::health::engine::{Change, HealthState, Key, Observation, WeightObs};
use crate::health::Snapshot;
use crate::model::{
    BackendStats, BackendStatus, ChangeOutcome, DpSnap, Event, EventKind, FlowStats,
    PublisherStatus, RunningConfig, Stats, Status, VipStats, VipStatus,
};
use crate::pb;
use crate::store::BackendAction;

impl From<conf::conns::LiveConn> for pb::Connection {
    fn from(c: conf::conns::LiveConn) -> pb::Connection {
        let at = |ip: std::net::IpAddr, port| SocketAddr::new(ip, port).to_string();
        let elapsed = |since: u64| c.now_ms.saturating_sub(since);
        pb::Connection {
            worker: c.worker.into(),
            conn_id: c.conn_id,
            protocol: match c.proto {
                6 => "tcp".into(),
                17 => "udp".into(),
                p => p.to_string(),
            },
            client: at(c.client_ip(), c.client_port),
            vip: at(c.vip_ip(), c.vip_port),
            backend: at(c.backend_ip(), c.backend_port),
            local: at(c.local_ip(), c.local_port),
            mode: if c.full_nat() { "full_nat" } else { "dnat" }.into(),
            state: c.state_name().into(),
            age_ms: elapsed(c.created_ms),
            idle_ms: elapsed(c.last_seen_ms),
            expires_in_ms: c.expires_ms.saturating_sub(c.now_ms),
            metered: c.metered(),
            packets_to_backend: c.packets[conf::records::CLIENT_TO_BACKEND],
            packets_to_client: c.packets[conf::records::BACKEND_TO_CLIENT],
            bytes_to_backend: c.octets[conf::records::CLIENT_TO_BACKEND],
            bytes_to_client: c.octets[conf::records::BACKEND_TO_CLIENT],
            proxy: c.proxy_status().into(),
        }
    }
}

impl From<BackendState> for pb::BackendState {
    fn from(s: BackendState) -> pb::BackendState {
        match s {
            BackendState::Up => pb::BackendState::Up,
            BackendState::Down => pb::BackendState::Down,
            BackendState::Draining => pb::BackendState::Draining,
            BackendState::Killed => pb::BackendState::Killed,
        }
    }
}

impl From<BackendStatus> for pb::BackendStatus {
    fn from(b: BackendStatus) -> pb::BackendStatus {
        pb::BackendStatus {
            address: b.address.to_string(),
            id: b.id,
            state: pb::BackendState::from(b.state) as i32,
            reason: b.reason,
            weight: b.weight,
            config_weight: b.config_weight,
            weight_overridden: b.weight_overridden,
            drained: b.drained,
            killed: b.killed,
            ring_slots: b.ring_slots,
            zone: b.zone.unwrap_or_default(),
        }
    }
}

impl From<VipStatus> for pb::VipStatus {
    fn from(v: VipStatus) -> pb::VipStatus {
        pb::VipStatus {
            name: v.name,
            address: v.address.to_string(),
            protocol: v.protocol.to_string(),
            mode: v.mode.to_string(),
            fail_open: v.fail_open,
            zone_local: v.zone_local,
            backends: v.backends.into_iter().map(Into::into).collect(),
        }
    }
}

/// A path as text; none is empty.
fn path_text(p: Option<std::path::PathBuf>) -> String {
    p.map(|p| p.display().to_string()).unwrap_or_default()
}

impl From<PublisherStatus> for pb::PublisherStatus {
    fn from(p: PublisherStatus) -> pb::PublisherStatus {
        pb::PublisherStatus {
            tables_path: p.tables_path.display().to_string(),
            published_generation: p.published_generation,
            arena_bytes: p.arena_bytes,
            arena_free_bytes: p.arena_free_bytes,
            pending: p.pending.unwrap_or_default(),
            last_error: p.last_error.unwrap_or_default(),
            config_origin: p.config_origin,
            config_applied_unix_ms: p.config_applied_unix_ms,
            config_restored_from: path_text(p.config_restored_from),
            state_dir: path_text(p.state_dir),
        }
    }
}

impl From<Finding> for pb::Finding {
    fn from(f: Finding) -> pb::Finding {
        let (worker, port) = f.subject.wire();
        pb::Finding {
            worker,
            port: port.to_owned(),
            kind: f.kind,
            detail: f.evidence,
        }
    }
}

/// A finding GetStatus carried, as border-mgmt made it (a port's finding
/// names its port, any other its worker; the next step by its kind).
impl From<pb::Finding> for Finding {
    fn from(f: pb::Finding) -> Finding {
        let subject = if f.port.is_empty() {
            Subject::Worker {
                index: f.worker,
                lcore: None,
            }
        } else {
            Subject::Port(f.port)
        };
        Finding::of_status(&f.kind, subject, f.detail)
    }
}

/// The dataplane at one look and the findings read off its counters.
fn dataplane_status(s: &DpSnap, findings: Vec<Finding>) -> pb::DataplaneStatus {
    pb::DataplaneStatus {
        present: s.present,
        pid: s.pid,
        pid_alive: s.pid_alive,
        run_state: s.run_state_name(),
        workers: s
            .workers
            .iter()
            .enumerate()
            .map(|(i, w)| pb::WorkerStatus {
                index: i as u32,
                lcore: w.lcore,
                applied_generation: w.applied_generation,
                alive: w.alive,
                heartbeat: w.heartbeat,
                heartbeat_age_ms: w.heartbeat_age.as_millis() as u64,
            })
            .collect(),
        problem: s.problem.clone().unwrap_or_default(),
        findings: findings.into_iter().map(Into::into).collect(),
    }
}

impl From<Status> for pb::GetStatusResponse {
    fn from(s: Status) -> pb::GetStatusResponse {
        pb::GetStatusResponse {
            instance: s.instance,
            zone: s.zone.unwrap_or_default(),
            publisher: Some(s.publisher.into()),
            dataplane: Some(dataplane_status(&s.dataplane, s.findings)),
            vips: s.vips.into_iter().map(Into::into).collect(),
            bgp: s.bgp.map(Into::into),
        }
    }
}

impl From<BgpReport> for pb::BgpStatus {
    fn from(r: BgpReport) -> pb::BgpStatus {
        let v = r.view;
        pb::BgpStatus {
            configured: true,
            api: v.api,
            connected: v.connected,
            last_error: v.last_error.unwrap_or_default(),
            errors: v.errors,
            maintenance: r.maintenance,
            active_connections: r.active_connections,
            retry_in_ms: v.retry_in_ms,
            neighbours: v
                .neighbours
                .into_iter()
                .map(|n| pb::BgpNeighbour {
                    address: n.address,
                    peer_asn: n.peer_asn,
                    state: n.state,
                })
                .collect(),
            vips: v
                .vips
                .into_iter()
                .map(|r| pb::VipRoute {
                    name: r.name,
                    prefix: r.prefix,
                    next_hop: r.next_hop,
                    announced: r.announced,
                    reason: r.reason,
                })
                .collect(),
        }
    }
}

impl From<FlowStats> for pb::FlowStats {
    fn from(f: FlowStats) -> pb::FlowStats {
        pb::FlowStats {
            packets: f.packets,
            bytes: f.bytes,
            new_connections: f.new_connections,
            active_connections: f.active_connections,
        }
    }
}

impl From<BackendStats> for pb::BackendStats {
    fn from(b: BackendStats) -> pb::BackendStats {
        pb::BackendStats {
            address: b.address.to_string(),
            id: b.id,
            stats: Some(b.flows.into()),
        }
    }
}

impl From<VipStats> for pb::VipStats {
    fn from(v: VipStats) -> pb::VipStats {
        pb::VipStats {
            name: v.name,
            stats: Some(v.flows.into()),
            backends: v.backends.into_iter().map(Into::into).collect(),
        }
    }
}

impl From<Stats> for pb::GetStatsResponse {
    fn from(s: Stats) -> pb::GetStatsResponse {
        pb::GetStatsResponse {
            dataplane_present: s.dataplane_present,
            counters: s
                .counters()
                .iter()
                .map(|c| pb::CounterInfo {
                    name: c.name().to_string(),
                    help: c.help().to_string(),
                    drop: c.is_drop(),
                    gauge: c.is_gauge(),
                })
                .collect(),
            totals: s.totals(),
            workers: s
                .workers
                .into_iter()
                .enumerate()
                .map(|(i, w)| pb::WorkerCounters {
                    index: i as u32,
                    lcore: w.lcore,
                    values: w.values,
                })
                .collect(),
            vips: s.vips.into_iter().map(Into::into).collect(),
            local_pools: s
                .local_pools
                .iter()
                .map(|p| pb::LocalPoolStats {
                    address: p.addr.to_string(),
                    tuples: p.tuples,
                    in_use: p.in_use,
                    resting: p.resting,
                })
                .collect(),
            ports: s
                .ports
                .iter()
                .map(|p| pb::PortStats {
                    name: p.name.clone(),
                    role: p.role.name().to_string(),
                    updated_unix_ms: p.updated_unix_ms,
                    stats: conf::state::PortStat::ALL
                        .iter()
                        .map(|s| (s.name().to_string(), p.get(*s)))
                        .collect(),
                })
                .collect(),
        }
    }
}

impl From<RunningConfig> for pb::GetConfigResponse {
    fn from(c: RunningConfig) -> pb::GetConfigResponse {
        pb::GetConfigResponse {
            config_toml: c.text,
            origin: c.origin,
            applied_unix_ms: c.applied_unix_ms,
            generation: c.generation,
        }
    }
}

impl From<ChangeOutcome> for pb::ApplyConfigResponse {
    fn from(o: ChangeOutcome) -> pb::ApplyConfigResponse {
        pb::ApplyConfigResponse {
            generation: o.generation,
            changed: o.changed,
            pending: o.pending.unwrap_or_default(),
        }
    }
}

impl From<(ChangeOutcome, BackendStatus)> for pb::SetBackendResponse {
    fn from((o, b): (ChangeOutcome, BackendStatus)) -> pb::SetBackendResponse {
        pb::SetBackendResponse {
            generation: o.generation,
            changed: o.changed,
            pending: o.pending.unwrap_or_default(),
            backend: Some(b.into()),
        }
    }
}

impl From<pb::set_backend_request::Action> for BackendAction {
    fn from(a: pb::set_backend_request::Action) -> BackendAction {
        use pb::set_backend_request::Action;
        match a {
            Action::Weight(w) => BackendAction::Weight(w),
            Action::Drain(_) => BackendAction::Drain,
            Action::Undrain(_) => BackendAction::Undrain,
            Action::Kill(_) => BackendAction::Kill,
            Action::ResetWeight(_) => BackendAction::ResetWeight,
        }
    }
}

/// The API event of a health checker change; `None` for
/// [`Change::Backend`], which is reported as `BackendChanged`.
pub fn health_event(c: Change) -> Option<pb::HealthEvent> {
    use pb::health_event::Kind;
    let kind = match c {
        Change::Backend(_) => return None,
        Change::FailOpen { vip, on, reason } => Kind::FailOpen(pb::VipFailOpen {
            vip,
            fail_open: on,
            reason,
        }),
        Change::WeightFallback { vip, reason } => Kind::WeightFallback(pb::WeightFallback {
            vip,
            fallback: reason.is_some(),
            reason: reason.unwrap_or_default(),
        }),
        Change::Witness { checker, reason } => Kind::Witness(pb::WitnessChanged {
            checker,
            unreliable: reason.is_some(),
            reason: reason.unwrap_or_default(),
        }),
    };
    Some(pb::HealthEvent { kind: Some(kind) })
}

impl From<EventKind> for pb::event::Kind {
    fn from(k: EventKind) -> pb::event::Kind {
        use pb::event::Kind;
        match k {
            EventKind::Published {
                generation,
                cause,
                blocks_written,
                bytes_written,
                arena_free_bytes,
            } => Kind::Published(pb::Published {
                generation,
                cause,
                blocks_written,
                bytes_written,
                arena_free_bytes,
            }),
            EventKind::PublishFailed { error, will_retry } => {
                Kind::PublishFailed(pb::PublishFailed { error, will_retry })
            }
            EventKind::TablesRefused {
                worker,
                lcore,
                refused_total,
            } => Kind::TablesRefused(pb::TablesRefused {
                worker,
                lcore,
                refused_total,
            }),
            EventKind::WorkerLiveness {
                worker,
                lcore,
                alive,
                applied_generation,
            } => Kind::WorkerLiveness(pb::WorkerLiveness {
                worker,
                lcore,
                alive,
                applied_generation,
            }),
            EventKind::Dataplane {
                present,
                pid,
                pid_alive,
                run_state,
            } => Kind::Dataplane(pb::DataplaneChanged {
                present,
                pid,
                pid_alive,
                run_state,
            }),
            EventKind::ConfigApplied {
                origin,
                generation,
                changed,
            } => Kind::ConfigApplied(pb::ConfigApplied {
                origin,
                generation,
                changed,
            }),
            EventKind::ConfigRejected { origin, error } => {
                Kind::ConfigRejected(pb::ConfigRejected { origin, error })
            }
            EventKind::BackendChanged {
                vip,
                backend,
                cause,
            } => Kind::BackendChanged(pb::BackendChanged {
                vip,
                backend: Some(backend.into()),
                cause: cause.to_string(),
            }),
            // The manager never emits Change::Backend (see EventKind::Health).
            EventKind::Health(c) => Kind::Health(health_event(c).unwrap_or_default()),
            EventKind::Bgp(b) => Kind::Bgp(pb::BgpEvent {
                what: b.what,
                subject: b.subject,
                state: b.state,
                reason: b.reason,
            }),
        }
    }
}

impl From<Event> for pb::Event {
    fn from(e: Event) -> pb::Event {
        pb::Event {
            seq: e.seq,
            unix_ms: e.unix_ms,
            kind: Some(e.kind.into()),
        }
    }
}

/// The event telling a subscriber that fell behind how many it missed.
pub fn lagged(missed: u64, unix_ms: u64) -> pb::Event {
    pb::Event {
        seq: 0,
        unix_ms,
        kind: Some(pb::event::Kind::Lagged(pb::Lagged { missed })),
    }
}

// ---- border.v1.BorderHealth ------------------------------------------------

fn pb_state(s: Option<HealthState>) -> pb::HealthState {
    match s {
        None => pb::HealthState::Unspecified,
        Some(HealthState::Up) => pb::HealthState::Up,
        Some(HealthState::Down) => pb::HealthState::Down,
    }
}

/// An observation as sent to peers.
pub fn observation_to_pb(k: &Key, o: &Observation, age_ms: u64) -> pb::Observation {
    let (has_weight, weight, weight_error) = match &o.weight {
        Some(WeightObs::Value(w)) => (true, *w, String::new()),
        Some(WeightObs::Invalid(e)) => (false, 0, e.clone()),
        None => (false, 0, String::new()),
    };
    pb::Observation {
        vip: k.0.clone(),
        backend: k.1.to_string(),
        state: pb_state(o.state) as i32,
        has_result: o.last_ok.is_some(),
        last_ok: o.last_ok == Some(true),
        streak: o.streak,
        reason: o.reason.clone(),
        last_failure: o.last_failure.clone(),
        age_ms,
        has_weight,
        weight,
        weight_error,
    }
}

/// An observation received from a peer at `now` (engine ms). `None` for
/// one that does not parse. Strings are capped: a peer cannot make us keep
/// unbounded text.
pub fn observation_from_pb(p: &pb::Observation, now: u64) -> Option<(Key, Observation)> {
    let backend: SocketAddr = p.backend.parse().ok()?;
    let cap = |s: &str| s.chars().take(200).collect::<String>();
    let state = match pb::HealthState::try_from(p.state) {
        Ok(pb::HealthState::Up) => Some(HealthState::Up),
        Ok(pb::HealthState::Down) => Some(HealthState::Down),
        _ => None,
    };
    let weight = if p.has_weight {
        Some(WeightObs::Value(p.weight))
    } else if !p.weight_error.is_empty() {
        Some(WeightObs::Invalid(cap(&p.weight_error)))
    } else {
        None
    };
    Some((
        (cap(&p.vip), backend),
        Observation {
            state,
            last_ok: p.has_result.then_some(p.last_ok),
            streak: p.streak,
            reason: cap(&p.reason),
            last_failure: cap(&p.last_failure),
            at_ms: now.saturating_sub(p.age_ms),
            weight,
        },
    ))
}

impl From<&Snapshot> for pb::GetHealthResponse {
    /// GetHealth's answer.
    fn from(snap: &Snapshot) -> pb::GetHealthResponse {
        let mut vips: Vec<pb::VipHealth> = snap
            .vips
            .iter()
            .map(|(name, h)| pb::VipHealth {
                name: name.clone(),
                fail_open: h.fail_open,
                weight_fallback: h.weight_fallback.clone().unwrap_or_default(),
                backends: Vec::new(),
            })
            .collect();
        for ((vip, addr), v) in &snap.verdicts {
            if let Some(vh) = vips.iter_mut().find(|x| x.name == *vip) {
                vh.backends.push(pb::BackendHealth {
                    address: addr.to_string(),
                    state: pb_state(Some(v.state)) as i32,
                    no_data: v.no_data,
                    has_weight: v.weight.is_some(),
                    weight: v.weight.unwrap_or(0),
                    reason: v.reason.clone(),
                    since_unix_ms: v.since_unix_ms,
                    changes_unix_ms: v.changes_unix_ms.clone(),
                    checkers: v.checkers.clone(),
                    detail: v.detail.clone(),
                });
            }
        }
        pb::GetHealthResponse {
            checker: snap.checker.clone(),
            quorum: snap.quorum,
            checkers: snap
                .witnesses
                .iter()
                .map(|w| pb::CheckerStatus {
                    id: w.id.clone(),
                    address: w.address.clone(),
                    fresh: w.fresh,
                    unreliable: w.unreliable.clone().unwrap_or_default(),
                    error: w.error.clone().unwrap_or_default(),
                })
                .collect(),
            vips,
        }
    }
}
