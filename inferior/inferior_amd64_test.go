//go:build amd64

package inferior

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"

	"gotpstub/tdesc"
)

// The x86-64 counterparts of inferior_arm64_test.go: registers, debug
// registers and code written in x86 machine code.

func TestRegistersRoundTrip(t *testing.T) {
	p := launch(t, "bp")
	runToMain(t, p)
	tid := p.Pid()
	r, err := p.Registers(tid)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range r.Valid {
		if !v {
			t.Errorf("register %s not valid", r.Layout.Regs[i].Name)
		}
	}
	if r.Uint64(tdesc.CS) != 0x33 {
		t.Errorf("cs = %#x, want 0x33", r.Uint64(tdesc.CS))
	}
	if r.Uint64(tdesc.FSBASE) == 0 {
		t.Error("fs_base is 0 in a threaded program's main")
	}
	if m := r.Uint64(tdesc.MXCSR); m&0xffc0 != 0x1f80 {
		t.Errorf("mxcsr %#x", m)
	}
	if r.Uint64(tdesc.FCTRL) != 0x37f {
		t.Errorf("fctrl %#x", r.Uint64(tdesc.FCTRL))
	}
	// Change a general, an SSE and (with AVX) an AVX register.
	w := r.Clone()
	_ = w.SetUint64(tdesc.R12, 0x1122334455667788)
	xmm := make([]byte, 16)
	for i := range xmm {
		xmm[i] = byte(i + 1)
	}
	_ = w.Set(tdesc.XMM0+3, xmm)
	if w.Layout.HasAVX {
		_ = w.Set(tdesc.YMM0H+5, xmm)
	}
	st := []byte{0, 0, 0, 0, 0, 0, 0, 0x80, 0xff, 0x3f} // 1.0
	_ = w.Set(tdesc.ST0+7, st)
	if err := p.SetRegisters(tid, w); err != nil {
		t.Fatal(err)
	}
	back, err := p.Registers(tid)
	if err != nil {
		t.Fatal(err)
	}
	checks := []int{tdesc.R12, tdesc.XMM0 + 3, tdesc.ST0 + 7, regPC, regSP}
	if w.Layout.HasAVX {
		checks = append(checks, tdesc.YMM0H+5)
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

func TestWatchpoint(t *testing.T) {
	requireDebugRegisters(t)
	p := launch(t, "watch")
	runToMain(t, p)
	watched := symbol(t, p, "watched")
	if err := p.InsertBreakpoint(ReadWatchpoint, watched, 8); !errors.Is(err, ErrUnsupported) {
		t.Errorf("read watchpoint: %v, want ErrUnsupported", err)
	}
	if err := p.InsertBreakpoint(WriteWatchpoint, watched, 8); err != nil {
		t.Fatal(err)
	}
	resumeAll(t, p)
	ev := wait(t, p)
	if ev.Kind != SignalStop || ev.Reason != "watch" || ev.WatchAddr != watched {
		t.Fatalf("event %+v, want watch at %#x", ev, watched)
	}
	var v [8]byte
	if _, err := p.ReadMemory(watched, v[:]); err != nil || binary.LittleEndian.Uint64(v[:]) != 0x1234 {
		t.Errorf("watched = % x, %v", v, err)
	}
	if err := p.RemoveBreakpoint(WriteWatchpoint, watched, 8); err != nil {
		t.Fatal(err)
	}
	resumeAll(t, p)
	if ev := wait(t, p); ev.Kind != Exited || ev.ExitCode != 0x34 {
		t.Errorf("end %+v", ev)
	}
}

func TestHardwareBreakpoint(t *testing.T) {
	requireDebugRegisters(t)
	p := launch(t, "bp")
	runToMain(t, p)
	hit := symbol(t, p, "hit")
	if err := p.InsertBreakpoint(HardwareBreakpoint, hit, 1); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		resumeAll(t, p)
		ev := wait(t, p)
		if ev.Kind != SignalStop || ev.Reason != "hwbreak" {
			t.Fatalf("hit %d: %+v", i, ev)
		}
		if got := pc(t, p, ev.Tid); got != hit {
			t.Fatalf("hit %d: pc %#x, want %#x", i, got, hit)
		}
	}
	if err := p.RemoveBreakpoint(HardwareBreakpoint, hit, 1); err != nil {
		t.Fatal(err)
	}
	resumeAll(t, p)
	if ev := wait(t, p); ev.Kind != Exited || ev.ExitCode != 6 {
		t.Errorf("end %+v", ev)
	}
}

func TestDebugRegisterExhaustion(t *testing.T) {
	p := launch(t, "bp")
	watched := symbol(t, p, "watched")
	// 8 aligned bytes take one register; 4 regions take all four.
	for i := uint64(0); i < 4; i++ {
		if err := p.InsertBreakpoint(AccessWatchpoint, watched+64*i, 8); err != nil {
			t.Fatalf("watchpoint %d: %v", i, err)
		}
	}
	if err := p.InsertBreakpoint(WriteWatchpoint, watched+1024, 1); !errors.Is(err, ErrNoDebugRegister) {
		t.Errorf("fifth: %v, want ErrNoDebugRegister", err)
	}
	if err := p.RemoveBreakpoint(AccessWatchpoint, watched+64, 8); err != nil {
		t.Fatal(err)
	}
	if err := p.InsertBreakpoint(WriteWatchpoint, watched+1024, 1); err != nil {
		t.Errorf("after freeing one: %v", err)
	}
}

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
	// Write code there and run it: mov $0x2a,%eax ; int3
	code := []byte{0xb8, 0x2a, 0, 0, 0, 0xcc}
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
	if got.Uint64(tdesc.RAX)&0xffffffff != 0x2a || got.Uint64(regPC) != addr+6 {
		t.Errorf("rax %#x rip %#x", got.Uint64(tdesc.RAX), got.Uint64(regPC))
	}
	// Put things back and finish.
	if err := p.SetRegisters(p.Pid(), after); err != nil {
		t.Fatal(err)
	}
	resumeAll(t, p)
	if ev := wait(t, p); ev.Kind != Exited || ev.ExitCode != 6 {
		t.Errorf("end %+v", ev)
	}
}

func TestWatchChunks(t *testing.T) {
	tests := []struct {
		addr uint64
		size int
		want []debugSlot
	}{
		{0x1000, 8, []debugSlot{{addr: 0x1000, length: 8}}},
		{0x1001, 4, []debugSlot{{addr: 0x1001, length: 1}, {addr: 0x1002, length: 2}, {addr: 0x1004, length: 1}}},
		{0x1004, 8, []debugSlot{{addr: 0x1004, length: 4}, {addr: 0x1008, length: 4}}},
		{0x1000, 3, []debugSlot{{addr: 0x1000, length: 2}, {addr: 0x1002, length: 1}}},
	}
	for _, tt := range tests {
		got := watchChunks(tt.addr, tt.size)
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("watchChunks(%#x, %d) = %v, want %v", tt.addr, tt.size, got, tt.want)
		}
	}
}

func TestX87AbridgedTag(t *testing.T) {
	// Physical 7 valid, 6 zero, the rest empty (tdesc's TestX87Tags).
	tag := uint16(0x0fff) | 0<<14 | 1<<12
	if b := abridgedTag(tag); b != 0xc0 {
		t.Errorf("abridged %#02x, want 0xc0", b)
	}
}
