package inferior

import "gotpstub/tdesc"

// Register numbers and instructions the ISA-neutral tests use.
const (
	regPC   = tdesc.AArch64PC
	regSP   = tdesc.AArch64SP
	regArg0 = tdesc.AArch64X0 // the first integer argument
	regRet  = tdesc.AArch64X0 // a system call's result
)

// nopInsn is one nop instruction (the program's tp_nop).
var nopInsn = []byte{0x1f, 0x20, 0x03, 0xd5}

// nop5Len is the length of the instruction at prog.c's nop5_at (one nop).
const nop5Len = 4

// firstFPReg is the first register past the general-purpose ones.
const firstFPReg = tdesc.AArch64V0

// regThreadOwn is a register every thread has its own non-zero value
// of: the stack pointer (the thread pointer, tpidr_el0, is not in the
// layout).
const regThreadOwn = tdesc.AArch64SP
