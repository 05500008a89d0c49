package inferior

import (
	"encoding/binary"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// parkedChild is what a fork child handed over between tracers had
// before it was parked: its registers, and the two stack words the
// parking used for signal masks (below its red zone).
type parkedChild struct {
	regs      unix.PtraceRegs
	gadget    uint64 // a syscall instruction in its vDSO
	maskAddr  uint64 // the new mask's word; the old mask is the next
	stackWord [16]byte
}

const sigSetmask = 2 // rt_sigprocmask's SIG_SETMASK

// parkForHandOver readies held fork child pid, in a ptrace-stop, to be
// detached: every signal blocked (rt_sigprocmask run in it, the old mask
// kept on its stack), then run into pause's syscall-entry stop, where it
// is to be detached (pauseSyscall). Signals sent while no tracer has it stay pending,
// however they would act: a signal with a fatal default action that is
// not blocked kills a process as soon as it is sent. It returns the
// signals that were already due to the child (suppressed here, for the
// new Process to report).
func parkForHandOver(pid int) (parkedChild, []int, error) {
	var c parkedChild
	if err := unix.PtraceGetRegs(pid, &c.regs); err != nil {
		return c, nil, fmt.Errorf("reading registers: %w", err)
	}
	mem, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", pid), os.O_RDWR, 0)
	if err != nil {
		return c, nil, err
	}
	defer mem.Close()
	gadget, err := gadgetOf(pid, mem)
	if err != nil {
		return c, nil, err
	}
	c.gadget = gadget
	c.maskAddr = (stackPointer(&c.regs) - redZone - 64) &^ 7
	if _, err := mem.ReadAt(c.stackWord[:], int64(c.maskAddr)); err != nil {
		return c, nil, fmt.Errorf("reading its stack: %w", err)
	}
	var all [8]byte
	binary.LittleEndian.PutUint64(all[:], ^uint64(0))
	if _, err := mem.WriteAt(all[:], int64(c.maskAddr)); err != nil {
		return c, nil, fmt.Errorf("writing its stack: %w", err)
	}
	pending, err := c.runSyscall(pid, unix.SYS_RT_SIGPROCMASK, true, sigSetmask, c.maskAddr, c.maskAddr+8, 8)
	if err != nil {
		c.undo(pid, false)
		return c, pending, fmt.Errorf("blocking its signals: %w", err)
	}
	more, err := c.runSyscall(pid, pauseSyscall.nr, false, pauseSyscall.args...)
	if err != nil {
		c.undo(pid, true)
	}
	return c, append(pending, more...), err
}

// undo gives a child whose parking failed back what it had, as far as it
// can (masked: its signal mask was changed already), so that it stays
// held as it was.
func (c parkedChild) undo(pid int, masked bool) {
	if masked {
		_ = c.restore(pid)
		return
	}
	_ = c.restoreMemory(pid)
	regs := c.regs
	_ = unix.PtraceSetRegs(pid, &regs)
}

// runSyscall makes stopped child pid run system call nr at the gadget,
// to its exit stop (or, with toExit false, to its entry stop only).
// Signals that stop it first are suppressed and returned.
func (c parkedChild) runSyscall(pid int, nr uint64, toExit bool, args ...uint64) ([]int, error) {
	regs := c.regs
	regs.SetPC(c.gadget)
	setSyscall(&regs, nr, args)
	if err := unix.PtraceSetRegs(pid, &regs); err != nil {
		return nil, fmt.Errorf("setting registers: %w", err)
	}
	var pending []int
	stops := 1
	if toExit {
		stops = 2
	}
	for stops > 0 {
		if err := ptraceRaw(unix.PTRACE_SYSCALL, pid, 0, 0); err != nil {
			return pending, err
		}
		_, ws, err := wait4(pid, 0)
		switch {
		case err != nil:
			return pending, err
		case ws.Exited() || ws.Signaled():
			return pending, ErrExited
		case !ws.Stopped():
		case ws.StopSignal() == unix.SIGTRAP|0x80:
			stops--
		case ws.TrapCause() == 0 && ws.StopSignal() != unix.SIGSTOP:
			pending = append(pending, int(ws.StopSignal()))
		}
	}
	return pending, nil
}

// restore gives the child, attached again and stopped, what it had
// before it was parked: its signal mask (run in it, still blocking
// everything until the call returns: a signal that came meanwhile is
// delivered once it runs on), its stack words and its registers.
func (c parkedChild) restore(pid int) error {
	if _, err := c.runSyscall(pid, unix.SYS_RT_SIGPROCMASK, true, sigSetmask, c.maskAddr+8, 0, 8); err != nil {
		return fmt.Errorf("restoring the signal mask of %d: %w", pid, err)
	}
	if err := c.restoreMemory(pid); err != nil {
		return err
	}
	regs := c.regs
	if err := unix.PtraceSetRegs(pid, &regs); err != nil {
		return fmt.Errorf("restoring the registers of %d: %w", pid, err)
	}
	return nil
}

// restoreMemory puts back the stack words the parking used.
func (c parkedChild) restoreMemory(pid int) error {
	mem, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", pid), os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer mem.Close()
	if _, err := mem.WriteAt(c.stackWord[:], int64(c.maskAddr)); err != nil {
		return fmt.Errorf("restoring the stack of %d: %w", pid, err)
	}
	return nil
}
