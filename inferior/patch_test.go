//go:build amd64

package inferior

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"gotpstub/tdesc"
)

// procMem reads n bytes at addr straight from /proc/PID/mem, bypassing the
// package.
func procMem(t *testing.T, p *Process, addr uint64, n int) []byte {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/mem", p.Pid()))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, int64(addr)); err != nil {
		t.Fatalf("reading /proc/%d/mem at %#x: %v", p.Pid(), addr, err)
	}
	return buf
}

// with returns a copy of base with the given bytes replaced.
func with(base []byte, at map[int]byte) []byte {
	out := append([]byte(nil), base...)
	for i, b := range at {
		out[i] = b
	}
	return out
}

// TestPatchShadowing layers code patches, gdb's writes and breakpoints in
// a stopped program and checks, after each step, the bytes really in
// memory (/proc/PID/mem) and the bytes ReadMemory shows gdb.
func TestPatchShadowing(t *testing.T) {
	p := launch(t, "bp")
	runToMain(t, p)
	hit := symbol(t, p, "hit")
	const window = 8
	orig := procMem(t, p, hit, window)
	patch := []byte{0xe9, 0x11, 0x22, 0x33, 0x44} // at hit+1: window bytes 1…5
	patched := func(base []byte) []byte {
		out := append([]byte(nil), base...)
		copy(out[1:6], patch)
		return out
	}
	written := with(orig, map[int]byte{0: 0xa0, 1: 0xa1, 2: 0xa2}) // after the straddling write
	written2 := with(written, map[int]byte{2: 0xb2})               // after the write under a breakpoint

	steps := []struct {
		name      string
		op        func() error
		wantErr   error // nil: must succeed; errAny: any error
		wantRaw   []byte
		wantShown []byte
	}{
		{"insert patch", func() error { return p.InsertPatch(hit+1, patch) }, nil, patched(orig), orig},
		{"overlapping patch inside", func() error { return p.InsertPatch(hit+3, []byte{1, 2, 3, 4}) }, ErrPatchOverlap, patched(orig), orig},
		{"overlapping patch before", func() error { return p.InsertPatch(hit-2, []byte{1, 2, 3, 4}) }, ErrPatchOverlap, patched(orig), orig},
		{"empty patch", func() error { return p.InsertPatch(hit+7, nil) }, errAny, patched(orig), orig},
		{"adjacent patch", func() error {
			if err := p.InsertPatch(hit+6, []byte{0x90, 0x90}); err != nil {
				return err
			}
			if got := procMem(t, p, hit+6, 2); !bytes.Equal(got, []byte{0x90, 0x90}) {
				return fmt.Errorf("adjacent patch not in memory: % x", got)
			}
			return p.RemovePatch(hit + 6)
		}, nil, patched(orig), orig},
		{"write straddling the patch start", func() error { return p.WriteMemory(hit, []byte{0xa0, 0xa1, 0xa2}) }, nil,
			with(patched(orig), map[int]byte{0: 0xa0}), written},
		{"breakpoint inside the patch", func() error { return p.InsertBreakpoint(SoftwareBreakpoint, hit+2, 1) }, nil,
			with(patched(written), map[int]byte{2: 0xcc}), written},
		{"write under breakpoint and patch", func() error { return p.WriteMemory(hit+2, []byte{0xb2}) }, nil,
			with(patched(written), map[int]byte{2: 0xcc}), written2},
		{"remove the breakpoint: patch byte back", func() error { return p.RemoveBreakpoint(SoftwareBreakpoint, hit+2, 1) }, nil,
			patched(written2), written2},
		{"another breakpoint inside", func() error { return p.InsertBreakpoint(SoftwareBreakpoint, hit+3, 1) }, nil,
			with(patched(written2), map[int]byte{3: 0xcc}), written2},
		{"remove the patch under the breakpoint", func() error { return p.RemovePatch(hit + 1) }, nil,
			with(written2, map[int]byte{3: 0xcc}), written2},
		{"remove that breakpoint: original byte back", func() error { return p.RemoveBreakpoint(SoftwareBreakpoint, hit+3, 1) }, nil,
			written2, written2},
		{"breakpoint at the patch start first", func() error { return p.InsertBreakpoint(SoftwareBreakpoint, hit+1, 1) }, nil,
			with(written2, map[int]byte{1: 0xcc}), written2},
		{"patch over the breakpoint", func() error { return p.InsertPatch(hit+1, patch) }, nil,
			with(patched(written2), map[int]byte{1: 0xcc}), written2},
		{"remove the breakpoint over the patch", func() error { return p.RemoveBreakpoint(SoftwareBreakpoint, hit+1, 1) }, nil,
			patched(written2), written2},
		{"remove the patch", func() error { return p.RemovePatch(hit + 1) }, nil, written2, written2},
		{"remove it again", func() error { return p.RemovePatch(hit + 1) }, errAny, written2, written2},
		{"originals of the wrong length", func() error { return p.InsertPatchOver(hit+1, patch, written2[1:3]) }, errAny, written2, written2},
		{"breakpoint before a patch given its originals", func() error { return p.InsertBreakpoint(SoftwareBreakpoint, hit+2, 1) }, nil,
			with(written2, map[int]byte{2: 0xcc}), written2},
		{"patch given its originals, over the breakpoint", func() error { return p.InsertPatchOver(hit+1, patch, written2[1:6]) }, nil,
			with(patched(written2), map[int]byte{2: 0xcc}), written2},
		{"remove that breakpoint: patch byte back", func() error { return p.RemoveBreakpoint(SoftwareBreakpoint, hit+2, 1) }, nil,
			patched(written2), written2},
		{"remove the patch given its originals", func() error { return p.RemovePatch(hit + 1) }, nil, written2, written2},
		{"restore the program", func() error { return p.WriteMemory(hit, orig) }, nil, orig, orig},
	}
	for _, s := range steps {
		err := s.op()
		switch {
		case s.wantErr == nil && err != nil:
			t.Fatalf("%s: %v", s.name, err)
		case s.wantErr != nil && err == nil:
			t.Fatalf("%s: succeeded, want an error", s.name)
		case s.wantErr != nil && s.wantErr != errAny && !errors.Is(err, s.wantErr):
			t.Fatalf("%s: error %v, want %v", s.name, err, s.wantErr)
		}
		if raw := procMem(t, p, hit, window); !bytes.Equal(raw, s.wantRaw) {
			t.Fatalf("%s: memory % x, want % x", s.name, raw, s.wantRaw)
		}
		shown := make([]byte, window)
		if n, err := p.ReadMemory(hit, shown); err != nil || n != window {
			t.Fatalf("%s: ReadMemory: %d, %v", s.name, n, err)
		}
		if !bytes.Equal(shown, s.wantShown) {
			t.Fatalf("%s: ReadMemory shows % x, want % x", s.name, shown, s.wantShown)
		}
		// A read starting inside the patched window shows the same.
		part := make([]byte, 3)
		if _, err := p.ReadMemory(hit+2, part); err != nil || !bytes.Equal(part, s.wantShown[2:5]) {
			t.Fatalf("%s: ReadMemory at +2 shows % x (%v), want % x", s.name, part, err, s.wantShown[2:5])
		}
	}
	resumeAll(t, p)
	if ev := wait(t, p); ev.Kind != Exited || ev.ExitCode != 6 {
		t.Errorf("end %+v, want exit 6", ev)
	}
}

