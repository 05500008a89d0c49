#include "textflag.h"

// func callSite(fn uintptr, in, out *[18]uint64, stackTop uintptr)
//
// T = (stackTop-64) &^ 15. [T] saves Go's SP, [T+8] out, [T+16] fn, [T+24] Go's BP. The
// site's return address goes to T-8 and its red zone is [T-136, T-8).
TEXT ·callSite(SB), NOSPLIT, $0-32
	MOVQ fn+0(FP), AX
	MOVQ in+8(FP), BX
	MOVQ out+16(FP), CX
	MOVQ stackTop+24(FP), DX
	SUBQ $64, DX
	ANDQ $~15, DX
	MOVQ SP, 0(DX)
	MOVQ BP, 24(DX)
	MOVQ CX, 8(DX)
	MOVQ AX, 16(DX)
	// Canary: qword i at T-136+8i = 0x5a5ac0de00000000 | i.
	MOVQ $0x5a5ac0de00000000, R8
	LEAQ -136(DX), DI
	MOVQ $0, CX
fill:
	MOVQ R8, R9
	ORQ CX, R9
	MOVQ R9, (DI)(CX*8)
	INCQ CX
	CMPQ CX, $16
	JNE fill
	MOVQ DX, SP
	PUSHQ 128(BX)
	POPFQ
	MOVQ 0(BX), AX
	MOVQ 16(BX), CX
	MOVQ 24(BX), DX
	MOVQ 32(BX), SI
	MOVQ 40(BX), DI
	MOVQ 48(BX), BP
	MOVQ 64(BX), R8
	MOVQ 72(BX), R9
	MOVQ 80(BX), R10
	MOVQ 88(BX), R11
	MOVQ 96(BX), R12
	MOVQ 104(BX), R13
	MOVQ 112(BX), R14
	MOVQ 120(BX), R15
	MOVQ 8(BX), BX
	CALL 16(SP)
	PUSHFQ
	XCHGQ AX, 16(SP)
	MOVQ BX, 8(AX)
	MOVQ CX, 16(AX)
	MOVQ DX, 24(AX)
	MOVQ SI, 32(AX)
	MOVQ DI, 40(AX)
	MOVQ BP, 48(AX)
	MOVQ R8, 64(AX)
	MOVQ R9, 72(AX)
	MOVQ R10, 80(AX)
	MOVQ R11, 88(AX)
	MOVQ R12, 96(AX)
	MOVQ R13, 104(AX)
	MOVQ R14, 112(AX)
	MOVQ R15, 120(AX)
	POPQ BX
	MOVQ BX, 128(AX)
	MOVQ SP, BX
	MOVQ BX, 56(AX)
	LEAQ -8(BX), CX
	MOVQ CX, 136(AX)
	MOVQ 8(SP), BX
	MOVQ BX, 0(AX)
	CLD
	MOVQ 24(SP), BP
	MOVQ 0(SP), SP
	RET
