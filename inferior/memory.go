package inferior

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// swBreakpoint is a software breakpoint instruction (breakpointInsn:
// int3 on x86-64, brk #0 on arm64) in memory, owned by gdb (Z0), the stub
// (internal trap), or both.
type swBreakpoint struct {
	addr     uint64
	orig     [breakpointLen]byte // the bytes the breakpoint replaced
	user     bool                // gdb's Z0
	internal bool                // the stub's internal trap
	inserted bool                // the breakpoint instruction is in memory
}

// overlaps reports whether the breakpoint's bytes and [addr, addr+n)
// share a byte.
func (bp *swBreakpoint) overlaps(addr, n uint64) bool {
	return bp.addr < addr+n && addr < bp.addr+breakpointLen
}

// copyOverlap copies the bytes of src, memory at srcAt, that fall inside
// dst, memory at dstAt, into dst.
func copyOverlap(dst []byte, dstAt uint64, src []byte, srcAt uint64) {
	lo := max(dstAt, srcAt)
	hi := min(dstAt+uint64(len(dst)), srcAt+uint64(len(src)))
	if lo < hi {
		copy(dst[lo-dstAt:hi-dstAt], src[lo-srcAt:hi-srcAt])
	}
}

// putBreakpoint writes bp's breakpoint instruction into memory.
func (p *Process) putBreakpoint(bp *swBreakpoint) error {
	return p.writeRaw(bp.addr, breakpointInsn[:])
}

// putOriginal writes the bytes bp saved back into memory.
func (p *Process) putOriginal(bp *swBreakpoint) error {
	return p.writeRaw(bp.addr, bp.orig[:])
}

// readRaw reads memory as it is, breakpoints included.
func (p *Process) readRaw(addr uint64, buf []byte) (int, error) {
	n, err := p.readNow(addr, buf)
	p.overlayPending(addr, buf[:n])
	p.overlayLive(addr, buf[:n])
	return n, err
}

// readNow reads memory as it is now, without the writes kept for later
// (writebatch.go).
func (p *Process) readNow(addr uint64, buf []byte) (int, error) {
	if len(buf) == 0 {
		return 0, nil
	}
	if p.exitEvent != nil {
		return 0, ErrExited
	}
	local := []unix.Iovec{{Base: &buf[0]}}
	local[0].SetLen(len(buf))
	remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(buf)}}
	n, err := unix.ProcessVMReadv(p.pid, local, remote, 0)
	if err == nil && n == len(buf) {
		return n, nil
	}
	// process_vm_readv stops at the first unreadable page and cannot read
	// some mappings (e.g. PROT_NONE guard pages are unreadable anyway,
	// but [vvar] and friends can be): try /proc/PID/mem for the rest.
	if n < 0 {
		n = 0
	}
	if p.memFile == nil {
		if n > 0 {
			return n, fmt.Errorf("reading %#x: %w", addr+uint64(n), unix.EIO)
		}
		return 0, fmt.Errorf("reading %#x: %w", addr, err)
	}
	m, merr := p.memFile.ReadAt(buf[n:], int64(addr)+int64(n))
	n += m
	if n == len(buf) {
		return n, nil
	}
	if merr == nil {
		merr = unix.EIO
	}
	return n, fmt.Errorf("reading %#x: %w", addr+uint64(n), merr)
}

// writeRaw writes memory as it is through /proc/PID/mem (which can write
// read-only text).
func (p *Process) writeRaw(addr uint64, data []byte) error {
	if len(data) == 0 || p.exitEvent == nil && p.memFile != nil && p.deferWrite(addr, data) {
		return nil
	}
	return p.writeNow(addr, data)
}

// writeNow writes memory at once (writeRaw may keep a write for later).
func (p *Process) writeNow(addr uint64, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	if p.exitEvent != nil {
		return ErrExited
	}
	if p.memFile == nil {
		return fmt.Errorf("writing %#x: no memory file", addr)
	}
	n, err := p.memFile.WriteAt(data, int64(addr))
	if err != nil || n != len(data) {
		if err == nil {
			err = unix.EIO
		}
		return fmt.Errorf("writing %d bytes at %#x: only %d written: %w", len(data), addr, n, err)
	}
	return nil
}

