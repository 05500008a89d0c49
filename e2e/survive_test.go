package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// survive.c's arguments in these tests: 40 calls of survive_step, 50 ms
// apart (2 s in all), so that the stub can be killed between two hits.
const surviveIterations = 40

const survivePauseUs = 50000

// surviveWant is what survive.c writes to its output file when it ran to
// its normal end with threads threads.
func surviveWant(threads int) string {
	sum := 0
	for i := range surviveIterations {
		sum += 3*i + 1
	}
	return fmt.Sprintf("done threads=%d iterations=%d sum=%d\n", threads, surviveIterations, threads*sum)
}

// gone reports whether a threadsState says the process is gone (reaped,
// or a zombie its new parent has not reaped yet).
func gone(states string) bool { return strings.Trim(states, "Z") == "" }

// threadsState returns the state letters of every thread of pid
// ("" once the process is gone).
func threadsState(pid int) string {
	states, _ := threadsSnapshot(pid)
	return states
}

// threadsSnapshot returns the state letters of every thread of pid and
// the sum of their context switches (voluntary and not), which grows each
// time one of them goes to sleep or stops. Each thread's switches are
// read before its state: a thread waking from a sleep to stop at an int3
// between the two reads shows as stopped, not as asleep with a switch
// more (the stop's).
func threadsSnapshot(pid int) (states string, switches int) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return "", 0
	}
	var b strings.Builder
	for _, task := range tasks {
		var tid int
		fmt.Sscan(task.Name(), &tid)
		n := contextSwitches(pid, tid)
		st, err := processState(tid)
		if err != nil {
			continue
		}
		b.WriteString(st)
		switches += n
	}
	return b.String(), switches
}

// contextSwitches reads the context switch counts of thread tid of pid
// (0 if it is gone).
func contextSwitches(pid, tid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/status", pid, tid))
	if err != nil {
		return 0
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		name, value, ok := strings.Cut(line, ":")
		if ok && strings.HasSuffix(name, "ctxt_switches") {
			var v int
			fmt.Sscan(strings.TrimSpace(value), &v)
			n += v
		}
	}
	return n
}

// killStubBetweenHits waits until every thread of the inferior pid has
// just gone to sleep (between two calls of the traced function: a
// sampling where all are asleep and some thread switched out since the
// sampling before), then sends SIGKILL to the stub alone. A thread in a
// ptrace stop at a trap when the tracer dies is beyond saving (package
// guard's doc); this test checks the rest: the int3s taken out before the
// next call. The switch counts, not a sampling that catches a thread
// running, tell that a thread just went to sleep: a thread runs a few
// microseconds of each 50 ms, which 200 µs samplings mostly miss.
//
// Under the arm64 VM's emulation, where a /proc read takes a while, the
// kill meant for just after a thread went to sleep came now and then as
// it woke and met the int3 (the watchdog found it running or dead, not in
// its sleep: the program died of the SIGTRAP it had stopped with, the
// documented limit): a sampling read a thread's state as asleep, then
// its switches grown by the stop that followed. Switches are read first
// now, and again before the kill; only two samplings close together
// count (recentSample).
func killStubBetweenHits(t *testing.T, stub *stubProcess, pid int) {
	t.Helper()
	const recentSample = 10 * time.Millisecond
	prev := -1
	var prevAt time.Time
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, switches := threadsSnapshot(pid)
		now := time.Now()
		asleep := st != "" && strings.Trim(st, "S") == ""
		if asleep && prev >= 0 && switches > prev && now.Sub(prevAt) < recentSample {
			// And no switch since (a thread that woke and stopped
			// after its state was read).
			if _, again := threadsSnapshot(pid); again == switches {
				prevAt = now
				break
			}
		}
		prev, prevAt = switches, now
		if time.Now().After(deadline) || st == "" {
			t.Fatalf("the program's threads never went to sleep together: states %q", st)
		}
		time.Sleep(200 * time.Microsecond)
	}
	at := time.Now() // for the watchdog's times in the output
	if err := syscall.Kill(stub.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 the stub: %v", err)
	}
	t.Logf("the stub was sent SIGKILL at %s, %v after the sampling that found the threads just asleep",
		at.Format("15:04:05.000000"), time.Since(prevAt).Round(time.Microsecond))
}

