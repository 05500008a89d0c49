package e2e

import (
	"fmt"
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
// mode: testdata/stress8.c's eight threads never stop (gdb keeps only
// the main thread stopped) while its three fast tracepoints — a jump
// over two instructions, a 1-byte push at an entry, a lone ret — are
// inserted (tstart) and removed (tstop) again and again. Every cycle's
// saved trace must be consistent, as in TestFastTraceStressEightThreads;
// the program checks its own arithmetic and must still run at the end,
// its eight threads running all along. The stub logs how long each
// packet paused the threads (--timing); the longest pause is reported.
func TestNonStopTraceWhileRunning(t *testing.T) {
	requireTools(t)
	if isGdbserver(stubPath(t)) {
		t.Skip("gdbserver needs its in-process agent library for ftrace")
	}
	prog := buildProgram(t, "stress8")
	g, stub := nonStopSessionAt(t, prog, []string{"--once", "--timing"}, "ready")
	site3, entry1, leaf := stressTracepoints(t, g)
	cycles := 200
	if testing.Short() {
		cycles = 20
	}
	tf := filepath.Join(t.TempDir(), "cycle.tf")
	var stats stressStats
	for i := range cycles {
		g.mustDo("tstart")
		time.Sleep(time.Duration(2+i%5) * time.Millisecond)
		status := g.mustDo("tstop") + g.mustDo("tstatus")
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
	if n := strings.Count(threads, "(running)"); n != stressThreads {
		t.Errorf("%d threads running at the end, want %d:\n%s", n, stressThreads, threads)
	}
	// Every thread stops when asked, alive: a broken instruction would
	// have made the program exit with status 3.
	g.mustDo("-exec-interrupt --all")
	for range stressThreads {
		if stop, ok := g.waitStopped(10 * time.Second); !ok || !strings.Contains(stop, `signal-name="0"`) {
			t.Fatalf("interrupting every thread: %q", stop)
		}
	}
	pauses := regexp.MustCompile(`threads paused (\d+) µs for (QTSt\w+)`).FindAllStringSubmatch(stub.output.String(), -1)
	byKind := map[string][]int{}
	for _, m := range pauses {
		us, _ := strconv.Atoi(m[1])
		byKind[m[2]] = append(byKind[m[2]], us)
	}
	if len(pauses) != 2*cycles {
		t.Errorf("%d pauses logged for %d cycles of tstart and tstop", len(pauses), cycles)
	}
	var summary []string
	for kind, us := range byKind {
		slices.Sort(us)
		summary = append(summary, fmt.Sprintf("%s median %d µs, longest %d µs", kind, us[len(us)/2], us[len(us)-1]))
	}
	slices.Sort(summary)
	t.Logf("%d cycles with 8 threads running: %d frames (%d of site3), %d cycles with hits dropped; threads paused: %s",
		cycles, stats.frames, stats.site3Frames, stats.droppedCycles, strings.Join(summary, "; "))
	fmt.Fprint(g.stdin, "-gdb-exit\n")
}
