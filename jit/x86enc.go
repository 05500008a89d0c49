package jit

import (
	"encoding/binary"
	"fmt"
)

// This file is a tiny hand-written x86-64 encoder: exactly the instructions the
// amd64 backend emits and nothing more. Every function is checked in
// x86enc_test.go by decoding its output with golang.org/x/arch/x86/x86asm.

// gpr is an x86-64 general-purpose register number as used in ModRM/REX.
type gpr uint8

// The sixteen general-purpose registers in hardware encoding order.
const (
	rAX gpr = iota
	rCX
	rDX
	rBX
	rSP
	rBP
	rSI
	rDI
	r8
	r9
	r10
	r11
	r12
	r13
	r14
	r15
)

// mem is a memory operand [base + index*scale + disp]; index < 0 means none.
type mem struct {
	base  gpr
	index int // -1: no index register
	scale uint8
	disp  int32
}

// at returns the operand [base+disp].
func at(base gpr, disp int32) mem { return mem{base: base, index: -1, scale: 1, disp: disp} }

// cond is an x86 condition code (the low nibble of Jcc/SETcc).
type cond uint8

// Condition codes used by the backend.
const (
	condB  cond = 0x2 // unsigned <
	condAE cond = 0x3 // unsigned >=
	condE  cond = 0x4
	condNE cond = 0x5
	condBE cond = 0x6 // unsigned <=
	condA  cond = 0x7 // unsigned >
	condLE cond = 0xe // signed <=
	condL  cond = 0xc // signed <
	condGE cond = 0xd
	condG  cond = 0xf // signed >
)

// aluOp selects the operation of the classic two-operand ALU group.
type aluOp uint8

// ALU group operations; the value is the /digit of the 0x81/0x83 forms, and
// value*8+1 is the "r/m64, r64" opcode.
const (
	aluAdd aluOp = 0
	aluOr  aluOp = 1
	aluAnd aluOp = 4
	aluSub aluOp = 5
	aluXor aluOp = 6
	aluCmp aluOp = 7
)

// shiftOp selects the /digit of the shift group (0xC1, 0xD3).
type shiftOp uint8

// Shift group operations.
const (
	shiftShl shiftOp = 4
	shiftShr shiftOp = 5
	shiftSar shiftOp = 7
)

// asm accumulates machine code.
type asm struct {
	buf []byte
}

func (a *asm) pos() int        { return len(a.buf) }
func (a *asm) byte1(b ...byte) { a.buf = append(a.buf, b...) }
func (a *asm) imm16(v uint16)  { a.buf = binary.LittleEndian.AppendUint16(a.buf, v) }
func (a *asm) imm32(v uint32)  { a.buf = binary.LittleEndian.AppendUint32(a.buf, v) }
func (a *asm) imm64(v uint64)  { a.buf = binary.LittleEndian.AppendUint64(a.buf, v) }

// rex emits a REX prefix when needed. w: 64-bit operand; reg, index, base:
// the registers whose high bit goes into R, X, B. force emits a REX even if
// it would be 0x40 (needed for byte registers spl/bpl/sil/dil).
func (a *asm) rex(w bool, reg, index, base gpr, force bool) {
	var r byte = 0x40
	if w {
		r |= 8
	}
	if reg&8 != 0 {
		r |= 4
	}
	if index&8 != 0 {
		r |= 2
	}
	if base&8 != 0 {
		r |= 1
	}
	if r != 0x40 || force {
		a.byte1(r)
	}
}

// modrmReg emits ModRM for a register-direct operand.
func (a *asm) modrmReg(reg, rm gpr) { a.byte1(0xc0 | byte(reg&7)<<3 | byte(rm&7)) }

// modrmMem emits ModRM (+SIB, +displacement) for a memory operand.
func (a *asm) modrmMem(reg gpr, m mem) {
	r := byte(reg&7) << 3
	var mod byte
	switch {
	case m.disp == 0 && m.base&7 != rBP:
		mod = 0
	case m.disp >= -128 && m.disp <= 127:
		mod = 1
	default:
		mod = 2
	}
	if m.index >= 0 || m.base&7 == rSP {
		a.byte1(mod<<6 | r | 4)
		idx := byte(4) // none
		if m.index >= 0 {
			idx = byte(m.index & 7)
		}
		var ss byte
		switch m.scale {
		case 2:
			ss = 1
		case 4:
			ss = 2
		case 8:
			ss = 3
		}
		a.byte1(ss<<6 | idx<<3 | byte(m.base&7))
	} else {
		a.byte1(mod<<6 | r | byte(m.base&7))
	}
	switch mod {
	case 1:
		a.byte1(byte(int8(m.disp)))
	case 2:
		a.imm32(uint32(m.disp))
	}
}

func memIndex(m mem) gpr {
	if m.index < 0 {
		return 0
	}
	return gpr(m.index)
}

