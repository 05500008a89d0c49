package inferior

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"gotpstub/tdesc"
)

// Stopped is a thread stopped at an internal trap, handed to the trap
// hook on the ptrace goroutine, or a thread stopped at its exit, handed to
// the exit hook (SetExitHook; PC is then the thread's pc, and SingleStep
// must not be used). Its methods call ptrace directly; it is valid only
// during the hook call.
type Stopped struct {
	p    *Process
	t    *thread
	addr uint64

	// The thread's registers, read once per hit and kept in step with
	// SetRegisters; a single-step drops them. A hook typically reads the
	// registers, collects, and moves the pc: one read, one write.
	regs *tdesc.Regs
	ur   *unix.PtraceRegs
}

// Tid returns the thread's id.
func (s *Stopped) Tid() int { return s.t.tid }

// PC returns the trap's address (the pc, already rewound over the int3).
func (s *Stopped) PC() uint64 { return s.addr }

// UserBreakpoint reports whether gdb also has a software breakpoint at the
// trap's address (the stop is then reported to gdb after the hook).
func (s *Stopped) UserBreakpoint() bool {
	bp := s.p.swbps[s.addr]
	return bp != nil && bp.user
}

// Registers returns the thread's registers (a copy the caller may change).
func (s *Stopped) Registers() (*tdesc.Regs, error) {
	if s.p.threads[s.t.tid] != s.t {
		return nil, fmt.Errorf("thread %d: %w", s.t.tid, ErrNoThread)
	}
	if s.regs == nil {
		r, ur, err := s.p.getRegsRaw(s.t.tid)
		if err != nil {
			return nil, err
		}
		s.regs, s.ur = r, ur
	}
	return s.regs.Clone(), nil
}

// ThreadPointer returns the thread's pointer like Process.ThreadPointer
// (fs_base on x86-64, tpidr_el0 on arm64).
func (s *Stopped) ThreadPointer() (uint64, error) {
	if s.p.threads[s.t.tid] != s.t {
		return 0, fmt.Errorf("thread %d: %w", s.t.tid, ErrNoThread)
	}
	return threadPointer(s.t.tid)
}

// SetRegisters writes the registers of r that differ from the thread's.
func (s *Stopped) SetRegisters(r *tdesc.Regs) error {
	if s.p.threads[s.t.tid] != s.t {
		return fmt.Errorf("thread %d: %w", s.t.tid, ErrNoThread)
	}
	if s.regs == nil {
		if _, err := s.Registers(); err != nil {
			return err
		}
	}
	if _, err := s.p.writeChangedRegs(s.t.tid, s.regs, s.ur, r); err != nil {
		s.regs, s.ur = nil, nil // unknown state: read again next time
		return err
	}
	// writeChangedRegs updated s.ur in place; bring the copy up to date.
	for num := range s.regs.Layout.Regs {
		if num < len(r.Valid) && r.Valid[num] {
			_ = s.regs.Set(num, r.Get(num))
		}
	}
	return nil
}

// ReadMemory reads memory like Process.ReadMemory.
func (s *Stopped) ReadMemory(addr uint64, buf []byte) (int, error) {
	return s.p.readMemory(addr, buf)
}

// WriteMemory writes memory like Process.WriteMemory.
func (s *Stopped) WriteMemory(addr uint64, b []byte) error {
	return s.p.writeMemory(addr, b)
}

