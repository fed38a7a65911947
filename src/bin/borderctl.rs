//! borderctl: the command-line tool of border. Today it reads the dataplane's
//! state region directly; the gRPC subcommands come with the management API.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args as ClapArgs, Parser, Subcommand};
use conf::counters::Counter;
use conf::state::{state_path, StateRegion};
use serde_json::{json, Map, Value};

use border::DpView;

const PROGRAM: &str = "borderctl";

/// The border command-line tool.
///
/// Today it reads the shared-memory state region that border-dp writes
/// (/dev/shm/border-<instance>-state) on the same machine: `counters` and
/// `status`. Commands that talk to border-mgmt over gRPC (config apply,
/// backend weight/drain, health) come with the management API.
#[derive(Parser, Debug)]
#[command(name = "borderctl", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Per-worker dataplane counters and their totals.
    ///
    /// The table shows the counters that are not zero (all with --all);
    /// --json always lists every counter. Exit 0 even when border-dp has
    /// stopped (the counters of its last run are shown, with a note on stderr).
    Counters {
        #[command(flatten)]
        target: Target,
        /// Show every counter, also those that are zero.
        #[arg(long)]
        all: bool,
        /// Machine-readable JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Dataplane pid and run state; per worker its lcore, whether its
    /// heartbeat moves, and the table generation it has applied.
    ///
    /// Exit 0 when border-dp runs and every worker's heartbeat moves, 1 otherwise.
    Status {
        #[command(flatten)]
        target: Target,
        /// Machine-readable JSON instead of text.
        #[arg(long)]
        json: bool,
        /// How long to watch the heartbeats, in milliseconds.
        #[arg(long, value_name = "MS", default_value_t = 300,
              value_parser = clap::value_parser!(u64).range(10..=10_000))]
        sample_ms: u64,
    },
}

/// Which instance: from a config file or by name.
#[derive(ClapArgs, Debug)]
#[group(required = true, multiple = false)]
struct Target {
    /// The instance named in this configuration file.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The instance with this name.
    #[arg(long, value_name = "NAME")]
    instance: Option<String>,
}

impl Target {
    fn open(&self) -> Result<(String, StateRegion), String> {
        let instance = border::instance_from(self.config.as_deref(), self.instance.as_deref())
            .map_err(|e| e.to_string())?;
        let region = border::open_state(&instance).map_err(|e| e.to_string())?;
        Ok((instance, region))
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Counters { target, all, json } => counters(&target, all, json),
        Cmd::Status {
            target,
            json,
            sample_ms,
        } => status(&target, json, Duration::from_millis(sample_ms)),
    };
    match res {
        Ok(code) => code,
        Err(e) => border::fail(PROGRAM, &e),
    }
}

fn counters(target: &Target, all: bool, as_json: bool) -> Result<ExitCode, String> {
    let (instance, region) = target.open()?;
    let view = DpView::read(&region);
    if !view.is_running() {
        eprintln!(
            "{PROGRAM}: note: border-dp of instance `{instance}` is not running ({}); \
             these are the counters of its last run",
            view.describe()
        );
    }
    let workers: Vec<_> = (0..region.n_workers())
        .filter_map(|i| region.worker(i))
        .collect();
    let rows: Vec<(Counter, Vec<u64>, u64)> = Counter::ALL
        .iter()
        .map(|&c| {
            let per: Vec<u64> = workers.iter().map(|w| w.get(c)).collect();
            let total = per.iter().fold(0u64, |a, &b| a.wrapping_add(b));
            (c, per, total)
        })
        .collect();

    if as_json {
        let mut counters = Map::new();
        for (c, per, total) in &rows {
            counters.insert(
                c.name().to_string(),
                json!({ "per_worker": per, "total": total }),
            );
        }
        let out = json!({
            "instance": instance,
            "state_path": region.path().display().to_string(),
            "pid": view.pid,
            "run_state": border::run_state_name(view.run_state),
            "running": view.is_running(),
            "workers": view.workers.iter().enumerate()
                .map(|(i, w)| json!({ "index": i, "lcore": w.lcore }))
                .collect::<Vec<_>>(),
            "counters": Value::Object(counters),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?
        );
        return Ok(ExitCode::SUCCESS);
    }

    let mut header = vec!["COUNTER".to_string()];
    header.extend(view.workers.iter().map(|w| format!("LCORE {}", w.lcore)));
    header.push("TOTAL".to_string());
    let mut table = vec![header];
    for (c, per, total) in rows.iter().filter(|r| all || r.2 != 0) {
        let mut line = vec![c.name().to_string()];
        line.extend(per.iter().map(u64::to_string));
        line.push(total.to_string());
        table.push(line);
    }
    print_table(&table);
    if table.len() == 1 {
        println!("(every counter is zero; --all lists them)");
    }
    Ok(ExitCode::SUCCESS)
}

fn status(target: &Target, as_json: bool, sample: Duration) -> Result<ExitCode, String> {
    let (instance, region) = target.open()?;
    let view = DpView::read(&region);
    let moving = if view.is_running() {
        border::heartbeats_moving(&region, sample)
    } else {
        vec![false; view.workers.len()]
    };
    // Re-read after sampling so heartbeats and generations are current.
    let view = DpView::read(&region);
    let healthy = view.is_running() && moving.iter().all(|&m| m);

    if as_json {
        let out = json!({
            "instance": instance,
            "state_path": state_path(&instance).display().to_string(),
            "pid": view.pid,
            "pid_alive": view.pid_alive,
            "run_state": border::run_state_name(view.run_state),
            "running": view.is_running(),
            "healthy": healthy,
            "workers": view.workers.iter().zip(&moving).enumerate()
                .map(|(i, (w, m))| json!({
                    "index": i,
                    "lcore": w.lcore,
                    "heartbeat": w.heartbeat,
                    "heartbeat_moving": m,
                    "applied_generation": w.applied_generation,
                }))
                .collect::<Vec<_>>(),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?
        );
    } else {
        println!("instance      {instance}");
        println!("state region  {}", region.path().display());
        println!(
            "border-dp     pid {} ({}), {}",
            view.pid,
            if view.pid_alive { "alive" } else { "gone" },
            view.describe()
        );
        println!("workers       {}", view.workers.len());
        println!();
        let mut table = vec![vec![
            "WORKER".to_string(),
            "LCORE".to_string(),
            "HEARTBEAT".to_string(),
            "MOVING".to_string(),
            "GENERATION".to_string(),
        ]];
        for (i, (w, m)) in view.workers.iter().zip(&moving).enumerate() {
            table.push(vec![
                i.to_string(),
                w.lcore.to_string(),
                w.heartbeat.to_string(),
                if *m { "yes" } else { "no" }.to_string(),
                w.applied_generation.to_string(),
            ]);
        }
        print_table(&table);
    }
    Ok(if healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Prints rows as aligned columns: the first left-aligned, the rest right-aligned.
fn print_table(rows: &[Vec<String>]) {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(String::len)
                .max()
                .unwrap_or(0)
        })
        .collect();
    for r in rows {
        let cells: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(c, v)| {
                if c == 0 {
                    format!("{v:<w$}", w = widths[c])
                } else {
                    format!("{v:>w$}", w = widths[c])
                }
            })
            .collect();
        println!("{}", cells.join("  ").trim_end());
    }
}
