//! `borderctl stats`: border-mgmt's GetStats (counters per worker, flows
//! per VIP and backend), or the state region's counters when border-mgmt is
//! away.

use std::process::ExitCode;

use mgmt::pb;
use serde::Serialize;

use crate::cli::Target;
use crate::conn::{runtime, Failure, Res};
use crate::counters::{self, counter_table, CounterValues, WorkerRef};
use crate::output::{self, Named, Render, Table, Text};

pub fn run(target: &Target, all: bool, json: bool) -> Res {
    let rt = runtime()?;
    let answer = rt.block_on(async {
        let mut api = target.connect().await?;
        api.call(|mut c| async move { c.get_stats(pb::GetStatsRequest {}).await })
            .await
    });
    let st = match answer {
        Ok(st) => st,
        Err(Failure::Unreachable(why)) => {
            if target.local_instance().is_none() {
                return Err(Failure::Unreachable(why));
            }
            if let Err(e) = target.open_local() {
                return Err(crate::status::both_away(&why, e));
            }
            output::note(
                &format!(
                    "{why}; showing the counters of border-dp's state region on this machine (no per-VIP statistics)"
                ),
                json,
            );
            return counters::run(target, all, json);
        }
        Err(e) => return Err(e),
    };
    if !st.dataplane_present {
        output::note(
            "border-dp is not running (no state region): every counter reads 0",
            json,
        );
    }
    output::print(&StatsView::new(&st, all), json)?;
    Ok(ExitCode::SUCCESS)
}

/// GetStats as borderctl shows it.
#[derive(Debug, Serialize)]
pub struct StatsView {
    pub dataplane_present: bool,
    pub workers: Vec<WorkerRef>,
    pub counters: Named<CounterInfo>,
    pub vips: Vec<VipFlows>,
    /// Full-NAT local tuples per local address.
    pub local_pools: Vec<LocalPool>,
    /// The table lists zero counters too (`--all`); JSON always does.
    #[serde(skip)]
    pub all: bool,
}

/// A counter with what border-mgmt says about it.
#[derive(Debug, Serialize)]
pub struct CounterInfo {
    pub help: String,
    pub drop: bool,
    #[serde(flatten)]
    pub values: CounterValues,
}

/// One full-NAT local address's tuples, summed over workers.
#[derive(Debug, Serialize)]
pub struct LocalPool {
    pub address: String,
    pub tuples: u64,
    pub in_use: u64,
    pub resting: u64,
}

#[derive(Debug, Serialize)]
pub struct VipFlows {
    pub name: String,
    pub stats: Flows,
    pub backends: Vec<BackendFlows>,
}

#[derive(Debug, Serialize)]
pub struct BackendFlows {
    pub address: String,
    pub id: u32,
    pub stats: Flows,
}

#[derive(Debug, Serialize)]
pub struct Flows {
    pub packets: u64,
    pub bytes: u64,
    pub new_connections: u64,
    pub active_connections: u64,
}

impl From<&Option<pb::FlowStats>> for Flows {
    fn from(s: &Option<pb::FlowStats>) -> Flows {
        let s = s.unwrap_or_default();
        Flows {
            packets: s.packets,
            bytes: s.bytes,
            new_connections: s.new_connections,
            active_connections: s.active_connections,
        }
    }
}

impl Flows {
    fn cells(&self) -> [String; 4] {
        [
            self.packets,
            self.bytes,
            self.new_connections,
            self.active_connections,
        ]
        .map(|v| v.to_string())
    }
}

impl StatsView {
    pub fn new(st: &pb::GetStatsResponse, all: bool) -> StatsView {
        let counters = st.counters.iter().enumerate().map(|(i, c)| {
            let per = st
                .workers
                .iter()
                .map(|w| w.values.get(i).copied().unwrap_or(0))
                .collect();
            let mut values = CounterValues::new(per);
            // border-mgmt's total, as it computed it.
            values.total = st.totals.get(i).copied().unwrap_or(0);
            let info = CounterInfo {
                help: c.help.clone(),
                drop: c.drop,
                values,
            };
            (c.name.clone(), info)
        });
        let vips = st.vips.iter().map(|v| VipFlows {
            name: v.name.clone(),
            stats: Flows::from(&v.stats),
            backends: v
                .backends
                .iter()
                .map(|b| BackendFlows {
                    address: b.address.clone(),
                    id: b.id,
                    stats: Flows::from(&b.stats),
                })
                .collect(),
        });
        StatsView {
            dataplane_present: st.dataplane_present,
            workers: st
                .workers
                .iter()
                .map(|w| WorkerRef {
                    index: w.index,
                    lcore: w.lcore,
                })
                .collect(),
            counters: Named(counters.collect()),
            vips: vips.collect(),
            local_pools: st
                .local_pools
                .iter()
                .map(|p| LocalPool {
                    address: p.address.clone(),
                    tuples: p.tuples,
                    in_use: p.in_use,
                    resting: p.resting,
                })
                .collect(),
            all,
        }
    }
}