// SingleStep executes one instruction of this thread only and waits for
// it; other threads keep running and their events stay queued. A thread
// sitting on one of our int3s steps the original instruction. A signal
// arriving instead is kept for gdb and the step retried.
func (s *Stopped) SingleStep() error {
	s.regs, s.ur = nil, nil // the step changes them
	p, t := s.p, s.t
	for attempt := 0; attempt < 8; attempt++ {
		if p.threads[t.tid] != t {
			return fmt.Errorf("thread %d: %w", t.tid, ErrNoThread)
		}
		pc, err := getPC(t.tid)
		if err != nil {
			return fmt.Errorf("single-step: %w", err)
		}
		var done bool
		if bp := p.swbps[pc]; bp != nil && bp.inserted {
			if err := p.putOriginal(bp); err != nil {
				return fmt.Errorf("single-step: %w", err)
			}
			bp.inserted = false
			done, err = p.stepThread(t, queuedSignal{})
			if p.swbps[bp.addr] == bp && p.exitEvent == nil {
				if p.putBreakpoint(bp) == nil {
					bp.inserted = true
				}
			}
		} else {
			done, err = p.stepThread(t, queuedSignal{})
		}
		if err != nil {
			return fmt.Errorf("single-step: %w", err)
		}
		if done {
			return nil
		}
		if p.threads[t.tid] != t || p.exitEvent != nil {
			return fmt.Errorf("thread %d: %w", t.tid, ErrNoThread)
		}
		// A signal was queued for gdb instead of the step: the instruction
		// did not run; try again.
	}
	return errors.New("single-step: interrupted by signals too often")
}

// InsertInternalTrap plants an int3 owned by the stub at addr. It may
// share the address with gdb's Z0 breakpoint.
func (p *Process) InsertInternalTrap(addr uint64) error {
	return p.do(func() error { return p.insertSoftware(addr, true) })
}

// RemoveInternalTrap removes the stub's int3 at addr (gdb's breakpoint
// there, if any, stays).
func (p *Process) RemoveInternalTrap(addr uint64) error {
	return p.do(func() error { return p.removeSoftware(addr, true) })
}

// AllocateScratch maps size bytes of read-write-execute memory in the
// process within ±2 GB of near (so rel32 jumps and rip-relative operands
// reach), by making one stopped thread call mmap. Every thread must be
// stopped.
func (p *Process) AllocateScratch(near uint64, size int) (uint64, error) {
	var addr uint64
	err := p.do(func() error {
		var err error
		addr, err = p.allocateScratch(near, size)
		return err
	})
	return addr, err
}

// AllocateScratchAt maps read-write-execute memory covering exactly
// [addr, addr+size) (whole pages) in the process, failing if any of it is
// already mapped. Every thread must be stopped.
func (p *Process) AllocateScratchAt(addr uint64, size int) error {
	return p.do(func() error {
		if size <= 0 || size > 1<<30 {
			return fmt.Errorf("allocate scratch at %#x: bad size %d", addr, size)
		}
		base := addr &^ (pageSize - 1)
		length := (addr + uint64(size) - base + pageSize - 1) &^ (pageSize - 1)
		_, err := p.mapScratch(base, length)
		return err
	})
}

const pageSize = 4096

func (p *Process) allocateScratch(near uint64, size int) (uint64, error) {
	if size <= 0 || size > 1<<30 {
		return 0, fmt.Errorf("allocate scratch: bad size %d", size)
	}
	length := (uint64(size) + pageSize - 1) &^ (pageSize - 1)
	if p.exitEvent != nil {
		return 0, ErrExited
	}
	maps, err := readMaps(p.pid)
	if err != nil {
		return 0, fmt.Errorf("allocate scratch: %w", err)
	}
	hint, ok := freeNear(maps, near, length)
	if !ok {
		return 0, fmt.Errorf("allocate scratch: no free %d bytes within 2GB of %#x", length, near)
	}
	return p.mapScratch(hint, length)
}

