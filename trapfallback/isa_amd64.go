package trapfallback

import "gotpstub/trapfallback/amd64"

// isa is the instruction set of the processes traced: x86-64.
var isa = amd64.ISA
