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

// TestKeptWritesCopyOutsideHeap: inside Exclusive, writes whose caller
// reuses its buffer at once (as fasttp's pads do) are kept as copies in
// keptBytes' chunks, more than one chunk's worth; every byte reaches
// memory when Exclusive ends, and a second Exclusive reuses the chunks.
func TestKeptWritesCopyOutsideHeap(t *testing.T) {
	p := launch(t, "bp")
	runToMain(t, p)
	const n, size = 300, 1024 // more than keptChunk
	base, err := p.AllocateScratch(0, n*size)
	if err != nil {
		t.Fatal(err)
	}
	fill := func(buf []byte, i, round int) {
		for j := range buf {
			buf[j] = byte(i*7 + j + round)
		}
	}
	for round := range 2 {
		buf := make([]byte, size)
		var shared bool
		if err := p.Exclusive(func() {
			for i := range n {
				fill(buf, i, round)
				if err := p.WriteMemory(base+uint64(i*size), buf); err != nil {
					t.Error(err)
				}
			}
			for _, w := range p.kept.writes {
				shared = shared || &w.data[0] == &buf[0]
			}
		}); err != nil {
			t.Fatal(err)
		}
		if shared {
			t.Fatal("a kept write shares its caller's buffer")
		}
		if got := len(p.keptData.chunks); got != 2 {
			t.Errorf("round %d: %d chunks mapped, want 2", round, got)
		}
		got, want := make([]byte, size), make([]byte, size)
		for i := range n {
			fill(want, i, round)
			if _, err := p.readNow(base+uint64(i*size), got); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("round %d: write %d: memory % x..., %v; want % x...", round, i, got[:8], err, want[:8])
			}
		}
	}
}

// TestKeptBytes: copies are independent of the data copied and of each
// other until reset, data too large for a chunk is copied to the heap,
// and reset reuses the chunks.
func TestKeptBytes(t *testing.T) {
	var k keptBytes
	defer k.release()
	a, b := []byte("first"), []byte("second")
	ca, cb := k.copyOf(a), k.copyOf(b)
	a[0], b[0] = 'X', 'Y'
	if string(ca) != "first" || string(cb) != "second" {
		t.Fatalf("copies %q %q", ca, cb)
	}
	if len(k.chunks) != 1 {
		t.Fatalf("%d chunks, want 1", len(k.chunks))
	}
	big := make([]byte, keptChunk/2)
	if c := k.copyOf(big); len(c) != len(big) || len(k.chunks) != 1 {
		t.Fatalf("a large copy: %d bytes, %d chunks", len(c), len(k.chunks))
	}
	k.reset()
	if c := k.copyOf([]byte("again")); string(c) != "again" || &c[0] != &ca[0] || len(k.chunks) != 1 {
		t.Fatalf("after reset: %q, reuses the chunk: %v, %d chunks", c, &c[0] == &ca[0], len(k.chunks))
	}
}

// TestUnionSpan: the span kept writes change on a page, and whether they
// leave a gap in it (then the page is read before it is written).
func TestUnionSpan(t *testing.T) {
	tests := []struct {
		name   string
		spans  []memSpan
		lo, hi uint64
		whole  bool
	}{
		{"one", []memSpan{{10, 20}}, 10, 20, true},
		{"touching", []memSpan{{20, 30}, {10, 20}}, 10, 30, true},
		{"overlapping", []memSpan{{10, 25}, {20, 30}}, 10, 30, true},
		{"inside", []memSpan{{10, 40}, {20, 30}}, 10, 40, true},
		{"gap", []memSpan{{10, 20}, {21, 30}}, 10, 30, false},
		{"gap after a long one", []memSpan{{10, 40}, {20, 30}, {41, 50}}, 10, 50, false},
		{"gap filled later", []memSpan{{30, 40}, {10, 20}, {15, 35}}, 10, 40, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lo, hi, whole := unionSpan(tt.spans)
			if lo != tt.lo || hi != tt.hi || whole != tt.whole {
				t.Fatalf("unionSpan = %d, %d, %v; want %d, %d, %v", lo, hi, whole, tt.lo, tt.hi, tt.whole)
			}
		})
	}
}

// TestFlushKeepsGapBytes: kept writes with a gap between them leave the
// gap's bytes as they were, and gapless ones (written without reading the
// page first) land whole, on a page never touched before.
func TestFlushKeepsGapBytes(t *testing.T) {
	p := launch(t, "bp")
	runToMain(t, p)
	base, err := p.AllocateScratch(0, 2*pageSize)
	if err != nil {
		t.Fatal(err)
	}
	old := []byte{0xaa, 0xbb, 0xcc, 0xdd}
	if err := p.WriteMemory(base+4, old); err != nil { // made at once
		t.Fatal(err)
	}
	fresh := base + pageSize // untouched
	if err := p.Exclusive(func() {
		for _, w := range []struct {
			addr uint64
			data []byte
		}{
			{base, []byte{1, 2, 3, 4}}, {base + 6, []byte{5, 6}}, // gap at base+4, base+5
			{fresh + 8, []byte{7, 8}}, {fresh + 10, []byte{9}}, {fresh + 7, []byte{6, 7}},
		} {
			if err := p.WriteMemory(w.addr, w.data); err != nil {
				t.Error(err)
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 8)
	if _, err := p.readNow(base, got); err != nil || !bytes.Equal(got, []byte{1, 2, 3, 4, 0xaa, 0xbb, 5, 6}) {
		t.Fatalf("page with a gap: % x, %v; want 01 02 03 04 aa bb 05 06", got, err)
	}
	if _, err := p.readNow(fresh+6, got[:6]); err != nil || !bytes.Equal(got[:6], []byte{0, 6, 7, 8, 9, 0}) {
		t.Fatalf("gapless writes: % x, %v; want 00 06 07 08 09 00", got[:6], err)
	}
}
