#!/usr/bin/env bash
# bench-trap.sh: per-hit cost of a conditional, collecting trap (int3)
# tracepoint, gotpstub vs gdbserver on the same program (bench/hitloop.c).
#
# Usage: scripts/bench-trap.sh [--syscalls]
#
# Environment:
#   N=20000        calls of hit() in the timed loop (frames expected: N/2)
#   IDLE_THREADS=0 extra threads the program starts, idling in pause(),
#                  while its main thread runs the loop (a multi-threaded
#                  program whose leader hits the tracepoint)
#   KIND=trace     trace: int3 tracepoints; ftrace: fast tracepoints (jump
#                  pads). With ftrace every stub and the untraced runs get
#                  gdbserver's in-process agent preloaded (IPA=path, default
#                  /usr/lib/libinproctrace.so; IPA=none: nothing preloaded,
#                  for gotpstub alone where the agent does not load — on
#                  arm64 Debian 13.1's crashes in its constructor):
#                  gdbserver needs it for ftrace,
#                  gotpstub does not, and the workload stays the same (the
#                  agent starts a helper thread)
#   REPS=3         sessions per stub (and untraced runs); the median is used
#   STUBS="bin/gotpstub /usr/bin/gdbserver"
#                  the stubs compared (when set, nothing is built); with two
#                  stubs the speed-up printed is second / first per-hit cost
#   WRAP=          a command prefix for the stubs (and the untraced runs),
#                  for example WRAP="taskset -c 1 chrt -f 10" to keep a busy
#                  machine's other work from dominating the wall times: the
#                  program inherits the CPU and the real-time priority
#   SYSCALL_N1=500 SYSCALL_N2=1500
#                  with --syscalls: the two loop sizes whose system call
#                  counts are subtracted to get the stub's calls per hit
#
# For each stub and repetition: start the stub (--once) on a free localhost
# port with the program, run gdb -batch with bench/trap.gdb (trace hit if
# i % 2 == 0, collect i, $regs, tstart, break at loop_done, continue, tstop,
# tstatus, continue to the end) and read the program's own loop time
# (loop_ns=...) from the stub's output. Per-hit cost is
# (traced loop ns - untraced loop ns) / N, where the untraced time is the
# median of REPS plain runs of the same binary. The stub also runs under
# /usr/bin/time: the user+system CPU time of the stub and the program over
# the whole session, divided by N, is the CPU cost per hit (less sensitive to
# other load on the machine than the wall time). tstatus must report N/2
# frames and a stop by tstop, or the script fails.
#
# With --syscalls it also attaches `strace -f` to each stub for loops of
# SYSCALL_N1 and SYSCALL_N2 calls and prints (count2 - count1) / (N2 - N1)
# for every system call and every ptrace request: what one hit costs the
# stub in system calls, with the connection setup and gdb's own traffic
# cancelled out.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/stub-lib.sh
. scripts/stub-lib.sh

N=${N:-20000}
KIND=${KIND:-trace}
IPA=${IPA:-/usr/lib/libinproctrace.so}
IDLE_THREADS=${IDLE_THREADS:-0}
read -r -a wrap <<<"${WRAP:-}"
REPS=${REPS:-3}
SYSCALL_N1=${SYSCALL_N1:-500}
SYSCALL_N2=${SYSCALL_N2:-1500}
want_syscalls=
case "${1:-}" in
"") ;;
--syscalls) want_syscalls=1 ;;
*)
	echo "usage: $0 [--syscalls]" >&2
	exit 2
	;;
esac
if ! [[ $IDLE_THREADS =~ ^[0-9]+$ ]] || [ "$IDLE_THREADS" -gt 64 ]; then
	echo "bench-trap.sh: IDLE_THREADS must be 0..64 (got $IDLE_THREADS)" >&2
	exit 2