impl Render for StatsView {
    fn render(&self) -> Text {
        let rows = self.counters.0.iter().map(|(n, c)| (n.as_str(), &c.values));
        let mut t = counter_table(&self.workers, rows, self.all);
        if !self.vips.is_empty() {
            t.blank();
            t.table(&self.flow_table());
        }
        if !self.local_pools.is_empty() {
            t.blank();
            let mut pools = Table::new(&[
                ("LOCAL ADDRESS", false),
                ("TUPLES", true),
                ("IN USE", true),
                ("RESTING", true),
                ("FREE", true),
            ]);
            for p in &self.local_pools {
                let free = p.tuples.saturating_sub(p.in_use + p.resting);
                pools.row(vec![
                    p.address.clone(),
                    p.tuples.to_string(),
                    p.in_use.to_string(),
                    p.resting.to_string(),
                    free.to_string(),
                ]);
            }
            t.table(&pools);
        }
        t
    }
}

impl StatsView {
    /// Flows per VIP and backend.
    fn flow_table(&self) -> Table {
        let mut flows = Table::new(&[
            ("VIP", false),
            ("BACKEND", false),
            ("PACKETS", true),
            ("BYTES", true),
            ("NEW CONNECTIONS", true),
            ("ACTIVE", true),
        ]);
        for v in &self.vips {
            let mut row = vec![v.name.clone(), "(all)".to_string()];
            row.extend(v.stats.cells());
            flows.row(row);
            for b in &v.backends {
                let mut row = vec![v.name.clone(), b.address.clone()];
                row.extend(b.stats.cells());
                flows.row(row);
            }
        }
        flows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> pb::GetStatsResponse {
        let flows = |packets, active| {
            Some(pb::FlowStats {
                packets,
                bytes: packets * 100,
                new_connections: 1,
                active_connections: active,
            })
        };
        pb::GetStatsResponse {
            dataplane_present: true,
            ports: Vec::new(),
            counters: vec![
                pb::CounterInfo {
                    name: "new_flows".into(),
                    help: "flows created".into(),
                    ..Default::default()
                },
                pb::CounterInfo {
                    name: "drop_no_backend".into(),
                    help: "no backend".into(),
                    drop: true,
                    ..Default::default()
                },
            ],
            workers: vec![pb::WorkerCounters {
                index: 0,
                lcore: 1,
                values: vec![5, 0],
            }],
            totals: vec![5, 0],
            vips: vec![pb::VipStats {
                name: "v".into(),
                stats: flows(20, 2),
                backends: vec![pb::BackendStats {
                    address: "10.20.0.11:8080".into(),
                    id: 1,
                    stats: flows(20, 2),
                }],
            }],
            local_pools: vec![pb::LocalPoolStats {
                address: "10.20.0.1".into(),
                tuples: 31744,
                in_use: 40,
                resting: 4,
            }],
        }
    }

    #[test]
    fn stats_json_keeps_its_shape() {
        let v = serde_json::to_value(StatsView::new(&fixture(), false)).unwrap();
        assert_eq!(v["dataplane_present"], true);
        assert_eq!(v["workers"], serde_json::json!([{"index": 0, "lcore": 1}]));
        assert_eq!(
            v["counters"]["drop_no_backend"],
            serde_json::json!({"help": "no backend", "drop": true, "per_worker": [0], "total": 0})
        );
        assert_eq!(v["counters"]["new_flows"]["total"], 5);
        let b = &v["vips"][0]["backends"][0];
        assert_eq!(b["address"], "10.20.0.11:8080");
        assert_eq!(b["id"], 1);
        assert_eq!(
            b["stats"],
            serde_json::json!({"packets": 20, "bytes": 2000, "new_connections": 1, "active_connections": 2})
        );
        assert_eq!(
            v["local_pools"],
            serde_json::json!([{"address": "10.20.0.1", "tuples": 31744, "in_use": 40, "resting": 4}])
        );
    }

    #[test]
    fn stats_text_has_the_counters_then_the_flows() {
        let text = StatsView::new(&fixture(), false).render().to_string();
        assert_eq!(
            text,
            "\
COUNTER    LCORE 1  TOTAL
new_flows        5      5

VIP  BACKEND          PACKETS  BYTES  NEW CONNECTIONS  ACTIVE
v    (all)                 20   2000                1       2
v    10.20.0.11:8080       20   2000                1       2

LOCAL ADDRESS  TUPLES  IN USE  RESTING   FREE
10.20.0.1       31744      40        4  31700"
        );
    }
}
