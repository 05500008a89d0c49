package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// nonStopSessionAt starts the stub (with flags) on prog and gdb/MI in
// non-stop mode connected to it, and runs the program until its main
// thread stops at function at (a breakpoint, deleted then); the
// program's other threads keep running.
func nonStopSessionAt(t *testing.T, prog string, flags []string, at string) (*miGDB, *stubProcess) {
	t.Helper()
	stub := startStub(t, flags, prog)
	g := startMI(t, prog)
	g.mustDo("-gdb-set non-stop on")
	g.mustDo("-target-select remote " + stub.target())
	g.mustDo("break " + at)
	if res, _ := g.do("-exec-continue --all"); !strings.HasPrefix(res, "^running") {
		t.Fatalf("continue: %s", res)
	}
	if stop, ok := g.waitStopped(30 * time.Second); !ok || !strings.Contains(stop, `reason="breakpoint-hit"`) {
		t.Fatalf("no stop at %s: %q", at, stop)
	}
	g.mustDo("delete")
	return g, stub
}

// TestNonStopTraceWhileRunning is issue 11's stress test in non-stop
// mode: testdata/stress8.c's eight threads never stop while its three
// fast tracepoints — a jump over two instructions, a 1-byte push at an
// entry, a lone ret — are inserted (tstart) and removed (tstop) again and
// again. Every cycle's saved trace must be consistent, as in
// TestFastTraceStressEightThreads; the program checks its own arithmetic
// and must still run at the end, its threads running all along. The stub
// logs (--timing) how long each packet stopped threads: with live
// patching (x86-64's default), the longest stop of any one thread;
// with --live-patch=off, how long every thread was paused. Run as root
// with tracefs mounted, the test also has the kernel measure every
// ptrace stop of the program's threads (schedtrace_test.go) and logs
// the longest per tstart and tstop and those between them.
func TestNonStopTraceWhileRunning(t *testing.T) {
	requireTools(t)
	if isGdbserver(stubPath(t)) {
		t.Skip("gdbserver needs its in-process agent library for ftrace")
	}
	prog := buildProgram(t, "stress8")
	for _, c := range []struct {
		name, shapes string // --ftrace-shapes
		mainRuns     bool   // main runs too (in pthread_join): no thread is stopped
		live         bool   // --live-patch=on: patching with the threads running
		want         []string
	}{
		// The stub's choice (jumps that keep their successors' bytes),
		// gdb keeping the main thread stopped: the jumps go in and out
		// with the eight threads running, the system calls the stub
		// needs made by the main thread.
		{"live", "all", false, true, []string{"successor-preserving jump over 3 bytes"}},
		// Punned jumps over several instructions (int3s at the covered
		// heads: threads found inside are moved), a trap at the ret, and
		// every thread running: the stub's system calls run in a thread
		// stopped for that moment.
		{"int3 puns, all running, live", "plain,int3", true, true, []string{"punned jump over 6 bytes (2 instructions)", "trap instead of a jump"}},
		// Both with --live-patch=off: every thread paused for tstart
		// and tstop.
		{"paused", "all", false, false, []string{"successor-preserving jump over 3 bytes"}},
		{"int3 puns, all running, paused", "plain,int3", true, false, []string{"punned jump over 6 bytes (2 instructions)", "trap instead of a jump"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			flags := []string{"--once", "--timing", "--debug", "--ftrace-shapes=" + c.shapes}
			if c.live {
				flags = append(flags, "--live-patch=on")
			} else {
				flags = append(flags, "--live-patch=off")
			}
			nonStopCycles(t, prog, flags, c.mainRuns, c.want)
		})
	}
}

