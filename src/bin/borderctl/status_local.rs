//! `borderctl status --local` (and `status` without border-mgmt): border-dp
//! as its state region on this machine shows it, with heartbeats watched
//! for a moment to tell live workers from stuck ones.

use std::path::Path;
use std::time::Duration;

use border::DpView;
use serde::Serialize;

use crate::conn::{open_local, Res};
use crate::output::{self, exit, yes_no, Render, Table, Text};

pub fn run(config: Option<&Path>, instance: Option<&str>, json: bool, sample: Duration) -> Res {
    let (instance, region) = open_local(config, instance)?;
    let view = DpView::read(&region);
    let moving = if view.is_running() {
        border::heartbeats_moving(&region, sample)
    } else {
        vec![false; view.workers.len()]
    };
    // Re-read after sampling so heartbeats and generations are current.
    let view = DpView::read(&region);
    let out = LocalStatusView::new(instance, region.path(), &view, &moving);
    output::print(&out, json)?;
    Ok(exit(out.healthy))
}

/// border-dp's state region as `status --local` shows it.
#[derive(Debug, Serialize)]
pub struct LocalStatusView {
    pub source: &'static str,
    pub instance: String,
    pub state_path: String,
    pub pid: u32,
    pub pid_alive: bool,
    pub run_state: String,
    pub running: bool,
    /// Running, and every worker's heartbeat moved (the exit status).
    pub healthy: bool,
    pub workers: Vec<LocalWorkerView>,
    /// The run state in words, stale pid included.
    #[serde(skip)]
    pub described: String,
}

#[derive(Debug, Serialize)]
pub struct LocalWorkerView {
    pub index: usize,
    pub lcore: u64,
    pub heartbeat: u64,
    pub heartbeat_moving: bool,
    pub applied_generation: u64,
}

impl LocalStatusView {
    pub fn new(instance: String, path: &Path, view: &DpView, moving: &[bool]) -> LocalStatusView {
        let workers: Vec<LocalWorkerView> = view
            .workers
            .iter()
            .enumerate()
            .map(|(i, w)| LocalWorkerView {
                index: i,
                lcore: w.lcore,
                heartbeat: w.heartbeat,
                heartbeat_moving: moving.get(i).copied().unwrap_or(false),
                applied_generation: w.applied_generation,
            })
            .collect();
        LocalStatusView {
            source: "state-region",
            instance,
            state_path: path.display().to_string(),
            pid: view.pid,
            pid_alive: view.pid_alive,
            run_state: border::run_state_name(view.run_state),
            running: view.is_running(),
            healthy: view.is_running() && workers.iter().all(|w| w.heartbeat_moving),
            workers,
            described: view.describe(),
        }
    }
}

impl Render for LocalStatusView {
    fn render(&self) -> Text {
        let mut t = Text::default();
        t.line(format!("instance      {}", self.instance));
        t.line(format!("state region  {}", self.state_path));
        t.line(format!(
            "border-dp     pid {} ({}), {}",
            self.pid,
            if self.pid_alive { "alive" } else { "gone" },
            self.described
        ));
        t.line(format!("workers       {}", self.workers.len()));
        t.blank();
        let mut table = Table::numeric(
            ["WORKER", "LCORE", "HEARTBEAT", "MOVING", "GENERATION"]
                .map(String::from)
                .to_vec(),
        );
        for w in &self.workers {
            table.row(vec![
                w.index.to_string(),
                w.lcore.to_string(),
                w.heartbeat.to_string(),
                yes_no(w.heartbeat_moving),
                w.applied_generation.to_string(),
            ]);
        }
        t.table(&table);
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use border::WorkerView;
    use conf::state::RunState;

    fn fixture(moving: &[bool]) -> LocalStatusView {
        let view = DpView {
            pid: 42,
            pid_alive: true,
            run_state: RunState::Running,
            workers: vec![
                WorkerView {
                    lcore: 1,
                    heartbeat: 123_456,
                    applied_generation: 3,
                },
                WorkerView {
                    lcore: 2,
                    heartbeat: 99,
                    applied_generation: 3,
                },
            ],
        };
        let path = Path::new("/dev/shm/border-lab-state");
        LocalStatusView::new("lab".into(), path, &view, moving)
    }

    #[test]
    fn local_status_json_and_text_come_from_one_view() {
        let view = fixture(&[true, true]);
        let v = serde_json::to_value(&view).unwrap();
        assert_eq!(v["source"], "state-region");
        assert_eq!(v["state_path"], "/dev/shm/border-lab-state");
        assert_eq!(v["run_state"], "running");
        assert_eq!(v["healthy"], true);
        assert_eq!(v["workers"][1]["lcore"], 2);
        assert_eq!(v["workers"][1]["heartbeat_moving"], true);
        assert!(v.get("described").is_none());
        assert_eq!(
            view.render().to_string(),
            "\
instance      lab
state region  /dev/shm/border-lab-state
border-dp     pid 42 (alive), running
workers       2

WORKER  LCORE  HEARTBEAT  MOVING  GENERATION
0           1     123456     yes           3
1           2         99     yes           3"
        );
    }

    #[test]
    fn a_still_heartbeat_is_unhealthy() {
        assert!(!fixture(&[true, false]).healthy);
    }
}
