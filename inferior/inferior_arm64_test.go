//go:build arm64

package inferior

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"

	"gotpstub/tdesc"
)

// The arm64 counterparts of inferior_amd64_test.go: registers, hardware
// breakpoints and watchpoints, and code written in A64 machine code.

// TestRegistersRoundTrip: every register of the layout is read (with
// SVE, vg is the vector length), and a general register, a vector
// register (v17 or z17), a predicate register and fpcr written come
// back.
func TestRegistersRoundTrip(t *testing.T) {
	p := launch(t, "bp")
	runToMain(t, p)
	tid := p.Pid()
	r, err := p.Registers(tid)
	if err != nil {
		t.Fatal(err)
	}
	if r.Layout != tdesc.Host() {
		t.Fatalf("layout %p, want the host's", r.Layout)
	}
	for i, v := range r.Valid {
		if !v {
			t.Errorf("register %s not valid", r.Layout.Regs[i].Name)
		}
	}
	vq := r.Layout.VQ
	t.Logf("SVE vector length %d quadwords, %d registers", vq, len(r.Layout.Regs))
	if vq > 0 && r.Uint64(tdesc.AArch64VG) != uint64(2*vq) {
		t.Errorf("vg %d, want %d", r.Uint64(tdesc.AArch64VG), 2*vq)
	}
	if el := (r.Uint64(tdesc.AArch64CPSR) >> 2) & 3; el != 0 {
		t.Errorf("cpsr %#x: exception level %d, want 0", r.Uint64(tdesc.AArch64CPSR), el)
	}
	if sp := r.Uint64(regSP); sp == 0 || sp%16 != 0 {
		t.Errorf("sp %#x", sp)
	}
	if got, want := r.Uint64(regPC), symbol(t, p, "main"); got != want {
		t.Errorf("pc %#x, want main %#x", got, want)
	}
	w := r.Clone()
	_ = w.SetUint64(tdesc.AArch64X0+19, 0x1122334455667788)
	pattern := func(num int) []byte {
		v := make([]byte, w.Layout.Regs[num].Size)
		for i := range v {
			v[i] = byte(i + 1)
		}
		return v
	}
	vectors := []int{tdesc.AArch64V0 + 17} // z17 with SVE
	if vq > 0 {
		vectors = append(vectors, tdesc.AArch64P0+3)
	}
	for _, n := range vectors {
		if err := w.Set(n, pattern(n)); err != nil {
			t.Fatal(err)
		}
	}
	checks := append([]int{tdesc.AArch64X0 + 19, tdesc.AArch64FPCR, regPC, regSP, tdesc.AArch64CPSR}, vectors...)
	_ = w.SetUint64(tdesc.AArch64FPCR, 3<<22) // round towards zero
	if err := p.SetRegisters(tid, w); err != nil {
		t.Fatal(err)
	}
	back, err := p.Registers(tid)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range checks {
		if string(back.Get(n)) != string(w.Get(n)) {
			t.Errorf("%s: wrote % x, read % x", w.Layout.Regs[n].Name, w.Get(n), back.Get(n))
		}
	}
	if _, err := p.Registers(12345678); !errors.Is(err, ErrNoThread) {
		t.Errorf("Registers of a bogus thread: %v", err)
	}
}

// TestSoftwareBreakpointInsn: a software breakpoint is brk #0, four
// bytes, hidden from reads; the hit leaves the pc on it.
func TestSoftwareBreakpointInsn(t *testing.T) {
	p := launch(t, "bp")
	runToMain(t, p)
	hit := symbol(t, p, "hit")
	if err := p.InsertBreakpoint(SoftwareBreakpoint, hit+2, 4); err == nil {
		t.Error("a breakpoint at an unaligned address was accepted")
	}
	if err := p.InsertBreakpoint(SoftwareBreakpoint, hit, 4); err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, 4)
	if _, err := p.readRawForTest(hit, raw); err != nil || binary.LittleEndian.Uint32(raw) != 0xd4200000 {
		t.Errorf("memory at the breakpoint % x (%v), want brk #0", raw, err)
	}
	resumeAll(t, p)
	ev := wait(t, p)
	if ev.Kind != SignalStop || ev.Reason != "swbreak" || pc(t, p, ev.Tid) != hit {
		t.Fatalf("event %+v at pc %#x, want swbreak at %#x", ev, pc(t, p, ev.Tid), hit)
	}
}

// stepOverHardware does what gdb does after a hardware breakpoint or
// watchpoint hit on arm64, where the instruction has not run: remove it,
// single-step the thread, put it back (unless reinsert is false).
func stepOverHardware(t *testing.T, p *Process, tid int, kind BreakpointKind, addr uint64, size int, reinsert bool) {
	t.Helper()
	if err := p.RemoveBreakpoint(kind, addr, size); err != nil {
		t.Fatal(err)
	}
	if err := p.Resume([]Action{{Tid: tid, Step: true}, {Tid: -1, Stop: true}}); err != nil {
		t.Fatal(err)
	}
	if ev := wait(t, p); ev.Kind != SignalStop || ev.Signal != int(unix.SIGTRAP) || ev.Tid != tid {
		t.Fatalf("step: %+v", ev)
	}
	if reinsert {
		if err := p.InsertBreakpoint(kind, addr, size); err != nil {
			t.Fatal(err)
		}
	}
}

