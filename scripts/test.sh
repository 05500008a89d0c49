#!/usr/bin/env bash
# Runs every test of the project, in this order:
#   1. gofmt and go vet;
#   2. GDB's own testsuite against gotpstub (gdb.trace, the base and the
#      non-stop selections, via scripts/gdbsuite.sh): fails if a PASS recorded in
#      gdbsuite/expected-*.sum is lost;
#   3. fuzzing of every fuzz target (each parser: rsp framing, agent
#      expressions, trace packets, tfiles, lanes, /proc files, ...) on top
#      of their seed corpora, about 6 minutes in all;
#   4. the arm64 JIT backend and arm64 instruction relocation (fasttp/a64)
#      under qemu-aarch64, when it is installed;
#   5. go test ./... : unit, differential and end-to-end (real gdb) tests;
#   6. the arm64 tests in an arm64 Debian VM: `scripts/arm64-vm.sh e2e` (the
#      packages of its E2E_PACKAGES, natively on arm64 under
#      qemu-system-aarch64).  It builds the VM image first if its cache
#      ($ARM64_VM_CACHE, default ~/.cache/gotpstub-arm64-vm) has none.
#      Measured here (2 cores, 2026-11-28, while another arm64 VM kept one
#      core busy), this step as below with ARM64_VM_CACHE=<empty dir>: 22 min
#      (image build 19 min, boot 13 s, tests 2.6 min: inferior 2 min); with
#      the image cached, `time ARM64_VM_KEEP=0 scripts/arm64-vm.sh e2e`:
#      2 min 55 s then, 5 min 12 s once the e2e package joined (its 34
#      arm64 gdb sessions 4 min 12 s).  On a quiet machine the build took
#      12 min 50 s, so CI (fresh machine) spends ~19 min here, ~45 in all.  As root it
#      apt-installs what the host lacks (qemu-system-arm, debootstrap, ...);
#      it stops a VM it booted (unless another command uses it) and leaves
#      one that was running.
# Set GOTPSTUB_SKIP_SUITE=1 to skip step 2 (it takes several minutes).
# Set ARM64_VM=0 to skip step 6 (no qemu-system-aarch64, or no time).  Step 6
# fails the run if the VM cannot be built, booted or reached, or takes longer
# than ARM64_VM_TIMEOUT (a timeout(1) duration, default 45m: with the ~25 min of
# steps 1-5, CI's 90 minutes hold even then).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== gofmt, go vet"
# shellcheck disable=SC2046 # one word per file
fmt=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$fmt" ]; then echo "gofmt needed:"; echo "$fmt"; exit 1; fi
go vet ./...

if [ -z "${GOTPSTUB_SKIP_SUITE:-}" ]; then
	for sel in trace base nonstop; do
		echo "== GDB testsuite: $sel selection (expected results: gdbsuite/expected-$sel.sum)"
		scripts/gdbsuite.sh "$sel"
	done
fi

