package frames

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
)

// frameWithTSV builds a frame of tracepoint tp whose single V block holds
// id, so tests can tell frames apart. It is HeaderSize+13 = 19 bytes.
func frameWithTSV(b *Buffer, tp int, id int64) *FrameBuilder {
	f := b.NewFrame(tp)
	f.AddTSV(1, id)
	return f
}

const tsvFrameSize = HeaderSize + 13

func ids(t *testing.T, b *Buffer) []int64 {
	t.Helper()
	var out []int64
	b.Frames(func(f *Frame) bool {
		v, ok := f.TSV(1)
		if !ok {
			t.Fatalf("frame %d has no id", f.Num)
		}
		out = append(out, v)
		return true
	})
	return out
}

func TestLinearBufferFull(t *testing.T) {
	// Room for exactly 3 frames plus the end-of-buffer marker.
	size := 3*tsvFrameSize + EOBMarkerSize
	b := NewBuffer(size)
	for i := int64(0); i < 3; i++ {
		if err := b.Commit(frameWithTSV(b, 1, i)); err != nil {
			t.Fatalf("Commit frame %d: %v", i, err)
		}
	}
	before := b.ReadRaw(0, size)
	err := b.Commit(frameWithTSV(b, 1, 3))
	if !errors.Is(err, ErrFull) {
		t.Fatalf("Commit into full linear buffer: err = %v, want ErrFull", err)
	}
	if got := ids(t, b); fmt.Sprint(got) != "[0 1 2]" {
		t.Errorf("frames after refused commit = %v, want [0 1 2]", got)
	}
	if !bytes.Equal(b.ReadRaw(0, size), before) {
		t.Error("refused commit changed the buffer bytes")
	}
	if b.Count() != 3 || b.Created() != 3 || b.Used() != 3*tsvFrameSize || b.Free() != EOBMarkerSize {
		t.Errorf("Count %d Created %d Used %d Free %d", b.Count(), b.Created(), b.Used(), b.Free())
	}
	// One byte less of budget and the third frame does not fit.
	b2 := NewBuffer(size - 1)
	for i := int64(0); i < 3; i++ {
		err := b2.Commit(frameWithTSV(b2, 1, i))
		if (err != nil) != (i == 2) {
			t.Errorf("size-1 buffer, frame %d: err = %v", i, err)
		}
	}
}

func TestCircularKeepsNewest(t *testing.T) {
	size := 3*tsvFrameSize + EOBMarkerSize
	b := NewBuffer(size)
	b.SetCircular(true)
	for i := int64(0); i < 10; i++ {
		if err := b.Commit(frameWithTSV(b, 1+int(i%2), i)); err != nil {
			t.Fatalf("Commit frame %d: %v", i, err)
		}
	}
	if got := ids(t, b); fmt.Sprint(got) != "[7 8 9]" {
		t.Errorf("circular buffer holds %v, want [7 8 9]", got)
	}
	if b.Count() != 3 || b.Created() != 10 {
		t.Errorf("Count %d Created %d, want 3 and 10", b.Count(), b.Created())
	}
	// Numbering restarts at 0 for the oldest present frame.
	fr, ok := b.Frame(0)
	if v, _ := fr.TSV(1); !ok || v != 7 || fr.Num != 0 {
		t.Errorf("Frame(0) = num %d id %d", fr.Num, v)
	}
	if _, ok := b.Frame(3); ok {
		t.Error("Frame(3) exists in a 3-frame buffer")
	}
	// A bigger frame drops as many old ones as needed.
	big := b.NewFrame(1)
	big.AddMemory(0, make([]byte, 2*tsvFrameSize-HeaderSize-11))
	if err := b.Commit(big); err != nil {
		t.Fatalf("Commit big frame: %v", err)
	}
	if b.Count() != 2 {
		t.Errorf("after big frame Count = %d, want 2", b.Count())
	}
	if fr, _ := b.Frame(0); fr.TSVs()[0].Value != 9 {
		t.Errorf("oldest frame after big commit is not frame 9")
	}
	// Larger than the whole buffer: refused, nothing dropped.
	huge := b.NewFrame(1)
	huge.AddMemory(0, make([]byte, size))
	if err := b.Commit(huge); !errors.Is(err, ErrFull) {
		t.Errorf("frame bigger than buffer: err = %v, want ErrFull", err)
	}
	if b.Count() != 2 {
		t.Errorf("oversized frame dropped frames: Count = %d", b.Count())
	}
}

