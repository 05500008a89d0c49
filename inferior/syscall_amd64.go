package inferior

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// System calls on x86-64: the number in rax (orig_rax once the kernel
// has it), the arguments in rdi, rsi, rdx, r10, r8, r9, the result in
// rax.

// setSyscall puts system call nr and its arguments in their registers,
// with no syscall restart on the way out.
func setSyscall(regs *unix.PtraceRegs, nr uint64, args []uint64) {
	regs.Rax = nr
	regs.Orig_rax = ^uint64(0)
	setSyscallArgs(regs, args)
}

// setSyscallArgs puts a system call's arguments in their registers.
func setSyscallArgs(regs *unix.PtraceRegs, args []uint64) {
	argRegs := []*uint64{&regs.Rdi, &regs.Rsi, &regs.Rdx, &regs.R10, &regs.R8, &regs.R9}
	for i, a := range args {
		*argRegs[i] = a
	}
}

// syscallResult is a system call's result once it has run.
func syscallResult(regs *unix.PtraceRegs) uint64 { return regs.Rax }

// syscallNr is the number of the system call tid, whose registers are
// regs, is stopped at the entry or exit of.
func syscallNr(_ int, regs *unix.PtraceRegs) (int, error) {
	return int(int64(regs.Orig_rax)), nil
}

// stackPointer is the thread's stack pointer in regs.
func stackPointer(regs *unix.PtraceRegs) uint64 { return regs.Rsp }

// replaceSyscall makes tid, stopped at a syscall's entry with registers
// regs, run system call nr with args instead (the number in orig_rax).
func replaceSyscall(tid int, regs *unix.PtraceRegs, nr uint64, args []uint64) error {
	r := *regs
	r.Orig_rax = nr
	setSyscallArgs(&r, args)
	if err := unix.PtraceSetRegs(tid, &r); err != nil {
		return fmt.Errorf("setting registers: %w", err)
	}
	return nil
}

// rewindSyscall puts tid, at the exit of a system call replaceSyscall
// substituted, back on its own syscall instruction (number own) with
// the registers it had at the entry, saved.
func rewindSyscall(tid int, saved unix.PtraceRegs, own int) error {
	saved.Rip -= 2 // syscall, sysenter and int $0x80 are 2 bytes
	saved.Rax = uint64(own)
	return unix.PtraceSetRegs(tid, &saved)
}

// pauseSyscall waits for a signal: pause().
var pauseSyscall = syscallCall{nr: unix.SYS_PAUSE}
