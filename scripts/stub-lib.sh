# stub-lib.sh: starting and stopping a stub in the benchmark scripts
# (sourced; the script defines fail).

# stub_port_in_use PORT: true if something accepts connections on it.
stub_port_in_use() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# start_listening LOG CMD...: runs CMD in the background with output to
# LOG, the word @ADDR@ replaced by 127.0.0.1:PORT for a free port, until
# LOG says "Listening on port" (another port when that one was taken
# meanwhile); sets stub_pid and port.
start_listening() {
	local log=$1 started= attempt a
	shift
	for attempt in 1 2 3 4 5 6 7 8; do
		port=$((23000 + RANDOM % 5000))
		if stub_port_in_use "$port"; then continue; fi
		local cmd=()
		for a in "$@"; do
			if [ "$a" = @ADDR@ ]; then cmd+=("127.0.0.1:$port"); else cmd+=("$a"); fi
		done
		"${cmd[@]}" >"$log" 2>&1 &
		stub_pid=$!
		for _ in $(seq 200); do
			if grep -q "Listening on port" "$log" 2>/dev/null; then started=1; break; fi
			if ! kill -0 "$stub_pid" 2>/dev/null; then break; fi
			sleep 0.05
		done
		if [ -n "$started" ]; then return 0; fi
		if ! grep -q "Address already in use" "$log" 2>/dev/null; then
			cat "$log" >&2
			fail "$* did not start listening"
		fi
		wait "$stub_pid" 2>/dev/null || true
		stub_pid=
	done
	fail "no free port found for $*"
}

# stop_stub: kill the stub (and a wrapper's children: /usr/bin/time).
stop_stub() {
	local child
	for child in $(pgrep -P "$stub_pid" 2>/dev/null || true); do
		kill "$child" 2>/dev/null || true
	done
	kill "$stub_pid" 2>/dev/null || true
}

# wait_stub: wait up to 5 s for the --once stub to exit after gdb is
# done, then stop it.
wait_stub() {
	for _ in $(seq 100); do
		kill -0 "$stub_pid" 2>/dev/null || break
		sleep 0.05
	done
	if kill -0 "$stub_pid" 2>/dev/null; then stop_stub; fi
	wait "$stub_pid" 2>/dev/null || true
	stub_pid=
}
