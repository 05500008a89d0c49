package inferior

import (
	"errors"
	"fmt"
	"maps"

	"golang.org/x/sys/unix"
)

// hwPoint is one Z1–Z4 request: its kind, address and size.
type hwPoint struct {
	kind BreakpointKind
	addr uint64
	size int
}

// hwPoints is the set of Z1–Z4 requests in. It is never changed in
// place (a debugRegisters value, copied, keeps its own).
type hwPoints map[hwPoint]bool

// with returns a copy of ps with pt in (or out).
func (ps hwPoints) with(pt hwPoint, in bool) hwPoints {
	out := maps.Clone(ps)
	if out == nil {
		out = hwPoints{}
	}
	if in {
		out[pt] = true
	} else {
		delete(out, pt)
	}
	return out
}

// insertHardware puts in a hardware breakpoint or watchpoint, once: a
// Z1–Z4 packet repeated for a point that is in (gdb sends them again
// after a shared library event) is a no-op, as with gdbserver, and one
// z packet takes the point out. Distinct requests sharing a debug
// register share it (insertDebugReg counts them).
func (p *Process) insertHardware(pt hwPoint) error {
	if p.debugRegs.points[pt] {
		return nil
	}
	if err := p.insertDebugReg(pt.kind, pt.addr, pt.size); err != nil {
		return err
	}
	p.debugRegs.points = p.debugRegs.points.with(pt, true)
	return nil
}

// removeHardware takes out what insertHardware put in.
func (p *Process) removeHardware(pt hwPoint) error {
	if !p.debugRegs.points[pt] {
		return fmt.Errorf("no %v at %#x", pt.kind, pt.addr)
	}
	if err := p.removeDebugReg(pt.kind, pt.addr, pt.size); err != nil {
		return err
	}
	p.debugRegs.points = p.debugRegs.points.with(pt, false)
	return nil
}

// applyDebugRegs makes next the setting, writing it into every stopped
// thread (running ones get it before they next run). On failure the old
// setting is restored.
func (p *Process) applyDebugRegs(next debugRegisters) error {
	old := p.debugRegs
	p.debugRegs = next
	p.drGen++
	for _, t := range p.threads {
		if !t.stopped || t.zombie {
			continue
		}
		if err := p.writeDebugRegs(t); err != nil {
			if errors.Is(err, unix.ESRCH) {
				continue
			}
			p.debugRegs = old
			p.drGen++
			for _, t2 := range p.threads {
				if t2.stopped && !t2.zombie {
					_ = p.writeDebugRegs(t2)
					t2.drGen = p.drGen
				}
			}
			return fmt.Errorf("setting debug registers: %w", err)
		}
		t.drGen = p.drGen
	}
	return nil
}

// claimSlot shares a used slot equal to c or takes a free one.
func claimSlot(slots []debugSlot, c debugSlot) bool {
	c.used = true
	for i := range slots {
		if slots[i].same(c) {
			slots[i].refs++
			return true
		}
	}
	for i := range slots {
		if !slots[i].used {
			c.refs = 1
			slots[i] = c
			return true
		}
	}
	return false
}

// removeDebugReg releases what insertDebugReg claimed.
func (p *Process) removeDebugReg(kind BreakpointKind, addr uint64, size int) error {
	chunks, err := chunksFor(kind, addr, size)
	if err != nil {
		return err
	}
	next := p.debugRegs
	slots := next.slotsOf(kind)
	for _, c := range chunks {
		c.used = true
		found := false
		for i := range slots {
			if s := &slots[i]; s.same(c) {
				if s.refs--; s.refs == 0 {
					*s = debugSlot{}
				}
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("no %v at %#x", kind, addr)
		}
	}
	if p.exitEvent != nil {
		p.debugRegs = next
		return nil
	}
	return p.applyDebugRegs(next)
}
