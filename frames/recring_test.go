package frames

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// recRing keeps every present record where at finds it, across chunk
// boundaries, drops and resets, and reuses chunks instead of growing.
func TestRecRing(t *testing.T) {
	var r recRing
	const n = 3*recChunkLen + 17
	for s := int64(0); s < n; s++ {
		r.add(s).word = uint64(s)
	}
	for s := int64(0); s < n; s++ {
		if got := r.at(s).word; got != uint64(s) {
			t.Fatalf("at(%d) = %d", s, got)
		}
	}
	r.dropBelow(2*recChunkLen + 5) // two chunks wholly below the head
	if len(r.chunks) != 2 || len(r.spare) != 2 || r.base != 2*recChunkLen {
		t.Fatalf("after the drop: %d chunks, %d spare, base %d", len(r.chunks), len(r.spare), r.base)
	}
	for s := int64(2*recChunkLen + 5); s < n; s++ {
		if got := r.at(s).word; got != uint64(s) {
			t.Fatalf("at(%d) = %d after the drop", s, got)
		}
	}
	for s := int64(n); s < 5*recChunkLen; s++ { // one more chunk: a spare one
		r.add(s).word = uint64(s)
	}
	if len(r.chunks) != 3 || len(r.spare) != 1 || r.at(5*recChunkLen-1).word != 5*recChunkLen-1 {
		t.Fatalf("after refilling: %d chunks, %d spare", len(r.chunks), len(r.spare))
	}
	r.reset(recChunkLen) // keeps two chunks' worth for reuse
	if len(r.chunks) != 0 || r.base != 0 || len(r.spare) != 2 {
		t.Fatalf("after reset: %d chunks, base %d, %d spare", len(r.chunks), r.base, len(r.spare))
	}
	r.add(0).word = 7
	if r.at(0).word != 7 || len(r.spare) != 1 {
		t.Fatalf("after reset and add: %d, %d spare", r.at(0).word, len(r.spare))
	}
}

// A circular buffer that keeps dropping its oldest frames holds a bounded
// number of record chunks, however many frames pass through it, and its
// frames stay readable in order.
func TestCircularBufferReusesRecordChunks(t *testing.T) {
	const size = 64 << 10
	b := NewBuffer(size)
	b.SetCircular(true)
	most := size/HeaderSize/recChunkLen + 2
	for i := range 200_000 {
		w := b.BeginBatch()
		_, err := w.CommitHeader(1+i%5, uint64(0x1000+i), int64(i))
		w.End()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if n := len(b.recs.chunks) + len(b.recs.spare); n > most {
			t.Fatalf("frame %d: %d record chunks, at most %d expected", i, n, most)
		}
	}
	count := b.Count()
	if count == 0 {
		t.Fatal("no frames present")
	}
	for _, num := range []int{0, count / 2, count - 1} {
		f, ok := b.Frame(num)
		if !ok {
			t.Fatalf("frame %d of %d missing", num, count)
		}
		if want := 1 + (200_000-count+num)%5; int(f.TPNum) != want {
			t.Errorf("frame %d: tracepoint %d, want %d", num, f.TPNum, want)
		}
	}
}

