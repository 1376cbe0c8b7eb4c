#!/bin/sh
# Runs a test command with the kernel matrix beside it (issue #42: the suite's own time).
#   scripts/beside-matrix.sh 'MATRIX COMMANDS' CMD ARGS...
# The matrix (cargo xtask kernels: Debian's kernels under QEMU TCG) keeps both cores busy for
# ~20 minutes (two static builds, ten guests) and touches nothing of the host's network, while
# the first test binaries mostly wait on traffic they pace (demo.rs used 11% of a core over its
# 346 s here). So the matrix (MATRIX COMMANDS, run by sh) starts first, at a lower priority than
# the tests, and CMD runs beside it.
# Test binaries that need the machine whole (bbrscope/tests/export.rs: its load tests, release
# builds and guest boots) or the matrix's own work directories (xtask/tests/kernel_break.rs)
# wait for it first: the matrix holds tmp/kernel-matrix.lock in cargo's target directory
# exclusively from before CMD starts until it ends, and they take it shared.
# The matrix's output is kept in kernel-matrix.log there and printed when it ends. Exit status:
# CMD's if it failed, else the matrix's. If CMD fails, the matrix is stopped: the run has failed.
set -u
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: scripts/beside-matrix.sh 'MATRIX COMMANDS' CMD ARGS..." >&2; exit 2; }
matrix_commands=$1
shift
# Where cargo builds (the tests find the lock there: CARGO_TARGET_TMPDIR is its tmp/).
target=${CARGO_TARGET_DIR:-target}
mkdir -p "$target/tmp"
lock=$target/tmp/kernel-matrix.lock
log=$target/kernel-matrix.log
now() { date +%s; }

t0=$(now)
# Its own session, so that all of it (cargo, xtask, QEMU) can be stopped together; it holds the
# lock from before the tests start until its last process ends.
setsid nice -n 10 flock -x "$lock" sh -c "$matrix_commands" >"$log" 2>&1 &
matrix=$!
while flock -n -s "$lock" true && kill -0 "$matrix" 2>/dev/null; do
    sleep 0.1
done
stop() { kill -TERM -- -"$matrix" 2>/dev/null; wait "$matrix" 2>/dev/null; }
trap 'stop; exit 130' INT
trap 'stop; exit 143' TERM
echo "beside-matrix: the kernel matrix started beside the tests (pid $matrix; log $log)"

"$@"
rc=$?
if [ $rc -ne 0 ]; then
    echo "beside-matrix: the tests failed (exit $rc); stopping the kernel matrix"
    stop
    tail -n 40 "$log"
    exit $rc
fi
wait "$matrix"
mrc=$?
# Its log's last write is when it ended (it may have ended long before CMD did).
echo "beside-matrix: the kernel matrix took $(($(stat -c %Y "$log") - t0)) s (exit $mrc); its output:"
cat "$log"
if [ $mrc -ne 0 ]; then
    echo "beside-matrix: the kernel matrix FAILED (exit $mrc)"
fi
exit $mrc
