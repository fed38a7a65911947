//! Findings: problems named with their evidence and the step to take next.
//! This module owns the one [`Finding`] type of border; border-mgmt's
//! `status` findings (made here from the workers' own numbers, and in
//! [`crate::netns_findings`] from border-dp's namespace) and `borderctl
//! diag`'s rules over two samples of the API both produce it
//! (docs/architecture.md, "Diagnosis").

use std::fmt;

use conf::counters::Counter;
use serde::Serialize;

/// A problem (diag exits 1) or a note (shown, exit status unchanged).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Something is wrong.
    Problem,
    /// Worth knowing; nothing is wrong by itself.
    Note,
}

/// What a finding concerns. Shown (and serialised) as one line of text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Subject {
    /// A worker, by index, with its lcore when known: `worker 1 (lcore 3)`.
    Worker {
        /// Position in `worker_lcores`.
        index: u32,
        /// The lcore it runs on.
        lcore: Option<u64>,
    },
    /// A `[[port]]`, by name: `port ext`.
    Port(String),
    /// Anything else, as shown: a VIP, `vip/backend`, a counter, a process.
    Named(String),
}

impl Subject {
    /// The worker index and port name GetStatus carries (`border.v1`
    /// `Finding.worker` and `.port`): a worker's finding has no port, a
    /// port's finding worker 0.
    pub fn wire(&self) -> (u32, &str) {
        match self {
            Subject::Worker { index, .. } => (*index, ""),
            Subject::Port(p) => (0, p),
            Subject::Named(_) => (0, ""),
        }
    }
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Subject::Worker { index, lcore: None } => write!(f, "worker {index}"),
            Subject::Worker {
                index,
                lcore: Some(l),
            } => write!(f, "worker {index} (lcore {l})"),
            Subject::Port(p) => write!(f, "port {p}"),
            Subject::Named(s) => f.write_str(s),
        }
    }
}

impl Serialize for Subject {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl From<&str> for Subject {
    fn from(s: &str) -> Subject {
        Subject::Named(s.to_owned())
    }
}

impl From<&String> for Subject {
    fn from(s: &String) -> Subject {
        Subject::Named(s.clone())
    }
}

impl From<String> for Subject {
    fn from(s: String) -> Subject {
        Subject::Named(s)
    }
}

/// One problem or note, with its evidence and what to do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Stable snake_case kind (docs/diag.md lists them).
    pub kind: String,
    /// Problem or note.
    pub severity: Severity,
    /// What it concerns.
    pub subject: Subject,
    /// The numbers behind it, in one line.
    pub evidence: String,
    /// The command (or step) to run next.
    pub next: String,
}

impl Finding {
    /// A problem border-mgmt names in GetStatus, with its [`next_step`].
    pub fn of_status(kind: &str, subject: Subject, evidence: String) -> Finding {
        Finding {
            kind: kind.to_owned(),
            severity: Severity::Problem,
            subject,
            evidence,
            next: next_step(kind).to_owned(),
        }
    }
}

/// The next step for a finding border-mgmt names in GetStatus (GetStatus
/// carries kind, subject and evidence; clients that show the step take it
/// from here).
pub fn next_step(kind: &str) -> &'static str {
    match kind {
        "local_tuples_low" => "borderctl stats (local_tuples_*); add [[port]] local_addresses",
        "host_twin_down" => {
            "ip link set dev TWIN up in border-dp's network namespace (or restart border-dp)"
        }
        "local_ports_overlap_ephemeral" => {
            "sysctl net.ipv4.ip_local_port_range in border-dp's namespace back outside every local_port_range"
        }
        _ => "borderctl status",
    }
}

/// Share of a worker's full-NAT local tuples (taken or resting) from which
/// status warns, in percent.
pub const LOCAL_TUPLES_LOW_PCT: u64 = 80;

/// `local_tuples_low` findings: workers whose full-NAT local tuples are
/// at least [`LOCAL_TUPLES_LOW_PCT`] % taken or resting, from each
/// worker's counter values (in [`Counter::ALL`] order) and the number of
/// local addresses the config gives the ports.
pub fn local_tuples(workers: &[(u64, Vec<u64>)], addresses: usize) -> Vec<Finding> {
    let get = |v: &[u64], c: Counter| v.get(c.index()).copied().unwrap_or(0);
    let mut out = Vec::new();
    for (i, (_, v)) in workers.iter().enumerate() {
        let tuples = get(v, Counter::LocalTuples);
        let used = get(v, Counter::LocalTuplesInUse) + get(v, Counter::LocalTuplesResting);
        if tuples == 0 || used * 100 < tuples * LOCAL_TUPLES_LOW_PCT {
            continue;
        }
        let used = used.min(tuples);
        let pct = used * 100 / tuples;
        // Addresses that would bring the same load under the threshold.
        let need = (addresses as u64 * used * 100).div_ceil(tuples * LOCAL_TUPLES_LOW_PCT);
        let need = need.max(addresses as u64 + 1);
        out.push(Finding::of_status(
            "local_tuples_low",
            Subject::Worker {
                index: i as u32,
                lcore: None,
            },
            format!(
                "full-NAT local tuples {used} of {tuples} taken or resting ({pct}%); \
                 new connections are dropped (drop_no_local_port) when none is left: \
                 {need} local addresses instead of {addresses} would keep it under \
                 {LOCAL_TUPLES_LOW_PCT}% (or lower [dataplane.timeouts] local_port_cooldown, \
                 or let clients and backends use TCP timestamps)"
            ),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(tuples: u64, in_use: u64, resting: u64) -> (u64, Vec<u64>) {
        let mut v = vec![0; Counter::COUNT];
        v[Counter::LocalTuples.index()] = tuples;
        v[Counter::LocalTuplesInUse.index()] = in_use;
        v[Counter::LocalTuplesResting.index()] = resting;
        (1, v)
    }

    #[test]
    fn a_pool_at_80_percent_is_named_with_its_numbers() {
        let f = local_tuples(&[worker(1000, 500, 299), worker(1000, 300, 500)], 1);
        assert_eq!(f.len(), 1);
        assert_eq!(
            (f[0].kind.as_str(), f[0].subject.wire()),
            ("local_tuples_low", (1, ""))
        );
        assert!(
            f[0].evidence
                .starts_with("full-NAT local tuples 800 of 1000 taken or resting (80%)"),
            "{}",
            f[0].evidence
        );
        assert!(
            f[0].evidence.contains("2 local addresses instead of 1"),
            "{}",
            f[0].evidence
        );
        let f = local_tuples(&[worker(31744, 31744, 9000)], 4);
        assert!(
            f[0].evidence.contains("(100%)")
                && f[0].evidence.contains("5 local addresses instead of 4")
        );
        assert!(local_tuples(&[worker(0, 0, 0), (0, vec![])], 1).is_empty());
    }
}
