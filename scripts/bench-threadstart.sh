#!/usr/bin/env bash
# bench-threadstart.sh: what a fast-tracepoint run costs a thread's start.
#
# Usage: scripts/bench-threadstart.sh
#
# Environment:
#   REPS=5      sessions per stub (and untraced runs); medians
#   THREADS=8   threads the program starts (all alive at once)
#   STUBS="bin/gotpstub /usr/bin/gdbserver" (when set, nothing is built)
#   IPA=/usr/lib/libinproctrace.so   preloaded into every run (gdbserver
#              needs it for ftrace)
#
# bench/threadstart.c times each pthread_create until the new thread runs.
# Each session: break main, ftrace tp_site (never hit), tstart, continue:
# every thread starts while a fast-tracepoint run collects, which is when
# gotpstub gives a new thread its lane, its first pages allocated and
# mapped (fasttp's threadStarted). Prints the median over sessions of each
# session's median start time and of its slowest start, in µs.
set -euo pipefail
cd "$(dirname "$0")/.."

REPS=${REPS:-5}
THREADS=${THREADS:-8}
IPA=${IPA:-/usr/lib/libinproctrace.so}
[ -f "$IPA" ] || { echo "bench-threadstart.sh: needs gdbserver's in-process agent ($IPA)" >&2; exit 2; }
work=$(mktemp -d)
stub_pid=
cleanup() {
	if [ -n "$stub_pid" ]; then stop_stub; fi
	rm -rf "$work"
}
trap cleanup EXIT
fail() {
	echo "bench-threadstart.sh: FAIL: $*" >&2
	exit 1
}
# shellcheck source=scripts/stub-lib.sh
. scripts/stub-lib.sh
if [ -z "${STUBS:-}" ]; then
	go build -o bin/gotpstub ./cmd/gotpstub
	STUBS="bin/gotpstub /usr/bin/gdbserver"
fi
prog=$work/threadstart
gcc -O2 -g -no-pie -fno-PIE -pthread -o "$prog" bench/threadstart.c
cat >"$work/session.gdb" <<'GDB'
break main
continue
ftrace tp_site
tstart
continue
GDB

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
field() { sed -n "s/.*$1=\([0-9][0-9]*\).*/\1/p" "$2" | tail -n 1; }

# session STUB: one traced run; prints "start_us max_us".
session() {
	local stub=$1 log=$work/stub.log
	start_listening "$log" "$stub" --wrapper env "LD_PRELOAD=$IPA" -- --once @ADDR@ "$prog" "$THREADS"
	timeout 120 gdb -batch -nx -ex "set sysroot /" -ex "target remote 127.0.0.1:$port" \
		-x "$work/session.gdb" "$prog" >"$work/gdb.out" 2>&1 || true
	wait_stub
	grep -q "Fast tracepoint 2 at" "$work/gdb.out" || { cat "$work/gdb.out" >&2; fail "$stub: no fast tracepoint"; }
	echo "$(field start_us "$log") $(field max_us "$log")"
}

printf '%-24s %14s %12s\n' run start_us max_us
for _ in $(seq "$REPS"); do env "LD_PRELOAD=$IPA" "$prog" "$THREADS" >"$work/plain.out"; field start_us "$work/plain.out"; done >"$work/u"
printf '%-24s %14s %12s\n' untraced "$(median <"$work/u")" -
for stub in $STUBS; do
	: >"$work/s"
	for _ in $(seq "$REPS"); do session "$stub" >>"$work/s"; done
	printf '%-24s %14s %12s\n' "$stub" "$(cut -d' ' -f1 "$work/s" | median)" "$(cut -d' ' -f2 "$work/s" | median)"
done
