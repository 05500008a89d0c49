package e2e

import "testing"

// reg names a register for gdb on the ISA the tests run on, given its
// x86-64 name: here itself.
func reg(x86 string) string { return x86 }

// oneRegisterFrameBytes is the size of a trace frame collecting rdi:
// header 6 + 'r' block 3 + rdi, rbp, rsp (a run: 4+24) + rip (4+8).
const oneRegisterFrameBytes = 49

// skipOnThisISA skips the tests that do not apply to this ISA: on x86-64,
// none.
func skipOnThisISA(*testing.T) {}