// opRM emits [REX.W] opcode ModRM for "op r64, r/m64 (memory)".
func (a *asm) opMem(w bool, op []byte, reg gpr, m mem, forceRex bool) {
	a.rex(w, reg, memIndex(m), m.base, forceRex)
	a.byte1(op...)
	a.modrmMem(reg, m)
}

// opReg emits [REX] opcode ModRM for a register-direct r/m operand.
func (a *asm) opReg(w bool, op []byte, reg, rm gpr, forceRex bool) {
	a.rex(w, reg, 0, rm, forceRex)
	a.byte1(op...)
	a.modrmReg(reg, rm)
}

// push emits PUSH r64.
func (a *asm) push(r gpr) {
	a.rex(false, 0, 0, r, false)
	a.byte1(0x50 + byte(r&7))
}

// pop emits POP r64.
func (a *asm) pop(r gpr) {
	a.rex(false, 0, 0, r, false)
	a.byte1(0x58 + byte(r&7))
}

// movRR emits MOV dst, src (64-bit).
func (a *asm) movRR(dst, src gpr) { a.opReg(true, []byte{0x89}, src, dst, false) }

// movRR32 emits MOV dst32, src32 (zero-extends into the full register).
func (a *asm) movRR32(dst, src gpr) { a.opReg(false, []byte{0x89}, src, dst, false) }

// load64 emits MOV dst, qword [m].
func (a *asm) load64(dst gpr, m mem) { a.opMem(true, []byte{0x8b}, dst, m, false) }

// store64 emits MOV qword [m], src.
func (a *asm) store64(m mem, src gpr) { a.opMem(true, []byte{0x89}, src, m, false) }

// store32 emits MOV dword [m], src32.
func (a *asm) store32(m mem, src gpr) { a.opMem(false, []byte{0x89}, src, m, false) }

// store16 emits MOV word [m], src16.
func (a *asm) store16(m mem, src gpr) {
	a.byte1(0x66)
	a.opMem(false, []byte{0x89}, src, m, false)
}

// store8 emits MOV byte [m], src8 (spl..dil need a REX prefix).
func (a *asm) store8(m mem, src gpr) { a.opMem(false, []byte{0x88}, src, m, src >= 4) }

// store8Imm emits MOV byte [m], imm8.
func (a *asm) store8Imm(m mem, v byte) {
	a.opMem(false, []byte{0xc6}, 0, m, false)
	a.byte1(v)
}

// loadZX emits a zero-extending load of size bytes (1, 2, 4 or 8) into dst.
func (a *asm) loadZX(dst gpr, m mem, size int) {
	switch size {
	case 1:
		a.opMem(false, []byte{0x0f, 0xb6}, dst, m, false)
	case 2:
		a.opMem(false, []byte{0x0f, 0xb7}, dst, m, false)
	case 4:
		a.opMem(false, []byte{0x8b}, dst, m, false)
	case 8:
		a.load64(dst, m)
	default:
		panic(fmt.Sprintf("jit: loadZX size %d", size))
	}
}

// lea emits LEA dst, [m].
func (a *asm) lea(dst gpr, m mem) { a.opMem(true, []byte{0x8d}, dst, m, false) }

// movImm loads a 64-bit constant into dst with the shortest encoding.
func (a *asm) movImm(dst gpr, v uint64) {
	switch {
	case v == 0:
		a.aluRR32(aluXor, dst, dst)
	case v <= 0xffffffff:
		a.rex(false, 0, 0, dst, false)
		a.byte1(0xb8 + byte(dst&7))
		a.imm32(uint32(v))
	case int64(v) >= -1<<31 && int64(v) < 1<<31:
		a.opReg(true, []byte{0xc7}, 0, dst, false)
		a.imm32(uint32(v))
	default:
		a.rex(true, 0, 0, dst, false)
		a.byte1(0xb8 + byte(dst&7))
		a.imm64(v)
	}
}

// aluRR emits "op dst, src" on 64-bit registers.
func (a *asm) aluRR(op aluOp, dst, src gpr) { a.opReg(true, []byte{byte(op)<<3 | 1}, src, dst, false) }

// aluRR32 emits "op dst32, src32".
func (a *asm) aluRR32(op aluOp, dst, src gpr) {
	a.opReg(false, []byte{byte(op)<<3 | 1}, src, dst, false)
}

// aluRM emits "op dst, qword [m]".
func (a *asm) aluRM(op aluOp, dst gpr, m mem) { a.opMem(true, []byte{byte(op)<<3 | 3}, dst, m, false) }

// aluRI emits "op dst, simm32" (64-bit), using the imm8 form when it fits.
func (a *asm) aluRI(op aluOp, dst gpr, v int32) {
	if v >= -128 && v <= 127 {
		a.opReg(true, []byte{0x83}, gpr(op), dst, false)
		a.byte1(byte(int8(v)))
		return
	}
	a.opReg(true, []byte{0x81}, gpr(op), dst, false)
	a.imm32(uint32(v))
}

