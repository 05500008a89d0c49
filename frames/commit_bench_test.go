package frames

import (
	"fmt"
	"testing"
)

// BenchmarkCommit measures Commit of small (header-only) frames and of
// frames with an 800-byte register block, into a linear buffer (cleared
// when full; the clear is not timed) and a circular one, reusing one
// FrameBuilder as the fast-tracepoint drainer does.
func BenchmarkCommit(b *testing.B) {
	regs := make([]byte, 800)
	for _, withRegs := range []bool{false, true} {
		for _, circular := range []bool{false, true} {
			b.Run(fmt.Sprintf("regs=%v/circular=%v", withRegs, circular), func(b *testing.B) {
				buf := NewBuffer(4 << 20)
				buf.SetCircular(circular)
				var fb FrameBuilder
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					fb.Reset(1)
					if withRegs {
						fb.AddRegisters(regs)
					}
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
