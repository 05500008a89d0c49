// Package trapfallback implements tracepoints with traps (int3 on
// x86-64, brk on arm64): the way every tracepoint can be hit, and the
// fallback wherever no jump pad can be placed.
//
// A hit stops only the hitting thread. On the stub's ptrace thread the
// installer hands the thread to the trace engine (condition, collection,
// passcount), runs while-stepping, then executes the instruction the trap
// replaced out of line ("displaced stepping") so the trap never leaves
// memory and other threads never miss a hit. How one instruction runs out
// of line is the instruction set's business (package displace's seam;
// trapfallback/amd64, trapfallback/arm64): it is skipped, emulated on the
// saved registers, or copied to a slot allocated in the inferior within
// reach of the tracepoint (pc-relative operands re-encoded), single-stepped
// there, and the pc moved back to the original code.
//
// The same displaced steps take threads over gdb's breakpoints whose
// hit the stub resumes itself (a false target-side condition) or gdb
// resumes in non-stop mode: the Installer is the process's
// inferior.DisplacedStepper (stepover.go), so the other threads need
// not stop while the trap would be out of memory.
package trapfallback

import (
	"fmt"
	"sync"

	"gotpstub/inferior"
	"gotpstub/tdesc"
	"gotpstub/tracing"
	"gotpstub/trapfallback/displace"
)

// scratchSize is the size of one scratch area: isa.SlotSize-byte slots,
// one per trapped address, allocated per window of code (windowOf).
const scratchSize = 4096

// maxSteps bounds the single-steps through one relocated copy.
const maxSteps = 16

// Installer installs tracepoints as traps in one process. It
// implements tracing.Installer.
type Installer struct {
	proc   *inferior.Process
	engine *tracing.Engine

	mu      sync.Mutex
	sites   map[uint64]*site
	steps   map[uint64]*displaced   // breakpoints' out-of-line step-overs (stepover.go)
	scratch map[uint64]*scratchArea // window of code (windowOf) → its current area
	pending []uint64                // traps to remove once the ptrace thread is free
	inHook  bool
}

// displaced is one instruction as it runs out of line: its analysis and,
// for displace.CopyAndStep, the slot its copy waits in.
type displaced struct {
	insn displace.Insn
	slot uint64
	size int // bytes of the copy at slot
}

// site is one trapped address and the tracepoints that share it.
type site struct {
	addr  uint64
	insn  displaced
	tps   []*tracing.Tracepoint
	trap  bool // the trap is in memory
	dirty bool // removal requested during a hit
}

// New returns an installer for p that reports hits to e, and registers
// itself as p's trap hook and displaced stepper.
func New(p *inferior.Process, e *tracing.Engine) *Installer {
	in := &Installer{proc: p, engine: e, sites: map[uint64]*site{}, steps: map[uint64]*displaced{}, scratch: map[uint64]*scratchArea{}}
	p.SetTrapHook(in.hook)
	p.SetDisplacedStepper(in.DisplacedStep)
	return in
}

// Install puts tp's trap in memory (once per address).
func (in *Installer) Install(tp *tracing.Tracepoint) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	s := in.sites[tp.Addr]
	if s == nil {
		buf := make([]byte, isa.MaxInsnLen)
		n, err := in.proc.ReadMemory(tp.Addr, buf)
		if n == 0 {
			return fmt.Errorf("tracepoint %d at %#x: reading the instruction: %w", tp.Num, tp.Addr, err)
		}
		insn, err := isa.Analyse(tp.Addr, buf[:n])
		if err != nil {
			return fmt.Errorf("tracepoint %d at %#x: %w", tp.Num, tp.Addr, err)
		}
		// Each address gets its own slot, written once here, so a hit
		// only moves the pc.
		d, err := in.placeLocked(tp.Addr, insn)
		if err != nil {
			return fmt.Errorf("tracepoint %d at %#x: %w", tp.Num, tp.Addr, err)
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

// placeLocked gives insn, at addr, a slot with its relocated copy when
// it is run there.
func (in *Installer) placeLocked(addr uint64, insn displace.Insn) (displaced, error) {
	d := displaced{insn: insn}
	if insn.How() != displace.CopyAndStep {
		return d, nil
	}
	slot, err := in.slotNear(addr)
	if err != nil {
		return d, err
	}
	code, err := insn.Relocate(slot)
	if err == nil && len(code) > isa.SlotSize {
		err = fmt.Errorf("relocated copy of %d bytes for a %d-byte slot", len(code), isa.SlotSize)
	}
	if err == nil {
		err = in.proc.WriteMemory(slot, code)
	}
	d.slot, d.size = slot, len(code)
	return d, err
}

// windowOf is the window of code around addr whose slots share a scratch
// area: an eighth of the ISA's reach, so every slot of the area (mapped
// as near the first address as there is room) stays in reach of all.
func windowOf(addr uint64) uint64 { return addr / (isa.Reach / 8) }

// slotNear returns a fresh displaced-step slot within the ISA's reach of
// addr. Slots are never reused: a removed tracepoint's slot may still be
// in use by a thread that is mid-step when the tracepoint goes.
func (in *Installer) slotNear(addr uint64) (uint64, error) {
	window := windowOf(addr)
	area := in.scratch[window]
	if area == nil || area.used == scratchSize/isa.SlotSize {
		a, err := in.proc.AllocateScratch(addr, scratchSize)
		if err != nil {
			return 0, fmt.Errorf("allocating a displaced-step area: %w", err)
		}
		if d := int64(a - addr); d > int64(isa.Reach)-scratchSize || d < -int64(isa.Reach)+scratchSize {
			return 0, fmt.Errorf("displaced-step area %#x out of reach of %#x", a, addr)
		}
		area = &scratchArea{base: a}
		in.scratch[window] = area
	}
	slot := area.base + uint64(area.used*isa.SlotSize)
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
	if err := regs.SetUint64(regs.Layout.PC, h.pc); err != nil {
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
		switch s.insn.insn.How() {
		case displace.CopyAndStep:
			to = s.insn.slot
		case displace.Skip:
			to = s.addr + uint64(s.insn.insn.Len())
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
	s := in.sites[regs.Uint64(regs.Layout.PC)] // st.PC() is where the hit was, not where we are
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
	switch d.insn.How() {
	case displace.Skip:
		if parked {
			return nil
		}
		return setPC(st, regs, s.addr+uint64(d.insn.Len()))
	case displace.Emulate:
		if err := d.insn.Emulate(regs, st); err != nil {
			return err
		}
		return st.SetRegisters(regs)
	}
	// CopyAndStep: the relocated copy waits in the site's slot.
	if !parked {
		if err := setPC(st, regs, d.slot); err != nil {
			return err
		}
	}
	for range maxSteps {
		if err := st.SingleStep(); err != nil {
			return fmt.Errorf("displaced step: %w", err)
		}
		if regs, err = st.Registers(); err != nil {
			return err
		}
		done, err := d.insn.AfterStep(regs, st, d.slot, d.size)
		if err != nil {
			return err
		}
		if done {
			return st.SetRegisters(regs)
		}
	}
	return fmt.Errorf("displaced step at %#x: still in its copy after %d steps", s.addr, maxSteps)
}

// setPC moves st's pc to pc.
func setPC(st *inferior.Stopped, regs *tdesc.Regs, pc uint64) error {
	if err := regs.SetUint64(regs.Layout.PC, pc); err != nil {
		return err
	}
	return st.SetRegisters(regs)
}
