// Package trapfallback implements tracepoints with int3 traps: the way
// every tracepoint can be hit, and the fallback wherever no jump pad can be
// placed.
//
// A hit stops only the hitting thread. On the stub's ptrace thread the
// installer hands the thread to the trace engine (condition, collection,
// passcount), runs while-stepping, then executes the instruction the trap
// replaced out of line ("displaced stepping") so the int3 never leaves
// memory and other threads never miss a hit:
//
//   - relative branches (jmp, jcc, call rel32, loop, jrcxz) are emulated
//     from the saved registers, since their target depends on where they
//     run;
//   - endbr64 and nop are skipped; push reg, mov %rsp,%rbp, pop reg and
//     ret are emulated too (the usual first and last instructions of a
//     function);
//   - every other instruction is copied to a scratch slot allocated in the
//     inferior within ±2 GB of the tracepoint, its rip-relative
//     displacement re-encoded for the new address, single-stepped there,
//     and the pc (and, for an indirect call, the pushed return address)
//     moved back to the original code.
//
// The same displaced steps take threads over gdb's breakpoints whose
// hit the stub resumes itself (a false target-side condition) or gdb
// resumes in non-stop mode: the Installer is the process's
// inferior.DisplacedStepper (stepover.go), so the other threads need
// not stop while the int3 would be out of memory.
package trapfallback

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"golang.org/x/arch/x86/x86asm"

	"gotpstub/inferior"
	"gotpstub/tdesc"
	"gotpstub/tracing"
)

// scratchSize is the size of one scratch area: slotSize-byte slots, one
// per trapped address, allocated per 1 GiB window of code.
const scratchSize = 4096

// slotSize holds one relocated instruction (at most 15 bytes) and the
// 5-byte jump back after it.
const slotSize = 32

// maxInsnLen is the longest x86-64 instruction.
const maxInsnLen = 15

// Installer installs tracepoints as int3 traps in one process. It
// implements tracing.Installer.
type Installer struct {
	proc   *inferior.Process
	engine *tracing.Engine

	mu      sync.Mutex
	sites   map[uint64]*site
	steps   map[uint64]*displaced   // breakpoints' out-of-line step-overs (stepover.go)
	scratch map[uint64]*scratchArea // 1 GiB window → its current area
	pending []uint64                // traps to remove once the ptrace thread is free
	inHook  bool
}

// site is one trapped address and the tracepoints that share it.
type site struct {
	addr  uint64
	insn  displaced
	tps   []*tracing.Tracepoint
	trap  bool // an int3 is in memory
	dirty bool // removal requested during a hit
}

// New returns an installer for p that reports hits to e, and registers
// itself as p's trap hook and displaced stepper.
func New(p *inferior.Process, e *tracing.Engine) *Installer {
	in := &Installer{proc: p, engine: e, sites: map[uint64]*site{}, steps: map[uint64]*displaced{}, scratch: map[uint64]*scratchArea{}}
	p.SetTrapHook(in.hook)
	registerStepper(p, in)
	return in
}

// Install puts tp's trap in memory (once per address).
func (in *Installer) Install(tp *tracing.Tracepoint) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	s := in.sites[tp.Addr]
	if s == nil {
		buf := make([]byte, maxInsnLen)
		n, err := in.proc.ReadMemory(tp.Addr, buf)
		if n == 0 {
			return fmt.Errorf("tracepoint %d at %#x: reading the instruction: %w", tp.Num, tp.Addr, err)
		}
		d, err := analyse(tp.Addr, buf[:n])
		if err != nil {
			return fmt.Errorf("tracepoint %d at %#x: %w", tp.Num, tp.Addr, err)
		}
		if d.kind == copyAndStep {
			// Each address gets its own slot, written once here, so a
			// hit only moves the pc.
			slot, err := in.slotNear(tp.Addr)
			if err == nil {
				err = d.relocate(slot)
			}
			if err == nil {
				err = in.proc.WriteMemory(slot, d.relocated)
			}
			if err != nil {
				return fmt.Errorf("tracepoint %d at %#x: %w", tp.Num, tp.Addr, err)
			}
		}
		s = &site{addr: tp.Addr, insn: d}
		in.sites[tp.Addr] = s
	}
	for _, t := range s.tps {
		if t == tp {
			return nil
		}
	}
	s.tps = append(s.tps, tp)
	s.dirty = false
	if !s.trap {
		if err := in.proc.InsertInternalTrap(tp.Addr); err != nil {
			return fmt.Errorf("tracepoint %d at %#x: inserting the trap: %w", tp.Num, tp.Addr, err)
		}
		s.trap = true
	}
	return nil
}

