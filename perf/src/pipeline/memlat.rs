//! The memory's latency: a pointer chase through randomly linked cache
//! lines, one chase at a time and several interleaved (the note under the
//! benchmark's table).

use crate::clock;

/// One cache line of the pointer chase: the index of the next line.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(super) struct Line {
    next: usize,
    _pad: [usize; 7],
}

/// TSC ticks per access of `chains` interleaved pointer chases through
/// `bytes` of cache lines linked in one random cycle (Sattolo's shuffle),
/// so each access depends on the previous one of its chain and lands on a
/// random line: with 1 chain, the latency of one random access (a
/// connection-table lookup's miss); with several, the time per access
/// when that many misses overlap (what prefetching a burst can reach).
/// `huge`: the memory is advised for transparent huge pages, as the
/// connection table's is; else 4 KiB pages (a TLB miss on top).
pub(super) fn chase(bytes: usize, chains: usize, huge: bool, steps: usize) -> f64 {
    let n = (bytes / 64).max(chains * 2);
    let mut v: Vec<Line> = Vec::with_capacity(n);
    if huge {
        // Advised before the lines are written, as the connection table is.
        conf::os::advise_huge_pages(v.as_ptr().cast(), n * std::mem::size_of::<Line>());
    }
    v.extend((0..n).map(|i| Line {
        next: i,
        _pad: [0; 7],
    }));
    // Sattolo: one cycle through every line, in random order.
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    for i in (1..n).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let j = (x % i as u64) as usize;
        let (a, b) = (v[i].next, v[j].next);
        v[i].next = b;
        v[j].next = a;
    }
    // Chains start spread along the cycle.
    let mut at = [0usize; 32];
    let chains = chains.clamp(1, at.len());
    let mut p = 0;
    for (k, a) in at.iter_mut().enumerate().take(chains) {
        while p < k * (n / chains) {
            p += 1;
        }
        *a = p;
    }
    let mut walk = |steps: usize| {
        for _ in 0..steps {
            for a in at.iter_mut().take(chains) {
                *a = v[*a].next;
            }
        }
        std::hint::black_box(&at);
    };
    walk(steps / 4); // fault in and warm the TLB
    let ((), _, ticks) = clock::measure(|| walk(steps));
    ticks as f64 / (steps * chains) as f64
}
