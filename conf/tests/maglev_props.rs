//! Properties of the Maglev ring: exact weighted shares, order independence,
//! minimal disruption on removal and addition, and the flow hash encodings.
//!
//! The disruption figures are printed (`cargo test -p conf --test
//! maglev_props -- --nocapture`).

use conf::flowhash::{encode_v4, encode_v6, FlowHasher};
use conf::maglev::{build, build_into, is_prime, BackendId, MaglevBackend, MaglevScratch};
use proptest::prelude::*;

const M: u32 = 65537;

fn backend(i: u32, weight: u32) -> MaglevBackend {
    // 10.x.y.z:8000+(i % 7): distinct for distinct i.
    let [_, b, c, d] = (i + 1).to_be_bytes();
    MaglevBackend {
        id: BackendId::v4([10, b, c, d], 8000 + (i % 7) as u16),
        weight,
    }
}

fn counts(table: &[u32], n: usize) -> Vec<u64> {
    let mut c = vec![0u64; n];
    for &i in table {
        c[i as usize] += 1;
    }
    c
}

/// Every backend holds exactly floor or ceil of `w * m / W` slots.
fn assert_exact_shares(backends: &[MaglevBackend], table: &[u32], m: u32) {
    assert_eq!(table.len(), m as usize);
    let total: u64 = backends.iter().map(|b| u64::from(b.weight)).sum();
    let c = counts(table, backends.len());
    for (b, &got) in backends.iter().zip(&c) {
        let p = u64::from(b.weight) * u64::from(m);
        let (floor, ceil) = (p / total, p.div_ceil(total));
        assert!(
            got == floor || got == ceil,
            "{:?} weight {}: {} slots, share {}..={} (m {m})",
            b.id,
            b.weight,
            got,
            floor,
            ceil
        );
    }
}

/// Table as backend ids, for comparing tables built from different slices.
fn as_ids(backends: &[MaglevBackend], table: &[u32]) -> Vec<BackendId> {
    table.iter().map(|&i| backends[i as usize].id).collect()
}

/// Fraction of the slots that surviving backends held in `old` and that
/// point elsewhere in `new`. `survives` says which old ids are still there.
fn disruption(old: &[BackendId], new: &[BackendId], survives: impl Fn(&BackendId) -> bool) -> f64 {
    let (mut held, mut moved) = (0u64, 0u64);
    for (o, n) in old.iter().zip(new) {
        if survives(o) {
            held += 1;
            if o != n {
                moved += 1;
            }
        }
    }
    moved as f64 / held as f64
}

fn summary(xs: &[f64]) -> (f64, f64, f64) {
    let mean = xs.iter().sum::<f64>() / xs.len() as f64;
    let max = xs.iter().cloned().fold(0.0, f64::max);
    let min = xs.iter().cloned().fold(1.0, f64::min);
    (min, mean, max)
}

/// Removing any one of 100 backends moves at most 4% of the slots of the
/// survivors (the removed backend's own slots must move, they don't count).
fn removal_figures(weights: &[u32]) -> Vec<f64> {
    let all: Vec<_> = weights
        .iter()
        .enumerate()
        .map(|(i, &w)| backend(i as u32, w))
        .collect();
    let old = as_ids(&all, &build(&all, M).unwrap());
    let mut table = Vec::new();
    let mut scratch = MaglevScratch::new();
    (0..all.len())
        .map(|gone| {
            let mut rest = all.clone();
            let removed = rest.remove(gone).id;
            build_into(&mut table, &mut scratch, &rest, M).unwrap();
            let new = as_ids(&rest, &table);
            disruption(&old, &new, |id| *id != removed)
        })
        .collect()
}

/// Adding one backend to 100 moves at most 4% of the slots beyond the ones
/// the newcomer must take (its share, 1/101 of the ring for equal weights).
fn addition_figures(weights: &[u32], new_weight: u32, tries: u32) -> Vec<f64> {
    let base: Vec<_> = weights
        .iter()
        .enumerate()
        .map(|(i, &w)| backend(i as u32, w))
        .collect();
    let old = as_ids(&base, &build(&base, M).unwrap());
    (0..tries)
        .map(|k| {
            let mut more = base.clone();
            let added = backend(1000 + k, new_weight);
            more.push(added);
            let new = as_ids(&more, &build(&more, M).unwrap());
            // Slots that went to someone other than the newcomer.
            let (mut held, mut moved) = (0u64, 0u64);
            for (o, n) in old.iter().zip(&new) {
                held += 1;
                if o != n && *n != added.id {
                    moved += 1;
                }
            }
            moved as f64 / held as f64
        })
        .collect()
}

