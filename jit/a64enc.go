package jit

import (
	"encoding/binary"
	"fmt"
)

// A tiny hand-written AArch64 encoder: the instructions the arm64 backend
// emits. Checked in a64enc_test.go by decoding with arm64asm.

// xreg is an AArch64 general register number; 31 is XZR or SP depending on
// the instruction.
type xreg uint32

const (
	xzr xreg = 31
	xsp xreg = 31
	xfp xreg = 29
	xlr xreg = 30
)

// a64cond is an AArch64 condition code.
type a64cond uint32

// Condition codes used by the backend.
const (
	a64EQ a64cond = 0
	a64NE a64cond = 1
	a64HS a64cond = 2 // unsigned >=
	a64LO a64cond = 3 // unsigned <
	a64HI a64cond = 8 // unsigned >
	a64LS a64cond = 9 // unsigned <=
	a64LT a64cond = 11
	a64LE a64cond = 13
)

type a64asm struct{ buf []byte }

func (a *a64asm) pos() int      { return len(a.buf) }
func (a *a64asm) word(w uint32) { a.buf = binary.LittleEndian.AppendUint32(a.buf, w) }

func rrr(base uint32, d, n, m xreg) uint32 { return base | uint32(m)<<16 | uint32(n)<<5 | uint32(d) }

// Three-register data processing (64-bit).
func (a *a64asm) add(d, n, m xreg)  { a.word(rrr(0x8B000000, d, n, m)) }
func (a *a64asm) sub(d, n, m xreg)  { a.word(rrr(0xCB000000, d, n, m)) }
func (a *a64asm) and(d, n, m xreg)  { a.word(rrr(0x8A000000, d, n, m)) }
func (a *a64asm) orr(d, n, m xreg)  { a.word(rrr(0xAA000000, d, n, m)) }
func (a *a64asm) eor(d, n, m xreg)  { a.word(rrr(0xCA000000, d, n, m)) }
func (a *a64asm) mul(d, n, m xreg)  { a.word(rrr(0x9B007C00, d, n, m)) }
func (a *a64asm) sdiv(d, n, m xreg) { a.word(rrr(0x9AC00C00, d, n, m)) }
func (a *a64asm) udiv(d, n, m xreg) { a.word(rrr(0x9AC00800, d, n, m)) }
func (a *a64asm) lslv(d, n, m xreg) { a.word(rrr(0x9AC02000, d, n, m)) }
func (a *a64asm) lsrv(d, n, m xreg) { a.word(rrr(0x9AC02400, d, n, m)) }
func (a *a64asm) asrv(d, n, m xreg) { a.word(rrr(0x9AC02800, d, n, m)) }

// cmp emits CMP n, m (SUBS XZR, n, m).
func (a *a64asm) cmp(n, m xreg) { a.word(rrr(0xEB000000, xzr, n, m)) }

// mvn emits MVN d, m.
func (a *a64asm) mvn(d, m xreg) { a.word(rrr(0xAA200000, d, xzr, m)) }

// mov emits MOV d, m (ORR d, XZR, m); not for SP.
func (a *a64asm) mov(d, m xreg) { a.word(rrr(0xAA000000, d, xzr, m)) }

// addLSL emits ADD d, n, m, LSL #sh.
func (a *a64asm) addLSL(d, n, m xreg, sh uint32) { a.word(rrr(0x8B000000, d, n, m) | sh<<10) }

// msub emits MSUB d, n, m, ra (d = ra - n*m).
func (a *a64asm) msub(d, n, m, ra xreg) { a.word(rrr(0x9B008000, d, n, m) | uint32(ra)<<10) }

// addImm emits ADD d, n, #imm (n/d may be SP); imm < 4096.
func (a *a64asm) addImm(d, n xreg, imm uint32) {
	a.word(0x91000000 | imm<<10 | uint32(n)<<5 | uint32(d))
}

// subImm emits SUB d, n, #imm (n/d may be SP); imm < 4096.
func (a *a64asm) subImm(d, n xreg, imm uint32) {
	a.word(0xD1000000 | imm<<10 | uint32(n)<<5 | uint32(d))
}

// subsImm emits SUBS d, n, #imm.
func (a *a64asm) subsImm(d, n xreg, imm uint32) {
	a.word(0xF1000000 | imm<<10 | uint32(n)<<5 | uint32(d))
}

// cmpImm emits CMP n, #imm.
func (a *a64asm) cmpImm(n xreg, imm uint32) { a.subsImm(xzr, n, imm) }