func TestHardwareBreakpoint(t *testing.T) {
	requireDebugRegisters(t)
	p := launch(t, "bp")
	runToMain(t, p)
	hit := symbol(t, p, "hit")
	if err := p.InsertBreakpoint(HardwareBreakpoint, hit, 4); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		resumeAll(t, p)
		ev := wait(t, p)
		if ev.Kind != SignalStop || ev.Reason != "hwbreak" {
			t.Fatalf("hit %d: %+v", i, ev)
		}
		r, err := p.Registers(ev.Tid)
		if err != nil {
			t.Fatal(err)
		}
		if r.Uint64(regPC) != hit || r.Uint64(regArg0) != uint64(i) {
			t.Fatalf("hit %d: pc %#x x0 %d, want %#x %d", i, r.Uint64(regPC), r.Uint64(regArg0), hit, i)
		}
		stepOverHardware(t, p, ev.Tid, HardwareBreakpoint, hit, 4, i < 3)
	}
	resumeAll(t, p)
	if ev := wait(t, p); ev.Kind != Exited || ev.ExitCode != 6 {
		t.Errorf("end %+v", ev)
	}
}

// TestWatchpoint: a write watchpoint stops the thread before the store
// (which runs once stepped over); read watchpoints exist on arm64.
func TestWatchpoint(t *testing.T) {
	requireDebugRegisters(t)
	p := launch(t, "watch")
	runToMain(t, p)
	watched := symbol(t, p, "watched")
	if err := p.InsertBreakpoint(ReadWatchpoint, watched, 8); err != nil {
		t.Errorf("read watchpoint: %v", err)
	} else if err := p.RemoveBreakpoint(ReadWatchpoint, watched, 8); err != nil {
		t.Error(err)
	}
	if err := p.InsertBreakpoint(WriteWatchpoint, watched, 8); err != nil {
		t.Fatal(err)
	}
	resumeAll(t, p)
	ev := wait(t, p)
	if ev.Kind != SignalStop || ev.Reason != "watch" || ev.WatchAddr != watched {
		t.Fatalf("event %+v, want watch at %#x", ev, watched)
	}
	stepOverHardware(t, p, ev.Tid, WriteWatchpoint, watched, 8, false)
	var v [8]byte
	if _, err := p.ReadMemory(watched, v[:]); err != nil || binary.LittleEndian.Uint64(v[:]) != 0x1234 {
		t.Errorf("watched = % x, %v", v, err)
	}
	resumeAll(t, p)
	if ev := wait(t, p); ev.Kind != Exited || ev.ExitCode != 0x34 {
		t.Errorf("end %+v", ev)
	}
}

// TestDebugRegisterExhaustion: as many doublewords can be watched as the
// CPU has watchpoint registers, no more; freeing one frees a register.
func TestDebugRegisterExhaustion(t *testing.T) {
	p := launch(t, "bp")
	watched := symbol(t, p, "watched")
	if err := p.do(p.learnSlots); err != nil {
		t.Fatal(err)
	}
	_, nWatch := slotCounts()
	if nWatch == 0 {
		if err := p.InsertBreakpoint(WriteWatchpoint, watched, 8); !errors.Is(err, ErrNoDebugHardware) {
			t.Errorf("no watchpoint registers: %v, want ErrNoDebugHardware", err)
		}
		t.Skip("this CPU reports no watchpoint registers")
	}
	for i := 0; i < nWatch; i++ {
		if err := p.InsertBreakpoint(AccessWatchpoint, watched+64*uint64(i), 8); err != nil {
			t.Fatalf("watchpoint %d of %d: %v", i, nWatch, err)
		}
	}
	if err := p.InsertBreakpoint(WriteWatchpoint, watched+4096, 1); !errors.Is(err, ErrNoDebugRegister) {
		t.Errorf("one more: %v, want ErrNoDebugRegister", err)
	}
	if err := p.RemoveBreakpoint(AccessWatchpoint, watched+64, 8); err != nil {
		t.Fatal(err)
	}
	if err := p.InsertBreakpoint(WriteWatchpoint, watched+4096, 1); err != nil {
		t.Errorf("after freeing one: %v", err)
	}
}