// errAny marks a step that must fail, whatever the error.
var errAny = errors.New("any error")

// rel32 returns the displacement from the end of an instruction at next
// to target, failing the test when it does not fit.
func rel32(t *testing.T, next, target uint64) []byte {
	t.Helper()
	d := int64(target - next)
	if d != int64(int32(d)) {
		t.Fatalf("%#x is out of rel32 reach of %#x", target, next)
	}
	return binary.LittleEndian.AppendUint32(nil, uint32(int32(d)))
}

// jumpPatch writes pad code in scratch memory near at and returns the
// 5-byte jmp rel32 from at to it.
func jumpPatch(t *testing.T, p *Process, at uint64, pad func(base uint64) []byte) []byte {
	t.Helper()
	scratch, err := p.AllocateScratch(at, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WriteMemory(scratch, pad(scratch)); err != nil {
		t.Fatal(err)
	}
	return append([]byte{0xe9}, rel32(t, at+5, scratch)...)
}

// TestPatchExecutes patches hit(n) (counter += n) with a jump to code
// that adds n twice and returns: main's exit code (the counter) says
// which of the three calls ran the patch. Breakpoints layered on the
// patch must execute the patch's jump when stepped over.
func TestPatchExecutes(t *testing.T) {
	tests := []struct {
		name           string
		bpBeforePatch  bool // gdb's breakpoint at hit inserted before the patch
		bpAfterPatch   bool // … or after it
		removePatchAt1 bool // remove the patch at the first breakpoint stop
		wantStops      int
		wantExit       int
	}{
		{name: "patch only", wantExit: 12},
		{name: "breakpoint over the patch", bpAfterPatch: true, wantStops: 3, wantExit: 12},
		{name: "patch over the breakpoint", bpBeforePatch: true, wantStops: 3, wantExit: 12},
		{name: "patch removed under the breakpoint", bpAfterPatch: true, removePatchAt1: true, wantStops: 3, wantExit: 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := launch(t, "bp")
			runToMain(t, p)
			hit := symbol(t, p, "hit")
			counter := symbol(t, p, "counter")
			orig := procMem(t, p, hit, 5)
			code := jumpPatch(t, p, hit, func(base uint64) []byte {
				var pad []byte
				for i := 0; i < 2; i++ { // add %edi, counter(%rip)
					pad = append(pad, 0x01, 0x3d)
					pad = append(pad, rel32(t, base+uint64(len(pad))+4, counter)...)
				}
				return append(pad, 0xc3) // ret
			})
			if tc.bpBeforePatch {
				if err := p.InsertBreakpoint(SoftwareBreakpoint, hit, 1); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.InsertPatch(hit, code); err != nil {
				t.Fatal(err)
			}
			if tc.bpAfterPatch {
				if err := p.InsertBreakpoint(SoftwareBreakpoint, hit, 1); err != nil {
					t.Fatal(err)
				}
			}
			stops := 0
			for {
				resumeAll(t, p)
				ev := wait(t, p)
				if ev.Kind == Exited {
					if ev.ExitCode != tc.wantExit {
						t.Errorf("exit code %d, want %d", ev.ExitCode, tc.wantExit)
					}
					break
				}
				if ev.Reason != "swbreak" || pc(t, p, ev.Tid) != hit {
					t.Fatalf("event %+v at %#x", ev, pc(t, p, ev.Tid))
				}
				stops++
				shown := make([]byte, 5)
				if _, err := p.ReadMemory(hit, shown); err != nil || !bytes.Equal(shown, orig) {
					t.Errorf("stop %d: gdb sees % x (%v), want the original % x", stops, shown, err, orig)
				}
				if stops == 1 && tc.removePatchAt1 {
					if err := p.RemovePatch(hit); err != nil {
						t.Fatal(err)
					}
					if raw := procMem(t, p, hit, 5); !bytes.Equal(raw, with(orig, map[int]byte{0: 0xcc})) {
						t.Errorf("after removing the patch: % x, want cc then % x", raw, orig[1:])
					}
				}
			}
			if stops != tc.wantStops {
				t.Errorf("%d breakpoint stops, want %d", stops, tc.wantStops)
			}
		})
	}
}

// TestPatchRemovedInForkChild: a forked child (not debugged) gets the
// original code back. The patch makes hit(1) — the child's call — exit
// with 4, so main (the parent) returns 11 only if the child ran the
// original hit and exited 3.
func TestPatchRemovedInForkChild(t *testing.T) {
	p := launch(t, "fork")
	runToMain(t, p)
	hit := symbol(t, p, "hit")
	code := jumpPatch(t, p, hit, func(uint64) []byte {
		return []byte{
			0x83, 0xff, 0x01, // cmp $1, %edi
			0x75, 0x0c, // jne ret
			0xb8, 0xe7, 0, 0, 0, // mov $231 (exit_group), %eax
			0xbf, 0x04, 0, 0, 0, // mov $4, %edi
			0x0f, 0x05, // syscall
			0xc3, // ret
		}
	})
	if err := p.InsertPatch(hit, code); err != nil {
		t.Fatal(err)
	}
	// gdb's breakpoint on the patch too: the child must get the original
	// byte there, not the patch's the breakpoint saved.
	if err := p.InsertBreakpoint(SoftwareBreakpoint, hit, 1); err != nil {
		t.Fatal(err)
	}
	if raw := procMem(t, p, hit, 5); !bytes.Equal(raw, with(code, map[int]byte{0: 0xcc})) {
		t.Fatalf("parent memory % x, want the patch", raw)
	}
	resumeAll(t, p)
	ev := wait(t, p)
	parentHits := 0
	for ev.Kind == SignalStop {
		sig := 0
		switch {
		case ev.Signal == int(unix.SIGCHLD):
			sig = ev.Signal
		case ev.Reason == "swbreak" && ev.Tid == p.Pid():
			parentHits++
		default:
			t.Fatalf("event %+v", ev)
		}
		if err := p.Resume([]Action{{Tid: ev.Tid, Signal: sig}, {Tid: -1}}); err != nil {
			t.Fatal(err)
		}
		ev = wait(t, p)
	}
	if parentHits != 1 {
		t.Errorf("parent hit the breakpoint %d times, want 1 (hit(2))", parentHits)
	}
	if ev.Kind != Exited || ev.ExitCode != 11 {
		t.Errorf("end %+v, want exit 11 (the child ran the original code)", ev)
	}
}

// TestFaultHook: the program loads from address 16 at fault_insn through
// a function pointer; a hook sending the thread to fault_recover makes
// the load return -1 and the program exit normally.
func TestFaultHook(t *testing.T) {
	tests := []struct {
		name     string
		hook     bool // set a fault hook
		redirect bool // the hook takes the fault
		step     int  // 0: continue; 1: step from a breakpoint at fault_insn; 2: step there with no breakpoint
		wantExit int  // 0: a SIGSEGV stop is reported
	}{
		{name: "no hook"},
		{name: "hook declines", hook: true},
		{name: "hook redirects", hook: true, redirect: true, wantExit: 21},
		{name: "step over breakpoint, redirected", hook: true, redirect: true, step: 1, wantExit: 21},
		{name: "step, redirected", hook: true, redirect: true, step: 2, wantExit: 21},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			prog := testProgram(t)
			outPath := filepath.Join(t.TempDir(), "out")
			out, err := os.Create(outPath)
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()
			p, err := Launch(LaunchOptions{Path: prog, Args: []string{prog, "fault"}, Stdout: out})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = p.Kill()
				p.Close()
			})
			runToMain(t, p)
			insn := symbol(t, p, "fault_insn")
			recoverPC := symbol(t, p, "fault_recover")
			type call struct {
				tid  int
				pc   uint64
				sig  int
				addr uint64
			}
			var calls []call
			if tc.hook {
				p.SetFaultHook(func(tid int, pc uint64, sig int, addr uint64) (uint64, bool) {
					calls = append(calls, call{tid: tid, pc: pc, sig: sig, addr: addr})
					return recoverPC, tc.redirect
				})
			}
			if tc.step > 0 {
				if err := p.InsertBreakpoint(SoftwareBreakpoint, insn, 1); err != nil {
					t.Fatal(err)
				}
				resumeAll(t, p)
				if ev := wait(t, p); ev.Reason != "swbreak" || pc(t, p, ev.Tid) != insn {
					t.Fatalf("event %+v, want the breakpoint at fault_insn", ev)
				}
				if tc.step == 2 {
					if err := p.RemoveBreakpoint(SoftwareBreakpoint, insn, 1); err != nil {
						t.Fatal(err)
					}
				}
				if err := p.Resume([]Action{{Tid: p.Pid(), Step: true}}); err != nil {
					t.Fatal(err)
				}
				ev := wait(t, p)
				if ev.Signal != int(unix.SIGTRAP) || pc(t, p, ev.Tid) != recoverPC {
					t.Fatalf("step: %+v at %#x, want SIGTRAP at fault_recover %#x", ev, pc(t, p, ev.Tid), recoverPC)
				}
				if tc.step == 1 {
					if err := p.RemoveBreakpoint(SoftwareBreakpoint, insn, 1); err != nil {
						t.Fatal(err)
					}
				}
			}
			resumeAll(t, p)
			ev := wait(t, p)
			if tc.wantExit == 0 {
				if ev.Kind != SignalStop || ev.Signal != int(unix.SIGSEGV) || pc(t, p, ev.Tid) != insn {
					t.Fatalf("event %+v, want SIGSEGV at fault_insn", ev)
				}
			} else if ev.Kind != Exited || ev.ExitCode != tc.wantExit {
				t.Fatalf("event %+v, want exit %d", ev, tc.wantExit)
			}
			wantCalls := 0
			if tc.hook {
				wantCalls = 1
			}
			if len(calls) != wantCalls {
				t.Fatalf("hook called %d times, want %d", len(calls), wantCalls)
			}
			if wantCalls == 1 {
				want := call{tid: p.Pid(), pc: insn, sig: int(unix.SIGSEGV), addr: 16}
				if calls[0] != want {
					t.Errorf("hook got %+v, want %+v", calls[0], want)
				}
			}
			if tc.wantExit != 0 {
				b, err := os.ReadFile(outPath)
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(string(b), "fault_load: -1") {
					t.Errorf("program printed %q", b)
				}
			}
		})
	}
}

