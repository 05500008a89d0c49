package e2e

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fastSession runs traceSession with --debug, so the stub logs how it
// placed every fast tracepoint ("plain jump ...", "punned jump ..." or
// "trap instead of a jump").
func fastSession(t *testing.T, prog string, progArgs []string, setup, done, after string) (string, *stubProcess) {
	t.Helper()
	return traceSessionFlags(t, []string{"--once", "--debug"}, prog, progArgs, setup, done, after)
}

// jumpPlaced matches the stub's log of a tracepoint placed as a jump
// (after "tracepoint N at ADDR: ").
var jumpPlaced = regexp.MustCompile(`^` + jumpShape + ` jump over `)

// jumpShape matches the shape of a jump in the stub's placement lines
// (monitor ftrace, --debug): one of fasttp's shape names.
const jumpShape = `(?:plain|punned|successor-preserving|evicting|short)`

// mustPlaceJump fails unless the stub placed tracepoint num as a jump pad.
func mustPlaceJump(t *testing.T, stub *stubProcess, num int) {
	t.Helper()
	re := regexp.MustCompile(fmt.Sprintf(`tracepoint %d at 0x[0-9a-f]+: (.*)`, num))
	m := re.FindStringSubmatch(stub.output.String())
	if m == nil {
		t.Fatalf("stub did not log the placement of fast tracepoint %d; output:\n%s", num, stub.output.String())
	}
	if !jumpPlaced.MatchString(m[1]) {
		t.Fatalf("fast tracepoint %d was not placed as a jump: %s", num, m[1])
	}
}

func TestFastTraceConditionAndCollect(t *testing.T) {
	if isGdbserver(stubPath(t)) {
		t.Skip("gdbserver needs its in-process agent library for ftrace")
	}
	prog := buildProgram(t, "trace")
	const wantN = 3
	out, stub := fastSession(t, prog, []string{strconv.Itoa(traceIterations)}, fmt.Sprintf(`
ftrace traced_function if n == %d
actions
collect n, *rec, $locals
collect/s msg
end
info tracepoints`, wantN), "trace_done", `
tfind start
print n
print rec->id
print rec->value
print rec->name
print msg
print g_counter
tfind
`)
	mustContain(t, out, "Fast tracepoint 2 at")
	mustPlaceJump(t, stub, 2)
	if n := framesCollected(t, out); n != 1 {
		t.Errorf("collected %d frames, want 1 (only n == %d passes the condition)", n, wantN)
	}
	mustContain(t, out,
		"Found trace frame 0, tracepoint 2",
		fmt.Sprintf("$1 = %d", wantN),
		"$2 = 7",
		fmt.Sprintf("$3 = %d", tracedFunctionValue(wantN-1)),
		`$4 = "seven`,
		`"trace me"`,
		"$6 = <unavailable>",
		"No trace frame found",
	)
}

func TestFastTraceRegistersAndPasscount(t *testing.T) {
	if isGdbserver(stubPath(t)) {
		t.Skip("gdbserver needs its in-process agent library for ftrace")
	}
	prog := buildProgram(t, "trace")
	const pass = 4
	out, stub := fastSession(t, prog, []string{strconv.Itoa(traceIterations)}, fmt.Sprintf(`
ftrace traced_function
passcount %d
actions
collect $regs, $args
end`, pass), "trace_done", `
tstatus
`+frameLoop(`printf "frame %d n=%d rip_ok=%d\n", $trace_frame, n, $rip == (long)*traced_function || ($rip > (long)&traced_function && $rip < (long)&trace_done)`))
	mustPlaceJump(t, stub, 2)
	if n := framesCollected(t, out); n != pass {
		t.Errorf("collected %d frames, want the passcount %d", n, pass)
	}
	mustContain(t, out, "Trace stopped by tracepoint 2")
	for i := range pass {
		mustContain(t, out, fmt.Sprintf("frame %d n=%d rip_ok=1\n", i, i))
	}
}