// Remove takes tp off its address; the trap goes when no tracepoint is left.
// Called during a hit (passcount reached, buffer full) it only marks the
// trap for removal by Flush: the ptrace thread is busy running the hit.
func (in *Installer) Remove(tp *tracing.Tracepoint) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	s := in.sites[tp.Addr]
	if s == nil {
		return nil
	}
	for i, t := range s.tps {
		if t == tp {
			s.tps = append(s.tps[:i], s.tps[i+1:]...)
			break
		}
	}
	if len(s.tps) > 0 {
		return nil
	}
	if in.inHook {
		s.dirty = true
		in.pending = append(in.pending, s.addr)
		return nil
	}
	return in.removeSiteLocked(s)
}

func (in *Installer) removeSiteLocked(s *site) error {
	delete(in.sites, s.addr)
	if !s.trap {
		return nil
	}
	s.trap = false
	if err := in.proc.RemoveInternalTrap(s.addr); err != nil {
		return fmt.Errorf("removing the trap at %#x: %w", s.addr, err)
	}
	return nil
}

// FlushDue reports whether Flush has removals to make.
func (in *Installer) FlushDue() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.pending) > 0
}

// Flush removes traps whose removal was requested during a hit. The
// server calls it whenever the process has stopped.
func (in *Installer) Flush() {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, a := range in.pending {
		if s := in.sites[a]; s != nil && s.dirty && len(s.tps) == 0 {
			_ = in.removeSiteLocked(s)
		}
	}
	in.pending = nil
}

// scratchArea is one page of displaced-step slots in the inferior.
type scratchArea struct {
	base uint64
	used int // slots handed out
}

// slotNear returns a fresh displaced-step slot within rel32 reach of addr.
// Slots are never reused: a removed tracepoint's slot may still be in use
// by a thread that is mid-step when the tracepoint goes.
func (in *Installer) slotNear(addr uint64) (uint64, error) {
	window := addr >> 30
	area := in.scratch[window]
	if area == nil || area.used == scratchSize/slotSize {
		a, err := in.proc.AllocateScratch(addr, scratchSize)
		if err != nil {
			return 0, fmt.Errorf("allocating a displaced-step area: %w", err)
		}
		if d := int64(a - addr); d > 1<<31-scratchSize || d < -(1<<31)+scratchSize {
			return 0, fmt.Errorf("displaced-step area %#x out of reach of %#x", a, addr)
		}
		area = &scratchArea{base: a}
		in.scratch[window] = area
	}
	slot := area.base + uint64(area.used*slotSize)
	area.used++
	return slot, nil
}

// hitContext adapts a stopped thread to tracing.HitContext. A non-zero
// pc is reported as the thread's pc whatever the register holds (the
// thread waits parked at its displaced copy during the collection).
type hitContext struct {
	s  *inferior.Stopped
	pc uint64
}

func (h hitContext) Tid() int { return h.s.Tid() }

func (h hitContext) Registers() (*tdesc.Regs, error) {
	regs, err := h.s.Registers()
	if err != nil || h.pc == 0 {
		return regs, err
	}
	if err := regs.SetUint64(tdesc.RIP, h.pc); err != nil {
		return nil, err
	}
	return regs, nil
}

func (h hitContext) ReadMemory(a uint64, b []byte) (int, error) { return h.s.ReadMemory(a, b) }
func (h hitContext) WriteMemory(a uint64, b []byte) error       { return h.s.WriteMemory(a, b) }