// TestRelocatePCs moves a thread stopped at the faulting load to the
// recovery code: the program then never faults.
func TestRelocatePCs(t *testing.T) {
	p := launch(t, "fault")
	runToMain(t, p)
	insn := symbol(t, p, "fault_insn")
	recoverPC := symbol(t, p, "fault_recover")
	if err := p.InsertBreakpoint(SoftwareBreakpoint, insn, 1); err != nil {
		t.Fatal(err)
	}
	resumeAll(t, p)
	if ev := wait(t, p); ev.Reason != "swbreak" {
		t.Fatalf("event %+v", ev)
	}
	seen := map[int]uint64{}
	err := p.RelocatePCs(func(tid int, pc uint64) (uint64, bool) {
		seen[tid] = pc
		return recoverPC, pc == insn
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || seen[p.Pid()] != insn {
		t.Errorf("relocation offered %v, want {%d: %#x}", seen, p.Pid(), insn)
	}
	if got := pc(t, p, p.Pid()); got != recoverPC {
		t.Errorf("pc %#x after relocation, want %#x", got, recoverPC)
	}
	// Declining leaves the pc alone.
	if err := p.RelocatePCs(func(int, uint64) (uint64, bool) { return insn, false }); err != nil {
		t.Fatal(err)
	}
	if got := pc(t, p, p.Pid()); got != recoverPC {
		t.Errorf("pc %#x after a declined relocation, want %#x", got, recoverPC)
	}
	resumeAll(t, p)
	if ev := wait(t, p); ev.Kind != Exited || ev.ExitCode != 21 {
		t.Errorf("end %+v, want exit 21", ev)
	}
}

// TestRelocatePCsThreads: every stopped thread is offered, and a running
// process is refused.
func TestRelocatePCsThreads(t *testing.T) {
	p := launch(t, "threads")
	runToMain(t, p)
	hit := symbol(t, p, "hit")
	if err := p.InsertBreakpoint(SoftwareBreakpoint, hit, 1); err != nil {
		t.Fatal(err)
	}
	resumeAll(t, p)
	if ev := wait(t, p); ev.Reason != "swbreak" {
		t.Fatalf("event %+v", ev)
	}
	want := map[int]uint64{}
	for _, tid := range p.Threads() {
		want[tid] = pc(t, p, tid)
	}
	got := map[int]uint64{}
	if err := p.RelocatePCs(func(tid int, pc uint64) (uint64, bool) {
		got[tid] = pc
		return 0, false
	}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || len(want) < 2 {
		t.Errorf("offered %v, want %v", got, want)
	}
	if err := p.RemoveBreakpoint(SoftwareBreakpoint, hit, 1); err != nil {
		t.Fatal(err)
	}

	s := launch(t, "sleep")
	resumeAll(t, s)
	called := false
	err := s.RelocatePCs(func(int, uint64) (uint64, bool) { called = true; return 0, false })
	if !errors.Is(err, ErrRunning) || called {
		t.Errorf("running process: err %v, f called %v; want ErrRunning and no call", err, called)
	}
	s.Interrupt()
	if ev := wait(t, s); ev.Signal != int(unix.SIGINT) {
		t.Errorf("interrupt: %+v", ev)
	}
}

// TestAddTrapHookChain: added hooks are tried in order before
// SetTrapHook's; the first to claim a trap decides.
func TestAddTrapHookChain(t *testing.T) {
	tests := []struct {
		name      string
		claims    []bool // the added hooks' answers
		setHook   bool
		wantCalls string // per hit
		wantEnd   string // "exit" (6) or "report" (SIGTRAP at hit)
	}{
		{name: "first claims", claims: []bool{true, true}, setHook: true, wantCalls: "0", wantEnd: "exit"},
		{name: "second claims", claims: []bool{false, true}, setHook: true, wantCalls: "01", wantEnd: "exit"},
		{name: "none claims, set hook", claims: []bool{false, false}, setHook: true, wantCalls: "01S", wantEnd: "exit"},
		{name: "set hook alone", setHook: true, wantCalls: "S", wantEnd: "exit"},
		{name: "none claims, no set hook", claims: []bool{false}, wantCalls: "0", wantEnd: "report"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := launch(t, "bp")
			runToMain(t, p)
			hit := symbol(t, p, "hit")
			var calls strings.Builder
			for i, claim := range tc.claims {
				p.AddTrapHook(func(s *Stopped) (TrapAction, bool) {
					fmt.Fprint(&calls, i)
					return TrapResume, claim
				})
			}
			if tc.setHook {
				p.SetTrapHook(func(s *Stopped) TrapAction {
					calls.WriteString("S")
					return TrapResume
				})
			}
			if err := p.InsertInternalTrap(hit); err != nil {
				t.Fatal(err)
			}
			resumeAll(t, p)
			ev := wait(t, p)
			switch tc.wantEnd {
			case "exit":
				if ev.Kind != Exited || ev.ExitCode != 6 {
					t.Fatalf("end %+v, want exit 6", ev)
				}
				if want := strings.Repeat(tc.wantCalls, 3); calls.String() != want {
					t.Errorf("hook calls %q, want %q", calls.String(), want)
				}
			case "report":
				if ev.Kind != SignalStop || ev.Signal != int(unix.SIGTRAP) || pc(t, p, ev.Tid) != hit {
					t.Fatalf("event %+v, want SIGTRAP at hit", ev)
				}
				if calls.String() != tc.wantCalls {
					t.Errorf("hook calls %q, want %q", calls.String(), tc.wantCalls)
				}
			}
		})
	}
}

// TestTrapHookMovingPCStopsNoOtherThread: a hook that moves the pc off
// the trap resumes only the trapping thread: no stop of every thread
// (stopAll) for 400 hits by four threads. A hook leaving the pc on the
// trap needs them (the step in place), which shows the count is real.
func TestTrapHookMovingPCStopsNoOtherThread(t *testing.T) {
	tests := []struct {
		name         string
		movePC       bool
		wantStopAlls func(n int) bool
	}{
		{"hook moves the pc", true, func(n int) bool { return n == 0 }},
		{"hook leaves the pc on the trap", false, func(n int) bool { return n > 0 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := launch(t, "tp")
			runToMain(t, p)
			site := symbol(t, p, "tp_nop")
			hits := 0
			p.AddTrapHook(func(s *Stopped) (TrapAction, bool) {
				if s.PC() != site {
					return TrapReport, false
				}
				hits++
				if tc.movePC {
					r, err := s.Registers()
					if err != nil {
						return TrapReport, true
					}
					_ = r.SetUint64(tdesc.RIP, site+1) // emulate the nop
					if err := s.SetRegisters(r); err != nil {
						return TrapReport, true
					}
				}
				return TrapResume, true
			})
			if err := p.InsertInternalTrap(site); err != nil {
				t.Fatal(err)
			}
			_ = p.do(func() error { p.stopAllCalls = 0; return nil })
			resumeAll(t, p)
			ev := wait(t, p)
			if ev.Kind != Exited || ev.ExitCode != 400&0xff {
				t.Fatalf("end %+v", ev)
			}
			var n int
			_ = p.do(func() error { n = p.stopAllCalls; return nil })
			if hits != 400 || !tc.wantStopAlls(n) {
				t.Errorf("%d hits, %d stops of every thread", hits, n)
			}
		})
	}
}
