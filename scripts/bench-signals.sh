#!/usr/bin/env bash
# bench-signals.sh: signals passed through the stub while threads are
# traced (issue 14), gotpstub vs gdbserver on testdata/sigstorm.c.
#
# Usage: scripts/bench-signals.sh
#
# Environment:
#   KINDS="none trace ftrace"  what is put on sigstorm's f(): nothing, a trap
#                  tracepoint (trace f) or a fast tracepoint (ftrace f), each
#                  collecting $regs into a circular trace buffer
#   STUBS="bin/gotpstub /usr/bin/gdbserver"  the stubs compared (when set,
#                  nothing is built); gdbserver's ftrace runs get its
#                  in-process agent preloaded (IPA=/usr/lib/libinproctrace.so)
#                  and a non-PIE build of the program (its pads must be
#                  within 2 GB of the code)
#   REPS=1         sessions per stub and kind
#   DURATION_MS=3000 SPIN=0  sigstorm's arguments
#
# Each session: gdb -batch with `handle SIGUSR1 SIGPROF nostop noprint
# pass`, break main, continue, the tracepoint, tstart, continue to
# sigstorm_done, tstop, tstatus, continue to the end. The table shows what
# the program printed: SIGUSR1 delivered per second (both workers), the
# largest delivery latency, how many took over 0.5 s, SIGPROF handled, f()
# calls, ok/FAIL (FAIL: a SIGUSR1 lost, doubled, out of order or with the
# wrong siginfo) and the trace frames created.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/stub-lib.sh
. scripts/stub-lib.sh

KINDS=${KINDS:-none trace ftrace}
IPA=${IPA:-/usr/lib/libinproctrace.so}
REPS=${REPS:-1}
DURATION_MS=${DURATION_MS:-3000}
SPIN=${SPIN:-0}

work=$(mktemp -d /tmp/gotpstub-sigbench.XXXXXX)
stub_pid=
cleanup() {
	if [ -n "$stub_pid" ]; then kill "$stub_pid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT
fail() {
	echo "bench-signals.sh: FAIL: $*" >&2
	exit 1
}

if [ -z "${STUBS:-}" ]; then
	echo "+ go build -o bin/gotpstub ./cmd/gotpstub"
	go build -o bin/gotpstub ./cmd/gotpstub
	STUBS="bin/gotpstub /usr/bin/gdbserver"
fi
echo "+ gcc -g -O0 -pthread -o $work/sigstorm testdata/sigstorm.c"
gcc -g -O0 -pthread -o "$work/sigstorm" testdata/sigstorm.c
# gdbserver's agent puts its jump pads in the low 2 GB: out of reach of a
# PIE program's code, so its ftrace runs use a non-PIE build.
gcc -g -O0 -pthread -no-pie -fno-PIE -o "$work/sigstorm-nopie" testdata/sigstorm.c

# start_stub STUB LOG PRELOAD...: start STUB --once on a free port; sets
# stub_pid and port.
start_stub() {
	local stub=$1 log=$2
	shift 2
	start_listening "$log" "$stub" "$@" --once @ADDR@ "$prog" "$DURATION_MS" "$SPIN"
}

# script KIND: the gdb session for KIND.
script() {
	echo "handle SIGUSR1 SIGPROF nostop noprint pass"
	echo "break main"
	echo "continue"
	if [ "$1" != none ]; then
		echo "$1 f"
		echo "actions"
		echo "collect \$regs"
		echo "end"
		echo "set circular-trace-buffer on"
		echo "tstart"
	fi
	echo "break sigstorm_done"
	echo "continue"
	if [ "$1" != none ]; then
		echo "tstop"
		echo "tstatus"
	fi
	echo "continue"
}

echo "+ date -u: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); $(nproc) cores; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "+ sigstorm $DURATION_MS $SPIN, REPS=$REPS"
printf '%-16s %-7s %10s %11s %5s %8s %11s %6s  %s\n' stub kind "SIGUSR1/s" "maxlat_us" late sigprof "f calls" check frames
status=0
for stub in $STUBS; do
	for kind in $KINDS; do
		preload=()
		prog=$work/sigstorm
		if [ "$kind" = ftrace ] && [ "$(basename "$stub")" = gdbserver ]; then
			[ -f "$IPA" ] || { echo "skip gdbserver ftrace: no $IPA"; continue; }
			preload=(--wrapper env "LD_PRELOAD=$IPA" --)
			prog=$work/sigstorm-nopie
		fi
		for r in $(seq "$REPS"); do
			tag=$(basename "$stub")-$kind-$r
			script "$kind" >"$work/$tag.cmds"
			start_stub "$stub" "$work/$tag.stub" "${preload[@]}"
			timeout 300 gdb -batch -nx -ex "set sysroot /" -ex "set confirm off" \
				-ex "target remote 127.0.0.1:$port" -x "$work/$tag.cmds" "$prog" >"$work/$tag.gdb" 2>&1 || true
			wait_stub
			line=$(grep '^sigstorm: ' "$work/$tag.stub" | tail -n 1 || true)
			if [ -z "$line" ]; then
				printf '%-16s %-7s   no result; gdb said:\n' "$(basename "$stub")" "$kind"
				grep -iE 'error|warning|fail' "$work/$tag.gdb" | head -n 5 | sed 's/^/    /'
				status=1
				continue
			fi
			frames=$(sed -n 's/.*Buffer contains \([0-9]*\) trace frames (of \([0-9]*\) created total).*/\2/p;s/^Collected \([0-9]*\) trace frames.*/\1/p' "$work/$tag.gdb" | tail -n 1)
			calls=$(awk '/^worker /{ for (i = 1; i < NF; i++) if ($i == "calls") c += $(i+1) } END { print c }' "$work/$tag.stub")
			read -r rate maxlat late prof check < <(echo "$line" | awk '{ for (i = 1; i < NF; i++) { if ($i == "rate") r = $(i+1); if ($i == "maxlat_us") m = $(i+1); if ($i == "late") l = $(i+1); if ($i == "sigprof") p = $(i+1) } print r, m, l, p, $NF }')
			printf '%-16s %-7s %10s %11s %5s %8s %11s %6s  %s\n' "$(basename "$stub")" "$kind" "${rate%/s}" "$maxlat" "$late" "$prof" "$calls" "$check" "${frames:--}"
			if [ "$check" != ok ]; then
				grep '^worker ' "$work/$tag.stub" | sed 's/^/    /'
			fi
		done
	done
done
exit $status
