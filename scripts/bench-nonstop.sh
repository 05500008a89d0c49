#!/usr/bin/env bash
# bench-nonstop.sh: how long tstart and tstop stop a running program's
# threads in gdb's non-stop mode, for one or more builds of gotpstub,
# alternating them in one run (this kind of VM's speed drifts).
#
# Usage: scripts/bench-nonstop.sh [SUBTEST...]
#        (default: live "int3_puns,_all_running,_live")
#
# Each SUBTEST of e2e's TestNonStopTraceWhileRunning (testdata/stress8.c:
# eight threads spinning while gdb places and removes three fast
# tracepoints 200 times, every cycle's trace checked) runs once per stub
# and repetition; the test prints, per packet kind, the median and the
# longest of the longest stop of any thread per packet (the stub's
# --timing log), and the packet's own time; then the kernel's measure of
# the same stops (the scheduler's sched_switch and sched_waking events,
# recorded through tracefs: run as root; tracefs is mounted here if it
# is not). A failed run is printed as FAIL with its test output's last
# lines.
#
# Environment:
#   STUBS="bin/gotpstub"  the stubs to compare (when set, nothing is built).
#            A build older than --live-patch=on|off (before 2026-11-28
#            evening) needs a wrapper that turns --live-patch=on into
#            --live-patch and drops --live-patch=off.
#   REPS=3   repetitions
#   SHORT=1  20 cycles instead of 200 (go test -short)
set -euo pipefail
cd "$(dirname "$0")/.."
subtests=("$@")
[ ${#subtests[@]} -gt 0 ] || subtests=(live "int3_puns,_all_running,_live")
stubs=${STUBS:-}
if [ -z "$stubs" ]; then
	go build -o bin/gotpstub ./cmd/gotpstub
	stubs=bin/gotpstub
fi
if [ "$(id -u)" = 0 ] && [ ! -e /sys/kernel/tracing/instances ]; then
	mount -t tracefs nodev /sys/kernel/tracing || true
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/e2e.test" ./e2e
flags=(-test.v)
[ -z "${SHORT:-}" ] || flags+=(-test.short)
for rep in $(seq 1 "${REPS:-3}"); do
	for stub in $stubs; do
		abs=$(cd "$(dirname "$stub")" && pwd)/$(basename "$stub")
		for sub in "${subtests[@]}"; do
			out=$(cd e2e && GOTPSTUB_STUB=$abs "$tmp/e2e.test" \
				-test.run "TestNonStopTraceWhileRunning/^${sub}\$" "${flags[@]}" 2>&1) || true
			line=$(grep -m1 "cycles with" <<<"$out" || true)
			if [ -z "$line" ] || grep -q -- "--- FAIL" <<<"$out"; then
				echo "rep $rep $stub $sub: FAIL"
				tail -15 <<<"$out"
				continue
			fi
			summary=$(sed -E 's/.*QTStart: longest stop of a thread median ([0-9]+) µs, max ([0-9]+) µs.*packet took median ([0-9]+) µs, max ([0-9]+) µs\); QTStop: longest stop of a thread median ([0-9]+) µs, max ([0-9]+) µs.*packet took median ([0-9]+) µs, max ([0-9]+) µs\).*/QTStart: thread stop median \1 µs (max \2), packet \3 µs (max \4) | QTStop: thread stop median \5 µs (max \6), packet \7 µs (max \8)/' <<<"$line")
			echo "rep $rep $stub $sub: $summary"
			kernel=$(grep -m1 -o "scheduler trace.*\|no scheduler trace.*" <<<"$out" || true)
			[ -z "$kernel" ] || echo "    $kernel"
		done
	done
done
