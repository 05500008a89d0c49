package e2e

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gotpstub/frames"
)

// stressThreads is testdata/stress8.c's THREADS.
const stressThreads = 8

// TestFastTraceStressEightThreads is issue 11's stress test: eight
// threads run a hot loop while three fast tracepoints at that loop — a
// site whose jump covers two instructions (site3), a 1-byte push at a
// function entry (entry1) and a lone 1-byte ret (leaf) — are inserted
// (tstart) and removed (tstop) 1,000 times, the program running a few
// milliseconds between. After every cycle the trace, saved by the stub
// (tsave -r), must be consistent: site3's frames (collecting x and the
// thread's step d) show every thread's x going up by exactly d from one
// hit to the next — no hit lost, doubled or given another thread's
// registers — and the three tracepoints' frame counts differ by at most
// one hit per thread (each thread passes the three sites in turn). The
// program checks its own arithmetic after every call and exits with
// status 3 if a patch broke an instruction; it must still be running
// at the end.
func TestFastTraceStressEightThreads(t *testing.T) {
	requireTools(t)
	if isGdbserver(stubPath(t)) {
		t.Skip("gdbserver needs its in-process agent library for ftrace")
	}
	prog := buildProgram(t, "stress8")
	for _, c := range []struct {
		name, shapes string // --ftrace-shapes
		cycles       int
		want         []string // in monitor ftrace's report at the first tstart
	}{
		// The jumps the stub chooses: site3's and entry1's keep the
		// next instructions' bytes, leaf's too.
		{"default", "all", 600, []string{"successor-preserving jump over 3 bytes", "successor-preserving jump over 1 bytes"}},
		// Punned jumps with int3s at the covered heads (site3: over
		// the movq; entry1: over the push's two successors), and leaf
		// (a ret: no such jump fits) a trap tracepoint that the eight
		// threads hit too.
		{"int3 puns", "plain,int3", 400, []string{"punned jump over 6 bytes (2 instructions)", "punned jump over 8 bytes (3 instructions)", "trap (int3) instead of a jump"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cycles := c.cycles
			if testing.Short() {
				cycles /= 10
			}
			stressCycles(t, prog, "--ftrace-shapes="+c.shapes, cycles, c.want)
		})
	}
}

// stressCycles runs TestFastTraceStressEightThreads's cycles with the
// stub flag given; want are texts the first tstart's placement report
// must hold.
func stressCycles(t *testing.T, prog, flag string, cycles int, want []string) {
	g, stub := miSessionAt(t, prog, []string{"--once", "--debug", flag}, "ready")
	site3, entry1, leaf := stressTracepoints(t, g)
	tf := filepath.Join(t.TempDir(), "cycle.tf")
	var stats stressStats
	traps := 0 // fast tracepoints made traps at the first tstart
	for i := range cycles {
		g.mustDo("tstart")
		if i == 0 {
			placed := g.mustDo("monitor ftrace")
			t.Logf("placement:\n%s", strings.TrimSpace(placed))
			for _, w := range want {
				if !strings.Contains(placed, w) {
					t.Fatalf("no %q in the placement:\n%s", w, placed)
				}
			}
			traps = strings.Count(stub.output.String(), "trap instead of a jump")
		}
		if res, _ := g.do("-exec-continue"); !strings.HasPrefix(res, "^running") {
			t.Fatalf("cycle %d: continue: %s", i, res)
		}
		time.Sleep(time.Duration(2+i%5) * time.Millisecond)
		g.mustDo("-exec-interrupt")
		stop, ok := g.waitStopped(10 * time.Second)
		if !ok {
			t.Fatalf("cycle %d: the interrupt was not answered in 10 s; stub:\n%s", i, tail(stub.output.String(), 3000))
		}
		if !strings.Contains(stop, `signal-name="SIGINT"`) {
			t.Fatalf("cycle %d: stopped for another reason (the program's exit status 3 means a broken instruction): %s", i, stop)
		}
		status := g.mustDo("tstop") + g.mustDo("tstatus")
		if strings.Contains(status, "rror") {
			t.Fatalf("cycle %d: %s", i, status)
		}
		if n := strings.Count(stub.output.String(), "trap instead of a jump"); n != traps*(i+1) {
			// Placed again at each tstart, every site must get its jump
			// back: its old jump out of the way, its pad's address free.
			t.Fatalf("cycle %d: %d fallbacks to a trap so far, want %d a tstart:\n%s", i, n, traps, tail(stub.output.String(), 3000))
		}
		g.mustDo("tsave -r " + tf)
		stats.check(t, i, tf, droppedHits(status), site3, entry1, leaf)
	}
	t.Logf("%d cycles: %d frames (%d of site3), %d cycles with hits dropped (not checked), longest run of one thread %d hits",
		cycles, stats.frames, stats.site3Frames, stats.droppedCycles, stats.longest)
	if stats.droppedCycles > cycles/10 {
		t.Errorf("%d of %d cycles dropped hits: too few were checked", stats.droppedCycles, cycles)
	}
	if stats.site3Frames < int64(cycles) {
		t.Errorf("only %d frames at site3 in %d cycles: the threads hardly ran", stats.site3Frames, cycles)
	}
	// The program still runs right: one more run, then it is
	// interrupted alive (a broken instruction would have made it exit).
	g.mustDo("-exec-continue")
	time.Sleep(200 * time.Millisecond)
	g.mustDo("-exec-interrupt")
	if stop, ok := g.waitStopped(10 * time.Second); !ok || !strings.Contains(stop, "SIGINT") {
		t.Fatalf("after the cycles: %q (the program should still run)", stop)
	}
	fmt.Fprint(g.stdin, "-gdb-exit\n")
}

