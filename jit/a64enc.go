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
	a64GE a64cond = 10
	a64HI a64cond = 8 // unsigned >
	a64LS a64cond = 9 // unsigned <=
	a64LT a64cond = 11
	a64GT a64cond = 12
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

// Pair loads and stores of X registers: STP/LDP t1, t2, [n, #off]
// (signed offset, off a multiple of 8 in [-512, 504]) and the
// post-indexed forms [n], #off (stpPostN, ldpPostN).
func (a *a64asm) stp(t1, t2, n xreg, off int32) { a.word(pairOp(0xA9000000, t1, t2, n, off, 8)) }
func (a *a64asm) ldp(t1, t2, n xreg, off int32) { a.word(pairOp(0xA9400000, t1, t2, n, off, 8)) }
func (a *a64asm) stpPostN(t1, t2, n xreg, off int32) {
	a.word(pairOp(0xA8800000, t1, t2, n, off, 8))
}
func (a *a64asm) ldpPostN(t1, t2, n xreg, off int32) {
	a.word(pairOp(0xA8C00000, t1, t2, n, off, 8))
}

// stpQ and ldpQ store and load the 128-bit SIMD registers q(t1), q(t2)
// at [n, #off] (off a multiple of 16 in [-1024, 1008]).
func (a *a64asm) stpQ(t1, t2, n xreg, off int32) { a.word(pairOp(0xAD000000, t1, t2, n, off, 16)) }
func (a *a64asm) ldpQ(t1, t2, n xreg, off int32) { a.word(pairOp(0xAD400000, t1, t2, n, off, 16)) }

// pairOp encodes a load/store pair with a scaled signed 7-bit offset.
func pairOp(base uint32, t1, t2, n xreg, off, scale int32) uint32 {
	if off%scale != 0 || off/scale < -64 || off/scale > 63 {
		panic(fmt.Sprintf("jit: a64 pair offset %d", off))
	}
	return base | (uint32(off/scale)&0x7f)<<15 | uint32(t2)<<10 | uint32(n)<<5 | uint32(t1)
}

// Exclusive and ordered accesses (64-bit unless named 32): the address
// is [n] with no offset; s receives the store-exclusive status (0: done).
func (a *a64asm) ldxr(t, n xreg)     { a.word(0xC85F7C00 | uint32(n)<<5 | uint32(t)) }
func (a *a64asm) ldaxr(t, n xreg)    { a.word(0xC85FFC00 | uint32(n)<<5 | uint32(t)) }
func (a *a64asm) stxr(s, t, n xreg)  { a.word(0xC8007C00 | uint32(s)<<16 | uint32(n)<<5 | uint32(t)) }
func (a *a64asm) stlxr(s, t, n xreg) { a.word(0xC800FC00 | uint32(s)<<16 | uint32(n)<<5 | uint32(t)) }
func (a *a64asm) ldar(t, n xreg)     { a.word(0xC8DFFC00 | uint32(n)<<5 | uint32(t)) }
func (a *a64asm) stlr(t, n xreg)     { a.word(0xC89FFC00 | uint32(n)<<5 | uint32(t)) }
func (a *a64asm) stlr32(t, n xreg)   { a.word(0x889FFC00 | uint32(n)<<5 | uint32(t)) }

// Barriers and hints.
func (a *a64asm) dmbISH() { a.word(0xD5033BBF) }
func (a *a64asm) clrex()  { a.word(0xD503305F) }
func (a *a64asm) nop()    { a.word(0xD503201F) }

// a64sysreg is a system register's op0:op1:CRn:CRm:op2 field of MRS/MSR
// (bits 5-20 of the instruction, op0's high bit implied).
type a64sysreg uint32

// System registers the jump pads read or write.
const (
	sysNZCV     a64sysreg = 3<<16 | 4<<12 | 2<<8 | 0<<5 // op0 3, op1 3, C4, C2, 0
	sysFPCR     a64sysreg = 3<<16 | 4<<12 | 4<<8 | 0<<5
	sysFPSR     a64sysreg = 3<<16 | 4<<12 | 4<<8 | 1<<5
	sysTPIDREL0 a64sysreg = 3<<16 | 13<<12 | 0<<8 | 2<<5
	sysCNTVCT   a64sysreg = 3<<16 | 14<<12 | 0<<8 | 2<<5
)

// mrs reads system register r into t; msr writes t to it (op0 = 3).
func (a *a64asm) mrs(t xreg, r a64sysreg) { a.word(0xD5380000 | uint32(r) | uint32(t)) }
func (a *a64asm) msr(r a64sysreg, t xreg) { a.word(0xD5180000 | uint32(r) | uint32(t)) }

// lsrImm and lslImm shift by a constant (UBFM aliases), 0 < sh < 64.
func (a *a64asm) lsrImm(d, n xreg, sh uint32) { a.ubfm(d, n, sh, 63) }
func (a *a64asm) lslImm(d, n xreg, sh uint32) { a.ubfm(d, n, 64-sh, 63-sh) }