// hook runs on the ptrace thread when a thread hits an internal trap.
func (in *Installer) hook(st *inferior.Stopped) inferior.TrapAction {
	in.mu.Lock()
	s := in.sites[st.PC()]
	var tps []*tracing.Tracepoint
	if s != nil {
		tps = append(tps, s.tps...)
	}
	in.inHook = true
	in.mu.Unlock()
	defer func() {
		in.mu.Lock()
		in.inHook = false
		in.mu.Unlock()
	}()
	if s == nil {
		return inferior.TrapReport // not ours (any more): let gdb see it
	}
	// Park the thread where it can run on by itself before collecting:
	// at its displaced copy (which ends with a jump home) or past a
	// skipped instruction. Should the stub die meanwhile, the kernel
	// lets the thread go from there, and it executes the instruction the
	// int3 replaced instead of meeting the int3 again (package guard).
	// The collection sees the pc at the tracepoint. Not where gdb has a
	// breakpoint too: the thread stays for gdb's report.
	parked := false
	if !st.UserBreakpoint() {
		var to uint64
		switch s.insn.kind {
		case copyAndStep:
			to = s.insn.scratch
		case skip:
			to = s.addr + uint64(s.insn.length)
		}
		if to != 0 {
			regs, err := st.Registers()
			if err == nil && setPC(st, regs, to) == nil {
				parked = true
			}
		}
	}
	ctx := hitContext{s: st, pc: s.addr}
	// Each tracepoint here may ask for its own number of while-stepping
	// steps: step as far as the longest asks, collecting for each
	// tracepoint while its count lasts.
	steps := 0
	stepsOf := make([]int, len(tps))
	for i, tp := range tps {
		stepsOf[i] = in.engine.Hit(tp, ctx)
		steps = max(steps, stepsOf[i])
	}
	if st.UserBreakpoint() && !parked {
		// gdb has a breakpoint here too: it reports, and steps over it
		// itself when resumed.
		return inferior.TrapReport
	}
	if err := in.stepOver(st, s, parked); err != nil {
		if regs, rerr := st.Registers(); rerr == nil {
			_ = setPC(st, regs, s.addr) // gdb sees the thread at the trap
		}
		return inferior.TrapReport
	}
	stepCtx := hitContext{s: st} // the real pc from here on
	for i := 1; i <= steps; i++ {
		if i > 1 {
			if err := in.stepOne(st); err != nil {
				return inferior.TrapReport
			}
		}
		for j, tp := range tps {
			if i <= stepsOf[j] {
				in.engine.Step(tp, stepCtx, i)
			}
		}
	}
	return inferior.TrapResume
}

// stepOne single-steps st one instruction, displacing it if it sits on a
// trap of ours.
func (in *Installer) stepOne(st *inferior.Stopped) error {
	regs, err := st.Registers()
	if err != nil {
		return err
	}
	in.mu.Lock()
	s := in.sites[regs.Uint64(tdesc.RIP)] // st.PC() is where the hit was, not where we are
	in.mu.Unlock()
	if s != nil {
		return in.stepOver(st, s, false)
	}
	return st.SingleStep()
}

// stepOver executes the instruction under the trap at s without removing
// the trap. parked: the hook already moved the thread to the slot (or
// past a skipped instruction).
func (in *Installer) stepOver(st *inferior.Stopped, s *site, parked bool) error {
	regs, err := st.Registers()
	if err != nil {
		return err
	}
	d := &s.insn
	next := s.addr + uint64(d.length)
	switch d.kind {
	case skip:
		if parked {
			return nil
		}
		return setPC(st, regs, next)
	case emulateBranch, emulateSimple:
		return d.emulate(st, regs)
	}
	// copyAndStep: the relocated copy waits in the site's slot.
	if !parked {
		if err := setPC(st, regs, d.scratch); err != nil {
			return err
		}
	}
	if err := st.SingleStep(); err != nil {
		return fmt.Errorf("displaced step: %w", err)
	}
	regs, err = st.Registers()
	if err != nil {
		return err
	}
	pc := regs.Uint64(tdesc.RIP)
	if pc == d.scratch+uint64(d.length) {
		pc = next // fell through
	}
	if d.indirectCall {
		// The call pushed the copy's return address: point it home.
		var ret [8]byte
		binary.LittleEndian.PutUint64(ret[:], next)
		if err := st.WriteMemory(regs.Uint64(tdesc.RSP), ret[:]); err != nil {
			return fmt.Errorf("fixing the return address: %w", err)
		}
	}
	return setPC(st, regs, pc)
}

func setPC(st *inferior.Stopped, regs *tdesc.Regs, pc uint64) error {
	var v [8]byte
	binary.LittleEndian.PutUint64(v[:], pc)
	if err := regs.Set(tdesc.RIP, v[:]); err != nil {
		return err
	}
	return st.SetRegisters(regs)
}