func TestCircularCompactionKeepsIndexes(t *testing.T) {
	// Many drops exercise the slice compaction and index rebuilds.
	b := NewBuffer(100*tsvFrameSize + EOBMarkerSize)
	b.SetCircular(true)
	const n = 20000
	for i := 0; i < n; i++ {
		f := b.NewFrame(1 + i%3)
		f.AddRegisters(regs(16, 0, uint64(0x1000+i%5), 0))
		f.AddTSV(1, int64(i))
		if err := b.Commit(f); err != nil {
			t.Fatalf("Commit %d: %v", i, err)
		}
		if i == n/2 {
			// Build the address index midway so it is maintained incrementally too.
			b.FindPC(-1, 0, 0)
		}
	}
	count := b.Count()
	first := n - count
	for num := 0; num < count; num++ {
		i := first + num
		fr, ok := b.FindTracepoint(num-1, 1+i%3)
		if !ok || fr.Num != num {
			t.Fatalf("FindTracepoint(after %d, tp %d) = %v, %v; want frame %d", num-1, 1+i%3, fr, ok, num)
		}
		fr, ok = b.FindPC(num-1, uint64(0x1000+i%5), 0)
		if !ok || fr.Num != num {
			t.Fatalf("FindPC(after %d) = %v, %v; want frame %d", num-1, fr, ok, num)
		}
	}
	if got := b.ReadRaw(0, b.Used()); len(got) != b.Used() {
		t.Fatalf("ReadRaw whole = %d bytes, Used %d", len(got), b.Used())
	}
}

func TestFind(t *testing.T) {
	const pcOff = 8
	b := NewBuffer(1 << 20)
	// frame: tp, pc
	layout := []struct {
		tp int
		pc uint64
	}{
		{1, 0x100}, {2, 0x200}, {1, 0x100}, {3, 0x300}, {2, 0x250}, {1, 0x100},
	}
	for _, l := range layout {
		f := b.NewFrame(l.tp)
		f.AddRegisters(regs(32, pcOff, l.pc, byte(l.tp)))
		if err := b.Commit(f); err != nil {
			t.Fatalf("Commit: %v", err)
		}
	}
	num := func(f *Frame, ok bool) int {
		if !ok {
			return -1
		}
		return f.Num
	}
	tests := []struct {
		name string
		got  int
		want int
	}{
		{"pc first", num(b.FindPC(-1, 0x100, pcOff)), 0},
		{"pc after 0", num(b.FindPC(0, 0x100, pcOff)), 2},
		{"pc after 2", num(b.FindPC(2, 0x100, pcOff)), 5},
		{"pc after last", num(b.FindPC(5, 0x100, pcOff)), -1},
		{"pc absent", num(b.FindPC(-1, 0x999, pcOff)), -1},
		{"pc other offset", num(b.FindPC(-1, 0x100, 0)), -1},
		{"tp 2", num(b.FindTracepoint(-1, 2)), 1},
		{"tp 2 after 1", num(b.FindTracepoint(1, 2)), 4},
		{"tp 3 after 3", num(b.FindTracepoint(3, 3)), -1},
		{"tp 0", num(b.FindTracepoint(-1, 0)), -1},
		{"range inside", num(b.FindRange(-1, 0x200, 0x2ff, true, pcOff)), 1},
		{"range inside after 1", num(b.FindRange(1, 0x200, 0x2ff, true, pcOff)), 4},
		{"range inclusive hi", num(b.FindRange(3, 0x250, 0x250, true, pcOff)), 4},
		{"range outside", num(b.FindRange(-1, 0x100, 0x100, false, pcOff)), 1},
		{"range outside after 3", num(b.FindRange(3, 0x100, 0x300, false, pcOff)), -1},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s: frame %d, want %d", tc.name, tc.got, tc.want)
		}
	}
}