// stressTracepoints sets stress8.c's three fast tracepoints (site3
// collecting x, the step d and rsp, leaf rsp: a thread's rsp is the same
// at both, so each leaf frame tells its thread) and returns their
// numbers.
func stressTracepoints(t *testing.T, g *miGDB) (site3, entry1, leaf int) {
	t.Helper()
	num := func(out string) int {
		m := regexp.MustCompile(`Fast tracepoint (\d+) at`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("not a fast tracepoint: %s", out)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	site3 = num(g.mustDo("ftrace *site3"))
	g.mustDo(fmt.Sprintf(`-break-commands %d "collect $rdi, $rsi, $rsp"`, site3))
	entry1 = num(g.mustDo("ftrace *entry1_site"))
	leaf = num(g.mustDo("ftrace *leaf_site"))
	g.mustDo(fmt.Sprintf(`-break-commands %d "collect $rsp"`, leaf))
	return site3, entry1, leaf
}

// frameRSP is a frame's collected rsp (GDB's amd64 register 7), 0 if it
// has none.
func frameRSP(fr *frames.Frame) uint64 {
	if regs := fr.Registers(); len(regs) >= 64 {
		return binary.LittleEndian.Uint64(regs[56:])
	}
	return 0
}

// turnTaking checks that each thread's site3 and leaf frames alternate
// (a thread passes site3, then leaf, in every iteration): two of either
// in a row is a hit lost or recorded twice. Threads are told apart by
// rsp (site3 frames give each rsp its thread's step d).
func turnTaking(frs []*frames.Frame, site3, leaf int) error {
	thread := map[uint64]uint64{} // rsp -> d
	for _, fr := range frs {
		if regs := fr.Registers(); fr.TPNum == site3 && len(regs) >= 64 {
			thread[frameRSP(fr)] = binary.LittleEndian.Uint64(regs[32:])
		}
	}
	lastTP, lastNum := map[uint64]int{}, map[uint64]int{}
	for _, fr := range frs {
		if fr.TPNum != site3 && fr.TPNum != leaf {
			continue
		}
		rsp := frameRSP(fr)
		if rsp == 0 {
			return fmt.Errorf("frame %d (tracepoint %d) has no rsp", fr.Num, fr.TPNum)
		}
		if prev, ok := lastTP[rsp]; ok && prev == fr.TPNum {
			return fmt.Errorf("thread with rsp %#x (step d = %d): frames %d and %d both of tracepoint %d, none of the other between",
				rsp, thread[rsp], lastNum[rsp], fr.Num, fr.TPNum)
		}
		lastTP[rsp], lastNum[rsp] = fr.TPNum, fr.Num
	}
	return nil
}

// whereIsHit says which site3 frames of thread d hold x (the hit a
// check missed): none (lost), or later ones (out of order, doubled).
func whereIsHit(frs []*frames.Frame, site3 int, d, x uint64) string {
	var at []string
	for _, fr := range frs {
		regs := fr.Registers()
		if fr.TPNum != site3 || len(regs) < 48 {
			continue
		}
		if binary.LittleEndian.Uint64(regs[32:]) == d && binary.LittleEndian.Uint64(regs[40:]) == x {
			at = append(at, strconv.Itoa(fr.Num))
		}
	}
	if len(at) == 0 {
		return fmt.Sprintf("no frame of the cycle's %d has x = %d", len(frs), x)
	}
	return fmt.Sprintf("x = %d is in frame %s of %d", x, strings.Join(at, ", "), len(frs))
}

// stressStats adds up what TestFastTraceStressEightThreads's cycles saw.
type stressStats struct {
	frames, site3Frames int64
	droppedCycles       int
	longest             int // most consecutive site3 hits of one thread in a cycle
}

// check reads cycle i's saved trace tf and checks it (see
// TestFastTraceStressEightThreads); a cycle whose hits were partly
// dropped (dropped > 0) is only counted.
func (s *stressStats) check(t *testing.T, i int, tf string, dropped, site3, entry1, leaf int) {
	t.Helper()
	f, err := os.Open(tf)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	trace, err := frames.ReadTFile(f)
	if err != nil {
		t.Fatalf("cycle %d: reading the saved trace: %v", i, err)
	}
	fail := func(format string, args ...any) {
		t.Helper()
		keepFailedTrace(t, tf, i)
		t.Fatalf(format, args...)
	}
	counts := map[int]int{}
	last := map[uint64]uint64{} // thread's step d -> x at its last hit
	runs := map[uint64]int{}
	for _, fr := range trace.Frames {
		counts[fr.TPNum]++
		if fr.TPNum != site3 {
			continue
		}
		regs := fr.Registers()
		if len(regs) < 64 {
			t.Fatalf("cycle %d: site3 frame %d has %d bytes of registers", i, fr.Num, len(regs))
		}
		d, x := binary.LittleEndian.Uint64(regs[32:]), binary.LittleEndian.Uint64(regs[40:]) // rsi, rdi
		if d < 1 || d > stressThreads || x%d != 0 {
			t.Fatalf("cycle %d: site3 frame %d: d = %d, x = %d: not a thread's registers", i, fr.Num, d, x)
		}
		if prev, ok := last[d]; ok && x != prev+d && dropped == 0 {
			fail("cycle %d: frame %d: thread %d went from x = %d to %d: hits lost or doubled (%s)", i, fr.Num, d, prev, x,
				whereIsHit(trace.Frames, site3, d, prev+d))
		}
		last[d] = x
		runs[d]++
	}
	s.frames += int64(len(trace.Frames))
	s.site3Frames += int64(counts[site3])
	if dropped > 0 {
		s.droppedCycles++
		return
	}
	for _, r := range runs {
		s.longest = max(s.longest, r)
	}
	if err := turnTaking(trace.Frames, site3, leaf); err != nil {
		fail("cycle %d: %v", i, err)
	}
	c := []int{counts[site3], counts[entry1], counts[leaf]}
	if slices.Max(c)-slices.Min(c) > stressThreads {
		fail("cycle %d: frames of site3, entry1 and leaf: %v; each thread passes the three in turn (%s)", i, c,
			framesSpan(trace.Frames, map[int]string{site3: "site3", entry1: "entry1", leaf: "leaf"}, runs))
	}
}

// framesSpan says where each tracepoint's frames lie in a cycle's trace
// (first and last frame numbers) and how many site3 hits each thread
// has: whether hits are missing at the start, the end, or for some
// threads.
func framesSpan(frs []*frames.Frame, names map[int]string, runs map[uint64]int) string {
	first, lastAt := map[int]int{}, map[int]int{}
	for _, fr := range frs {
		if _, ok := first[fr.TPNum]; !ok {
			first[fr.TPNum] = fr.Num
		}
		lastAt[fr.TPNum] = fr.Num
	}
	var parts []string
	for num, name := range names {
		parts = append(parts, fmt.Sprintf("%s frames %d..%d", name, first[num], lastAt[num]))
	}
	slices.Sort(parts)
	return fmt.Sprintf("%s; site3 hits by thread %v", strings.Join(parts, ", "), runs)
}

// keepFailedTrace copies a failed cycle's trace file to
// $GOTPSTUB_FAIL_DIR, when set, for a look afterwards.
func keepFailedTrace(t *testing.T, tf string, cycle int) {
	dir := os.Getenv("GOTPSTUB_FAIL_DIR")
	if dir == "" {
		return
	}
	b, err := os.ReadFile(tf)
	if err == nil {
		to := filepath.Join(dir, fmt.Sprintf("%s-cycle%d.tf", strings.NewReplacer("/", "_", " ", "_", ",", "").Replace(t.Name()), cycle))
		if err = os.WriteFile(to, b, 0o644); err == nil {
			t.Logf("kept the cycle's trace in %s", to)
		}
	}
	if err != nil {
		t.Logf("keeping the failed trace: %v", err)
	}
}

// TestTrapTraceInterruptUnderLoad: eight threads hit a trap tracepoint
// (each hit stops the thread, and every other one while it steps over
// the int3) as fast as they can; gdb's interrupt must still be
// answered. The stub's event loop used to handle the hits one after
// another for ever once the interrupt's stop was queued, and gdb waited
// without end.
func TestTrapTraceInterruptUnderLoad(t *testing.T) {
	requireTools(t)
	prog := buildProgram(t, "stress8")
	g, _ := miSessionAt(t, prog, []string{"--once"}, "ready")
	g.mustDo("trace *leaf_site")
	var worst time.Duration
	for i := range 5 {
		g.mustDo("tstart")
		if res, _ := g.do("-exec-continue"); !strings.HasPrefix(res, "^running") {
			t.Fatalf("run %d: continue: %s", i, res)
		}
		time.Sleep(300 * time.Millisecond)
		asked := time.Now()
		g.mustDo("-exec-interrupt")
		stop, ok := g.waitStopped(30 * time.Second)
		if !ok {
			t.Fatalf("run %d: the interrupt was not answered in 30 s", i)
		}
		worst = max(worst, time.Since(asked))
		if !strings.Contains(stop, `signal-name="SIGINT"`) {
			t.Fatalf("run %d: stopped for another reason: %s", i, stop)
		}
		status := g.mustDo("tstop") + g.mustDo("tstatus")
		if n := framesCollected(t, status); n == 0 {
			t.Fatalf("run %d: no frames: %s", i, status)
		}
	}
	t.Logf("interrupt answered within %v under 8-thread trap tracepoint load", worst)
	fmt.Fprint(g.stdin, "-gdb-exit\n")
}

// TestFastTraceMovesThreadInsideCoveredBytes stops a thread of
// testdata/stress8.c at site3's second instruction (a breakpoint there),
// then places a fast tracepoint at site3 whose jump covers that
// instruction (--ftrace-shapes=plain,int3: a punned jump over both) and
// starts the experiment: tstart must move the stopped thread to the
// instruction's relocated copy in the pad. Left where it was, the thread
// single-stepped by gdb runs the pun's int3 and goes on inside the jump's
// displacement bytes (step+4) instead of past the two instructions
// (step+6). Then every thread runs on, passing the jump.
func TestFastTraceMovesThreadInsideCoveredBytes(t *testing.T) {
	requireTools(t)
	if isGdbserver(stubPath(t)) {
		t.Skip("gdbserver needs its in-process agent library for ftrace")
	}
	prog := buildProgram(t, "stress8")
	stub := startStub(t, []string{"--once", "--debug", "--ftrace-shapes=plain,int3"}, prog)
	out := runGDB(t, gdbSession{program: prog, commands: []string{"target remote " + stub.target() + `
break main
continue
break *site3+3
continue
print/x $pc == (long)&site3+3
delete
ftrace *site3
actions
collect $rdi
end
tstart
stepi
print/x $pc == (long)&site3+6
break leaf
continue
continue
continue
continue
continue
continue
tstop
tstatus
info threads`}})
	mustContain(t, out, "Breakpoint 2, 0x", "$1 = 0x1", "$2 = 0x1")
	mustPlaceJump(t, stub, 3)
	if !strings.Contains(stub.output.String(), "punned jump over 6 bytes (2 instructions)") {
		t.Fatalf("site3 did not get a jump over both instructions:\n%s", stub.output.String())
	}
	if strings.Contains(out, "received signal") || strings.Contains(out, "exited with code") {
		t.Fatalf("the program broke after tstart:\n%s", out)
	}
	if n := len(regexpAll(out, `Breakpoint \d+, 0x[0-9a-f]+ in leaf`)); n != 6 {
		t.Fatalf("want 6 stops at leaf, got %d:\n%s", n, out)
	}
	if framesCollected(t, out) < 1 {
		t.Fatalf("no trace frame:\n%s", out)
	}
}