#[test]
fn disruption_remove_one_of_100_equal() {
    let figs = removal_figures(&[1; 100]);
    let (min, mean, max) = summary(&figs);
    eprintln!(
        "maglev M={M}, 100 equal backends, remove 1 (all 100 cases): survivor slots \
         reassigned min {:.3}% mean {:.3}% max {:.3}%",
        min * 100.0,
        mean * 100.0,
        max * 100.0
    );
    assert!(max <= 0.04, "max disruption {:.3}%", max * 100.0);
}

#[test]
fn disruption_remove_one_of_100_weighted() {
    let weights: Vec<u32> = (0..100).map(|i| 1 + (i * 7919 % 10)).collect();
    let figs = removal_figures(&weights);
    let (min, mean, max) = summary(&figs);
    eprintln!(
        "maglev M={M}, 100 backends weights 1..=10, remove 1 (all 100 cases): survivor \
         slots reassigned min {:.3}% mean {:.3}% max {:.3}%",
        min * 100.0,
        mean * 100.0,
        max * 100.0
    );
    assert!(max <= 0.04, "max disruption {:.3}%", max * 100.0);
}

#[test]
fn disruption_add_one_to_100_equal() {
    let figs = addition_figures(&[1; 100], 1, 20);
    let (min, mean, max) = summary(&figs);
    eprintln!(
        "maglev M={M}, 100 equal backends, add 1 (20 cases): slots moved between old \
         backends min {:.3}% mean {:.3}% max {:.3}% (newcomer takes {:.3}%)",
        min * 100.0,
        mean * 100.0,
        max * 100.0,
        100.0 / 101.0
    );
    assert!(max <= 0.04, "max disruption {:.3}%", max * 100.0);
}

#[test]
fn disruption_add_one_to_100_weighted() {
    let weights: Vec<u32> = (0..100).map(|i| 1 + (i * 7919 % 10)).collect();
    let figs = addition_figures(&weights, 5, 20);
    let (min, mean, max) = summary(&figs);
    eprintln!(
        "maglev M={M}, 100 backends weights 1..=10, add 1 of weight 5 (20 cases): slots \
         moved between old backends min {:.3}% mean {:.3}% max {:.3}%",
        min * 100.0,
        mean * 100.0,
        max * 100.0
    );
    assert!(max <= 0.04, "max disruption {:.3}%", max * 100.0);
}

/// Doubling or halving one backend's weight (100 backends, weights 1..=10)
/// moves few slots beyond those that change hands to or from that backend.
#[test]
fn disruption_weight_change() {
    let weights: Vec<u32> = (0..100).map(|i| 1 + (i * 7919 % 10)).collect();
    let base: Vec<_> = weights
        .iter()
        .enumerate()
        .map(|(i, &w)| backend(i as u32, w))
        .collect();
    let old = as_ids(&base, &build(&base, M).unwrap());
    let mut figs = Vec::new();
    for k in (0..100).step_by(10) {
        for factor in [2.0, 0.5] {
            let mut changed = base.clone();
            let w = changed[k].weight;
            changed[k].weight = ((f64::from(w) * factor).round() as u32).max(1);
            if changed[k].weight == w {
                continue;
            }
            let who = changed[k].id;
            let new = as_ids(&changed, &build(&changed, M).unwrap());
            // Moves not explained by the changed backend gaining or losing.
            let moved = old
                .iter()
                .zip(&new)
                .filter(|(o, n)| o != n && **o != who && **n != who)
                .count();
            figs.push(moved as f64 / f64::from(M));
        }
    }
    let (min, mean, max) = summary(&figs);
    eprintln!(
        "maglev M={M}, 100 backends weights 1..=10, one weight x2 or /2 ({} cases): slots \
         moved between other backends min {:.3}% mean {:.3}% max {:.3}%",
        figs.len(),
        min * 100.0,
        mean * 100.0,
        max * 100.0
    );
    assert!(max <= 0.04, "max disruption {:.3}%", max * 100.0);
}

#[test]
fn shares_exact_at_default_m_with_1000_backends() {
    let weighted: Vec<_> = (0..1000u32)
        .map(|i| backend(i, 1 + i.wrapping_mul(2654435761) % 100))
        .collect();
    assert_exact_shares(&weighted, &build(&weighted, M).unwrap(), M);
    let equal: Vec<_> = (0..1000u32).map(|i| backend(i, 1)).collect();
    assert_exact_shares(&equal, &build(&equal, M).unwrap(), M);
}