// sbfm/ubfm emit the bitfield moves (64-bit).
func (a *a64asm) sbfm(d, n xreg, immr, imms uint32) {
	a.word(0x93400000 | immr<<16 | imms<<10 | uint32(n)<<5 | uint32(d))
}
func (a *a64asm) ubfm(d, n xreg, immr, imms uint32) {
	a.word(0xD3400000 | immr<<16 | imms<<10 | uint32(n)<<5 | uint32(d))
}

// csel emits CSEL d, n, m, c.
func (a *a64asm) csel(d, n, m xreg, c a64cond) { a.word(rrr(0x9A800000, d, n, m) | uint32(c)<<12) }

// cset emits CSET d, c.
func (a *a64asm) cset(d xreg, c a64cond) { a.word(0x9A9F07E0 | uint32(c^1)<<12 | uint32(d)) }

// movImm loads a 64-bit constant with MOVZ and MOVKs.
func (a *a64asm) movImm(d xreg, v uint64) {
	a.word(0xD2800000 | uint32(v&0xffff)<<5 | uint32(d))
	for hw := uint32(1); hw < 4; hw++ {
		if c := uint32(v>>(16*hw)) & 0xffff; c != 0 {
			a.word(0xF2800000 | hw<<21 | c<<5 | uint32(d))
		}
	}
}

// ldr loads size bytes (1, 2, 4, 8), zero-extended, from [n + off]; off
// must be a multiple of size below 4096*size.
func (a *a64asm) ldr(t, n xreg, off uint32, size int) {
	base := map[int]uint32{1: 0x39400000, 2: 0x79400000, 4: 0xB9400000, 8: 0xF9400000}[size]
	if base == 0 || off%uint32(size) != 0 || off/uint32(size) >= 4096 {
		panic(fmt.Sprintf("jit: a64 ldr size %d offset %d", size, off))
	}
	a.word(base | (off/uint32(size))<<10 | uint32(n)<<5 | uint32(t))
}

// str stores a 64-bit register to [n + off] (off multiple of 8).
func (a *a64asm) str(t, n xreg, off uint32) {
	if off%8 != 0 || off/8 >= 4096 {
		panic(fmt.Sprintf("jit: a64 str offset %d", off))
	}
	a.word(0xF9000000 | (off/8)<<10 | uint32(n)<<5 | uint32(t))
}

// stur stores the low size bytes of t to [n + off], -256 <= off < 256.
func (a *a64asm) stur(t, n xreg, off int32, size int) {
	base := map[int]uint32{1: 0x38000000, 2: 0x78000000, 4: 0xB8000000, 8: 0xF8000000}[size]
	a.word(base | (uint32(off)&0x1ff)<<12 | uint32(n)<<5 | uint32(t))
}

// stpPre emits STP t1, t2, [SP, #-16]!.
func (a *a64asm) stpPre(t1, t2 xreg) {
	a.word(0xA9BF0000 | uint32(t2)<<10 | uint32(xsp)<<5 | uint32(t1))
}

// ldpPost emits LDP t1, t2, [SP], #16.
func (a *a64asm) ldpPost(t1, t2 xreg) {
	a.word(0xA8C10000 | uint32(t2)<<10 | uint32(xsp)<<5 | uint32(t1))
}

func (a *a64asm) svc0()         { a.word(0xD4000001) }
func (a *a64asm) blr(n xreg)    { a.word(0xD63F0000 | uint32(n)<<5) }
func (a *a64asm) retReg(n xreg) { a.word(0xD65F0000 | uint32(n)<<5) }

// Branches return the offset of the instruction to patch later.
func (a *a64asm) b() int              { a.word(0x14000000); return a.pos() - 4 }
func (a *a64asm) bl() int             { a.word(0x94000000); return a.pos() - 4 }
func (a *a64asm) bcond(c a64cond) int { a.word(0x54000000 | uint32(c)); return a.pos() - 4 }
func (a *a64asm) cbz(t xreg) int      { a.word(0xB4000000 | uint32(t)); return a.pos() - 4 }
func (a *a64asm) cbnz(t xreg) int     { a.word(0xB5000000 | uint32(t)); return a.pos() - 4 }

// patch points the branch at insn to target.
func (a *a64asm) patch(insn, target int) {
	w := binary.LittleEndian.Uint32(a.buf[insn:])
	d := uint32((target - insn) / 4)
	switch {
	case w&0x7C000000 == 0x14000000: // B, BL
		w = w&0xFC000000 | d&0x03FFFFFF
	default: // B.cond, CBZ, CBNZ
		w = w&0xFF00001F | (d&0x7FFFF)<<5
	}
	binary.LittleEndian.PutUint32(a.buf[insn:], w)
}

func (a *a64asm) here(insn int) { a.patch(insn, a.pos()) }