// mapScratch makes a stopped thread mmap length bytes RWX at hint
// (MAP_FIXED_NOREPLACE: never over an existing mapping).
func (p *Process) mapScratch(hint, length uint64) (uint64, error) {
	if p.exitEvent != nil {
		return 0, ErrExited
	}
	var res uint64
	err := p.withSyscallThread(func(t *thread) error {
		var err error
		p.injectingNoMemory = true // an anonymous mmap reads no memory
		res, err = p.injectSyscall(t, unix.SYS_MMAP, hint, length,
			unix.PROT_READ|unix.PROT_WRITE|unix.PROT_EXEC,
			unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE, ^uint64(0), 0)
		p.injectingNoMemory = false
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("allocate scratch: %w", err)
	}
	if int64(res) < 0 && int64(res) > -4096 {
		return 0, fmt.Errorf("allocate scratch: mmap in the inferior: %w", unix.Errno(-int64(res)))
	}
	if res != hint {
		return 0, fmt.Errorf("allocate scratch: mmap returned %#x, asked for %#x", res, hint)
	}
	return res, nil
}

// mapping is one line of /proc/PID/maps.
type mapping struct {
	start, end uint64
	exec       bool   // the permissions have x
	write      bool   // the permissions have w
	name       string // the path or [name] after the inode, if any
}

// CodeSpan returns how many of the n bytes at addr lie in one of the
// program's code mappings (executable, not writable, mapped from a file
// or the vDSO): memory whose contents only the stub's own patches change,
// and ReadMemory shows it without them. 0 when addr is in none, or the
// mappings cannot be read.
func (p *Process) CodeSpan(addr uint64, n int) int {
	maps, err := readMaps(p.pid)
	if err != nil {
		return 0
	}
	for _, m := range maps {
		if addr >= m.start && addr < m.end && m.exec && !m.write &&
			(strings.HasPrefix(m.name, "/") || m.name == "[vdso]") {
			return int(min(uint64(n), m.end-addr))
		}
	}
	return 0
}

func readMaps(pid int) ([]mapping, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseMaps(f)
}

// parseMaps parses /proc/PID/maps address ranges.
func parseMaps(r interface{ Read([]byte) (int, error) }) ([]mapping, error) {
	var out []mapping
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) == 0 {
			return nil, fmt.Errorf("maps: bad line %q", line)
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			return nil, fmt.Errorf("maps: bad line %q", line)
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end < start {
			return nil, fmt.Errorf("maps: bad range in %q", line)
		}
		m := mapping{start: start, end: end}
		if len(fields) > 1 {
			m.exec = strings.Contains(fields[1], "x")
			m.write = strings.Contains(fields[1], "w")
		}
		if len(fields) > 5 {
			m.name = fields[5]
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].start < out[j].start })
	return out, nil
}

// freeNear finds a page-aligned free range of length bytes whose every
// byte is within 2 GB of near, as close to near as possible.
func freeNear(maps []mapping, near, length uint64) (uint64, bool) {
	const (
		lowest  = 0x10000 // mmap_min_addr
		highest = userSpaceTop
		reach   = 1<<31 - pageSize
	)
	near &^= pageSize - 1
	var best uint64
	bestDist := ^uint64(0)
	consider := func(gapStart, gapEnd uint64) {
		if gapStart < lowest {
			gapStart = lowest
		}
		if gapEnd > highest {
			gapEnd = highest
		}
		if gapEnd <= gapStart || gapEnd-gapStart < length {
			return
		}
		// The candidate closest to near inside [gapStart, gapEnd-length].
		c := near
		if c < gapStart {
			c = gapStart
		}
		if c > gapEnd-length {
			c = gapEnd - length
		}
		var dist uint64
		if c+length > near {
			dist = c + length - near
		}
		if near > c && near-c > dist {
			dist = near - c
		}
		if dist > reach {
			return
		}
		if dist < bestDist {
			best, bestDist = c, dist
		}
	}
	prev := uint64(0)
	for _, m := range maps {
		if m.start > prev {
			consider(prev, m.start)
		}
		if m.end > prev {
			prev = m.end
		}
	}
	consider(prev, highest)
	return best, bestDist != ^uint64(0)
}

// WithStopped runs f on the ptrace goroutine with a Stopped handle for
// thread tid, which must be stopped (as every thread is between Wait and
// Resume): f may read and write its registers and memory and single-step
// it alone (Stopped.SingleStep), e.g. to move it out of code the stub
// generated before gdb looks at it.
func (p *Process) WithStopped(tid int, f func(s *Stopped) error) error {
	return p.do(func() error {
		t := p.threads[tid]
		if t == nil || t.zombie {
			return fmt.Errorf("thread %d: %w", tid, ErrNoThread)
		}
		if !t.stopped {
			return fmt.Errorf("thread %d: %w", tid, ErrRunning)
		}
		pc, err := getPC(tid)
		if err != nil {
			return fmt.Errorf("thread %d: %w", tid, err)
		}
		return f(&Stopped{p: p, t: t, addr: pc})
	})
}
