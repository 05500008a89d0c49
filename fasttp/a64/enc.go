package a64

// Instruction encoders for the few forms Relocate emits. Registers are
// numbers 0-31; in address and load-base positions 31 is sp, elsewhere
// the zero register, as the architecture defines for each form.

const (
	regIP0 = 16 // x16, the scratch of far branches and SIMD/FP literal loads
	regLR  = 30
	regSP  = 31

	wordNOP = 0xd503201f
)

// Branch ranges in bytes (the largest forward displacement + 4).
const (
	rangeB    = 1 << 27 // b, bl: imm26 words
	rangeCond = 1 << 20 // b.cond, cbz, cbnz, adr, ldr literal: imm19 words (adr: imm21 bytes)
	rangeTBZ  = 1 << 15 // tbz, tbnz: imm14 words
	rangeADRP = 1 << 32 // adrp: imm21 pages
)

// disp returns target-from when it is a multiple of 4 in [-limit, limit).
func disp(from, target uint64, limit int64) (int64, bool) {
	d := int64(target - from)
	return d, d&3 == 0 && d >= -limit && d < limit
}

// encB is b to a displacement of d bytes.
func encB(d int64) uint32 { return 0x14000000 | uint32(d>>2)&0x3ffffff }

// withImm19 replaces the imm19 field (bits 5-23) of w by d/4.
func withImm19(w uint32, d int64) uint32 { return w&^(0x7ffff<<5) | uint32(d>>2)&0x7ffff<<5 }

// withImm14 replaces the imm14 field (bits 5-18) of w by d/4.
func withImm14(w uint32, d int64) uint32 { return w&^(0x3fff<<5) | uint32(d>>2)&0x3fff<<5 }

// encADR is adr xd, .+d (|d| < 1 MB).
func encADR(rd uint8, d int64) uint32 {
	return 0x10000000 | uint32(d&3)<<29 | uint32(d>>2)&0x7ffff<<5 | uint32(rd)
}

// encADRP is adrp xd of a page displacement of p pages.
func encADRP(rd uint8, p int64) uint32 {
	return 0x90000000 | uint32(p&3)<<29 | uint32(p>>2)&0x7ffff<<5 | uint32(rd)
}

// encAddImm is add xd, xn, #imm (imm < 4096; 31 is sp in both places).
func encAddImm(rd, rn uint8, imm uint32) uint32 {
	return 0x91000000 | imm<<10 | uint32(rn)<<5 | uint32(rd)
}

// encMovz is movz xd, #imm16, lsl #16*hw; encMovk the same movk.
func encMovz(rd uint8, imm16 uint16, hw uint) uint32 {
	return 0xd2800000 | uint32(hw)<<21 | uint32(imm16)<<5 | uint32(rd)
}

func encMovk(rd uint8, imm16 uint16, hw uint) uint32 {
	return 0xf2800000 | uint32(hw)<<21 | uint32(imm16)<<5 | uint32(rd)
}

// loadOp is the unsigned-offset load opcode (register fields zero) of a
// literal load: the same size, signedness and register file.
func loadOp(in Insn) uint32 {
	switch {
	case in.Kind == KindLoadLitFP && in.Size == 4:
		return 0xbd400000 // ldr st
	case in.Kind == KindLoadLitFP && in.Size == 8:
		return 0xfd400000 // ldr dt
	case in.Kind == KindLoadLitFP:
		return 0x3dc00000 // ldr qt
	case in.Signed:
		return 0xb9800000 // ldrsw xt
	case in.Wide:
		return 0xf9400000 // ldr xt
	}
	return 0xb9400000 // ldr wt
}

// encLoad is the load of loadOp(in) into in.Reg from [xn, #off]
// (off a multiple of in.Size below 4096*in.Size).
func encLoad(in Insn, rn uint8, off uint32) uint32 {
	return loadOp(in) | off/uint32(in.Size)<<10 | uint32(rn)<<5 | uint32(in.Reg)
}

// The stack spill of x16 for the loads into SIMD/FP registers: 16 bytes
// so that sp stays 16-byte aligned.
const (
	wordPushIP0 = 0xf81f0ff0 // str x16, [sp, #-16]!
	wordPopIP0  = 0xf84107f0 // ldr x16, [sp], #16
	wordBRIP0   = 0xd61f0200 // br x16
)

// encRet is ret xn.
func encRet(rn uint8) uint32 { return 0xd65f0000 | uint32(rn)<<5 }
