package inferior

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// debugSlot is one of DR0-DR3.
type debugSlot struct {
	used   bool
	addr   uint64
	length int            // 1, 2, 4 or 8
	kind   BreakpointKind // HardwareBreakpoint, WriteWatchpoint or AccessWatchpoint
	refs   int            // Z packets sharing this slot
}

func (s debugSlot) same(o debugSlot) bool {
	return s.used && s.addr == o.addr && s.length == o.length && s.kind == o.kind
}

// debugRegisters is the process-wide debug register setting, written into
// every thread.
type debugRegisters struct {
	slots  [4]debugSlot
	points hwPoints // the Z packets in, once each
}

// slotsOf returns the slots a breakpoint or watchpoint may take: any of
// the four.
func (d *debugRegisters) slotsOf(BreakpointKind) []debugSlot { return d.slots[:] }

// dr7 encodes the control register for the used slots.
func (d *debugRegisters) dr7() uint64 {
	var v uint64
	for i, s := range d.slots {
		if !s.used {
			continue
		}
		var rw, ln uint64
		switch s.kind {
		case WriteWatchpoint:
			rw = 1
		case AccessWatchpoint:
			rw = 3
		}
		if s.kind != HardwareBreakpoint {
			switch s.length {
			case 2:
				ln = 1
			case 8:
				ln = 2
			case 4:
				ln = 3
			}
		}
		v |= 1 << (2 * i) // local enable
		v |= rw << (16 + 4*i)
		v |= ln << (18 + 4*i)
	}
	return v
}

// watchChunks splits [addr, addr+size) into naturally aligned pieces of
// 1, 2, 4 or 8 bytes, the shapes a debug register can watch.
func watchChunks(addr uint64, size int) []debugSlot {
	var out []debugSlot
	end := addr + uint64(size)
	for addr < end {
		ln := 8
		for ln > 1 && (addr%uint64(ln) != 0 || addr+uint64(ln) > end) {
			ln /= 2
		}
		out = append(out, debugSlot{addr: addr, length: ln})
		addr += uint64(ln)
	}
	return out
}

// chunksFor returns the slots a Z1/Z2/Z4 request needs.
func chunksFor(kind BreakpointKind, addr uint64, size int) ([]debugSlot, error) {
	switch kind {
	case HardwareBreakpoint:
		return []debugSlot{{addr: addr, length: 1, kind: kind}}, nil
	case ReadWatchpoint:
		return nil, fmt.Errorf("read watchpoint: %w", ErrUnsupported)
	case WriteWatchpoint, AccessWatchpoint:
	default:
		return nil, fmt.Errorf("breakpoint kind %d: %w", kind, ErrUnsupported)
	}
	if size <= 0 || size > 32 {
		return nil, fmt.Errorf("watchpoint of %d bytes: %w", size, ErrUnsupported)
	}
	chunks := watchChunks(addr, size)
	for i := range chunks {
		chunks[i].kind = kind
	}
	return chunks, nil
}

// insertDebugReg claims debug registers for a hardware breakpoint or
// watchpoint and writes them into every stopped thread.
func (p *Process) insertDebugReg(kind BreakpointKind, addr uint64, size int) error {
	if p.exitEvent != nil {
		return ErrExited
	}
	chunks, err := chunksFor(kind, addr, size)
	if err != nil {
		return err
	}
	next := p.debugRegs
	for _, c := range chunks {
		if !claimSlot(next.slotsOf(kind), c) {
			return fmt.Errorf("%v at %#x: %w", kind, addr, ErrNoDebugRegister)
		}
	}
	return p.applyDebugRegs(next)
}

// writeDebugRegs writes DR0-3 and DR7 into a stopped thread.
func (p *Process) writeDebugRegs(t *thread) error {
	// Disable first so that no half-written combination is ever live.
	if err := pokeUser(t.tid, userDebugReg+7*8, 0); err != nil {
		return err
	}
	for i, s := range p.debugRegs.slots {
		if s.used {
			if err := pokeUser(t.tid, uintptr(userDebugReg+i*8), s.addr); err != nil {
				return err
			}
		}
	}
	if dr7 := p.debugRegs.dr7(); dr7 != 0 {
		if err := pokeUser(t.tid, userDebugReg+7*8, dr7); err != nil {
			return err
		}
	}
	return nil
}

// debugRegStop inspects DR6 after a SIGTRAP and turns a debug-register hit
// into an event (clearing DR6).
func (p *Process) debugRegStop(t *thread, si siginfo) (StopEvent, bool) {
	if si.Code != trapHwbkpt && si.Code != trapTrace {
		return StopEvent{}, false
	}
	dr6, err := peekUser(t.tid, userDebugReg+6*8)
	if err != nil || dr6&0xf == 0 {
		return StopEvent{}, false
	}
	_ = pokeUser(t.tid, userDebugReg+6*8, 0)
	for i, s := range p.debugRegs.slots {
		if !s.used || dr6&(1<<i) == 0 {
			continue
		}
		ev := StopEvent{Kind: SignalStop, Tid: t.tid, Signal: int(unix.SIGTRAP)}
		switch s.kind {
		case HardwareBreakpoint:
			ev.Reason = "hwbreak"
		case WriteWatchpoint:
			ev.Reason, ev.WatchAddr = "watch", s.addr
		case AccessWatchpoint:
			ev.Reason, ev.WatchAddr = "awatch", s.addr
		}
		return ev, true
	}
	return StopEvent{}, false
}
