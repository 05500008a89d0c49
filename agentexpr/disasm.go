package agentexpr

import (
	"fmt"
	"strings"
)

// Disassemble lists e one instruction per line: offset, name and
// immediate, like GDB's "maint agent" listing. Constants show their value
// in decimal and, when large, hex; jumps show their target offset.
func Disassemble(e *Expr) string {
	var b strings.Builder
	for _, in := range e.Insns {
		b.WriteString(FormatInsn(in))
		b.WriteByte('\n')
	}
	return b.String()
}

// FormatInsn renders one instruction as a Disassemble line (without the
// newline).
func FormatInsn(in Insn) string {
	line := fmt.Sprintf("%5d  %s", in.Off, in.Op)
	info := OpTable[in.Op]
	switch {
	case in.Op == OpPrintf:
		line += fmt.Sprintf("  %q, %d args", formatOf(in), in.Imm)
	case IsConst(in.Op) && in.Imm > 9:
		line += fmt.Sprintf("  %d (%#x)", in.Imm, in.Imm)
	case info.ImmBytes > 0:
		line += fmt.Sprintf("  %d", in.Imm)
	}
	return line
}

// Explain returns the disassembly of e followed by the disassembly of its
// optimised form (or why it could not be validated or optimised), for
// "gotpstub explain HEX".
func Explain(e *Expr) string { return ExplainRegs(e, nil) }

// ExplainRegs is Explain naming registers with regName (a register
// number to its name, "" when unknown; nil: numbers only): "reg 6
// ($rbp)".
func ExplainRegs(e *Expr, regName func(int) string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "bytecode (%d bytes, %d instructions):\n", len(e.Code), len(e.Insns))
	b.WriteString(disassembleRegs(e, regName))
	if err := Validate(e, Limits{}); err != nil {
		fmt.Fprintf(&b, "invalid: %v\n", err)
		return b.String()
	}
	fmt.Fprintf(&b, "max stack depth %d", e.MaxDepth)
	if len(e.RegsUsed) > 0 {
		fmt.Fprintf(&b, ", registers %v", e.RegsUsed)
		if regName != nil {
			var names []string
			for _, r := range e.RegsUsed {
				if n := regName(r); n != "" {
					names = append(names, "$"+n)
				}
			}
			if len(names) > 0 {
				fmt.Fprintf(&b, " (%s)", strings.Join(names, " "))
			}
		}
	}
	if len(e.TSVsRead) > 0 {
		fmt.Fprintf(&b, ", reads TSVs %v", e.TSVsRead)
	}
	if len(e.TSVsWritten) > 0 {
		fmt.Fprintf(&b, ", writes TSVs %v", e.TSVsWritten)
	}
	if e.Collects {
		b.WriteString(", collects")
	}
	b.WriteString("\n")
	o, err := Optimize(e)
	if err != nil {
		fmt.Fprintf(&b, "not optimised: %v\n", err)
		return b.String()
	}
	fmt.Fprintf(&b, "optimised (%d bytes, %d instructions): %s\n", len(o.Code), len(o.Insns), o.Hex())
	b.WriteString(disassembleRegs(o, regName))
	return b.String()
}

// disassembleRegs is Disassemble with register names after reg's number.
func disassembleRegs(e *Expr, regName func(int) string) string {
	var b strings.Builder
	for _, in := range e.Insns {
		b.WriteString(FormatInsn(in))
		if in.Op == OpReg && regName != nil {
			if n := regName(int(in.Imm)); n != "" {
				fmt.Fprintf(&b, "  ($%s)", n)
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}