// aluMI emits "op qword [m], simm32", using the imm8 form when it fits.
func (a *asm) aluMI(op aluOp, m mem, v int32) {
	if v >= -128 && v <= 127 {
		a.opMem(true, []byte{0x83}, gpr(op), m, false)
		a.byte1(byte(int8(v)))
		return
	}
	a.opMem(true, []byte{0x81}, gpr(op), m, false)
	a.imm32(uint32(v))
}

// testRR emits TEST a, b (64-bit).
func (a *asm) testRR(x, y gpr) { a.opReg(true, []byte{0x85}, y, x, false) }

// imulRR emits IMUL dst, src (64-bit, low half).
func (a *asm) imulRR(dst, src gpr) { a.opReg(true, []byte{0x0f, 0xaf}, dst, src, false) }

// neg emits NEG r64.
func (a *asm) neg(r gpr) { a.opReg(true, []byte{0xf7}, 3, r, false) }

// not emits NOT r64.
func (a *asm) not(r gpr) { a.opReg(true, []byte{0xf7}, 2, r, false) }

// idiv emits IDIV r64 (signed rdx:rax / r).
func (a *asm) idiv(r gpr) { a.opReg(true, []byte{0xf7}, 7, r, false) }

// div emits DIV r64 (unsigned rdx:rax / r).
func (a *asm) div(r gpr) { a.opReg(true, []byte{0xf7}, 6, r, false) }

// cqo emits CQO (sign-extend rax into rdx).
func (a *asm) cqo() { a.byte1(0x48, 0x99) }

// shiftCL emits "op r64, cl".
func (a *asm) shiftCL(op shiftOp, r gpr) { a.opReg(true, []byte{0xd3}, gpr(op), r, false) }

// shiftImm emits "op r64, imm8".
func (a *asm) shiftImm(op shiftOp, r gpr, n uint8) {
	a.opReg(true, []byte{0xc1}, gpr(op), r, false)
	a.byte1(n)
}

// setcc emits SETcc r8 (REX forced so that encodings 4-7 mean spl..dil).
func (a *asm) setcc(c cond, r gpr) { a.opReg(false, []byte{0x0f, 0x90 | byte(c)}, 0, r, r >= 4) }

// movzxRR8 emits MOVZX dst32, src8.
func (a *asm) movzxRR8(dst, src gpr) { a.opReg(false, []byte{0x0f, 0xb6}, dst, src, src >= 4) }

// cmovcc emits CMOVcc dst, src (64-bit).
func (a *asm) cmovcc(c cond, dst, src gpr) {
	a.opReg(true, []byte{0x0f, 0x40 | byte(c)}, dst, src, false)
}

// syscall emits SYSCALL.
func (a *asm) syscall() { a.byte1(0x0f, 0x05) }

// ret emits RET.
func (a *asm) ret() { a.byte1(0xc3) }

// jmp32 emits JMP rel32 and returns the offset of the rel32 field.
func (a *asm) jmp32() int {
	a.byte1(0xe9)
	a.imm32(0)
	return a.pos() - 4
}

// jcc32 emits Jcc rel32 and returns the offset of the rel32 field.
func (a *asm) jcc32(c cond) int {
	a.byte1(0x0f, 0x80|byte(c))
	a.imm32(0)
	return a.pos() - 4
}

// call32 emits CALL rel32 and returns the offset of the rel32 field.
func (a *asm) call32() int {
	a.byte1(0xe8)
	a.imm32(0)
	return a.pos() - 4
}

// jcc8 emits Jcc rel8 and returns the offset of the rel8 field.
func (a *asm) jcc8(c cond) int {
	a.byte1(0x70|byte(c), 0)
	return a.pos() - 1
}

// jmp8 emits JMP rel8 and returns the offset of the rel8 field.
func (a *asm) jmp8() int {
	a.byte1(0xeb, 0)
	return a.pos() - 1
}

// patch32 makes the rel32 field at field point to target.
func (a *asm) patch32(field, target int) {
	binary.LittleEndian.PutUint32(a.buf[field:], uint32(int32(target-(field+4))))
}

// patch8 makes the rel8 field at field point to target (must be in range).
func (a *asm) patch8(field, target int) {
	d := target - (field + 1)
	if d < -128 || d > 127 {
		panic(fmt.Sprintf("jit: rel8 out of range: %d", d))
	}
	a.buf[field] = byte(int8(d))
}

// here patches a rel8 field to the current position.
func (a *asm) here8(field int) { a.patch8(field, a.pos()) }

// callReg emits CALL r64 (indirect).
func (a *asm) callReg(r gpr) { a.opReg(false, []byte{0xff}, 2, r, false) }

