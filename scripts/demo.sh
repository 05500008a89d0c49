#!/usr/bin/env bash
# demo.sh: a real traced gdb session of testdata/demo.c.
#
# Builds gotpstub (bin/gotpstub) unless STUB names another stub (for
# example STUB=/usr/bin/gdbserver), compiles testdata/demo.c, starts the
# stub on a free localhost port and runs gdb with scripts/gdb/demo.gdb:
# tracepoints (conditional, args/locals/struct/string, a trace state
# variable counter), tstart, run to the end, tstop, tstatus and a tdump of
# every collected frame, then tsave -r. Finally prints what the program
# itself printed and the saved frames exported (JSON Lines; CTF through
# babeltrace2 when it is installed).
set -euo pipefail
cd "$(dirname "$0")/.."

# On a fresh Debian machine: install the compiler and the debugger first.
missing=
for tool in gcc gdb; do command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"; done
if [ -n "$missing" ]; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "+ apt-get install$missing"
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends$missing libc6-dev >/dev/null
	else
		echo "demo.sh: please install:$missing" >&2
		exit 1
	fi
fi

work=$(mktemp -d)
stub_pid=
cleanup() {
	if [ -n "$stub_pid" ]; then kill "$stub_pid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

if [ -z "${STUB:-}" ]; then
	echo "+ go build -o bin/gotpstub ./cmd/gotpstub"
	go build -o bin/gotpstub ./cmd/gotpstub
	STUB=bin/gotpstub
fi
echo "+ gcc -g -O0 -o $work/demo testdata/demo.c"
gcc -g -O0 -o "$work/demo" testdata/demo.c

# port_in_use PORT: true if something accepts connections on it.
port_in_use() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

started=
for attempt in 1 2 3 4 5; do
	port=$((23000 + RANDOM % 5000))
	if port_in_use "$port"; then continue; fi
	echo "+ $STUB --once 127.0.0.1:$port $work/demo"
	"$STUB" --once "127.0.0.1:$port" "$work/demo" >"$work/stub.log" 2>&1 &
	stub_pid=$!
	for _ in $(seq 100); do
		if grep -q "Listening on port" "$work/stub.log"; then started=1; break; fi
		if ! kill -0 "$stub_pid" 2>/dev/null; then break; fi
		sleep 0.1
	done
	if [ -n "$started" ]; then break; fi
	if ! grep -q "Address already in use" "$work/stub.log"; then
		echo "demo.sh: the stub did not start listening:" >&2
		cat "$work/stub.log" >&2
		exit 1
	fi
	wait "$stub_pid" 2>/dev/null || true
	stub_pid=
done
if [ -z "$started" ]; then
	echo "demo.sh: no free port found" >&2
	exit 1
fi

echo "+ gdb -batch -nx -ex 'target remote 127.0.0.1:$port' -x scripts/gdb/demo.gdb $work/demo"
timeout 120 gdb -batch -nx -ex "set sysroot /" -ex "set confirm off" \
	-ex "target remote 127.0.0.1:$port" -x scripts/gdb/demo.gdb \
	-ex "tsave -r $work/demo.tf" "$work/demo"

# gdb kills the program when it exits; the --once stub then exits too.
for _ in $(seq 50); do
	kill -0 "$stub_pid" 2>/dev/null || break
	sleep 0.1
done
echo
echo "=== the stub's and the program's output ==="
cat "$work/stub.log"

# The frames the stub saved (tsave -r), exported: JSON Lines (the first
# two frames, cut), and CTF read back by babeltrace2 when it is installed.
case "$STUB" in
*gotpstub*)
	echo
	echo "=== $STUB export --format json $work/demo.tf | head -2 ==="
	{ "$STUB" export --format json "$work/demo.tf" || true; } | head -2 | cut -c1-200
	if command -v babeltrace2 >/dev/null 2>&1; then
		"$STUB" export --format ctf -o "$work/demo.ctf" "$work/demo.tf"
		echo "=== babeltrace2 (CTF export) | head -2 ==="
		{ babeltrace2 "$work/demo.ctf" || true; } | head -2 | cut -c1-200
	fi
	;;
esac
