package jit

import (
	"fmt"
	"testing"

	"golang.org/x/arch/x86/x86asm"
)

// Each encoder is checked by decoding what it emitted with x86asm: the
// mnemonic, every operand, and that the decoded length is the emitted length.

func reg64(r gpr) x86asm.Reg { return x86asm.RAX + x86asm.Reg(r) }
func reg32(r gpr) x86asm.Reg { return x86asm.EAX + x86asm.Reg(r) }
func reg16(r gpr) x86asm.Reg { return x86asm.AX + x86asm.Reg(r) }
func reg8(r gpr) x86asm.Reg {
	if r < 4 {
		return x86asm.AL + x86asm.Reg(r)
	}
	return x86asm.SPB + x86asm.Reg(r-4)
}

func memArg(m mem) x86asm.Mem {
	x := x86asm.Mem{Base: reg64(m.base), Disp: int64(m.disp)}
	if m.index >= 0 {
		x.Index = reg64(gpr(m.index))
		x.Scale = m.scale
	}
	return x
}

var allGPRs = []gpr{rAX, rCX, rDX, rBX, rSP, rBP, rSI, rDI, r8, r9, r10, r11, r12, r13, r14, r15}

// testMems covers every base register (rsp/r12 need SIB, rbp/r13 need a
// displacement), the three displacement sizes, and an index register.
func testMems() []mem {
	var ms []mem
	for _, b := range allGPRs {
		for _, d := range []int32{0, 8, -80, 127, -128, 128, 0x12345} {
			ms = append(ms, at(b, d))
		}
	}
	ms = append(ms, mem{base: rCX, index: int(r12), scale: 8, disp: 16}, mem{base: r13, index: int(rAX), scale: 1, disp: 0})
	return ms
}

// checkInsn decodes code as exactly one instruction and compares it.
func checkInsn(t *testing.T, what string, code []byte, op x86asm.Op, args ...x86asm.Arg) {
	t.Helper()
	inst, err := x86asm.Decode(code, 64)
	if err != nil {
		t.Errorf("%s: % x: decode: %v", what, code, err)
		return
	}
	if inst.Len != len(code) {
		t.Errorf("%s: % x: decoded length %d, emitted %d", what, code, inst.Len, len(code))
	}
	if inst.Op != op {
		t.Errorf("%s: % x: op %v, want %v", what, code, inst.Op, op)
	}
	for i, want := range args {
		got := inst.Args[i]
		if gm, ok := got.(x86asm.Mem); ok {
			wm := want.(x86asm.Mem)
			if wm.Index == 0 {
				gm.Scale = 0 // SIB with no index reports scale 1
			}
			got = gm
		}
		if got != want {
			t.Errorf("%s: % x: arg %d = %v, want %v (%s)", what, code, i, got, want, x86asm.IntelSyntax(inst, 0, nil))
		}
	}
	if len(args) < len(inst.Args) && inst.Args[len(args)] != nil {
		t.Errorf("%s: % x: extra operand %v", what, code, inst.Args[len(args)])
	}
}

func emit(f func(a *asm)) []byte {
	var a asm
	f(&a)
	return a.buf
}

