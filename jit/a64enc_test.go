package jit

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/arch/arm64/arm64asm"
)

// Each AArch64 encoder is checked by decoding its output with arm64asm and
// comparing the GNU-syntax text.

func a64emit(f func(a *a64asm)) []byte {
	var a a64asm
	f(&a)
	return a.buf
}

// decodeA64 decodes every 4-byte word of code.
func decodeA64(t *testing.T, code []byte) []string {
	t.Helper()
	if len(code)%4 != 0 {
		t.Fatalf("code length %d not a multiple of 4", len(code))
	}
	var out []string
	for i := 0; i < len(code); i += 4 {
		inst, err := arm64asm.Decode(code[i : i+4])
		if err != nil {
			t.Errorf("% x: %v", code[i:i+4], err)
			out = append(out, "?")
			continue
		}
		out = append(out, arm64asm.GNUSyntax(inst))
	}
	return out
}

func checkA64(t *testing.T, code []byte, want ...string) {
	t.Helper()
	got := decodeA64(t, code)
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("% x decodes as %q, want %q", code, got, want)
	}
}

func TestA64EncodeRegisterForms(t *testing.T) {
	regs := []xreg{0, 1, 7, 9, 19, 28, 30}
	for _, d := range regs {
		for _, n := range regs {
			for _, m := range regs {
				x := func(r xreg) string { return fmt.Sprintf("x%d", r) }
				checkA64(t, a64emit(func(a *a64asm) { a.add(d, n, m) }), fmt.Sprintf("add %s, %s, %s", x(d), x(n), x(m)))
				checkA64(t, a64emit(func(a *a64asm) { a.sub(d, n, m) }), fmt.Sprintf("sub %s, %s, %s", x(d), x(n), x(m)))
				checkA64(t, a64emit(func(a *a64asm) { a.and(d, n, m) }), fmt.Sprintf("and %s, %s, %s", x(d), x(n), x(m)))
				checkA64(t, a64emit(func(a *a64asm) { a.orr(d, n, m) }), fmt.Sprintf("orr %s, %s, %s", x(d), x(n), x(m)))
				checkA64(t, a64emit(func(a *a64asm) { a.eor(d, n, m) }), fmt.Sprintf("eor %s, %s, %s", x(d), x(n), x(m)))
				checkA64(t, a64emit(func(a *a64asm) { a.mul(d, n, m) }), fmt.Sprintf("mul %s, %s, %s", x(d), x(n), x(m)))
				checkA64(t, a64emit(func(a *a64asm) { a.sdiv(d, n, m) }), fmt.Sprintf("sdiv %s, %s, %s", x(d), x(n), x(m)))
				checkA64(t, a64emit(func(a *a64asm) { a.udiv(d, n, m) }), fmt.Sprintf("udiv %s, %s, %s", x(d), x(n), x(m)))
				checkA64(t, a64emit(func(a *a64asm) { a.lslv(d, n, m) }), fmt.Sprintf("lsl %s, %s, %s", x(d), x(n), x(m)))
				checkA64(t, a64emit(func(a *a64asm) { a.lsrv(d, n, m) }), fmt.Sprintf("lsr %s, %s, %s", x(d), x(n), x(m)))
				checkA64(t, a64emit(func(a *a64asm) { a.asrv(d, n, m) }), fmt.Sprintf("asr %s, %s, %s", x(d), x(n), x(m)))
				checkA64(t, a64emit(func(a *a64asm) { a.msub(d, n, m, 5) }), fmt.Sprintf("msub %s, %s, %s, x5", x(d), x(n), x(m)))
				checkA64(t, a64emit(func(a *a64asm) { a.addLSL(d, n, m, 3) }), fmt.Sprintf("add %s, %s, %s, lsl #3", x(d), x(n), x(m)))
				checkA64(t, a64emit(func(a *a64asm) { a.csel(d, n, m, a64HS) }), fmt.Sprintf("csel %s, %s, %s, cs", x(d), x(n), x(m)))
			}
			checkA64(t, a64emit(func(a *a64asm) { a.cmp(d, n) }), fmt.Sprintf("cmp x%d, x%d", d, n))
			checkA64(t, a64emit(func(a *a64asm) { a.mvn(d, n) }), fmt.Sprintf("mvn x%d, x%d", d, n))
			checkA64(t, a64emit(func(a *a64asm) { a.mov(d, n) }), fmt.Sprintf("mov x%d, x%d", d, n))
			checkA64(t, a64emit(func(a *a64asm) { a.sbfm(d, n, 0, 7) }), fmt.Sprintf("sxtb x%d, w%d", d, n))
			checkA64(t, a64emit(func(a *a64asm) { a.sbfm(d, n, 0, 4) }), fmt.Sprintf("sbfx x%d, x%d, #0, #5", d, n))
			checkA64(t, a64emit(func(a *a64asm) { a.sbfm(d, n, 63, 63) }), fmt.Sprintf("asr x%d, x%d, #63", d, n))
			checkA64(t, a64emit(func(a *a64asm) { a.ubfm(d, n, 0, 12) }), fmt.Sprintf("ubfx x%d, x%d, #0, #13", d, n))
			checkA64(t, a64emit(func(a *a64asm) { a.subsImm(d, n, 1) }), fmt.Sprintf("subs x%d, x%d, #0x1", d, n))
			checkA64(t, a64emit(func(a *a64asm) { a.addImm(d, n, 11) }), fmt.Sprintf("add x%d, x%d, #0xb", d, n))
		}
		checkA64(t, a64emit(func(a *a64asm) { a.cset(d, a64LT) }), fmt.Sprintf("cset x%d, lt", d))
		checkA64(t, a64emit(func(a *a64asm) { a.cset(d, a64EQ) }), fmt.Sprintf("cset x%d, eq", d))
		checkA64(t, a64emit(func(a *a64asm) { a.cset(d, a64LO) }), fmt.Sprintf("cset x%d, cc", d))
		checkA64(t, a64emit(func(a *a64asm) { a.cmpImm(d, 64) }), fmt.Sprintf("cmp x%d, #0x40", d))
		checkA64(t, a64emit(func(a *a64asm) { a.blr(d) }), fmt.Sprintf("blr x%d", d))
		if d == xlr {
			checkA64(t, a64emit(func(a *a64asm) { a.retReg(d) }), "ret")
		} else {
			checkA64(t, a64emit(func(a *a64asm) { a.retReg(d) }), fmt.Sprintf("ret x%d", d))
		}
	}
	checkA64(t, a64emit(func(a *a64asm) { a.addImm(xfp, xsp, 0) }), "mov x29, sp")
	checkA64(t, a64emit(func(a *a64asm) { a.subImm(xsp, xsp, 0x110) }), "sub sp, sp, #0x110")
	checkA64(t, a64emit(func(a *a64asm) { a.subImm(xsp, xfp, 48) }), "sub sp, x29, #0x30")
	checkA64(t, a64emit(func(a *a64asm) { a.stpPre(xfp, xlr) }), "stp x29, x30, [sp,#-16]!")
	checkA64(t, a64emit(func(a *a64asm) { a.ldpPost(19, 20) }), "ldp x19, x20, [sp],#16")
	checkA64(t, a64emit(func(a *a64asm) { a.svc0() }), "svc #0x0")
}

