package amd64

import (
	"encoding/binary"
	"fmt"
	"io"

	"gotpstub/tdesc"
	"gotpstub/trapfallback/displace"
)

// eflags bits used by conditional branches.
const (
	flagCF = 1 << 0
	flagPF = 1 << 2
	flagZF = 1 << 6
	flagSF = 1 << 7
	flagOF = 1 << 11
)

// conditionHolds evaluates an x86 condition code (the low nibble of a
// jcc opcode) against eflags.
func conditionHolds(cc byte, flags uint64) bool {
	cf := flags&flagCF != 0
	pf := flags&flagPF != 0
	zf := flags&flagZF != 0
	sf := flags&flagSF != 0
	of := flags&flagOF != 0
	var r bool
	switch cc >> 1 {
	case 0:
		r = of
	case 1:
		r = cf
	case 2:
		r = zf
	case 3:
		r = cf || zf
	case 4:
		r = sf
	case 5:
		r = pf
	case 6:
		r = sf != of
	case 7:
		r = zf || sf != of
	}
	if cc&1 != 0 {
		return !r
	}
	return r
}

// Emulate implements displace.Insn: it executes a relative branch, or one of the simple instructions
// analyse picks (push reg, mov %rsp,%rbp, pop reg, ret), on the saved
// registers of st.
func (d *displaced) Emulate(regs *tdesc.Regs, st displace.Memory) error {
	pc := d.nextIns
	flags := regs.Uint64(tdesc.EFLAGS)
	switch d.branch {
	case brJmp:
		pc = d.target
	case brJcc:
		if conditionHolds(d.cond, flags) {
			pc = d.target
		}
	case brJrcxz:
		if regs.Uint64(tdesc.RCX) == 0 {
			pc = d.target
		}
	case brLoop, brLoope, brLoopne:
		rcx := regs.Uint64(tdesc.RCX) - 1
		var v [8]byte
		binary.LittleEndian.PutUint64(v[:], rcx)
		if err := regs.Set(tdesc.RCX, v[:]); err != nil {
			return err
		}
		taken := rcx != 0
		if d.branch == brLoope {
			taken = taken && flags&flagZF != 0
		} else if d.branch == brLoopne {
			taken = taken && flags&flagZF == 0
		}
		if taken {
			pc = d.target
		}
	case brPush:
		sp := regs.Uint64(tdesc.RSP) - 8
		var v [8]byte
		binary.LittleEndian.PutUint64(v[:], regs.Uint64(d.reg)) // push rsp pushes the old value
		if err := st.WriteMemory(sp, v[:]); err != nil {
			return fmt.Errorf("emulating push: %w", err)
		}
		binary.LittleEndian.PutUint64(v[:], sp)
		if err := regs.Set(tdesc.RSP, v[:]); err != nil {
			return err
		}
	case brMovRspRbp:
		if err := regs.Set(tdesc.RBP, regs.Get(tdesc.RSP)); err != nil {
			return err
		}
	case brPop:
		v, err := popStack(st, regs)
		if err != nil {
			return fmt.Errorf("emulating pop: %w", err)
		}
		// pop %rsp loads rsp last: the popped value wins.
		if err := regs.Set(d.reg, v[:]); err != nil {
			return err
		}
	case brRet:
		v, err := popStack(st, regs)
		if err != nil {
			return fmt.Errorf("emulating ret: %w", err)
		}
		pc = binary.LittleEndian.Uint64(v[:])
	case brCall:
		sp := regs.Uint64(tdesc.RSP) - 8
		var ret [8]byte
		binary.LittleEndian.PutUint64(ret[:], d.nextIns)
		if err := st.WriteMemory(sp, ret[:]); err != nil {
			return fmt.Errorf("emulating call: pushing the return address: %w", err)
		}
		var v [8]byte
		binary.LittleEndian.PutUint64(v[:], sp)
		if err := regs.Set(tdesc.RSP, v[:]); err != nil {
			return err
		}
		pc = d.target
	}
	return regs.SetUint64(tdesc.RIP, pc)
}

// popStack reads the quadword at rsp and moves rsp past it (pop, ret).
func popStack(st displace.Memory, regs *tdesc.Regs) ([8]byte, error) {
	var v [8]byte
	sp := regs.Uint64(tdesc.RSP)
	if n, err := st.ReadMemory(sp, v[:]); n != len(v) {
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return v, fmt.Errorf("reading the stack at %#x: %w", sp, err)
	}
	var newSP [8]byte
	binary.LittleEndian.PutUint64(newSP[:], sp+8)
	return v, regs.Set(tdesc.RSP, newSP[:])
}
