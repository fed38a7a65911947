//! `borderctl counters`: border-dp's counters per worker and their totals,
//! and each port's NIC statistics (`rte_eth_stats`, copied by border-dp
//! about once a second), read from its state region on this machine (no
//! border-mgmt). Also the counter table `stats` prints.

use border::DpView;
use conf::counters::Counter;
use conf::state::{PortSnapshot, PortStat};
use serde::Serialize;

use crate::cli::Target;
use crate::conn::Res;
use crate::output::{self, Named, Render, Table, Text};

/// Exit 0 while border-dp runs; 1 when it has stopped (its last run's
/// counters are shown); 3 when it never ran here (no state region).
pub fn run(target: &Target, all: bool, json: bool) -> Res {
    let (instance, region) = target.open_local()?;
    let view = DpView::read(&region);
    if !view.is_running() {
        output::note(
            &format!(
                "border-dp of instance `{instance}` is not running ({}); \
                 these are the counters of its last run",
                view.describe()
            ),
            json,
        );
    }
    let per_worker: Vec<Vec<u64>> = (0..region.n_workers())
        .filter_map(|i| region.worker(i))
        .map(|w| Counter::ALL.iter().map(|&c| w.get(c)).collect())
        .collect();
    let out = CountersView {
        instance,
        state_path: region.path().display().to_string(),
        pid: view.pid,
        run_state: border::run_state_name(view.run_state),
        running: view.is_running(),
        workers: WorkerRef::list(view.workers.iter().map(|w| w.lcore)),
        counters: Named(
            Counter::ALL
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let per: Vec<u64> = per_worker.iter().map(|w| w[i]).collect();
                    (c.name().to_string(), CounterValues::new(per))
                })
                .collect(),
        ),
        ports: Named(region.ports().iter().map(PortValues::entry).collect()),
        all,
    };
    output::print(&out, json)?;
    Ok(output::exit(out.running))
}

/// A worker as the counter tables name it.
#[derive(Debug, Serialize)]
pub struct WorkerRef {
    pub index: u32,
    pub lcore: u64,
}

impl WorkerRef {
    pub fn list(lcores: impl Iterator<Item = u64>) -> Vec<WorkerRef> {
        (0u32..)
            .zip(lcores)
            .map(|(index, lcore)| WorkerRef { index, lcore })
            .collect()
    }
}

/// One counter: its value on each worker and their (wrapping) sum.
#[derive(Debug, Serialize)]
pub struct CounterValues {
    pub per_worker: Vec<u64>,
    pub total: u64,
}

impl CounterValues {
    pub fn new(per_worker: Vec<u64>) -> CounterValues {
        let total = per_worker.iter().fold(0u64, |a, &b| a.wrapping_add(b));
        CounterValues { per_worker, total }
    }
}

/// One port's statistics: its role (`data` port or kernel `twin`), when
/// border-dp last copied them (0: not yet), and each `rte_eth_stats` value.
#[derive(Debug, Serialize)]
pub struct PortValues {
    pub role: &'static str,
    pub updated_unix_ms: u64,
    #[serde(flatten)]
    pub stats: Named<u64>,
}

impl PortValues {
    fn entry(p: &PortSnapshot) -> (String, PortValues) {
        let stats = PortStat::ALL
            .iter()
            .map(|&s| (s.name().to_string(), p.get(s)))
            .collect();
        let v = PortValues {
            role: p.role.name(),
            updated_unix_ms: p.updated_unix_ms,
            stats: Named(stats),
        };
        (p.name.clone(), v)
    }
}

/// `counters` as borderctl shows it.
#[derive(Debug, Serialize)]
pub struct CountersView {
    pub instance: String,
    pub state_path: String,
    pub pid: u32,
    pub run_state: String,
    pub running: bool,
    pub workers: Vec<WorkerRef>,
    pub counters: Named<CounterValues>,
    /// Per port by name: data ports, then kernel twins.
    pub ports: Named<PortValues>,
    /// The table lists zero counters too (`--all`); JSON always does.
    #[serde(skip)]
    pub all: bool,
}

impl Render for CountersView {
    fn render(&self) -> Text {
        let rows = self.counters.0.iter().map(|(n, v)| (n.as_str(), v));
        let mut t = counter_table(&self.workers, rows, self.all);
        if !self.ports.0.is_empty() {
            t.blank();
            t.table(&port_table(&self.ports));
        }
        t
    }
}

/// PORT, ROLE, then one column per `rte_eth_stats` and capture value.
fn port_table(ports: &Named<PortValues>) -> Table {
    let upper: Vec<String> = PortStat::ALL
        .iter()
        .map(|s| s.name().to_uppercase())
        .collect();
    let mut cols = vec![("PORT", false), ("ROLE", false)];
    cols.extend(upper.iter().map(|h| (h.as_str(), true)));
    let mut table = Table::new(&cols);
    for (name, p) in &ports.0 {
        let mut line = vec![name.clone(), p.role.to_string()];
        line.extend(p.stats.0.iter().map(|(_, v)| v.to_string()));
        table.row(line);
    }
    table
}

