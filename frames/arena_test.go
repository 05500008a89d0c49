package frames

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// model is the reference a Buffer is checked against: the present frames'
// bytes, oldest first, dropped and refused the simple way.
type model struct {
	size     int
	circular bool
	frames   []modelFrame
	used     int
	created  int
}

type modelFrame struct {
	raw      []byte
	tp       int
	pc       uint64
	hasPC    bool
	regs     bool
	fallback uint64
}

func (m *model) commit(f modelFrame) error {
	need := len(f.raw) + EOBMarkerSize
	if need > m.size {
		return ErrFull
	}
	if m.used+need > m.size && !m.circular {
		return ErrFull
	}
	for m.used+need > m.size {
		m.used -= len(m.frames[0].raw)
		m.frames = m.frames[1:]
	}
	m.frames = append(m.frames, f)
	m.used += len(f.raw)
	m.created++
	return nil
}

// randomFrame builds a frame of random shape: header only, memory blocks
// of random lengths, TSVs, and (when withRegs) a 24-byte register block
// whose PC (offset 8) is sometimes 0, so the fallback address is used.
func randomFrame(r *rand.Rand, b *Buffer, fb *FrameBuilder, withRegs bool, maxMem int) modelFrame {
	tp := 1 + r.IntN(5)
	fb.Reset(tp)
	mf := modelFrame{tp: tp}
	if r.IntN(4) != 0 {
		mf.fallback = 0x400000 + uint64(tp)*0x10
		fb.SetFallbackPC(mf.fallback)
		mf.pc, mf.hasPC = mf.fallback, true
	}
	if withRegs && r.IntN(3) != 0 {
		pc := uint64(0)
		if r.IntN(4) != 0 {
			pc = 0x500000 + uint64(r.IntN(7))*4
		}
		fb.AddRegisters(regs(24, 8, pc, byte(r.Uint32())))
		mf.regs = true
		if pc != 0 {
			mf.pc, mf.hasPC = pc, true
		} else if !mf.hasPC {
			mf.pc, mf.hasPC = 0, true // a register block with PC 0 and no fallback: address 0
		}
	}
	for i := r.IntN(4); i > 0; i-- {
		switch r.IntN(3) {
		case 0:
			fb.AddTSV(r.IntN(3), r.Int64())
		default:
			data := make([]byte, r.IntN(maxMem+1))
			for j := range data {
				data[j] = byte(r.Uint32())
			}
			fb.AddMemory(r.Uint64(), data)
		}
	}
	fr := &Frame{Raw: append([]byte(nil), fb.raw...)}
	putU32(fr.Raw[2:6], uint32(len(fr.Raw)-HeaderSize))
	mf.raw = fr.Raw
	return mf
}

func putU32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

