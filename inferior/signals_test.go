package inferior

import (
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sigRTMin is glibc's SIGRTMIN (the kernel's 32 and 33 are glibc's own).
const sigRTMin = 34

// siQueueCode is SI_QUEUE as the siginfo_t field holds it.
const siQueueCode = -1

// sigqueueTo sends tid of pid the signal sig with a sigqueue value, as
// rt_tgsigqueueinfo does for pthread_sigqueue (si_code SI_QUEUE).
func sigqueueTo(pid, tid, sig, value int) error {
	var si siginfo
	si.Signo, si.Code = int32(sig), siQueueCode
	raw := (*[128]byte)(unsafe.Pointer(&si))
	binary.LittleEndian.PutUint32(raw[16:], uint32(os.Getpid())) // si_pid
	binary.LittleEndian.PutUint32(raw[20:], uint32(os.Getuid())) // si_uid
	binary.LittleEndian.PutUint64(raw[24:], uint64(value))       // si_value
	_, _, e := unix.Syscall6(unix.SYS_RT_TGSIGQUEUEINFO, uintptr(pid), uintptr(tid), uintptr(sig),
		uintptr(unsafe.Pointer(&si)), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// launchCapturing starts the test program in mode with its standard
// output in a file, returned for reading after the exit.
func launchCapturing(t *testing.T, mode string) (*Process, *os.File) {
	t.Helper()
	prog := testProgram(t)
	out, err := os.CreateTemp(t.TempDir(), "stdout")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { out.Close() })
	p, err := Launch(LaunchOptions{Path: prog, Args: []string{prog, mode}, Stdout: out})
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	t.Cleanup(func() {
		_ = p.Kill()
		p.Close()
	})
	return p, out
}

// signalLogs reads the "svN: values..." lines sigvalues mode printed.
func signalLogs(t *testing.T, out *os.File) []string {
	t.Helper()
	b, err := os.ReadFile(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	var logs []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if _, vals, ok := strings.Cut(line, ":"); ok && strings.HasPrefix(line, "sv") {
			logs = append(logs, strings.TrimSpace(vals))
		}
	}
	if len(logs) != 2 {
		t.Fatalf("program output %q: want two sv lines", b)
	}
	return logs
}

// runSigvalues runs sigvalues mode with an internal trap at tp_nop whose
// hook sends the hitting thread signals (send, given the thread's hit
// count), emulates the nop and single-steps the next instruction, as
// trapfallback's displaced steps do: the signals arrive in the middle of
// the step. (Stepping the trapped instruction in place would take the
// int3 out of memory meanwhile, and the other thread would miss it.) Reported signals are
// passed back like gdb does. It returns the reports and each thread's
// log of handled values.
func runSigvalues(t *testing.T, pass map[int]bool, send func(pid, tid, k int) error) (reports int, logs []string, passed int) {
	t.Helper()
	p, out := launchCapturing(t, "sigvalues")
	runToMain(t, p)
	p.SetPassSignals(pass)
	hits := map[int]int{}
	p.SetTrapHook(func(s *Stopped) TrapAction {
		hits[s.Tid()]++
		if err := send(p.Pid(), s.Tid(), hits[s.Tid()]); err != nil {
			t.Errorf("sending a signal: %v", err)
		}
		regs, err := s.Registers()
		if err == nil {
			err = regs.SetUint64(regPC, s.PC()+uint64(len(nopInsn)))
		}
		if err == nil {
			err = s.SetRegisters(regs)
		}
		if err == nil {
			err = s.SingleStep()
		}
		if err != nil {
			t.Errorf("stepping in the hook: %v", err)
		}
		return TrapResume
	})
	if err := p.InsertInternalTrap(symbol(t, p, "tp_nop")); err != nil {
		t.Fatal(err)
	}
	actions := []Action{{Tid: -1}}
	for {
		if err := p.Resume(actions); err != nil {
			t.Fatal(err)
		}
		ev := wait(t, p)
		if ev.Kind == Exited {
			if ev.ExitCode != 0 {
				t.Fatalf("exit code %d", ev.ExitCode)
			}
			break
		}
		if ev.Kind != SignalStop || (ev.Signal != int(unix.SIGUSR1) && ev.Signal != sigRTMin) {
			t.Fatalf("event %+v", ev)
		}
		reports++
		actions = []Action{{Tid: ev.Tid, Signal: ev.Signal}, {Tid: -1}}
	}
	total := 0
	for _, n := range hits {
		total += n
	}
	if total != 40 {
		t.Errorf("%d trap hits, want 40", total)
	}
	return reports, signalLogs(t, out), p.PassedSignals()
}

// want returns the expected log of one thread: per hit k, values(k).
func wantLog(values func(k int) []int) string {
	var b strings.Builder
	for k := 1; k <= 20; k++ {
		for _, v := range values(k) {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprint(&b, v)
		}
	}
	return b.String()
}

// TestSignalDuringInternalStepKeepsSiginfo: a signal that arrives while a
// trap hook single-steps the thread is delivered once, with the siginfo
// it was sent with, whether gdb passes it silently (kept for the thread,
// nothing reported) or hears of it (reported, then passed back).
func TestSignalDuringInternalStepKeepsSiginfo(t *testing.T) {
	one := func(pid, tid, k int) error { return sigqueueTo(pid, tid, int(unix.SIGUSR1), k) }
	want := wantLog(func(k int) []int { return []int{k} })
	t.Run("passed", func(t *testing.T) {
		reports, logs, passed := runSigvalues(t, map[int]bool{int(unix.SIGUSR1): true}, one)
		if reports != 0 || passed != 40 {
			t.Errorf("%d signals reported and %d passed silently, want 0 and 40", reports, passed)
		}
		for i, l := range logs {
			if l != want {
				t.Errorf("thread %d handled %q, want %q", i, l, want)
			}
		}
	})
	t.Run("reported", func(t *testing.T) {
		reports, logs, passed := runSigvalues(t, nil, one)
		if reports != 40 || passed != 0 {
			t.Errorf("%d signals reported and %d passed silently, want 40 and 0", reports, passed)
		}
		for i, l := range logs {
			if l != want {
				t.Errorf("thread %d handled %q, want %q (-1: the siginfo was lost)", i, l, want)
			}
		}
	})
}

// TestSeveralSignalsQueuedForOneThread: three signals (SIGUSR1, then two
// SIGRTMIN, all sigqueue'd) pending while a trap hook single-steps the
// thread are all kept, then delivered one per resumption with a SIGSTOP
// of ours in between; the handlers run in the kernel's own order for
// three pending signals (SIGRTMIN's two in turn, nested in SIGUSR1's
// handler: "2 3 1"), each once with its siginfo.
func TestSeveralSignalsQueuedForOneThread(t *testing.T) {
	three := func(pid, tid, k int) error {
		for i, sig := range []int{int(unix.SIGUSR1), sigRTMin, sigRTMin} {
			if err := sigqueueTo(pid, tid, sig, 3*k-2+i); err != nil {
				return err
			}
		}
		return nil
	}
	want := wantLog(func(k int) []int { return []int{3*k - 1, 3 * k, 3*k - 2} })
	pass := map[int]bool{int(unix.SIGUSR1): true, sigRTMin: true}
	for _, c := range []struct {
		name                   string
		pass                   map[int]bool
		minReports, maxReports int
	}{
		{"passed", pass, 0, 0},
		// Each signal is reported; the third SIGRTMIN can be reported
		// again: passed back while the second one's handler blocks
		// SIGRTMIN, the kernel queues it until that handler returns,
		// and it then stops the thread anew.
		{"reported", nil, 120, 160},
	} {
		t.Run(c.name, func(t *testing.T) {
			reports, logs, passed := runSigvalues(t, c.pass, three)
			if reports < c.minReports || reports > c.maxReports {
				t.Errorf("%d signals reported, want %d to %d", reports, c.minReports, c.maxReports)
			}
			if c.pass != nil && passed < 120 {
				t.Errorf("%d signals passed silently, want at least 120", passed)
			}
			for i, l := range logs {
				if l != want {
					t.Errorf("thread %d handled %q, want %q", i, l, want)
				}
			}
		})
	}
}

// TestPassSignalsStopNoOtherThread: signals gdb passes silently go
// straight back to their thread: Wait reports nothing but the exit, and
// no thread was stopped for them.
func TestPassSignalsStopNoOtherThread(t *testing.T) {
	p := launch(t, "sigthreads")
	p.SetPassSignals(map[int]bool{int(unix.SIGUSR1): true})
	resumeAll(t, p)
	ev := wait(t, p)
	if ev.Kind != Exited || ev.ExitCode != 4 {
		t.Fatalf("event %+v, want an exit with code 4 (every signal delivered once)", ev)
	}
	if n := p.PassedSignals(); n != 4 {
		t.Errorf("%d signals passed silently, want 4", n)
	}
	stops := 0
	_ = p.do(func() error { stops = p.stopAllCalls; return nil })
	if stops != 0 {
		t.Errorf("every thread was stopped %d times, want never", stops)
	}
}

// TestPassSignalsNotSet: a signal not in the set is reported as before.
func TestPassSignalsNotSet(t *testing.T) {
	p := launch(t, "sigthreads")
	p.SetPassSignals(map[int]bool{int(unix.SIGUSR2): true})
	resumeAll(t, p)
	ev := wait(t, p)
	if ev.Kind != SignalStop || ev.Signal != int(unix.SIGUSR1) {
		t.Fatalf("event %+v, want a SIGUSR1 stop", ev)
	}
}

// TestPassableSignals: stops and faults are never passed silently.
func TestPassableSignals(t *testing.T) {
	var st sigState
	for sig := 1; sig < len(st.pass); sig++ {
		st.pass[sig] = true
	}
	for _, sig := range []unix.Signal{unix.SIGTRAP, unix.SIGSTOP, unix.SIGKILL, unix.SIGSEGV, unix.SIGBUS, unix.SIGILL, unix.SIGFPE, unix.SIGSYS} {
		if st.passable(int(sig)) {
			t.Errorf("%v passable", sig)
		}
	}
	for _, sig := range []int{int(unix.SIGUSR1), int(unix.SIGPROF), int(unix.SIGALRM), int(unix.SIGCHLD), sigRTMin, 64} {
		if !st.passable(sig) {
			t.Errorf("signal %d not passable", sig)
		}
	}
	if st.passable(0) || st.passable(65) {
		t.Error("out of range signal passable")
	}
}

// TestQueuedEventWaitsForItsThread: a stop queued for a thread gdb keeps
// stopped is not reported while gdb steps another thread alone (gdb
// stepping over a breakpoint expects to hear of that thread only); it is
// reported once gdb resumes its thread. Four threads hit a breakpoint
// together, so that hits queue up while one is reported.
func TestQueuedEventWaitsForItsThread(t *testing.T) {
	p := launch(t, "barrier")
	runToMain(t, p)
	hit := symbol(t, p, "hit")
	eachBarrierHit(t, p, hit, func(ev StopEvent) {
		// vCont;s:tid with the breakpoint still in: the package steps
		// the thread over it, and only that thread may report.
		if err := p.Resume([]Action{{Tid: ev.Tid, Step: true}}); err != nil {
			t.Fatal(err)
		}
		if sev := wait(t, p); sev.Tid != ev.Tid || sev.Signal != int(unix.SIGTRAP) || sev.Reason != "" {
			t.Fatalf("stepping thread %d alone reported %+v", ev.Tid, sev)
		}
	})
}
