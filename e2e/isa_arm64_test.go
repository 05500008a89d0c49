package e2e

// arm64Regs maps the x86-64 register names the tests use to the aarch64
// registers playing the same part in testdata/trace.c's asm_worker and
// in the calling convention (first argument and result: x0; a
// callee-saved register: x19; flags: cpsr).
var arm64Regs = map[string]string{
	"rax": "x0", "rdi": "x0", "rbx": "x19", "rsp": "sp", "rip": "pc",
	"eflags": "cpsr", "r15": "x28",
}

// reg names a register for gdb on the ISA the tests run on, given its
// x86-64 name.
func reg(x86 string) string {
	if r, ok := arm64Regs[x86]; ok {
		return r
	}
	panic("e2e: no aarch64 counterpart for register " + x86)
}

// oneRegisterFrameBytes is the size of a trace frame collecting x0:
// header 6 + 'r' block 3 + x0 (a run: 4+8) + x29, x30, sp, pc (4+32).
const oneRegisterFrameBytes = 57
