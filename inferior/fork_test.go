package inferior

import (
	"os"
	"reflect"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// waitSkippingSIGCHLD waits for the next event, passing SIGCHLD (a child's
// exit) back to the thread that got it as gdb would.
func waitSkippingSIGCHLD(t *testing.T, p *Process) StopEvent {
	t.Helper()
	for {
		ev := wait(t, p)
		if ev.Kind != SignalStop || ev.Signal != int(unix.SIGCHLD) {
			return ev
		}
		if err := p.Resume([]Action{{Tid: ev.Tid, Signal: ev.Signal}, {Tid: -1}}); err != nil {
			t.Fatal(err)
		}
	}
}

// forkStop runs the "fork" or "vfork" scenario with fork events reported
// and a breakpoint on hit, to the fork event.
func forkStop(t *testing.T, mode string) (*Process, StopEvent, uint64) {
	t.Helper()
	p := launch(t, mode)
	runToMain(t, p)
	p.SetReportForks(true, true)
	hit := symbol(t, p, "hit")
	if err := p.InsertBreakpoint(SoftwareBreakpoint, hit, 1); err != nil {
		t.Fatal(err)
	}
	resumeAll(t, p)
	ev := wait(t, p)
	if ev.Kind != SignalStop || ev.Signal != int(unix.SIGTRAP) || ev.ForkChild == 0 || ev.Tid != p.Pid() {
		t.Fatalf("event %+v, want the parent's fork event", ev)
	}
	if ev.VFork != (mode == "vfork") {
		t.Fatalf("event %+v: VFork should be %v", ev, mode == "vfork")
	}
	if got := p.ForkChildren(); !reflect.DeepEqual(got, []int{ev.ForkChild}) {
		t.Fatalf("ForkChildren %v, want [%d]", got, ev.ForkChild)
	}
	if p.Alive(ev.ForkChild) {
		t.Errorf("the held child %d is listed as a thread of the parent", ev.ForkChild)
	}
	return p, ev, hit
}

// TestForkEventHeldChild: a reported fork holds the child stopped, with our
// int3s already out of its memory; its registers are readable; detached, it
// runs without trapping and the parent goes on to its breakpoint.
func TestForkEventHeldChild(t *testing.T) {
	p, ev, hit := forkStop(t, "fork")
	child := ev.ForkChild

	var b [breakpointLen]byte
	if _, err := p.ReadForkChildMemory(child, hit, b[:]); err != nil {
		t.Fatal(err)
	}
	if b == breakpointInsn {
		t.Errorf("the child's memory still holds our int3 at hit")
	}
	raw, err := os.Open("/proc/" + itoa(p.Pid()) + "/mem")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.ReadAt(b[:], int64(hit)); err != nil || b != breakpointInsn {
		t.Errorf("the parent's memory lost its int3 at hit (% x, %v)", b, err)
	}
	raw.Close()

	cr, err := p.ForkChildRegisters(child)
	if err != nil {
		t.Fatal(err)
	}
	pr, err := p.Registers(ev.Tid)
	if err != nil {
		t.Fatal(err)
	}
	if cr.Uint64(regPC) != pr.Uint64(regPC) {
		t.Errorf("child pc %#x, parent pc %#x: both should be after the fork", cr.Uint64(regPC), pr.Uint64(regPC))
	}
	if err := p.DetachForkChild(ev.Tid); err == nil {
		t.Errorf("DetachForkChild of the parent's own thread succeeded")
	}
	if err := p.DetachForkChild(child); err != nil {
		t.Fatal(err)
	}
	if got := p.ForkChildren(); len(got) != 0 {
		t.Errorf("ForkChildren after detach: %v", got)
	}
	resumeAll(t, p)
	ev = waitSkippingSIGCHLD(t, p)
	if ev.Reason != "swbreak" || ev.Tid != p.Pid() {
		t.Fatalf("event %+v, want the parent at hit", ev)
	}
	if r, err := p.Registers(ev.Tid); err != nil || r.Uint64(regArg0) != 2 {
		t.Errorf("hit argument %v (%v), want the parent's 2", r, err)
	}
	resumeAll(t, p)
	if ev := waitSkippingSIGCHLD(t, p); ev.Kind != Exited || ev.ExitCode != 11 {
		t.Errorf("end %+v, want exit 11 (the child exited 3, untrapped)", ev)
	}
}

// TestVForkEvents: vfork is reported with VFork, the detached child runs
// to its _exit, and the parent then reports VForkDone before going on.
func TestVForkEvents(t *testing.T) {
	p, ev, _ := forkStop(t, "vfork")
	if err := p.DetachForkChild(ev.ForkChild); err != nil {
		t.Fatal(err)
	}
	resumeAll(t, p)
	ev = wait(t, p)
	if !ev.VForkDone || ev.Tid != p.Pid() || ev.Signal != int(unix.SIGTRAP) {
		t.Fatalf("event %+v, want the parent's vfork-done", ev)
	}
	resumeAll(t, p)
	ev = waitSkippingSIGCHLD(t, p)
	if ev.Reason != "swbreak" {
		t.Fatalf("event %+v, want the parent at hit", ev)
	}
	resumeAll(t, p)
	if ev := waitSkippingSIGCHLD(t, p); ev.Kind != Exited || ev.ExitCode != 13 {
		t.Errorf("end %+v, want exit 13 (the vfork child exited 4)", ev)
	}
}

// TestFollowForkChild: following the held child detaches the parent (which
// runs to its end on its own) and makes the child the process: its
// breakpoint is hit with the child's argument and its exit is reported.
func TestFollowForkChild(t *testing.T) {
	p, ev, hit := forkStop(t, "fork")
	parent, child := p.Pid(), ev.ForkChild
	if err := p.FollowForkChild(parent); err == nil {
		t.Fatal("FollowForkChild of a pid that is not a held child succeeded")
	}
	if err := p.FollowForkChild(child); err != nil {
		t.Fatal(err)
	}
	if p.Pid() != child || !reflect.DeepEqual(p.Threads(), []int{child}) {
		t.Fatalf("after following: pid %d threads %v, want %d", p.Pid(), p.Threads(), child)
	}
	// The parent is detached with its int3 removed.
	raw, err := os.Open("/proc/" + itoa(parent) + "/mem")
	if err == nil {
		var b [breakpointLen]byte
		if _, err := raw.ReadAt(b[:], int64(hit)); err == nil && b == breakpointInsn {
			t.Errorf("the detached parent still has our int3 at hit")
		}
		raw.Close()
	}
	if err := p.InsertBreakpoint(SoftwareBreakpoint, hit, 1); err != nil {
		t.Fatal(err)
	}
	resumeAll(t, p)
	ev = wait(t, p)
	if ev.Reason != "swbreak" || ev.Tid != child {
		t.Fatalf("event %+v, want the child at hit", ev)
	}
	if r, err := p.Registers(child); err != nil || r.Uint64(regArg0) != 1 {
		t.Errorf("hit argument %v (%v), want the child's 1", r, err)
	}
	resumeAll(t, p)
	if ev := wait(t, p); ev.Kind != Exited || ev.ExitCode != 3 || ev.Tid != child {
		t.Errorf("end %+v, want the child's exit 3", ev)
	}
}

// TestForkNotReportedByDefault: without SetReportForks the child is let go
// at once and no fork event is seen.
func TestForkNotReportedByDefault(t *testing.T) {
	p := launch(t, "vfork")
	runToMain(t, p)
	resumeAll(t, p)
	ev := waitSkippingSIGCHLD(t, p)
	if ev.Kind != Exited || ev.ExitCode != 13 {
		t.Errorf("end %+v, want exit 13 with no fork event", ev)
	}
}

// TestKillWithHeldForkChild: killing the process also kills the held
// child.
func TestKillWithHeldForkChild(t *testing.T) {
	p, ev, _ := forkStop(t, "fork")
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Kill(ev.ForkChild, 0); err == nil {
		// It may linger as a zombie of the killed parent for a moment.
		if st, err := os.ReadFile("/proc/" + itoa(ev.ForkChild) + "/stat"); err == nil && statState(string(st)) != 'Z' {
			t.Errorf("held child %d survives Kill: %s", ev.ForkChild, st)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestSharedMemoryAtForkEvent maps shared memory while the parent is
// stopped at its fork event, inside the fork system call: the syscalls
// injected for it must run after fork returns, and fork must still
// return the child's pid (the program waits for that pid and exits 11
// only if the child's status comes back).
func TestSharedMemoryAtForkEvent(t *testing.T) {
	p, ev, _ := forkStop(t, "fork")
	m, err := p.MapShared(pageSize)
	if err != nil {
		t.Fatalf("MapShared at the fork event: %v", err)
	}
	copy(m.Data, "shared")
	got := make([]byte, 6)
	if _, err := p.ReadMemory(m.Addr, got); err != nil || string(got) != "shared" {
		t.Errorf("the process reads %q (%v) at %#x, want \"shared\"", got, err, m.Addr)
	}
	if err := p.DetachForkChild(ev.ForkChild); err != nil {
		t.Fatal(err)
	}
	resumeAll(t, p)
	if ev := waitSkippingSIGCHLD(t, p); ev.Reason != "swbreak" || ev.Tid != p.Pid() {
		t.Fatalf("event %+v, want the parent at hit", ev)
	}
	resumeAll(t, p)
	if ev := waitSkippingSIGCHLD(t, p); ev.Kind != Exited || ev.ExitCode != 11 {
		t.Errorf("end %+v, want exit 11 (fork returned the child's pid)", ev)
	}
}

// TestForkChildrenListedOnceReported: four threads vfork at once, in
// non-stop mode (glibc's fork would serialise them, and in all-stop mode
// the stop of every thread restarts the other vforks). A held child is listed (ForkChildren, which qfThreadInfo uses)
// only once its fork event has been returned: gdb takes a thread of a
// process it has not heard of for a new inferior
// (gdb.threads/next-fork-other-thread.exp).
func TestForkChildrenListedOnceReported(t *testing.T) {
	p := launchNonStop(t, "forks4")
	p.SetReportForks(true, true)
	resumeAll(t, p)
	reported := map[int]bool{}
	unreportedSeen := 0
	for {
		ev := wait(t, p)
		if ev.Kind == Exited {
			if ev.ExitCode != 15 {
				t.Errorf("exit %d, want 15 (every child exited 5)", ev.ExitCode)
			}
			break
		}
		if ev.Kind == SignalStop && (ev.Signal == int(unix.SIGCHLD) || ev.VForkDone) {
			sig := ev.Signal
			if ev.VForkDone {
				sig = 0
			}
			if err := p.Resume([]Action{{Tid: ev.Tid, Signal: sig}}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if ev.ForkChild == 0 || !ev.VFork {
			t.Fatalf("event %+v, want a vfork event", ev)
		}
		reported[ev.ForkChild] = true
		time.Sleep(20 * time.Millisecond) // the other threads fork meanwhile
		for _, c := range p.ForkChildren() {
			if !reported[c] {
				t.Fatalf("ForkChildren lists %d, whose fork was not reported yet", c)
			}
		}
		var held int
		_ = p.do(func() error { held = len(p.forks); return nil })
		if held > 1 {
			unreportedSeen++
		}
		if err := p.DetachForkChild(ev.ForkChild); err != nil {
			t.Fatal(err)
		}
		if err := p.Resume([]Action{{Tid: ev.Tid}}); err != nil {
			t.Fatal(err)
		}
	}
	if len(reported) != 4 {
		t.Errorf("%d fork events, want 4", len(reported))
	}
	t.Logf("forks held but not yet reported at %d of the 4 fork events", unreportedSeen)
}
