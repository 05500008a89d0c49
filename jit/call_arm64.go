package jit

// callJIT runs generated code fn(regs, ctx) on the stack whose top is
// stackTop and returns its rax. It is used by the tests (and by anything
// that wants to run a compiled expression in the current process).
//
//go:noescape
func callJIT(fn, regs, ctx, stackTop uintptr) uint64
