package frames

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"
)

// commitMixed commits n frames to b, alternating an 'r' frame (runs of a
// 64-byte register block), a whole 'R' frame and a memory-only frame,
// whose PCs differ.
func commitMixed(t *testing.T, b *Buffer, n int) {
	t.Helper()
	runs := [][2]int{{8, 16}, {40, 44}}
	var fb FrameBuilder
	for i := range n {
		fb.Reset(1 + i%3)
		block := regs(64, 8, uint64(0x401000+i), byte(i))
		switch i % 3 {
		case 0:
			fb.AddRegisterRuns(block, runs)
		case 1:
			fb.AddRegisters(block)
		}
		fb.AddMemory(uint64(0x1000*i), []byte{byte(i), 1, 2})
		if err := b.Commit(&fb); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
}

// wantGDB is the present frames of b in gdb's layout, built frame by
// frame from the stored frames.
func wantGDB(t *testing.T, b *Buffer) []byte {
	t.Helper()
	var out []byte
	for i := range b.Count() {
		f, _ := b.Frame(i)
		var err error
		if out, err = gdbLayout(out, f.Raw, 64); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// readAll reads b's gdb-layout stream with ReadTraceData in chunks of n.
func readAll(t *testing.T, b *Buffer, n int) []byte {
	t.Helper()
	var out []byte
	for {
		d, err := b.ReadTraceData(len(out), n)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("ReadTraceData(%d, %d): %v", len(out), n, err)
		}
		out = append(out, d...)
	}
}

// Frames with 'r' blocks: stored small, read whole by Frame's accessors
// (the other bytes unavailable), served to gdb ('r' expanded to 'R').
func TestRegisterRunsFrames(t *testing.T) {
	b := NewBuffer(1 << 20)
	commitMixed(t, b, 30)
	f, _ := b.Frame(0)
	if len(f.Raw) != HeaderSize+3+(4+8)+(4+4)+11+3 {
		t.Errorf("'r' frame of %d bytes", len(f.Raw))
	}
	if got := f.Registers(); len(got) != 64 || !bytes.Equal(got[8:16], regs(64, 8, 0x401000, 0)[8:16]) || got[0] != 0 {
		t.Errorf("expanded registers % x", got)
	}
	if pc, ok := f.PC(8); !ok || pc != 0x401000 {
		t.Errorf("PC %#x %v", pc, ok)
	}
	for _, c := range []struct {
		off, size int
		want      bool
	}{{8, 8, true}, {40, 4, true}, {0, 8, false}, {12, 8, false}, {44, 4, false}} {
		if got := f.RegisterCollected(c.off, c.size); got != c.want {
			t.Errorf("RegisterCollected(%d, %d) = %v, want %v", c.off, c.size, got, c.want)
		}
	}
	if f1, _ := b.Frame(1); !f1.RegisterCollected(0, 64) {
		t.Error("an 'R' frame's registers are not all collected")
	}
	if f2, _ := b.Frame(2); f2.RegisterCollected(8, 8) {
		t.Error("a frame without registers has collected registers")
	}
	want := wantGDB(t, b)
	if b.GDBUsed() != len(want) || b.GDBUsed() != b.Used()+10*(1+64-(3+12+8)) {
		t.Fatalf("GDBUsed %d, gdb layout %d bytes, Used %d", b.GDBUsed(), len(want), b.Used())
	}
	for _, n := range []int{1, 7, 100, 1 << 20} {
		if got := readAll(t, b, n); !bytes.Equal(got, want) {
			t.Fatalf("read in chunks of %d: differs from the frames in gdb's layout", n)
		}
	}
	// Backwards and random offsets (the cursor must not be trusted).
	for _, off := range []int{500, 3, len(want) - 1, 0, 77} {
		d, err := b.ReadTraceData(off, 50)
		if err != nil || !bytes.Equal(d, want[off:min(len(want), off+50)]) {
			t.Fatalf("ReadTraceData(%d, 50) = % x, %v", off, d, err)
		}
	}
	if _, err := b.ReadTraceData(len(want)+1, 1); !errors.Is(err, ErrBadOffset) {
		t.Fatalf("read past the end: %v", err)
	}
	// QTSave's tfile holds gdb's layout: 'R' blocks, registers as read.
	var out bytes.Buffer
	if err := WriteTFile(&out, TFileHeader{RegBlockSize: 64, Status: "0;tstop::0"}, b); err != nil {
		t.Fatal(err)
	}
	tf, err := ReadTFile(&out)
	if err != nil {
		t.Fatal(err)
	}
	for i, got := range tf.Frames {
		orig, _ := b.Frame(i)
		if bytes.Contains(got.Raw[HeaderSize:HeaderSize+1], []byte{'r'}) || !bytes.Equal(got.Registers(), orig.Registers()) {
			t.Fatalf("tfile frame %d: % x", i, got.Raw)
		}
	}
}

// A circular buffer dropping 'r' frames keeps the gdb-layout length and
// stream right, also when a read's cursor points at a dropped frame.
func TestRegisterRunsCircular(t *testing.T) {
	b := NewBuffer(700)
	b.SetCircular(true)
	for round := range 8 {
		commitMixed(t, b, 7)
		want := wantGDB(t, b)
		if b.GDBUsed() != len(want) {
			t.Fatalf("round %d: GDBUsed %d, want %d", round, b.GDBUsed(), len(want))
		}
		if got := readAll(t, b, 13); !bytes.Equal(got, want) {
			t.Fatalf("round %d: stream differs", round)
		}
		// Leave the cursor in the middle for the next round's drops.
		if _, err := b.ReadTraceData(len(want)/2, 5); err != nil {
			t.Fatal(fmt.Errorf("round %d: %w", round, err))
		}
	}
	if b.Created() == b.Count() {
		t.Fatal("no frame was dropped")
	}
}
