#!/bin/bash
# Runs "$@" with every compiler, linker, valgrind and other border-perf on
# the machine paused (SIGSTOP), and resumes them afterwards whatever happens.
# The figures in docs/performance.md marked "quiet" were taken this way on a
# 2-core VM shared with builds: a benchmark then sees a machine close to idle
# without the builds being killed.
#   perf/quiet-run.sh target/release/border-perf adopt --samples 5
# (Not for valgrind: instruction counts need no quiet, and the pattern
# below would pause this script too.)
set -u
signal_all() {
    local sig=$1
    for name in rustc cc1 ld cc border-perf; do pkill "-$sig" -x "$name"; done
    pkill "-$sig" -f 'rust-lld|ld.lld|collect2|valgrind'
}
trap 'signal_all CONT' EXIT
signal_all STOP
sleep 3
echo "load at start: $(cat /proc/loadavg)"
"$@"
