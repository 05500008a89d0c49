#include "textflag.h"

// func callJIT(fn, regs, ctx, stackTop uintptr) uint64
//
// Calls generated code with the SysV convention on a caller-provided stack
// (stackTop is rounded down to 16 bytes), so that the generated code never
// runs on a goroutine stack. R12 is callee-saved in SysV and holds Go's SP.
TEXT ·callJIT(SB), NOSPLIT, $0-40
	MOVQ fn+0(FP), AX
	MOVQ regs+8(FP), DI
	MOVQ ctx+16(FP), SI
	MOVQ stackTop+24(FP), DX
	MOVQ SP, R12
	MOVQ DX, SP
	ANDQ $~15, SP
	CALL AX
	MOVQ R12, SP
	MOVQ AX, ret+32(FP)
	RET
