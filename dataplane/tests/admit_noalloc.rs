//! `[vip.limits]`' per-flow checks allocate nothing: a VIP's admission
//! state is built when its table is adopted, and the lists, the buckets,
//! the per-source table (full, overflowing) and the shared counts then run
//! under a counting global allocator that must see zero allocations and
//! zero frees on this thread.

use std::sync::Arc;

mod support;

use support::counting_alloc::{count, Counting};

use conf::tables::{LimitsRecord, PrefixRecord};
use dataplane::conntrack::{FlowKey, State};
use dataplane::counters::Counters;
use dataplane::lb::{Admission, ConnCounts, VipAdmit, FLOW_COUNTED_BACKEND, FLOW_COUNTED_VIP};

#[global_allocator]
static GLOBAL: Counting = Counting;

fn prefix(a: [u8; 4], len: u8, deny: bool) -> PrefixRecord {
    let mut addr = [0u8; 16];
    addr[..4].copy_from_slice(&a);
    PrefixRecord {
        addr,
        len,
        family: 4,
        deny: u8::from(deny),
        reserved: [0; 5],
    }
}

#[test]
fn per_flow_admission_allocates_nothing() {
    let limits = LimitsRecord {
        max_connections: 50,
        new_per_second: 1000,
        new_burst: 100,
        source_per_second: 2,
        source_burst: 2,
        source_table: 64,
        source_prefix_v4: 24,
        source_prefix_v6: 64,
        reserved: [0; 6],
    };
    let prefixes: Vec<PrefixRecord> = (0..200u8)
        .map(|i| prefix([10, i, 0, 0], 16, false))
        .chain((0..200u8).map(|i| prefix([10, i, 7, 0], 24, true)))
        .collect();
    let mut admission = Admission::new(Arc::new(ConnCounts::new(64)));
    let mut admit = VipAdmit::new(limits, &prefixes, [30u32, 0].into_iter(), 7, 0);
    admission.bind(&mut admit, (11, 0), [(21, 0), (22, 1)].into_iter());
    let mut counters = Counters::default();

    let (outcomes, allocs, frees) = count(|| {
        let mut taken = 0u32;
        let mut refused = 0u32;
        for i in 0..20_000u32 {
            let now = u64::from(i / 10);
            let src = std::net::Ipv4Addr::new(10, (i % 250) as u8, (i / 250 % 9) as u8, 1);
            let k = FlowKey::v4(
                src.octets(),
                [10, 255, 0, 1],
                1024 + (i % 60000) as u16,
                80,
                6,
            );
            let counts = &admission.counts;
            match admit.before_pick(&k, now, counts, &mut counters) {
                Ok(()) => match admit.take(i % 2, counts) {
                    Ok(mut held) => {
                        taken += 1;
                        // Half close at once, half when their entry goes.
                        if i % 3 == 0 {
                            admission.closed(State::TimeWait, &mut held, 0, i % 2);
                            assert_eq!(held & (FLOW_COUNTED_VIP | FLOW_COUNTED_BACKEND), 0);
                        } else {
                            admission.release(held, 0, i % 2);
                        }
                    }
                    Err(_) => refused += 1,
                },
                Err(_) => refused += 1,
            }
        }
        (taken, refused)
    });
    assert_eq!((allocs, frees), (0, 0), "allocations on the per-flow path");
    let (taken, refused) = outcomes;
    assert!(taken > 0 && refused > 0, "{taken} taken, {refused} refused");
    assert_eq!(
        admission.counts.open(admit.vip_counter),
        0,
        "every place given back"
    );
}
