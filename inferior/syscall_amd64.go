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
	var saved unix.PtraceRegs
	if err := unix.PtraceGetRegs(t.tid, &saved); err != nil {
		return 0, fmt.Errorf("reading registers: %w", err)
	}
	pc := saved.Rip
	var orig [2]byte
	if _, err := p.readRaw(pc, orig[:]); err != nil {
		return 0, fmt.Errorf("reading code at %#x: %w", pc, err)
	}
	if err := p.writeRaw(pc, []byte{0x0f, 0x05}); err != nil { // syscall
		return 0, err
	}
	restore := func() {
		_ = p.writeRaw(pc, orig[:])
		_ = unix.PtraceSetRegs(t.tid, &saved)
	}
	regs := saved
	regs.Rax = uint64(nr)
	regs.Orig_rax = ^uint64(0) // no syscall restart on the way out
	argRegs := []*uint64{&regs.Rdi, &regs.Rsi, &regs.Rdx, &regs.R10, &regs.R8, &regs.R9}
	for i, a := range args {
		*argRegs[i] = a
	}
	regs.Rip = pc
	if err := unix.PtraceSetRegs(t.tid, &regs); err != nil {
		restore()
		return 0, fmt.Errorf("setting registers: %w", err)
	}
	var err error
	done := false
	for attempt := 0; attempt < 8 && !done; attempt++ {
		done, err = p.stepThread(t, queuedSignal{})
		if err != nil {
			restore()
			return 0, err
		}
		if !done {
			// A signal got in first (kept for gdb): check the syscall
			// has not run, then retry.
			cur, gerr := getPC(t.tid)
			if gerr != nil || cur != pc {
				break
			}
		}
	}
	if !done {
		restore()
		return 0, errors.New("the injected system call did not complete")
	}
	var after unix.PtraceRegs
	if err := unix.PtraceGetRegs(t.tid, &after); err != nil {
		restore()
		return 0, fmt.Errorf("reading the result: %w", err)
	}
	restore()
	return after.Rax, nil
}
