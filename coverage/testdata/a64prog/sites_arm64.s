#include "textflag.h"

// sites is never called: coverage's tests read its words.
TEXT ·sites(SB), NOSPLIT|NOFRAME, $0-0
	MOVD	$0, R1           // +0: plain
	LDAXRW	(R0), R2         // +4: load-exclusive: a trap
	ADD	$1, R2, R2        // +8: a jump between exclusives
	STLXRW	R2, (R0), R3     // +12: store-exclusive: a trap
	WORD	$0xd503233f      // +16: paciasp: a jump (not BTI-guarded)
	SVC	$0               // +20: svc: a trap
	CBZ	R1, done         // +24: cbz: a jump (relocated)
	WORD	$0x00000000      // +28: udf: a trap
done:
	RET                      // +32