fi
for v in N SYSCALL_N1 SYSCALL_N2; do
	if ! [[ ${!v} =~ ^[0-9]+$ ]] || [ $((${!v} % 2)) -ne 0 ] || [ "${!v}" -le 0 ]; then
		echo "bench-trap.sh: $v must be even and positive (got ${!v})" >&2
		exit 2
	fi
done
if [ "$SYSCALL_N2" -le "$SYSCALL_N1" ]; then
	echo "bench-trap.sh: SYSCALL_N2 must be larger than SYSCALL_N1" >&2
	exit 2
fi

preload=()
plain=()
case "$KIND" in
trace) ;;
ftrace)
	if [ "$IPA" = none ]; then
		: # gotpstub alone: nothing preloaded
	else
		[ -f "$IPA" ] || { echo "bench-trap.sh: KIND=ftrace needs gdbserver's in-process agent ($IPA; IPA=none for gotpstub alone)" >&2; exit 2; }
		preload=(--wrapper env "LD_PRELOAD=$IPA" --)
		plain=(env "LD_PRELOAD=$IPA")
	fi
	;;
*) echo "bench-trap.sh: KIND must be trace or ftrace (got $KIND)" >&2; exit 2 ;;
esac

work=$(mktemp -d)
stub_pid=
strace_pid=

# stop_stub: end the stub we started (and, under /usr/bin/time, its child).
cleanup() {
	if [ -n "$strace_pid" ]; then kill "$strace_pid" 2>/dev/null || true; fi
	if [ -n "$stub_pid" ]; then stop_stub; fi
	rm -rf "$work"
}
trap cleanup EXIT

fail() {
	echo "bench-trap.sh: FAIL: $*" >&2
	exit 1
}

if [ -z "${STUBS:-}" ]; then
	echo "+ go build -o bin/gotpstub ./cmd/gotpstub"
	go build -o bin/gotpstub ./cmd/gotpstub
	STUBS="bin/gotpstub /usr/bin/gdbserver"
fi
prog=$work/hitloop
sed "s/^trace hit /$KIND hit /" bench/trap.gdb >"$work/session.gdb"
echo "+ gcc -O1 -g -no-pie -pthread -o $prog bench/hitloop.c"
gcc -O1 -g -no-pie -pthread -o "$prog" bench/hitloop.c

# median: the middle of the numbers on stdin (the lower middle for an even count).
median() {
	sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) exit 1; print v[int((NR + 1) / 2)] }'
}

# us NS: nanoseconds as microseconds with one decimal.
us() {
	awk -v ns="$1" 'BEGIN { printf "%.1f", ns / 1000 }'
}

# loop_ns_of FILE: the loop_ns the program printed into FILE.
loop_ns_of() {
	sed -n 's/^loop_ns=\([0-9][0-9]*\) calls=.*/\1/p' "$1" | tail -n 1
}

# start_stub STUB LOG TIMEFILE ARGS...: start STUB --once on a free port
# with the program and ARGS; sets stub_pid and port; output goes to LOG.
# Unless TIMEFILE is empty the stub runs under /usr/bin/time, which writes
# the user and system CPU seconds of the stub and the program (its
# waited-for child) to TIMEFILE; stub_pid is then time's pid.
start_stub() {
	local stub=$1 log=$2 timefile=$3
	shift 3
	local timer=()
	if [ -n "$timefile" ]; then timer=(/usr/bin/time -f '%U %S' -o "$timefile"); fi
	start_listening "$log" "${timer[@]}" "${wrap[@]}" "$stub" "${preload[@]}" --once @ADDR@ "$prog" "$@" "$IDLE_THREADS"
}

# run_gdb LOG: the benchmark's gdb session against the stub on $port.
run_gdb() {
	timeout 600 gdb -batch -nx -ex "set sysroot /" -ex "set confirm off" \
		-ex "target remote 127.0.0.1:$port" -x "$work/session.gdb" "$prog" >"$1" 2>&1
}