// checkSurvived waits for the program pid to write out and to be gone,
// and checks what it wrote.
func checkSurvived(t *testing.T, stub *stubProcess, pid int, out, want string) {
	t.Helper()
	defer func() {
		if t.Failed() {
			t.Logf("stub and program output:\n%s", stub.output.String())
		}
	}()
	var got []byte
	if !waitFor(30*time.Second, func() bool {
		got, _ = os.ReadFile(out)
		return strings.HasSuffix(string(got), "\n")
	}) {
		t.Fatalf("the program never wrote its result to %s (threads %q: the stub's death killed or stopped it; %s)",
			out, threadsState(pid), orphanEnd(pid))
	}
	if string(got) != want {
		t.Errorf("the program wrote %q, want %q", got, want)
	}
	if !waitFor(10*time.Second, func() bool { return gone(threadsState(pid)) }) {
		t.Errorf("the program is still there after writing its result: threads %q", threadsState(pid))
	}
}

// adoptOrphans makes the test binary its descendants' reaper for the
// test's time (PR_SET_CHILD_SUBREAPER): the program, orphaned when its
// stub dies, becomes a child of the test, which can learn how it ended
// (orphanEnd). Orphans adopted meanwhile stay children of the test
// binary (zombies until it exits, which gone counts as gone).
func adoptOrphans(t *testing.T) {
	t.Helper()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Logf("PR_SET_CHILD_SUBREAPER: %v (a dead program's signal will not be known)", err)
		return
	}
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
}

// orphanEnd reaps pid, an orphan adopted by adoptOrphans, if it has ended
// and says how: the signal that killed it is what a failure needs to
// name (SIGTRAP: it met an int3 nobody took out; SIGHUP: orphaned while
// stopped).
func orphanEnd(pid int) string {
	var ws unix.WaitStatus
	got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
	switch {
	case err != nil:
		return fmt.Sprintf("its end unknown: %v", err)
	case got == 0:
		return "not ended"
	case ws.Signaled():
		return fmt.Sprintf("killed by %v (core dumped: %v)", ws.Signal(), ws.CoreDump())
	default:
		return fmt.Sprintf("exited with status %d", ws.ExitStatus())
	}
}

// surviveSession launches survive under a stub without --once, connects
// gdb, runs setup, continues, and kills the stub with SIGKILL while the
// program runs. It returns the program's pid and the output file.
func surviveSession(t *testing.T, threads, pauseUs int, setup string) (int, string, *stubProcess, *gdbProcess) {
	t.Helper()
	stubPath(t)
	prog := buildProgram(t, "survive")
	out := filepath.Join(t.TempDir(), "survive.out")
	adoptOrphans(t)
	stub := startStub(t, nil, prog, out, fmt.Sprint(surviveIterations), fmt.Sprint(pauseUs), fmt.Sprint(threads))
	pid := stub.inferiorPid()
	if pid == 0 {
		t.Fatalf("no inferior pid in the stub's output:\n%s", stub.output.String())
	}
	t.Cleanup(func() { orphanEnd(pid) })
	script := strings.Join([]string{
		"target remote " + stub.target(),
		"break main",
		"continue",
		strings.TrimSpace(setup),
		"continue",
	}, "\n")
	g := startGDBSession(t, gdbSession{program: prog, commands: []string{script}})
	if !waitFor(20*time.Second, func() bool { return strings.Contains(stub.output.String(), "loop running") }) {
		t.Fatalf("the program never started its loop; stub output:\n%s\ngdb output:\n%s", stub.output.String(), g.output.String())
	}
	// A few hits first.
	time.Sleep(300 * time.Millisecond)
	killStubBetweenHits(t, stub, pid)
	select {
	case <-g.done:
	case <-time.After(20 * time.Second):
		t.Errorf("gdb did not notice the stub's death")
	}
	return pid, out, stub, g
}

// The stub killed with SIGKILL while the program runs: the kernel
// detaches the program, which runs to its normal end.
func TestStubKilledProgramRunsOn(t *testing.T) {
	if isGdbserver(stubPath(t)) {
		t.Skip("gdbserver sets PTRACE_O_EXITKILL: its death kills the program")
	}
	for _, threads := range []int{1, 3} {
		t.Run(fmt.Sprintf("threads=%d", threads), func(t *testing.T) {
			pid, out, stub, _ := surviveSession(t, threads, survivePauseUs, "delete")
			checkSurvived(t, stub, pid, out, surviveWant(threads))
		})
	}
}

