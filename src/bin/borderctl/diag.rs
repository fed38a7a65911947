//! `borderctl diag`: samples border-mgmt twice, `--window` apart (GetStatus
//! and GetStats, then GetHealth), runs the rules of `diag_rules` over the
//! samples and prints what they found, each with its evidence and the next
//! command. Exit 0 when nothing is flagged, 1 when something is, and 3
//! (`output::UNREACHABLE`) when border-mgmt cannot be asked.

use std::time::{Duration, Instant};

use mgmt::findings::{Finding, Severity};
use mgmt::pb;
use serde::Serialize;

use crate::cli::Target;
use crate::conn::{runtime, Api, Failure, Res};
use crate::diag_rules::{self, DropRate, Inputs, Sample, WorkerLoad};
use crate::output::{self, plural, Render, Table, Text};

pub fn run(target: &Target, window: Duration, json: bool) -> Res {
    let view = diagnose(target, window)?;
    output::print(&view, json)?;
    Ok(output::exit(view.healthy))
}

async fn sample(api: &mut Api) -> Result<Sample, Failure> {
    let status = api
        .call(|mut c| async move { c.get_status(pb::GetStatusRequest {}).await })
        .await?;
    let stats = api
        .call(|mut c| async move { c.get_stats(pb::GetStatsRequest {}).await })
        .await?;
    Ok(Sample { status, stats })
}

fn diagnose(target: &Target, window: Duration) -> Result<DiagView, Failure> {
    let rt = runtime()?;
    rt.block_on(async {
        let mut api = target.connect().await?;
        let first = sample(&mut api).await?;
        let started = Instant::now();
        tokio::time::sleep(window).await;
        let last = sample(&mut api).await?;
        let window_ms = started.elapsed().as_millis() as u64;
        // Without [[vip]] health checks the answer is empty; an older
        // border-mgmt without the service: no flapping rule.
        let health = api.call_health().await.ok();
        let inputs = Inputs {
            first: &first,
            last: &last,
            window_ms,
            health: health.as_ref(),
            now_unix_ms: now_unix_ms(),
        };
        Ok(DiagView::new(
            api.shown.clone(),
            window_ms,
            diag_rules::diagnose(&inputs),
        ))
    })
}

fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// What diag prints.
#[derive(Debug, Serialize)]
pub struct DiagView {
    pub server: String,
    pub window_ms: u64,
    /// No finding is a problem (the exit status is 0).
    pub healthy: bool,
    /// Problems first, then notes.
    pub findings: Vec<Finding>,
    /// Every drop counter that moved in the window.
    pub drops: Vec<DropRate>,
    pub workers: Vec<WorkerLoad>,
}

impl DiagView {
    pub fn new(server: String, window_ms: u64, d: diag_rules::Diagnosis) -> DiagView {
        let mut findings = d.findings;
        findings.sort_by_key(|f| f.severity == Severity::Note);
        DiagView {
            server,
            window_ms,
            healthy: findings.iter().all(|f| f.severity == Severity::Note),
            findings,
            drops: d.drops,
            workers: d.workers,
        }
    }
}

fn pct(n: u64, of: u64) -> String {
    (n * 100)
        .checked_div(of)
        .map_or_else(|| "-".into(), |p| format!("{p}%"))
}

impl Render for DiagView {
    fn render(&self) -> Text {
        let mut t = Text::default();
        let problems = self
            .findings
            .iter()
            .filter(|f| f.severity == Severity::Problem)
            .count();
        let secs = self.window_ms as f64 / 1000.0;
        if problems == 0 {
            t.line(format!(
                "border at {}: nothing flagged (sampled over {secs:.1} s)",
                self.server
            ));
        } else {
            t.line(format!(
                "border at {}: {problems} problem{} (sampled over {secs:.1} s)",
                self.server,
                plural(problems)
            ));
        }
        for f in &self.findings {
            t.blank();
            let tag = match f.severity {
                Severity::Problem => "PROBLEM",
                Severity::Note => "note",
            };
            t.line(format!("{tag} {}: {}", f.kind, f.subject));
            t.line(format!("  evidence: {}", f.evidence));
            t.line(format!("  next:     {}", f.next));
        }
        if !self.drops.is_empty() {
            t.blank();
            let mut d = Table::new(&[
                ("DROP COUNTER", false),
                ("IN WINDOW", true),
                ("PER S", true),
            ]);
            for r in &self.drops {
                d.row(vec![
                    r.counter.clone(),
                    r.dropped.to_string(),
                    format!("{:.1}", r.per_second),
                ]);
            }
            t.table(&d);
        }
        if !self.workers.is_empty() {
            t.blank();
            let mut w = Table::new(&[
                ("WORKER", false),
                ("LCORE", true),
                ("GENERATION", true),
                ("HEARTBEAT AGE", true),
                ("CONNTRACK", true),
                ("USE", true),
                ("LOCAL TUPLES", true),
                ("USE", true),
            ]);
            for l in &self.workers {
                w.row(vec![
                    l.index.to_string(),
                    l.lcore.to_string(),
                    l.applied_generation.to_string(),
                    format!("{} ms", l.heartbeat_age_ms),
                    format!("{}/{}", l.conntrack_entries, l.conntrack_capacity),
                    pct(l.conntrack_entries, l.conntrack_capacity),
                    format!("{}/{}", l.local_tuples_used, l.local_tuples),
                    pct(l.local_tuples_used, l.local_tuples),
                ]);
            }
            t.table(&w);
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_names_each_finding_with_evidence_and_next_step() {
        let d = diag_rules::Diagnosis {
            findings: vec![
                Finding {
                    kind: "drops_not_ours".into(),
                    severity: Severity::Note,
                    subject: "drop_arp_not_ours".into(),
                    evidence: "3 dropped".into(),
                    next: "nothing".into(),
                },
                Finding {
                    kind: "vip_no_backend".into(),
                    severity: Severity::Problem,
                    subject: "web".into(),
                    evidence: "no backend configured".into(),
                    next: "borderctl status".into(),
                },
            ],
            drops: vec![DropRate {
                counter: "drop_arp_not_ours".into(),
                dropped: 3,
                per_second: 1.5,
            }],
            workers: Vec::new(),
        };
        let v = DiagView::new("unix:///x.sock".into(), 2000, d);
        assert!(!v.healthy);
        assert_eq!(v.findings[0].kind, "vip_no_backend", "problems first");
        assert_eq!(
            v.render().to_string(),
            "\
border at unix:///x.sock: 1 problem (sampled over 2.0 s)

PROBLEM vip_no_backend: web
  evidence: no backend configured
  next:     borderctl status

note drops_not_ours: drop_arp_not_ours
  evidence: 3 dropped
  next:     nothing

DROP COUNTER       IN WINDOW  PER S
drop_arp_not_ours          3    1.5"
        );
        let json = serde_json::to_value(&v).unwrap();
        assert_eq!(json["healthy"], false);
        assert_eq!(json["findings"][1]["severity"], "note");
    }
}
