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
	// A thread runs an injected mmap (its syscall instruction is itself
	// a kept write at the thread's pc): the kept writes on that page are
	// made first, or the thread would not run the syscall; the others
	// stay kept (an anonymous mmap reads no memory) until Exclusive ends.
	var before, during int
	pcPage := pc(t, p, p.Pid()) &^ (pageSize - 1)
	if err := p.Exclusive(func() {
		_ = p.WriteMemory(addr, orig[:4])
		before = p.keptWritesForTest()
		if _, err := p.AllocateScratch(0, 4096); err != nil {
			t.Error(err)
		}
		during = p.keptWritesForTest()
		if _, err := p.readNow(addr, after[:4]); err != nil || addr&^(pageSize-1) != pcPage && !bytes.Equal(after[:4], want[:4]) {
			t.Errorf("memory % x after the injected call, want % x (still kept)", after[:4], want[:4])
		}
	}); err != nil {
		t.Fatal(err)
	}
	if before != 1 || during < 1 {
		t.Fatalf("%d writes kept before the injected call and %d after, want 1 and at least 1", before, during)
	}
	if _, err := p.readNow(addr, after[:4]); err != nil || !bytes.Equal(after[:4], orig[:4]) {
		t.Fatalf("memory % x after Exclusive, want % x", after[:4], orig[:4])
	}
	resumeAll(t, p)
	if ev := wait(t, p); ev.Kind != Exited || ev.ExitCode != 6 {
		t.Fatalf("stop %+v, want exit 6", ev)
	}
}

// TestFlushWritesOn: a partial flush makes the kept writes on the pages
// asked for (the part of a write over two pages that falls on them) and
// keeps the rest, which reads still see and the end of Exclusive makes.
func TestFlushWritesOn(t *testing.T) {
	p := launch(t, "bp")
	runToMain(t, p)
	base, err := p.AllocateScratch(0, 2*pageSize)
	if err != nil {
		t.Fatal(err)
	}
	data := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	at := base + pageSize - 4 // over the two pages
	zero := make([]byte, 8)
	var mem, seen []byte
	if err := p.Exclusive(func() {
		if err := p.WriteMemory(at, data); err != nil {
			t.Error(err)
		}
		if err := p.flushWritesOn(base, base); err != nil {
			t.Error(err)
		}
		mem, seen = make([]byte, 8), make([]byte, 8)
		if _, err := p.readNow(at, mem); err != nil {
			t.Error(err)
		}
		if _, err := p.ReadMemory(at, seen); err != nil {
			t.Error(err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if want := append(append([]byte(nil), data[:4]...), zero[:4]...); !bytes.Equal(mem, want) || !bytes.Equal(seen, data) {
		t.Fatalf("after flushing the first page: memory % x (want % x), read % x (want % x)", mem, want, seen, data)
	}
	if _, err := p.readNow(at, mem); err != nil || !bytes.Equal(mem, data) {
		t.Fatalf("after Exclusive: memory % x, %v; want % x", mem, err, data)
	}
}

// TestWriteMemoryOwned: inside Exclusive an owned write is kept without
// a copy (WriteMemory's is copied: its caller may reuse the buffer), and
// both reach memory when Exclusive ends.
func TestWriteMemoryOwned(t *testing.T) {
	p := launch(t, "bp")
	runToMain(t, p)
	base, err := p.AllocateScratch(0, pageSize)
	if err != nil {
		t.Fatal(err)
	}
	owned, copied := []byte{1, 2, 3, 4}, []byte{5, 6, 7, 8}
	var sharesOwned, sharesCopied bool
	if err := p.Exclusive(func() {
		if err := p.WriteMemoryOwned(base, owned); err != nil {
			t.Error(err)
		}
		if err := p.WriteMemory(base+16, copied); err != nil {
			t.Error(err)
		}
		if w := p.kept.writes; len(w) == 2 {
			sharesOwned, sharesCopied = &w[0].data[0] == &owned[0], &w[1].data[0] == &copied[0]
		}
	}); err != nil {
		t.Fatal(err)
	}
	if !sharesOwned || sharesCopied {
		t.Fatalf("kept writes share the owned buffer: %v (want true), the copied one: %v (want false)", sharesOwned, sharesCopied)
	}
	got := make([]byte, 20)
	if _, err := p.readNow(base, got); err != nil || !bytes.Equal(got[:4], owned) || !bytes.Equal(got[16:], copied) {
		t.Fatalf("memory % x, %v", got, err)
	}
}