// ReadMemory reads the process's memory at addr into buf, showing the
// original bytes under inserted breakpoints. A partial read returns the
// count read and an error; nothing readable returns 0 and an error.
func (p *Process) ReadMemory(addr uint64, buf []byte) (int, error) {
	var n int
	err := p.direct(func() error {
		var err error
		n, err = p.readMemory(addr, buf)
		return err
	})
	return n, err
}

func (p *Process) readMemory(addr uint64, buf []byte) (int, error) {
	n, err := p.readRaw(addr, buf)
	p.showOriginals(addr, buf[:n])
	return n, err
}

// WriteMemory writes data at addr (text included). Bytes under inserted
// breakpoints update the breakpoints' saved bytes; the int3s stay. Bytes
// under code patches update the patches' saved bytes; the patches stay. It
// fails rather than leave a partial write unreported.
func (p *Process) WriteMemory(addr uint64, data []byte) error {
	return p.direct(func() error { return p.writeMemory(addr, data) })
}

func (p *Process) writeMemory(addr uint64, data []byte) error {
	n := uint64(len(data))
	if addr+n < addr {
		return fmt.Errorf("writing %d bytes at %#x: range wraps around", len(data), addr)
	}
	var out []byte
	own := func() {
		if out == nil {
			out = append([]byte(nil), data...)
		}
	}
	// What memory must hold: the patches' code over the written bytes,
	// the breakpoints over that.
	for _, c := range p.patches.overlapping(addr, n) {
		own()
		lo, hi := max(addr, c.addr), min(addr+n, c.end())
		copy(out[lo-addr:hi-addr], c.code[lo-c.addr:hi-c.addr])
	}
	for a, bp := range p.swbps {
		if bp.inserted && bp.overlaps(addr, n) {
			own()
			copyOverlap(out, addr, breakpointInsn[:], a)
		}
	}
	if out == nil {
		out = data
	}
	if err := p.writeRaw(addr, out); err != nil {
		return err
	}
	for _, bp := range p.swbps {
		if bp.inserted && bp.overlaps(addr, n) {
			p.saveUnder(bp, addr, data)
		}
	}
	for _, c := range p.patches.overlapping(addr, n) {
		lo, hi := max(addr, c.addr), min(addr+n, c.end())
		copy(c.orig[lo-c.addr:hi-c.addr], data[lo-addr:hi-addr])
	}
	return nil
}

// saveUnder takes data, written at addr, as the bytes bp saved wherever
// they are the program's own (not under a code patch, whose saved bytes
// hold the program's there).
func (p *Process) saveUnder(bp *swBreakpoint, addr uint64, data []byte) {
	changed := false
	for i := range bp.orig {
		a := bp.addr + uint64(i)
		if a >= addr && a-addr < uint64(len(data)) && p.patchAt(a) == nil {
			bp.orig[i] = data[a-addr]
			changed = true
		}
	}
	if changed {
		p.guardTrap(bp.addr, bp.orig)
	}
}

// patchAt returns the code patch covering addr, or nil.
func (p *Process) patchAt(addr uint64) *codePatch {
	if cs := p.patches.overlapping(addr, 1); len(cs) > 0 {
		return cs[0]
	}
	return nil
}

