package a64

// Encoders used only by the tests (harness code and generated test
// instructions), written from the field layouts independently of enc.go;
// TestHarnessEncodings checks every one with arm64asm.

func tLdrX(rt, rn int, off int) uint32 {
	return 0xf9400000 | uint32(off/8)<<10 | uint32(rn)<<5 | uint32(rt)
}
func tStrX(rt, rn int, off int) uint32 {
	return 0xf9000000 | uint32(off/8)<<10 | uint32(rn)<<5 | uint32(rt)
}
func tLdrQ(rt, rn int, off int) uint32 {
	return 0x3dc00000 | uint32(off/16)<<10 | uint32(rn)<<5 | uint32(rt)
}
func tStrQ(rt, rn int, off int) uint32 {
	return 0x3d800000 | uint32(off/16)<<10 | uint32(rn)<<5 | uint32(rt)
}
func tMovz(rd int, imm uint16) uint32 { return 0xd2800000 | uint32(imm)<<5 | uint32(rd) }
func tB(from, to uint64) uint32       { return 0x14000000 | uint32(int64(to-from)>>2)&0x3ffffff }
func tLdrLitX(rt int, from, to uint64) uint32 {
	return 0x58000000 | uint32(int64(to-from)>>2)&0x7ffff<<5 | uint32(rt)
}

const (
	tMovX1SP     = 0x910003e1 // mov x1, sp
	tMovSPX1     = 0x9100003f // mov sp, x1
	tMovX0X1     = 0xaa0103e0 // mov x0, x1
	tMsrNZCVX1   = 0xd51b4201 // msr nzcv, x1
	tMrsX1NZCV   = 0xd53b4201 // mrs x1, nzcv
	tPushX0      = 0xf81f0fe0 // str x0, [sp, #-16]!
	tStrX1SP8    = 0xf90007e1 // str x1, [sp, #8]
	tPopX1X2     = 0xa8c10be1 // ldp x1, x2, [sp], #16
	tRet         = 0xd65f03c0 // ret
	tMovX2X0     = 0xaa0003e2 // mov x2, x0
	tDcCvauX2    = 0xd50b7b22 // dc cvau, x2
	tIcIvauX2    = 0xd50b7522 // ic ivau, x2
	tAddX2X2_4   = 0x91001042 // add x2, x2, #4
	tCmpX2X1     = 0xeb01005f // cmp x2, x1
	tBLoMinus12  = 0x54ffffa3 // b.lo .-12
	tDsbIsh      = 0xd5033b9f // dsb ish
	tIsb         = 0xd5033fdf // isb
	tAddX1X2X3   = 0x8b030041 // add x1, x2, x3
	tSubsX4X5X6  = 0xeb0600a4 // subs x4, x5, x6
	tStrX7SPm32  = 0xf81e03e7 // stur x7, [sp, #-32]
	tStpX8X9SP16 = 0xa90127e8 // stp x8, x9, [sp, #16]
	tFaddV       = 0x4e22d420 // fadd v0.4s, v1.4s, v2.4s
	tBTIC        = 0xd503245f // bti c
	tPACIASP     = 0xd503233f // paciasp
	tBrX5        = 0xd61f00a0 // br x5
)
