package fasttp

import (
	"encoding/binary"
	"fmt"
	"os"

	"golang.org/x/sys/cpu"

	"gotpstub/inferior"
	"gotpstub/jit"
	"gotpstub/tdesc"
	"gotpstub/tracing"
)

// The x86-64 description of the pads' records and clock
// (jit.BuildJumpPadAMD64); isa_arm64.go is the AArch64 one. Everything
// else in the data path (lanes, records, merging, the drainer) is the
// same on both.

// jitArch is the JIT backend the pads' conditions and collections are
// compiled with (jit.Compile).
const jitArch = "amd64"

// padReach is how far a jump to a pad reaches either way: a jmp rel32's
// ±2 GB. arenaWindowShift sizes the windows of code that share an arena
// (1 GB: every site of one reaches an arena mapped near the first).
const (
	padReach         = 1 << 31
	arenaWindowShift = 30
)

// usesCodeMap: the x86-64 placement asks the code map whether bytes
// after a ret or jmp are code and whether an entry's push may run in
// place (siteCandidates), so Prepare reads it ahead.
const usesCodeMap = true

// padFill fills a pad's room after its code: int3s.
var padFill = []byte{0xcc}

// buildPad builds the pad of spec.
func buildPad(spec jit.PadSpec) (*jit.JumpPad, error) { return jit.BuildJumpPadAMD64(spec) }

// placeSite places tp's jump and pad (placeX86).
func (in *Installer) placeSite(tp *tracing.Tracepoint, acts *padActions) error {
	return in.placeX86(tp, acts)
}

// vectorState has the pad of spec XSAVE the vector state when gdb
// collects an x87, SSE or AVX register (acts.xsave).
func vectorState(spec *jit.PadSpec, acts *padActions) {
	if acts.xsave {
		spec.XSaveMask, spec.XSaveSize = tdesc.XSaveMask(cpu.X86.HasAVX), tdesc.XSaveSize(cpu.X86.HasAVX)
	}
}

// ringRegBytes is the size of a record's register block: jit.PadRegs
// 8-byte slots in GDB's amd64 numbering.
const ringRegBytes = jit.PadRegs * 8

// tpRegister says how the pads read a thread's pointer when in.fsBase
// is set (laneUse).
const tpRegister = "thread pointer by rdfsbase"

// padThreadPointer says how the pads of process p find a thread's
// pointer: reg, from a register the thread reads itself (rdfsbase, when
// the kernel allows it); load, from %fs:0 (every thread's TCB points to
// itself); neither: every hit goes to the shared lane.
func padThreadPointer(p *inferior.Process) (reg, load bool) {
	reg = hasFSBase(p.Pid())
	return reg, !reg && tcbSelfPointers(p)
}

// padRecordSize is the size of a full record of this machine's pads
// (jit.PadRecordSize): header, register block when regs, collectCap bytes of
// blocks.
func padRecordSize(regs bool, collectCap uint32) uint64 {
	return jit.PadRecordSize(regs, collectCap)
}

// counterPeriod is the length of a time-stamp counter tick in
// nanoseconds when the architecture says it, 0 when the clock must
// measure it (the TSC's rate is not readable from user space).
func counterPeriod() float64 { return 0 }

// fastRegs gives the engine the register bytes of a record with a
// register block: the block itself is GDB's amd64 numbering, 8 bytes per
// register (tracing.FastRecord.Regs), and the XSAVE area, if any, is
// the vector state.
func fastRegs(h *tracing.FastRecord, r *RingRecord) {
	h.Regs, h.XSave = r.Regs, r.XSave
}

// hasFSBase reports whether threads of process pid may use rdfsbase: the
// kernel's AT_HWCAP2 has HWCAP2_FSGSBASE.
func hasFSBase(pid int) bool {
	auxv, err := os.ReadFile(fmt.Sprintf("/proc/%d/auxv", pid))
	if err != nil {
		return false
	}
	v, _ := inferior.AuxvValue(auxv, inferior.AtHWCap2)
	return v&inferior.HWCap2FSGSBase != 0
}

// tcbSelfPointers reports whether the pads may take a thread's pointer
// from %fs:0 (jit.PadSpec.TPLoad) in this process: every thread with a
// thread pointer has, at that address, the pointer itself (glibc's and
// musl's thread control block starts with its own address; a Go program
// without cgo, for one, keeps something else there), and there is at
// least one such thread. Running threads are looked at too when the
// stub patches live (in non-stop mode every thread may be running at
// the first tstart: seeing none, every hit went to the shared lane,
// where one thread preempted in the middle of a record holds back every
// other thread's records behind it).
func tcbSelfPointers(p *inferior.Process) bool {
	tps, err := p.AllThreadPointers()
	if err != nil || len(tps) == 0 {
		return false
	}
	for _, fs := range tps {
		var word [8]byte
		if n, _ := p.ReadMemory(fs, word[:]); n != 8 || binary.LittleEndian.Uint64(word[:]) != fs {
			return false
		}
	}
	return true
}

// stepInPad moves st, stopped at pc inside a pad with registers r, one
// instruction on (stepFixingPushf).
func stepInPad(st *inferior.Stopped, pc uint64, r *tdesc.Regs) error {
	return stepFixingPushf(st, pc, r.Uint64(tdesc.RSP))
}

// leftPad ends a thread's way out of a pad by single-steps, r its
// registers now (clearStepTF).
func leftPad(st *inferior.Stopped, r *tdesc.Regs) error { return clearStepTF(st, r) }

// refuseSite says why no tracepoint, jump or trap, may go at addr: on
// x86-64 nothing forbids one.
func (in *Installer) refuseSite(uint64) error { return nil }
