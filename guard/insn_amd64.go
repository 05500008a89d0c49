package guard

// trapInsn is the stub's software breakpoint instruction on x86-64, int3.
var trapInsn = []byte{0xcc}
