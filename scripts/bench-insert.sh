#!/usr/bin/env bash
# bench-insert.sh: how long `tstart` takes with many fast tracepoints,
# gotpstub vs gdbserver + its in-process agent, on the same program.
#
# Usage: scripts/bench-insert.sh [COUNT...]     (default: 100 1000)
#
# Environment:
#   REPS=3   sessions per stub and count; the median is printed
#   IPA=/usr/lib/libinproctrace.so   gdbserver's agent, preloaded into
#            the program under both stubs (gdbserver needs it for ftrace)
#   STUBS="bin/gotpstub /usr/bin/gdbserver" (when set, nothing is built)
#   SITES=nop5   the functions' first instruction: nop5, a 5-byte nop
#            (the instruction length gdbserver's agent needs), or entry,
#            the common entry push %rbx; mov %rdi,%rbx (and pop %rbx), 1
#            byte then 3: only gotpstub takes fast tracepoints there (a
#            jump that keeps the mov's bytes, whose displacement they fix);
#            gdb refuses them for gdbserver ("need at least 5" bytes)
#   GOTPSTUB_LOG=--timing   gotpstub's log flag: --timing logs QTStart's
#            time alone; --debug adds a line per placement (a few µs each)
#
# The program (generated: 1000 small functions, each SITES's first
# instruction(s) and an addition to a global, called once each from main; built -O2 non-PIE, as gdbserver's
# agent wants its pads in the low 2 GB) stops at ready(); gdb defines
# COUNT fast tracepoints, one at each of the first COUNT functions' entry
# (ftrace tpfnN: without debug information, the function's first byte),
# then times `tstart` (gdb's download of the definitions and the stub's
# installation together, measured in gdb with Python's clock) and runs
# one round of calls, checking the frame count (COUNT) and the program's
# result. gotpstub's own part (QTStart alone) is printed from its
# --timing log ("QTStart took N ms, M ms of CPU": the time, and the CPU
# time of the stub's threads meanwhile, which a busy VM disturbs least);
# gdbserver's is not measured separately.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-3}
IPA=${IPA:-/usr/lib/libinproctrace.so}
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(100 1000)
[ -f "$IPA" ] || { echo "bench-insert.sh: needs gdbserver's in-process agent ($IPA)" >&2; exit 2; }
work=$(mktemp -d)
stub_pid=
# shellcheck source=scripts/stub-lib.sh
. scripts/stub-lib.sh
fail() {
	echo "bench-insert.sh: FAIL: $*" >&2
	exit 1
}
cleanup() {
	if [ -n "$stub_pid" ]; then stop_stub; fi
	[ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
if [ -z "${STUBS:-}" ]; then
	echo "+ go build -o bin/gotpstub ./cmd/gotpstub"
	go build -o bin/gotpstub ./cmd/gotpstub
	STUBS="bin/gotpstub /usr/bin/gdbserver"
fi

nfunc=1000
case "${SITES:-nop5}" in
nop5) entry='.byte 0x0f,0x1f,0x44,0,0' ;;
entry) entry='push %%rbx\\nmov %%rdi,%%rbx\\npop %%rbx' ;;
*) fail "SITES=$SITES: want nop5 or entry" ;;
esac
prog=$work/many
{
	echo '#include <stdio.h>'
	echo 'volatile long sink;'
	for i in $(seq 0 $((nfunc - 1))); do
		# In assembly, so that the 5-byte nop gdbserver's agent needs
		# (it wants 5 bytes of instruction at a fast tracepoint) is
		# surely the first instruction.
		printf '__asm__(".text\\n.globl tpfn%d\\n.type tpfn%d,@function\\ntpfn%d:\\n'"$entry"'\\nimulq $%d,%%rdi,%%rax\\naddq %%rax,sink(%%rip)\\nret\\n.size tpfn%d,.-tpfn%d\\n");\n' "$i" "$i" "$i" "$((i + 1))" "$i" "$i"
		echo "void tpfn$i(long);"
	done
	printf 'void (*fns[])(long) = {'
	for i in $(seq 0 $((nfunc - 1))); do printf "tpfn%d," "$i"; done
	echo '};'
	echo '__attribute__((noinline)) void ready(void) { __asm__ volatile(""); }'
	echo '__attribute__((noinline)) void done(void) { __asm__ volatile(""); }'
	echo "int main(void) { ready(); for (int i = 0; i < $nfunc; i++) fns[i](1); done(); printf(\"sink=%ld\\n\", sink); return 0; }"
} >"$work/many.c"
echo "+ gcc -O2 -g -no-pie -o $prog many.c ($nfunc functions)"
gcc -O2 -g -no-pie -o "$prog" "$work/many.c"
# sink = 1 + 2 + ... + nfunc
want_sink=$((nfunc * (nfunc + 1) / 2))