// check compares every observable of b with m: counters, the qTBuffer
// byte stream, each frame and the tfind searches.
func (m *model) check(t *testing.T, b *Buffer, what string) {
	t.Helper()
	st := b.Stats()
	if st.Count != len(m.frames) || st.Used != m.used || st.Created != m.created || st.Size != m.size {
		t.Fatalf("%s: stats %+v, want count %d used %d created %d", what, st, len(m.frames), m.used, m.created)
	}
	var all []byte
	for _, f := range m.frames {
		all = append(all, f.raw...)
	}
	if got := b.ReadRaw(0, m.used+10); !bytes.Equal(got, all) {
		t.Fatalf("%s: ReadRaw(0) differs from the frames (%d vs %d bytes)", what, len(got), len(all))
	}
	// A read from the middle, crossing frames (and maybe the arena's end).
	if m.used > 10 {
		off, n := m.used/3, m.used/2
		if got := b.ReadRaw(off, n); !bytes.Equal(got, all[off:off+n]) {
			t.Fatalf("%s: ReadRaw(%d, %d) differs", what, off, n)
		}
	}
	num := 0
	b.Frames(func(f *Frame) bool {
		if f.Num != num || f.TPNum != m.frames[num].tp || !bytes.Equal(f.Raw, m.frames[num].raw) {
			t.Fatalf("%s: Frames: frame %d (tp %d) differs from the model's", what, f.Num, f.TPNum)
		}
		num++
		return true
	})
	if num != len(m.frames) {
		t.Fatalf("%s: Frames visited %d frames, want %d", what, num, len(m.frames))
	}
	for i, mf := range m.frames {
		f, ok := b.Frame(i)
		if !ok || f.Num != i || f.TPNum != mf.tp || !bytes.Equal(f.Raw, mf.raw) {
			t.Fatalf("%s: Frame(%d) differs from the model's", what, i)
		}
		if err := f.Validate(); err != nil {
			t.Fatalf("%s: Frame(%d): %v", what, i, err)
		}
		if pc, ok := f.PC(8); ok != mf.hasPC || pc != mf.pc {
			t.Fatalf("%s: Frame(%d).PC = %#x, %v; want %#x, %v", what, i, pc, ok, mf.pc, mf.hasPC)
		}
	}
	if _, ok := b.Frame(len(m.frames)); ok {
		t.Fatalf("%s: Frame(%d) exists past the last frame", what, len(m.frames))
	}
	// tfind tracepoint, pc, range and outside from a few starting points.
	for _, after := range []int{-1, 0, len(m.frames) / 2, len(m.frames) - 2} {
		for tp := 1; tp <= 5; tp++ {
			want := -1
			for i := max(after+1, 0); i < len(m.frames); i++ {
				if m.frames[i].tp == tp {
					want = i
					break
				}
			}
			if got := frameNum(b.FindTracepoint(after, tp)); got != want {
				t.Fatalf("%s: FindTracepoint(after %d, tp %d) = frame %d, want %d", what, after, tp, got, want)
			}
		}
		for _, pc := range []uint64{0x400010, 0x400030, 0x500000, 0x500008, 0} {
			want := -1
			for i := max(after+1, 0); i < len(m.frames); i++ {
				if m.frames[i].hasPC && m.frames[i].pc == pc {
					want = i
					break
				}
			}
			if got := frameNum(b.FindPC(after, pc, 8)); got != want {
				t.Fatalf("%s: FindPC(after %d, %#x) = frame %d, want %d", what, after, pc, got, want)
			}
		}
		for _, inside := range []bool{true, false} {
			want := -1
			for i := max(after+1, 0); i < len(m.frames); i++ {
				f := m.frames[i]
				if f.hasPC && (0x500000 <= f.pc && f.pc <= 0x500010) == inside {
					want = i
					break
				}
			}
			if got := frameNum(b.FindRange(after, 0x500000, 0x500010, inside, 8)); got != want {
				t.Fatalf("%s: FindRange(after %d, inside %v) = frame %d, want %d", what, after, inside, got, want)
			}
		}
	}
}

func frameNum(f *Frame, ok bool) int {
	if !ok {
		return -1
	}
	return f.Num
}

// TestArenaAgainstModel commits frames of mixed sizes into small buffers
// (odd sizes, so frames straddle the end of the arena at every offset),
// linear and circular, and checks the buffer against the model as it
// goes: wrap-around, drops of one or many frames, index catch-up after
// many drops, tfind after wrap.
func TestArenaAgainstModel(t *testing.T) {
	for _, tc := range []struct {
		size     int
		circular bool
		maxMem   int
		commits  int
	}{
		{997, true, 40, 3000},
		{1 << 12, true, 300, 3000},
		{333, true, 250, 2000}, // frames nearly as large as the buffer
		{64, true, 30, 500},
		{5000, false, 100, 400},
		{200 << 10, false, 2000, 400}, // the arena grows by doubling
		{200 << 10, true, 3000, 800},
	} {
		t.Run(fmt.Sprintf("size=%d/circular=%v", tc.size, tc.circular), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(tc.size), 1))
			b := NewBuffer(tc.size)
			b.SetCircular(tc.circular)
			m := &model{size: tc.size, circular: tc.circular}
			var fb FrameBuilder
			for i := 0; i < tc.commits; i++ {
				mf := randomFrame(r, b, &fb, true, tc.maxMem)
				err, want := b.Commit(&fb), m.commit(mf)
				if !errors.Is(err, want) || (err == nil) != (want == nil) {
					t.Fatalf("commit %d (%d bytes): err %v, want %v", i, len(mf.raw), err, want)
				}
				// Check often early on, then now and then (and always
				// right after searches built the indexes, so that they
				// are caught up incrementally).
				if i < 50 || r.IntN(25) == 0 {
					m.check(t, b, fmt.Sprintf("after commit %d", i))
				}
			}
			m.check(t, b, "at the end")
		})
	}
}