func TestEncodeRegisterForms(t *testing.T) {
	for _, x := range allGPRs {
		name := fmt.Sprint("r", int(x))
		checkInsn(t, "push "+name, emit(func(a *asm) { a.push(x) }), x86asm.PUSH, reg64(x))
		checkInsn(t, "call "+name, emit(func(a *asm) { a.callReg(x) }), x86asm.CALL, reg64(x))
		checkInsn(t, "pop "+name, emit(func(a *asm) { a.pop(x) }), x86asm.POP, reg64(x))
		checkInsn(t, "neg", emit(func(a *asm) { a.neg(x) }), x86asm.NEG, reg64(x))
		checkInsn(t, "not", emit(func(a *asm) { a.not(x) }), x86asm.NOT, reg64(x))
		checkInsn(t, "idiv", emit(func(a *asm) { a.idiv(x) }), x86asm.IDIV, reg64(x))
		checkInsn(t, "div", emit(func(a *asm) { a.div(x) }), x86asm.DIV, reg64(x))
		checkInsn(t, "shl cl", emit(func(a *asm) { a.shiftCL(shiftShl, x) }), x86asm.SHL, reg64(x), x86asm.CL)
		checkInsn(t, "shr cl", emit(func(a *asm) { a.shiftCL(shiftShr, x) }), x86asm.SHR, reg64(x), x86asm.CL)
		checkInsn(t, "sar cl", emit(func(a *asm) { a.shiftCL(shiftSar, x) }), x86asm.SAR, reg64(x), x86asm.CL)
		checkInsn(t, "shl imm", emit(func(a *asm) { a.shiftImm(shiftShl, x, 13) }), x86asm.SHL, reg64(x), x86asm.Imm(13))
		checkInsn(t, "sar imm", emit(func(a *asm) { a.shiftImm(shiftSar, x, 63) }), x86asm.SAR, reg64(x), x86asm.Imm(63))
		checkInsn(t, "shr imm", emit(func(a *asm) { a.shiftImm(shiftShr, x, 1) }), x86asm.SHR, reg64(x), x86asm.Imm(1))
		checkInsn(t, "sete", emit(func(a *asm) { a.setcc(condE, x) }), x86asm.SETE, reg8(x))
		checkInsn(t, "setl", emit(func(a *asm) { a.setcc(condL, x) }), x86asm.SETL, reg8(x))
		checkInsn(t, "setb", emit(func(a *asm) { a.setcc(condB, x) }), x86asm.SETB, reg8(x))
		for _, y := range allGPRs {
			checkInsn(t, "mov", emit(func(a *asm) { a.movRR(x, y) }), x86asm.MOV, reg64(x), reg64(y))
			checkInsn(t, "mov32", emit(func(a *asm) { a.movRR32(x, y) }), x86asm.MOV, reg32(x), reg32(y))
			checkInsn(t, "imul", emit(func(a *asm) { a.imulRR(x, y) }), x86asm.IMUL, reg64(x), reg64(y))
			checkInsn(t, "test", emit(func(a *asm) { a.testRR(x, y) }), x86asm.TEST, reg64(x), reg64(y))
			checkInsn(t, "movzx8", emit(func(a *asm) { a.movzxRR8(x, y) }), x86asm.MOVZX, reg32(x), reg8(y))
			checkInsn(t, "cmovb", emit(func(a *asm) { a.cmovcc(condB, x, y) }), x86asm.CMOVB, reg64(x), reg64(y))
			for op, xop := range map[aluOp]x86asm.Op{aluAdd: x86asm.ADD, aluOr: x86asm.OR, aluAnd: x86asm.AND, aluSub: x86asm.SUB, aluXor: x86asm.XOR, aluCmp: x86asm.CMP} {
				checkInsn(t, "alu", emit(func(a *asm) { a.aluRR(op, x, y) }), xop, reg64(x), reg64(y))
				checkInsn(t, "alu32", emit(func(a *asm) { a.aluRR32(op, x, y) }), xop, reg32(x), reg32(y))
			}
		}
		for _, v := range []int32{0, 1, -1, 127, -128, 128, -129, 0x7fffffff, -0x80000000} {
			for op, xop := range map[aluOp]x86asm.Op{aluAdd: x86asm.ADD, aluAnd: x86asm.AND, aluSub: x86asm.SUB, aluCmp: x86asm.CMP} {
				checkInsn(t, "alu imm", emit(func(a *asm) { a.aluRI(op, x, v) }), xop, reg64(x), x86asm.Imm(int64(v)))
			}
		}
	}
}

func TestEncodeMovImm(t *testing.T) {
	for _, x := range allGPRs {
		for _, v := range []uint64{1, 0xff, 0xffffffff, 0x100000000, 1 << 63, ^uint64(0), 0xffffffff80000000, 0x123456789abcdef0} {
			code := emit(func(a *asm) { a.movImm(x, v) })
			inst, err := x86asm.Decode(code, 64)
			if err != nil || inst.Op != x86asm.MOV || inst.Len != len(code) {
				t.Errorf("movImm(%v, %#x) = % x: %v %v", x, v, code, inst, err)
				continue
			}
			// The 32-bit form zero-extends; the sign-extended imm32 form
			// and movabs carry the whole value.
			var got uint64
			switch inst.Args[0] {
			case reg32(x):
				got = uint64(uint32(inst.Args[1].(x86asm.Imm)))
			case reg64(x):
				got = uint64(inst.Args[1].(x86asm.Imm))
			default:
				t.Errorf("movImm(%v): destination %v", x, inst.Args[0])
			}
			if got != v {
				t.Errorf("movImm(%v, %#x) loads %#x", x, v, got)
			}
		}
		checkInsn(t, "movImm 0", emit(func(a *asm) { a.movImm(x, 0) }), x86asm.XOR, reg32(x), reg32(x))
	}
}

