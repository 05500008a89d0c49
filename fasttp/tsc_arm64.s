#include "textflag.h"

// func rdtsc() uint64
TEXT ·rdtsc(SB), NOSPLIT, $0-8
	MRS  CNTVCT_EL0, R0
	MOVD R0, ret+0(FP)
	RET

// func cntfrq() uint64
TEXT ·cntfrq(SB), NOSPLIT, $0-8
	MRS  CNTFRQ_EL0, R0
	MOVD R0, ret+0(FP)
	RET
