//! One timed replay: on-CPU and wall-clock TSC ticks per packet and the
//! allocations it made, for the pipeline and for the bare loop.

use std::sync::Arc;

use super::ports::{bare_loop, BenchPorts, Replay};
use super::rig::Rig;
use crate::alloc_count::allocations;
use crate::clock;
use crate::stats::Summary;

/// CPU time of the calling thread, in nanoseconds: unlike the TSC it does
/// not advance while the thread is preempted (the box is shared).
pub(crate) fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid, exclusive
    // pointer to a local; CLOCK_THREAD_CPUTIME_ID is always available on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One timed replay: per packet, TSC ticks while on the CPU (thread CPU
/// time x TSC rate) and wall-clock TSC ticks; and the allocations it made.
pub(super) struct Sample {
    pub(super) ticks: f64,
    pub(super) wall: f64,
    pub(super) allocs: u64,
}

pub(super) fn timed(hz: f64, body: impl FnOnce() -> u64) -> Sample {
    let a0 = allocations();
    let c0 = thread_cpu_ns();
    let (moved, _dt, ticks) = clock::measure(body);
    let cpu = thread_cpu_ns() - c0;
    let allocs = allocations() - a0;
    let n = moved.max(1) as f64;
    Sample {
        ticks: cpu as f64 * hz / 1e9 / n,
        wall: ticks as f64 / n,
        allocs,
    }
}

pub(super) fn pipeline_sample(
    rig: &mut Rig,
    port: usize,
    frames: &Arc<Replay>,
    packets: u64,
) -> Sample {
    rig.w.io.replay(port, frames, packets);
    timed(rig.hz, || {
        while rig.w.io.remaining() > 0 {
            rig.w.poll_once();
        }
        packets
    })
}

pub(super) fn bare_sample(hz: f64, frames: &Arc<Replay>, port: usize, packets: u64) -> Sample {
    let mut io = BenchPorts::new(2, 4 * dataplane::io::BURST * 3);
    io.replay(port, frames, packets);
    bare_loop(&mut io, port, 1 - port); // warm
    io.replay(port, frames, packets);
    timed(hz, || bare_loop(&mut io, port, 1 - port))
}

pub(super) fn summarize(s: &[Sample]) -> Summary {
    Summary::of(&s.iter().map(|x| x.ticks).collect::<Vec<_>>()).expect("samples")
}

pub(super) fn summarize_wall(s: &[Sample]) -> Summary {
    Summary::of(&s.iter().map(|x| x.wall).collect::<Vec<_>>()).expect("samples")
}