func TestEncodeMemoryForms(t *testing.T) {
	for _, m := range testMems() {
		ma := memArg(m)
		for _, x := range allGPRs {
			checkInsn(t, "load64", emit(func(a *asm) { a.load64(x, m) }), x86asm.MOV, reg64(x), ma)
			checkInsn(t, "store64", emit(func(a *asm) { a.store64(m, x) }), x86asm.MOV, ma, reg64(x))
			checkInsn(t, "store32", emit(func(a *asm) { a.store32(m, x) }), x86asm.MOV, ma, reg32(x))
			checkInsn(t, "store16", emit(func(a *asm) { a.store16(m, x) }), x86asm.MOV, ma, reg16(x))
			checkInsn(t, "store8", emit(func(a *asm) { a.store8(m, x) }), x86asm.MOV, ma, reg8(x))
			checkInsn(t, "lea", emit(func(a *asm) { a.lea(x, m) }), x86asm.LEA, reg64(x), ma)
			checkInsn(t, "zx1", emit(func(a *asm) { a.loadZX(x, m, 1) }), x86asm.MOVZX, reg32(x), ma)
			checkInsn(t, "zx2", emit(func(a *asm) { a.loadZX(x, m, 2) }), x86asm.MOVZX, reg32(x), ma)
			checkInsn(t, "zx4", emit(func(a *asm) { a.loadZX(x, m, 4) }), x86asm.MOV, reg32(x), ma)
			checkInsn(t, "zx8", emit(func(a *asm) { a.loadZX(x, m, 8) }), x86asm.MOV, reg64(x), ma)
			checkInsn(t, "add rm", emit(func(a *asm) { a.aluRM(aluAdd, x, m) }), x86asm.ADD, reg64(x), ma)
			checkInsn(t, "cmp rm", emit(func(a *asm) { a.aluRM(aluCmp, x, m) }), x86asm.CMP, reg64(x), ma)
		}
		checkInsn(t, "store8imm", emit(func(a *asm) { a.store8Imm(m, 'M') }), x86asm.MOV, ma, x86asm.Imm('M'))
		for _, v := range []int32{5, -1, 1000, -100000} {
			checkInsn(t, "cmp mi", emit(func(a *asm) { a.aluMI(aluCmp, m, v) }), x86asm.CMP, ma, x86asm.Imm(int64(v)))
			checkInsn(t, "add mi", emit(func(a *asm) { a.aluMI(aluAdd, m, v) }), x86asm.ADD, ma, x86asm.Imm(int64(v)))
		}
	}
}

func TestEncodeMisc(t *testing.T) {
	checkInsn(t, "syscall", emit(func(a *asm) { a.syscall() }), x86asm.SYSCALL)
	checkInsn(t, "ret", emit(func(a *asm) { a.ret() }), x86asm.RET)
	checkInsn(t, "cqo", emit(func(a *asm) { a.cqo() }), x86asm.CQO)
}

func TestEncodeBranches(t *testing.T) {
	conds := map[cond]x86asm.Op{condB: x86asm.JB, condAE: x86asm.JAE, condE: x86asm.JE, condNE: x86asm.JNE,
		condBE: x86asm.JBE, condLE: x86asm.JLE, condA: x86asm.JA, condL: x86asm.JL, condGE: x86asm.JGE}
	for _, target := range []int{0, 3, 100, 5000, -4000} {
		for c, op := range conds {
			var a asm
			a.buf = make([]byte, 8) // some code before the branch
			start := a.pos()
			f := a.jcc32(c)
			a.patch32(f, start+target)
			checkInsn(t, "jcc32", a.buf[start:], op, x86asm.Rel(target-(a.pos()-start)))
			if target >= 0 && target < 100 {
				var b asm
				f := b.jcc8(c)
				b.patch8(f, target)
				checkInsn(t, "jcc8", b.buf, op, x86asm.Rel(target-2))
			}
		}
		var a asm
		f := a.jmp32()
		a.patch32(f, target)
		checkInsn(t, "jmp32", a.buf, x86asm.JMP, x86asm.Rel(target-5))
		var c asm
		f = c.call32()
		c.patch32(f, target)
		checkInsn(t, "call32", c.buf, x86asm.CALL, x86asm.Rel(target-5))
		if target >= 0 && target < 100 {
			var b asm
			f = b.jmp8()
			b.patch8(f, target)
			checkInsn(t, "jmp8", b.buf, x86asm.JMP, x86asm.Rel(target-2))
		}
	}
}
