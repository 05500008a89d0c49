package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/arch/x86/x86asm"

	"gotpstub/agentexpr"
	"gotpstub/jit"
	"gotpstub/tdesc"
)

// explain implements `gotpstub explain HEX`: the expression as GDB sent
// it, its optimised form, and the machine code the JIT makes of it (or why
// it falls back to the interpreter).
func explain(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: gotpstub explain HEX   (the bytecode of a QTDP X action or condition, without X<len>,)")
		return 2
	}
	if err := explainTo(os.Stdout, args[0]); err != nil {
		fmt.Fprintf(os.Stderr, "gotpstub explain: %v\n", err)
		return 1
	}
	return 0
}

func explainTo(w io.Writer, hexCode string) error {
	hexCode = strings.TrimSpace(hexCode)
	if i := strings.IndexByte(hexCode, ','); i >= 0 && strings.HasPrefix(hexCode, "X") {
		hexCode = hexCode[i+1:]
	}
	e, err := agentexpr.DecodeHex(hexCode)
	if err != nil {
		return fmt.Errorf("decoding: %w", err)
	}
	layout := tdesc.AMD64Linux(true)
	if err := agentexpr.Validate(e, agentexpr.Limits{NumRegs: len(layout.Regs)}); err != nil {
		fmt.Fprintf(w, "bytecode (%d bytes):\n%s\n", len(e.Code), agentexpr.Disassemble(e))
		return fmt.Errorf("invalid expression: %w", err)
	}
	fmt.Fprint(w, agentexpr.ExplainRegs(e, func(n int) string {
		for _, r := range layout.Regs {
			if r.Num == n {
				return r.Name
			}
		}
		return ""
	}))
	opt, err := agentexpr.Optimize(e)
	if err != nil {
		return fmt.Errorf("optimising: %w", err)
	}
	code, err := jit.Compile(opt, "amd64", jit.Options{})
	if err != nil {
		return fmt.Errorf("compiling: %w", err)
	}
	if code.Fallback != "" {
		fmt.Fprintf(w, "\nmachine code: none, the interpreter runs this expression (%s)\n", code.Fallback)
		return nil
	}
	fmt.Fprintf(w, "\nmachine code (amd64, %d bytes, registers read %v, stack %d bytes):\n",
		len(code.Text), code.RegsRead, code.StackBytes)
	for off := 0; off < len(code.Text); {
		inst, err := x86asm.Decode(code.Text[off:], 64)
		if err != nil || inst.Len == 0 {
			fmt.Fprintf(w, "  %4x  % x  (undecodable)\n", off, code.Text[off:off+1])
			off++
			continue
		}
		fmt.Fprintf(w, "  %4x  %-30s %s\n", off, fmt.Sprintf("% x", code.Text[off:off+inst.Len]),
			x86asm.GNUSyntax(inst, uint64(off), nil))
		off += inst.Len
	}
	return nil
}
