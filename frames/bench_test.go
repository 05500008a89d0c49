package frames

import (
	"sync"
	"testing"
)

const (
	benchFrames  = 1_000_000
	benchPCs     = 1000 // distinct tracepoint addresses
	benchPCOff   = 16
	benchRegSize = 24
)

var (
	benchOnce sync.Once
	benchBuf  *Buffer
)

// benchBuffer returns a buffer holding 1e6 frames, frame i collected at
// tracepoint 1+i%7 with PC 0x400000+(i%benchPCs)*16.
func benchBuffer(b *testing.B) *Buffer {
	benchOnce.Do(func() {
		buf := NewBuffer(MaxSize)
		r := make([]byte, benchRegSize)
		for i := 0; i < benchFrames; i++ {
			f := buf.NewFrame(1 + i%7)
			putU64(r[benchPCOff:], uint64(0x400000+(i%benchPCs)*16))
			f.AddRegisters(r)
			if err := buf.Commit(f); err != nil {
				b.Fatal(err)
			}
		}
		buf.FindPC(-1, 0, benchPCOff) // build the address index once
		benchBuf = buf
	})
	return benchBuf
}

// BenchmarkFindPC: tfind pc on 1e6 frames, from a random current frame.
func BenchmarkFindPC(b *testing.B) {
	buf := benchBuffer(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		after := (i * 7919) % benchFrames
		pc := uint64(0x400000 + (i%benchPCs)*16)
		if _, ok := buf.FindPC(after, pc, benchPCOff); !ok && after < benchFrames-benchPCs {
			b.Fatalf("FindPC(after %d, %#x) found nothing", after, pc)
		}
	}
}

// BenchmarkFindTracepoint: tfind tracepoint on 1e6 frames.
func BenchmarkFindTracepoint(b *testing.B) {
	buf := benchBuffer(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		after := (i * 7919) % (benchFrames - 10)
		if _, ok := buf.FindTracepoint(after, 1+i%7); !ok {
			b.Fatal("FindTracepoint found nothing")
		}
	}
}

// BenchmarkFindRangeWorstCase: tfind range with no match scans all 1e6
// frames.
func BenchmarkFindRangeWorstCase(b *testing.B) {
	buf := benchBuffer(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, ok := buf.FindRange(-1, 1, 2, true, benchPCOff); ok {
			b.Fatal("FindRange matched")
		}
	}
}

// BenchmarkCommitCircular: the cost of recording a frame once the
// circular buffer is full (each commit drops one frame).
func BenchmarkCommitCircular(b *testing.B) {
	buf := NewBuffer(DefaultSize)
	buf.SetCircular(true)
	r := make([]byte, 200)
	buf.FindPC(-1, 0, benchPCOff)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f := buf.NewFrame(1 + i%7)
		putU64(r[benchPCOff:], uint64(0x400000+(i%benchPCs)*16))
		f.AddRegisters(r)
		f.AddMemory(0x601000, r[:32])
		if err := buf.Commit(f); err != nil {
			b.Fatal(err)
		}
	}
}
