// Package amd64 runs x86-64 instructions out of line for the trap
// installer (displace.Insn):
//
//   - relative branches (jmp, jcc, call rel32, loop, jrcxz) are emulated
//     from the saved registers, since their target depends on where they
//     run;
//   - endbr64 and nop are skipped; push reg, mov %rsp,%rbp, pop reg and
//     ret are emulated too (the usual first and last instructions of a
//     function);
//   - every other instruction is copied to a slot within ±2 GB, its
//     rip-relative displacement re-encoded for the new address, followed
//     by a jmp back; after one single-step the pc (and, for an indirect
//     call, the pushed return address) is moved back to the original
//     code.
//
// VEX/EVEX-encoded instructions are refused: x86asm v0.32 misses their
// rip-relative operands and some of their lengths.
package amd64

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/arch/x86/x86asm"

	"gotpstub/tdesc"
	"gotpstub/trapfallback/displace"
)

// ISA describes x86-64 to the trap installer.
var ISA = displace.ISA{
	MaxInsnLen: maxInsnLen,
	SlotSize:   slotSize,
	Reach:      1<<31 - 4096,
	Analyse:    Analyse,
}

// maxInsnLen is the longest x86-64 instruction.
const maxInsnLen = 15

// slotSize holds one relocated instruction (at most 15 bytes) and the
// 5-byte jump back after it.
const slotSize = 32

// Analyse decodes the instruction at addr and decides how to displace it.
func Analyse(addr uint64, code []byte) (displace.Insn, error) {
	if len(code) == 0 {
		return nil, fmt.Errorf("%w: no bytes", displace.ErrUnsupported)
	}
	d, err := analyse(addr, code)
	if err != nil {
		return nil, err
	}
	d.addr = addr
	if d.orig == nil {
		d.orig = append([]byte(nil), code[:d.length]...)
	}
	return &d, nil
}

type stepKind int

const (
	copyAndStep stepKind = iota
	skip
	emulateBranch
	emulateSimple // push reg, mov %rsp,%rbp
)

// how maps a stepKind to the installer's.
var how = [...]displace.How{copyAndStep: displace.CopyAndStep, skip: displace.Skip, emulateBranch: displace.Emulate, emulateSimple: displace.Emulate}

// displaced describes how to execute one instruction out of line.
type displaced struct {
	kind         stepKind
	length       int
	orig         []byte
	relocated    []byte // copyAndStep: the bytes relocate made for its slot
	indirectCall bool
	addr         uint64
	hasPCRel     bool
	pcRelOff     int

	// emulateBranch, emulateSimple
	reg     int // emulateSimple: the register of push reg or pop reg
	branch  branchKind
	cond    byte // jcc condition code (low nibble of the opcode)
	target  uint64
	nextIns uint64
}

type branchKind int

const (
	brJmp branchKind = iota
	brJcc
	brCall
	brLoop      // e2
	brLoope     // e1
	brLoopne    // e0
	brJrcxz     // e3
	brPush      // push reg (emulateSimple)
	brMovRspRbp // mov %rsp,%rbp (emulateSimple)
	brRet       // ret (emulateSimple)
	brPop       // pop reg (emulateSimple)
)

// x86RegToGDB maps the 3-bit x86 register encoding to GDB's amd64
// register numbers (rax rbx rcx rdx rsi rdi rbp rsp).
var x86RegToGDB = [8]int{tdesc.RAX, tdesc.RCX, tdesc.RDX, tdesc.RBX, tdesc.RSP, tdesc.RBP, tdesc.RSI, tdesc.RDI}

// pushInsn recognises push r64 (50+r, optionally REX.B for r8-r15) and
// returns its length and the GDB number of the pushed register.
func pushInsn(code []byte) (n, reg int, ok bool) {
	return regInsn(code, 0x50)
}