func TestFastTraceAsmSites(t *testing.T) {
	if isGdbserver(stubPath(t)) {
		t.Skip("gdbserver needs its in-process agent library for ftrace")
	}
	prog := buildProgram(t, "trace")
	out, stub := fastSession(t, prog, []string{strconv.Itoa(traceIterations)}, `
ftrace *at_call
actions
collect $regs
end
ftrace *at_riprel
actions
collect $regs
end
ftrace *at_jcc
actions
collect $regs
end`, "trace_done", `
tstatus
`+frameLoop(`printf "tp %d rip=%#lx rbx=%ld\n", $tracepoint, $rip, $rbx`)+`
printf "at_call=%#lx at_riprel=%#lx at_jcc=%#lx\n", &at_call, &at_riprel, &at_jcc`)
	// call rel32 and the rip-relative load are 5+ bytes; the 2-byte jl
	// shares the jump with the add after it (an int3 pun at its head).
	mustPlaceJump(t, stub, 2)
	mustPlaceJump(t, stub, 3)
	mustPlaceJump(t, stub, 4)
	if !waitFor(5*time.Second, func() bool { return strings.Contains(stub.output.String(), "asm_worker results") }) {
		t.Fatalf("program did not finish; stub output:\n%s", stub.output.String())
	}
	mustContain(t, stub.output.String(), "asm_worker results OK")
	if n := framesCollected(t, out); n != 3*traceIterations {
		t.Errorf("collected %d frames, want %d", n, 3*traceIterations)
	}
	addrs := regexp.MustCompile(`at_call=(0x[0-9a-f]+) at_riprel=(0x[0-9a-f]+) at_jcc=(0x[0-9a-f]+)`).FindStringSubmatch(out)
	if addrs == nil {
		t.Fatalf("no label addresses in the output:\n%s", out)
	}
	for tp, addr := range map[int]string{2: addrs[1], 3: addrs[2], 4: addrs[3]} {
		for i := range traceIterations {
			line := fmt.Sprintf("tp %d rip=%s rbx=%d\n", tp, addr, i)
			if !strings.Contains(out, line) {
				t.Errorf("missing frame %q", strings.TrimSpace(line))
			}
		}
	}
}

// fastThreadsSession runs testdata/threads with an ftrace at hit()
// collecting id (gdb adds the registers that locate it: records of 240
// bytes) with 64 KiB lanes, and returns gdb's output and the hits the
// program counted.
func fastThreadsSession(t *testing.T, args ...string) (string, int) {
	t.Helper()
	out, hits, _ := fastThreadsSessionLog(t, 65536, args...)
	return out, hits
}

// fastThreadsSessionLog is fastThreadsSession with lanes of laneSize
// bytes, also returning the stub's output (--debug log).
func fastThreadsSessionLog(t *testing.T, laneSize int, args ...string) (string, int, string) {
	t.Helper()
	prog := buildProgram(t, "threads")
	out, stub := traceSessionFlags(t, []string{"--once", "--debug", "--trace-ring-size=" + strconv.Itoa(laneSize)}, prog, args, `
set trace-buffer-size 33554432
ftrace hit
actions
collect id
end`, "threads_done", `
tstatus
tfind tracepoint 2
print id`)
	mustPlaceJump(t, stub, 2)
	if !waitFor(5*time.Second, func() bool { return strings.Contains(stub.output.String(), "total hits") }) {
		t.Fatalf("program did not print its hit count; stub output:\n%s", stub.output.String())
	}
	m := regexp.MustCompile(`total hits (\d+)`).FindStringSubmatch(stub.output.String())
	programHits, _ := strconv.Atoi(m[1])
	mustMatch(t, out, `\$1 = [1-4]\n`)
	return out, programHits, stub.output.String()
}

