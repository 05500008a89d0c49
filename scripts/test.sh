#!/usr/bin/env bash
# Runs every test of the project, in this order:
#   1. gofmt and go vet;
#   2. GDB's own testsuite against gotpstub (gdb.trace and the base
#      selection, via scripts/gdbsuite.sh): fails if a PASS recorded in
#      gdbsuite/expected-*.sum is lost;
#   3. short fuzzing of the parsers (rsp framing, agent expressions, trace
#      packets, tfile reader) on top of their seed corpora;
#   4. the arm64 JIT backend under qemu-aarch64, when it is installed;
#   5. go test ./... : unit, differential and end-to-end (real gdb) tests.
# Set GOTPSTUB_SKIP_SUITE=1 to skip step 2 (it takes several minutes).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== gofmt, go vet"
fmt=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$fmt" ]; then echo "gofmt needed:"; echo "$fmt"; exit 1; fi
go vet ./...

if [ -z "${GOTPSTUB_SKIP_SUITE:-}" ]; then
	for sel in trace base; do
		echo "== GDB testsuite: $sel selection (expected results: gdbsuite/expected-$sel.sum)"
		scripts/gdbsuite.sh "$sel"
	done
fi

echo "== fuzzing (short)"
# Budgets are input counts (a few seconds each here), not durations: a
# time budget can end the run while a worker is still minimising a new
# input, which go test reports as a failure ("context deadline exceeded").
fuzz() { # package target inputs
	go test -run '^$' -fuzz "^$2\$" -fuzztime "$3" "./$1" >/tmp/gotpstub-fuzz.log 2>&1 ||
		{ cat /tmp/gotpstub-fuzz.log; echo "fuzzing $1 $2 failed"; exit 1; }
	echo "fuzz $1 $2: ok (${3%x} inputs)"
}
fuzz rsp FuzzConn 30000x
fuzz rsp FuzzUnescapeBinary 200000x
fuzz agentexpr FuzzValidate 200000x
fuzz agentexpr FuzzEval 200000x
fuzz tracing FuzzHandlePacket 150000x
fuzz frames FuzzReadTFile 200000x
fuzz jit FuzzCompile 100000x

if command -v qemu-aarch64 >/dev/null 2>&1; then
	echo "== arm64 JIT backend under qemu-aarch64"
	GOARCH=arm64 go test -count=1 -exec qemu-aarch64 ./jit/
fi

echo "== go test ./..."
go test -count=1 ./...
