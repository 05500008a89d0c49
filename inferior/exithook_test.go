package inferior

import (
	"encoding/binary"
	"os/exec"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// exitRecorder is an exit hook that reads a global of the program at each
// thread's exit.
type exitRecorder struct {
	addr uint64 // the global to read, 0 for none
	size int    // its size in bytes (4 or 8)

	mu      sync.Mutex
	tids    []int
	values  []uint64
	readErr []error
	pcs     []uint64
}

func (r *exitRecorder) hook(s *Stopped) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tids = append(r.tids, s.Tid())
	r.pcs = append(r.pcs, s.PC())
	if r.addr == 0 {
		return
	}
	buf := make([]byte, 8)
	_, err := s.ReadMemory(r.addr, buf[:r.size])
	r.readErr = append(r.readErr, err)
	r.values = append(r.values, binary.LittleEndian.Uint64(buf))
}

func (r *exitRecorder) calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.tids)
}

// exitEventStopsForTest returns how many PTRACE_EVENT_EXIT stops the
// process saw.
func (p *Process) exitEventStopsForTest(t *testing.T) int {
	t.Helper()
	var n int
	if err := p.do(func() error { n = p.exitEventStops; return nil }); err != nil {
		t.Fatalf("reading the exit event count: %v", err)
	}
	return n
}

// counterSentinel is stored into the program's counter by tests whose
// hook must see the program's memory: the program only increments it.
const counterSentinel = 1_000_000

// storeCounterSentinel writes counterSentinel into the counter at addr.
func storeCounterSentinel(t *testing.T, p *Process, addr uint64) {
	t.Helper()
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], counterSentinel)
	if err := p.WriteMemory(addr, b[:]); err != nil {
		t.Fatalf("writing the counter: %v", err)
	}
}

// runToExit resumes the process until it exits, passing signals on.
func runToExit(t *testing.T, p *Process) StopEvent {
	t.Helper()
	for i := 0; i < 100; i++ {
		resumeAll(t, p)
		ev := wait(t, p)
		if ev.Kind == Exited || ev.Kind == Killed {
			return ev
		}
		if ev.Kind == SignalStop && ev.Signal != int(unix.SIGTRAP) {
			if err := p.Resume([]Action{{Tid: ev.Tid, Signal: ev.Signal}, {Tid: -1}}); err != nil {
				t.Fatal(err)
			}
			if ev = wait(t, p); ev.Kind == Exited || ev.Kind == Killed {
				return ev
			}
		}
	}
	t.Fatal("the program did not exit")
	return StopEvent{}
}