echo "== fuzzing (every target)"
# Budgets are input counts (a few seconds each here), not durations: a
# time budget can end the run while a worker is still minimising a new
# input, which go test reports as a failure ("context deadline exceeded").
fuzz() { # package target inputs
	local t0=$SECONDS
	go test -run '^$' -fuzz "^$2\$" -fuzztime "$3" "./$1" >/tmp/gotpstub-fuzz.log 2>&1 ||
		{ cat /tmp/gotpstub-fuzz.log; echo "fuzzing $1 $2 failed"; exit 1; }
	echo "fuzz $1 $2: ok (${3%x} inputs, $((SECONDS - t0)) s)"
}
# Every fuzz target of the project (issue 14: each parser, longer): most
# take 10-20 s for 500,000 inputs here.
fuzz rsp FuzzConn 100000x
fuzz rsp FuzzFrameParser 500000x
fuzz rsp FuzzRunLengthEncoding 500000x
fuzz rsp FuzzUnescapeBinary 500000x
fuzz rsp FuzzDecodeHex 500000x
fuzz rsp FuzzParseThreadID 500000x
fuzz agentexpr FuzzParse 500000x
fuzz agentexpr FuzzValidate 500000x
fuzz agentexpr FuzzEval 500000x
fuzz agentexpr FuzzOptimize 150000x
fuzz agentexpr FuzzFormatC 500000x
fuzz agentexpr FuzzParseGDBListing 500000x
fuzz agentexpr FuzzAssemble 500000x
fuzz tracing FuzzHandlePacket 300000x
fuzz tracing FuzzParseActions 500000x
fuzz frames FuzzReadTFile 500000x
fuzz frames FuzzFrameAccessors 500000x
fuzz frames FuzzWriteTFileHeader 500000x
fuzz jit FuzzCompile 200000x
fuzz fasttp FuzzParseLane 500000x
fuzz fasttp FuzzDecodeInsn 500000x
fuzz fasttp FuzzPlanSite 300000x
fuzz fasttp FuzzSiteCandidates 300000x
fuzz fasttp FuzzNextMatch 500000x
fuzz fasttp FuzzParseMaps 500000x
fuzz fasttp FuzzParseGuarded 500000x
fuzz fasttp/a64 FuzzDecodeRelocate 300000x
fuzz fasttp/a64 FuzzPlanSite 300000x
fuzz e2e FuzzParseSchedTrace 300000x
fuzz inferior FuzzParseMaps 500000x
fuzz inferior FuzzStatState 500000x
fuzz inferior FuzzStatusSigMask 500000x
fuzz threaddb FuzzParseDescriptor 500000x
fuzz threaddb FuzzReadLibc 500000x
fuzz threaddb FuzzFindLibcMapping 500000x
fuzz solib FuzzLibraryList 500000x
fuzz hostio FuzzHandle 500000x
fuzz tdesc FuzzRegsSet 500000x
fuzz export FuzzRead 200000x
fuzz sdt FuzzParseNotes 300000x
fuzz sdt FuzzParseArgs 300000x
fuzz coverage FuzzAArch64Feature1 300000x
fuzz coverage FuzzEHFrame 300000x
fuzz server FuzzParseBreakpointConds 300000x
fuzz server FuzzParseCatchSyscalls 300000x
fuzz server FuzzResumedPids 300000x
fuzz guard FuzzFileRanges 300000x

if command -v qemu-aarch64 >/dev/null 2>&1; then
	echo "== arm64 JIT backend and instruction relocation under qemu-aarch64"
	GOARCH=arm64 go test -count=1 -exec qemu-aarch64 ./jit/ ./fasttp/a64/
	echo "== arm64 records of the jump pads through the drainer into the engine under qemu-aarch64"
	GOARCH=arm64 go test -count=1 -exec qemu-aarch64 -run 'TestArm64|TestFastHitsAArch64|TestParseLane|TestDrain' ./fasttp/ ./tracing/
fi

echo "== go test ./..."
go test -count=1 ./...

# Sequential, not beside the steps above: the VM's emulation keeps both cores
# busy, which would slow the timing-sensitive gdb testsuite runs and save
# nothing on this 2-core machine.
case "${ARM64_VM:-1}" in
0)
	echo "== arm64 VM tests: SKIPPED (ARM64_VM=0)"
	[ "${CI:-}" != true ] || echo "warning: CI=true with ARM64_VM=0: the arm64 tests did not run"
	;;
1)
	echo "== arm64 tests in the arm64 VM (scripts/arm64-vm.sh e2e; ARM64_VM=0 skips this)"
	rc=0
	ARM64_VM_KEEP=0 timeout -k 60 "${ARM64_VM_TIMEOUT:-45m}" scripts/arm64-vm.sh e2e </dev/null || rc=$?
	case $rc in
	0) ;;
	124) echo "arm64 VM tests: FAILED: not done within ARM64_VM_TIMEOUT=${ARM64_VM_TIMEOUT:-45m}"; exit 1 ;;
	125) echo "arm64 VM tests: FAILED: the VM could not be built, booted or reached (above); ARM64_VM=0 skips this step"; exit 1 ;;
	*) echo "arm64 VM tests: FAILED (scripts/arm64-vm.sh e2e exit status $rc)"; exit 1 ;;
	esac
	;;
*) echo "ARM64_VM must be 0 or 1, not '$ARM64_VM'"; exit 2 ;;
esac
