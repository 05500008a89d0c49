package inferior

import (
	"bytes"
	"testing"
)

// keptWrites returns how many writes the process keeps for later.
func (p *Process) keptWritesForTest() int { return len(p.kept.writes) }

// TestExclusiveKeepsWrites: inside Exclusive memory writes are kept and
// read back as written; they reach the process when Exclusive ends, or
// before a thread runs (an injected system call) if that comes first.
func TestExclusiveKeepsWrites(t *testing.T) {
	p := launch(t, "bp")
	runToMain(t, p)
	addr := symbol(t, p, "counter")
	orig := make([]byte, 64)
	if _, err := p.ReadMemory(addr, orig); err != nil {
		t.Fatal(err)
	}
	a, b := []byte{1, 2, 3, 4}, []byte{9, 9}
	var kept int
	var inside, raw []byte
	err := p.Exclusive(func() {
		if err := p.WriteMemory(addr, a); err != nil {
			t.Error(err)
		}
		if err := p.WriteMemory(addr+2, b); err != nil { // over the first
			t.Error(err)
		}
		kept = p.keptWritesForTest()
		inside = make([]byte, 8)
		if _, err := p.ReadMemory(addr, inside); err != nil {
			t.Error(err)
		}
		raw = make([]byte, 4)
		if _, err := p.readNow(addr, raw); err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	want := append([]byte{1, 2, 9, 9}, orig[4:8]...)
	if kept != 2 || !bytes.Equal(inside, want) || !bytes.Equal(raw, orig[:4]) {
		t.Fatalf("inside Exclusive: %d kept writes, reads % x (want % x), memory % x (want % x, unwritten)", kept, inside, want, raw, orig[:4])
	}
	after := make([]byte, 8)
	if _, err := p.readNow(addr, after); err != nil || !bytes.Equal(after, want) {
		t.Fatalf("after Exclusive: memory % x, %v; want % x", after, err, want)
	}
	// A thread runs (the injected mmap, whose syscall instruction is
	// itself a kept write): the kept writes are made first, or the
	// thread would not run the syscall.
	var before int
	if err := p.Exclusive(func() {
		_ = p.WriteMemory(addr, orig[:4])
		before = p.keptWritesForTest()
		if _, err := p.AllocateScratch(0, 4096); err != nil {
			t.Error(err)
		}
		if _, err := p.readNow(addr, after[:4]); err != nil || !bytes.Equal(after[:4], orig[:4]) {
			t.Errorf("memory % x after the injected call, want % x", after[:4], orig[:4])
		}
	}); err != nil {
		t.Fatal(err)
	}
	if before != 1 {
		t.Fatalf("%d writes kept before the injected call, want 1", before)
	}
	resumeAll(t, p)
	if ev := wait(t, p); ev.Kind != Exited || ev.ExitCode != 6 {
		t.Fatalf("stop %+v, want exit 6", ev)
	}
}