median() {
	sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) exit 1; print v[int((NR + 1) / 2)] }'
}

# session STUB COUNT TAG: one run; prints the tstart milliseconds.
session() {
	local stub=$1 count=$2 tag=$3 i
	{
		echo "break ready"
		echo "continue"
		for i in $(seq 0 $((count - 1))); do echo "ftrace tpfn$i"; done
		echo "break done"
		echo 'python import time; _t0 = time.time()'
		echo "tstart"
		echo 'python print("tstart_ms=%.1f" % ((time.time() - _t0) * 1000))'
		echo "continue"
		echo "tstop"
		echo "tstatus"
		echo "continue"
	} >"$work/$tag.gdb"
	local flags=(--once)
	case "$stub" in *gotpstub*) flags+=("${GOTPSTUB_LOG:---timing}") ;; esac
	start_listening "$work/$tag.stub" "$stub" --wrapper env "LD_PRELOAD=$IPA" -- "${flags[@]}" @ADDR@ "$prog"
	timeout 600 gdb -batch -nx -ex "set sysroot /" -ex "set confirm off" \
		-ex "target remote 127.0.0.1:$port" -x "$work/$tag.gdb" "$prog" >"$work/$tag.out" 2>&1 || true
	wait_stub
	local frames
	frames=$(sed -n 's/^Collected \([0-9][0-9]*\) trace frames\..*/\1/p' "$work/$tag.out" | tail -n 1)
	if [ "$frames" != "$count" ] || ! grep -q "sink=$want_sink" "$work/$tag.stub"; then
		local why
		why="frames ${frames:-none} (want $count), $(grep -o 'sink=[0-9]*' "$work/$tag.stub" || grep -o 'Child terminated with signal[^)]*)' "$work/$tag.stub" || echo 'no result')"
		case "$stub" in
		*gotpstub*)
			tail -20 "$work/$tag.out" >&2
			fail "$stub, $count tracepoints: $why"
			;;
		esac
		# Another stub's failure is a result: reported, not fatal.
		echo "$(basename "$stub") with $count tracepoints failed: $why" >>"$work/failures"
		echo 999999999
		return
	fi
	sed -n 's/.*QTStart took \([0-9.]*\) ms.*/\1/p' "$work/$tag.stub" | tail -n 1 >>"$work/qtstart-$count-$(basename "$stub")"
	sed -n 's/.*QTStart took [0-9.]* ms, \([0-9.]*\) ms of CPU.*/\1/p' "$work/$tag.stub" | tail -n 1 >>"$work/qtcpu-$count-$(basename "$stub")"
	sed -n 's/^tstart_ms=//p' "$work/$tag.out" | tail -n 1
}

read -r -a stubs <<<"$STUBS"
echo "# scripts/bench-insert.sh ${counts[*]}  (REPS=$REPS) on $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs"
echo "# tstart with COUNT fast tracepoints (gdb's download and the stub's installation), ms, median of $REPS"
printf '%-8s' count
for s in "${stubs[@]}"; do printf '%18s' "$(basename "$s")"; done
echo
for count in "${counts[@]}"; do
	printf '%-8s' "$count"
	for s in "${stubs[@]}"; do
		ms=$(for r in $(seq "$REPS"); do session "$s" "$count" "$(basename "$s")-$count-$r"; done | median)
		if [ "$ms" = 999999999 ]; then ms=failed; fi
		printf '%18s' "$ms"
	done
	echo
done
for count in "${counts[@]}"; do
	for s in "${stubs[@]}"; do
		b=$(basename "$s")
		if [ -s "$work/qtstart-$count-$b" ]; then
			ms=$(median <"$work/qtstart-$count-$b")
			echo "# $b's own part (QTStart in its --timing log), $count tracepoints: $ms ms, $(awk -v m="$ms" -v c="$count" 'BEGIN { printf "%.0f", m * 1000 / c }') µs per tracepoint (median)"
		fi
		if [ -s "$work/qtcpu-$count-$b" ]; then
			ms=$(median <"$work/qtcpu-$count-$b")
			echo "# $b's CPU time during QTStart, $count tracepoints: $ms ms, $(awk -v m="$ms" -v c="$count" 'BEGIN { printf "%.0f", m * 1000 / c }') µs per tracepoint (median)"
		fi
	done
done
if [ -s "$work/failures" ]; then
	sort "$work/failures" | uniq -c | sed 's/^/# /'
fi
