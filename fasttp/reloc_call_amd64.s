#include "textflag.h"

// func callNative(fn, rdi, rsi uintptr) uint64
TEXT ·callNative(SB), NOSPLIT, $0-32
	MOVQ fn+0(FP), AX
	MOVQ rdi+8(FP), DI
	MOVQ rsi+16(FP), SI
	CALL AX
	MOVQ AX, ret+24(FP)
	RET
