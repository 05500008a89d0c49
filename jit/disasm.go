package jit

import (
	"fmt"
	"strings"

	"golang.org/x/arch/arm64/arm64asm"
	"golang.org/x/arch/x86/x86asm"
)

// Disassemble returns the machine code one instruction per line: offset,
// bytes and text (Intel syntax for amd64, GNU for arm64). It is for people (the explain command, test
// failures); bytes that do not decode are shown as ".byte".
func (c *Code) Disassemble() string {
	if c.Fallback != "" {
		return "(not compiled: " + c.Fallback + ")\n"
	}
	var b strings.Builder
	for off := 0; off < len(c.Text); {
		var n int
		var text string
		switch c.Arch {
		case "amd64":
			inst, err := x86asm.Decode(c.Text[off:], 64)
			if err != nil {
				n, text = 1, fmt.Sprintf(".byte %#02x", c.Text[off])
			} else {
				n, text = inst.Len, x86asm.IntelSyntax(inst, uint64(off), nil)
			}
		case "arm64":
			n = 4
			if off+4 > len(c.Text) {
				n = len(c.Text) - off
			}
			inst, err := arm64asm.Decode(c.Text[off : off+n])
			if err != nil {
				text = fmt.Sprintf(".word % x", c.Text[off:off+n])
			} else {
				text = arm64asm.GNUSyntax(inst)
			}
		default:
			return fmt.Sprintf("(no disassembler for %q)\n", c.Arch)
		}
		fmt.Fprintf(&b, "%5d  %-24x %s\n", off, c.Text[off:off+n], text)
		off += n
	}
	return b.String()
}
