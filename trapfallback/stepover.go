package trapfallback

import (
	"bytes"

	"gotpstub/inferior"
	"gotpstub/trapfallback/displace"
)

// Out-of-line step-overs of gdb's breakpoints (inferior.DisplacedStepper).
//
// In non-stop mode a thread resumed from one of gdb's breakpoints (gdb
// leaves the step-over to the stub when it evaluates the breakpoint's
// condition there, say) runs the instruction under it the way a trap
// tracepoint's hit does: emulated, skipped, or copied to a slot of its
// own and single-stepped there, the int3 left in memory, so the other
// threads need not stop.

// DisplacedStep is the process's inferior.DisplacedStepper: it executes
// the instruction under the breakpoint at addr for st's thread out of
// line. It declines instructions the ISA's Analyse refuses, and a first slot near
// addr while other threads run (mapping one injects a system call,
// which wants them stopped).
func (in *Installer) DisplacedStep(st *inferior.Stopped, addr uint64) (bool, error) {
	d, err := in.displacedAt(addr)
	if d == nil {
		return false, err
	}
	return true, in.stepOver(st, &site{addr: addr, insn: *d}, false)
}

// displacedAt returns the displaced form of the instruction at addr: a
// trap tracepoint's, or one prepared (and kept, with the bytes it was
// made from) for a breakpoint.
// It returns nil when the instruction is not displaced, with
// inferior.ErrNeedStop when only its slot is missing and threads run.
func (in *Installer) displacedAt(addr uint64) (*displaced, error) {
	code := make([]byte, isa.MaxInsnLen)
	n, _ := in.proc.ReadMemory(addr, code)
	if n == 0 {
		return nil, nil
	}
	code = code[:n]
	in.mu.Lock()
	defer in.mu.Unlock()
	if s := in.sites[addr]; s != nil {
		return &s.insn, nil
	}
	if d := in.steps[addr]; d != nil && bytes.HasPrefix(code, d.insn.Bytes()) {
		return d, nil
	}
	insn, err := isa.Analyse(addr, code)
	if err != nil {
		return nil, nil
	}
	if insn.How() == displace.CopyAndStep && !in.slotReadyLocked(addr) {
		return nil, inferior.ErrNeedStop
	}
	d, err := in.placeLocked(addr, insn)
	if err != nil {
		return nil, nil
	}
	in.steps[addr] = &d
	return &d, nil
}

// slotReadyLocked reports whether slotNear can give a slot near addr
// without mapping a new area, or may map one (no thread running).
func (in *Installer) slotReadyLocked(addr uint64) bool {
	if a := in.scratch[windowOf(addr)]; a != nil && a.used < scratchSize/isa.SlotSize {
		return true
	}
	return !in.proc.ThreadsRunning()
}
