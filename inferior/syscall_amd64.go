package inferior

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Software breakpoints on x86-64: the one-byte int3, after which the pc
// is one byte past the breakpoint.
const (
	breakpointInsn     = 0xcc
	breakpointPCAdjust = 1
)

// injectSyscall makes stopped thread t execute one system call and
// restores its registers and the borrowed code bytes afterwards.
func (p *Process) injectSyscall(t *thread, nr uintptr, args ...uint64) (uint64, error) {
	if t.atSyscallEntry {
		return p.injectAtSyscallEntry(t, nr, args...)
	}
	var saved unix.PtraceRegs
	if err := unix.PtraceGetRegs(t.tid, &saved); err != nil {
		return 0, fmt.Errorf("reading registers: %w", err)
	}
	// The syscall instruction goes over the code at the thread's pc,
	// unless other threads run (they could meet it there): then the
	// thread runs one found in the process (livepatch.go).
	pc, borrowed := saved.Rip, false
	if p.othersRunning(t) && p.liveCapable() {
		pc, borrowed = p.live.gadget, true
	}
	var orig [2]byte
	if !borrowed {
		if _, err := p.readRaw(pc, orig[:]); err != nil {
			return 0, fmt.Errorf("reading code at %#x: %w", pc, err)
		}
		if err := p.writeRaw(pc, []byte{0x0f, 0x05}); err != nil { // syscall
			return 0, err
		}
	}
	restore := func() {
		if !borrowed {
			_ = p.writeRaw(pc, orig[:])
		}
		_ = unix.PtraceSetRegs(t.tid, &saved)
	}
	set := func() error {
		regs := saved
		regs.Rax = uint64(nr)
		regs.Orig_rax = ^uint64(0) // no syscall restart on the way out
		setSyscallArgs(&regs, args)
		regs.Rip = pc
		return unix.PtraceSetRegs(t.tid, &regs)
	}
	if err := set(); err != nil {
		restore()
		return 0, fmt.Errorf("setting registers: %w", err)
	}
	for attempt := 0; attempt < 8; attempt++ {
		done, err := p.stepThread(t, queuedSignal{})
		if err != nil {
			restore()
			return 0, err
		}
		var after unix.PtraceRegs
		if err := unix.PtraceGetRegs(t.tid, &after); err != nil {
			restore()
			return 0, fmt.Errorf("reading the result: %w", err)
		}
		if after.Rip == pc+2 {
			restore()
			return after.Rax, nil
		}
		if after.Rip != pc {
			break
		}
		if done {
			// The thread was stopped inside a system call of its own
			// (clone's event stop, say): the step finished that call,
			// whose result is in the registers now, and stopped on the
			// way out, before ours ran. Those registers are the ones
			// to give back; ours go in again.
			home := saved.Rip
			saved = after
			saved.Rip = home // after.Rip is the gadget's when borrowed
			if err := set(); err != nil {
				restore()
				return 0, fmt.Errorf("setting registers: %w", err)
			}
		}
		// Otherwise a signal got in first (kept for gdb): the syscall
		// has not run, try again.
	}
	restore()
	return 0, errors.New("the injected system call did not complete")
}

// setSyscallArgs puts a system call's arguments in their registers.
func setSyscallArgs(regs *unix.PtraceRegs, args []uint64) {
	argRegs := []*uint64{&regs.Rdi, &regs.Rsi, &regs.Rdx, &regs.R10, &regs.R8, &regs.R9}
	for i, a := range args {
		*argRegs[i] = a
	}
}

// injectAtSyscallEntry runs system call nr in thread t stopped at the
// entry of a syscall of its own, which has not run yet (a caught
// syscall, SetCatchSyscalls): the kernel is made to run ours instead (its
// number in orig_rax), and at ours' exit stop the thread is rewound onto
// its syscall instruction with its own number back in rax, so that it
// makes its call when it resumes. That call's entry stop, which gdb has
// already been told of, is not reported again (thread.skipEntry).
func (p *Process) injectAtSyscallEntry(t *thread, nr uintptr, args ...uint64) (uint64, error) {
	var saved unix.PtraceRegs
	if err := unix.PtraceGetRegs(t.tid, &saved); err != nil {
		return 0, fmt.Errorf("reading registers: %w", err)
	}
	regs := saved
	regs.Orig_rax = uint64(nr)
	setSyscallArgs(&regs, args)
	if err := unix.PtraceSetRegs(t.tid, &regs); err != nil {
		return 0, fmt.Errorf("setting registers: %w", err)
	}
	restore := func() error {
		back := saved
		back.Rip -= 2 // syscall, sysenter and int $0x80 are 2 bytes
		back.Rax = saved.Orig_rax
		t.atSyscallEntry = false
		t.skipEntry = int(int64(saved.Orig_rax)) + 1
		return unix.PtraceSetRegs(t.tid, &back)
	}
	if err := p.flushWrites(); err != nil {
		return 0, err
	}
	for {
		if err := unix.PtraceSyscall(t.tid, 0); err != nil {
			return 0, fmt.Errorf("running the system call: %w", err)
		}
		t.stopped = false
		ws, err := p.waitThread(t)
		if err != nil {
			return 0, fmt.Errorf("waiting for the system call: %w", err)
		}
		if !ws.Stopped() {
			p.handleStatus(t.tid, ws)
			return 0, fmt.Errorf("thread %d: %w", t.tid, ErrNoThread)
		}
		t.stopped = true
		switch sig := ws.StopSignal(); {
		case sig == unix.SIGTRAP|0x80:
			var after unix.PtraceRegs
			if err := unix.PtraceGetRegs(t.tid, &after); err != nil {
				return 0, fmt.Errorf("reading the result: %w", err)
			}
			if err := restore(); err != nil {
				return 0, fmt.Errorf("rewinding the thread's own system call: %w", err)
			}
			return after.Rax, nil
		case sig == unix.SIGTRAP && ws.TrapCause() != 0:
			// An event of our call's (none expected): carry on.
		default:
			if !p.holdSignalWhileStepping(t, int(sig)) {
				p.queueSignalStop(t, int(sig))
			}
		}
	}
}
