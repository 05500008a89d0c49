package e2e

import (
	"testing"
	"time"

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

// everyInsnCases are TestFastTraceEveryInstruction's runs on x86-64.
var everyInsnCases = []everyInsnCase{
	{"pie", []string{"-O2"}, "all", []string{"short"}},
	// A PIE's successor-preserving jumps nearly all find their
	// pads (a site placed again reuses its pad's pages); without
	// them the successor evictions are used, and must work too.
	{"pie, eviction", []string{"-O2"}, "plain,evict,int3", []string{"evicting"}},
	// From a low image, kept puns whose top byte would put the pad
	// below 0 take prefixes (PaddedKeepSites).
	{"nopie", []string{"-O2", "-no-pie"}, "all", []string{"evicting", "short", "kept, prefixed"}},
	// Without short jumps and eviction, the int3 puns and their
	// prefixed variants (PaddedSites) are used, and must work too.
	{"nopie, int3 puns", []string{"-O2", "-no-pie"}, "plain,kept,int3", []string{"int3, prefixed", "int3"}},
}

// stopSignalEvery paces TestFastTraceStopsNeverShowPadAddresses's
// SIGUSR1s: a SIGUSR1 every 30 ms.
const stopSignalEvery = 30 * time.Millisecond