func TestReadRawChunksConcatenate(t *testing.T) {
	b := NewBuffer(1 << 20)
	var want []byte
	for i := 0; i < 50; i++ {
		f := b.NewFrame(1 + i%4)
		if i%3 == 0 {
			f.AddRegisters(regs(40, 0, uint64(i), byte(i)))
		}
		f.AddMemory(uint64(i)*0x10, bytes.Repeat([]byte{byte(i)}, i))
		f.AddTSV(i, int64(-i))
		if err := b.Commit(f); err != nil {
			t.Fatalf("Commit: %v", err)
		}
		fr, _ := b.Frame(i)
		want = append(want, fr.Raw...)
	}
	if b.Used() != len(want) {
		t.Fatalf("Used() = %d, frames total %d", b.Used(), len(want))
	}
	for _, chunk := range []int{1, 2, 6, 7, 19, 100, 2000, len(want)} {
		var got []byte
		for off := 0; off < b.Used(); {
			part := b.ReadRaw(off, chunk)
			if len(part) == 0 || len(part) > chunk {
				t.Fatalf("chunk %d: ReadRaw(%d) returned %d bytes", chunk, off, len(part))
			}
			got = append(got, part...)
			off += len(part)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("chunk %d: concatenation differs from the frames", chunk)
		}
	}
	if got := b.ReadRaw(b.Used(), 10); got != nil {
		t.Errorf("ReadRaw at end = %d bytes, want nil", len(got))
	}
	if got := b.ReadRaw(-1, 10); got != nil {
		t.Errorf("ReadRaw(-1) = %d bytes, want nil", len(got))
	}
}

func TestReadRawAfterCircularDrops(t *testing.T) {
	b := NewBuffer(4*tsvFrameSize + EOBMarkerSize)
	b.SetCircular(true)
	for i := int64(0); i < 9; i++ {
		if err := b.Commit(frameWithTSV(b, 1, i)); err != nil {
			t.Fatal(err)
		}
	}
	var want []byte
	b.Frames(func(f *Frame) bool { want = append(want, f.Raw...); return true })
	got := b.ReadRaw(0, 1000)
	if !bytes.Equal(got, want) {
		t.Fatal("ReadRaw(0) after drops does not start at the oldest present frame")
	}
	if got := ids(t, b); fmt.Sprint(got) != "[5 6 7 8]" {
		t.Errorf("frames = %v", got)
	}
}

func TestSetSizeClearAndErrors(t *testing.T) {
	b := NewBuffer(-1)
	if b.Size() != DefaultSize || b.Circular() {
		t.Errorf("NewBuffer(-1): size %d circular %v", b.Size(), b.Circular())
	}
	if err := b.Commit(frameWithTSV(b, 1, 1)); err != nil {
		t.Fatal(err)
	}
	if err := b.SetSize(100); err != nil || b.Size() != 100 || b.Count() != 0 || b.Created() != 0 {
		t.Errorf("SetSize(100): err %v size %d count %d", err, b.Size(), b.Count())
	}
	if err := b.SetSize(-1); err != nil || b.Size() != DefaultSize {
		t.Errorf("SetSize(-1): err %v size %d", err, b.Size())
	}
	for _, bad := range []int{-2, MaxSize + 1} {
		if err := b.SetSize(bad); !errors.Is(err, ErrBadSize) {
			t.Errorf("SetSize(%d) err = %v, want ErrBadSize", bad, err)
		}
	}
	b.SetCircular(true)
	_ = b.Commit(frameWithTSV(b, 1, 1))
	b.Clear()
	if b.Count() != 0 || b.Used() != 0 || b.Created() != 0 || !b.Circular() {
		t.Errorf("Clear: count %d used %d created %d circular %v", b.Count(), b.Used(), b.Created(), b.Circular())
	}
	if _, ok := b.FindTracepoint(-1, 1); ok {
		t.Error("FindTracepoint finds a frame after Clear")
	}

	f := b.NewFrame(1)
	if err := b.Commit(f); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(f); !errors.Is(err, ErrCommitted) {
		t.Errorf("second Commit of a builder: err = %v, want ErrCommitted", err)
	}
	for _, tp := range []int{0, -1, 0x10000} {
		if err := b.Commit(b.NewFrame(tp)); !errors.Is(err, ErrBadTracepoint) {
			t.Errorf("tracepoint %d: err = %v, want ErrBadTracepoint", tp, err)
		}
	}
	r1 := b.NewFrame(1)
	r1.AddRegisters(make([]byte, 8))
	if err := b.Commit(r1); err != nil {
		t.Fatal(err)
	}
	r2 := b.NewFrame(1)
	r2.AddRegisters(make([]byte, 16))
	if err := b.Commit(r2); !errors.Is(err, ErrRegBlockSize) {
		t.Errorf("different register block size: err = %v, want ErrRegBlockSize", err)
	}
	r3 := b.NewFrame(1)
	r3.AddRegisters(make([]byte, 8))
	r3.AddRegisters(make([]byte, 9))
	if err := b.Commit(r3); !errors.Is(err, ErrRegBlockSize) {
		t.Errorf("mixed register block sizes in a frame: err = %v, want ErrRegBlockSize", err)
	}
	if b.RegBlockSize() != 8 {
		t.Errorf("RegBlockSize() = %d, want 8", b.RegBlockSize())
	}
}