// insertSoftware plants (or shares) a software breakpoint at addr for gdb
// or the stub.
func (p *Process) insertSoftware(addr uint64, internal bool) error {
	if p.exitEvent != nil {
		return ErrExited
	}
	if addr%insnAlign != 0 {
		return fmt.Errorf("breakpoint at %#x: not on an instruction boundary (%d bytes)", addr, insnAlign)
	}
	bp := p.swbps[addr]
	if c := p.patches.byAddr[addr]; bp == nil && internal && c != nil && p.patchingLive() {
		// An internal trap at the start of a patch threads may be
		// running through (a tracepoint's, replacing its jump) goes
		// in when the patch comes out, as the live
		// protocol's last byte (removePatch): written over the patch
		// now, it would break it, and written after, a thread could
		// pass between the two (a tracepoint moving from a jump to a
		// trap would lose hits).
		bp = &swBreakpoint{addr: addr}
		copyOverlap(bp.orig[:], addr, c.orig, c.addr)
		p.swbps[addr] = bp
		p.guardTrap(addr, bp.orig)
		if p.live.held == nil {
			p.live.held = map[*swBreakpoint]bool{}
		}
		p.live.held[bp] = true
	}
	if bp == nil {
		bp = &swBreakpoint{addr: addr}
		if _, err := p.readRaw(addr, bp.orig[:]); err != nil {
			return fmt.Errorf("breakpoint at %#x: %w", addr, err)
		}
		// The guard hears of the breakpoint before it is in memory.
		p.guardTrap(addr, bp.orig)
		if err := p.putBreakpoint(bp); err != nil {
			p.guardUntrap(addr)
			return fmt.Errorf("breakpoint at %#x: %w", addr, err)
		}
		bp.inserted = true
		p.swbps[addr] = bp
	}
	if internal {
		bp.internal = true
	} else {
		bp.user = true
	}
	return nil
}

// removeSoftware drops gdb's or the stub's claim on the breakpoint at
// addr and restores the bytes when nobody holds it any more.
func (p *Process) removeSoftware(addr uint64, internal bool) error {
	bp := p.swbps[addr]
	if bp == nil || (internal && !bp.internal) || (!internal && !bp.user) {
		return fmt.Errorf("no breakpoint at %#x", addr)
	}
	if internal {
		bp.internal = false
	} else {
		bp.user = false
	}
	if bp.user || bp.internal {
		return nil
	}
	delete(p.swbps, addr)
	if bp.inserted {
		if err := p.putOriginal(bp); err != nil {
			if p.exitEvent != nil {
				return nil
			}
			// The breakpoint may still be there: the guard keeps it.
			return fmt.Errorf("removing the breakpoint at %#x: %w", addr, err)
		}
		p.markStale(addr)
	}
	p.guardUntrap(addr)
	return nil
}

// InsertBreakpoint inserts a breakpoint or watchpoint (Z0…Z4). size is
// the Z packet's kind (ignored for software breakpoints) or the watched
// length. ReadWatchpoint returns ErrUnsupported (x86 cannot watch reads
// only); running out of debug registers returns ErrNoDebugRegister.
func (p *Process) InsertBreakpoint(kind BreakpointKind, addr uint64, size int) error {
	return p.do(func() error {
		switch kind {
		case SoftwareBreakpoint:
			return p.insertSoftware(addr, false)
		case HardwareBreakpoint, WriteWatchpoint, ReadWatchpoint, AccessWatchpoint:
			return p.insertHardware(hwPoint{kind, addr, size})
		}
		return fmt.Errorf("breakpoint kind %d: %w", kind, ErrUnsupported)
	})
}

// RemoveBreakpoint removes what InsertBreakpoint inserted.
func (p *Process) RemoveBreakpoint(kind BreakpointKind, addr uint64, size int) error {
	return p.do(func() error {
		switch kind {
		case SoftwareBreakpoint:
			return p.removeSoftware(addr, false)
		case HardwareBreakpoint, WriteWatchpoint, ReadWatchpoint, AccessWatchpoint:
			return p.removeHardware(hwPoint{kind, addr, size})
		}
		return fmt.Errorf("breakpoint kind %d: %w", kind, ErrUnsupported)
	})
}

// stoppedThread returns tid if it exists and is stopped, or an error
// saying why not.
func (p *Process) stoppedThread(tid int) (*thread, error) {
	if p.exitEvent != nil {
		return nil, ErrExited
	}
	t := p.threads[tid]
	if t == nil || t.zombie {
		return nil, fmt.Errorf("thread %d: %w", tid, ErrNoThread)
	}
	if !t.stopped {
		return nil, fmt.Errorf("thread %d: %w", tid, ErrRunning)
	}
	return t, nil
}
