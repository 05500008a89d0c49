package guard

// trapInsn is the stub's software breakpoint instruction on arm64, brk
// #0 (little-endian); it is 4-byte aligned.
var trapInsn = []byte{0x00, 0x00, 0x20, 0xd4}