// nonStopCycles runs TestNonStopTraceWhileRunning's cycles.
func nonStopCycles(t *testing.T, prog string, flags []string, mainRuns bool, want []string) {
	g, stub := nonStopSessionAt(t, prog, flags, "ready")
	if dump := os.Getenv("GOTPSTUB_DUMP_LOG"); dump != "" {
		t.Cleanup(func() { _ = os.WriteFile(dump, []byte(stub.output.String()), 0o644) })
	}
	site3, entry1, leaf := stressTracepoints(t, g)
	running := stressThreads
	if mainRuns {
		g.mustDo("-exec-continue --thread 1")
		running++
	}
	cycles := 200
	if testing.Short() {
		cycles = 20
	}
	tf := filepath.Join(t.TempDir(), "cycle.tf")
	sched, err := startSchedTrace(filepath.Base(prog))
	if err != nil {
		t.Logf("no scheduler trace of the stops: %v", err)
	} else {
		defer sched.close()
	}
	mark := func(text string) {
		if sched != nil {
			sched.mark(text)
		}
	}
	var stats stressStats
	for i := range cycles {
		mark(fmt.Sprintf("begin tstart %d", i))
		g.mustDo("tstart")
		mark(fmt.Sprintf("end tstart %d", i))
		if i == 0 {
			// The stub's log reaches stub.output through a goroutine
			// copying its pipe: it may trail gdb's reply under load.
			waitFor(10*time.Second, func() bool {
				out := stub.output.String()
				return !slices.ContainsFunc(want, func(w string) bool { return !strings.Contains(out, w) })
			})
			mustContain(t, stub.output.String(), want...)
		}
		time.Sleep(time.Duration(2+i%5) * time.Millisecond)
		mark(fmt.Sprintf("begin tstop %d", i))
		stopped := g.mustDo("tstop")
		mark(fmt.Sprintf("end tstop %d", i))
		status := stopped + g.mustDo("tstatus")
		if strings.Contains(status, "rror") {
			t.Fatalf("cycle %d: %s", i, status)
		}
		g.mustDo("tsave -r " + tf)
		stats.check(t, i, tf, droppedHits(status), site3, entry1, leaf)
	}
	if stats.site3Frames < int64(cycles) {
		t.Errorf("only %d frames at site3 in %d cycles: the threads hardly ran", stats.site3Frames, cycles)
	}
	threads := g.mustDo("info threads")
	if n := strings.Count(threads, "(running)"); n != running {
		t.Errorf("%d threads running at the end, want %d:\n%s", n, running, threads)
	}
	if sched != nil {
		if events, err := sched.stop(); err != nil {
			t.Logf("scheduler trace: %v", err)
		} else {
			var held []int // the main thread, which gdb keeps stopped
			if !mainRuns {
				held = append(held, stub.inferiorPid())
			}
			t.Logf("scheduler trace (the kernel's sched_switch and sched_waking events): %s", summarizeSpanStops(events, held))
			spans := spanStops(events, held)
			if marked := len(spans["tstart"]) + len(spans["tstop"]); marked < 2*cycles {
				t.Logf("scheduler trace: events lost, %d of %d commands found", marked, 2*cycles)
			}
		}
	}
	// Every thread stops when asked, alive: a broken instruction would
	// have made the program exit with status 3.
	g.mustDo("-exec-interrupt --all")
	for range running {
		if stop, ok := g.waitStopped(10 * time.Second); !ok || !strings.Contains(stop, `signal-name="0"`) {
			t.Fatalf("interrupting every thread: %q", stop)
		}
	}
	summary := pauseSummary(t, stub.output.String(), cycles)
	t.Logf("%d cycles with %d threads running: %d frames (%d of site3), %d cycles with hits dropped; %s",
		cycles, running, stats.frames, stats.site3Frames, stats.droppedCycles, summary)
	fmt.Fprint(g.stdin, "-gdb-exit\n")
}