// ---- instruction analysis

type stepKind int

const (
	copyAndStep stepKind = iota
	skip
	emulateBranch
	emulateSimple // push reg, mov %rsp,%rbp
)

// displaced describes how to execute one instruction out of line.
type displaced struct {
	kind         stepKind
	length       int
	orig         []byte
	relocated    []byte // copyAndStep: the bytes to run at scratch
	scratch      uint64
	indirectCall bool
	addr         uint64
	hasPCRel     bool
	pcRelOff     int

	// emulateBranch, emulateSimple
	reg     int // emulateSimple: the register of push reg or pop reg
	branch  branchKind
	cond    byte // jcc condition code (low nibble of the opcode)
	target  uint64
	nextIns uint64
}

type branchKind int

const (
	brJmp branchKind = iota
	brJcc
	brCall
	brLoop      // e2
	brLoope     // e1
	brLoopne    // e0
	brJrcxz     // e3
	brPush      // push reg (emulateSimple)
	brMovRspRbp // mov %rsp,%rbp (emulateSimple)
	brRet       // ret (emulateSimple)
	brPop       // pop reg (emulateSimple)
)

// x86RegToGDB maps the 3-bit x86 register encoding to GDB's amd64
// register numbers (rax rbx rcx rdx rsi rdi rbp rsp).
var x86RegToGDB = [8]int{tdesc.RAX, tdesc.RCX, tdesc.RDX, tdesc.RBX, tdesc.RSP, tdesc.RBP, tdesc.RSI, tdesc.RDI}

// pushInsn recognises push r64 (50+r, optionally REX.B for r8-r15) and
// returns its length and the GDB number of the pushed register.
func pushInsn(code []byte) (n, reg int, ok bool) {
	return regInsn(code, 0x50)
}

// popInsn recognises pop r64 (58+r, optionally REX.B) like pushInsn.
func popInsn(code []byte) (n, reg int, ok bool) {
	return regInsn(code, 0x58)
}

// regInsn recognises the one-byte-opcode instruction op+r (push or pop
// r64, optionally REX.B for r8-r15).
func regInsn(code []byte, op byte) (n, reg int, ok bool) {
	switch {
	case len(code) >= 1 && code[0] >= op && code[0] <= op+7:
		return 1, x86RegToGDB[code[0]-op], true
	case len(code) >= 2 && code[0] == 0x41 && code[1] >= op && code[1] <= op+7:
		return 2, 8 + int(code[1]-op), true
	}
	return 0, 0, false
}

// ErrUnsupportedInstruction means the instruction cannot be executed out
// of line safely.
var ErrUnsupportedInstruction = errors.New("instruction cannot be displaced")

