package inferior

import (
	"errors"
	"fmt"
	"slices"
	"sort"
)

// codePatch is code the stub wrote over the program's own (a fast
// tracepoint's jump to its jump pad). Memory is layered: the program's
// original bytes, the patch's code over them, and software breakpoints'
// int3s over that. A breakpoint inside a patch saves the patch's byte (so
// stepping over the breakpoint executes the patch); the patch saves the
// original bytes, which are what gdb sees and writes.
type codePatch struct {
	addr uint64
	code []byte // what the patch wrote
	orig []byte // the program's bytes under it (gdb's view)
}

func (c *codePatch) end() uint64 { return c.addr + uint64(len(c.code)) }

// overlaps reports whether [addr, addr+n) and the patch share a byte.
func (c *codePatch) overlaps(addr, n uint64) bool {
	return addr < c.end() && c.addr < addr+n
}

// patchSet holds the code patches by start address, with the starts
// sorted: every memory access asks which patches overlap it, and a
// thousand fast tracepoints make a thousand patches.
type patchSet struct {
	byAddr map[uint64]*codePatch
	starts []uint64 // sorted
	maxLen uint64   // the longest patch added (a bound for the search)
}

func newPatchSet() patchSet { return patchSet{byAddr: map[uint64]*codePatch{}} }

func (s *patchSet) add(c *codePatch) {
	i, found := slices.BinarySearch(s.starts, c.addr)
	if !found {
		s.starts = slices.Insert(s.starts, i, c.addr)
	}
	s.byAddr[c.addr] = c
	s.maxLen = max(s.maxLen, uint64(len(c.code)))
}

func (s *patchSet) remove(addr uint64) {
	if i, found := slices.BinarySearch(s.starts, addr); found {
		s.starts = slices.Delete(s.starts, i, i+1)
	}
	delete(s.byAddr, addr)
}

// overlapping returns the patches that share a byte with [addr, addr+n),
// by address.
func (s *patchSet) overlapping(addr, n uint64) []*codePatch {
	lo := addr - min(addr, s.maxLen)
	i, _ := slices.BinarySearch(s.starts, lo)
	var out []*codePatch
	for ; i < len(s.starts) && s.starts[i] < addr+n; i++ {
		if c := s.byAddr[s.starts[i]]; c.overlaps(addr, n) {
			out = append(out, c)
		}
	}
	return out
}

// ErrPatchOverlap: a code patch would overlap another.
var ErrPatchOverlap = errors.New("inferior: code patches overlap")

// InsertPatch writes code at addr, saving the bytes it replaces, and keeps
// the patch invisible to gdb: ReadMemory shows the saved bytes, and
// WriteMemory into the range updates them while the patch stays in
// memory. A software breakpoint already inside the range keeps its int3
// in memory and saves the patch's byte instead of the original one.
// Patches must not overlap (ErrPatchOverlap).
//
// With every thread stopped (all-stop: gdb installs tracepoints then)
// the patch is written in one write; otherwise the bytes after the first
// go before the first one, so that a thread running through addr
// meanwhile meets either the old first instruction byte or the complete
// patch, never a jump with half its displacement (writePatchBytes).
func (p *Process) InsertPatch(addr uint64, code []byte) error {
	return p.do(func() error { return p.insertPatch(addr, code, nil) })
}

// InsertPatchOver is InsertPatch for a caller that knows the original
// bytes under the patch — what ReadMemory shows there, read since
// anything last changed them — and so spares the read of the memory.
// orig is as long as code.
func (p *Process) InsertPatchOver(addr uint64, code, orig []byte) error {
	if len(orig) != len(code) {
		return fmt.Errorf("patch at %#x: %d original bytes for %d of code", addr, len(orig), len(code))
	}
	return p.do(func() error { return p.insertPatch(addr, code, orig) })
}

// insertPatch inserts a patch; orig, when not nil, holds the bytes
// ReadMemory shows under it (else they are read).
func (p *Process) insertPatch(addr uint64, code, orig []byte) error {
	if p.exitEvent != nil {
		return ErrExited
	}
	n := uint64(len(code))
	if n == 0 {
		return fmt.Errorf("patch at %#x: no code", addr)
	}
	if addr+n < addr {
		return fmt.Errorf("patch of %d bytes at %#x: range wraps around", n, addr)
	}
	if cs := p.patches.overlapping(addr, n); len(cs) > 0 {
		return fmt.Errorf("patch of %d bytes at %#x over the one at %#x (%d bytes): %w",
			n, addr, cs[0].addr, len(cs[0].code), ErrPatchOverlap)
	}
	raw := make([]byte, n) // what memory holds
	if orig != nil {
		copy(raw, orig)
	} else if got, err := p.readRaw(addr, raw); err != nil || uint64(got) != n {
		if err == nil {
			err = errors.New("short read")
		}
		return fmt.Errorf("patch at %#x: saving the original bytes: %w", addr, err)
	}
	c := &codePatch{addr: addr, code: append([]byte(nil), code...), orig: append([]byte(nil), raw...)}
	out := append([]byte(nil), code...)
	bps := p.breakpointsIn(addr, n)
	for _, bp := range bps {
		// The memory holds the breakpoint (or, mid step-over, the
		// saved bytes): the original bytes are the breakpoint's saved
		// ones.
		copyOverlap(c.orig, addr, bp.orig[:], bp.addr)
		if bp.inserted {
			copyOverlap(out, addr, breakpointInsn[:], bp.addr)
			copyOverlap(raw, addr, breakpointInsn[:], bp.addr)
		}
	}
	live := p.patchingLive()
	if live {
		p.queueLive(addr, raw, out)
	} else if err := p.writePatchBytes(addr, out, raw); err != nil {
		return fmt.Errorf("patch at %#x: %w", addr, err)
	}
	for _, bp := range bps {
		copyOverlap(bp.orig[:], bp.addr, code, addr)
		p.guardTrap(bp.addr, bp.orig)
	}
	p.patches.add(c)
	if live && p.writeBatch == 0 {
		return p.flushLive()
	}
	return nil
}

