package trapfallback

import "gotpstub/trapfallback/arm64"

// isa is the instruction set of the processes traced: AArch64.
var isa = arm64.ISA