func TestA64EncodeMemory(t *testing.T) {
	for _, n := range []xreg{0, 9, 20, xsp} {
		base := fmt.Sprintf("x%d", n)
		if n == xsp {
			base = "sp"
		}
		for _, off := range []uint32{0, 8, 64, 2048} {
			mem := fmt.Sprintf("[%s,#%d]", base, off)
			if off == 0 {
				mem = fmt.Sprintf("[%s]", base)
			}
			checkA64(t, a64emit(func(a *a64asm) { a.ldr(3, n, off, 8) }), "ldr x3, "+mem)
			checkA64(t, a64emit(func(a *a64asm) { a.ldr(3, n, off, 4) }), "ldr w3, "+mem)
			checkA64(t, a64emit(func(a *a64asm) { a.ldr(3, n, off, 2) }), "ldrh w3, "+mem)
			checkA64(t, a64emit(func(a *a64asm) { a.ldr(3, n, off, 1) }), "ldrb w3, "+mem)
			checkA64(t, a64emit(func(a *a64asm) { a.str(3, n, off) }), "str x3, "+mem)
		}
		checkA64(t, a64emit(func(a *a64asm) { a.str(xzr, n, 8) }), fmt.Sprintf("str xzr, [%s,#8]", base))
		for _, off := range []int32{1, 5, 9, -16, 255} {
			checkA64(t, a64emit(func(a *a64asm) { a.stur(4, n, off, 8) }), fmt.Sprintf("stur x4, [%s,#%d]", base, off))
			checkA64(t, a64emit(func(a *a64asm) { a.stur(4, n, off, 4) }), fmt.Sprintf("stur w4, [%s,#%d]", base, off))
			checkA64(t, a64emit(func(a *a64asm) { a.stur(4, n, off, 2) }), fmt.Sprintf("sturh w4, [%s,#%d]", base, off))
			checkA64(t, a64emit(func(a *a64asm) { a.stur(4, n, off, 1) }), fmt.Sprintf("sturb w4, [%s,#%d]", base, off))
		}
	}
}

