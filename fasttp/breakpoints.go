package fasttp

import (
	"fmt"

	"gotpstub/tracing"
)

// gdb's breakpoints in a jump's covered bytes.
//
// While a jump is in, threads run the relocated copies of the instructions
// it covers, so a gdb breakpoint on one of them other than the first
// would never be hit (and its int3 would land in the jump's displacement).
// A fast tracepoint whose covered bytes hold such a breakpoint is
// therefore a trap tracepoint for as long as the breakpoint is there
// (tstatus' notes say why); when the last one goes, its jump is placed
// again, in the same tracepoint table slot. A breakpoint at the
// tracepoint's own address needs nothing: stepping over it enters the pad.

// heldBackError says that a gdb breakpoint lies inside the bytes a jump
// would cover.
type heldBackError struct{ at uint64 }

func (e *heldBackError) Error() string {
	return fmt.Sprintf("gdb's breakpoint at %#x is inside the instructions the jump would cover", e.at)
}

// breakInside returns a gdb breakpoint in (addr, addr+n): after the first
// byte, within the covered bytes.
func (in *Installer) breakInside(addr, n uint64) (uint64, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.breakInsideLocked(addr, n)
}

func (in *Installer) breakInsideLocked(addr, n uint64) (uint64, bool) {
	for a := range in.breaks {
		if a > addr && a < addr+n {
			return a, true
		}
	}
	return 0, false
}

// BreakpointInserted is told before gdb's breakpoint (software or
// hardware) goes in at addr, with every thread stopped: a jump covering
// addr after its first instruction becomes a trap.
func (in *Installer) BreakpointInserted(addr uint64) error {
	in.mu.Lock()
	in.breaks[addr]++
	in.mu.Unlock()
	for _, s := range in.jumpsCovering(addr, 1) {
		if s.tp.Addr == addr {
			continue
		}
		s.keepOwn = true
		err := in.convertToTrapFor(s, (&heldBackError{at: addr}).Error())
		if err != nil {
			return err
		}
		in.mu.Lock()
		in.heldBack[s.tp] = s // its pad stays: placeAgain reuses it
		in.mu.Unlock()
	}
	return nil
}

// BreakpointRemoved is told after gdb's breakpoint at addr went (or
// failed to go in), with every thread stopped: fast tracepoints it held
// back as traps get their jumps again when nothing else holds them.
func (in *Installer) BreakpointRemoved(addr uint64) {
	in.mu.Lock()
	if in.breaks[addr]--; in.breaks[addr] <= 0 {
		delete(in.breaks, addr)
	}
	in.mu.Unlock()
	in.placeHeldBack()
}

// placeHeldBack puts the fast tracepoints held back as traps in as jumps
// again where no breakpoint is in their bytes any more and no thread is
// stopped inside them (gdb stepping over a breakpoint there removes it
// for one step: the jump waits for the next stop, see Flush).
func (in *Installer) placeHeldBack() {
	in.mu.Lock()
	var held []*tracing.Tracepoint
	for tp := range in.heldBack {
		held = append(held, tp)
	}
	in.mu.Unlock()
	for _, tp := range held {
		if in.mayPlaceAgain(tp) {
			in.placeAgain(tp)
		}
	}
}

// mayPlaceAgain reports whether the bytes tp's jump would cover hold no
// gdb breakpoint and no stopped thread (after their first byte).
func (in *Installer) mayPlaceAgain(tp *tracing.Tracepoint) bool {
	cands, err := in.siteCandidates(tp.Addr)
	if err != nil {
		return true // installJump says why, once more
	}
	site := cands[0]
	in.mu.Lock()
	if held := in.heldBack[tp]; held != nil {
		site = held.site // the jump to put back
	}
	in.mu.Unlock()
	start, end := site.Start(), site.Resume()
	if _, ok := in.breakInside(start, uint64(site.Span())); ok {
		return false
	}
	if at, n := secondPatch(site); n > 0 {
		if _, ok := in.breakInside(at-1, n+1); ok {
			return false
		}
	}
	inside := false
	err = in.proc.RelocatePCs(func(_ int, pc uint64) (uint64, bool) {
		inside = inside || (pc > start && pc < end)
		return 0, false
	})
	return err == nil && !inside
}

// placeAgain puts fast tracepoint tp, a trap because of a breakpoint,
// back in as a jump; if it cannot, tp stays a trap (the reason is
// logged and in tstatus' notes).
func (in *Installer) placeAgain(tp *tracing.Tracepoint) {
	if err := in.traps.Remove(tp); err != nil {
		in.logf("fast tracepoint %d at %#x: taking the trap out: %v", tp.Num, tp.Addr, err)
		return
	}
	in.mu.Lock()
	delete(in.viaTrap, tp) // not "another tracepoint" to installJump
	old := in.heldBack[tp]
	delete(in.heldBack, tp)
	in.mu.Unlock()
	var err error
	if old != nil {
		// The same jump to the same pad: a pad whose address the
		// displacement fixes could not be placed again anyway (its
		// page is still ours).
		err = in.repatch(old)
	} else {
		err = in.installJump(tp)
	}
	if err != nil {
		in.mu.Lock()
		in.viaTrap[tp] = err.Error()
		in.mu.Unlock()
	}
	if err == nil {
		in.engine.FastPlaced(tp)
		in.logf("%v", placementLine{in, tp})
		return
	}
	in.engine.FastAsTrap(tp, err.Error())
	in.logf("fast tracepoint %d at %#x: trap instead of a jump: %v", tp.Num, tp.Addr, err)
	if err := in.traps.Install(tp); err != nil {
		in.logf("fast tracepoint %d at %#x: putting the trap back: %v", tp.Num, tp.Addr, err)
	}
}

// repatch puts back the jump of s, taken out by convertToTrapFor, to its
// pad (still there: pads are never unmapped), with its puns' traps.
func (in *Installer) repatch(s *jumpSite) error {
	if err := in.writeJump(s.site, s.entry); err != nil {
		in.mu.Lock()
		in.addSpareLocked(s.own...)
		in.freePadLocked(removedPad{s.chunk, s.padFaults})
		in.mu.Unlock()
		s.own, s.chunk, s.keepOwn = nil, Range{}, false
		return fmt.Errorf("putting the jump back: %w", err)
	}
	s.keepOwn = false
	s.patched = true
	for _, off := range s.site.Puns {
		head := s.site.Addr + uint64(off)
		if err := in.proc.InsertInternalTrap(head); err != nil {
			_ = in.unpatch(s)
			return fmt.Errorf("trapping the covered instruction at %#x: %w", head, err)
		}
		s.puns = append(s.puns, head)
		in.mu.Lock()
		in.padTraps[head] = padTrap{site: s, kind: trapPun}
		in.mu.Unlock()
	}
	in.mu.Lock()
	in.addSiteLocked(s)
	in.bySlot[s.slot] = s
	in.mu.Unlock()
	return nil
}
