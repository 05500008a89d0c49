package inferior

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// System calls on arm64: svc #0 with the number in x8, the arguments in
// x0–x5, the result in x0. The kernel keeps the number of the call a
// thread is in apart (NT_ARM_SYSTEM_CALL): changing x8 at a syscall-entry
// stop does not change the call.

// setSyscall puts system call nr and its arguments in their registers.
func setSyscall(regs *unix.PtraceRegs, nr uint64, args []uint64) {
	regs.Regs[8] = nr
	copy(regs.Regs[:6], args)
}

// syscallResult is a system call's result once it has run.
func syscallResult(regs *unix.PtraceRegs) uint64 { return regs.Regs[0] }

// syscallNr is the number of the system call tid is stopped at the entry
// or exit of (NT_ARM_SYSTEM_CALL; x8 in regs if that cannot be read).
func syscallNr(tid int, regs *unix.PtraceRegs) (int, error) {
	var b [4]byte
	if _, err := getRegset(tid, unix.NT_ARM_SYSTEM_CALL, b[:]); err != nil {
		return int(regs.Regs[8]), nil
	}
	return int(int32(binary.LittleEndian.Uint32(b[:]))), nil
}

// stackPointer is the thread's stack pointer in regs.
func stackPointer(regs *unix.PtraceRegs) uint64 { return regs.Sp }

// replaceSyscall makes tid, stopped at a syscall's entry with registers
// regs, run system call nr with args instead: the arguments in x0–x5,
// the number in NT_ARM_SYSTEM_CALL.
func replaceSyscall(tid int, regs *unix.PtraceRegs, nr uint64, args []uint64) error {
	r := *regs
	setSyscall(&r, nr, args)
	if err := unix.PtraceSetRegs(tid, &r); err != nil {
		return fmt.Errorf("setting registers: %w", err)
	}
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], uint32(nr))
	if err := setRegset(tid, unix.NT_ARM_SYSTEM_CALL, b[:]); err != nil {
		_ = unix.PtraceSetRegs(tid, regs)
		return fmt.Errorf("setting the system call number: %w", err)
	}
	return nil
}

// rewindSyscall puts tid, at the exit of a system call replaceSyscall
// substituted, back on its own svc with the registers it had at the
// entry, saved (x8 still holds its number own).
func rewindSyscall(tid int, saved unix.PtraceRegs, own int) error {
	saved.Pc -= 4
	saved.Regs[8] = uint64(own)
	return unix.PtraceSetRegs(tid, &saved)
}

// pauseSyscall waits for a signal: ppoll(NULL, 0, NULL, NULL, 8), arm64
// having no pause().
var pauseSyscall = syscallCall{nr: unix.SYS_PPOLL, args: []uint64{0, 0, 0, 0, 8}}
