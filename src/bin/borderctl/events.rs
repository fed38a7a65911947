//! `borderctl events`: border-mgmt's WatchEvents stream, one line (or one
//! JSON object) per event, until interrupted, `--count` events, or the
//! stream ends.

use std::process::ExitCode;

use mgmt::pb;
use pb::event::Kind;
use serde::Serialize;

use crate::cli::Target;
use crate::conn::{one_line, runtime, status_failure, Failure, Res};
use crate::output::{self, human_bytes, plural, utc, Render, Text};
use crate::status::BackendView;
use crate::PROGRAM;

pub fn run(target: &Target, json: bool, count: Option<u64>) -> Res {
    let rt = runtime()?;
    rt.block_on(async {
        let mut api = target.connect().await?;
        let shown = api.shown.clone();
        let mut stream = api
            .call(|mut c| async move { c.watch_events(pb::WatchEventsRequest {}).await })
            .await?;
        if !json {
            eprintln!("{PROGRAM}: following the events of border-mgmt at {shown} (Ctrl-C to stop)");
        }
        if count == Some(0) {
            return Ok(ExitCode::SUCCESS);
        }
        let mut seen = 0u64;
        loop {
            match stream.message().await {
                Ok(Some(ev)) => {
                    output::print_line(&EventView::from(&ev), json)?;
                    seen += 1;
                    if count.is_some_and(|n| seen >= n) {
                        return Ok(ExitCode::SUCCESS);
                    }
                }
                Ok(None) => {
                    return Err(Failure::Unreachable(format!(
                        "border-mgmt at {shown} ended the event stream (it stopped)"
                    )))
                }
                Err(st) => return Err(status_failure(&shown, &st)),
            }
        }
    })
}

/// One event: `seq`, `unix_ms`, `kind` and the kind's fields, flat.
#[derive(Debug, Serialize)]
pub struct EventView {
    pub seq: u64,
    pub unix_ms: u64,
    #[serde(flatten)]
    pub what: EventKind,
}

#[derive(Debug, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EventKind {
    Published {
        generation: u64,
        cause: String,
        blocks_written: u32,
        bytes_written: u64,
        arena_free_bytes: u64,
    },
    PublishFailed {
        error: String,
        will_retry: bool,
    },
    TablesRefused {
        worker: u32,
        lcore: u64,
        refused_total: u64,
    },
    WorkerLiveness {
        worker: u32,
        lcore: u64,
        alive: bool,
        applied_generation: u64,
    },
    Dataplane {
        present: bool,
        pid: u32,
        pid_alive: bool,
        run_state: String,
    },
    ConfigApplied {
        origin: String,
        generation: u64,
        changed: bool,
    },
    ConfigRejected {
        origin: String,
        error: String,
    },
    BackendChanged {
        vip: String,
        cause: String,
        backend: Option<BackendView>,
    },
    Lagged {
        missed: u64,
    },
    Health {
        detail: String,
    },
    /// BGP (docs/bgp.md): gobgpd connection, a neighbour's session, a VIP
    /// route, maintenance.
    Bgp {
        what: String,
        subject: String,
        state: String,
        reason: String,
    },
    /// A kind this borderctl does not know (a newer border-mgmt).
    Unknown,
}

impl From<&pb::Event> for EventView {
    fn from(ev: &pb::Event) -> EventView {
        let what = match &ev.kind {
            Some(Kind::Published(p)) => EventKind::Published {
                generation: p.generation,
                cause: p.cause.clone(),
                blocks_written: p.blocks_written,
                bytes_written: p.bytes_written,
                arena_free_bytes: p.arena_free_bytes,
            },
            Some(Kind::PublishFailed(p)) => EventKind::PublishFailed {
                error: p.error.clone(),
                will_retry: p.will_retry,
            },
            Some(Kind::TablesRefused(t)) => EventKind::TablesRefused {
                worker: t.worker,
                lcore: t.lcore,
                refused_total: t.refused_total,
            },
            Some(Kind::WorkerLiveness(w)) => EventKind::WorkerLiveness {
                worker: w.worker,
                lcore: w.lcore,
                alive: w.alive,
                applied_generation: w.applied_generation,
            },
            Some(Kind::Dataplane(d)) => EventKind::Dataplane {
                present: d.present,
                pid: d.pid,
                pid_alive: d.pid_alive,
                run_state: d.run_state.clone(),
            },
            Some(Kind::ConfigApplied(c)) => EventKind::ConfigApplied {
                origin: c.origin.clone(),
                generation: c.generation,
                changed: c.changed,
            },
            Some(Kind::ConfigRejected(c)) => EventKind::ConfigRejected {
                origin: c.origin.clone(),
                error: c.error.clone(),
            },
            Some(Kind::BackendChanged(b)) => EventKind::BackendChanged {
                vip: b.vip.clone(),
                cause: b.cause.clone(),
                backend: b.backend.as_ref().map(BackendView::from),
            },
            Some(Kind::Lagged(l)) => EventKind::Lagged { missed: l.missed },
            Some(Kind::Health(h)) => EventKind::Health {
                detail: format!("{:?}", h.kind),
            },
            Some(Kind::Bgp(b)) => EventKind::Bgp {
                what: b.what.clone(),
                subject: b.subject.clone(),
                state: b.state.clone(),
                reason: b.reason.clone(),
            },
            None => EventKind::Unknown,
        };
        EventView {
            seq: ev.seq,
            unix_ms: ev.unix_ms,
            what,
        }
    }
}

