package fasttp

import (
	"gotpstub/inferior"
	"gotpstub/jit"
	"gotpstub/tracing"
)

// The AArch64 description of the pads' records and clock
// (jit.BuildJumpPadA64); isa_amd64.go is the x86-64 one.

// jitArch is the JIT backend the pads' conditions and collections are
// compiled with (jit.Compile).
const jitArch = "arm64"

// padReach is how far a jump to a pad reaches either way: a b's ±128
// MB. arenaWindowShift sizes the windows of code that share an arena (64
// MB: every site of one reaches an arena mapped near the first, unless
// the nearest free memory is far; arenaSpaceLocked then maps another).
const (
	padReach         = 1 << 27
	arenaWindowShift = 26
)

// usesCodeMap: the arm64 placement (one b, placeA64) asks no CodeOracle,
// so Prepare has nothing to read ahead.
const usesCodeMap = false

// padFill fills a pad's room after its code: brk #0 words.
var padFill = []byte{0x00, 0x00, 0x20, 0xd4}

// buildPad builds the pad of spec.
func buildPad(spec jit.PadSpec) (*jit.JumpPad, error) { return jit.BuildJumpPadA64(spec) }

// placeSite places tp's jump and pad (placeA64).
func (in *Installer) placeSite(tp *tracing.Tracepoint, acts *padActions) error {
	return in.placeA64(tp, acts)
}

// vectorState: an arm64 register block always holds v0-v31, fpsr and
// fpcr (jit.PadRegBlockARM64); nothing more to save.
func vectorState(*jit.PadSpec, *padActions) {}

// ringRegBytes is the size of a record's register block: the arm64 pad
// block, jit.PadRegsARM64 8-byte slots in GDB's aarch64 numbering (x0-x30,
// sp, pc, cpsr), then q0-q31 (16 bytes each, at jit.PadQRegsARM64), fpsr
// and fpcr (8 bytes each).
const ringRegBytes = jit.PadRegBlockARM64

// tpRegister says how the pads read a thread's pointer (laneUse).
const tpRegister = "thread pointer from tpidr_el0"

// padThreadPointer says how the pads of process p find a thread's
// pointer: arm64 pads always read tpidr_el0 (reg), readable from EL0
// everywhere.
func padThreadPointer(*inferior.Process) (reg, load bool) { return true, false }

// padRecordSize is the size of a full record of this machine's pads
// (jit.PadRecordSizeARM64): header, register block when regs, collectCap bytes of
// blocks.
func padRecordSize(regs bool, collectCap uint32) uint64 {
	return jit.PadRecordSizeARM64(regs, collectCap)
}

// counterPeriod is the length of a tick of the virtual counter (the
// pads' cntvct_el0) in nanoseconds: cntfrq_el0 is architecturally its
// frequency. 0 (measure it) if the register reads 0.
func counterPeriod() float64 {
	if f := cntfrq(); f != 0 {
		return 1e9 / float64(f)
	}
	return 0
}

// fastRegs gives the engine the register bytes of a record with a
// register block: its first jit.PadRegsARM64 slots are GDB's aarch64
// registers 0-33, 8 bytes each (tracing.FastRecord.Regs); the rest, v0-v31
// (GDB's 34-65) and fpsr, fpcr, is tracing.FastRecord.FPSIMD.
func fastRegs(h *tracing.FastRecord, r *RingRecord) {
	if len(r.Regs) < ringRegBytes {
		return
	}
	h.Regs, h.FPSIMD = r.Regs[:jit.PadQRegsARM64], r.Regs[jit.PadQRegsARM64:]
}