func TestA64EncodeMovImm(t *testing.T) {
	for _, v := range []uint64{0, 1, 0xffff, 0x10000, 0x12345678, 1 << 63, ^uint64(0), 0x123456789abcdef0} {
		code := a64emit(func(a *a64asm) { a.movImm(7, v) })
		// Replay the decoded MOVZ/MOVK sequence.
		var got uint64
		for i := 0; i < len(code); i += 4 {
			inst, err := arm64asm.Decode(code[i : i+4])
			if err != nil {
				t.Fatalf("movImm(%#x): % x: %v", v, code, err)
			}
			w := binary.LittleEndian.Uint32(code[i:])
			hw := (w >> 21) & 3
			imm := uint64((w>>5)&0xffff) << (16 * hw)
			switch inst.Op {
			case arm64asm.MOVZ, arm64asm.MOV:
				if i != 0 {
					t.Fatalf("movImm(%#x): MOVZ not first", v)
				}
				got = imm
			case arm64asm.MOVK:
				got = got&^(0xffff<<(16*hw)) | imm
			default:
				t.Fatalf("movImm(%#x): unexpected %v", v, inst)
			}
			if inst.Args[0].String() != "X7" {
				t.Fatalf("movImm(%#x): destination %v", v, inst.Args[0])
			}
		}
		if got != v {
			t.Errorf("movImm(%#x) loads %#x", v, got)
		}
	}
}

func TestA64EncodeBranches(t *testing.T) {
	for _, target := range []int{-4096, -8, 0, 8, 1 << 16} {
		pad := 0
		if target < 0 {
			pad = -target
		}
		for _, tt := range []struct {
			emit func(a *a64asm) int
			name string
		}{
			{func(a *a64asm) int { return a.b() }, "b"},
			{func(a *a64asm) int { return a.bl() }, "bl"},
			{func(a *a64asm) int { return a.bcond(a64LT) }, "b.lt"},
			{func(a *a64asm) int { return a.bcond(a64LS) }, "b.ls"},
			{func(a *a64asm) int { return a.bcond(a64LE) }, "b.le"},
			{func(a *a64asm) int { return a.cbz(3) }, "cbz x3,"},
			{func(a *a64asm) int { return a.cbnz(3) }, "cbnz x3,"},
		} {
			var a a64asm
			a.buf = make([]byte, pad)
			at := tt.emit(&a)
			a.patch(at, at+target)
			// arm64asm prints the offset as an unsigned 64-bit number.
			want := fmt.Sprintf("%s .+%#x", tt.name, uint64(int64(target)))
			checkA64(t, a.buf[at:], want)
		}
	}
}