# check_frames GDBLOG STUBLOG CALLS: fail unless tstatus reported CALLS/2
# frames and a stop by tstop; sets frames.
check_frames() {
	frames=$(sed -n 's/^Collected \([0-9][0-9]*\) trace frames\..*/\1/p' "$1" | tail -n 1)
	if [ "$frames" != "$(($3 / 2))" ] || ! grep -q "Trace stopped by a tstop command" "$1"; then
		echo "--- gdb output ---" >&2
		cat "$1" >&2
		echo "--- stub output ---" >&2
		cat "$2" >&2
		fail "expected $(($3 / 2)) frames and a stop by tstop, tstatus says ${frames:-nothing}"
	fi
}

# session STUB CALLS TAG: one traced run; sets loop_ns, cpu_ns (CPU time of
# the stub and the program over the whole session) and frames.
session() {
	local stub=$1 calls=$2 tag=$3
	start_stub "$stub" "$work/$tag.stub" "$work/$tag.time" "$calls"
	if ! run_gdb "$work/$tag.gdb"; then
		cat "$work/$tag.gdb" >&2
		fail "gdb session with $stub failed"
	fi
	wait_stub
	check_frames "$work/$tag.gdb" "$work/$tag.stub" "$calls"
	loop_ns=$(loop_ns_of "$work/$tag.stub")
	[ -n "$loop_ns" ] || { cat "$work/$tag.stub" >&2; fail "no loop_ns from the program under $stub"; }
	cpu_ns=$(awk 'NF == 2 && $1 ~ /^[0-9.]+$/ { printf "%.0f", ($1 + $2) * 1e9 }' "$work/$tag.time")
	[ -n "$cpu_ns" ] || { cat "$work/$tag.time" >&2; fail "no CPU time for $stub"; }
}

echo "+ date -u: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); $(nproc) cores; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "+ KIND=$KIND WRAP=${WRAP:-} IDLE_THREADS=$IDLE_THREADS N=$N calls of hit(), condition i % 2 == 0 (N/2 = $((N / 2)) frames), REPS=$REPS"

# The untraced baseline: the same binary, no debugger.
: >"$work/base.ns"
for r in $(seq "$REPS"); do
	"${wrap[@]}" "${plain[@]}" "$prog" "$N" "$IDLE_THREADS" >"$work/base.out"
	loop_ns_of "$work/base.out" >>"$work/base.ns"
done
base_ns=$(median <"$work/base.ns")
echo "untraced loop: $(tr '\n' ' ' <"$work/base.ns")ns -> median $base_ns ns"

declare -A wall_hit_ns cpu_hit_ns
results=()
for stub in $STUBS; do
	: >"$work/traced.ns"
	: >"$work/cpu.ns"
	for r in $(seq "$REPS"); do
		session "$stub" "$N" run
		echo "$loop_ns" >>"$work/traced.ns"
		echo "$cpu_ns" >>"$work/cpu.ns"
		echo "  $stub run $r: loop_ns=$loop_ns frames=$frames stub+program cpu_ns=$cpu_ns"
	done
	traced_ns=$(median <"$work/traced.ns")
	cpu_med=$(median <"$work/cpu.ns")
	wall_hit_ns[$stub]=$(((traced_ns - base_ns) / N))
	cpu_hit_ns[$stub]=$((cpu_med / N))
	results+=("$(printf '%-12s %15s %12s %12s %12s %11s %7s' "$(basename "$stub")" "$traced_ns" "$base_ns" \
		"${wall_hit_ns[$stub]}" "$(us "${wall_hit_ns[$stub]}")" "$(us "${cpu_hit_ns[$stub]}")" "$frames")")
done

