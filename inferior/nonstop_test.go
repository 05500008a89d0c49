package inferior

import (
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// launchNonStop starts the test program in mode, runs it to main and
// switches to non-stop mode.
func launchNonStop(t *testing.T, mode string) *Process {
	t.Helper()
	p := launch(t, mode)
	runToMain(t, p)
	if err := p.SetNonStop(true); err != nil {
		t.Fatal(err)
	}
	return p
}

// counterMoves reports whether the program's counter variable (at addr)
// changes within 30 ms.
func counterMoves(t *testing.T, p *Process, addr uint64) bool {
	t.Helper()
	read := func() uint32 {
		var b [4]byte
		if _, err := p.ReadMemory(addr, b[:]); err != nil {
			t.Fatal(err)
		}
		return binary.LittleEndian.Uint32(b[:])
	}
	before := read()
	time.Sleep(30 * time.Millisecond)
	return read() != before
}

// TestNonStopBarrier: four threads meet at a spin barrier before each
// call of hit; each hit is reported alone and only its thread is resumed.
// The program completes (every round needs every thread) with all 200
// hits reported, once each thread's step over the breakpoint let the
// others run on.
func TestNonStopBarrier(t *testing.T) {
	p := launchNonStop(t, "barrier")
	hit := symbol(t, p, "hit")
	if err := p.InsertBreakpoint(SoftwareBreakpoint, hit, 1); err != nil {
		t.Fatal(err)
	}
	resumeAll(t, p)
	hits := map[int]int{}
	for {
		ev := wait(t, p)
		if ev.Kind == Exited {
			if ev.ExitCode != 200 {
				t.Errorf("exit code %d, want 200", ev.ExitCode)
			}
			break
		}
		if ev.Kind != SignalStop || ev.Reason != "swbreak" {
			t.Fatalf("event %+v", ev)
		}
		if got := pc(t, p, ev.Tid); got != hit {
			t.Fatalf("thread %d reported at %#x, want %#x", ev.Tid, got, hit)
		}
		if p.ResumedThreads()[ev.Tid] {
			t.Fatalf("thread %d still counts as running after its stop", ev.Tid)
		}
		hits[ev.Tid]++
		if err := p.Resume([]Action{{Tid: ev.Tid}}); err != nil {
			t.Fatal(err)
		}
	}
	total := 0
	for _, n := range hits {
		total += n
	}
	if total != 200 || len(hits) != 4 {
		t.Errorf("hits %v, want 50 from each of 4 threads", hits)
	}
}

// TestNonStopStopRequest: a Stop action stops every running thread, each
// reported once with signal 0; nothing runs afterwards until resumed.
func TestNonStopStopRequest(t *testing.T) {
	p := launchNonStop(t, "sleep")
	counter := symbol(t, p, "counter")
	resumeAll(t, p)
	time.Sleep(50 * time.Millisecond)
	if err := p.Resume([]Action{{Tid: -1, Stop: true}}); err != nil {
		t.Fatal(err)
	}
	stopped := map[int]int{}
	for {
		ev := wait(t, p)
		if ev.Kind == NoResumed {
			break
		}
		if ev.Kind != SignalStop || ev.Signal != 0 {
			t.Fatalf("event %+v, want a stop with signal 0", ev)
		}
		stopped[ev.Tid]++
	}
	if len(stopped) != 2 || stopped[p.Pid()] != 1 {
		t.Fatalf("stops %v, want one for each of the 2 threads", stopped)
	}
	if counterMoves(t, p, counter) {
		t.Fatal("the counter moved with every thread stopped")
	}
	if !p.HasStoppedThread() {
		t.Error("HasStoppedThread false with every thread stopped")
	}
	resumeAll(t, p)
	if !counterMoves(t, p, counter) {
		t.Fatal("the counter is stuck after resuming")
	}
	if p.HasStoppedThread() {
		t.Error("HasStoppedThread true with every thread running")
	}
}

// TestNonStopPause: Pause stops the threads gdb has running and release
// lets exactly those go; the thread gdb stopped stays stopped.
func TestNonStopPause(t *testing.T) {
	p := launchNonStop(t, "sleep")
	counter := symbol(t, p, "counter")
	resumeAll(t, p)
	time.Sleep(20 * time.Millisecond)
	sleeper := 0
	for _, tid := range p.Threads() {
		if tid != p.Pid() {
			sleeper = tid
		}
	}
	if err := p.Resume([]Action{{Tid: sleeper, Stop: true}}); err != nil {
		t.Fatal(err)
	}
	if ev := wait(t, p); ev.Tid != sleeper || ev.Signal != 0 {
		t.Fatalf("event %+v, want thread %d stopped with signal 0", ev, sleeper)
	}
	release := p.Pause()
	if st := threadState(p.Pid(), p.Pid()); st != 't' {
		t.Errorf("main thread state %q while paused, want t", st)
	}
	if counterMoves(t, p, counter) {
		t.Error("the counter moved while paused")
	}
	if d := release(); d <= 0 {
		t.Errorf("pause took %v", d)
	}
	if !counterMoves(t, p, counter) {
		t.Error("the counter is stuck after the pause")
	}
	running := p.ResumedThreads()
	if !running[p.Pid()] || running[sleeper] {
		t.Errorf("running threads %v, want the main thread only", running)
	}
	if st := threadState(p.Pid(), sleeper); st != 't' {
		t.Errorf("stopped thread's state %q after the pause, want t", st)
	}
}

// TestNonStopTrapFairness: five threads spin through an internal trap
// in non-stop mode (prog.c's livepatch: nop5site in a loop), every hit
// handled by the hook and the thread resumed at once, so that each is
// back at the trap within microseconds. Every thread must get its turn:
// collected one at a time, the first threads wait4 finds, round and
// round, kept the last one stopped for up to 150 ms (drainAll).
func TestNonStopTrapFairness(t *testing.T) {
	p := launchNonStop(t, "livepatch")
	site := symbol(t, p, "nop5_at")
	var mu sync.Mutex
	hits := map[int]int{}
	p.SetTrapHook(func(s *Stopped) TrapAction {
		r, err := s.Registers()
		if err != nil {
			return TrapReport
		}
		_ = r.SetUint64(regPC, site+nop5Len) // the nop, emulated
		if s.SetRegisters(r) != nil {
			return TrapReport
		}
		mu.Lock()
		hits[s.Tid()]++
		mu.Unlock()
		return TrapResume
	})
	if err := p.InsertInternalTrap(site); err != nil {
		t.Fatal(err)
	}
	resumeAll(t, p)
	time.Sleep(300 * time.Millisecond)
	if err := p.Resume([]Action{{Tid: -1, Stop: true}}); err != nil {
		t.Fatal(err)
	}
	for ev := wait(t, p); ev.Kind != NoResumed; ev = wait(t, p) {
		if ev.Kind != SignalStop || ev.Signal != 0 {
			t.Fatalf("event %+v, want a stop with signal 0", ev)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	fewest, most := -1, 0
	for _, n := range hits {
		most = max(most, n)
		if fewest < 0 || n < fewest {
			fewest = n
		}
	}
	// Served in turn, each thread gets about a fifth of the hits.
	if len(hits) != 5 || fewest*8 < most {
		t.Errorf("hits per thread %v: want 5 threads, the fewest at least an eighth of the most", hits)
	}
}

// TestNonStopTracerRealtime: the ptrace thread is real-time in non-stop
// mode (tracerRealtime) and back in the normal class in all-stop mode.
func TestNonStopTracerRealtime(t *testing.T) {
	p := launchNonStop(t, "sleep")
	policy := func() uint32 {
		a, err := unix.SchedGetAttr(p.tracerTid, 0)
		if err != nil {
			t.Fatal(err)
		}
		return a.Policy
	}
	if got := policy(); got != unix.SCHED_FIFO {
		t.Skipf("ptrace thread's policy %d in non-stop mode: no real-time class here (not root?)", got)
	}
	if err := p.SetNonStop(false); err != nil {
		t.Fatal(err)
	}
	if got := policy(); got != unix.SCHED_NORMAL {
		t.Errorf("ptrace thread's policy %d in all-stop mode, want SCHED_NORMAL", got)
	}
}