// TestExitHookReadsFinalValue: the hook sees the value a program wrote
// into a global just before exiting; with the hook cleared again, or never
// set, no thread stops at PTRACE_EVENT_EXIT.
func TestExitHookReadsFinalValue(t *testing.T) {
	tests := []struct {
		mode     string
		global   string
		size     int
		setHook  bool
		clearIt  bool
		code     int
		want     uint64
		wantHook bool
	}{
		{mode: "watch", global: "watched", size: 8, setHook: true, code: 0x34, want: 0x1234, wantHook: true},
		{mode: "bp", global: "counter", size: 4, setHook: true, code: 6, want: 6, wantHook: true},
		// The forked child inherits PTRACE_O_TRACEEXIT but is detached
		// before it exits: only the parent's exit runs the hook.
		{mode: "fork", global: "counter", size: 4, setHook: true, code: 11, want: 2, wantHook: true},
		{mode: "watch", global: "watched", size: 8, setHook: true, clearIt: true, code: 0x34},
		{mode: "bp", global: "counter", size: 4, code: 6},
	}
	for _, tt := range tests {
		name := tt.mode
		switch {
		case tt.clearIt:
			name += "/cleared"
		case !tt.setHook:
			name += "/nohook"
		}
		t.Run(name, func(t *testing.T) {
			p := launch(t, tt.mode)
			runToMain(t, p)
			rec := &exitRecorder{addr: symbol(t, p, tt.global), size: tt.size}
			// The value before the program writes it: the hook must see
			// the final one, not this.
			var before [8]byte
			if _, err := p.ReadMemory(rec.addr, before[:tt.size]); err != nil {
				t.Fatal(err)
			}
			if got := binary.LittleEndian.Uint64(before[:]); got == tt.want && tt.wantHook {
				t.Fatalf("%s is already %#x at main", tt.global, got)
			}
			if tt.setHook {
				p.SetExitHook(rec.hook)
			}
			if tt.clearIt {
				p.SetExitHook(nil)
			}
			ev := runToExit(t, p)
			if ev.Kind != Exited || ev.ExitCode != tt.code {
				t.Errorf("end %+v, want exit code %d", ev, tt.code)
			}
			stops := p.exitEventStopsForTest(t)
			if !tt.wantHook {
				if rec.calls() != 0 || stops != 0 {
					t.Errorf("without a hook: %d hook calls, %d exit event stops, want none", rec.calls(), stops)
				}
				return
			}
			if rec.calls() != 1 || stops != 1 {
				t.Fatalf("%d hook calls, %d exit event stops, want 1 (single-threaded)", rec.calls(), stops)
			}
			if rec.tids[0] != p.Pid() {
				t.Errorf("hook ran for thread %d, want %d", rec.tids[0], p.Pid())
			}
			if rec.readErr[0] != nil {
				t.Fatalf("reading %s at exit: %v", tt.global, rec.readErr[0])
			}
			if rec.values[0] != tt.want {
				t.Errorf("%s at exit %#x, want %#x", tt.global, rec.values[0], tt.want)
			}
			if rec.pcs[0] == 0 {
				t.Error("the hook's Stopped has no pc")
			}
		})
	}
}

