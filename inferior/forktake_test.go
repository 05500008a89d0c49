package inferior

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestTakeForkChild: a held fork (or vfork) child handed over to a Process
// of its own resumes exactly where it forked, with every register as it
// was held, runs (to a breakpoint of its own, then to its exit) while the
// parent stays stopped, and the parent then runs to its own end.
func TestTakeForkChild(t *testing.T) {
	for _, tc := range []struct {
		mode                  string
		childExit, parentExit int
	}{
		{"fork", 3, 11},
		{"vfork", 4, 13},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			p, ev, hit := forkStop(t, tc.mode)
			child := ev.ForkChild
			before, err := p.ForkChildRegisters(child)
			if err != nil {
				t.Fatal(err)
			}
			q, err := p.TakeForkChild(child)
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			if p.IsForkChild(child) || len(p.ForkChildren()) != 0 {
				t.Errorf("the parent still holds %d", child)
			}
			if _, err := p.TakeForkChild(child); err == nil {
				t.Errorf("a second TakeForkChild of %d succeeded", child)
			}
			after, err := q.Registers(child)
			if err != nil {
				t.Fatal(err)
			}
			for num := range before.Layout.Regs {
				if num >= firstFPReg {
					break // the general-purpose registers, flags and segments
				}
				if b, a := before.Uint64(num), after.Uint64(num); b != a {
					t.Errorf("register %s: %#x held, %#x handed over", before.Layout.Regs[num].Name, b, a)
				}
			}
			if tc.mode == "fork" {
				// The child's memory is its own: a breakpoint there is
				// not the parent's.
				if err := q.InsertBreakpoint(SoftwareBreakpoint, hit, 1); err != nil {
					t.Fatal(err)
				}
				resumeAll(t, q)
				ev := wait(t, q)
				if ev.Reason != "swbreak" || ev.Tid != child {
					t.Fatalf("child event %+v, want its breakpoint at hit", ev)
				}
				if r, err := q.Registers(child); err != nil || r.Uint64(regArg0) != 1 {
					t.Errorf("child's hit argument %v (%v), want 1", r, err)
				}
			}
			resumeAll(t, q)
			if ev := wait(t, q); ev.Kind != Exited || ev.ExitCode != tc.childExit || ev.Tid != child {
				t.Fatalf("child end %+v, want exit %d", ev, tc.childExit)
			}
			resumeAll(t, p)
			ev = waitSkippingSIGCHLD(t, p)
			if ev.VForkDone {
				resumeAll(t, p)
				ev = waitSkippingSIGCHLD(t, p)
			}
			if ev.Reason != "swbreak" || ev.Tid != p.Pid() {
				t.Fatalf("parent event %+v, want its breakpoint at hit", ev)
			}
			resumeAll(t, p)
			if ev := waitSkippingSIGCHLD(t, p); ev.Kind != Exited || ev.ExitCode != tc.parentExit {
				t.Errorf("parent end %+v, want exit %d (its child's status seen)", ev, tc.parentExit)
			}
		})
	}
}

// TestTakeForkChildKeepsSignals: a signal sent to a fork child while it
// is between tracers (SIGUSR1, whose default action would kill it) waits
// blocked, and is reported by the new Process once the child runs again.
func TestTakeForkChildKeepsSignals(t *testing.T) {
	p, ev, _ := forkStop(t, "fork")
	child := ev.ForkChild
	handOverHook = func(pid int) {
		_ = unix.Kill(pid, unix.SIGUSR1)
		time.Sleep(20 * time.Millisecond) // time to die, if it could
	}
	defer func() { handOverHook = nil }()
	q, err := p.TakeForkChild(child)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	resumeAll(t, q)
	ev = wait(t, q)
	if ev.Kind != SignalStop || ev.Signal != int(unix.SIGUSR1) || ev.Tid != child {
		t.Fatalf("child event %+v, want its SIGUSR1", ev)
	}
	resumeAll(t, q) // the signal is not passed on
	if ev := wait(t, q); ev.Kind != Exited || ev.ExitCode != 3 {
		t.Fatalf("child end %+v, want exit 3", ev)
	}
}