// TestFrameStaysValidAfterWrap: a selected frame (tfind) keeps its bytes
// when a circular buffer reuses their space, and after Clear.
func TestFrameStaysValidAfterWrap(t *testing.T) {
	b := NewBuffer(10*tsvFrameSize + EOBMarkerSize)
	b.SetCircular(true)
	for i := int64(0); i < 10; i++ {
		if err := b.Commit(frameWithTSV(b, 1, i)); err != nil {
			t.Fatal(err)
		}
	}
	f3, _ := b.Frame(3)
	want := append([]byte(nil), f3.Raw...)
	var viaFrames *Frame
	b.Frames(func(f *Frame) bool { viaFrames = f; return f.Num < 5 })
	wantFrames := append([]byte(nil), viaFrames.Raw...)
	for i := int64(10); i < 100; i++ {
		if err := b.Commit(frameWithTSV(b, 2, i)); err != nil {
			t.Fatal(err)
		}
	}
	b.Clear()
	for i := int64(0); i < 5; i++ {
		if err := b.Commit(frameWithTSV(b, 2, 1000+i)); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(f3.Raw, want) {
		t.Error("a frame returned by Frame changed when its space was reused")
	}
	if !bytes.Equal(viaFrames.Raw, wantFrames) {
		t.Error("a frame passed to Frames' callback changed when its space was reused")
	}
	if v, _ := f3.TSV(1); v != 3 {
		t.Errorf("frame 3 holds id %d", v)
	}
}

// TestIndexesAfterManyDrops: tfind by tracepoint and PC, done now and
// then while a circular buffer drops millions of bytes' worth of frames,
// always agrees with a scan (the lazily caught-up indexes and their
// rebuilds once mostly stale).
func TestIndexesAfterManyDrops(t *testing.T) {
	b := NewBuffer(4000)
	b.SetCircular(true)
	var fb FrameBuilder
	const n = 200000
	for i := 0; i < n; i++ {
		fb.Reset(1 + i%7)
		if i%3 == 0 {
			fb.AddRegisters(regs(24, 8, uint64(0x1000+i%11), 0))
		} else {
			fb.SetFallbackPC(uint64(0x1000 + i%13))
		}
		if i%5 == 0 {
			fb.AddMemory(uint64(i), make([]byte, i%50))
		}
		if err := b.Commit(&fb); err != nil {
			t.Fatal(err)
		}
		if i%9973 != 0 && i != n-1 {
			continue
		}
		count := b.Count()
		for num := 0; num < count; num += 1 + num/4 {
			f, _ := b.Frame(num)
			pc, _ := f.PC(8)
			if got := frameNum(b.FindTracepoint(num-1, f.TPNum)); got != num {
				t.Fatalf("commit %d: FindTracepoint(after %d, tp %d) = %d", i, num-1, f.TPNum, got)
			}
			if got := frameNum(b.FindPC(num-1, pc, 8)); got != num {
				t.Fatalf("commit %d: FindPC(after %d, %#x) = %d", i, num-1, pc, got)
			}
			if got := frameNum(b.FindRange(num-1, pc, pc, true, 8)); got != num {
				t.Fatalf("commit %d: FindRange(after %d, %#x) = %d", i, num-1, pc, got)
			}
		}
	}
	if b.Created() != n {
		t.Errorf("Created() = %d", b.Created())
	}
}

// TestLinearAfterWrap: switching a wrapped circular buffer to linear
// keeps its frames and refuses what does not fit; Clear and SetSize reuse
// or drop the arena correctly.
func TestLinearAfterWrap(t *testing.T) {
	size := 4*tsvFrameSize + EOBMarkerSize + 7
	b := NewBuffer(size)
	b.SetCircular(true)
	for i := int64(0); i < 11; i++ {
		if err := b.Commit(frameWithTSV(b, 1, i)); err != nil {
			t.Fatal(err)
		}
	}
	b.SetCircular(false)
	if err := b.Commit(frameWithTSV(b, 1, 11)); !errors.Is(err, ErrFull) {
		t.Fatalf("linear commit into a full buffer: %v", err)
	}
	if got := ids(t, b); fmt.Sprint(got) != "[7 8 9 10]" {
		t.Errorf("frames %v, want [7 8 9 10]", got)
	}
	b.Clear()
	for i := int64(0); i < 4; i++ {
		if err := b.Commit(frameWithTSV(b, 1, 20+i)); err != nil {
			t.Fatal(err)
		}
	}
	if got := ids(t, b); fmt.Sprint(got) != "[20 21 22 23]" {
		t.Errorf("after Clear: frames %v", got)
	}
	for _, n := range []int{2 * tsvFrameSize, 1 << 20, size} {
		if err := b.SetSize(n); err != nil {
			t.Fatal(err)
		}
		b.SetCircular(true)
		for i := int64(0); i < 9; i++ {
			if err := b.Commit(frameWithTSV(b, 1, i)); err != nil {
				t.Fatal(err)
			}
		}
		want := min(9, (n-EOBMarkerSize)/tsvFrameSize)
		if b.Count() != want {
			t.Errorf("SetSize(%d): %d frames, want %d", n, b.Count(), want)
		}
		if got := ids(t, b); len(got) == 0 || got[len(got)-1] != 8 {
			t.Errorf("SetSize(%d): frames %v", n, got)
		}
	}
}

// TestWriteTFileAfterWrap: the tfile of a wrapped circular buffer holds
// the present frames, oldest first.
func TestWriteTFileAfterWrap(t *testing.T) {
	b := NewBuffer(1000)
	b.SetCircular(true)
	r := rand.New(rand.NewPCG(7, 7))
	var fb FrameBuilder
	for i := 0; i < 300; i++ {
		randomFrame(r, b, &fb, true, 60)
		if err := b.Commit(&fb); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	h := TFileHeader{RegBlockSize: 24, Status: "0;tstop::0"}
	if err := WriteTFile(&out, h, b); err != nil {
		t.Fatal(err)
	}
	tf, err := ReadTFile(&out)
	if err != nil {
		t.Fatal(err)
	}
	if len(tf.Frames) != b.Count() {
		t.Fatalf("tfile has %d frames, buffer %d", len(tf.Frames), b.Count())
	}
	for i, got := range tf.Frames {
		want, _ := b.Frame(i)
		if !bytes.Equal(got.Raw, want.Raw) {
			t.Fatalf("tfile frame %d differs", i)
		}
	}
}

// TestArenaExactEnd: frames ending exactly at the end of the budget, when
// the arena grows to the budget for them and when it already has.
func TestArenaExactEnd(t *testing.T) {
	const frameSize = 5000
	for _, size := range []int{14 * frameSize, 95} {
		b := NewBuffer(size)
		b.SetCircular(true)
		m := &model{size: size, circular: true}
		var fb FrameBuilder
		for i := 0; i < 40; i++ {
			fb.Reset(1 + i%2)
			fs := frameSize
			if size < frameSize {
				fs = 19
			}
			fb.AddMemory(uint64(i), bytes.Repeat([]byte{byte(i)}, fs-HeaderSize-11))
			mf := modelFrame{raw: append([]byte(nil), fb.raw...), tp: 1 + i%2}
			putU32(mf.raw[2:6], uint32(fs-HeaderSize))
			if err, want := b.Commit(&fb), m.commit(mf); err != want {
				t.Fatalf("size %d commit %d: err %v, want %v", size, i, err, want)
			}
			m.check(t, b, fmt.Sprintf("size %d commit %d", size, i))
		}
	}
}