echo
echo "=== per-hit cost of '$KIND hit if i % 2 == 0' + 'collect i, \$regs' (N=$N, median of $REPS) ==="
printf '%-12s %15s %12s %12s %12s %11s %7s\n' stub traced_loop_ns untraced_ns wall_ns/hit wall_us/hit cpu_us/hit frames
for line in "${results[@]}"; do echo "$line"; done
echo "(wall_us/hit = (traced - untraced loop ns) / N; cpu_us/hit = user+system CPU of stub and program, whole session, / N)"
read -r -a stubs <<<"$STUBS"
if [ "${#stubs[@]}" -eq 2 ]; then
	ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a <= 0) print "n/a"; else printf "%.2fx", b / a }'; }
	first=${stubs[0]} second=${stubs[1]}
	echo "speed-up ($(basename "$second") / $(basename "$first") per-hit cost):" \
		"wall $(ratio "${wall_hit_ns[$first]}" "${wall_hit_ns[$second]}")," \
		"cpu $(ratio "${cpu_hit_ns[$first]}" "${cpu_hit_ns[$second]}")"
fi

if [ -z "$want_syscalls" ]; then exit 0; fi
command -v strace >/dev/null || fail "--syscalls needs strace"

# strace_session STUB CALLS TAG: one traced run with `strace -f` attached to
# the stub; leaves the system call log in $work/TAG.strace.
strace_session() {
	local stub=$1 calls=$2 tag=$3
	start_stub "$stub" "$work/$tag.stub" "" "$calls"
	strace -f -o "$work/$tag.strace" -p "$stub_pid" 2>"$work/$tag.strace.err" &
	strace_pid=$!
	# strace reports "Process N attached" for each thread it has seized.
	for _ in $(seq 100); do
		if grep -q attached "$work/$tag.strace.err"; then break; fi
		sleep 0.05
	done
	sleep 0.3
	if ! run_gdb "$work/$tag.gdb"; then
		cat "$work/$tag.gdb" >&2
		fail "gdb session with $stub under strace failed"
	fi
	wait_stub
	wait "$strace_pid" 2>/dev/null || true
	strace_pid=
	check_frames "$work/$tag.gdb" "$work/$tag.stub" "$calls"
}

# counts FILE: "name count" for every system call entered in a strace -f
# log, and "ptrace:REQUEST[:ARG] count" for every ptrace request (ARG: the
# register set or the user-area offset, when the request has one).
counts() {
	{
		sed -nE 's/^[0-9]+ +([a-z_0-9]+)\(.*/\1/p' "$1"
		sed -nE -e 's/offsetof\(struct user, u_debugreg\)\+?/u_debugreg+/' \
			-e 's/^[0-9]+ +ptrace\((PTRACE_[A-Z_]+), [0-9]+, ([A-Za-z0-9_*+]*).*/ptrace:\1:\2/p' "$1" |
			sed -E 's/:(NULL|0)?$//; s/ +$//'
	} | sort | uniq -c | awk '{ print $2, $1 }'
}

echo
echo "=== stub system calls per hit: (count at N=$SYSCALL_N2 - count at N=$SYSCALL_N1) / $((SYSCALL_N2 - SYSCALL_N1)) ==="
echo "(a hit is one call of hit(): one trap; every other hit passes the condition and collects a frame)"
for stub in $STUBS; do
	strace_session "$stub" "$SYSCALL_N1" s1
	strace_session "$stub" "$SYSCALL_N2" s2
	counts "$work/s1.strace" >"$work/c1"
	counts "$work/s2.strace" >"$work/c2"
	echo "--- $(basename "$stub") ---"
	awk -v d=$((SYSCALL_N2 - SYSCALL_N1)) '
		NR == FNR { c1[$1] = $2; next }
		{ c2[$1] = $2 }
		END {
			for (s in c2) {
				per = (c2[s] - c1[s]) / d
				if (s !~ /^ptrace:/) total += per
				if (per >= 0.05) printf "%-40s %8.2f\n", s, per
			}
			printf "%-40s %8.2f\n", "TOTAL system calls", total > "/dev/stderr"
		}' "$work/c1" "$work/c2" 2>"$work/total" | sort -k2,2 -rn
	cat "$work/total"
done
