package inferior

// The x86-64 instruction-set facts the package's shared code asks for.

// breakpointLen is the length of the software breakpoint instruction.
const breakpointLen = 1

// breakpointPCAdjust is how far past a software breakpoint the pc is when
// its trap is reported: int3 traps once it has executed.
const breakpointPCAdjust = 1

// insnAlign is the alignment of every instruction (x86 has none).
const insnAlign = 1

// breakpointInsn is int3.
var breakpointInsn = [breakpointLen]byte{0xcc}

// syscallInsn is the system call instruction, syscall.
var syscallInsn = []byte{0x0f, 0x05}

// redZone is how many bytes below the stack pointer the program may use
// without moving it (the SysV ABI's red zone).
const redZone = 128

// userSpaceTop is the end of the highest page a program can map (47-bit
// virtual addresses).
const userSpaceTop = 0x7ffffffff000

// ReadWatchpoints tells whether the hardware can watch reads alone
// (ReadWatchpoint): x86 debug registers cannot.
const ReadWatchpoints = false

// LivePatchByDefault tells whether code is patched with the threads
// running (SetLivePatching) unless asked otherwise: on x86-64 the
// text_poke_bp-style protocol of livepatch.go makes any patch safe
// while threads run.
const LivePatchByDefault = true
