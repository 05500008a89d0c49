package jit

// callSite calls fn, an instrumented "site" (code that returns with RET),
// with every GPR but rsp and rflags taken from in, on the stack below
// stackTop, and stores every GPR and rflags after the return into out.
// Slots 0-15 are the GPRs in pad order (rax rbx rcx rdx rsi rdi rbp rsp
// r8..r15; in[7] is ignored, out[7] is rsp after the return), slot 16 is
// rflags, and out[17] is the site's stack pointer at entry (T-8, where T
// is stackTop-64 rounded down to 16). Before the call the 128 bytes below
// the site's stack pointer (its red zone) are filled with padCanary(i) in
// qword i, so that the caller can check they survived. The jump pad tests
// use it.
//
//go:noescape
func callSite(fn uintptr, in, out *[18]uint64, stackTop uintptr)

// padCanary is the qword callSite stores at red-zone qword i (i = 0 at the
// lowest address).
func padCanary(i int) uint64 { return 0x5a5a_c0de_0000_0000 | uint64(i) }
