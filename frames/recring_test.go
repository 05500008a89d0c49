package frames

import (
	"fmt"
	"testing"
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
