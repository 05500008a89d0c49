package inferior

import (
	"errors"
	"fmt"

	"gotpstub/tdesc"
)

// hostLayout is the register layout of processes on this machine
// (tdesc.Host: on amd64 with the AVX upper halves when the CPU and
// kernel support AVX).
func hostLayout() *tdesc.Layout { return tdesc.Host() }

// Registers reads every register of a stopped thread.
func (p *Process) Registers(tid int) (*tdesc.Regs, error) {
	var r *tdesc.Regs
	err := p.do(func() error {
		if _, err := p.stoppedThread(tid); err != nil {
			return fmt.Errorf("registers: %w", err)
		}
		var err error
		r, err = p.getRegs(tid)
		return err
	})
	return r, err
}

// SetRegisters writes the registers of r marked valid into a stopped
// thread.
func (p *Process) SetRegisters(tid int, r *tdesc.Regs) error {
	return p.do(func() error {
		if _, err := p.stoppedThread(tid); err != nil {
			return fmt.Errorf("set registers: %w", err)
		}
		return p.setRegs(tid, r)
	})
}

// ThreadPointer returns a stopped thread's thread pointer (fs_base on
// x86-64, tpidr_el0 on arm64), what its TLS addresses are relative to.
func (p *Process) ThreadPointer(tid int) (uint64, error) {
	var tp uint64
	err := p.do(func() error {
		if _, err := p.stoppedThread(tid); err != nil {
			return fmt.Errorf("thread pointer: %w", err)
		}
		var err error
		if tp, err = threadPointer(tid); err != nil {
			return fmt.Errorf("thread pointer of %d: %w", tid, err)
		}
		return nil
	})
	return tp, err
}

// PC reads a stopped thread's program counter alone, cheaper than
// Registers (a range step checks it at every instruction).
func (p *Process) PC(tid int) (uint64, error) {
	var pc uint64
	err := p.do(func() error {
		if _, err := p.stoppedThread(tid); err != nil {
			return fmt.Errorf("pc: %w", err)
		}
		var err error
		if pc, err = getPC(tid); err != nil {
			return fmt.Errorf("pc of %d: %w", tid, err)
		}
		return nil
	})
	return pc, err
}

// setRegs writes the valid registers of r into a stopped thread, touching
// only the register sets whose values differ.
func (p *Process) setRegs(tid int, r *tdesc.Regs) error {
	if r == nil || r.Layout == nil || len(r.Data) < r.Layout.Size {
		return errors.New("setting registers: malformed register set")
	}
	cur, ur, err := p.getRegsRaw(tid)
	if err != nil {
		return err
	}
	_, err = p.writeChangedRegs(tid, cur, ur, r)
	return err
}