/// Every weight vector over {0..=3}^n, n <= 4, for every prime m < 60.
#[test]
fn shares_exact_exhaustive_small() {
    let primes: Vec<u32> = (2..60).filter(|&m| is_prime(m)).collect();
    let mut scratch = MaglevScratch::new();
    let mut table = Vec::new();
    for n in 1..=4u32 {
        for code in 0..4u32.pow(n) {
            let bs: Vec<_> = (0..n).map(|i| backend(i, code / 4u32.pow(i) % 4)).collect();
            let active = bs.iter().filter(|b| b.weight > 0).count() as u32;
            for &m in &primes {
                let r = build_into(&mut table, &mut scratch, &bs, m);
                if active == 0 || active > m {
                    assert!(r.is_err(), "n {n} code {code} m {m}");
                    assert!(table.is_empty());
                    continue;
                }
                r.unwrap();
                assert_exact_shares(&bs, &table, m);
            }
        }
    }
}

/// A weight-0 backend never appears; adding or removing one changes nothing.
#[test]
fn zero_weight_is_invisible() {
    let bs: Vec<_> = (0..20).map(|i| backend(i, 1 + i % 4)).collect();
    let mut with_zero = bs.clone();
    with_zero.insert(7, backend(500, 0));
    let a = as_ids(&bs, &build(&bs, 4099).unwrap());
    let b = as_ids(&with_zero, &build(&with_zero, 4099).unwrap());
    assert_eq!(a, b);
}

fn arb_backends(max: usize) -> impl Strategy<Value = Vec<MaglevBackend>> {
    // Unique identities, then weights (at least one non-zero).
    (
        prop::collection::btree_set((any::<[u8; 16]>(), any::<u16>(), any::<bool>()), 1..max),
        prop::collection::vec(0u32..50, max),
    )
        .prop_map(|(ids, weights)| {
            let mut v: Vec<_> = ids
                .into_iter()
                .zip(weights)
                .map(|((addr, port, v4), weight)| MaglevBackend {
                    id: if v4 {
                        BackendId::v4([addr[0], addr[1], addr[2], addr[3]], port)
                    } else {
                        BackendId::v6(addr, port)
                    },
                    weight,
                })
                .collect();
            // v4 ids from distinct tuples may coincide: dedup by id.
            v.sort_by_key(|b| b.id);
            v.dedup_by_key(|b| b.id);
            if v.iter().all(|b| b.weight == 0) {
                v[0].weight = 1;
            }
            v
        })
}

fn arb_prime() -> impl Strategy<Value = u32> {
    prop::sample::select(vec![101u32, 251, 1009, 4099, 10007, 65537])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn shares_are_floor_or_ceil(bs in arb_backends(60), m in arb_prime()) {
        let active = bs.iter().filter(|b| b.weight > 0).count();
        prop_assume!(active <= m as usize);
        let t = build(&bs, m).unwrap();
        assert_exact_shares(&bs, &t, m);
        prop_assert!(t.iter().all(|&i| bs[i as usize].weight > 0));
    }

    #[test]
    fn input_order_does_not_matter(
        (bs, shuffled) in arb_backends(40).prop_flat_map(|v| (Just(v.clone()), Just(v).prop_shuffle())),
        m in arb_prime(),
    ) {
        let a = as_ids(&bs, &build(&bs, m).unwrap());
        let b = as_ids(&shuffled, &build(&shuffled, m).unwrap());
        prop_assert_eq!(a, b);
    }

    #[test]
    fn scratch_reuse_matches_fresh_build(
        runs in prop::collection::vec((arb_backends(30), arb_prime()), 1..5),
    ) {
        let mut scratch = MaglevScratch::new();
        let mut table = Vec::new();
        for (bs, m) in runs {
            build_into(&mut table, &mut scratch, &bs, m).unwrap();
            prop_assert_eq!(&table, &build(&bs, m).unwrap());
        }
    }

    #[test]
    fn non_primes_are_refused(m in 0u32..100_000, bs in arb_backends(5)) {
        prop_assert_eq!(build(&bs, m).is_ok(), is_prime(m));
    }

    #[test]
    fn flow_hash_fixed_forms_match_encoding(
        key in any::<[u8; 16]>(),
        s4 in any::<[u8; 4]>(), d4 in any::<[u8; 4]>(),
        s6 in any::<[u8; 16]>(), d6 in any::<[u8; 16]>(),
        sp in any::<u16>(), dp in any::<u16>(), proto in any::<u8>(),
    ) {
        let h = FlowHasher::new(key);
        prop_assert_eq!(h.hash_v4(s4, d4, sp, dp, proto), h.hash_bytes(&encode_v4(s4, d4, sp, dp, proto)));
        prop_assert_eq!(h.hash_v6(s6, d6, sp, dp, proto), h.hash_bytes(&encode_v6(s6, d6, sp, dp, proto)));
    }
}