// writePatchBytes writes a patch's bytes over raw, the memory's: in one
// write when no thread runs, else the tail first and the first byte
// last, so that a running thread meets either the old first instruction
// or the whole patch.
func (p *Process) writePatchBytes(addr uint64, out, raw []byte) error {
	if !p.anyRunning() || len(out) == 1 {
		return p.writeRaw(addr, out)
	}
	if err := p.writeRaw(addr+1, out[1:]); err != nil {
		return err
	}
	if err := p.writeRaw(addr, out[:1]); err != nil {
		// Put the tail back: nothing of the patch may stay.
		_ = p.writeRaw(addr+1, raw[1:])
		return err
	}
	return nil
}

// RemovePatch puts back the bytes InsertPatch saved at addr (the address
// the patch was inserted at). Software breakpoints inside the range keep
// their int3s and save the original bytes again. With threads running
// the bytes change as InsertPatch's do (livepatch.go); without the live
// protocol every thread should be stopped: the bytes are written in one
// go.
func (p *Process) RemovePatch(addr uint64) error {
	return p.do(func() error { return p.removePatch(addr) })
}

func (p *Process) removePatch(addr uint64) error {
	c := p.patches.byAddr[addr]
	if c == nil {
		return fmt.Errorf("no code patch at %#x", addr)
	}
	if p.exitEvent != nil {
		p.patches.remove(addr)
		return ErrExited
	}
	n := uint64(len(c.code))
	out := append([]byte(nil), c.orig...)
	bps := p.breakpointsIn(addr, n)
	for _, bp := range bps {
		if bp.inserted {
			copyOverlap(out, addr, breakpointInsn[:], bp.addr)
		}
	}
	live := p.patchingLive()
	if bp := p.swbps[addr]; live && bp != nil && !bp.inserted && p.live.held[bp] {
		// The int3 held back by insertSoftware replaces the patch
		// in the same change: its last byte (armed then).
		delete(p.live.held, bp)
		copyOverlap(out, addr, breakpointInsn[:], addr)
		p.live.arming = append(p.live.arming, bp)
	}
	if live {
		cur := make([]byte, n)
		if got, err := p.readRaw(addr, cur); err != nil || uint64(got) != n {
			return fmt.Errorf("removing the patch at %#x: reading it: %w", addr, firstErr(err, errors.New("short read")))
		}
		p.queueLive(addr, cur, out)
	} else if err := p.writeRaw(addr, out); err != nil {
		return fmt.Errorf("removing the patch at %#x: %w", addr, err)
	}
	for _, bp := range bps {
		copyOverlap(bp.orig[:], bp.addr, c.orig, addr)
		p.guardTrap(bp.addr, bp.orig)
	}
	p.patches.remove(addr)
	if live && p.writeBatch == 0 {
		return p.flushLive()
	}
	return nil
}

// breakpointsIn returns the software breakpoints with bytes in [addr,
// addr+n), inserted or not, by address.
func (p *Process) breakpointsIn(addr, n uint64) []*swBreakpoint {
	var out []*swBreakpoint
	for _, bp := range p.swbps {
		if bp.overlaps(addr, n) {
			out = append(out, bp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].addr < out[j].addr })
	return out
}

// showOriginals replaces, in buf (memory read at addr), the bytes under
// inserted breakpoints and code patches with the program's own.
func (p *Process) showOriginals(addr uint64, buf []byte) {
	n := uint64(len(buf))
	for a, bp := range p.swbps {
		if bp.inserted && bp.overlaps(addr, n) {
			copyOverlap(buf, addr, bp.orig[:], a)
		}
	}
	// Patches last: under a patch the breakpoint's saved byte is the
	// patch's, the program's is the patch's saved one.
	for _, c := range p.patches.overlapping(addr, n) {
		lo, hi := max(addr, c.addr), min(addr+n, c.end())
		copy(buf[lo-addr:hi-addr], c.orig[lo-c.addr:hi-c.addr])
	}
}

// RelocatePCs offers every live thread's pc to f, which returns the pc the
// thread is to continue from and true, or false to leave the thread
// alone. Every thread must be stopped (ErrRunning otherwise, and nothing
// is changed). Fast tracepoints use it when a patch covers an address
// where a thread sits, and to move threads out of jump pads before pads
// are freed. A moved thread executes whatever is at its new pc when
// resumed: a breakpoint there is hit, not silently stepped over, since the
// thread never reached it.
func (p *Process) RelocatePCs(f func(tid int, pc uint64) (uint64, bool)) error {
	return p.do(func() error { return p.relocatePCs(f) })
}

func (p *Process) relocatePCs(f func(tid int, pc uint64) (uint64, bool)) error {
	if p.exitEvent != nil {
		return ErrExited
	}
	for tid, t := range p.threads {
		if !t.zombie && !t.stopped {
			return fmt.Errorf("relocating pcs: thread %d: %w", tid, ErrRunning)
		}
	}
	return p.relocateStopped(f)
}