func TestConcurrentUse(t *testing.T) {
	b := NewBuffer(64 * 1024)
	b.SetCircular(true)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				f := b.NewFrame(1 + w)
				f.AddRegisters(regs(16, 0, uint64(i), 0))
				if err := b.Commit(f); err != nil {
					t.Errorf("Commit: %v", err)
					return
				}
				b.FindPC(-1, uint64(i), 0)
				b.FindTracepoint(-1, 1+w)
				b.ReadRaw(i, 100)
			}
		}(w)
	}
	wg.Wait()
	if b.Created() != 8000 {
		t.Errorf("Created() = %d, want 8000", b.Created())
	}
	var total int
	b.Frames(func(f *Frame) bool { total += len(f.Raw); return true })
	if total != b.Used() {
		t.Errorf("frames hold %d bytes, Used() = %d", total, b.Used())
	}
}

func TestReadTraceDataAndStats(t *testing.T) {
	b := NewBuffer(1000)
	b.SetCircular(true)
	for i := int64(0); i < 3; i++ {
		if err := b.Commit(frameWithTSV(b, 2, i)); err != nil {
			t.Fatal(err)
		}
	}
	want := Stats{Size: 1000, Used: 3 * tsvFrameSize, Free: 1000 - 3*tsvFrameSize, Count: 3, Created: 3, Circular: true}
	if got := b.Stats(); got != want {
		t.Errorf("Stats() = %+v, want %+v", got, want)
	}
	tests := []struct {
		offset, n int
		wantLen   int
		wantErr   error
	}{
		{0, 10, 10, nil},
		{50, 100, 3*tsvFrameSize - 50, nil},
		{3 * tsvFrameSize, 10, 0, io.EOF},
		{3*tsvFrameSize + 1, 10, 0, ErrBadOffset},
		{-1, 10, 0, ErrBadOffset},
	}
	for _, tc := range tests {
		got, err := b.ReadTraceData(tc.offset, tc.n)
		if !errors.Is(err, tc.wantErr) || len(got) != tc.wantLen {
			t.Errorf("ReadTraceData(%d, %d) = %d bytes, %v; want %d bytes, %v", tc.offset, tc.n, len(got), err, tc.wantLen, tc.wantErr)
		}
	}
	if _, err := b.ReadTraceData(0, 0); err == nil {
		t.Error("ReadTraceData with length 0 succeeded")
	}
}

