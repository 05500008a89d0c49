#include "textflag.h"

// func callJIT(fn, regs, ctx, stackTop uintptr) uint64
//
// Calls generated code with the AAPCS64 convention on a caller-provided
// stack (stackTop is rounded down to 16 bytes). R19 is callee-saved in
// AAPCS64 and holds Go's RSP meanwhile.
TEXT ·callJIT(SB), NOSPLIT, $16-40
	MOVD fn+0(FP), R4
	MOVD regs+8(FP), R0
	MOVD ctx+16(FP), R1
	MOVD stackTop+24(FP), R5
	MOVD RSP, R19
	AND  $~15, R5
	MOVD R5, RSP
	CALL (R4)
	MOVD R19, RSP
	MOVD R0, ret+32(FP)
	RET
