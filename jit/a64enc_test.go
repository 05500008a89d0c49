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