// droppedHits reads the drop count tstatus shows in the trace notes.
func droppedHits(out string) int {
	m := regexp.MustCompile(`gotpstub: (\d+) fast tracepoint hits dropped`).FindStringSubmatch(out)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func TestFastTraceLanesWrapAround(t *testing.T) {
	if isGdbserver(stubPath(t)) {
		t.Skip("gdbserver needs its in-process agent library for ftrace")
	}
	// 4 threads x 5000 hits in bursts of 100 with 2 ms pauses, 256 KiB
	// lanes of about 1090 records (the registers gdb asks for to find id,
	// 240 bytes each): each lane wraps about 4 times while the drainer
	// keeps up. On a loaded machine the drainer may fall behind a
	// burst and drop hits (more than half of them once, under the arm64
	// VM's emulation: 8,446 frames): every hit must still be accounted
	// for, more frames collected than the lanes hold at once (so some
	// lane wrapped), and the records across the wraps (fillers) must
	// parse.
	const nthreads, hitsPerThread, laneRecords = 4, 5000, (256 << 10) / 240
	out, programHits, stubLog := fastThreadsSessionLog(t, 256<<10, strconv.Itoa(nthreads), strconv.Itoa(hitsPerThread), "100")
	if programHits != nthreads*hitsPerThread {
		t.Errorf("program counted %d hits, want %d", programHits, nthreads*hitsPerThread)
	}
	frames, dropped := framesCollected(t, out), droppedHits(out)
	t.Logf("%d frames, %d dropped", frames, dropped)
	if frames+dropped != programHits {
		t.Errorf("collected %d frames + %d dropped, program counted %d hits", frames, dropped, programHits)
	}
	if frames <= nthreads*laneRecords {
		t.Errorf("only %d frames, no more than the %d lanes hold: no lane wrapped", frames, nthreads)
	}
	if strings.Contains(stubLog, "draining the lanes") {
		t.Errorf("the drainer met a malformed record:\n%s", stubLog)
	}
}

func TestFastTraceDropsCounted(t *testing.T) {
	if isGdbserver(stubPath(t)) {
		t.Skip("gdbserver needs its in-process agent library for ftrace")
	}
	// No pauses: the threads outrun the drainer, their lanes fill, the
	// pads drop hits instead of waiting, and every hit is accounted for.
	const nthreads, hitsPerThread = 4, 20000
	out, programHits := fastThreadsSession(t, strconv.Itoa(nthreads), strconv.Itoa(hitsPerThread))
	frames, dropped := framesCollected(t, out), droppedHits(out)
	t.Logf("%d hits: %d frames, %d dropped", programHits, frames, dropped)
	if frames+dropped != programHits {
		t.Errorf("collected %d frames + %d dropped, program counted %d hits", frames, dropped, programHits)
	}
	if dropped == 0 {
		t.Errorf("no hit dropped with 64 KiB lanes and %d unpaced hits: the test proves nothing", programHits)
	}
}

func TestFastTracePunnedLoopHead(t *testing.T) {
	if isGdbserver(stubPath(t)) {
		t.Skip("gdbserver needs its in-process agent library for ftrace")
	}
	prog := buildProgram(t, "trace")
	// pun_site is a 2-byte mov followed by the loop head the loop jumps
	// back to: the jump covers that head, which becomes an int3 pun.
	out, stub := fastSession(t, prog, []string{strconv.Itoa(traceIterations)}, `
ftrace *pun_site
actions
collect $regs
end`, "trace_done", `
tstatus
`+frameLoop(`printf "pun rip_ok=%d rdi=%ld\n", $rip == (long)&pun_site, $rdi`))
	mustPlaceJump(t, stub, 2)
	if !waitFor(5*time.Second, func() bool { return strings.Contains(stub.output.String(), "pun_fn results") }) {
		t.Fatalf("program did not finish; stub output:\n%s", stub.output.String())
	}
	mustContain(t, stub.output.String(), "pun_fn results OK", "asm_worker results OK")
	if n := framesCollected(t, out); n != traceIterations {
		t.Errorf("collected %d frames, want %d (one per call, none per loop turn)", n, traceIterations)
	}
	for i := range traceIterations {
		mustContain(t, out, fmt.Sprintf("pun rip_ok=1 rdi=%d\n", i+1))
	}
}

func TestFastTraceMixedWithTraps(t *testing.T) {
	if isGdbserver(stubPath(t)) {
		t.Skip("gdbserver needs its in-process agent library for ftrace")
	}
	prog := buildProgram(t, "trace")
	// A trap and a jump at different places: frames in the order of the
	// hits. A trap and a jump at one address: both become traps and both
	// collect.
	out, stub := fastSession(t, prog, []string{strconv.Itoa(traceIterations)}, `
trace traced_function
ftrace *at_call
ftrace traced_function`, "trace_done", `
tstatus
`+frameLoop(`printf "seq %d\n", $tracepoint`))
	mustPlaceJump(t, stub, 3)
	mustMatch(t, stub.output.String(), `fast tracepoint 4 at 0x[0-9a-f]+: trap instead of a jump: another tracepoint shares its bytes`)
	if n := framesCollected(t, out); n != 3*traceIterations {
		t.Errorf("collected %d frames, want %d", n, 3*traceIterations)
	}
	var seq []string
	for _, m := range regexp.MustCompile(`seq (\d+)\n`).FindAllStringSubmatch(out, -1) {
		seq = append(seq, m[1])
	}
	want := strings.Repeat("2 4 3 ", traceIterations)
	if got := strings.Join(seq, " ") + " "; got != want {
		t.Errorf("frame order by tracepoint:\n got %s\nwant %s", got, want)
	}
}

func TestFastTraceFramesSurviveExit(t *testing.T) {
	if isGdbserver(stubPath(t)) {
		t.Skip("gdbserver needs its in-process agent library for ftrace")
	}
	// Not PIE: gdb reads the frames from a trace file, with no process
	// to relocate a PIE program's symbols by (aarch64 gdb then finds no
	// n at the frames' pcs).
	prog := buildC(t, filepath.Join(t.TempDir(), "trace"), []string{"trace.c"}, "-no-pie")
	// No stop between tstart and the program's exit: the hits are still
	// in the in-inferior ring when it exits, and must reach the buffer.
	s := startStub(t, []string{"--once", "--multi", "--debug"})
	tfile := filepath.Join(t.TempDir(), "exit.tf")
	out := runGDB(t, gdbSession{program: prog, commands: []string{
		"target extended-remote " + s.target(),
		"set remote exec-file " + prog,
		"break main",
		"run",
		"ftrace traced_function",
		"actions\ncollect n\nend",
		"tstart",
		"continue",
		"tstatus",
		// gdb browses frames only with a live process or a trace file.
		"tsave " + tfile,
		"target tfile " + tfile,
		frameLoop(`printf "exit frame n=%d\n", n`),
	}})
	mustPlaceJump(t, s, 2)
	mustContain(t, out, "exited normally")
	if n := framesCollected(t, out); n != traceIterations {
		t.Errorf("collected %d frames, want %d", n, traceIterations)
	}
	for i := range traceIterations {
		mustContain(t, out, fmt.Sprintf("exit frame n=%d\n", i))
	}
}

func TestFastTraceStopsNeverShowPadAddresses(t *testing.T) {
	if isGdbserver(stubPath(t)) {
		t.Skip("gdbserver needs its in-process agent library for ftrace")
	}
	prog := buildProgram(t, "threads")
	// Four threads spend nearly all their time inside the pad of hit (its
	// condition and collection read memory); SIGUSR1s from outside stop
	// the program again and again wherever the threads are. At every stop
	// each thread must be in the program, never at a pad address.
	const nthreads, hitsPerThread, stops = 4, 4000000, 8
	s := startStub(t, []string{"--once", "--debug"}, prog, strconv.Itoa(nthreads), strconv.Itoa(hitsPerThread))
	cmds := []string{
		"target remote " + s.target(),
		"break all_started",
		"continue",
		"set circular-trace-buffer on",
		"handle SIGUSR1 stop print nopass",
		"ftrace hit if total_hits >= 0",
		"actions\ncollect id\nend",
		"tstart",
	}
	for range stops {
		cmds = append(cmds, "continue", "info threads")
	}
	cmds = append(cmds, "tstop", "tstatus", "kill")
	done := make(chan struct{})
	go func() {
		// Once the jump is in (the --debug log says so: tracing runs,
		// all_started was reached), signal the program until gdb is
		// done (it ignores the rest). Signals before that would stop the
		// program during its start instead, and tstart would run there.
		for !strings.Contains(s.output.String(), " jump over ") {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
		for {
			select {
			case <-done:
				return
			case <-time.After(stopSignalEvery): // isa_*_test.go
				if pid := s.inferiorPid(); pid > 0 {
					_ = syscall.Kill(pid, syscall.SIGUSR1)
				}
			}
		}
	}()
	out := runGDB(t, gdbSession{program: prog, commands: cmds})
	close(done)
	mustPlaceJump(t, s, 2)
	if n := strings.Count(out, "received signal SIGUSR1"); n != stops {
		t.Fatalf("%d SIGUSR1 stops, want %d:\n%s", n, stops, out)
	}
	// A pc in no function of the program or a library ("?? ()" with no
	// "from LIB": a library's unnamed internal function is fine).
	if regexp.MustCompile(`(?m)in \?\? \(\)\s*$`).MatchString(out) || strings.Contains(out, "SIGTRAP") {
		t.Errorf("a thread was shown outside the program, or trapped:\n%s", out)
	}
	if !strings.Contains(s.output.String(), "moved out of a pad") {
		t.Errorf("no stop found a thread inside a pad: the test did not exercise stabilizing; stub output:\n%s", s.output.String())
	}
}

func TestFastTraceUnreadableMemory(t *testing.T) {
	if isGdbserver(stubPath(t)) {
		t.Skip("gdbserver needs its in-process agent library for ftrace")
	}
	prog := buildProgram(t, "trace")
	// The condition and a collection dereference unmapped addresses
	// inside the inferior: they read as zero / are not collected, the
	// program runs on unharmed.
	out, stub := fastSession(t, prog, []string{strconv.Itoa(traceIterations)}, `
ftrace traced_function if *(int *)8 == 0 && n >= 0
actions
collect n, *(long *)16
end`, "trace_done", `
tstatus
tfind start
print n
print *(long *)16
`)
	mustPlaceJump(t, stub, 2)
	if !waitFor(5*time.Second, func() bool { return strings.Contains(stub.output.String(), "g_counter") }) {
		t.Fatalf("program did not finish; stub output:\n%s", stub.output.String())
	}
	mustContain(t, stub.output.String(), "asm_worker results OK", fmt.Sprintf("g_counter %d", traceIterations))
	if n := framesCollected(t, out); n != traceIterations {
		t.Errorf("collected %d frames, want %d", n, traceIterations)
	}
	mustContain(t, out, "$1 = 0", "$2 = <unavailable>")
}

func TestFastTraceVectorRegisters(t *testing.T) {
	if isGdbserver(stubPath(t)) {
		t.Skip("gdbserver needs its in-process agent library for ftrace")
	}
	// collect $regs at a fast tracepoint where ymm0, xmm1 and r12 hold
	// known values: the frame must show them (the pad XSAVEs the vector
	// state), not zeros.
	vectors, args, avx := vectorsProgram(t)
	out, stub := traceSessionFlags(t, []string{"--once", "--debug"}, vectors, args, `
ftrace *vectors_loaded
actions
collect $regs
end`, "exit", `
tfind 0
print $xmm0.v4_int32
print $xmm1.v2_double
print $ymm0.v8_int32
print/x $r12
print $mxcsr`)
	mustPlaceJump(t, stub, 2)
	mustContain(t, out, "{1, 2, 3, 4}", "{1.5, -2.25}", "0x1122334455667788")
	if avx {
		mustContain(t, out, "{1, 2, 3, 4, 5, 6, 7, 8}")
	}
	mustMatch(t, out, `\$5 = \[ [A-Z ]*IM DM ZM OM UM PM`)
}

func TestFastTraceUncollectedRegistersUnavailable(t *testing.T) {
	if isGdbserver(stubPath(t)) {
		t.Skip("gdbserver needs its in-process agent library for ftrace")
	}
	// collect $r12, $fs_base: the pad saves no vector state, so the
	// frame's xmm/ymm registers are unavailable (not zeros), and so are
	// orig_rax and gs_base, which a pad never sees; the frame holds the
	// registers gdb asked for (and the PC), so rax is unavailable too;
	// fs_base is the thread pointer the pad read with rdfsbase or, where
	// the machine does not allow it, at %fs:0 (glibc's thread control
	// block points to itself).
	vectors, args, avx := vectorsProgram(t)
	prints := `
tfind 0
print/x $r12
print $xmm0
print $orig_rax
print $gs_base
print $fs_base != 0
print $rax
print $pc == vectors_loaded
print $st0`
	if avx {
		prints += "\nprint $ymm0"
	}
	out, stub := traceSessionFlags(t, []string{"--once", "--debug"}, vectors, args, `
ftrace *vectors_loaded
actions
collect $r12, $fs_base
end`, "exit", prints)
	mustPlaceJump(t, stub, 2)
	mustContain(t, out, "$1 = 0x1122334455667788", "$2 = <unavailable>", "$3 = <unavailable>",
		"$4 = <unavailable>", "$5 = 1", "$6 = <unavailable>", "$7 = 1", "$8 = <unavailable>")
	if avx {
		mustContain(t, out, "$9 = <unavailable>")
	}
}

func TestFastTraceCircularOverwrite(t *testing.T) {
	if isGdbserver(stubPath(t)) {
		t.Skip("gdbserver needs its in-process agent library for ftrace")
	}
	// One thread, 20000 hits collecting total_hits into a 20000-byte
	// circular buffer: the oldest frames go, the newest stay, in order,
	// and every hit is accounted for as created.
	const hits = 20000
	prog := buildProgram(t, "threads")
	out, stub := traceSessionFlags(t, []string{"--once", "--debug"}, prog, []string{"1", strconv.Itoa(hits), "500"}, `
set circular-trace-buffer on
set trace-buffer-size 20000
ftrace hit
actions
collect total_hits
end`, "threads_done", `
tfind start
print total_hits
tfind end
tfind -1
print total_hits`)
	mustPlaceJump(t, stub, 2)
	m := mustMatch(t, out, `Buffer contains (\d+) trace frames \(of (\d+) created total\)`)
	kept, created := atoi(t, m[1]), atoi(t, m[2])
	if created+droppedHits(out) != hits || kept >= created || kept < 100 {
		t.Fatalf("%d frames kept of %d created, %d dropped, for %d hits", kept, created, droppedHits(out), hits)
	}
	vals := regexpAll(out, `\$\d+ = (\d+)`)
	if len(vals) != 2 {
		t.Fatalf("printed %v", vals)
	}
	first, last := atoi(t, vals[0][1]), atoi(t, vals[1][1])
	// The oldest kept frame is a late hit, the newest the last hit (the
	// counter before or after that hit's increment, depending on where
	// gdb puts the tracepoint), and the kept frames are consecutive hits.
	if last < hits-1 || first < hits-kept-droppedHits(out) || last-first+1 < kept {
		t.Errorf("oldest kept frame saw %d, newest %d, %d kept", first, last, kept)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestFastTraceAsTrapIsSaid(t *testing.T) {
	if isGdbserver(stubPath(t)) {
		t.Skip("gotpstub's notes")
	}
	// $trace_timestamp in a condition: the pad cannot read the stub's
	// clock, so the fast tracepoint becomes a trap, and tstatus says so
	// (gdb itself still calls it a fast tracepoint).
	prog := buildProgram(t, "threads")
	out, _ := traceSessionFlags(t, []string{"--once"}, prog, []string{"1", "5"}, `
tvariable $count = 0
ftrace hit if $trace_timestamp > 0
actions
teval $count = $count + 1
end`, "threads_done", "print $count")
	mustContain(t, out, "Fast tracepoint 2 at")
	mustMatch(t, out, `gotpstub: fast tracepoint 2 runs as a trap tracepoint \(each hit stops its thread\): [^\n]+`)
	mustContain(t, out, "$1 = 5")
}

func TestMonitorFtrace(t *testing.T) {
	if isGdbserver(stubPath(t)) {
		t.Skip("gotpstub's monitor command")
	}
	// monitor ftrace tells how each installed tracepoint is placed.
	prog := buildProgram(t, "threads")
	out, _ := traceSessionFlags(t, []string{"--once"}, prog, []string{"1", "5"}, `
tvariable $c = 0
ftrace hit
ftrace threads_done
actions
teval $c = $trace_timestamp
end
trace all_started
tstart
monitor ftrace
tstop
monitor ftrace`, "threads_done", "")
	mustMatch(t, out, `tracepoint 2 at 0x[0-9a-f]+: `+jumpShape+` jump over \d+ bytes \(\d+ instructions\), pad at 0x[0-9a-f]+ \(\d+ bytes\)`)
	mustMatch(t, out, `tracepoint 3 at 0x[0-9a-f]+: trap \(int3\) instead of a jump: [^\n]*trace state variable 1 `)
	mustMatch(t, out, `tracepoint 4 at 0x[0-9a-f]+: trap \(int3\): gdb's trace`)
	mustContain(t, out, "no tracepoint is installed")
}

// A gdb breakpoint on an instruction a fast tracepoint's jump covers
// (not its first) is hit: the tracepoint is a trap while the breakpoint
// is there, and gets its jump back once it goes (issue 9, item 4). No hit
// is lost or counted twice across the switches.
func TestBreakpointInCoveredBytes(t *testing.T) {
	if isGdbserver(stubPath(t)) {
		t.Skip("gotpstub's monitor command")
	}
	prog := buildProgram(t, "bpcover")
	stub := startStub(t, []string{"--once", "--debug"}, prog)
	script := strings.Join([]string{
		"target remote " + stub.target(),
		"break main",
		"continue",
		"ftrace covered",
		"break *covered_next", // before tstart: placed as a trap at once
		"break done",
		"tstart",
		"continue",
		`printf "at covered_next: %d\n", (long)$pc == (long)&covered_next`,
		"monitor ftrace",
		"delete 3",
		"stepi", // out of the covered bytes: the jump goes back in at this stop
		"monitor ftrace",
		"break *covered_next", // while the jump is in
		"continue",
		`printf "at covered_next: %d\n", (long)$pc == (long)&covered_next`,
		"monitor ftrace",
		"delete 5",
		"stepi",
		"continue", // the other 8 hits through the jump
		"monitor ftrace",
		"tstop",
		"tstatus",
		"continue",
	}, "\n")
	out := runGDB(t, gdbSession{program: prog, commands: []string{script}})
	if n := strings.Count(out, "at covered_next: 1"); n != 2 {
		t.Errorf("stopped %d times at covered_next, want 2", n)
	}
	trap := regexp.MustCompile(`tracepoint 2 at 0x[0-9a-f]+: trap \(int3\) instead of a jump: gdb's breakpoint at 0x[0-9a-f]+ is inside`)
	jump := regexp.MustCompile(`tracepoint 2 at 0x[0-9a-f]+: (punned jump over 6 bytes \(2 instructions\)|successor-preserving jump over 3 bytes \(1 instructions\))`)
	var seq []string
	for _, line := range strings.Split(out, "\n") {
		switch {
		case trap.MatchString(line):
			seq = append(seq, "trap")
		case jump.MatchString(line):
			seq = append(seq, "jump")
		}
	}
	// gdb takes its breakpoints out at each stop: a punned jump comes
	// back once no thread is stopped inside it (after the stepi), a
	// successor-preserving one at once (a thread at covered_next runs
	// the kept bytes). Either way the stub made the tracepoint a trap
	// whenever gdb put the breakpoint in.
	want := "trap jump trap jump"
	if strings.Contains(out, "successor-preserving jump") {
		want = "jump jump jump jump"
	}
	if got := strings.Join(seq, " "); got != want {
		t.Errorf("placements reported %q, want %q", got, want)
	}
	demoted := regexp.MustCompile(`fast tracepoint 2 at 0x[0-9a-f]+: trap instead of a jump: gdb's breakpoint at 0x[0-9a-f]+ is inside`)
	if n := len(demoted.FindAllString(stub.output.String(), -1)); n < 2 {
		t.Errorf("the stub made the tracepoint a trap %d times for the breakpoint, want 2 or more", n)
	}
	if n := framesCollected(t, out); n != 10 {
		t.Errorf("%d frames, want one per call (10)", n)
	}
	if strings.Contains(out, "runs as a trap tracepoint") {
		t.Error("tstatus still says the tracepoint runs as a trap")
	}
	mustContain(t, out, "exited normally")
	mustContain(t, stub.output.String(), "x=30")
}

// Trace state variables at pad speed (issue 10, item 2): `teval $n = $n
// + 1` in a fast tracepoint hit by 4 threads at once keeps its jump, loses
// no increment (the pads add with LOCK XADD in memory shared with the
// stub), and info tvariables shows the count; a collected $n is in the
// frames; tstatus has no note of a trap.
func TestFastTraceCountsInThePad(t *testing.T) {
	if isGdbserver(stubPath(t)) {
		t.Skip("gotpstub's monitor command")
	}
	const threads, perThread = 4, 20000
	prog := buildProgram(t, "threads")
	out, stub := fastSession(t, prog, []string{strconv.Itoa(threads), strconv.Itoa(perThread)}, `
set circular-trace-buffer on
tvariable $n = 1000
tvariable $odd = 0
ftrace hit if (id & 1) == 1
actions
teval $n = $n + 1
teval $odd = $odd + 2
collect $n
end`, "threads_done", `
monitor ftrace
info tvariables
tfind 0
print $n > 1000 && $n <= 41000`)
	mustPlaceJump(t, stub, 2)
	// Threads 0..3: ids 1 and 3 pass the condition.
	want := 1000 + 2*perThread
	mustMatch(t, out, fmt.Sprintf(`\$n\s+1000\s+%d\s`, want))
	mustMatch(t, out, fmt.Sprintf(`\$odd\s+0\s+%d\s`, 2*2*perThread))
	if n := framesCollected(t, out); n < 1 {
		t.Errorf("%d frames", n)
	}
	mustContain(t, out, "$1 = 1")
	if strings.Contains(out, "runs as a trap tracepoint") {
		t.Error("the tracepoint ran as a trap")
	}
	mustContain(t, stub.output.String(), fmt.Sprintf("total hits %d", threads*perThread))
	// Each thread that hit has a lane of its own (rdfsbase, or %fs:0
	// where the machine does not allow it): the main thread and the two
	// hitting workers at least.
	m := mustMatch(t, out, `lanes: thread pointer (by rdfsbase|at %fs:0|from tpidr_el0)[^;]*; (\d+) of 16 lanes owned`)
	if len(m) == 3 && atoi(t, m[2]) < 3 {
		t.Errorf("%s lanes owned, want 3 or more", m[2])
	}
}

// A fast tracepoint at a 1-byte first instruction whose next byte, as a
// short jump's displacement, points into padding after a ret gets a
// short jump that keeps that byte (issue 9: no int3 at the next
// instruction): every call through the entry is one frame, a call that
// arrives at the kept instruction runs it unchanged (no frame, no trap),
// and the program's result is the untraced one.
func TestFastTraceKeptShortJump(t *testing.T) {
	if isGdbserver(stubPath(t)) {
		t.Skip("gotpstub's placement")
	}
	const calls = 500
	// Non-PIE: from its low address a successor-preserving jump keeping
	// the xor and the mov's first bytes (displacement 0x80b8c031) would
	// put the pad below address 0, so the short jump is the shape left.
	prog := buildC(t, filepath.Join(t.TempDir(), "keptshort"), []string{"keptshort.c"}, "-no-pie")
	out, stub := traceSessionFlags(t, []string{"--once"}, prog, []string{strconv.Itoa(calls)}, `
ftrace *kept_short
tstart
monitor ftrace`, "calls_done", "continue")
	mustMatch(t, out, `tracepoint 2 at 0x[0-9a-f]+: short jump over 1 bytes \(1 instructions\), pad at 0x[0-9a-f]+ \(\d+ bytes\), no int3, keeps 1 bytes of the next instructions, to a jump in the padding at 0x[0-9a-f]+`)
	if frames := framesCollected(t, out); frames != calls {
		t.Errorf("%d frames, want %d (one per call through the entry)", frames, calls)
	}
	want := 0
	for i := range calls {
		want += 2 * (0xff80 + i)
	}
	mustContain(t, stub.output.String(), fmt.Sprintf("sum=%d", want))
}

func TestFastTraceAfterPush(t *testing.T) {
	if isGdbserver(stubPath(t)) {
		t.Skip("gotpstub's placement")
	}
	const calls = 300
	// Non-PIE: every shape at after_push's entry puts the pad below
	// address 0 or its slot across two instructions; the jump goes after
	// the push, and the frames must still show the entry's registers.
	prog := buildC(t, filepath.Join(t.TempDir(), "afterpush"), []string{"afterpush.c"}, "-no-pie")
	out, stub := traceSessionFlags(t, []string{"--once"}, prog, []string{strconv.Itoa(calls)}, `
ftrace *after_push
actions
collect $regs, *(long *)$rsp
end
tstart
monitor ftrace`, "calls_done", `
tfind 0
printf "pc-entry=%d\n", $pc - (long)&after_push
x/a $sp
printf "rdi=%d\n", $rdi
tfind 7
printf "rdi=%d\n", $rdi
tfind none
continue`)
	mustMatch(t, out, `tracepoint 2 at 0x[0-9a-f]+: [a-z -]+ jump over \d+ bytes \(\d+ instructions\), pad at 0x[0-9a-f]+ \(\d+ bytes\), .*at 0x[0-9a-f]+ after the push left in place`)
	if frames := framesCollected(t, out); frames != calls {
		t.Errorf("%d frames, want %d (one per call)", frames, calls)
	}
	mustContain(t, out, "pc-entry=0")
	// The entry's rsp: the return address into main, not the pushed rbx.
	mustMatch(t, out, `0x[0-9a-f]+:\s+0x[0-9a-f]+ <main\+\d+>`)
	mustContain(t, out, "rdi=0\n")
	mustContain(t, out, "rdi=7\n")
	mustContain(t, stub.output.String(), fmt.Sprintf("sum=%d bumps=%d", calls*(calls+1)/2, calls))
}

// TestFastTraceAfterPushShared: a second fast tracepoint on the
// instruction after the push takes the bytes the first one's jump needs:
// the first becomes a trap at the entry, the second gets the jump, and
// each counts every call.
func TestFastTraceAfterPushShared(t *testing.T) {
	if isGdbserver(stubPath(t)) {
		t.Skip("gotpstub's placement")
	}
	const calls = 200
	prog := buildC(t, filepath.Join(t.TempDir(), "afterpush"), []string{"afterpush.c"}, "-no-pie")
	out, _ := traceSessionFlags(t, []string{"--once"}, prog, []string{strconv.Itoa(calls)}, `
ftrace *after_push
ftrace *after_push+1
tstart
monitor ftrace`, "calls_done", "")
	mustMatch(t, out, `tracepoint 2 at 0x[0-9a-f]+: trap \(int3\) instead of a jump: another tracepoint shares its bytes`)
	mustMatch(t, out, `tracepoint 3 at 0x[0-9a-f]+: [a-z -]+ jump over`)
	if frames := framesCollected(t, out); frames != 2*calls {
		t.Errorf("%d frames, want %d (two per call)", frames, 2*calls)
	}
}

// TestFastTraceAfterPushBecomesTrap: a thread stopped between the push
// left in place and the jump after it (gdb stepped the push) when the
// tracepoint becomes a trap (gdb's breakpoint inside the jump's bytes)
// still gets its hit: it is sent on to the pad, as if it had run the
// jump, before the jump comes out. Every call is one frame.
func TestFastTraceAfterPushBecomesTrap(t *testing.T) {
	if isGdbserver(stubPath(t)) {
		t.Skip("gotpstub's placement")
	}
	const calls = 50
	prog := buildC(t, filepath.Join(t.TempDir(), "afterpush"), []string{"afterpush.c"}, "-no-pie")
	stub := startStub(t, []string{"--once"}, prog, strconv.Itoa(calls))
	out := runGDB(t, gdbSession{program: prog, commands: []string{strings.Join([]string{
		"target remote " + stub.target(),
		"set breakpoint always-inserted on", // in while stopped: monitor ftrace sees the trap
		"tbreak *after_push",
		"continue",
		"ftrace *after_push",
		"tstart",
		"monitor ftrace",
		"stepi",
		`printf "at=%d\n", $pc - (long)&after_push`,
		// On the jump's kept bytes: the tracepoint becomes a trap while
		// gdb's breakpoints are in (from the continue on); the condition
		// keeps gdb from reporting this one.
		"break *after_push+4 if 0",
		"break calls_done",
		"continue",
		"monitor ftrace",
		"tstop",
		"tstatus",
		"continue",
	}, "\n")}})
	mustMatch(t, out, `tracepoint 2 at 0x[0-9a-f]+: .*after the push left in place`)
	mustContain(t, out, "at=1\n")
	mustMatch(t, out, `tracepoint 2 at 0x[0-9a-f]+: trap \(int3\) instead of a jump`)
	if frames := framesCollected(t, out); frames != calls {
		t.Errorf("%d frames, want %d (one per call, the stepped one too)", frames, calls)
	}
	mustContain(t, stub.output.String(), fmt.Sprintf("sum=%d bumps=%d", calls*(calls+1)/2, calls))
}

// A gdb stepi at a fast tracepoint whose jump covers two instructions
// executes one instruction, as without the tracepoint: the thread runs
// the pad (the hit is collected) and the copy of the first instruction,
// and stops at the second one's own address (its int3 pun sends it back
// to the copy when it runs on); the next stepi executes that one. Every
// call is still one frame.
func TestStepiIntoPunnedJump(t *testing.T) {
	if isGdbserver(stubPath(t)) {
		t.Skip("gotpstub's jump shapes")
	}
	prog := buildProgram(t, "bpcover")
	stub := startStub(t, []string{"--once", "--ftrace-shapes=plain,int3"}, prog)
	script := strings.Join([]string{
		"target remote " + stub.target(),
		"break main",
		"continue",
		"ftrace covered",
		"break done",
		"tstart",
		"monitor ftrace",
		"tbreak covered",
		"continue",
		`printf "at covered: %d\n", (long)$pc == (long)&covered`,
		"stepi",
		`printf "at covered_next: %d\n", (long)$pc == (long)&covered_next`,
		"stepi",
		`printf "after covered_next: %d\n", (long)$pc > (long)&covered_next && (long)$pc < (long)&covered_next + 8`,
		"continue",
		"tstop",
		"tstatus",
		"continue",
	}, "\n")
	out := runGDB(t, gdbSession{program: prog, commands: []string{script}})
	mustMatch(t, out, `tracepoint 2 at 0x[0-9a-f]+: punned jump over 6 bytes \(2 instructions\)`)
	mustContain(t, out, "at covered: 1", "at covered_next: 1", "after covered_next: 1", "exited normally")
	if n := framesCollected(t, out); n != 10 {
		t.Errorf("%d frames, want one per call (10)", n)
	}
	mustContain(t, stub.output.String(), "x=30")
}
