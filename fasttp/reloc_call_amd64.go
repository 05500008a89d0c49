package fasttp

// callNative calls the machine code at fn with rdi and rsi set and returns
// rax. The code must follow the System V calling convention for a function
// of two integer arguments and may clobber only caller-saved registers. It
// exists so the tests can execute relocated code in-process.
//
//go:noescape
func callNative(fn, rdi, rsi uintptr) uint64
