package inferior

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var (
	progOnce sync.Once
	progPath string
	progErr  error
	progDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if progDir != "" {
		os.RemoveAll(progDir)
	}
	os.Exit(code)
}

// testProgram builds testdata/prog.c once (skipping without gcc).
func testProgram(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not installed")
	}
	progOnce.Do(func() {
		progDir, progErr = os.MkdirTemp("", "inferior-test")
		if progErr != nil {
			return
		}
		progPath = filepath.Join(progDir, "prog")
		out, err := exec.Command("gcc", "-g", "-O1", "-pthread", "-o", progPath, "testdata/prog.c").CombinedOutput()
		if err != nil {
			progErr = fmt.Errorf("gcc: %v\n%s", err, out)
		}
	})
	if progErr != nil {
		t.Fatal(progErr)
	}
	return progPath
}

// launch starts the test program in the given mode and arranges cleanup.
func launch(t *testing.T, mode string) *Process {
	t.Helper()
	prog := testProgram(t)
	p, err := Launch(LaunchOptions{Path: prog, Args: []string{prog, mode}})
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	t.Cleanup(func() {
		_ = p.Kill()
		p.Close()
	})
	return p
}

// wait calls p.Wait with a time limit.
func wait(t *testing.T, p *Process) StopEvent {
	t.Helper()
	type result struct {
		ev  StopEvent
		err error
	}
	ch := make(chan result, 1)
	go func() {
		ev, err := p.Wait()
		ch <- result{ev, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("Wait: %v", r.err)
		}
		return r.ev
	case <-time.After(20 * time.Second):
		t.Fatal("Wait did not return within 20s")
	}
	return StopEvent{}
}

func resumeAll(t *testing.T, p *Process) {
	t.Helper()
	if err := p.Resume([]Action{{Tid: -1}}); err != nil {
		t.Fatalf("Resume: %v", err)
	}
}

