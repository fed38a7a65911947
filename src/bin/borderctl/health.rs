//! `borderctl health`: every backend of every VIP with its verdict (up,
//! down, drained, or down but serving because its VIP fails open), the
//! last observation of each checker (this border-mgmt's probes, and its
//! peers' when [[mgmt.peer]] quorum is configured), and the quorum state:
//! GetHealth for the verdicts and checkers, GetStatus for operator drains
//! and the backends that are not health-checked.

use mgmt::pb;
use serde::Serialize;

use crate::cli::Target;
use crate::conn::{runtime, Failure, Res};
use crate::output::{self, exit, utc, Render, Table, Text};

pub fn run(target: &Target, json: bool) -> Res {
    let rt = runtime()?;
    let (status, health) = rt.block_on(async {
        let mut api = target.connect().await?;
        let status = api
            .call(|mut c| async move { c.get_status(pb::GetStatusRequest {}).await })
            .await?;
        let health = api.call_health().await?;
        Ok::<_, Failure>((status, health))
    })?;
    let view = HealthView::new(&status, &health);
    output::print(&view, json)?;
    Ok(exit(view.all_up()))
}

/// The health of every backend, and who decided it.
#[derive(Debug, Serialize)]
pub struct HealthView {
    /// This border-mgmt's checker id.
    pub checker: String,
    /// Credible checkers needed to decide a verdict.
    pub quorum: u32,
    pub checkers: Vec<CheckerView>,
    pub backends: Vec<BackendView>,
}

/// One checker (this border-mgmt or a peer) and whether its votes count.
#[derive(Debug, Serialize)]
pub struct CheckerView {
    pub id: String,
    /// `self`, or the peer's address.
    pub address: String,
    pub fresh: bool,
    /// Why its votes are discarded (empty: they count).
    pub unreliable: String,
    pub error: String,
}

/// One backend of one VIP.
#[derive(Debug, Serialize)]
pub struct BackendView {
    pub vip: String,
    pub backend: String,
    /// `up`, `down`, `drained`, `killed` (drained and its connections
    /// reset), `fail-open` (down, but serving: every
    /// backend of the VIP is down), or `unchecked` (no health check).
    pub verdict: String,
    /// No fresh credible vote decided it: the verdict was kept.
    pub no_data: bool,
    pub reason: String,
    /// When the health state last changed (RFC 3339; `-`: never).
    pub since: String,
    /// The checkers whose votes made the decision.
    pub decided_by: Vec<String>,
    /// Each checker's last observation, in words (`checker: state reason
    /// xN` with peers, else `state reason xN`).
    pub observations: Vec<String>,
}

impl HealthView {
    pub fn new(status: &pb::GetStatusResponse, health: &pb::GetHealthResponse) -> HealthView {
        let mut backends = Vec::new();
        for v in &status.vips {
            let vh = health.vips.iter().find(|h| h.name == v.name);
            for b in &v.backends {
                let bh = vh.and_then(|h| h.backends.iter().find(|x| x.address == b.address));
                backends.push(backend(&v.name, b, vh, bh));
            }
        }
        HealthView {
            checker: health.checker.clone(),
            quorum: health.quorum,
            checkers: health
                .checkers
                .iter()
                .map(|c| CheckerView {
                    id: c.id.clone(),
                    address: c.address.clone(),
                    fresh: c.fresh,
                    unreliable: c.unreliable.clone(),
                    error: c.error.clone(),
                })
                .collect(),
            backends,
        }
    }

    /// Every health-checked backend is up or drained by the operator.
    pub fn all_up(&self) -> bool {
        self.backends.iter().all(|b| {
            matches!(
                b.verdict.as_str(),
                "up" | "drained" | "killed" | "unchecked"
            )
        })
    }
}

