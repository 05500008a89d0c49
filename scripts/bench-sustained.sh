#!/usr/bin/env bash
# bench-sustained.sh: sustained per-hit cost of fast tracepoints, gotpstub
# vs gdbserver + its in-process agent, on the same program in one run.
#
# Usage: scripts/bench-sustained.sh [ROW...]      (rows 1-11, default all)
#
# Environment:
#   REPS=3     sessions per stub and row (and untraced runs); medians
#   SCALE=1    multiplies every row's hit count (SCALE=0.1 for a quick look)
#   IPA=/usr/lib/libinproctrace.so   gdbserver's agent; preloaded into
#              every run (both stubs and the untraced baseline) so the
#              workload is the same: gdbserver needs it for ftrace
#   STUBS="bin/gotpstub /usr/bin/gdbserver" (when set, nothing is built)
#
# The program (bench/sustained.c, built non-PIE: gdbserver's agent puts its
# pads in the low 2 GB) runs NTHREADS threads calling hit(a, b) in a tight
# loop; the fast tracepoint is at hit's first instruction, an 8-byte
# `addq $1, counter(%rip)`. Each session: break main, set the buffer,
# ftrace (with the row's condition and actions), tstart, continue to
# loop_done, tstatus, continue to the end (no tstop: a full buffer has
# stopped the run already). Per-hit overhead =
# (traced loop ns - untraced loop ns) / hits per thread, where loop ns is
# the slowest thread's loop. The rows are issue 8's:
#   1  no actions, gdb's default trace buffer, 500,000 hits
#   2  no actions, 3,000,000 hits, defaults
#   3  no actions, 3,000,000 hits, a buffer that never fills (512 MiB)
#   4  `if (a+a+b+b+b) >= 0` + `collect $regs`, 200,000 hits, defaults
#   5  same, 200,000 hits, a buffer that never fills (512 MiB)
#   6  same as 4, 2 threads x 100,000, per thread
#   7  no actions, 2 threads x 400,000, a buffer that never fills, per thread
# and two more that are not issue 8's: the threads of row 7 share the
# cache line of hit's counter (and of sink), which costs a line transfer
# per traced call once the pad spaces the calls out; rows 8 to 11 trace
# hit_own instead (a thread-local counter, `addq $1, %fs:...`):
#   8  no actions, 1 thread x 400,000 calls of hit_own, 512 MiB buffer
#   9  no actions, 2 threads x 400,000 calls of hit_own, 512 MiB, per thread
#  10  row 4 on hit_own: condition + `collect $regs`, 1 x 200,000, defaults
#  11  row 6 on hit_own: the same, 2 threads x 100,000, per thread
# With gdb's defaults a linear buffer fills and tracing stops (tfull) part
# way: the rest of the hits run through an inactive pad; that is the
# sustained cost a user of gdb's defaults pays. Frames collected and
# dropped hits (gotpstub's tstatus notes) are shown for each run.
set -euo pipefail
cd "$(dirname "$0")/.."

REPS=${REPS:-3}
SCALE=${SCALE:-1}
IPA=${IPA:-/usr/lib/libinproctrace.so}
[ -f "$IPA" ] || { echo "bench-sustained.sh: needs gdbserver's in-process agent ($IPA)" >&2; exit 2; }
rows=("$@")
[ ${#rows[@]} -gt 0 ] || rows=(1 2 3 4 5 6 7 8 9 10 11)

work=$(mktemp -d)
stub_pid=
cleanup() {
	if [ -n "$stub_pid" ]; then kill "$stub_pid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT
fail() {
	echo "bench-sustained.sh: FAIL: $*" >&2
	exit 1
}

if [ -z "${STUBS:-}" ]; then
	go build -o bin/gotpstub ./cmd/gotpstub
	STUBS="bin/gotpstub /usr/bin/gdbserver"
fi
prog=$work/sustained
gcc -O2 -g -no-pie -fno-PIE -pthread -o "$prog" bench/sustained.c

# row N: sets threads, hits (per thread), buffer ("" = gdb's default), cond, actions.
row() {
	cond="" actions="" buffer="" threads=1 fn=hit mode=
	case $1 in
	1) hits=500000 ;;
	2) hits=3000000 ;;
	3) hits=3000000 buffer=536870912 ;;
	4) hits=200000 cond=" if (a+a+b+b+b) >= 0" actions='collect $regs' ;;
	5) hits=200000 cond=" if (a+a+b+b+b) >= 0" actions='collect $regs' buffer=536870912 ;;
	6) hits=100000 threads=2 cond=" if (a+a+b+b+b) >= 0" actions='collect $regs' ;;
	7) hits=400000 threads=2 buffer=536870912 ;;
	8) hits=400000 buffer=536870912 fn=hit_own mode=own ;;
	9) hits=400000 threads=2 buffer=536870912 fn=hit_own mode=own ;;
	10) hits=200000 cond=" if (a+a+b+b+b) >= 0" actions='collect $regs' fn=hit_own mode=own ;;
	11) hits=100000 threads=2 cond=" if (a+a+b+b+b) >= 0" actions='collect $regs' fn=hit_own mode=own ;;
	*) fail "no row $1" ;;
	esac
	hits=$(awk -v h="$hits" -v s="$SCALE" 'BEGIN { printf "%d", h * s }')
	[ "$hits" -gt 0 ] || fail "SCALE leaves no hits"
}

median() { sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) exit 1; print v[int((NR + 1) / 2)] }'; }
loop_ns_of() { sed -n 's/^loop_ns=\([0-9][0-9]*\) .*/\1/p' "$1" | tail -n 1; }

# session STUB: one traced run of the current row; prints "loop_ns frames dropped".
session() {
	local stub=$1 log=$work/stub.log out=$work/gdb.out port started=
	for _ in 1 2 3 4 5 6 7 8; do
		port=$((30000 + RANDOM % 5000))
		"$stub" --wrapper env "LD_PRELOAD=$IPA" -- --once "127.0.0.1:$port" "$prog" "$threads" "$hits" $mode >"$log" 2>&1 &
		stub_pid=$!
		for _ in $(seq 200); do
			if grep -q "Listening on port" "$log"; then started=1; break; fi
			kill -0 "$stub_pid" 2>/dev/null || break
			sleep 0.05
		done
		[ -n "$started" ] && break
		wait "$stub_pid" 2>/dev/null || true
		stub_pid=
	done
	[ -n "$started" ] || { cat "$log" >&2; fail "$stub did not start"; }
	{
		echo "break main"
		echo "continue"
		[ -z "$buffer" ] || echo "set trace-buffer-size $buffer"
		echo "ftrace $fn$cond"
		if [ -n "$actions" ]; then printf 'actions\n%s\nend\n' "$actions"; fi
		echo "break loop_done"
		echo "tstart"
		echo "continue"
		echo "tstatus"
		echo "delete"
		echo "continue"
	} >"$work/session.gdb"
	timeout 900 gdb -batch -nx -ex "set sysroot /" -ex "set confirm off" \
		-ex "target remote 127.0.0.1:$port" -x "$work/session.gdb" "$prog" >"$out" 2>&1 || true
	for _ in $(seq 100); do kill -0 "$stub_pid" 2>/dev/null || break; sleep 0.05; done
	kill "$stub_pid" 2>/dev/null || true
	wait "$stub_pid" 2>/dev/null || true
	stub_pid=
	local ns frames dropped
	ns=$(loop_ns_of "$log")
	[ -n "$ns" ] || { cat "$out" "$log" >&2; fail "$stub: no loop_ns"; }
	grep -q "Fast tracepoint 2 at" "$out" || { cat "$out" >&2; fail "$stub: gdb did not set the fast tracepoint"; }
	frames=$(sed -n 's/.*\(Collected\|contains\) \([0-9][0-9]*\) trace frames.*/\2/p' "$out" | head -n 1)
	dropped=$(sed -n 's/.*gotpstub: \([0-9][0-9]*\) fast tracepoint hits dropped.*/\1/p' "$out" | head -n 1)
	echo "$ns ${frames:-?} ${dropped:-0}"
}

untraced() {
	env "LD_PRELOAD=$IPA" "$prog" "$threads" "$hits" $mode >"$work/plain.out"
	loop_ns_of "$work/plain.out"
}

echo "# scripts/bench-sustained.sh ${rows[*]}  (REPS=$REPS SCALE=$SCALE) on $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs"
echo "# per-hit overhead over the untraced loop, ns (per thread for 2-thread rows); median of $REPS"
printf '%-4s %-52s %10s' row workload untraced
for stub in $STUBS; do printf ' %16s %9s' "$(basename "$stub") ns/hit" frames; done
printf ' %9s %s\n' dropped "ratio (x better)"
for r in "${rows[@]}"; do
	row "$r"
	desc="$threads thr x $hits${mode:+ $fn}${cond:+, cond}${actions:+, $actions}, buffer ${buffer:-default}"
	base=$(for _ in $(seq "$REPS"); do untraced; done | median)
	printf '%-4s %-52s %10s' "$r" "$desc" "$base"
	per=()
	drop=0
	for stub in $STUBS; do
		res=$(for _ in $(seq "$REPS"); do session "$stub"; done)
		ns=$(echo "$res" | awk '{print $1}' | median)
		frames=$(echo "$res" | awk '{print $2}' | sort -n | tail -n 1)
		d=$(echo "$res" | awk '{print $3}' | median)
		[ "$d" = 0 ] || drop=$d
		o=$(awk -v t="$ns" -v b="$base" -v h="$hits" 'BEGIN { printf "%.1f", (t - b) / h }')
		per+=("$o")
		printf ' %16s %9s' "$o" "$frames"
	done
	ratio=
	if [ ${#per[@]} -eq 2 ]; then
		ratio=$(awk -v a="${per[0]}" -v b="${per[1]}" 'BEGIN { if (a > 0) printf "%.1fx", b / a; else print "-" }')
	fi
	printf ' %9s %s\n' "$drop" "$ratio"
done