// A header-only frame committed in a batch is the frame a builder with
// only a fallback PC commits: same bytes, records and tfind answers, in
// linear and circular buffers, across the end of the ring.
func TestBatchCommitHeaderMatchesBuilder(t *testing.T) {
	for _, circular := range []bool{false, true} {
		t.Run(fmt.Sprint("circular=", circular), func(t *testing.T) {
			viaBuilder, viaBatch := NewBuffer(1000), NewBuffer(1000)
			for _, b := range []*Buffer{viaBuilder, viaBatch} {
				b.SetCircular(circular)
			}
			var f FrameBuilder
			var errBuilder, errBatch error
			for i := range 400 {
				tp, pc := 1+i%3, uint64(0x1000+i%3)
				if i%7 == 0 { // a frame with a block between header-only ones
					f.Reset(tp)
					f.AddMemory(0x10, []byte{byte(i), 2, 3})
					errBuilder = viaBuilder.Commit(&f)
					f.Reset(tp)
					f.AddMemory(0x10, []byte{byte(i), 2, 3})
					errBatch = viaBatch.Commit(&f)
				} else {
					f.Reset(tp)
					f.SetFallbackPC(pc)
					f.SetTime(int64(1000 + i))
					errBuilder = viaBuilder.Commit(&f)
					w := viaBatch.BeginBatch()
					n, err := w.CommitHeader(tp, pc, int64(1000+i))
					w.End()
					errBatch = err
					if err == nil && n != HeaderSize {
						t.Fatalf("CommitHeader returned size %d", n)
					}
				}
				if (errBuilder == nil) != (errBatch == nil) {
					t.Fatalf("frame %d: builder %v, batch %v", i, errBuilder, errBatch)
				}
			}
			if !circular && !errors.Is(errBatch, ErrFull) {
				t.Fatalf("linear buffer never filled: %v", errBatch)
			}
			a, ta := viaBuilder.snapshot()
			b, tb := viaBatch.snapshot()
			if !bytes.Equal(a, b) || !slices.Equal(ta, tb) {
				t.Fatalf("buffers differ:\n%x %v\n%x %v", a, ta, b, tb)
			}
			if viaBuilder.Stats() != viaBatch.Stats() {
				t.Errorf("stats %+v and %+v", viaBuilder.Stats(), viaBatch.Stats())
			}
			for pc := uint64(0x1000); pc < 0x1003; pc++ {
				a, okA := viaBuilder.FindPC(-1, pc, -1)
				b, okB := viaBatch.FindPC(-1, pc, -1)
				if okA != okB || okA && (a.Num != b.Num || !bytes.Equal(a.Raw, b.Raw)) {
					t.Errorf("FindPC(%#x): %v %v", pc, a, b)
				}
			}
		})
	}
}

// Reserve gives the ring storage up front, whole pieces, never past the
// budget, keeping the frames stored; commits up to the reserved size then
// allocate nothing.
func TestReserve(t *testing.T) {
	const size = 3<<20 + 100
	b := NewBuffer(size)
	var f FrameBuilder
	f.Reset(1)
	f.AddMemory(0x1000, []byte("kept"))
	if err := b.Commit(&f); err != nil {
		t.Fatal(err)
	}
	waitGrown(b) // the commit may have started growAheadLocked's growth
	before, _ := b.snapshot()
	b.Reserve(256 << 10)
	if got := b.ring.allocated(); got < ringChunk || got%ringChunk != 0 && got != size {
		t.Fatalf("%d bytes of storage after Reserve(256 KiB)", got)
	}
	if after, _ := b.snapshot(); !bytes.Equal(after, before) {
		t.Error("Reserve changed the stored frames")
	}
	b.Reserve(40 << 20)
	if got := b.ring.allocated(); got != size || len(b.ring.chunks[3]) != 100 {
		t.Errorf("%d bytes of storage after Reserve past the budget of %d", got, size)
	}
	f.Reset(1)
	f.AddMemory(0x2000, make([]byte, 100))
	if allocs := testing.AllocsPerRun(100, func() {
		f.Reset(1)
		f.AddMemory(0x2000, make([]byte, 0))
		_ = b.Commit(&f)
	}); allocs != 0 {
		t.Errorf("%v allocations per commit into a reserved arena", allocs)
	}
}
