package inferior

import (
	"bytes"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSettleStepsKeepsTheStop: after gdb-style single-steps, SettleSteps
// ends the kernel's step state without moving the thread: its registers
// and the step's siginfo are what they were, it is still stopped, and the
// SIGSTOP the settling used is never reported (the program runs to its
// normal end). Whether the state is gone shows only when a tracer dies
// (e2e TestProgramOutlivesKilledStub/stopped).
func TestSettleStepsKeepsTheStop(t *testing.T) {
	p := launch(t, "threads")
	runToMain(t, p)
	tid := p.Pid()
	for i := 0; i < 3; i++ {
		if err := p.Resume([]Action{{Tid: tid, Step: true}}); err != nil {
			t.Fatal(err)
		}
		if ev := wait(t, p); ev.Tid != tid || ev.Signal != int(unix.SIGTRAP) || ev.Reason != "" {
			t.Fatalf("step %d: %+v", i, ev)
		}
		if !p.stepsArmed.Load() {
			t.Fatalf("step %d: no step is recorded as armed", i)
		}
		before, err := p.Registers(tid)
		if err != nil {
			t.Fatal(err)
		}
		siBefore, err := p.Siginfo(tid)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.SettleSteps(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if p.stepsArmed.Load() {
			t.Errorf("step %d: a step is still recorded as armed", i)
		}
		after, err := p.Registers(tid)
		if err != nil {
			t.Fatalf("step %d: the thread is no longer stopped: %v", i, err)
		}
		if !bytes.Equal(before.Data, after.Data) {
			t.Errorf("step %d: registers changed by settling", i)
		}
		siAfter, err := p.Siginfo(tid)
		if err != nil || !bytes.Equal(siBefore, siAfter) {
			t.Errorf("step %d: siginfo %x then %x (%v)", i, siBefore, siAfter, err)
		}
	}
	resumeAll(t, p)
	if ev := wait(t, p); ev.Kind != Exited || ev.ExitCode != 50 {
		t.Errorf("end %+v", ev)
	}
}

func TestSignalDeliveryStop(t *testing.T) {
	cases := []struct {
		name string
		si   siginfo
		want bool
	}{
		{"single-step trap", siginfo{Signo: int32(unix.SIGTRAP), Code: trapTrace}, true},
		{"int3", siginfo{Signo: int32(unix.SIGTRAP), Code: 0x80}, true},
		{"SIGSTOP from tgkill", siginfo{Signo: int32(unix.SIGSTOP), Code: siTkill}, true},
		{"clone event", siginfo{Signo: int32(unix.SIGTRAP), Code: int32(unix.SIGTRAP | unix.PTRACE_EVENT_CLONE<<8)}, false},
		{"syscall stop", siginfo{Signo: int32(unix.SIGTRAP), Code: int32(unix.SIGTRAP | 0x80)}, false},
	}
	for _, c := range cases {
		if got := signalDeliveryStop(c.si); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestSettleStepsWaitsForTheReport: in non-stop mode a stepped thread
// whose stop is still queued for gdb is not settled — settling could
// dequeue a signal that came meanwhile as a second event of the thread,
// reported before the step's (gdb.threads/non-stop-fair-events.exp). Once
// gdb has the step's stop it is settled, and the signal is reported when
// gdb resumes the thread, at the same place.
func TestSettleStepsWaitsForTheReport(t *testing.T) {
	p := launchNonStop(t, "threads")
	tid := p.Pid()
	if err := p.Resume([]Action{{Tid: tid, Step: true}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the step is done and collected
	if err := unix.Tgkill(p.Pid(), tid, unix.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	if err := p.SettleSteps(); err != nil {
		t.Fatal(err)
	}
	if !p.stepsArmed.Load() {
		t.Fatal("a thread whose stop gdb has not seen was settled")
	}
	ev := wait(t, p)
	if ev.Tid != tid || ev.Kind != SignalStop || ev.Signal != int(unix.SIGTRAP) {
		t.Fatalf("first event %+v, want the step's SIGTRAP", ev)
	}
	var queued bool
	_ = p.do(func() error { queued = p.hasPending(tid); return nil })
	if queued {
		t.Fatal("a second event of the stepped thread is queued")
	}
	pc, err := p.PC(tid)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SettleSteps(); err != nil {
		t.Fatal(err)
	}
	if p.stepsArmed.Load() {
		t.Fatal("the reported step was not settled")
	}
	if err := p.Resume([]Action{{Tid: tid}}); err != nil {
		t.Fatal(err)
	}
	ev = wait(t, p)
	if ev.Tid != tid || ev.Kind != SignalStop || ev.Signal != int(unix.SIGUSR1) {
		t.Fatalf("event %+v after resuming, want the SIGUSR1", ev)
	}
	if now, err := p.PC(tid); err != nil || now != pc {
		t.Fatalf("SIGUSR1 reported at %#x (%v), want %#x: the thread ran", now, err, pc)
	}
}
