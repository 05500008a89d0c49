package jit

import (
	"strings"
	"testing"

	"gotpstub/agentexpr"
)

func TestDisassemble(t *testing.T) {
	e, err := agentexpr.Parse(agentexpr.MustAssemble("reg 6; const8 16; add; ref32; const8 0; less_signed; end"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		arch string
		want []string
	}{
		{"amd64", []string{"syscall", "mov rax, qword ptr [r12+0x30]", "setl al", "ret"}},
		{"arm64", []string{"svc #0x0", "ldr x0, [x19,#48]", "cset x0, lt", "ret"}},
	} {
		c, err := Compile(e, tt.arch, Options{})
		if err != nil {
			t.Fatal(err)
		}
		d := c.Disassemble()
		for _, w := range tt.want {
			if !strings.Contains(d, w) {
				t.Errorf("%s: disassembly lacks %q:\n%s", tt.arch, w, d)
			}
		}
		if strings.Contains(d, ".byte") || strings.Contains(d, ".word") {
			t.Errorf("%s: undecodable bytes in:\n%s", tt.arch, d)
		}
	}
	c := &Code{Fallback: "printf needs the interpreter"}
	if d := c.Disassemble(); !strings.Contains(d, "printf") {
		t.Errorf("fallback disassembly %q", d)
	}
}