// loadBias returns where the program's ELF file is mapped (PIE).
func loadBias(t *testing.T, p *Process) uint64 {
	t.Helper()
	exe, err := p.ExePath()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", p.Pid()))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 6 && fields[5] == exe && fields[2] == "00000000" {
			lo, _, _ := strings.Cut(fields[0], "-")
			v, err := strconv.ParseUint(lo, 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("%s not in the maps of %d", exe, p.Pid())
	return 0
}

// symbol returns the run-time address of a symbol of the test program.
func symbol(t *testing.T, p *Process, name string) uint64 {
	t.Helper()
	f, err := elf.Open(testProgram(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	bias := uint64(0)
	if f.Type == elf.ET_DYN {
		bias = loadBias(t, p)
	}
	for _, s := range syms {
		if s.Name == name {
			return s.Value + bias
		}
	}
	t.Fatalf("no symbol %s", name)
	return 0
}

// runToMain lets the dynamic loader finish by stopping at main.
func runToMain(t *testing.T, p *Process) {
	t.Helper()
	main := symbol(t, p, "main")
	if err := p.InsertBreakpoint(SoftwareBreakpoint, main, 1); err != nil {
		t.Fatal(err)
	}
	resumeAll(t, p)
	ev := wait(t, p)
	if ev.Kind != SignalStop || ev.Reason != "swbreak" {
		t.Fatalf("running to main: %+v", ev)
	}
	if err := p.RemoveBreakpoint(SoftwareBreakpoint, main, 1); err != nil {
		t.Fatal(err)
	}
}

func pc(t *testing.T, p *Process, tid int) uint64 {
	t.Helper()
	r, err := p.Registers(tid)
	if err != nil {
		t.Fatalf("Registers(%d): %v", tid, err)
	}
	return r.Uint64(regPC)
}

func TestLaunchExitCode(t *testing.T) {
	tests := []struct {
		mode string
		code int
	}{
		{"exit", 42}, {"bp", 6}, {"threads", 50}, {"signal", 7},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			p := launch(t, tt.mode)
			if p.Attached() {
				t.Error("launched process claims to be attached")
			}
			if got := p.Threads(); len(got) != 1 || got[0] != p.Pid() {
				t.Errorf("threads at start %v, want [%d]", got, p.Pid())
			}
			for {
				resumeAll(t, p)
				ev := wait(t, p)
				if ev.Kind == SignalStop && ev.Signal != int(unix.SIGTRAP) {
					// pass signals on, like gdb does by default
					if err := p.Resume([]Action{{Tid: ev.Tid, Signal: ev.Signal}, {Tid: -1}}); err != nil {
						t.Fatal(err)
					}
					ev = wait(t, p)
				}
				if ev.Kind == Exited {
					if ev.ExitCode != tt.code {
						t.Errorf("exit code %d, want %d", ev.ExitCode, tt.code)
					}
					return
				}
				if ev.Kind != SignalStop {
					t.Fatalf("unexpected event %+v", ev)
				}
			}
		})
	}
}

func TestLaunchStopsAtEntry(t *testing.T) {
	p := launch(t, "exit")
	regs, err := p.Registers(p.Pid())
	if err != nil {
		t.Fatal(err)
	}
	// At the exec stop the pc is the dynamic loader's entry point, AT_ENTRY
	// of the interpreter; the stack pointer is at argc.
	auxv, err := p.Auxv()
	if err != nil {
		t.Fatal(err)
	}
	var base uint64
	for i := 0; i+16 <= len(auxv); i += 16 {
		if binary.LittleEndian.Uint64(auxv[i:]) == 7 { // AT_BASE
			base = binary.LittleEndian.Uint64(auxv[i+8:])
		}
	}
	rip := regs.Uint64(regPC)
	if base == 0 || rip < base || rip > base+0x100000 {
		t.Errorf("rip %#x not in the dynamic loader at %#x", rip, base)
	}
	var argc [8]byte
	if _, err := p.ReadMemory(regs.Uint64(regSP), argc[:]); err != nil {
		t.Fatal(err)
	}
	if n := binary.LittleEndian.Uint64(argc[:]); n != 2 {
		t.Errorf("argc on the stack %d, want 2", n)
	}
	if exe, err := p.ExePath(); err != nil || exe != testProgram(t) {
		t.Errorf("ExePath %q, %v", exe, err)
	}
}

func TestBreakpointStepOverAndExit(t *testing.T) {
	p := launch(t, "bp")
	runToMain(t, p)
	hit := symbol(t, p, "hit")
	var orig [4]byte
	if _, err := p.ReadMemory(hit, orig[:]); err != nil {
		t.Fatal(err)
	}
	if err := p.InsertBreakpoint(SoftwareBreakpoint, hit, 1); err != nil {
		t.Fatal(err)
	}
	// The int3 is invisible to ReadMemory.
	var shown [4]byte
	if _, err := p.ReadMemory(hit, shown[:]); err != nil || shown != orig {
		t.Errorf("ReadMemory over a breakpoint: % x (%v), want % x", shown, err, orig)
	}
	for i := 1; i <= 3; i++ {
		resumeAll(t, p)
		ev := wait(t, p)
		if ev.Kind != SignalStop || ev.Signal != int(unix.SIGTRAP) || ev.Reason != "swbreak" || ev.Tid != p.Pid() {
			t.Fatalf("hit %d: event %+v", i, ev)
		}
		regs, err := p.Registers(ev.Tid)
		if err != nil {
			t.Fatal(err)
		}
		if got := regs.Uint64(regPC); got != hit {
			t.Fatalf("hit %d: pc %#x, want %#x", i, got, hit)
		}
		if got := regs.Uint64(regArg0); got != uint64(i) {
			t.Errorf("hit %d: argument %d", i, got)
		}
	}
	// Single-step off the breakpoint: one instruction, reason "".
	if err := p.Resume([]Action{{Tid: p.Pid(), Step: true}}); err != nil {
		t.Fatal(err)
	}
	ev := wait(t, p)
	if ev.Kind != SignalStop || ev.Signal != int(unix.SIGTRAP) || ev.Reason != "" {
		t.Fatalf("step: %+v", ev)
	}
	if got := pc(t, p, p.Pid()); got == hit || got > hit+16 {
		t.Errorf("after one step pc %#x (breakpoint at %#x)", got, hit)
	}
	if err := p.RemoveBreakpoint(SoftwareBreakpoint, hit, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := p.readRawForTest(hit, shown[:]); err != nil || shown != orig {
		t.Errorf("memory after removal % x, want % x", shown, orig)
	}
	resumeAll(t, p)
	if ev := wait(t, p); ev.Kind != Exited || ev.ExitCode != 6 {
		t.Errorf("end: %+v", ev)
	}
	if _, err := p.Registers(p.Pid()); err == nil {
		t.Error("Registers after exit succeeded")
	}
	if err := p.Resume([]Action{{Tid: -1}}); !errors.Is(err, ErrExited) {
		t.Errorf("Resume after exit: %v", err)
	}
}

// readRawForTest reads memory without hiding breakpoints.
func (p *Process) readRawForTest(addr uint64, buf []byte) (int, error) {
	var n int
	err := p.do(func() error {
		var err error
		n, err = p.readRaw(addr, buf)
		return err
	})
	return n, err
}

func TestMemory(t *testing.T) {
	p := launch(t, "bp")
	buffer := symbol(t, p, "buffer")
	got := make([]byte, 15)
	if n, err := p.ReadMemory(buffer, got); err != nil || n != 15 || string(got) != "hello, inferior" {
		t.Fatalf("read %q (%d, %v)", got, n, err)
	}
	if err := p.WriteMemory(buffer+7, []byte("world!!!")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.ReadMemory(buffer, got); err != nil || string(got) != "hello, world!!!" {
		t.Errorf("after write %q, %v", got, err)
	}
	// Text is read-only for the program but writable for us.
	hit := symbol(t, p, "hit")
	code := make([]byte, breakpointLen+len(nopInsn))
	if _, err := p.ReadMemory(hit, code); err != nil {
		t.Fatal(err)
	}
	nops := bytes.Repeat(nopInsn, len(code)/len(nopInsn))
	if err := p.WriteMemory(hit, nops); err != nil {
		t.Fatalf("writing text: %v", err)
	}
	check := make([]byte, len(code))
	if _, err := p.ReadMemory(hit, check); err != nil || !bytes.Equal(check, nops) {
		t.Errorf("text after write % x, %v", check, err)
	}
	// Writing over a breakpoint updates the saved bytes, keeps the
	// breakpoint instruction.
	if err := p.InsertBreakpoint(SoftwareBreakpoint, hit, breakpointLen); err != nil {
		t.Fatal(err)
	}
	if err := p.WriteMemory(hit, code); err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, len(code))
	want := append(breakpointInsn[:], code[breakpointLen:]...)
	if _, err := p.readRawForTest(hit, raw); err != nil || !bytes.Equal(raw, want) {
		t.Errorf("raw memory % x, want % x", raw, want)
	}
	if _, err := p.ReadMemory(hit, check); err != nil || !bytes.Equal(check, code) {
		t.Errorf("shown memory % x, want % x", check, code)
	}
	if err := p.RemoveBreakpoint(SoftwareBreakpoint, hit, breakpointLen); err != nil {
		t.Fatal(err)
	}
	if _, err := p.readRawForTest(hit, raw); err != nil || !bytes.Equal(raw, code) {
		t.Errorf("after removal % x, want % x", raw, code)
	}

	unmapped := []struct {
		name string
		addr uint64
	}{
		{"null page", 0},
		{"kernel", 0xffffffffff600000 - 0x1000000},
		{"wrap", ^uint64(0) - 3},
	}
	for _, u := range unmapped {
		buf := make([]byte, 8)
		if n, err := p.ReadMemory(u.addr, buf); err == nil || n != 0 {
			t.Errorf("%s: read %d bytes, err %v", u.name, n, err)
		}
		if err := p.WriteMemory(u.addr, buf); err == nil {
			t.Errorf("%s: write succeeded", u.name)
		}
	}
	// A read running off the end of a mapping is partial.
	maps, err := readMaps(p.Pid())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(maps); i++ {
		if maps[i].end < maps[i+1].start && maps[i].end-maps[i].start >= 16 {
			buf := make([]byte, 32)
			f, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", p.Pid()))
			n, err := p.ReadMemory(maps[i].end-16, buf)
			if n == 16 && err != nil {
				return
			}
			if n == 0 {
				continue // an unreadable mapping (guard page): try another
			}
			t.Fatalf("read across the end of a mapping: %d bytes, %v\n%s", n, err, f)
		}
	}
	t.Error("found no readable mapping followed by a hole to test a partial read")
}

func TestThreadsBreakpoint(t *testing.T) {
	p := launch(t, "threads")
	runToMain(t, p)
	hit := symbol(t, p, "hit")
	if err := p.InsertBreakpoint(SoftwareBreakpoint, hit, 1); err != nil {
		t.Fatal(err)
	}
	hits := map[int]int{}
	seenThreads := map[int]bool{}
	sum := uint64(0)
	for {
		resumeAll(t, p)
		ev := wait(t, p)
		if ev.Kind == Exited {
			if ev.ExitCode != 50 {
				t.Errorf("exit code %d", ev.ExitCode)
			}
			break
		}
		if ev.Kind != SignalStop || ev.Reason != "swbreak" {
			t.Fatalf("event %+v", ev)
		}
		r, err := p.Registers(ev.Tid)
		if err != nil {
			t.Fatal(err)
		}
		if r.Uint64(regPC) != hit {
			t.Fatalf("thread %d stopped at %#x", ev.Tid, r.Uint64(regPC))
		}
		sum += r.Uint64(regArg0)
		hits[ev.Tid]++
		for _, tid := range p.Threads() {
			seenThreads[tid] = true
		}
		if n := len(hits); n > 4 {
			t.Fatalf("hits from %d threads", n)
		}
	}
	total := 0
	for _, n := range hits {
		total += n
		if n != 5 {
			t.Errorf("per-thread hits %v, want 5 each", hits)
			break
		}
	}
	if total != 20 || sum != 50 {
		t.Errorf("%d hits summing to %d, want 20 and 50", total, sum)
	}
	if len(seenThreads) < 5 {
		t.Errorf("saw %d threads, want at least 5", len(seenThreads))
	}
}

func TestSignalReportedThenDelivered(t *testing.T) {
	p := launch(t, "signal")
	resumeAll(t, p)
	ev := wait(t, p)
	if ev.Kind != SignalStop || ev.Signal != int(unix.SIGUSR1) {
		t.Fatalf("event %+v, want SIGUSR1", ev)
	}
	if err := p.Resume([]Action{{Tid: ev.Tid, Signal: ev.Signal}}); err != nil {
		t.Fatal(err)
	}
	if ev := wait(t, p); ev.Kind != Exited || ev.ExitCode != 7 {
		t.Errorf("end %+v, want exit 7 (handler ran)", ev)
	}
}

func TestSignalSuppressed(t *testing.T) {
	p := launch(t, "signal")
	resumeAll(t, p)
	if ev := wait(t, p); ev.Signal != int(unix.SIGUSR1) {
		t.Fatalf("event %+v", ev)
	}
	resumeAll(t, p) // no signal: the handler never runs
	if ev := wait(t, p); ev.Kind != Exited || ev.ExitCode != 8 {
		t.Errorf("end %+v, want exit 8", ev)
	}
}

// TestHardwarePointOnce: a Z1–Z4 packet gdb sends again for a point that
// is in changes nothing, and one z packet takes the point out (as with
// gdbserver); distinct points are counted apart.
func TestHardwarePointOnce(t *testing.T) {
	p := launch(t, "bp")
	watched := symbol(t, p, "watched")
	for i := 0; i < 2; i++ {
		if err := p.InsertBreakpoint(AccessWatchpoint, watched, 8); err != nil {
			t.Fatalf("insert %d: %v", i, err)
		}
	}
	if err := p.InsertBreakpoint(AccessWatchpoint, watched, 4); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		size    int
		wantErr bool
	}{{8, false}, {8, true}, {4, false}, {4, true}}
	for i, s := range steps {
		err := p.RemoveBreakpoint(AccessWatchpoint, watched, s.size)
		if (err != nil) != s.wantErr {
			t.Errorf("removal %d of %d bytes: %v, want error %v", i, s.size, err, s.wantErr)
		}
	}
}

func TestAttachDetach(t *testing.T) {
	prog := testProgram(t)
	cmd := exec.Command(prog, "sleep")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	// Wait until its second thread exists.
	deadline := time.Now().Add(5 * time.Second)
	for {
		tids, _ := taskTids(cmd.Process.Pid)
		if len(tids) >= 2 {
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
	if !p.Attached() {
		t.Error("Attached() false")
	}
	tids := p.Threads()
	if len(tids) != 2 || tids[0] != cmd.Process.Pid {
		t.Fatalf("threads %v", tids)
	}
	for _, tid := range tids {
		if st := threadState(cmd.Process.Pid, tid); st != 't' {
			t.Errorf("thread %d state %c, want t (traced)", tid, st)
		}
	}
	if name := p.ThreadName(tids[0]); name != "prog" {
		t.Errorf("thread name %q", name)
	}
	counter := symbol(t, p, "counter")
	read := func() uint32 {
		var b [4]byte
		if _, err := p.ReadMemory(counter, b[:]); err != nil {
			t.Fatal(err)
		}
		return binary.LittleEndian.Uint32(b[:])
	}
	before := read()
	time.Sleep(20 * time.Millisecond)
	if after := read(); after != before {
		t.Errorf("counter moved while attached: %d → %d", before, after)
	}
	// A breakpoint inserted and left in place is removed by Detach.
	hit := symbol(t, p, "main")
	var orig [1]byte
	if _, err := p.ReadMemory(hit, orig[:]); err != nil {
		t.Fatal(err)
	}
	if err := p.InsertBreakpoint(SoftwareBreakpoint, hit, 1); err != nil {
		t.Fatal(err)
	}
	if err := p.Detach(); err != nil {
		t.Fatal(err)
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	var after [1]byte
	_, err = mem.ReadAt(after[:], int64(hit))
	mem.Close()
	if err != nil || after != orig {
		t.Errorf("byte at the breakpoint after detach %#x (%v), want %#x", after[0], err, orig[0])
	}
	// The program runs on: its counter advances, nobody traces it.
	deadline = time.Now().Add(5 * time.Second)
	for {
		st := threadState(cmd.Process.Pid, cmd.Process.Pid)
		status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
		if (st == 'S' || st == 'R') && strings.Contains(string(status), "TracerPid:\t0\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after detach: state %c\n%s", st, status)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestInterrupt(t *testing.T) {
	p := launch(t, "spin")
	counter := symbol(t, p, "counter")
	var a, b [4]byte
	// Interrupt until the loop has started counting: under emulation
	// (the arm64 VM) the program's start-up alone can outlast 50 ms.
	for deadline := time.Now().Add(20 * time.Second); ; {
		resumeAll(t, p)
		time.Sleep(50 * time.Millisecond)
		p.Interrupt()
		ev := wait(t, p)
		if ev.Kind != SignalStop || ev.Signal != int(unix.SIGINT) || ev.Tid != p.Pid() || !ev.Interrupted {
			t.Fatalf("event %+v, want Interrupt's SIGINT on %d", ev, p.Pid())
		}
		if si, err := p.Siginfo(ev.Tid); err != nil || binary.LittleEndian.Uint32(si) != uint32(unix.SIGINT) {
			t.Errorf("siginfo of the interrupt stop: % x, %v", si, err)
		}
		if _, err := p.ReadMemory(counter, a[:]); err != nil {
			t.Fatal(err)
		}
		if binary.LittleEndian.Uint32(a[:]) != 0 || time.Now().After(deadline) {
			break
		}
	}
	// The stop is real: the counter does not move.
	time.Sleep(20 * time.Millisecond)
	_, _ = p.ReadMemory(counter, b[:])
	if a != b || binary.LittleEndian.Uint32(a[:]) == 0 {
		t.Errorf("counter %x then %x", a, b)
	}
	// Resuming without the signal runs on; a SIGINT the program gets
	// is not an interrupt; interrupt again.
	resumeAll(t, p)
	time.Sleep(20 * time.Millisecond)
	_ = unix.Kill(p.Pid(), unix.SIGINT)
	if ev := wait(t, p); ev.Signal != int(unix.SIGINT) || ev.Interrupted {
		t.Fatalf("the program's own SIGINT: %+v", ev)
	}
	resumeAll(t, p)
	time.Sleep(20 * time.Millisecond)
	p.Interrupt()
	if ev := wait(t, p); ev.Signal != int(unix.SIGINT) || !ev.Interrupted {
		t.Fatalf("second interrupt %+v", ev)
	}
	// Interrupt while stopped does nothing.
	p.Interrupt()
	if err := p.InsertBreakpoint(SoftwareBreakpoint, symbol(t, p, "main"), 1); err != nil {
		t.Fatal(err)
	}
	if err := p.Resume([]Action{{Tid: p.Pid(), Step: true}}); err != nil {
		t.Fatal(err)
	}
	if ev := wait(t, p); ev.Signal != int(unix.SIGTRAP) || ev.Reason != "" {
		t.Errorf("step after stopped interrupt: %+v", ev)
	}
}

func TestKill(t *testing.T) {
	p := launch(t, "threads")
	runToMain(t, p)
	resumeAll(t, p)
	done := make(chan StopEvent, 1)
	go func() {
		ev, _ := p.Wait()
		done <- ev
	}()
	time.Sleep(10 * time.Millisecond)
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-done:
		if ev.Kind != Killed && ev.Kind != Exited {
			t.Errorf("Wait after Kill: %+v", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return after Kill")
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/status", p.Pid())); err == nil {
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Pid()))
		t.Errorf("process still there after Kill:\n%s", st)
	}
	if _, err := p.ReadMemory(0x1000, make([]byte, 4)); err == nil {
		t.Error("ReadMemory after Kill succeeded")
	}
	p.Close()
	if err := p.Resume([]Action{{Tid: -1}}); !errors.Is(err, ErrClosed) {
		t.Errorf("Resume after Close: %v", err)
	}
}

func TestInternalTrapHookCounts(t *testing.T) {
	p := launch(t, "tp")
	runToMain(t, p)
	site := symbol(t, p, "tp_nop")
	var first [1]byte
	if _, err := p.ReadMemory(site, first[:]); err != nil {
		t.Fatal(err)
	}
	hits := 0
	tids := map[int]bool{}
	var hookErr error
	p.SetTrapHook(func(s *Stopped) TrapAction {
		hits++
		tids[s.Tid()] = true
		if s.PC() != site {
			hookErr = fmt.Errorf("hook pc %#x, want %#x", s.PC(), site)
		}
		r, err := s.Registers()
		if err != nil {
			hookErr = err
			return TrapReport
		}
		if r.Uint64(regPC) != site || r.Uint64(regArg0) != 1 {
			hookErr = fmt.Errorf("hook registers rip %#x rdi %d", r.Uint64(regPC), r.Uint64(regArg0))
		}
		// Emulate the trapped nop, as a displaced-stepping hook would:
		// the int3 never leaves memory, so no hit can be missed.
		_ = r.SetUint64(regPC, site+uint64(len(nopInsn)))
		if err := s.SetRegisters(r); err != nil {
			hookErr = err
		}
		return TrapResume
	})
	if err := p.InsertInternalTrap(site); err != nil {
		t.Fatal(err)
	}
	var shown [1]byte
	if _, err := p.ReadMemory(site, shown[:]); err != nil || shown != first {
		t.Errorf("internal trap visible: % x", shown)
	}
	resumeAll(t, p)
	ev := wait(t, p)
	if ev.Kind != Exited || ev.ExitCode != 400&0xff {
		t.Fatalf("end %+v", ev)
	}
	if hookErr != nil {
		t.Error(hookErr)
	}
	if hits != 400 {
		t.Errorf("%d hits, want 400 (4 threads × 100)", hits)
	}
	if len(tids) < 2 {
		t.Errorf("hits from %d threads", len(tids))
	}
}

// TestInternalTrapWithGDBBreakpoint: a gdb breakpoint on an internal trap
// is reported after the hook ran.
func TestInternalTrapWithGDBBreakpoint(t *testing.T) {
	p := launch(t, "bp")
	runToMain(t, p)
	hit := symbol(t, p, "hit")
	hooked := 0
	var userSeen []bool
	p.SetTrapHook(func(s *Stopped) TrapAction {
		hooked++
		userSeen = append(userSeen, s.UserBreakpoint())
		return TrapResume
	})
	if err := p.InsertInternalTrap(hit); err != nil {
		t.Fatal(err)
	}
	if err := p.InsertBreakpoint(SoftwareBreakpoint, hit, 1); err != nil {
		t.Fatal(err)
	}
	resumeAll(t, p)
	ev := wait(t, p)
	if ev.Reason != "swbreak" || hooked != 1 {
		t.Fatalf("event %+v after %d hook calls", ev, hooked)
	}
	if err := p.RemoveBreakpoint(SoftwareBreakpoint, hit, 1); err != nil {
		t.Fatal(err)
	}
	resumeAll(t, p)
	if ev := wait(t, p); ev.Kind != Exited || ev.ExitCode != 6 {
		t.Fatalf("end %+v", ev)
	}
	if hooked != 3 || fmt.Sprint(userSeen) != "[true false false]" {
		t.Errorf("hook ran %d times seeing gdb breakpoints %v, want 3 times [true false false]", hooked, userSeen)
	}
}

func TestExec(t *testing.T) {
	for _, mode := range []string{"exec", "threadexec"} {
		t.Run(mode, func(t *testing.T) {
			p := launch(t, mode)
			runToMain(t, p)
			// A breakpoint in the old image must not survive the exec.
			oldHit := symbol(t, p, "hit")
			if err := p.InsertBreakpoint(SoftwareBreakpoint, oldHit, 1); err != nil {
				t.Fatal(err)
			}
			resumeAll(t, p)
			ev := wait(t, p)
			if !ev.Exec || ev.Signal != int(unix.SIGTRAP) || ev.Tid != p.Pid() {
				t.Fatalf("event %+v, want an exec stop of %d", ev, p.Pid())
			}
			if tids := p.Threads(); len(tids) != 1 || tids[0] != p.Pid() {
				t.Errorf("threads after exec %v", tids)
			}
			if err := p.RemoveBreakpoint(SoftwareBreakpoint, oldHit, 1); err == nil {
				t.Error("the old image's breakpoint survived the exec")
			}
			resumeAll(t, p)
			if ev := wait(t, p); ev.Kind != Exited || ev.ExitCode != 42 {
				t.Errorf("end %+v", ev)
			}
		})
	}
}

func TestLaunchOptions(t *testing.T) {
	prog := testProgram(t)
	if _, err := Launch(LaunchOptions{Path: "/nonexistent/program"}); err == nil {
		t.Error("launching a missing program succeeded")
	}
	// A wrapper that execs the program: env sets a variable.
	p, err := Launch(LaunchOptions{Path: prog, Args: []string{prog, "exit"}, Wrapper: []string{"env", "WRAPPED=1"}, DisableASLR: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	exe, _ := p.ExePath()
	if exe != prog {
		t.Errorf("after the wrapper the process runs %q", exe)
	}
	env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.Pid()))
	if !strings.Contains(string(env), "WRAPPED=1") {
		t.Error("the wrapper's environment did not reach the program")
	}
	pers, _ := os.ReadFile(fmt.Sprintf("/proc/%d/personality", p.Pid()))
	if v, err := strconv.ParseUint(strings.TrimSpace(string(pers)), 16, 64); err != nil || v&addrNoRandomize == 0 {
		t.Errorf("personality %q, want ADDR_NO_RANDOMIZE", pers)
	}
	resumeAll(t, p)
	if ev := wait(t, p); ev.Kind != Exited || ev.ExitCode != 42 {
		t.Errorf("end %+v", ev)
	}
}

func TestFreeNear(t *testing.T) {
	tests := []struct {
		name   string
		maps   []mapping
		near   uint64
		length uint64
		want   uint64
		ok     bool
	}{
		{"gap right after", []mapping{{start: 0x400000, end: 0x401000}, {start: 0x500000, end: 0x501000}}, 0x401800, 0x1000, 0x401000, true},
		{"gap before", []mapping{{start: 0x400000, end: 0x600000}, {start: 0x600000, end: 0x7ffffffff000}}, 0x500000, 0x1000, 0x3ff000, true},
		{"free at near", nil, 0x12345000, 0x2000, 0x12345000, true},
		{"nothing within reach", []mapping{{start: 0x10000, end: 0x7ffffffff000}}, 0x500000, 0x1000, 0, false},
	}
	for _, tt := range tests {
		got, ok := freeNear(tt.maps, tt.near, tt.length)
		if ok != tt.ok || (ok && got != tt.want) {
			t.Errorf("%s: %#x %v, want %#x %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

func FuzzParseMaps(f *testing.F) {
	f.Add("00400000-00401000 r-xp 00000000 08:01 123 /bin/x\n7ffd0000-7ffd1000 rw-p 00000000 00:00 0 [stack]\n")
	f.Add("zz-1\n")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		maps, err := parseMaps(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, m := range maps {
			if m.end < m.start {
				t.Fatalf("bad range %+v", m)
			}
		}
		_, _ = freeNear(maps, 0x400000, 0x1000)
	})
}

func TestSignalsFromSeveralThreadsQueued(t *testing.T) {
	p := launch(t, "sigthreads")
	reports := 0
	actions := []Action{{Tid: -1}}
	for {
		if err := p.Resume(actions); err != nil {
			t.Fatal(err)
		}
		ev := wait(t, p)
		if ev.Kind == Exited {
			if ev.ExitCode != 4 {
				t.Errorf("exit code %d, want 4 (every signal delivered once)", ev.ExitCode)
			}
			break
		}
		if ev.Kind != SignalStop || ev.Signal != int(unix.SIGUSR1) {
			t.Fatalf("event %+v", ev)
		}
		reports++
		// Deliver it to its thread; the others continue.
		actions = []Action{{Tid: ev.Tid, Signal: ev.Signal}, {Tid: -1}}
	}
	if reports != 4 {
		t.Errorf("%d SIGUSR1 reports, want 4", reports)
	}
}

func TestLeaderExitsFirst(t *testing.T) {
	p := launch(t, "leaderexit")
	runToMain(t, p)
	hit := symbol(t, p, "hit")
	if err := p.InsertBreakpoint(SoftwareBreakpoint, hit, 1); err != nil {
		t.Fatal(err)
	}
	hits := 0
	for {
		resumeAll(t, p)
		ev := wait(t, p)
		if ev.Kind == Exited {
			if ev.ExitCode != 9 {
				t.Errorf("exit code %d, want 9", ev.ExitCode)
			}
			break
		}
		if ev.Reason != "swbreak" || ev.Tid == p.Pid() {
			t.Fatalf("event %+v", ev)
		}
		hits++
		if hits == 3 {
			if err := p.RemoveBreakpoint(SoftwareBreakpoint, hit, 1); err != nil {
				t.Fatal(err)
			}
			// The leader is a zombie: interrupting must still stop the
			// process (the other thread sleeps before exiting).
			resumeAll(t, p)
			p.Interrupt()
			iev := wait(t, p)
			if iev.Kind == Exited {
				t.Log("the program exited before the interrupt")
				break
			}
			if iev.Signal != int(unix.SIGINT) {
				t.Fatalf("interrupt with a zombie leader: %+v", iev)
			}
		}
	}
	if hits != 3 {
		t.Errorf("%d hits, want 3", hits)
	}
}

func TestStepOneThreadOthersStopped(t *testing.T) {
	p := launch(t, "threads")
	runToMain(t, p)
	hit := symbol(t, p, "hit")
	if err := p.InsertBreakpoint(SoftwareBreakpoint, hit, 1); err != nil {
		t.Fatal(err)
	}
	resumeAll(t, p)
	ev := wait(t, p)
	if ev.Reason != "swbreak" {
		t.Fatalf("event %+v", ev)
	}
	// Step the thread at the breakpoint three times (vCont;s:tid): only
	// it moves. Other threads' breakpoint hits queued meanwhile are
	// reported first, without anything running.
	for steps := 0; steps < 3; {
		others := map[int]uint64{}
		for _, tid := range p.Threads() {
			if tid != ev.Tid {
				others[tid] = pc(t, p, tid)
			}
		}
		if err := p.Resume([]Action{{Tid: ev.Tid, Step: true}}); err != nil {
			t.Fatal(err)
		}
		sev := wait(t, p)
		if sev.Tid != ev.Tid {
			if sev.Reason != "swbreak" || pc(t, p, sev.Tid) != hit {
				t.Fatalf("while stepping %d: %+v", ev.Tid, sev)
			}
			continue
		}
		if sev.Signal != int(unix.SIGTRAP) || sev.Reason != "" {
			t.Fatalf("step %d: %+v", steps, sev)
		}
		steps++
		for tid, before := range others {
			if p.Alive(tid) && pc(t, p, tid) != before {
				t.Errorf("thread %d moved from %#x to %#x while another stepped", tid, before, pc(t, p, tid))
			}
		}
	}
	_ = p.RemoveBreakpoint(SoftwareBreakpoint, hit, 1)
	resumeAll(t, p)
	if ev := wait(t, p); ev.Kind != Exited || ev.ExitCode != 50 {
		t.Errorf("end %+v", ev)
	}
}

// TestStepOverCloneHoldsChild: in all-stop mode the thread that a
// single-stepped clone creates waits for the next resume, whether gdb
// resumed the other threads with the step or not (as gdbserver does;
// gdb displaced-steps a clone and the child must not run from gdb's
// buffer before the step is reported). Then it runs.
func TestStepOverCloneHoldsChild(t *testing.T) {
	for _, others := range []bool{false, true} {
		t.Run(fmt.Sprintf("others=%v", others), func(t *testing.T) {
			p := launch(t, "clonestep")
			runToMain(t, p)
			sc := symbol(t, p, "clone_syscall")
			if err := p.InsertBreakpoint(SoftwareBreakpoint, sc, 1); err != nil {
				t.Fatal(err)
			}
			resumeAll(t, p)
			ev := wait(t, p)
			if ev.Reason != "swbreak" {
				t.Fatalf("event %+v", ev)
			}
			_ = p.RemoveBreakpoint(SoftwareBreakpoint, sc, 1)
			acts := []Action{{Tid: ev.Tid, Step: true}}
			if others {
				acts = append(acts, Action{Tid: -1})
			}
			if err := p.Resume(acts); err != nil {
				t.Fatal(err)
			}
			if sev := wait(t, p); sev.Tid != ev.Tid || sev.Signal != int(unix.SIGTRAP) {
				t.Fatalf("step over clone: %+v", sev)
			}
			if n := len(p.Threads()); n != 2 {
				t.Fatalf("%d threads after the clone, want 2", n)
			}
			var ran [4]byte
			if _, err := p.ReadMemory(symbol(t, p, "clone_child_ran"), ran[:]); err != nil {
				t.Fatal(err)
			}
			if ran != [4]byte{} {
				t.Error("the new thread ran before the step over its clone was reported")
			}
			resumeAll(t, p)
			if ev := wait(t, p); ev.Kind != Exited || ev.ExitCode != 7 {
				t.Errorf("end %+v, want exit 7", ev)
			}
		})
	}
}

func TestExternalKill(t *testing.T) {
	tests := []struct {
		name    string
		running bool
	}{
		{"while running", true},
		{"while stopped", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := launch(t, "spin")
			if tt.running {
				resumeAll(t, p)
				time.Sleep(10 * time.Millisecond)
			}
			if err := unix.Kill(p.Pid(), unix.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if !tt.running {
				// Resuming a dead thread is not an error worth failing on:
				// the exit is what Wait reports.
				_ = p.Resume([]Action{{Tid: -1}})
			}
			ev := wait(t, p)
			if ev.Kind != Killed || ev.Signal != int(unix.SIGKILL) {
				t.Errorf("event %+v, want killed by SIGKILL", ev)
			}
			if _, err := p.Registers(p.Pid()); err == nil {
				t.Error("Registers of a dead process succeeded")
			}
			if err := p.InsertBreakpoint(SoftwareBreakpoint, 0x1000, 1); err == nil {
				t.Error("InsertBreakpoint in a dead process succeeded")
			}
		})
	}
}

func TestAttachErrors(t *testing.T) {
	// pid_max is at most 2^22: this pid cannot exist.
	if _, err := Attach(1 << 23); err == nil {
		t.Error("attaching to a nonexistent process succeeded")
	}
}

func TestNoResumed(t *testing.T) {
	p := launch(t, "exit")
	if err := p.Resume([]Action{{Tid: p.Pid(), Stop: true}}); err != nil {
		t.Fatal(err)
	}
	if ev := wait(t, p); ev.Kind != NoResumed {
		t.Errorf("event %+v, want NoResumed", ev)
	}
	if err := p.Resume([]Action{{Tid: 999999999}}); !errors.Is(err, ErrNoThread) {
		t.Errorf("resuming a bogus thread: %v", err)
	}
}

// TestForkChildReleased: a forked child is let go with our int3s taken
// out of its memory, so it runs normally while the parent still stops.
func TestForkChildReleased(t *testing.T) {
	p := launch(t, "fork")
	runToMain(t, p)
	hit := symbol(t, p, "hit")
	if err := p.InsertBreakpoint(SoftwareBreakpoint, hit, 1); err != nil {
		t.Fatal(err)
	}
	resumeAll(t, p)
	ev := wait(t, p)
	if ev.Signal == int(unix.SIGCHLD) {
		// The child's exit: pass it on as gdb would.
		if err := p.Resume([]Action{{Tid: ev.Tid, Signal: ev.Signal}, {Tid: -1}}); err != nil {
			t.Fatal(err)
		}
		ev = wait(t, p)
	}
	if ev.Reason != "swbreak" || ev.Tid != p.Pid() {
		t.Fatalf("event %+v, want the parent at the breakpoint", ev)
	}
	r, err := p.Registers(ev.Tid)
	if err != nil {
		t.Fatal(err)
	}
	if r.Uint64(regArg0) != 2 {
		t.Errorf("breakpoint hit with argument %d, want the parent's 2", r.Uint64(regArg0))
	}
	resumeAll(t, p)
	if ev := wait(t, p); ev.Kind != Exited || ev.ExitCode != 11 {
		t.Errorf("end %+v, want exit 11 (child exited normally)", ev)
	}
}

// TestInternalTrapStepOverInPlace: a hook that leaves the pc on the trap
// has the instruction stepped over in place, with the other threads held
// meanwhile so that none of their hits is missed.
func TestInternalTrapStepOverInPlace(t *testing.T) {
	p := launch(t, "tp")
	runToMain(t, p)
	site := symbol(t, p, "tp_site")
	hits := 0
	p.SetTrapHook(func(s *Stopped) TrapAction {
		hits++
		return TrapResume
	})
	if err := p.InsertInternalTrap(site); err != nil {
		t.Fatal(err)
	}
	resumeAll(t, p)
	ev := wait(t, p)
	if ev.Kind != Exited || ev.ExitCode != 400&0xff {
		t.Fatalf("end %+v", ev)
	}
	if hits != 400 {
		t.Errorf("%d hits, want 400", hits)
	}
}

func TestStatState(t *testing.T) {
	tests := []struct {
		line string
		want byte
	}{
		{"123 (prog) S 1 123 123 0 -1", 'S'},
		{"123 (a) b) (c) t 1 2", 't'},
		{"123 (prog) Z 1", 'Z'},
		{"123 (prog)", 'X'},
		{"garbage", 'X'},
		{"", 'X'},
	}
	for _, tt := range tests {
		if got := statState(tt.line); got != tt.want {
			t.Errorf("statState(%q) = %c, want %c", tt.line, got, tt.want)
		}
	}
}

func FuzzStatState(f *testing.F) {
	f.Add("123 (prog) S 1 123")
	f.Add("1 ((x)) R")
	f.Add(")")
	f.Fuzz(func(t *testing.T, s string) {
		got := statState(s)
		if got != 'X' && !strings.Contains(s, ") "+string([]byte{got})) {
			t.Fatalf("statState(%q) = %c, not found after a ')'", s, got)
		}
	})
}

func TestSiginfo(t *testing.T) {
	p := launch(t, "signal")
	resumeAll(t, p)
	ev := wait(t, p)
	if ev.Signal != int(unix.SIGUSR1) {
		t.Fatalf("event %+v", ev)
	}
	si, err := p.Siginfo(ev.Tid)
	if err != nil {
		t.Fatal(err)
	}
	if len(si) != 128 {
		t.Fatalf("siginfo is %d bytes", len(si))
	}
	signo := int32(binary.LittleEndian.Uint32(si[0:]))
	code := int32(binary.LittleEndian.Uint32(si[8:]))
	if signo != int32(unix.SIGUSR1) || code != siTkill {
		t.Errorf("si_signo %d si_code %d, want %d and SI_TKILL", signo, code, unix.SIGUSR1)
	}
	if _, err := p.Siginfo(987654321); err == nil {
		t.Error("siginfo of a bogus thread succeeded")
	}
}

// TestJumpOntoBreakpoint: resuming a thread whose pc gdb moved onto a
// breakpoint hits it (it is stepped over only if it stopped there).
func TestJumpOntoBreakpoint(t *testing.T) {
	p := launch(t, "bp")
	runToMain(t, p)
	hit := symbol(t, p, "hit")
	if err := p.InsertBreakpoint(SoftwareBreakpoint, hit, 1); err != nil {
		t.Fatal(err)
	}
	r, err := p.Registers(p.Pid())
	if err != nil {
		t.Fatal(err)
	}
	_ = r.SetUint64(regPC, hit)
	if err := p.SetRegisters(p.Pid(), r); err != nil {
		t.Fatal(err)
	}
	resumeAll(t, p)
	ev := wait(t, p)
	if ev.Reason != "swbreak" || pc(t, p, ev.Tid) != hit {
		t.Fatalf("event %+v at %#x, want the breakpoint at %#x hit at once", ev, pc(t, p, ev.Tid), hit)
	}
	// Stopped there now: resuming steps over it. hit then returns
	// straight into main's caller, which exits.
	resumeAll(t, p)
	if ev := wait(t, p); ev.Kind != Exited {
		t.Errorf("after stepping over: %+v, want the exit", ev)
	}
}

func TestLaunchFilesEnvDir(t *testing.T) {
	dir := t.TempDir()
	out, err := os.Create(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	p, err := Launch(LaunchOptions{
		Path:   "sh", // looked up in PATH
		Args:   []string{"sh", "-c", `pwd; echo "$GREETING"`},
		Env:    []string{"GREETING=hello from env", "PATH=/usr/bin:/bin"},
		Dir:    dir,
		Stdout: out,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	resumeAll(t, p)
	for {
		ev := wait(t, p)
		if ev.Kind == Exited {
			if ev.ExitCode != 0 {
				t.Errorf("exit code %d", ev.ExitCode)
			}
			break
		}
		if ev.Kind != SignalStop {
			t.Fatalf("event %+v", ev)
		}
		// sh forks for nothing here, but pass any signal on.
		sig := ev.Signal
		if sig == int(unix.SIGTRAP) {
			sig = 0
		}
		if err := p.Resume([]Action{{Tid: ev.Tid, Signal: sig}, {Tid: -1}}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	want := dir + "\nhello from env\n"
	if string(got) != want {
		t.Errorf("output %q, want %q", got, want)
	}
}

// TestWatchpointInNewThreads: debug registers reach threads created after
// the watchpoint was set.
func TestWatchpointInNewThreads(t *testing.T) {
	requireDebugRegisters(t)
	p := launch(t, "threads")
	runToMain(t, p)
	counter := symbol(t, p, "counter")
	if err := p.InsertBreakpoint(WriteWatchpoint, counter, 4); err != nil {
		t.Fatal(err)
	}
	resumeAll(t, p)
	ev := wait(t, p)
	if ev.Reason != "watch" || ev.WatchAddr != counter || ev.Tid == p.Pid() {
		t.Fatalf("event %+v, want a worker thread's write to %#x", ev, counter)
	}
	if err := p.RemoveBreakpoint(WriteWatchpoint, counter, 4); err != nil {
		t.Fatal(err)
	}
	for {
		resumeAll(t, p)
		ev := wait(t, p)
		if ev.Kind == Exited {
			if ev.ExitCode != 50 {
				t.Errorf("exit code %d", ev.ExitCode)
			}
			return
		}
		// Other threads' writes may have been queued before the removal.
		if ev.Reason != "watch" {
			t.Fatalf("event %+v", ev)
		}
	}
}

// TestStressBreakpointsAndSignals: 8 threads hit one breakpoint 1600 times
// in all and signal themselves 32 times; every hit and every signal is
// reported exactly once and every signal delivered once.
func TestStressBreakpointsAndSignals(t *testing.T) {
	p := launch(t, "stress")
	runToMain(t, p)
	hit := symbol(t, p, "hit")
	if err := p.InsertBreakpoint(SoftwareBreakpoint, hit, 1); err != nil {
		t.Fatal(err)
	}
	hits, signals := 0, 0
	actions := []Action{{Tid: -1}}
	for {
		if err := p.Resume(actions); err != nil {
			t.Fatal(err)
		}
		actions = []Action{{Tid: -1}}
		ev := wait(t, p)
		switch {
		case ev.Kind == Exited:
			if ev.ExitCode != 32 {
				t.Errorf("exit code %d, want 32", ev.ExitCode)
			}
			if hits != 1600 || signals != 32 {
				t.Errorf("%d hits and %d signals, want 1600 and 32", hits, signals)
			}
			return
		case ev.Kind == SignalStop && ev.Reason == "swbreak":
			hits++
			if got := pc(t, p, ev.Tid); got != hit {
				t.Fatalf("breakpoint stop at %#x", got)
			}
		case ev.Kind == SignalStop && ev.Signal == int(unix.SIGUSR1):
			signals++
			actions = []Action{{Tid: ev.Tid, Signal: ev.Signal}, {Tid: -1}}
		default:
			t.Fatalf("event %+v", ev)
		}
	}
}

// TestStressInternalTrapsAndSignals: the in-place step-over path under
// load, with signals arriving while threads are held.
func TestStressInternalTrapsAndSignals(t *testing.T) {
	p := launch(t, "stress")
	runToMain(t, p)
	hit := symbol(t, p, "hit")
	hooks := 0
	p.SetTrapHook(func(s *Stopped) TrapAction {
		hooks++
		return TrapResume
	})
	if err := p.InsertInternalTrap(hit); err != nil {
		t.Fatal(err)
	}
	signals := 0
	actions := []Action{{Tid: -1}}
	for {
		if err := p.Resume(actions); err != nil {
			t.Fatal(err)
		}
		actions = []Action{{Tid: -1}}
		ev := wait(t, p)
		switch {
		case ev.Kind == Exited:
			if ev.ExitCode != 32 {
				t.Errorf("exit code %d, want 32", ev.ExitCode)
			}
			if hooks != 1600 || signals != 32 {
				t.Errorf("%d hook calls and %d signals, want 1600 and 32", hooks, signals)
			}
			return
		case ev.Kind == SignalStop && ev.Signal == int(unix.SIGUSR1):
			signals++
			actions = []Action{{Tid: ev.Tid, Signal: ev.Signal}, {Tid: -1}}
		default:
			t.Fatalf("event %+v", ev)
		}
	}
}

// TestInternalTrapSharedWithGDBBreakpointThreads: with gdb's breakpoint on
// the same address, each hit runs the hook once and is reported; after
// gdb removes its breakpoint, queued reports go stale and the remaining
// hits run silently, never hooking one hit twice.
func TestInternalTrapSharedWithGDBBreakpointThreads(t *testing.T) {
	p := launch(t, "tp")
	runToMain(t, p)
	site := symbol(t, p, "tp_nop")
	hooks := 0
	p.SetTrapHook(func(s *Stopped) TrapAction {
		hooks++
		if s.UserBreakpoint() {
			return TrapReport
		}
		r, err := s.Registers()
		if err != nil {
			return TrapReport
		}
		_ = r.SetUint64(regPC, site+uint64(len(nopInsn))) // emulate the nop
		if err := s.SetRegisters(r); err != nil {
			return TrapReport
		}
		return TrapResume
	})
	if err := p.InsertInternalTrap(site); err != nil {
		t.Fatal(err)
	}
	if err := p.InsertBreakpoint(SoftwareBreakpoint, site, 1); err != nil {
		t.Fatal(err)
	}
	reports := 0
	for {
		resumeAll(t, p)
		ev := wait(t, p)
		if ev.Kind == Exited {
			if ev.ExitCode != 400&0xff {
				t.Errorf("exit code %d", ev.ExitCode)
			}
			break
		}
		if ev.Reason != "swbreak" || pc(t, p, ev.Tid) != site {
			t.Fatalf("event %+v", ev)
		}
		reports++
		if reports == 50 {
			if err := p.RemoveBreakpoint(SoftwareBreakpoint, site, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	if hooks != 400 {
		t.Errorf("hook ran %d times for 400 hits", hooks)
	}
	if reports < 50 || reports > 53 {
		t.Errorf("%d reports, want 50 (plus at most the 3 queued at removal)", reports)
	}
}

func TestStatusSigMask(t *testing.T) {
	status := "Name:\tprog\nSigQ:\t0/1000\nSigPnd:\t0000000000040000\nShdPnd:\t0000000000000001\nSigBlk:\tzz\n"
	tests := []struct {
		field string
		want  uint64
		ok    bool
	}{
		{"SigPnd", 0x40000, true},
		{"ShdPnd", 1, true},
		{"SigBlk", 0, false},
		{"SigIgn", 0, false},
		{"Name", 0, false},
	}
	for _, tt := range tests {
		got, ok := statusSigMask(status, tt.field)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: %#x %v, want %#x %v", tt.field, got, ok, tt.want, tt.ok)
		}
	}
	if bit := uint64(1) << (unix.SIGSTOP - 1); bit != 0x40000 {
		t.Errorf("SIGSTOP bit %#x", bit)
	}
}

func FuzzStatusSigMask(f *testing.F) {
	f.Add("SigPnd:\t0000000000040000\n", "SigPnd")
	f.Add("SigPnd:\n", "SigPnd")
	f.Add("::::", "")
	f.Fuzz(func(t *testing.T, status, field string) {
		v, ok := statusSigMask(status, field)
		if !ok && v != 0 {
			t.Fatalf("failed parse returned %#x", v)
		}
	})
}

// TestInterruptLeaderKeptStopped: with only another thread resumed, the
// interrupt goes to a thread that runs.
func TestInterruptLeaderKeptStopped(t *testing.T) {
	p := launch(t, "sleep")
	runToMain(t, p)
	// Let the sleeper thread start, then stop everything.
	resumeAll(t, p)
	deadline := time.Now().Add(5 * time.Second)
	for len(p.Threads()) < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	p.Interrupt()
	if ev := wait(t, p); ev.Signal != int(unix.SIGINT) {
		t.Fatalf("first interrupt %+v", ev)
	}
	tids := p.Threads()
	if len(tids) != 2 {
		t.Fatalf("threads %v", tids)
	}
	other := tids[1]
	if err := p.Resume([]Action{{Tid: other}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	p.Interrupt()
	ev := wait(t, p)
	if ev.Signal != int(unix.SIGINT) || ev.Tid != other {
		t.Errorf("event %+v, want SIGINT of thread %d", ev, other)
	}
}

// TestStepOverExitGroup: stepping the leader over a breakpoint on an
// exit_group system call, while another thread lives, must not hang (the
// leader's exit is reported only after the other threads are reaped).
func TestStepOverExitGroup(t *testing.T) {
	p := launch(t, "exitgroup")
	runToMain(t, p)
	sc := symbol(t, p, "exit_syscall")
	if err := p.InsertBreakpoint(SoftwareBreakpoint, sc, 1); err != nil {
		t.Fatal(err)
	}
	resumeAll(t, p)
	ev := wait(t, p)
	if ev.Reason != "swbreak" || ev.Tid != p.Pid() {
		t.Fatalf("event %+v", ev)
	}
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
	if ev := wait(t, p); ev.Kind != Exited || ev.ExitCode != 5 {
		t.Errorf("end %+v, want exit 5", ev)
	}
}

// TestCloseWhileWaiting: Close ends a pending Wait with ErrClosed and,
// for a launched program, kills it (explicitly: PTRACE_O_EXITKILL is off
// by default).
func TestCloseWhileWaiting(t *testing.T) {
	prog := testProgram(t)
	p, err := Launch(LaunchOptions{Path: prog, Args: []string{prog, "spin"}})
	if err != nil {
		t.Fatal(err)
	}
	resumeAll(t, p)
	done := make(chan error, 1)
	go func() {
		_, err := p.Wait()
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	p.Close()
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("Wait after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return after Close")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := threadState(p.Pid(), p.Pid())
		if st == 'Z' || st == 'X' {
			// Reap it if it is ours (it is: the tracer thread forked it).
			var ws unix.WaitStatus
			_, _ = unix.Wait4(p.Pid(), &ws, unix.WNOHANG|unix.WALL, nil)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("launched program still alive (state %c) after Close", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := p.Kill(); !errors.Is(err, ErrClosed) {
		t.Errorf("Kill after Close: %v", err)
	}
}

// TestGDBStyleStepOverKeepsOtherHits: gdb steps a thread over a
// breakpoint by removing it, stepping that thread alone and reinserting
// it. Every hit must be reported exactly once. (Hits of other threads
// queued meanwhile go stale and must be hit again; the threads leave a
// spin barrier together to make that likely, though on a loaded machine
// it may not happen in a given run.)
func TestGDBStyleStepOverKeepsOtherHits(t *testing.T) {
	p := launch(t, "barrier")
	runToMain(t, p)
	hit := symbol(t, p, "hit")
	eachBarrierHit(t, p, hit, func(ev StopEvent) {
		// z0, vCont;s:tid, Z0. Other threads' queued events come first.
		if err := p.RemoveBreakpoint(SoftwareBreakpoint, hit, 1); err != nil {
			t.Fatal(err)
		}
		if err := p.Resume([]Action{{Tid: ev.Tid, Step: true}}); err != nil {
			t.Fatal(err)
		}
		if sev := wait(t, p); sev.Tid != ev.Tid || sev.Signal != int(unix.SIGTRAP) {
			t.Fatalf("while stepping: %+v", sev)
		}
		if err := p.InsertBreakpoint(SoftwareBreakpoint, hit, 1); err != nil {
			t.Fatal(err)
		}
	})
}

// eachBarrierHit puts a breakpoint on hit in the "barrier" program (4
// threads x 50 calls) and resumes every thread until it exits with status
// 200, calling step with each breakpoint stop; all 200 hits must be
// reported.
func eachBarrierHit(t *testing.T, p *Process, hit uint64, step func(ev StopEvent)) {
	t.Helper()
	if err := p.InsertBreakpoint(SoftwareBreakpoint, hit, 1); err != nil {
		t.Fatal(err)
	}
	hits := 0
	for {
		resumeAll(t, p)
		ev := wait(t, p)
		if ev.Kind == Exited {
			if ev.ExitCode != 200 {
				t.Errorf("exit code %d, want 200", ev.ExitCode)
			}
			break
		}
		if ev.Reason != "swbreak" {
			t.Fatalf("event %+v", ev)
		}
		hits++
		step(ev)
	}
	if hits != 200 {
		t.Errorf("%d hits reported, want 200 (4 threads × 50)", hits)
	}
}

func TestAllocateScratchAt(t *testing.T) {
	p := launch(t, "bp")
	runToMain(t, p)
	// A page-unaligned address far from everything the program maps:
	// the pages covering [at, at+5000) are mapped, exactly there.
	near, err := p.AllocateScratch(symbol(t, p, "hit"), 4096)
	if err != nil {
		t.Fatal(err)
	}
	const at = 0x3f0000000 + 0x123
	if err := p.AllocateScratchAt(at, 5000); err != nil {
		t.Fatal(err)
	}
	if err := p.WriteMemory(at+4999, []byte{0x5a}); err != nil {
		t.Fatalf("last byte of the area not writable: %v", err)
	}
	buf := make([]byte, 1)
	if n, err := p.ReadMemory(at+4999, buf); n != 1 || buf[0] != 0x5a {
		t.Fatalf("read back %x (%d, %v)", buf, n, err)
	}
	// Mapped already: refused, never mapped over.
	if err := p.AllocateScratchAt(near+10, 16); err == nil {
		t.Fatal("AllocateScratchAt over an existing mapping succeeded")
	}
	if err := p.AllocateScratchAt(at, 0); err == nil {
		t.Fatal("size 0 accepted")
	}
}

func TestWithStoppedSingleSteps(t *testing.T) {
	p := launch(t, "bp")
	runToMain(t, p)
	before, err := p.Registers(p.Pid())
	if err != nil {
		t.Fatal(err)
	}
	var pcs []uint64
	err = p.WithStopped(p.Pid(), func(s *Stopped) error {
		if s.PC() != before.Uint64(regPC) {
			t.Errorf("Stopped.PC %#x, registers say %#x", s.PC(), before.Uint64(regPC))
		}
		for range 3 {
			if err := s.SingleStep(); err != nil {
				return err
			}
			r, err := s.Registers()
			if err != nil {
				return err
			}
			pcs = append(pcs, r.Uint64(regPC))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	after, _ := p.Registers(p.Pid())
	if len(pcs) != 3 || pcs[2] != after.Uint64(regPC) || pcs[0] == before.Uint64(regPC) {
		t.Errorf("pcs after each step %#x, before %#x, after %#x", pcs, before.Uint64(regPC), after.Uint64(regPC))
	}
	if err := p.WithStopped(1<<30, func(*Stopped) error { return nil }); !errors.Is(err, ErrNoThread) {
		t.Errorf("unknown thread: %v, want ErrNoThread", err)
	}
	resumeAll(t, p)
	if ev := wait(t, p); ev.Kind != Exited || ev.ExitCode != 6 {
		t.Errorf("end %+v", ev)
	}
}
