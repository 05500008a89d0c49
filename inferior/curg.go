package inferior

// curG returns the address of the calling goroutine's runtime descriptor
// (the g that the runtime keeps in TLS on amd64 and in R28 on arm64): no
// two live goroutines share it. The Process asks it, not gettid(2), whether
// it is called on its ptrace goroutine: every operation asks, and a system
// call costs about 1.1 µs on the virtual machines measured (18% of the
// stub's CPU time in tstart's installation of 1,000 fast tracepoints went
// to gettid). It is only compared, never dereferenced; a goroutine's g may
// be reused once it has exited, so the loop forgets its own before it ends.
func curG() uintptr