// The forms below are used by the jump pad (pad.go); pad_test.go checks them.

// pushfq emits PUSHFQ.
func (a *asm) pushfq() { a.byte1(0x9c) }

// jrcxz emits JRCXZ rel8 (jump if rcx is 0; flags untouched) and returns
// the offset of the rel8 field.
func (a *asm) jrcxz() int {
	a.byte1(0xe3, 0)
	return a.pos() - 1
}

// sahf emits SAHF (SF ZF AF PF CF from ah).
func (a *asm) sahf() { a.byte1(0x9e) }

// std emits STD.
func (a *asm) std() { a.byte1(0xfd) }

// addALImm emits ADD al, imm8.
func (a *asm) addALImm(v uint8) { a.byte1(0x04, v) }

// cmpxchg emits CMPXCHG qword [m], src without LOCK: atomic for the
// thread (a signal arrives between instructions), not for other CPUs.
func (a *asm) cmpxchg(m mem, src gpr) {
	a.opMem(true, []byte{0x0f, 0xb1}, src, m, false)
}

// popfq emits POPFQ.
func (a *asm) popfq() { a.byte1(0x9d) }

// cld emits CLD.
func (a *asm) cld() { a.byte1(0xfc) }

// int3 emits INT3.
func (a *asm) int3() { a.byte1(0xcc) }

// repMovsq emits REP MOVSQ (copies rcx qwords from [rsi] to [rdi]).
func (a *asm) repMovsq() { a.byte1(0xf3, 0x48, 0xa5) }

// repMovsb emits REP MOVSB (copies rcx bytes from [rsi] to [rdi]).
func (a *asm) repMovsb() { a.byte1(0xf3, 0xa4) }

// lockXadd emits LOCK XADD qword [m], src.
func (a *asm) lockXadd(m mem, src gpr) {
	a.byte1(0xf0)
	a.opMem(true, []byte{0x0f, 0xc1}, src, m, false)
}

// lockCmpxchg emits LOCK CMPXCHG qword [m], src (compares with rax).
func (a *asm) lockCmpxchg(m mem, src gpr) {
	a.byte1(0xf0)
	a.opMem(true, []byte{0x0f, 0xb1}, src, m, false)
}

// lockAluMI emits LOCK "op qword [m], simm32".
// aluMR emits "op qword [m], src".
func (a *asm) aluMR(op aluOp, m mem, src gpr) { a.opMem(true, []byte{byte(op)<<3 | 1}, src, m, false) }

// lockAluMR emits LOCK "op qword [m], src".
func (a *asm) lockAluMR(op aluOp, m mem, src gpr) {
	a.byte1(0xf0)
	a.aluMR(op, m, src)
}

func (a *asm) lockAluMI(op aluOp, m mem, v int32) {
	a.byte1(0xf0)
	a.aluMI(op, m, v)
}

// store32Imm emits MOV dword [m], imm32.
func (a *asm) store32Imm(m mem, v uint32) {
	a.opMem(false, []byte{0xc7}, 0, m, false)
	a.imm32(v)
}

// divMem emits DIV qword [m] (unsigned rdx:rax / [m]).
func (a *asm) divMem(m mem) { a.opMem(true, []byte{0xf7}, 6, m, false) }

// sreg is a segment register number as encoded in ModRM.reg.
type sreg uint8

// Segment registers in hardware encoding order.
const (
	sES sreg = iota
	sCS
	sSS
	sDS
	sFS
	sGS
)

// movFromSreg emits MOV r64, Sreg (REX.W: the selector is zero-extended).
func (a *asm) movFromSreg(dst gpr, s sreg) { a.opReg(true, []byte{0x8c}, gpr(s), dst, false) }

// rdtsc emits RDTSC (edx:eax = time-stamp counter; upper halves zeroed).
func (a *asm) rdtsc() { a.byte1(0x0f, 0x31) }

// rdfsbase emits RDFSBASE r64 (F3 REX.W 0F AE /0; needs CR4.FSGSBASE,
// which the kernel announces with HWCAP2_FSGSBASE).
func (a *asm) rdfsbase(dst gpr) {
	rex := byte(0x48)
	if dst&8 != 0 {
		rex |= 1
	}
	a.byte1(0xf3, rex, 0x0f, 0xae, 0xc0|byte(dst&7))
}

// testMI32 emits TEST dword [m], imm32.
func (a *asm) testMI32(m mem, v uint32) {
	a.opMem(false, []byte{0xf7}, 0, m, false)
	a.imm32(v)
}

// xsave64 emits XSAVE64 [m] (REX.W 0F AE /4): the state components in
// edx:eax, standard format; m must be 64-byte aligned.
func (a *asm) xsave64(m mem) { a.opMem(true, []byte{0x0f, 0xae}, 4, m, false) }
