package inferior

// The AArch64 instruction-set facts the package's shared code asks for.

// breakpointLen is the length of the software breakpoint instruction.
const breakpointLen = 4

// breakpointPCAdjust is how far past a software breakpoint the pc is when
// its trap is reported: brk traps before it executes, the pc stays on it.
const breakpointPCAdjust = 0

// insnAlign is the alignment of every A64 instruction.
const insnAlign = 4

// breakpointInsn is brk #0 (0xd4200000, little-endian), what gdb and
// gdbserver use on aarch64.
var breakpointInsn = [breakpointLen]byte{0x00, 0x00, 0x20, 0xd4}

// syscallInsn is svc #0 (0xd4000001, little-endian).
var syscallInsn = []byte{0x01, 0x00, 0x00, 0xd4}

// redZone is how many bytes below the stack pointer the program may use
// without moving it (AAPCS64 has no red zone).
const redZone = 0

// userSpaceTop is the end of the highest page a program can map without
// asking for more (48-bit virtual addresses).
const userSpaceTop = 0xfffffffff000

// ReadWatchpoints tells whether the hardware can watch reads alone
// (ReadWatchpoint): arm64 watchpoints can (load-only).
const ReadWatchpoints = true

// LivePatchByDefault tells whether code is patched with the threads
// running (SetLivePatching) unless asked otherwise: not on arm64, where
// the architecture allows a concurrently executed instruction to be
// replaced only among b, bl, brk, nop, svc and a few others, so a `b`
// over an arbitrary instruction is written with every thread paused.
const LivePatchByDefault = false