// pauseSummary sums up the stub's --timing lines for tstart and tstop in
// non-stop mode: with live patching, how long each took and the longest
// stop of any thread for it; with the fallback (every thread paused),
// how long the pauses were. Each of the cycles must have logged both.
func pauseSummary(t *testing.T, log string, cycles int) string {
	t.Helper()
	live := regexp.MustCompile(`(QTSt\w+) changed code live in (\d+) µs: .*; longest thread stop (\d+) µs \((\d+) µs not counting`).FindAllStringSubmatch(log, -1)
	paused := regexp.MustCompile(`threads paused (\d+) µs for (QTSt\w+)`).FindAllStringSubmatch(log, -1)
	total, stops, offCPU := map[string][]int{}, map[string][]int{}, map[string][]int{}
	for _, m := range live {
		us, _ := strconv.Atoi(m[2])
		hold, _ := strconv.Atoi(m[3])
		pause, _ := strconv.Atoi(m[4])
		total[m[1]] = append(total[m[1]], us)
		stops[m[1]] = append(stops[m[1]], hold)
		offCPU[m[1]] = append(offCPU[m[1]], pause)
	}
	for _, m := range paused {
		us, _ := strconv.Atoi(m[1])
		stops[m[2]] = append(stops[m[2]], us)
	}
	if n := len(live) + len(paused); n != 2*cycles {
		t.Errorf("%d tstart/tstop timings logged for %d cycles", n, cycles)
	}
	var out []string
	for kind, us := range stops {
		slices.Sort(us)
		line := fmt.Sprintf("%s: longest stop of a thread median %d µs, max %d µs", kind, us[len(us)/2], us[len(us)-1])
		if tt := total[kind]; len(tt) > 0 {
			slices.Sort(tt)
			oc := offCPU[kind]
			slices.Sort(oc)
			line += fmt.Sprintf(" (live patching; not counting time runnable median %d µs, max %d µs; the packet took median %d µs, max %d µs)",
				oc[len(oc)/2], oc[len(oc)-1], tt[len(tt)/2], tt[len(tt)-1])
		} else {
			line += " (every thread paused)"
		}
		out = append(out, line)
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

// TestNonStopBreakpointInTracedJump: in non-stop mode with a trace
// running and eight threads through its jumps, gdb puts a breakpoint on
// the instruction after site3, whose bytes site3's jump keeps (its
// footprint): the jump becomes a trap, with the threads running
// (--live-patch), so the breakpoint is hit and reported for one
// thread; deleted, the jump comes back. The trace stays consistent and
// every other thread keeps running.
func TestNonStopBreakpointInTracedJump(t *testing.T) {
	requireTools(t)
	if isGdbserver(stubPath(t)) {
		t.Skip("gdbserver needs its in-process agent library for ftrace")
	}
	prog := buildProgram(t, "stress8")
	g, _ := nonStopSessionAt(t, prog, []string{"--once", "--live-patch"}, "ready")
	site3, entry1, leaf := stressTracepoints(t, g)
	g.mustDo("tstart")
	time.Sleep(20 * time.Millisecond)
	g.mustDo("break *site3+3")
	stop, ok := g.waitStopped(10 * time.Second)
	if !ok || !strings.Contains(stop, `reason="breakpoint-hit"`) || !strings.Contains(stop, `addr="0x`) {
		t.Fatalf("no breakpoint hit inside the traced jump: %q", stop)
	}
	g.mustDo("delete")
	// Other threads may have hit the breakpoint too before it went:
	// every stopped thread runs on.
	for range 3 {
		g.do("-exec-continue --all")
		time.Sleep(20 * time.Millisecond)
	}
	status := g.mustDo("tstop") + g.mustDo("tstatus")
	tf := filepath.Join(t.TempDir(), "bp.tf")
	g.mustDo("tsave -r " + tf)
	var stats stressStats
	stats.check(t, 0, tf, droppedHits(status), site3, entry1, leaf)
	if stats.site3Frames == 0 {
		t.Error("no site3 frames")
	}
	threads := g.mustDo("info threads")
	// The main thread too: -exec-continue --all resumed it.
	if n := strings.Count(threads, "(running)"); n != stressThreads+1 {
		t.Errorf("%d threads running at the end, want %d:\n%s", n, stressThreads+1, threads)
	}
	fmt.Fprint(g.stdin, "-gdb-exit\n")
}