// analyse decodes the instruction at addr and decides how to displace it.
func analyse(addr uint64, code []byte) (displaced, error) {
	var d displaced
	// endbr64/endbr32: x86asm v0.32 mis-decodes them as one byte.
	if len(code) >= 4 && code[0] == 0xf3 && code[1] == 0x0f && code[2] == 0x1e && (code[3] == 0xfa || code[3] == 0xfb) {
		d.kind, d.length = skip, 4
		return d, nil
	}
	// The usual function-entry instructions are emulated: no single-step.
	if n, reg, ok := pushInsn(code); ok {
		d.kind, d.length, d.branch, d.reg = emulateSimple, n, brPush, reg
		d.nextIns = addr + uint64(n)
		return d, nil
	}
	if len(code) >= 3 && code[0] == 0x48 && code[1] == 0x89 && code[2] == 0xe5 {
		d.kind, d.length, d.branch = emulateSimple, 3, brMovRspRbp
		d.nextIns = addr + 3
		return d, nil
	}
	if n, reg, ok := popInsn(code); ok {
		d.kind, d.length, d.branch, d.reg = emulateSimple, n, brPop, reg
		d.nextIns = addr + uint64(n)
		return d, nil
	}
	if code[0] == 0xc3 {
		// ret, where a fast tracepoint often falls back to a trap (a
		// lone ret: no jump fits).
		d.kind, d.length, d.branch = emulateSimple, 1, brRet
		d.nextIns = addr + 1
		return d, nil
	}
	// VEX/EVEX-encoded instructions: x86asm misses their rip-relative
	// operands and some lengths; refuse rather than guess.
	if code[0] == 0xc4 || code[0] == 0xc5 || code[0] == 0x62 {
		return d, fmt.Errorf("%w: VEX/EVEX-encoded instruction % x", ErrUnsupportedInstruction, code[:3])
	}
	inst, err := x86asm.Decode(code, 64)
	if err != nil {
		return d, fmt.Errorf("%w: cannot decode % x: %v", ErrUnsupportedInstruction, code, err)
	}
	d.length = inst.Len
	d.orig = append([]byte(nil), code[:inst.Len]...)
	next := addr + uint64(inst.Len)
	d.nextIns = next
	switch inst.Op {
	case x86asm.NOP:
		d.kind = skip
		return d, nil
	case x86asm.INT, x86asm.SYSENTER, x86asm.UD1, x86asm.UD2:
		return d, fmt.Errorf("%w: %v", ErrUnsupportedInstruction, inst.Op)
	}
	if rel, ok := inst.Args[0].(x86asm.Rel); ok {
		d.kind = emulateBranch
		d.target = uint64(int64(next) + int64(rel))
		switch inst.Op {
		case x86asm.JMP:
			d.branch = brJmp
		case x86asm.CALL:
			d.branch = brCall
		case x86asm.LOOP:
			d.branch = brLoop
		case x86asm.LOOPE:
			d.branch = brLoope
		case x86asm.LOOPNE:
			d.branch = brLoopne
		case x86asm.JRCXZ:
			d.branch = brJrcxz
		case x86asm.JECXZ, x86asm.JCXZ:
			return d, fmt.Errorf("%w: %v with address-size prefix", ErrUnsupportedInstruction, inst.Op)
		default:
			d.branch = brJcc
			op := code[inst.Len-inst.PCRel-1]
			d.cond = op & 0x0f
		}
		return d, nil
	}
	if len(inst.Prefix) > 0 {
		for _, p := range inst.Prefix {
			if p&0xff == 0x67 && (inst.Op == x86asm.LOOP || inst.Op == x86asm.JRCXZ) {
				return d, fmt.Errorf("%w: address-size prefixed %v", ErrUnsupportedInstruction, inst.Op)
			}
		}
	}
	d.kind = copyAndStep
	d.relocated = append([]byte(nil), d.orig...)
	switch inst.PCRel {
	case 0:
	case 4:
		d.pcRelOff = inst.PCRelOff
		d.hasPCRel = true
	default:
		return d, fmt.Errorf("%w: %d-byte pc-relative field", ErrUnsupportedInstruction, inst.PCRel)
	}
	d.indirectCall = inst.Op == x86asm.CALL
	d.addr = addr
	return d, nil
}

// relocate prepares the copy that runs at scratch: a rip-relative
// displacement is re-encoded so it still reaches the same address, and a
// jmp rel32 to the next original instruction follows the copy. The stub
// single-steps the copy only and moves the pc home itself; the jump is for
// a thread the stub's death (package guard) leaves mid-step, running on
// untraced: it falls through the copy, or an indirect call returns after
// it, and jumps home instead of running into the next slot.
func (d *displaced) relocate(scratch uint64) error {
	d.scratch = scratch
	d.relocated = append(d.relocated[:0], d.orig...)
	if d.hasPCRel {
		old := int64(int32(binary.LittleEndian.Uint32(d.orig[d.pcRelOff:])))
		target := int64(d.addr) + int64(d.length) + old
		disp := target - (int64(scratch) + int64(d.length))
		if disp != int64(int32(disp)) {
			return fmt.Errorf("%w: rip-relative target %#x out of reach of %#x", ErrUnsupportedInstruction, target, scratch)
		}
		binary.LittleEndian.PutUint32(d.relocated[d.pcRelOff:], uint32(int32(disp)))
	}
	back := int64(d.addr+uint64(d.length)) - (int64(scratch) + int64(d.length) + 5)
	if back != int64(int32(back)) {
		return fmt.Errorf("displaced-step slot %#x out of reach of %#x", scratch, d.addr)
	}
	d.relocated = append(d.relocated, 0xe9)
	d.relocated = binary.LittleEndian.AppendUint32(d.relocated, uint32(int32(back)))
	return nil
}