// The same with a trap tracepoint in the loop and tracing started: the
// stub's watchdog takes the int3s out once the stub is gone, so the next
// call does not meet one (a SIGTRAP with nobody to answer would kill the
// program). One thread, 100 ms between hits: the stub is killed just after
// the thread went to sleep, and the watchdog has until its next call.
func TestStubKilledWhileTracingProgramRunsOn(t *testing.T) {
	if isGdbserver(stubPath(t)) {
		t.Skip("gdbserver sets PTRACE_O_EXITKILL: its death kills the program")
	}
	pid, out, stub, g := surviveSession(t, 1, 100000, strings.Join([]string{
		"delete",
		"trace survive_step",
		"actions\ncollect i\nend",
		"tstart",
	}, "\n"))
	if !strings.Contains(g.output.String(), "Tracepoint 2 at") {
		t.Errorf("no tracepoint was set")
	}
	checkSurvived(t, stub, pid, out, surviveWant(1))
	mustContain(t, stub.output.String(), "gotpstub watchdog: the stub died: restored")
	for _, line := range strings.Split(stub.output.String(), "\n") {
		if strings.Contains(line, "gotpstub watchdog:") {
			t.Log(line)
		}
	}
}

// With --kill-on-stub-exit the kernel kills the program with the stub.
func TestKillOnStubExit(t *testing.T) {
	stub := stubPath(t)
	if isGdbserver(stub) {
		t.Skip("gotpstub option")
	}
	prog := buildProgram(t, "survive")
	out := filepath.Join(t.TempDir(), "survive.out")
	s := startStub(t, []string{"--kill-on-stub-exit"}, prog, out, fmt.Sprint(surviveIterations), fmt.Sprint(survivePauseUs))
	pid := s.inferiorPid()
	g := startGDBSession(t, gdbSession{program: prog, commands: []string{"target remote " + s.target(), "continue"}})
	if !waitFor(20*time.Second, func() bool { return strings.Contains(s.output.String(), "loop running") }) {
		t.Fatalf("the program never started its loop; gdb output:\n%s", g.output.String())
	}
	syscall.Kill(s.cmd.Process.Pid, syscall.SIGKILL)
	if !waitFor(10*time.Second, func() bool { return gone(threadsState(pid)) }) {
		t.Fatalf("the program outlived the stub despite --kill-on-stub-exit: threads %q", threadsState(pid))
	}
	if b, err := os.ReadFile(out); err == nil {
		t.Errorf("the program ran to its end: %q", b)
	}
}

// gdb killed with SIGKILL during a run with disconnected tracing off: the
// run stops (tdisconnected) and a gdb that reconnects to the same stub
// finds every frame collected until then; so does the one after it.
func TestFramesSurviveGDBKilled(t *testing.T) {
	for _, cmd := range []string{"trace", "ftrace"} {
		t.Run(cmd, func(t *testing.T) {
			stub := stubPath(t)
			if cmd == "ftrace" && isGdbserver(stub) {
				t.Skip("gdbserver needs its in-process agent library for ftrace")
			}
			prog := buildProgram(t, "survive")
			out := filepath.Join(t.TempDir(), "survive.out")
			// 30 s of loop: the program is still running when gdb 2 comes.
			s := startStub(t, nil, prog, out, "3000", "10000")
			g1 := startGDBSession(t, gdbSession{program: prog, commands: []string{strings.Join([]string{
				"target remote " + s.target(),
				"break main",
				"continue",
				"delete",
				"set disconnected-tracing off",
				cmd + " survive_step",
				"actions\ncollect i\nend",
				"tstart",
				"continue",
			}, "\n")}})
			if !waitFor(20*time.Second, func() bool { return strings.Contains(s.output.String(), "loop running") }) {
				t.Fatalf("the program never started its loop; gdb 1:\n%s", g1.output.String())
			}
			time.Sleep(time.Second) // ~100 hits
			g1.killHard()
			after := []string{
				"tstatus",
				"tfind start",
				"print i",
				"tfind 9",
				"print i",
				"tfind none",
			}
			for n, last := range []string{"disconnect", "kill"} {
				o := runGDB(t, gdbSession{program: prog, commands: append(append([]string{"target remote " + s.target()}, after...), last)})
				mustContain(t, o, "Trace stopped because of disconnection.",
					"Found trace frame 0, tracepoint 1", "$1 = 0",
					"Found trace frame 9, tracepoint 1", "$2 = 9")
				if got := framesCollected(t, o); got < 10 {
					t.Errorf("gdb %d: %d frames, want at least 10", n+2, got)
				}
			}
		})
	}
}
