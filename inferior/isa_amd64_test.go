package inferior

import "gotpstub/tdesc"

// Register numbers and instructions the ISA-neutral tests use.
const (
	regPC   = tdesc.RIP
	regSP   = tdesc.RSP
	regArg0 = tdesc.RDI // the first integer argument
	regRet  = tdesc.RAX // a system call's result
)

// nopInsn is one nop instruction (the program's tp_nop).
var nopInsn = []byte{0x90}

// nop5Len is the length of the instruction at prog.c's nop5_at (a 5-byte nop).
const nop5Len = 5

// firstFPReg is the first register past the general-purpose ones.
const firstFPReg = tdesc.ST0

// regThreadOwn is a register every thread has its own non-zero value
// of: the thread pointer.
const regThreadOwn = tdesc.FSBASE