// popInsn recognises pop r64 (58+r, optionally REX.B) like pushInsn.
func popInsn(code []byte) (n, reg int, ok bool) {
	return regInsn(code, 0x58)
}

// regInsn recognises the one-byte-opcode instruction op+r (push or pop
// r64, optionally REX.B for r8-r15).
func regInsn(code []byte, op byte) (n, reg int, ok bool) {
	switch {
	case len(code) >= 1 && code[0] >= op && code[0] <= op+7:
		return 1, x86RegToGDB[code[0]-op], true
	case len(code) >= 2 && code[0] == 0x41 && code[1] >= op && code[1] <= op+7:
		return 2, 8 + int(code[1]-op), true
	}
	return 0, 0, false
}

// analyse decodes the instruction at addr and decides how to displace it.
func analyse(addr uint64, code []byte) (displaced, error) {
	var d displaced
	// endbr64/endbr32: x86asm v0.32 mis-decodes them as one byte.
	if len(code) >= 4 && code[0] == 0xf3 && code[1] == 0x0f && code[2] == 0x1e && (code[3] == 0xfa || code[3] == 0xfb) {
		d.kind, d.length = skip, 4
		return d, nil
	}
	// The usual function-entry instructions are emulated: no single-step.
	if n, reg, ok := pushInsn(code); ok {
		d.kind, d.length, d.branch, d.reg = emulateSimple, n, brPush, reg
		d.nextIns = addr + uint64(n)
		return d, nil
	}
	if len(code) >= 3 && code[0] == 0x48 && code[1] == 0x89 && code[2] == 0xe5 {
		d.kind, d.length, d.branch = emulateSimple, 3, brMovRspRbp
		d.nextIns = addr + 3
		return d, nil
	}
	if n, reg, ok := popInsn(code); ok {
		d.kind, d.length, d.branch, d.reg = emulateSimple, n, brPop, reg
		d.nextIns = addr + uint64(n)
		return d, nil
	}
	if code[0] == 0xc3 {
		// ret, where a fast tracepoint often falls back to a trap (a
		// lone ret: no jump fits).
		d.kind, d.length, d.branch = emulateSimple, 1, brRet
		d.nextIns = addr + 1
		return d, nil
	}
	// VEX/EVEX-encoded instructions: x86asm misses their rip-relative
	// operands and some lengths; refuse rather than guess.
	if code[0] == 0xc4 || code[0] == 0xc5 || code[0] == 0x62 {
		return d, fmt.Errorf("%w: VEX/EVEX-encoded instruction % x", displace.ErrUnsupported, code[:3])
	}
	inst, err := x86asm.Decode(code, 64)
	if err != nil {
		return d, fmt.Errorf("%w: cannot decode % x: %v", displace.ErrUnsupported, code, err)
	}
	d.length = inst.Len
	d.orig = append([]byte(nil), code[:inst.Len]...)
	next := addr + uint64(inst.Len)
	d.nextIns = next
	switch inst.Op {
	case x86asm.NOP:
		d.kind = skip
		return d, nil
	case x86asm.INT, x86asm.SYSENTER, x86asm.UD1, x86asm.UD2:
		return d, fmt.Errorf("%w: %v", displace.ErrUnsupported, inst.Op)
	}
	if rel, ok := inst.Args[0].(x86asm.Rel); ok {
		d.kind = emulateBranch
		d.target = uint64(int64(next) + int64(rel))
		switch inst.Op {
		case x86asm.JMP:
			d.branch = brJmp
		case x86asm.CALL:
			d.branch = brCall
		case x86asm.LOOP:
			d.branch = brLoop
		case x86asm.LOOPE:
			d.branch = brLoope
		case x86asm.LOOPNE:
			d.branch = brLoopne
		case x86asm.JRCXZ:
			d.branch = brJrcxz
		case x86asm.JECXZ, x86asm.JCXZ:
			return d, fmt.Errorf("%w: %v with address-size prefix", displace.ErrUnsupported, inst.Op)
		default:
			d.branch = brJcc
			op := code[inst.Len-inst.PCRel-1]
			d.cond = op & 0x0f
		}
		return d, nil
	}
	if len(inst.Prefix) > 0 {
		for _, p := range inst.Prefix {
			if p&0xff == 0x67 && (inst.Op == x86asm.LOOP || inst.Op == x86asm.JRCXZ) {
				return d, fmt.Errorf("%w: address-size prefixed %v", displace.ErrUnsupported, inst.Op)
			}
		}
	}
	d.kind = copyAndStep
	switch inst.PCRel {
	case 0:
	case 4:
		d.pcRelOff = inst.PCRelOff
		d.hasPCRel = true
	default:
		return d, fmt.Errorf("%w: %d-byte pc-relative field", displace.ErrUnsupported, inst.PCRel)
	}
	d.indirectCall = inst.Op == x86asm.CALL
	d.addr = addr
	return d, nil
}