fn backend(
    vip: &str,
    b: &pb::BackendStatus,
    vh: Option<&pb::VipHealth>,
    bh: Option<&pb::BackendHealth>,
) -> BackendView {
    let state = bh.map(|h| h.state());
    let verdict = if b.killed {
        "killed"
    } else if b.drained {
        "drained"
    } else {
        match state {
            None => "unchecked",
            Some(pb::HealthState::Up) => "up",
            Some(pb::HealthState::Down) if vh.is_some_and(|h| h.fail_open) => "fail-open",
            Some(pb::HealthState::Down) => "down",
            Some(pb::HealthState::Unspecified) => "undecided",
        }
    };
    BackendView {
        vip: vip.to_string(),
        backend: b.address.clone(),
        verdict: verdict.to_string(),
        no_data: bh.is_some_and(|h| h.no_data),
        reason: bh.map_or_else(|| b.reason.clone(), |h| h.reason.clone()),
        since: utc(bh.map_or(0, |h| h.since_unix_ms)),
        decided_by: bh.map(|h| h.checkers.clone()).unwrap_or_default(),
        observations: bh
            .map(|h| {
                h.detail
                    .split("; ")
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default(),
    }
}

impl Render for HealthView {
    fn render(&self) -> Text {
        let mut t = Text::default();
        let credible = self
            .checkers
            .iter()
            .filter(|c| c.fresh && c.unreliable.is_empty())
            .count();
        t.line(format!(
            "checker {}: quorum {} of {} checker(s), {} fresh and credible",
            self.checker,
            self.quorum,
            self.checkers.len(),
            credible
        ));
        if self.checkers.len() > 1 {
            let mut c = Table::new(&[
                ("CHECKER", false),
                ("ADDRESS", false),
                ("FRESH", false),
                ("NOTE", false),
            ]);
            for k in &self.checkers {
                let note = [k.unreliable.as_str(), k.error.as_str()]
                    .into_iter()
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>()
                    .join("; ");
                c.row(vec![
                    k.id.clone(),
                    k.address.clone(),
                    output::yes_no(k.fresh),
                    note,
                ]);
            }
            t.blank();
            t.table(&c);
        }
        let mut b = Table::new(&[
            ("VIP", false),
            ("BACKEND", false),
            ("VERDICT", false),
            ("SINCE", false),
            ("REASON", false),
            ("LAST OBSERVATIONS", false),
        ]);
        for x in &self.backends {
            let verdict = if x.no_data {
                format!("{} (no data)", x.verdict)
            } else {
                x.verdict.clone()
            };
            b.row(vec![
                x.vip.clone(),
                x.backend.clone(),
                verdict,
                x.since.clone(),
                x.reason.clone(),
                if x.observations.is_empty() {
                    "-".into()
                } else {
                    x.observations.join("; ")
                },
            ]);
        }
        t.blank();
        t.table(&b);
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_killed_backend_reads_killed_and_counts_as_the_operators_word() {
        let b = pb::BackendStatus {
            address: "10.0.0.9:80".into(),
            drained: true,
            killed: true,
            ..Default::default()
        };
        let up = pb::BackendHealth {
            state: pb::HealthState::Up as i32,
            ..Default::default()
        };
        assert_eq!(backend("web", &b, None, Some(&up)).verdict, "killed");
        let plain = pb::BackendStatus {
            killed: false,
            ..b.clone()
        };
        assert_eq!(backend("web", &plain, None, Some(&up)).verdict, "drained");
    }

    fn status() -> pb::GetStatusResponse {
        let b = |addr: &str, drained: bool| pb::BackendStatus {
            address: addr.into(),
            drained,
            reason: "configured".into(),
            ..Default::default()
        };
        pb::GetStatusResponse {
            vips: vec![
                pb::VipStatus {
                    name: "web".into(),
                    backends: vec![
                        b("10.0.0.1:80", false),
                        b("10.0.0.2:80", false),
                        b("10.0.0.3:80", true),
                    ],
                    ..Default::default()
                },
                pb::VipStatus {
                    name: "dns".into(),
                    backends: vec![b("10.0.1.1:53", false)],
                    ..Default::default()
                },
            ],
            ..Default::default()
        }
    }

    fn health(fail_open: bool) -> pb::GetHealthResponse {
        let b = |addr: &str, state: pb::HealthState, detail: &str| pb::BackendHealth {
            address: addr.into(),
            state: state as i32,
            reason: format!("{} by a", state.as_str_name()),
            checkers: vec!["a/lab".into()],
            detail: detail.into(),
            since_unix_ms: 1,
            ..Default::default()
        };
        pb::GetHealthResponse {
            checker: "a/lab".into(),
            quorum: 1,
            checkers: vec![pb::CheckerStatus {
                id: "a/lab".into(),
                address: "self".into(),
                fresh: true,
                ..Default::default()
            }],
            vips: vec![pb::VipHealth {
                name: "web".into(),
                fail_open,
                backends: vec![
                    b("10.0.0.1:80", pb::HealthState::Up, "up connected x3"),
                    b(
                        "10.0.0.2:80",
                        pb::HealthState::Down,
                        "a/lab: down refused x2; b/lab: down refused x1",
                    ),
                    b("10.0.0.3:80", pb::HealthState::Up, ""),
                ],
                ..Default::default()
            }],
        }
    }

    #[test]
    fn verdicts_join_health_and_drains() {
        let v = HealthView::new(&status(), &health(false));
        let got: Vec<(&str, &str)> = v
            .backends
            .iter()
            .map(|b| (b.backend.as_str(), b.verdict.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("10.0.0.1:80", "up"),
                ("10.0.0.2:80", "down"),
                ("10.0.0.3:80", "drained"),
                ("10.0.1.1:53", "unchecked"),
            ]
        );
        assert_eq!(
            v.backends[1].observations,
            ["a/lab: down refused x2", "b/lab: down refused x1"]
        );
        assert!(!v.all_up());
        let open = HealthView::new(&status(), &health(true));
        assert_eq!(open.backends[1].verdict, "fail-open");
        assert!(!open.all_up());
    }

    #[test]
    fn all_up_when_nothing_is_down() {
        let mut h = health(false);
        h.vips[0].backends.remove(1);
        let v = HealthView::new(&status(), &h);
        assert_eq!(v.backends[1].verdict, "unchecked");
        assert!(v.all_up());
        let text = v.render().to_string();
        assert!(
            text.starts_with("checker a/lab: quorum 1 of 1 checker(s), 1 fresh and credible"),
            "{text}"
        );
        assert!(text.contains("up connected x3"), "{text}");
        let j = serde_json::to_value(&v).unwrap();
        assert_eq!(j["backends"][0]["verdict"], "up");
        assert_eq!(j["backends"][0]["observations"][0], "up connected x3");
        assert_eq!(j["quorum"], 1);
    }
}
