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
#   5. go test ./... : unit, differential and end-to-end (real gdb) tests.
# Set GOTPSTUB_SKIP_SUITE=1 to skip step 2 (it takes several minutes).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== gofmt, go vet"
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
fuzz fasttp/a64 FuzzDecodeRelocate 300000x
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
fuzz server FuzzParseBreakpointConds 300000x
fuzz server FuzzParseCatchSyscalls 300000x
fuzz server FuzzResumedPids 300000x

if command -v qemu-aarch64 >/dev/null 2>&1; then
	echo "== arm64 JIT backend and instruction relocation under qemu-aarch64"
	GOARCH=arm64 go test -count=1 -exec qemu-aarch64 ./jit/ ./fasttp/a64/
fi

echo "== go test ./..."
go test -count=1 ./...