// TestA64EncodePadForms checks the instructions the jump pads add: pairs
// of X and Q registers, exclusive and ordered accesses, barriers and the
// system registers, by decoding them with arm64asm. arm64asm names
// system registers by their fields (op0, op1, CRn, CRm, op2), which are
// the Arm ARM's: NZCV S3_3_C4_C2_0, FPCR S3_3_C4_C4_0, FPSR
// S3_3_C4_C4_1, TPIDR_EL0 S3_3_C13_C0_2, CNTVCT_EL0 S3_3_C14_C0_2.
func TestA64EncodePadForms(t *testing.T) {
	for _, tc := range []struct {
		emit func(a *a64asm)
		want string
	}{
		{func(a *a64asm) { a.stp(0, 1, xsp, 0) }, "stp x0, x1, [sp]"},
		{func(a *a64asm) { a.stp(28, 29, xsp, 224) }, "stp x28, x29, [sp,#224]"},
		{func(a *a64asm) { a.stp(3, 4, 20, -512) }, "stp x3, x4, [x20,#-512]"},
		{func(a *a64asm) { a.stp(xzr, xzr, xsp, 504) }, "stp xzr, xzr, [sp,#504]"},
		{func(a *a64asm) { a.ldp(16, 17, xsp, 128) }, "ldp x16, x17, [sp,#128]"},
		{func(a *a64asm) { a.ldp(30, 0, 9, -8) }, "ldp x30, x0, [x9,#-8]"},
		{func(a *a64asm) { a.stpPostN(3, 4, 1, 16) }, "stp x3, x4, [x1],#16"},
		{func(a *a64asm) { a.ldpPostN(3, 4, 0, 16) }, "ldp x3, x4, [x0],#16"},
		{func(a *a64asm) { a.stpQ(0, 1, xsp, 272) }, "stp q0, q1, [sp,#272]"},
		{func(a *a64asm) { a.stpQ(30, 31, xsp, 1008) }, "stp q30, q31, [sp,#1008]"},
		{func(a *a64asm) { a.ldpQ(8, 9, 24, -1024) }, "ldp q8, q9, [x24,#-1024]"},
		{func(a *a64asm) { a.ldpQ(30, 31, xsp, 752) }, "ldp q30, q31, [sp,#752]"},
		{func(a *a64asm) { a.ldxr(0, 1) }, "ldxr x0, [x1]"},
		{func(a *a64asm) { a.ldaxr(9, 22) }, "ldaxr x9, [x22]"},
		{func(a *a64asm) { a.stxr(2, 0, 1) }, "stxr w2, x0, [x1]"},
		{func(a *a64asm) { a.stlxr(9, 7, 22) }, "stlxr w9, x7, [x22]"},
		{func(a *a64asm) { a.ldar(8, 10) }, "ldar x8, [x10]"},
		{func(a *a64asm) { a.stlr(xzr, 19) }, "stlr xzr, [x19]"},
		{func(a *a64asm) { a.stlr32(0, 20) }, "stlr w0, [x20]"},
		{func(a *a64asm) { a.ldar(0, xsp) }, "ldar x0, [sp]"},
		{func(a *a64asm) { a.dmbISH() }, "dmb ish"},
		{func(a *a64asm) { a.clrex() }, "clrex #0x0"},
		{func(a *a64asm) { a.nop() }, "nop "},
		{func(a *a64asm) { a.mrs(0, sysNZCV) }, "mrs x0, s3_3_c4_c2_0"},
		{func(a *a64asm) { a.msr(sysNZCV, 5) }, "msr s3_3_c4_c2_0, x5"},
		{func(a *a64asm) { a.mrs(1, sysFPCR) }, "mrs x1, s3_3_c4_c4_0"},
		{func(a *a64asm) { a.msr(sysFPCR, 1) }, "msr s3_3_c4_c4_0, x1"},
		{func(a *a64asm) { a.mrs(2, sysFPSR) }, "mrs x2, s3_3_c4_c4_1"},
		{func(a *a64asm) { a.msr(sysFPSR, 30) }, "msr s3_3_c4_c4_1, x30"},
		{func(a *a64asm) { a.mrs(5, sysTPIDREL0) }, "mrs x5, s3_3_c13_c0_2"},
		{func(a *a64asm) { a.mrs(0, sysCNTVCT) }, "mrs x0, s3_3_c14_c0_2"},
		{func(a *a64asm) { a.lsrImm(2, 5, 12) }, "lsr x2, x5, #12"},
		{func(a *a64asm) { a.lsrImm(2, 2, 58) }, "lsr x2, x2, #58"},
		{func(a *a64asm) { a.lslImm(2, 2, 8) }, "lsl x2, x2, #8"},
	} {
		checkA64(t, a64emit(tc.emit), strings.Split(tc.want, "; ")...)
	}
}

// TestA64EncodePadWords pins the encodings to the words the Arm
// Architecture Reference Manual's encoding diagrams give (and GNU as
// emits) for a few instructions whose operands arm64asm's text could hide
// (the system register fields, the acquire/release bits).
func TestA64EncodePadWords(t *testing.T) {
	for _, tc := range []struct {
		emit func(a *a64asm)
		want uint32
	}{
		{func(a *a64asm) { a.mrs(0, sysNZCV) }, 0xd53b4200},
		{func(a *a64asm) { a.msr(sysNZCV, 0) }, 0xd51b4200},
		{func(a *a64asm) { a.mrs(0, sysFPCR) }, 0xd53b4400},
		{func(a *a64asm) { a.mrs(0, sysFPSR) }, 0xd53b4420},
		{func(a *a64asm) { a.mrs(0, sysTPIDREL0) }, 0xd53bd040},
		{func(a *a64asm) { a.mrs(0, sysCNTVCT) }, 0xd53be040},
		{func(a *a64asm) { a.dmbISH() }, 0xd5033bbf},
		{func(a *a64asm) { a.clrex() }, 0xd503305f},
		{func(a *a64asm) { a.nop() }, 0xd503201f},
		{func(a *a64asm) { a.ldaxr(0, 1) }, 0xc85ffc20},
		{func(a *a64asm) { a.ldxr(0, 1) }, 0xc85f7c20},
		{func(a *a64asm) { a.stlxr(2, 0, 1) }, 0xc802fc20},
		{func(a *a64asm) { a.stxr(2, 0, 1) }, 0xc8027c20},
		{func(a *a64asm) { a.stlr(0, 1) }, 0xc89ffc20},
		{func(a *a64asm) { a.stlr32(0, 1) }, 0x889ffc20},
		{func(a *a64asm) { a.ldar(0, 1) }, 0xc8dffc20},
		{func(a *a64asm) { a.stp(xfp, xlr, xsp, 16) }, 0xa9017bfd},
		{func(a *a64asm) { a.stpQ(0, 1, xsp, 32) }, 0xad0107e0},
	} {
		code := a64emit(tc.emit)
		if got := binary.LittleEndian.Uint32(code); got != tc.want {
			t.Errorf("%v: %#08x, want %#08x", decodeA64(t, code), got, tc.want)
		}
	}
}