// relocate prepares the copy that runs at scratch: a rip-relative
// displacement is re-encoded so it still reaches the same address, and a
// jmp rel32 to the next original instruction follows the copy. The stub
// single-steps the copy only and moves the pc home itself; the jump is for
// a thread the stub's death (package guard) leaves mid-step, running on
// untraced: it falls through the copy, or an indirect call returns after
// it, and jumps home instead of running into the next slot.
func (d *displaced) relocate(scratch uint64) error {
	if d.kind != copyAndStep {
		return fmt.Errorf("%w: % x is not copied", displace.ErrUnsupported, d.orig)
	}
	d.relocated = append(d.relocated[:0], d.orig...)
	if d.hasPCRel {
		old := int64(int32(binary.LittleEndian.Uint32(d.orig[d.pcRelOff:])))
		target := int64(d.addr) + int64(d.length) + old
		disp := target - (int64(scratch) + int64(d.length))
		if disp != int64(int32(disp)) {
			return fmt.Errorf("%w: rip-relative target %#x out of reach of %#x", displace.ErrUnsupported, target, scratch)
		}
		binary.LittleEndian.PutUint32(d.relocated[d.pcRelOff:], uint32(int32(disp)))
	}
	back := int64(d.addr+uint64(d.length)) - (int64(scratch) + int64(d.length) + 5)
	if back != int64(int32(back)) {
		return fmt.Errorf("displaced-step slot %#x out of reach of %#x", scratch, d.addr)
	}
	d.relocated = append(d.relocated, 0xe9)
	d.relocated = binary.LittleEndian.AppendUint32(d.relocated, uint32(int32(back)))
	return nil
}

// How implements displace.Insn.
func (d *displaced) How() displace.How { return how[d.kind] }

// Len implements displace.Insn.
func (d *displaced) Len() int { return d.length }

// Bytes implements displace.Insn.
func (d *displaced) Bytes() []byte { return d.orig }

// Relocate implements displace.Insn.
func (d *displaced) Relocate(slot uint64) ([]byte, error) {
	if err := d.relocate(slot); err != nil {
		return nil, err
	}
	return d.relocated, nil
}

// AfterStep implements displace.Insn: one step runs the copy.
func (d *displaced) AfterStep(regs *tdesc.Regs, mem displace.Memory, slot uint64, _ int) (bool, error) {
	next := d.addr + uint64(d.length)
	pc := regs.Uint64(tdesc.RIP)
	if pc == slot+uint64(d.length) {
		pc = next // fell through
	}
	if d.indirectCall {
		// The call pushed the copy's return address: point it home.
		var ret [8]byte
		binary.LittleEndian.PutUint64(ret[:], next)
		if err := mem.WriteMemory(regs.Uint64(tdesc.RSP), ret[:]); err != nil {
			return false, fmt.Errorf("fixing the return address: %w", err)
		}
	}
	return true, regs.SetUint64(tdesc.RIP, pc)
}
