package e2e

import (
	"testing"

	"golang.org/x/arch/x86/x86asm"
)

// reg names a register for gdb on the ISA the tests run on, given its
// x86-64 name: here itself.
func reg(x86 string) string { return x86 }

// oneRegisterFrameBytes is the size of a trace frame collecting rdi:
// header 6 + 'r' block 3 + rdi, rbp, rsp (a run: 4+24) + rip (4+8).
const oneRegisterFrameBytes = 49

// skipOnThisISA skips the tests that do not apply to this ISA: on x86-64,
// none.
func skipOnThisISA(*testing.T) {}

// firstPCRelative returns the offset in code (at addr) of its first
// instruction with a rip-relative operand other than a call's or jmp's.
func firstPCRelative(code []byte, _ uint64) (int, bool) {
	for off := 0; off < len(code); {
		in, err := x86asm.Decode(code[off:], 64)
		if err != nil {
			break
		}
		if in.PCRel != 0 && in.Op != x86asm.CALL && in.Op != x86asm.JMP {
			return off, true
		}
		off += in.Len
	}
	return 0, false
}