impl Render for EventView {
    fn render(&self) -> Text {
        let mut t = Text::default();
        t.line(format!(
            "{} #{:<5} {}",
            utc(self.unix_ms),
            self.seq,
            self.what.describe()
        ));
        t
    }
}

impl EventKind {
    /// The event in words.
    fn describe(&self) -> String {
        match self {
            EventKind::Published {
                generation,
                cause,
                blocks_written,
                bytes_written,
                arena_free_bytes,
            } => format!(
                "published generation {generation} (cause {cause}; {blocks_written} block{}, {} written; arena {} free)",
                plural(*blocks_written as usize),
                human_bytes(*bytes_written),
                human_bytes(*arena_free_bytes)
            ),
            EventKind::PublishFailed { error, will_retry } => format!(
                "publish failed: {error}{}",
                if *will_retry { " (border-mgmt retries)" } else { "" }
            ),
            EventKind::TablesRefused { worker, lcore, refused_total } => format!(
                "tables refused: worker {worker} (lcore {lcore}) refused a published generation and kept its tables ({refused_total} refused in all)"
            ),
            EventKind::WorkerLiveness { worker, lcore, alive, applied_generation } => format!(
                "worker {worker} (lcore {lcore}) {} at generation {applied_generation}",
                if *alive { "is alive" } else { "stalled: its heartbeat stopped" }
            ),
            EventKind::Dataplane { present: false, .. } => "border-dp: no state region".to_string(),
            EventKind::Dataplane { pid, pid_alive, run_state, .. } => format!(
                "border-dp pid {pid} ({}), {run_state}",
                if *pid_alive { "alive" } else { "gone" }
            ),
            EventKind::ConfigApplied { origin, generation, changed: true } => {
                format!("config applied from {origin}: generation {generation}")
            }
            EventKind::ConfigApplied { origin, generation, changed: false } => {
                format!("config from {origin} equals the running one (generation {generation})")
            }
            EventKind::ConfigRejected { origin, error } => {
                format!("config from {origin} rejected: {}", one_line(error))
            }
            EventKind::BackendChanged { vip, cause, backend } => {
                let be = backend
                    .clone()
                    .unwrap_or_else(|| BackendView::from(&pb::BackendStatus::default()));
                format!("backend {vip} {} (cause {cause})", be.summary())
            }
            EventKind::Lagged { missed } => {
                format!("missed {missed} events (this client fell behind)")
            }
            EventKind::Health { detail } => format!("health: {detail}"),
            EventKind::Bgp { what, subject, state, reason } => {
                let subject = if subject.is_empty() { String::new() } else { format!(" {subject}") };
                let reason = if reason.is_empty() || reason == state { String::new() } else { format!(" ({reason})") };
                format!("bgp: {what}{subject} {state}{reason}")
            }
            EventKind::Unknown => "unknown event (a newer border-mgmt?)".to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: Kind) -> pb::Event {
        pb::Event {
            seq: 12,
            unix_ms: 951_782_400_123,
            kind: Some(kind),
        }
    }

    #[test]
    fn an_event_is_flat_json_with_its_kind() {
        let ev = event(Kind::TablesRefused(pb::TablesRefused {
            worker: 0,
            lcore: 1,
            refused_total: 4,
        }));
        let s = serde_json::to_string(&EventView::from(&ev)).unwrap();
        assert_eq!(
            s,
            r#"{"seq":12,"unix_ms":951782400123,"kind":"tables_refused","worker":0,"lcore":1,"refused_total":4}"#
        );
        let ev = pb::Event {
            kind: None,
            ..event(Kind::Lagged(pb::Lagged { missed: 1 }))
        };
        let s = serde_json::to_string(&EventView::from(&ev)).unwrap();
        assert_eq!(s, r#"{"seq":12,"unix_ms":951782400123,"kind":"unknown"}"#);
    }

    #[test]
    fn an_event_line_has_its_time_and_sequence() {
        let ev = event(Kind::Published(pb::Published {
            generation: 3,
            cause: "apply".into(),
            blocks_written: 1,
            bytes_written: 1536,
            arena_free_bytes: 4 << 20,
        }));
        assert_eq!(
            EventView::from(&ev).render().to_string(),
            "2000-02-29T00:00:00.123Z #12    published generation 3 (cause apply; 1 block, 1.5 KiB written; arena 4.0 MiB free)"
        );
        let ev = event(Kind::BackendChanged(pb::BackendChanged {
            vip: "web".into(),
            cause: "drain".into(),
            backend: None,
        }));
        let view = EventView::from(&ev);
        assert_eq!(
            serde_json::to_value(&view).unwrap()["backend"],
            serde_json::Value::Null
        );
        assert!(view
            .render()
            .to_string()
            .ends_with("backend web : UNKNOWN, weight 0, 0 ring slots:  (cause drain)"));
    }
}
