package inferior

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Raw ptrace requests the x/sys wrappers do not cover (a signal argument,
// register sets, peek/poke of single words).

func ptraceRaw(req int, tid int, addr, data uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, uintptr(req), uintptr(tid), addr, data, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// ptracePtr is ptraceRaw with a pointer argument, converted inside the
// syscall expression so the object stays alive and is never moved.
func ptracePtr(req int, tid int, addr uintptr, data unsafe.Pointer) error {
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, uintptr(req), uintptr(tid), addr, uintptr(data), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// ptraceCont resumes tid, delivering sig (0 for none).
func ptraceCont(tid, sig int) error { return ptraceRaw(unix.PTRACE_CONT, tid, 0, uintptr(sig)) }

// ptraceStep single-steps tid, delivering sig (0 for none).
func ptraceStep(tid, sig int) error {
	return ptraceRaw(unix.PTRACE_SINGLESTEP, tid, 0, uintptr(sig))
}

// ptraceDetach detaches tid, delivering sig (0 for none).
func ptraceDetach(tid, sig int) error {
	return ptraceRaw(unix.PTRACE_DETACH, tid, 0, uintptr(sig))
}

// peekUser reads one word of tid's struct user.
func peekUser(tid int, off uintptr) (uint64, error) {
	var v uint64
	err := ptracePtr(unix.PTRACE_PEEKUSR, tid, off, unsafe.Pointer(&v))
	return v, err
}

// pokeUser writes one word of tid's struct user.
func pokeUser(tid int, off uintptr, v uint64) error {
	return ptraceRaw(unix.PTRACE_POKEUSR, tid, off, uintptr(v))
}

// getRegset reads register set nt into buf and returns how many bytes the
// kernel filled.
func getRegset(tid int, nt int, buf []byte) (int, error) {
	iov := unix.Iovec{Base: &buf[0]}
	iov.SetLen(len(buf))
	if err := ptracePtr(unix.PTRACE_GETREGSET, tid, uintptr(nt), unsafe.Pointer(&iov)); err != nil {
		return 0, err
	}
	return int(iov.Len), nil
}

// setRegset writes register set nt from buf.
func setRegset(tid int, nt int, buf []byte) error {
	iov := unix.Iovec{Base: &buf[0]}
	iov.SetLen(len(buf))
	return ptracePtr(unix.PTRACE_SETREGSET, tid, uintptr(nt), unsafe.Pointer(&iov))
}

// siginfo is the part of siginfo_t we look at.
type siginfo struct {
	Signo int32
	Errno int32
	Code  int32
	_     int32
	Addr  uint64    // si_addr for SIGTRAP/SIGSEGV
	_     [104]byte // the rest of the 128-byte siginfo_t
}

// softwareBreakpoint reports whether the SIGTRAP si describes came from
// a software breakpoint instruction (int3 on x86-64, brk on arm64).
func (si siginfo) softwareBreakpoint() bool {
	return si.Code == siKernel || si.Code == trapBrkpt
}

// Signal codes in si_code.
const (
	siKernel   = 0x80 // SI_KERNEL: int3 on x86
	trapBrkpt  = 1    // TRAP_BRKPT
	trapTrace  = 2    // TRAP_TRACE: single-step
	trapHwbkpt = 4    // TRAP_HWBKPT: debug register hit
	siUser     = 0    // SI_USER: kill()
	siTkill    = -6   // SI_TKILL: tgkill()
)

func getSiginfo(tid int) (siginfo, error) {
	var si siginfo
	err := ptracePtr(unix.PTRACE_GETSIGINFO, tid, 0, unsafe.Pointer(&si))
	return si, err
}

// wait4 waits for a tracee of this thread (__WALL|__WNOTHREAD), retrying
// on EINTR.
func wait4(pid int, opts int) (int, unix.WaitStatus, error) {
	for {
		var ws unix.WaitStatus
		wpid, err := unix.Wait4(pid, &ws, opts|unix.WALL|unix.WNOTHREAD, nil)
		if err == unix.EINTR {
			continue
		}
		return wpid, ws, err
	}
}

// personality sets the calling thread's execution domain and returns the
// previous one (persona 0xffffffff only queries).
func personality(persona uint64) (uint64, error) {
	r, _, e := unix.Syscall(unix.SYS_PERSONALITY, uintptr(persona), 0, 0)
	if e != 0 {
		return 0, e
	}
	return uint64(r), nil
}

// addrNoRandomize is the ADDR_NO_RANDOMIZE personality flag.
const addrNoRandomize = 0x0040000

// Siginfo returns the raw siginfo_t (128 bytes, the host layout gdb's
// qXfer:siginfo:read serves) of the signal that stopped thread tid.
func (p *Process) Siginfo(tid int) ([]byte, error) {
	var out []byte
	err := p.do(func() error {
		t, err := p.stoppedThread(tid)
		if err != nil {
			return fmt.Errorf("siginfo: %w", err)
		}
		si, ok := p.reportedSiginfo(t)
		if !ok {
			// The thread is still in the stop gdb heard of.
			si, err = getSiginfo(tid)
			if err != nil {
				return fmt.Errorf("siginfo of %d: %w", tid, err)
			}
		}
		if t.interrupted {
			// Interrupt used SIGSTOP and reported SIGINT: show what
			// gdbserver's kill(SIGINT) would have left.
			si.Signo, si.Code = int32(unix.SIGINT), siUser
		}
		out = make([]byte, unsafe.Sizeof(si))
		copy(out, unsafe.Slice((*byte)(unsafe.Pointer(&si)), unsafe.Sizeof(si)))
		return nil
	})
	return out, err
}
