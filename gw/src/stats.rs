//! What the gateway counts about the calls it routes (the metrics exporter,
//! [`crate::metrics`], renders them): each call's outcome, and how long
//! forwarded calls took to get their answer's head back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How a call ended, as far as the gateway is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOutcome {
    /// The answer's head came back from the appliance without an error status.
    Ok,
    /// The appliance answered an error status, or its tunnel failed.
    ApplianceError,
    /// No tunnel of the appliance here, and none the registry names.
    NoTunnel,
    /// The caller's deadline passed first.
    Deadline,
    /// Every tunnel of the appliance stayed busy.
    Busy,
    /// Redis failed or did not answer.
    RegistryError,
    /// The other gateway holding a tunnel could not be reached or broke.
    GatewayError,
    /// Refused before routing: no appliance named, a malformed deadline, a
    /// request too large, a method the appliance does not offer.
    Refused,
    /// A reader (`tls.reader_fingerprints`) called a method only operators may.
    Denied,
}

impl CallOutcome {
    /// Every outcome, in the order they are rendered.
    pub const ALL: [CallOutcome; 9] = [
        CallOutcome::Ok,
        CallOutcome::ApplianceError,
        CallOutcome::NoTunnel,
        CallOutcome::Deadline,
        CallOutcome::Busy,
        CallOutcome::RegistryError,
        CallOutcome::GatewayError,
        CallOutcome::Refused,
        CallOutcome::Denied,
    ];

    /// The `outcome` label.
    pub fn as_str(self) -> &'static str {
        match self {
            CallOutcome::Ok => "ok",
            CallOutcome::ApplianceError => "appliance_error",
            CallOutcome::NoTunnel => "no_tunnel",
            CallOutcome::Deadline => "deadline",
            CallOutcome::Busy => "busy",
            CallOutcome::RegistryError => "registry_error",
            CallOutcome::GatewayError => "gateway_error",
            CallOutcome::Refused => "refused",
            CallOutcome::Denied => "denied",
        }
    }

    fn index(self) -> usize {
        CallOutcome::ALL
            .iter()
            .position(|o| *o == self)
            .unwrap_or(0)
    }
}

/// Upper bounds (seconds) of the forward latency histogram's buckets.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// A latency histogram: counts per bucket (not cumulative), and the sum.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    sum_micros: AtomicU64,
}

impl Histogram {
    /// Counts one observation.
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = LATENCY_BUCKETS
            .iter()
            .position(|b| s <= *b)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// Cumulative counts per bucket bound (the last is `+Inf`: the count).
    pub fn cumulative(&self) -> Vec<u64> {
        let mut total = 0;
        self.buckets
            .iter()
            .map(|b| {
                total += b.load(Ordering::Relaxed);
                total
            })
            .collect()
    }

    /// The sum of the observations, in seconds.
    pub fn sum_seconds(&self) -> f64 {
        self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6
    }
}

/// The gateway's call counters.
#[derive(Debug, Default)]
pub struct CallStats {
    outcomes: [AtomicU64; CallOutcome::ALL.len()],
    /// Forwarded calls (outcome ok or appliance_error): time from the
    /// call's arrival to its answer's head.
    pub forward_latency: Histogram,
    peer_forwards: AtomicU64,
    unknown_holders: AtomicU64,
}

impl CallStats {
    /// Counts a call that ended with `outcome`.
    pub fn count(&self, outcome: CallOutcome) {
        self.outcomes[outcome.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Calls that ended with `outcome`.
    pub fn calls(&self, outcome: CallOutcome) -> u64 {
        self.outcomes[outcome.index()].load(Ordering::Relaxed)
    }

    /// Counts a call sent on to another gateway.
    pub fn count_peer_forward(&self) {
        self.peer_forwards.fetch_add(1, Ordering::Relaxed);
    }

    /// Calls sent on to another gateway.
    pub fn peer_forwards(&self) -> u64 {
        self.peer_forwards.load(Ordering::Relaxed)
    }

    /// A registry entry named a gateway that is not a configured peer.
    pub fn count_unknown_holder(&self) {
        self.unknown_holders.fetch_add(1, Ordering::Relaxed);
    }

    /// Registry entries ignored for naming an unconfigured gateway.
    pub fn unknown_holders(&self) -> u64 {
        self.unknown_holders.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_histogram_is_cumulative_with_an_inf_bucket_and_a_sum() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(500));
        h.observe(Duration::from_millis(1));
        h.observe(Duration::from_millis(30));
        h.observe(Duration::from_secs(60));
        let c = h.cumulative();
        assert_eq!(c.len(), LATENCY_BUCKETS.len() + 1);
        assert_eq!(c[0], 2, "<= 1 ms, the bound included");
        assert_eq!(c[4], 2, "<= 25 ms");
        assert_eq!(c[5], 3, "<= 50 ms");
        assert_eq!(c[LATENCY_BUCKETS.len() - 1], 3, "<= 5 s");
        assert_eq!(c[LATENCY_BUCKETS.len()], 4, "+Inf");
        assert!(
            (h.sum_seconds() - 60.0315).abs() < 1e-9,
            "{}",
            h.sum_seconds()
        );
    }

    #[test]
    fn outcomes_count_apart() {
        let s = CallStats::default();
        s.count(CallOutcome::Ok);
        s.count(CallOutcome::Ok);
        s.count(CallOutcome::Refused);
        assert_eq!(s.calls(CallOutcome::Ok), 2);
        assert_eq!(s.calls(CallOutcome::Refused), 1);
        assert_eq!(s.calls(CallOutcome::NoTunnel), 0);
        let labels: Vec<_> = CallOutcome::ALL.iter().map(|o| o.as_str()).collect();
        let unique: std::collections::BTreeSet<_> = labels.iter().collect();
        assert_eq!(unique.len(), labels.len());
    }
}
