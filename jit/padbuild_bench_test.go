package jit

import "testing"

// BenchmarkBuildJumpPad measures building one no-action pad: the stub
// builds one per fast tracepoint at tstart, then places it
// (JumpPad.Place).
func BenchmarkBuildJumpPad(b *testing.B) {
	spec := PadSpec{Addr: 0x3c0000, TPAddr: 0x401190, Ctl: 0x7f0000000000, TPIndex: 5, Lanes: MaxLanes,
		TPLoad: true, TailAddr: 0x3c0300, FrameBase: 6}
	for b.Loop() {
		if _, err := BuildJumpPadAMD64(spec); err != nil {
			b.Fatal(err)
		}
	}
}
