package inferior

import (
	"encoding/binary"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// parkedChild is what a fork child handed over between tracers had
// before it was parked: its registers and the stack word the parking
// used for its signal mask.
type parkedChild struct {
	regs     unix.PtraceRegs
	maskAddr uint64
	maskWord [8]byte
}

// parkForHandOver makes held fork child pid, in a ptrace-stop, wait in
// rt_sigsuspend with every signal blocked once it is detached: rip at a
// syscall instruction of its vDSO, the mask in a stack word below its red
// zone (the word is saved and put back by restore).
func parkForHandOver(pid int) (parkedChild, error) {
	var c parkedChild
	if err := unix.PtraceGetRegs(pid, &c.regs); err != nil {
		return c, fmt.Errorf("reading registers: %w", err)
	}
	gadget, err := gadgetOf(pid)
	if err != nil {
		return c, err
	}
	c.maskAddr = (c.regs.Rsp - 128 - 64) &^ 7
	mem, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", pid), os.O_RDWR, 0)
	if err != nil {
		return c, err
	}
	defer mem.Close()
	if _, err := mem.ReadAt(c.maskWord[:], int64(c.maskAddr)); err != nil {
		return c, fmt.Errorf("reading its stack: %w", err)
	}
	var all [8]byte
	binary.LittleEndian.PutUint64(all[:], ^uint64(0))
	if _, err := mem.WriteAt(all[:], int64(c.maskAddr)); err != nil {
		return c, fmt.Errorf("writing its stack: %w", err)
	}
	regs := c.regs
	regs.Rip = gadget
	regs.Rax = unix.SYS_RT_SIGSUSPEND
	regs.Orig_rax = ^uint64(0)
	regs.Rdi = c.maskAddr
	regs.Rsi = 8
	if err := unix.PtraceSetRegs(pid, &regs); err != nil {
		_, _ = mem.WriteAt(c.maskWord[:], int64(c.maskAddr))
		return c, fmt.Errorf("setting registers: %w", err)
	}
	return c, nil
}

// restore gives the child, attached again and stopped, what it had
// before it was parked.
func (c parkedChild) restore(pid int) error {
	mem, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", pid), os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer mem.Close()
	if _, err := mem.WriteAt(c.maskWord[:], int64(c.maskAddr)); err != nil {
		return fmt.Errorf("restoring the stack of %d: %w", pid, err)
	}
	regs := c.regs
	if err := unix.PtraceSetRegs(pid, &regs); err != nil {
		return fmt.Errorf("restoring the registers of %d: %w", pid, err)
	}
	return nil
}