func TestChunksFor(t *testing.T) {
	tests := []struct {
		kind BreakpointKind
		addr uint64
		size int
		want string // addr/bas/want per slot
	}{
		{WriteWatchpoint, 0x1000, 8, "[0x1000/0xff/0x1000]"},
		{WriteWatchpoint, 0x1001, 4, "[0x1000/0x1e/0x1001]"},
		{AccessWatchpoint, 0x1006, 4, "[0x1000/0xc0/0x1006 0x1008/0x3/0x1008]"},
		{ReadWatchpoint, 0x1000, 16, "[0x1000/0xff/0x1000 0x1008/0xff/0x1008]"},
		{HardwareBreakpoint, 0x1004, 4, "[0x1004/0xf/0x1004]"},
	}
	for _, tt := range tests {
		got, err := chunksFor(tt.kind, tt.addr, tt.size)
		if err != nil {
			t.Errorf("chunksFor(%v, %#x, %d): %v", tt.kind, tt.addr, tt.size, err)
			continue
		}
		var parts []string
		for _, c := range got {
			parts = append(parts, fmt.Sprintf("%#x/%#x/%#x", c.addr, c.bas, c.want))
		}
		if s := fmt.Sprint(parts); s != tt.want {
			t.Errorf("chunksFor(%v, %#x, %d) = %s, want %s", tt.kind, tt.addr, tt.size, s, tt.want)
		}
	}
	if _, err := chunksFor(HardwareBreakpoint, 0x1002, 4); !errors.Is(err, ErrUnsupported) {
		t.Errorf("unaligned hardware breakpoint: %v", err)
	}
}

// TestAllocateScratch: code written into scratch memory mapped by an
// injected mmap (svc #0) runs: mov w0, #42 ; brk #0.
func TestAllocateScratch(t *testing.T) {
	p := launch(t, "bp")
	runToMain(t, p)
	hit := symbol(t, p, "hit")
	before, _ := p.Registers(p.Pid())
	addr, err := p.AllocateScratch(hit, 100)
	if err != nil {
		t.Fatal(err)
	}
	d := int64(addr) - int64(hit)
	if d < -(1<<31) || d > 1<<31 {
		t.Errorf("scratch %#x too far from %#x", addr, hit)
	}
	code := binary.LittleEndian.AppendUint32(nil, 0x52800540) // mov w0, #42
	code = binary.LittleEndian.AppendUint32(code, 0xd4200000) // brk #0
	if err := p.WriteMemory(addr, code); err != nil {
		t.Fatal(err)
	}
	after, _ := p.Registers(p.Pid())
	if string(after.Data) != string(before.Data) {
		t.Error("registers changed by the injected mmap")
	}
	r := after.Clone()
	_ = r.SetUint64(regPC, addr)
	if err := p.SetRegisters(p.Pid(), r); err != nil {
		t.Fatal(err)
	}
	resumeAll(t, p)
	ev := wait(t, p)
	if ev.Signal != int(unix.SIGTRAP) {
		t.Fatalf("event %+v", ev)
	}
	got, _ := p.Registers(p.Pid())
	if got.Uint64(regRet) != 42 || got.Uint64(regPC) != addr+4 {
		t.Errorf("x0 %#x pc %#x, want 42 at %#x", got.Uint64(regRet), got.Uint64(regPC), addr+4)
	}
	if err := p.SetRegisters(p.Pid(), after); err != nil {
		t.Fatal(err)
	}
	resumeAll(t, p)
	if ev := wait(t, p); ev.Kind != Exited || ev.ExitCode != 6 {
		t.Errorf("end %+v", ev)
	}
}

// TestHardwareBreakpointMoved: gdb's "delete" then "hbreak elsewhere"
// while stopped at a hardware breakpoint reuses its register pair; the
// thread must run on to the new address, not hit the old one again,
// even though gdb sent the first Z1 twice (it does, after ld.so's
// event) and its z1 once.
func TestHardwareBreakpointMoved(t *testing.T) {
	requireDebugRegisters(t)
	p := launch(t, "bp")
	main := symbol(t, p, "main")
	hit := symbol(t, p, "hit")
	for i := 0; i < 2; i++ {
		if err := p.InsertBreakpoint(HardwareBreakpoint, main, 4); err != nil {
			t.Fatal(err)
		}
	}
	// gdb steps the thread first (over its breakpoint in ld.so).
	if err := p.Resume([]Action{{Tid: p.Pid(), Step: true}}); err != nil {
		t.Fatal(err)
	}
	if ev := wait(t, p); ev.Signal != int(unix.SIGTRAP) {
		t.Fatalf("step: %+v", ev)
	}
	resumeAll(t, p)
	ev := wait(t, p)
	if ev.Reason != "hwbreak" || pc(t, p, ev.Tid) != main {
		t.Fatalf("first stop %+v at %#x, want hwbreak at main %#x", ev, pc(t, p, ev.Tid), main)
	}
	if err := p.RemoveBreakpoint(HardwareBreakpoint, main, 4); err != nil {
		t.Fatal(err)
	}
	if err := p.InsertBreakpoint(HardwareBreakpoint, hit, 4); err != nil {
		t.Fatal(err)
	}
	resumeAll(t, p)
	ev = wait(t, p)
	if got := pc(t, p, ev.Tid); ev.Reason != "hwbreak" || got != hit {
		si, _ := p.Siginfo(ev.Tid)
		t.Fatalf("second stop %+v at %#x (siginfo % x), want hwbreak at hit %#x", ev, got, si[:24], hit)
	}
}
