package frames

import (
	"errors"
	"fmt"
	"testing"
)

// commitKinds are the frames BenchmarkCommit and TestCommitAllocs commit:
// what a fast tracepoint's drain stores per hit.
var commitKinds = []struct {
	name  string
	build func(fb *FrameBuilder)
}{
	// A tracepoint without actions: the 6-byte header.
	{"small", func(fb *FrameBuilder) {}},
	// A few collected variables: three short 'M' blocks (53 bytes).
	{"mem3", func(fb *FrameBuilder) {
		var v [8]byte
		fb.AddMemory(0x601040, v[:])
		fb.AddMemory(0x601080, v[:4])
		fb.AddMemory(0x7ffc1000, v[:8])
	}},
	// collect $regs on x86-64 with AVX: an 800-byte register block.
	{"regs800", func(fb *FrameBuilder) { fb.AddRegisters(benchRegs800[:]) }},
}

var benchRegs800 [800]byte

// fillCommit commits frames built by build into buf until the budget has
// been used twice over (a circular buffer has wrapped; a linear one was
// cleared when full), so that the arena and the record ring are allocated:
// the steady state of a long run.
func fillCommit(tb testing.TB, buf *Buffer, build func(*FrameBuilder)) {
	var fb FrameBuilder
	for total := 0; total < 2*buf.Size(); {
		fb.Reset(1)
		build(&fb)
		total += fb.Size()
		if err := buf.Commit(&fb); errors.Is(err, ErrFull) {
			buf.Clear()
		} else if err != nil {
			tb.Fatal(err)
		}
	}
}

// BenchmarkCommit measures Commit of the commitKinds frames into a
// linear buffer (cleared when full, the clear not timed) and a circular
// one (each commit drops old frames), reusing one FrameBuilder as the
// fast-tracepoint drain does. ns/op is per frame.
func BenchmarkCommit(b *testing.B) {
	for _, k := range commitKinds {
		for _, circular := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/circular=%v", k.name, circular), func(b *testing.B) {
				buf := NewBuffer(DefaultSize)
				buf.SetCircular(circular)
				fillCommit(b, buf, k.build)
				var fb FrameBuilder
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					fb.Reset(1 + i&7)
					fb.SetFallbackPC(0x401000)
					k.build(&fb)
					if err := buf.Commit(&fb); err != nil {
						b.StopTimer()
						buf.Clear()
						b.StartTimer()
					}
				}
			})
		}
	}
}

// TestCommitAllocs: in steady state Commit allocates nothing, whatever
// the frame and the mode.
func TestCommitAllocs(t *testing.T) {
	for _, k := range commitKinds {
		for _, circular := range []bool{false, true} {
			buf := NewBuffer(256 << 10)
			buf.SetCircular(circular)
			fillCommit(t, buf, k.build)
			var fb FrameBuilder
			allocs := testing.AllocsPerRun(5000, func() {
				fb.Reset(2)
				fb.SetFallbackPC(0x401000)
				k.build(&fb)
				if err := buf.Commit(&fb); errors.Is(err, ErrFull) {
					buf.Clear() // allocates nothing either
				} else if err != nil {
					t.Fatal(err)
				}
			})
			// A linear buffer's ErrFull (once per fill) is the only
			// allocation: it rounds to 0 per run.
			if allocs != 0 {
				t.Errorf("%s circular=%v: %.2f allocations per commit, want 0", k.name, circular, allocs)
			}
		}
	}
}
