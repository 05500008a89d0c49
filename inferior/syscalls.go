package inferior

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Syscall stops (gdb's `catch syscall`, QCatchSyscalls).
//
// While catching is on, threads the package continues are resumed with
// PTRACE_SYSCALL instead of PTRACE_CONT (a single-step stays a
// single-step, as with gdbserver), and each syscall-entry and -exit stop
// (SIGTRAP|0x80, PTRACE_O_TRACESYSGOOD) of a caught syscall is reported
// as a SIGTRAP StopEvent with Syscall set; the others resume at once.
// Whether a stop is an entry or an exit comes from the kernel
// (PTRACE_GET_SYSCALL_INFO, Linux 5.3), not from counting stops: a thread
// that was inside a syscall when catching began stops first at its exit.

// SyscallStop says which side of a syscall a syscall stop is.
type SyscallStop int

// Syscall stop kinds.
const (
	NoSyscall     SyscallStop = iota
	SyscallEntry              // before the kernel runs it (gdb's syscall_entry)
	SyscallReturn             // after it (gdb's syscall_return)
)

// catchState is what SetCatchSyscalls set.
type catchState struct {
	on  bool
	all bool
	nrs map[int]bool
}

// SetCatchSyscalls turns syscall stops on (nrs: the syscall numbers to
// report; nil or empty: every one) or off. Threads already running take
// the change at their next resumption.
func (p *Process) SetCatchSyscalls(on bool, nrs []int) {
	_ = p.do(func() error {
		p.catch = catchState{on: on, all: len(nrs) == 0, nrs: map[int]bool{}}
		for _, n := range nrs {
			p.catch.nrs[n] = true
		}
		return nil
	})
}

// caught reports whether syscall nr is to be reported.
func (c catchState) caught(nr int) bool { return c.on && (c.all || c.nrs[nr]) }

// syscallStop handles t's syscall stop: reported when caught, else the
// thread goes on.
func (p *Process) syscallStop(t *thread) {
	if !p.catch.on {
		p.resumeThread(t) // a stop asked for before catching went off
		return
	}
	kind, nr, ok := syscallInfo(t.tid)
	if kind == SyscallEntry && t.skipEntry == nr+1 {
		t.skipEntry = 0 // gdb heard of this entry before the rewind
		p.resumeThread(t)
		return
	}
	if !ok || !p.catch.caught(nr) {
		p.resumeThread(t)
		return
	}
	t.atSyscallEntry = kind == SyscallEntry
	p.queue(StopEvent{Kind: SignalStop, Tid: t.tid, Signal: int(unix.SIGTRAP), Syscall: kind, SyscallNr: nr})
}

// syscallInfo returns which side of a syscall tid's syscall stop is and
// the syscall's number (orig_rax, which the exit stop keeps too).
func syscallInfo(tid int) (SyscallStop, int, bool) {
	var info [88]byte // struct ptrace_syscall_info
	if err := ptracePtr(unix.PTRACE_GET_SYSCALL_INFO, tid, uintptr(len(info)), unsafe.Pointer(&info[0])); err != nil {
		return NoSyscall, 0, false
	}
	var kind SyscallStop
	switch info[0] {
	case unix.PTRACE_SYSCALL_INFO_ENTRY:
		kind = SyscallEntry
	case unix.PTRACE_SYSCALL_INFO_EXIT:
		kind = SyscallReturn
	default:
		return NoSyscall, 0, false // a seccomp stop, or none
	}
	var regs unix.PtraceRegs
	if err := unix.PtraceGetRegs(tid, &regs); err != nil {
		return NoSyscall, 0, false
	}
	nr, err := syscallNr(tid, &regs)
	if err != nil {
		return NoSyscall, 0, false
	}
	return kind, nr, true
}
