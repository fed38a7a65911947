//! `borderctl drain | undrain | weight` and `borderctl backend disable
//! [--kill] | enable`: one operator override of one backend through
//! SetBackend.

use std::process::ExitCode;

use mgmt::pb;
use pb::set_backend_request::Action;
use serde::Serialize;

use crate::cli::{BackendRef, Target, WeightArg};
use crate::conn::{runtime, Res};
use crate::output::{self, Render, Text};
use crate::status::BackendView;

/// What to do to the backend.
#[derive(Clone, Copy, Debug)]
pub enum Change {
    Drain,
    /// Drain, and reset the connections it holds.
    Kill,
    Undrain,
    /// Undrain, as `backend enable` says it.
    Enable,
    Weight(WeightArg),
}

impl Change {
    fn action(self) -> Action {
        match self {
            Change::Drain => Action::Drain(pb::Drain {}),
            Change::Kill => Action::Kill(pb::Kill {}),
            Change::Undrain | Change::Enable => Action::Undrain(pb::Undrain {}),
            Change::Weight(WeightArg::Set(w)) => Action::Weight(w),
            Change::Weight(WeightArg::Reset) => Action::ResetWeight(pb::ResetWeight {}),
        }
    }

    /// The change in words, as the result line starts.
    fn done(self) -> String {
        match self {
            Change::Drain => "drained".into(),
            Change::Kill => "killed (its connections are reset on their next packet)".into(),
            Change::Undrain => "undrained".into(),
            Change::Enable => "enabled".into(),
            Change::Weight(WeightArg::Set(w)) => format!("weight {w}"),
            Change::Weight(WeightArg::Reset) => "weight reset".into(),
        }
    }
}

pub fn run(target: &Target, which: BackendRef, change: Change, json: bool) -> Res {
    let req = pb::SetBackendRequest {
        vip: which.vip.clone(),
        backend: which.backend,
        action: Some(change.action()),
        note: which.note.unwrap_or_default(),
    };
    let rt = runtime()?;
    let out = rt.block_on(async {
        let mut api = target.connect().await?;
        api.call(|mut c| async move { c.set_backend(req).await })
            .await
    })?;
    let view = BackendChangeView {
        vip: which.vip,
        generation: out.generation,
        changed: out.changed,
        pending: out.pending,
        backend: BackendView::from(&out.backend.unwrap_or_default()),
        done: change.done(),
    };
    output::print(&view, json)?;
    Ok(ExitCode::SUCCESS)
}

/// SetBackend's answer: the backend after the change and what was published.
#[derive(Debug, Serialize)]
pub struct BackendChangeView {
    pub vip: String,
    pub generation: u64,
    pub changed: bool,
    pub pending: String,
    pub backend: BackendView,
    /// The change in words (`drained`, `weight 3`).
    #[serde(skip)]
    pub done: String,
}

impl Render for BackendChangeView {
    fn render(&self) -> Text {
        let mut t = Text::default();
        t.line(format!("{} {}", self.vip, self.backend.summary()));
        t.line(output::published(
            &self.done,
            &format!("{}: it already was;", self.done),
            &self.pending,
            self.changed,
            self.generation,
        ));
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_shows_the_backend_and_the_generation() {
        let backend = pb::BackendStatus {
            address: "10.20.0.11:8080".into(),
            id: 1,
            state: pb::BackendState::Up as i32,
            reason: "weight set by the operator".into(),
            weight: 0,
            config_weight: 2,
            weight_overridden: true,
            ..Default::default()
        };
        let view = BackendChangeView {
            vip: "web".into(),
            generation: 4,
            changed: true,
            pending: String::new(),
            backend: BackendView::from(&backend),
            done: Change::Weight(WeightArg::Set(0)).done(),
        };
        assert_eq!(
            view.render().to_string(),
            "web 10.20.0.11:8080: UP, weight 0 (config 2), 0 ring slots: weight set by the operator\n\
             weight 0: generation 4 published"
        );
        let again = BackendChangeView {
            changed: false,
            ..view
        };
        assert!(
            again
                .render()
                .to_string()
                .ends_with("\nweight 0: it already was; nothing published (generation 4)"),
            "{}",
            again.render()
        );
        let v = serde_json::to_value(&again).unwrap();
        assert_eq!(v["generation"], 4);
        assert_eq!(v["backend"]["weight"], 0);
        assert_eq!(v["backend"]["weight_overridden"], true);
        assert_eq!(v["backend"]["state"], "UP");
        assert!(v.get("done").is_none());
    }

    #[test]
    fn a_kill_shows_the_killed_backend() {
        let backend = pb::BackendStatus {
            address: "10.20.0.11:8080".into(),
            id: 1,
            state: pb::BackendState::Killed as i32,
            reason: "killed by the operator: bad deploy".into(),
            weight: 1,
            config_weight: 1,
            drained: true,
            killed: true,
            ..Default::default()
        };
        let view = BackendChangeView {
            vip: "web".into(),
            generation: 5,
            changed: true,
            pending: String::new(),
            backend: BackendView::from(&backend),
            done: Change::Kill.done(),
        };
        assert_eq!(
            view.render().to_string(),
            "web 10.20.0.11:8080: KILLED, weight 1, 0 ring slots: killed by the operator: bad deploy\n\
             killed (its connections are reset on their next packet): generation 5 published"
        );
        let v = serde_json::to_value(&view).unwrap();
        assert_eq!(v["backend"]["state"], "KILLED");
        assert_eq!(v["backend"]["killed"], true);
        assert_eq!(v["backend"]["drained"], true);
    }
}
