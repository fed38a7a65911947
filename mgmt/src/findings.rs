//! Problems `status` names from the dataplane's own numbers, each with its
//! evidence and what to do about it.

use conf::counters::Counter;

use crate::model::Finding;

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
        out.push(Finding {
            kind: "local_tuples_low".into(),
            worker: i as u32,
            detail: format!(
                "full-NAT local tuples {used} of {tuples} taken or resting ({pct}%); \
                 new connections are dropped (drop_no_local_port) when none is left: \
                 {need} local addresses instead of {addresses} would keep it under \
                 {LOCAL_TUPLES_LOW_PCT}% (or lower [dataplane.timeouts] local_port_cooldown, \
                 or let clients and backends use TCP timestamps)"
            ),
            ..Finding::default()
        });
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
        assert_eq!((f[0].kind.as_str(), f[0].worker), ("local_tuples_low", 1));
        assert!(
            f[0].detail
                .starts_with("full-NAT local tuples 800 of 1000 taken or resting (80%)"),
            "{}",
            f[0].detail
        );
        assert!(
            f[0].detail.contains("2 local addresses instead of 1"),
            "{}",
            f[0].detail
        );
        let f = local_tuples(&[worker(31744, 31744, 9000)], 4);
        assert!(
            f[0].detail.contains("(100%)")
                && f[0].detail.contains("5 local addresses instead of 4")
        );
        assert!(local_tuples(&[worker(0, 0, 0), (0, vec![])], 1).is_empty());
    }
}