// TestExitHookThreadExit: a non-leader thread calls exit() while two
// others spin; every thread was created after the hook was set (they
// inherit PTRACE_O_TRACEEXIT), and the exiting thread's hook sees the
// value it stored.
func TestExitHookThreadExit(t *testing.T) {
	p := launch(t, "threadexit")
	runToMain(t, p)
	rec := &exitRecorder{addr: symbol(t, p, "counter"), size: 4}
	p.SetExitHook(rec.hook)
	ev := runToExit(t, p)
	if ev.Kind != Exited || ev.ExitCode != 13 {
		t.Fatalf("end %+v, want exit code 13", ev)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	t.Logf("hook calls for threads %v (leader %d), values %v", rec.tids, p.Pid(), rec.values)
	if len(rec.tids) == 0 {
		t.Fatal("the hook never ran")
	}
	sawExiter := false
	for i, tid := range rec.tids {
		if rec.readErr[i] != nil {
			t.Errorf("thread %d: reading counter at exit: %v", tid, rec.readErr[i])
			continue
		}
		if tid != p.Pid() && rec.values[i] == 77 {
			sawExiter = true
		}
	}
	if !sawExiter {
		t.Errorf("no hook call from a non-leader thread saw counter 77: threads %v values %v", rec.tids, rec.values)
	}
}

// TestExitHookKill: Kill never hangs with the hook set, whether the
// process runs or is stopped.
func TestExitHookKill(t *testing.T) {
	for _, running := range []bool{true, false} {
		name := "stopped"
		if running {
			name = "running"
		}
		t.Run(name, func(t *testing.T) {
			p := launch(t, "sleep")
			runToMain(t, p)
			rec := &exitRecorder{}
			p.SetExitHook(rec.hook)
			// Let the second thread start, and stop again.
			resumeAll(t, p)
			time.Sleep(20 * time.Millisecond)
			p.Interrupt()
			if ev := wait(t, p); ev.Kind != SignalStop {
				t.Fatalf("interrupt: %+v", ev)
			}
			if n := len(p.Threads()); n != 2 {
				t.Fatalf("%d threads, want 2", n)
			}
			done := make(chan StopEvent, 1)
			if running {
				resumeAll(t, p)
				go func() {
					ev, _ := p.Wait()
					done <- ev
				}()
				time.Sleep(10 * time.Millisecond)
			}
			killed := make(chan error, 1)
			go func() { killed <- p.Kill() }()
			select {
			case err := <-killed:
				if err != nil {
					t.Fatalf("Kill: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Kill hung with an exit hook set")
			}
			if running {
				select {
				case ev := <-done:
					if ev.Kind != Killed {
						t.Errorf("Wait after Kill: %+v", ev)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("Wait did not return after Kill")
				}
			}
			if _, err := p.ReadMemory(0x1000, make([]byte, 4)); err == nil {
				t.Error("ReadMemory after Kill succeeded")
			}
			t.Logf("%d hook calls during Kill", rec.calls())
		})
	}
}

// TestExitHookExec: exec (from the leader or from another thread) works
// with the hook set, and the hook still runs at the new image's exit.
func TestExitHookExec(t *testing.T) {
	for _, mode := range []string{"exec", "threadexec"} {
		t.Run(mode, func(t *testing.T) {
			p := launch(t, mode)
			runToMain(t, p)
			rec := &exitRecorder{}
			p.SetExitHook(rec.hook)
			resumeAll(t, p)
			ev := wait(t, p)
			if !ev.Exec || ev.Tid != p.Pid() {
				t.Fatalf("event %+v, want an exec stop of %d", ev, p.Pid())
			}
			if tids := p.Threads(); len(tids) != 1 || tids[0] != p.Pid() {
				t.Errorf("threads after exec %v", tids)
			}
			atExec := rec.calls()
			resumeAll(t, p)
			if ev := wait(t, p); ev.Kind != Exited || ev.ExitCode != 42 {
				t.Fatalf("end %+v", ev)
			}
			if got := rec.calls() - atExec; got != 1 {
				t.Errorf("%d hook calls at the new image's exit, want 1", got)
			}
			rec.mu.Lock()
			if last := rec.tids[len(rec.tids)-1]; last != p.Pid() {
				t.Errorf("last hook call for thread %d, want %d", last, p.Pid())
			}
			rec.mu.Unlock()
		})
	}
}

// TestExitHookStepOverExitGroup: the thread being stepped over a
// breakpoint on exit_group (the leader with another thread alive, or a
// non-leader) stops at PTRACE_EVENT_EXIT instead of completing the step;
// the hook runs for it and the exit is reported.
func TestExitHookStepOverExitGroup(t *testing.T) {
	tests := []struct {
		mode   string
		leader bool // the leader calls exit_group
		code   int
	}{
		{mode: "exitgroup", leader: true, code: 5},
		{mode: "threadexitgroup", leader: false, code: 6},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			p := launch(t, tt.mode)
			runToMain(t, p)
			rec := &exitRecorder{}
			p.SetExitHook(rec.hook)
			sc := symbol(t, p, "exit_syscall")
			if err := p.InsertBreakpoint(SoftwareBreakpoint, sc, 1); err != nil {
				t.Fatal(err)
			}
			resumeAll(t, p)
			ev := wait(t, p)
			if ev.Reason != "swbreak" || (ev.Tid == p.Pid()) != tt.leader {
				t.Fatalf("event %+v (leader %d)", ev, p.Pid())
			}
			stepper := ev.Tid
			if n := len(p.Threads()); n != 2 {
				t.Fatalf("%d threads, want 2", n)
			}
			done := make(chan error, 1)
			go func() { done <- p.Resume([]Action{{Tid: -1}}) }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Resume hung stepping over exit_group")
			}
			if ev := wait(t, p); ev.Kind != Exited || ev.ExitCode != tt.code {
				t.Errorf("end %+v, want exit %d", ev, tt.code)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			sawStepper := false
			for _, tid := range rec.tids {
				sawStepper = sawStepper || tid == stepper
			}
			if !sawStepper {
				t.Errorf("hook calls for %v, want one for thread %d (it called exit_group)", rec.tids, stepper)
			}
		})
	}
}

// TestExitHookDetach: detaching with the hook set leaves the process
// running normally (it exits on its own, untraced).
func TestExitHookDetach(t *testing.T) {
	p := launch(t, "sleep")
	runToMain(t, p)
	rec := &exitRecorder{}
	p.SetExitHook(rec.hook)
	resumeAll(t, p)
	time.Sleep(20 * time.Millisecond)
	p.Interrupt()
	if ev := wait(t, p); ev.Kind != SignalStop {
		t.Fatalf("interrupt: %+v", ev)
	}
	pid := p.Pid()
	if err := p.Detach(); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	// Detached, the program runs; kill it and make sure it goes away
	// without stopping at an exit event nobody would answer.
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if st := threadState(pid, pid); st == 'Z' || st == 'X' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("detached process %d state %c after SIGKILL", pid, threadState(pid, pid))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if rec.calls() != 0 {
		t.Errorf("%d hook calls after Detach, want 0", rec.calls())
	}
}

// TestExitHookThreadsWithBreakpoints: worker threads exit while others
// keep hitting a breakpoint, so exit events turn up while every thread is
// being stopped; every thread's exit runs the hook, no hit is lost.
func TestExitHookThreadsWithBreakpoints(t *testing.T) {
	p := launch(t, "threads")
	runToMain(t, p)
	rec := &exitRecorder{}
	p.SetExitHook(rec.hook)
	hit := symbol(t, p, "hit")
	if err := p.InsertBreakpoint(SoftwareBreakpoint, hit, 1); err != nil {
		t.Fatal(err)
	}
	hits := 0
	for {
		resumeAll(t, p)
		ev := wait(t, p)
		if ev.Kind == Exited {
			if ev.ExitCode != 50 {
				t.Errorf("exit code %d, want 50", ev.ExitCode)
			}
			break
		}
		if ev.Kind != SignalStop || ev.Reason != "swbreak" {
			t.Fatalf("event %+v", ev)
		}
		hits++
	}
	if hits != 20 {
		t.Errorf("%d breakpoint hits, want 20", hits)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	seen := map[int]bool{}
	for _, tid := range rec.tids {
		if seen[tid] {
			t.Errorf("hook ran twice for thread %d", tid)
		}
		seen[tid] = true
	}
	// Four workers and the leader.
	if len(seen) != 5 || !seen[p.Pid()] {
		t.Errorf("hook ran for threads %v, want the leader %d and 4 workers", rec.tids, p.Pid())
	}
}

// TestExitHookClose: Close of a running launched program with the hook
// set kills it without hanging.
func TestExitHookClose(t *testing.T) {
	p := launch(t, "threadexit")
	runToMain(t, p)
	rec := &exitRecorder{}
	p.SetExitHook(rec.hook)
	if err := p.Resume([]Action{{Tid: -1}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	pid := p.Pid()
	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hung with an exit hook set")
	}
	if st := threadState(pid, pid); st != 'X' && st != 'Z' {
		t.Errorf("process %d in state %c after Close", pid, st)
	}
}

// TestExitHookAttachedFatalSignal: in an attached process, a fatal signal
// (SIGTERM passed on by the debugger) takes the process down through the
// hook, which still sees the program's memory; the end is reported as
// before.
func TestExitHookAttachedFatalSignal(t *testing.T) {
	prog := testProgram(t)
	cmd := exec.Command(prog, "sleep")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(5 * time.Second)
	for {
		if tids, _ := taskTids(cmd.Process.Pid); len(tids) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the program did not start its thread")
		}
		time.Sleep(5 * time.Millisecond)
	}
	p, err := Attach(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	rec := &exitRecorder{addr: symbol(t, p, "counter"), size: 4}
	storeCounterSentinel(t, p, rec.addr)
	p.SetExitHook(rec.hook)
	if err := unix.Kill(cmd.Process.Pid, unix.SIGTERM); err != nil {
		t.Fatal(err)
	}
	resumeAll(t, p)
	ev := wait(t, p)
	if ev.Kind != SignalStop || ev.Signal != int(unix.SIGTERM) {
		t.Fatalf("event %+v, want the SIGTERM stop", ev)
	}
	if err := p.Resume([]Action{{Tid: ev.Tid, Signal: ev.Signal}, {Tid: -1}}); err != nil {
		t.Fatal(err)
	}
	if ev := wait(t, p); ev.Kind != Killed || ev.Signal != int(unix.SIGTERM) {
		t.Errorf("end %+v, want killed by SIGTERM", ev)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.tids) == 0 {
		t.Fatal("the hook never ran")
	}
	for i, tid := range rec.tids {
		if rec.readErr[i] != nil || rec.values[i] < counterSentinel {
			t.Errorf("thread %d: counter at exit %d (%v), want at least %d", tid, rec.values[i], rec.readErr[i], counterSentinel)
		}
	}
}

// TestExitHookSetWhileRunning: set while the threads run, the option
// reaches them at their next resumption; their exits then run the hook.
func TestExitHookSetWhileRunning(t *testing.T) {
	p := launch(t, "sleep")
	runToMain(t, p)
	resumeAll(t, p)
	deadline := time.Now().Add(5 * time.Second)
	for len(p.Threads()) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the program did not start its thread")
		}
		time.Sleep(2 * time.Millisecond)
	}
	rec := &exitRecorder{addr: symbol(t, p, "counter"), size: 4}
	p.SetExitHook(rec.hook) // no Wait pending: served while running
	p.Interrupt()
	if ev := wait(t, p); ev.Kind != SignalStop || ev.Signal != int(unix.SIGINT) {
		t.Fatalf("interrupt: %+v", ev)
	}
	storeCounterSentinel(t, p, rec.addr)
	if err := unix.Kill(p.Pid(), unix.SIGTERM); err != nil {
		t.Fatal(err)
	}
	ev := runToExit(t, p)
	if ev.Kind != Killed || ev.Signal != int(unix.SIGTERM) {
		t.Errorf("end %+v, want killed by SIGTERM", ev)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	// The thread that takes the fatal signal stops at its exit; the
	// other one, killed by the kernel, may or may not.
	if len(rec.tids) == 0 {
		t.Fatal("the hook never ran: the deferred option was not set")
	}
	for i, tid := range rec.tids {
		if rec.readErr[i] != nil || rec.values[i] < counterSentinel {
			t.Errorf("thread %d: counter at exit %d (%v), want at least %d", tid, rec.values[i], rec.readErr[i], counterSentinel)
		}
	}
}

// TestExitHookWithInternalTraps: threads hit an internal trap 400 times
// while others exit; whether the trap hook emulates the instruction or
// leaves it to be stepped in place (stopping every thread), no hit is
// lost and each thread's exit runs the exit hook once, the last seeing
// the final count.
func TestExitHookWithInternalTraps(t *testing.T) {
	for _, emulate := range []bool{true, false} {
		name := "in-place"
		if emulate {
			name = "emulated"
		}
		t.Run(name, func(t *testing.T) {
			p := launch(t, "tp")
			runToMain(t, p)
			site := symbol(t, p, "tp_nop")
			rec := &exitRecorder{addr: symbol(t, p, "counter"), size: 4}
			p.SetExitHook(rec.hook)
			hits := 0
			p.SetTrapHook(func(s *Stopped) TrapAction {
				hits++
				if emulate {
					r, err := s.Registers()
					if err == nil {
						_ = r.SetUint64(regPC, site+uint64(len(nopInsn)))
						_ = s.SetRegisters(r)
					}
				}
				return TrapResume
			})
			if err := p.InsertInternalTrap(site); err != nil {
				t.Fatal(err)
			}
			resumeAll(t, p)
			if ev := wait(t, p); ev.Kind != Exited || ev.ExitCode != 400&0xff {
				t.Fatalf("end %+v", ev)
			}
			if hits != 400 {
				t.Errorf("%d trap hits, want 400", hits)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			seen := map[int]bool{}
			for _, tid := range rec.tids {
				if seen[tid] {
					t.Errorf("exit hook ran twice for thread %d", tid)
				}
				seen[tid] = true
			}
			if len(seen) != 5 {
				t.Errorf("exit hook ran for threads %v, want 5", rec.tids)
			}
			if n := len(rec.values); n == 0 || rec.values[n-1] != 400 || rec.tids[n-1] != p.Pid() {
				t.Errorf("last exit hook call: threads %v values %v, want the leader %d seeing 400", rec.tids, rec.values, p.Pid())
			}
		})
	}
}
