package inferior

import (
	"encoding/binary"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// Hardware breakpoints and watchpoints on arm64: the breakpoint and
// watchpoint register pairs (DBGBVR/DBGBCR, DBGWVR/DBGWCR) are read and
// written per thread through the NT_ARM_HW_BREAK and NT_ARM_HW_WATCH
// register sets (struct user_hwdebug_state). How many pairs the CPU has
// is in the set's dbg_info; a CPU (or emulator) that reports none has no
// hardware breakpoints or watchpoints, and Z1–Z4 return ErrUnsupported.
//
// A watchpoint register watches 1 to 8 bytes of one aligned doubleword
// (the address aligned, the bytes as a byte-address-select mask), so a
// watch is split into one slot per doubleword. A hit is a SIGTRAP with
// si_code TRAP_HWBKPT and si_addr the pc (breakpoint) or the address
// accessed (watchpoint); the instruction has not run: gdb steps over it
// with the breakpoint or watchpoint removed, as with gdbserver.

// maxDebugSlots is the number of register pairs a user_hwdebug_state
// holds.
const maxDebugSlots = 16

// Control register fields.
const (
	ctrlEnable  = 1
	ctrlEL0     = 2 << 1 // privilege: user mode
	ctrlLoad    = 1 << 3 // watchpoint type bits
	ctrlStore   = 2 << 3
	ctrlBASBits = 5 // byte address select starts here
)

// debugSlot is one breakpoint or watchpoint register pair.
type debugSlot struct {
	used bool
	addr uint64 // aligned: 4 bytes for a breakpoint, 8 for a watchpoint
	bas  uint8  // byte address select: the bytes of the word watched
	kind BreakpointKind
	want uint64 // the first address watched (addr plus the mask's offset)
	refs int    // Z packets sharing this slot
}

func (s debugSlot) same(o debugSlot) bool {
	return s.used && s.addr == o.addr && s.bas == o.bas && s.kind == o.kind
}

// ctrl encodes the slot's control register.
func (s debugSlot) ctrl() uint32 {
	if !s.used {
		return 0
	}
	c := uint32(s.bas)<<ctrlBASBits | ctrlEL0 | ctrlEnable
	switch s.kind {
	case ReadWatchpoint:
		c |= ctrlLoad
	case WriteWatchpoint:
		c |= ctrlStore
	case AccessWatchpoint:
		c |= ctrlLoad | ctrlStore
	}
	return c
}

// debugRegisters is the process-wide hardware breakpoint and watchpoint
// setting, written into every thread.
type debugRegisters struct {
	breaks, watches [maxDebugSlots]debugSlot
	points          hwPoints // the Z packets in, once each
}

// hwSlots is how many breakpoint and watchpoint register pairs this
// machine's CPUs have, read from the first tracee that needed them. It
// outlives a Process's setting, which is reset (debugRegisters{}) on
// exec and detach: the slots must still be cleared then.
var hwSlots struct {
	sync.Mutex
	known          bool
	nBreak, nWatch int
}

// slotCounts returns hwSlots' counts (zero before they are known).
func slotCounts() (nBreak, nWatch int) {
	hwSlots.Lock()
	defer hwSlots.Unlock()
	return hwSlots.nBreak, hwSlots.nWatch
}

// hwDebugSlots reads how many breakpoint and watchpoint register pairs
// thread tid has (dbg_info's low byte; none when the debug architecture
// field is 0).
func hwDebugSlots(tid int, nt int) (int, error) {
	var buf [8]byte
	if _, err := getRegset(tid, nt, buf[:]); err != nil {
		return 0, err
	}
	info := binary.LittleEndian.Uint32(buf[:])
	if (info>>8)&0xff == 0 {
		return 0, nil
	}
	return min(int(info&0xff), maxDebugSlots), nil
}

// learnSlots makes hwSlots known, reading them from a stopped thread.
func (p *Process) learnSlots() error {
	hwSlots.Lock()
	defer hwSlots.Unlock()
	if hwSlots.known {
		return nil
	}
	for _, t := range p.threads {
		if !t.stopped || t.zombie {
			continue
		}
		nb, err := hwDebugSlots(t.tid, unix.NT_ARM_HW_BREAK)
		if err != nil {
			return fmt.Errorf("reading the hardware breakpoint registers: %w", err)
		}
		nw, err := hwDebugSlots(t.tid, unix.NT_ARM_HW_WATCH)
		if err != nil {
			return fmt.Errorf("reading the hardware watchpoint registers: %w", err)
		}
		hwSlots.known, hwSlots.nBreak, hwSlots.nWatch = true, nb, nw
		return nil
	}
	return fmt.Errorf("hardware breakpoints: %w", ErrRunning)
}

// chunksFor returns the slots a Z1–Z4 request needs.
func chunksFor(kind BreakpointKind, addr uint64, size int) ([]debugSlot, error) {
	switch kind {
	case HardwareBreakpoint:
		if addr%4 != 0 {
			return nil, fmt.Errorf("hardware breakpoint at %#x: not 4-byte aligned: %w", addr, ErrUnsupported)
		}
		return []debugSlot{{addr: addr, bas: 0xf, kind: kind, want: addr}}, nil
	case ReadWatchpoint, WriteWatchpoint, AccessWatchpoint:
	default:
		return nil, fmt.Errorf("breakpoint kind %d: %w", kind, ErrUnsupported)
	}
	if size <= 0 || size > 8*maxDebugSlots {
		return nil, fmt.Errorf("watchpoint of %d bytes: %w", size, ErrUnsupported)
	}
	var out []debugSlot
	for a, end := addr, addr+uint64(size); a < end; {
		word := a &^ 7
		n := min(end, word+8) - a
		mask := uint8((1<<n - 1) << (a - word))
		out = append(out, debugSlot{addr: word, bas: mask, kind: kind, want: a})
		a += n
	}
	return out, nil
}

// slotsOf returns the slots of the CPU a kind goes to.
func (d *debugRegisters) slotsOf(kind BreakpointKind) []debugSlot {
	nBreak, nWatch := slotCounts()
	if kind == HardwareBreakpoint {
		return d.breaks[:nBreak]
	}
	return d.watches[:nWatch]
}

// insertDebugReg claims register pairs for a hardware breakpoint or
// watchpoint and writes them into every stopped thread.
func (p *Process) insertDebugReg(kind BreakpointKind, addr uint64, size int) error {
	if p.exitEvent != nil {
		return ErrExited
	}
	chunks, err := chunksFor(kind, addr, size)
	if err != nil {
		return err
	}
	if err := p.learnSlots(); err != nil {
		return err
	}
	next := p.debugRegs
	slots := next.slotsOf(kind)
	if len(slots) == 0 {
		return fmt.Errorf("%v at %#x: %w", kind, addr, ErrNoDebugHardware)
	}
	for _, c := range chunks {
		if !claimSlot(slots, c) {
			return fmt.Errorf("%v at %#x: %w", kind, addr, ErrNoDebugRegister)
		}
	}
	return p.applyDebugRegs(next)
}

// writeDebugRegs writes the breakpoint and watchpoint registers into a
// stopped thread (nothing before any was ever set on this machine).
func (p *Process) writeDebugRegs(t *thread) error {
	d := &p.debugRegs
	if err := writeHWDebug(t.tid, unix.NT_ARM_HW_BREAK, d.slotsOf(HardwareBreakpoint)); err != nil {
		return err
	}
	return writeHWDebug(t.tid, unix.NT_ARM_HW_WATCH, d.slotsOf(WriteWatchpoint))
}

// writeHWDebug writes slots as a struct user_hwdebug_state.
func writeHWDebug(tid, nt int, slots []debugSlot) error {
	if len(slots) == 0 {
		return nil
	}
	buf := make([]byte, 8+16*len(slots))
	for i, s := range slots {
		binary.LittleEndian.PutUint64(buf[8+16*i:], s.addr)
		binary.LittleEndian.PutUint32(buf[8+16*i+8:], s.ctrl())
	}
	return setRegset(tid, nt, buf)
}

// debugRegStop turns a SIGTRAP from a hardware breakpoint or watchpoint
// (si_code TRAP_HWBKPT) into an event: the watchpoint whose doubleword
// holds si_addr, or the breakpoint at si_addr.
func (p *Process) debugRegStop(t *thread, si siginfo) (StopEvent, bool) {
	if si.Code != trapHwbkpt {
		return StopEvent{}, false
	}
	d := &p.debugRegs
	ev := StopEvent{Kind: SignalStop, Tid: t.tid, Signal: int(unix.SIGTRAP)}
	for _, s := range d.slotsOf(HardwareBreakpoint) {
		if s.used && s.addr == si.Addr {
			ev.Reason = "hwbreak"
			return ev, true
		}
	}
	// The doubleword holding si_addr; failing that, for an access
	// wider than the bytes watched that starts below them (an ldp, a
	// vector load), a watched word that access reaches.
	for _, near := range []uint64{0, maxAccess} {
		for _, s := range d.slotsOf(WriteWatchpoint) {
			if s.used && si.Addr < s.addr+8 && si.Addr+near >= s.addr {
				return watchEvent(ev, s, si.Addr), true
			}
		}
	}
	return StopEvent{}, false
}

// maxAccess bounds how many bytes below a watched word a single access
// that reaches it may start (ld4/st4 of four vector registers).
const maxAccess = 64

// watchEvent completes ev for watchpoint slot s hit by an access at
// addr: gdb is told an address inside what it watches.
func watchEvent(ev StopEvent, s debugSlot, addr uint64) StopEvent {
	ev.WatchAddr = max(addr, s.want)
	switch s.kind {
	case ReadWatchpoint:
		ev.Reason = "rwatch"
	case WriteWatchpoint:
		ev.Reason = "watch"
	default:
		ev.Reason = "awatch"
	}
	return ev
}