/// COUNTER, one column per worker (by lcore), TOTAL: the non-zero counters
/// unless `all`.
pub fn counter_table<'a>(
    workers: &[WorkerRef],
    rows: impl Iterator<Item = (&'a str, &'a CounterValues)>,
    all: bool,
) -> Text {
    let mut header = vec!["COUNTER".to_string()];
    header.extend(workers.iter().map(|w| format!("LCORE {}", w.lcore)));
    header.push("TOTAL".to_string());
    let mut table = Table::numeric(header);
    for (name, v) in rows.filter(|(_, v)| all || v.total != 0) {
        let mut line = vec![name.to_string()];
        line.extend(v.per_worker.iter().map(u64::to_string));
        line.push(v.total.to_string());
        table.row(line);
    }
    let mut t = Text::default();
    t.table(&table);
    if table.len() == 0 {
        t.line("(every counter is zero; --all lists them)");
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(all: bool) -> CountersView {
        CountersView {
            instance: "lab".into(),
            state_path: "/dev/shm/border-lab-state".into(),
            pid: 42,
            run_state: "running".into(),
            running: true,
            workers: WorkerRef::list([1, 3].into_iter()),
            counters: Named(vec![
                ("rx_packets".into(), CounterValues::new(vec![10, 32])),
                ("drop_fragment".into(), CounterValues::new(vec![0, 0])),
                ("wrapped".into(), CounterValues::new(vec![u64::MAX, 2])),
            ]),
            ports: Named(vec![]),
            all,
        }
    }

    #[test]
    fn counters_json_keeps_its_shape() {
        let v = serde_json::to_value(fixture(false)).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "instance": "lab",
                "state_path": "/dev/shm/border-lab-state",
                "pid": 42,
                "run_state": "running",
                "running": true,
                "workers": [{"index": 0, "lcore": 1}, {"index": 1, "lcore": 3}],
                "counters": {
                    "rx_packets": {"per_worker": [10, 32], "total": 42},
                    "drop_fragment": {"per_worker": [0, 0], "total": 0},
                    "wrapped": {"per_worker": [u64::MAX, 2], "total": 1},
                },
                "ports": {},
            })
        );
    }

    fn with_ports(mut view: CountersView) -> CountersView {
        let mut ext = PortSnapshot {
            name: "ext".into(),
            role: conf::state::PortRole::Data,
            updated_unix_ms: 1700,
            stats: [0; PortStat::COUNT],
        };
        ext.stats[PortStat::Ipackets as usize] = 12;
        ext.stats[PortStat::RxNombuf as usize] = 3;
        let twin = PortSnapshot {
            name: "kps-ext".into(),
            role: conf::state::PortRole::Twin,
            updated_unix_ms: 0,
            stats: [0; PortStat::COUNT],
        };
        view.ports = Named(vec![PortValues::entry(&ext), PortValues::entry(&twin)]);
        view
    }

    #[test]
    fn ports_in_json_and_table() {
        let view = with_ports(fixture(false));
        let v = serde_json::to_value(&view).unwrap();
        assert_eq!(
            v["ports"]["ext"],
            serde_json::json!({
                "role": "data", "updated_unix_ms": 1700,
                "ipackets": 12, "opackets": 0, "ibytes": 0, "obytes": 0,
                "imissed": 0, "ierrors": 0, "oerrors": 0, "rx_nombuf": 3,
                "capture_accepted": 0, "capture_ringfull": 0, "capture_nombuf": 0,
            })
        );
        assert_eq!(v["ports"]["kps-ext"]["role"], "twin");
        let text = view.render().to_string();
        let tail: Vec<&str> = text.lines().skip(3).collect();
        assert_eq!(
            tail,
            [
                "",
                "PORT     ROLE  IPACKETS  OPACKETS  IBYTES  OBYTES  IMISSED  IERRORS  OERRORS  RX_NOMBUF  CAPTURE_ACCEPTED  CAPTURE_RINGFULL  CAPTURE_NOMBUF",
                "ext      data        12         0       0       0        0        0        0          3                 0                 0               0",
                "kps-ext  twin         0         0       0       0        0        0        0          0                 0                 0               0",
            ],
            "{text}"
        );
    }

    #[test]
    fn the_counter_table_hides_zeros_unless_all() {
        assert_eq!(
            fixture(false).render().to_string(),
            "\
COUNTER                  LCORE 1  LCORE 3  TOTAL
rx_packets                    10       32     42
wrapped     18446744073709551615        2      1"
        );
        let all = fixture(true).render().to_string();
        assert!(
            all.lines().any(|l| l.starts_with("drop_fragment ")),
            "{all}"
        );
        assert_eq!(all.lines().count(), 4);
    }

    #[test]
    fn all_zero_counters_say_so() {
        let mut view = fixture(false);
        view.counters.0.retain(|(n, _)| n == "drop_fragment");
        assert_eq!(
            view.render().to_string(),
            "COUNTER  LCORE 1  LCORE 3  TOTAL\n(every counter is zero; --all lists them)"
        );
    }
}