func BenchmarkCommitHeader(b *testing.B) {
	for _, circular := range []bool{false, true} {
		b.Run(fmt.Sprint("circular=", circular), func(b *testing.B) {
			buf := NewBuffer(256 << 20)
			buf.SetCircular(circular)
			w := buf.BeginBatch()
			defer w.End()
			for i := 0; b.Loop(); i++ {
				if _, err := w.CommitHeader(1, 0x1000, int64(i)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// waitGrown waits until no growth (Reserve, growAheadLocked) is at work.
func waitGrown(b *Buffer) {
	for {
		b.mu.Lock()
		busy := b.reserving
		b.mu.Unlock()
		if !busy {
			return
		}
		runtime.Gosched()
	}
}

// The ring grows beside the writer (growAheadLocked: pieces made in the
// background as the writer nears the end of its storage): frames
// committed meanwhile, crossing pieces, and Clears leave every frame as
// the model has it.
func TestRingGrowsAheadOfCommits(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const size = 9<<20 + 4321
	b := NewBuffer(size)
	m := &model{size: size}
	var fb FrameBuilder
	grew := 0
	for i := range 40_000 {
		if i%15000 == 14999 {
			b.Clear()
			m.frames, m.used, m.created = nil, 0, 0
		}
		b.mu.Lock()
		before := b.ring.allocated()
		b.mu.Unlock()
		mf := randomFrame(r, b, &fb, true, 1200)
		errB, errM := b.Commit(&fb), m.commit(mf)
		if (errB == nil) != (errM == nil) {
			t.Fatalf("frame %d: buffer %v, model %v", i, errB, errM)
		}
		if i%4999 == 0 {
			waitGrown(b)
			m.check(t, b, fmt.Sprintf("after frame %d", i))
		}
		b.mu.Lock()
		if b.ring.allocated() > before && before > 0 {
			grew++
		}
		b.mu.Unlock()
	}
	waitGrown(b)
	m.check(t, b, "at the end")
	if grew == 0 || b.ring.allocated() < 2*ringChunk {
		t.Fatalf("the ring grew %d times to %d bytes: the test exercises nothing", grew, b.ring.allocated())
	}
}

// byteRing stores and reads back bytes across its pieces and its end.
func TestByteRing(t *testing.T) {
	const size = 2*ringChunk + 10
	r := byteRing{size: size}
	r.ensure(size)
	if len(r.chunks) != 3 || len(r.chunks[2]) != 10 || r.allocated() != size {
		t.Fatalf("%d pieces, %d bytes", len(r.chunks), r.allocated())
	}
	p := make([]byte, 40)
	for i := range p {
		p[i] = byte(i + 1)
	}
	for _, at := range []int{0, ringChunk - 5, 2*ringChunk - 3, size - 7} {
		end := r.write(at, p)
		if want := (at + len(p)) % size; end != want {
			t.Errorf("write at %d ends at %d, want %d", at, end, want)
		}
		if got := r.appendTo(nil, at, len(p)); !bytes.Equal(got, p) {
			t.Errorf("read at %d: % x", at, got)
		}
		if v, ok := r.slice(at, len(p)); ok != (at%ringChunk+len(p) <= len(r.chunks[at/ringChunk])) || ok && !bytes.Equal(v, p) {
			t.Errorf("slice at %d: %v, % x", at, ok, v)
		}
	}
	r.resize(ringChunk + 1) // keeps the first piece only
	if len(r.chunks) != 1 || r.allocated() != ringChunk {
		t.Errorf("after resize: %d pieces, %d bytes", len(r.chunks), r.allocated())
	}
	r.attach(1, [][]byte{newChunk(r.size, 1), make([]byte, 5)}) // the second: no such piece
	if len(r.chunks) != 2 || len(r.chunks[1]) != 1 {
		t.Errorf("after attach: %d pieces", len(r.chunks))
	}
}

// BenchmarkCommitWorst commits 1 KB frames into a 512 MiB buffer with
// 16 MiB reserved, as a drainer of `collect $regs` records would, and
// reports the slowest single commit: the time the buffer's lock (which
// gdb's requests wait for) is held by growth at worst.
func BenchmarkCommitWorst(b *testing.B) {
	for b.Loop() {
		buf := NewBuffer(512 << 20)
		buf.Reserve(16 << 20)
		var f FrameBuilder
		data := make([]byte, 1000)
		var worst time.Duration
		for range 300_000 {
			f.Reset(1)
			f.AddMemory(0x1000, data)
			t0 := time.Now()
			if err := buf.Commit(&f); err != nil {
				b.Fatal(err)
			}
			worst = max(worst, time.Since(t0))
		}
		b.ReportMetric(float64(worst.Microseconds()), "worst-µs")
	}
}
