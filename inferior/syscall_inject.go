package inferior

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// syscallCall is a system call's number and arguments.
type syscallCall struct {
	nr   uint64
	args []uint64
}

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
	pc, borrowed := saved.PC(), false
	if p.othersRunning(t) && p.liveCapable() {
		pc, borrowed = p.live.gadget, true
	}
	orig := make([]byte, len(syscallInsn))
	if !borrowed {
		if _, err := p.readRaw(pc, orig); err != nil {
			return 0, fmt.Errorf("reading code at %#x: %w", pc, err)
		}
		if err := p.writeRaw(pc, syscallInsn); err != nil {
			return 0, err
		}
	}
	restore := func() {
		if !borrowed {
			_ = p.writeRaw(pc, orig)
		}
		_ = unix.PtraceSetRegs(t.tid, &saved)
	}
	set := func() error {
		regs := saved
		setSyscall(&regs, uint64(nr), args)
		regs.SetPC(pc)
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
		if after.PC() == pc+uint64(len(syscallInsn)) {
			restore()
			return syscallResult(&after), nil
		}
		if after.PC() != pc {
			break
		}
		if done {
			// The thread was stopped inside a system call of its own
			// (clone's event stop, say): the step finished that call,
			// whose result is in the registers now, and stopped on the
			// way out, before ours ran. Those registers are the ones
			// to give back; ours go in again.
			home := saved.PC()
			saved = after
			saved.SetPC(home) // after's pc is the gadget's when borrowed
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

// injectAtSyscallEntry runs system call nr in thread t stopped at the
// entry of a syscall of its own, which has not run yet (a caught
// syscall, SetCatchSyscalls): the kernel is made to run ours instead
// (replaceSyscall), and at ours' exit stop the thread is rewound onto
// its syscall instruction with its own registers back (rewindSyscall),
// so that it makes its call when it resumes. That call's entry stop,
// which gdb has already been told of, is not reported again
// (thread.skipEntry).
func (p *Process) injectAtSyscallEntry(t *thread, nr uintptr, args ...uint64) (uint64, error) {
	var saved unix.PtraceRegs
	if err := unix.PtraceGetRegs(t.tid, &saved); err != nil {
		return 0, fmt.Errorf("reading registers: %w", err)
	}
	own, err := syscallNr(t.tid, &saved)
	if err != nil {
		return 0, fmt.Errorf("reading the system call number: %w", err)
	}
	if err := replaceSyscall(t.tid, &saved, uint64(nr), args); err != nil {
		return 0, err
	}
	restore := func() error {
		t.atSyscallEntry = false
		t.skipEntry = own + 1
		return rewindSyscall(t.tid, saved, own)
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
			return syscallResult(&after), nil
		case sig == unix.SIGTRAP && ws.TrapCause() != 0:
			// An event of our call's (none expected): carry on.
		default:
			if !p.holdSignalWhileStepping(t, int(sig)) {
				p.queueSignalStop(t, int(sig))
			}
		}
	}
}
