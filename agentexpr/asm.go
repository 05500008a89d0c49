package agentexpr

import (
	"fmt"
	"strconv"
	"strings"
)

// Assemble translates a textual program into bytecode, for tests and tools.
// Instructions are separated by newlines or ';'. Each is an opcode name as
// GDB prints it, followed by its immediate when it has one: a number
// (decimal, 0x hex or negative decimal, which is stored two's complement in
// the immediate's width), or for goto/if_goto a label. "name:" defines a
// label at the next instruction. printf takes the argument count and a Go
// quoted format string: printf 2 "%d %s\n" (the NUL is added).
func Assemble(src string) ([]byte, error) {
	names := make(map[string]Op, len(OpTable))
	for op, info := range OpTable {
		names[info.Name] = op
	}
	type fixup struct {
		at    int // offset of the 2-byte target
		label string
		line  string
	}
	var code []byte
	labels := map[string]int{}
	var fixups []fixup
	for _, line := range strings.FieldsFunc(src, func(r rune) bool { return r == '\n' || r == ';' }) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasSuffix(line, ":") {
			name := strings.TrimSuffix(line, ":")
			if _, dup := labels[name]; dup {
				return nil, fmt.Errorf("assemble: label %q defined twice", name)
			}
			labels[name] = len(code)
			continue
		}
		name, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		op, ok := names[name]
		if !ok {
			return nil, fmt.Errorf("assemble %q: unknown opcode %q", line, name)
		}
		info := OpTable[op]
		switch {
		case op == OpPrintf:
			countText, formatText, _ := strings.Cut(rest, " ")
			nargs, err := strconv.ParseUint(countText, 0, 8)
			if err != nil {
				return nil, fmt.Errorf("assemble %q: argument count: %w", line, err)
			}
			format, err := strconv.Unquote(strings.TrimSpace(formatText))
			if err != nil {
				return nil, fmt.Errorf("assemble %q: format: %w", line, err)
			}
			in := Insn{Op: op, Imm: nargs, Str: append([]byte(format), 0)}
			if code, err = Encode(code, []Insn{in}); err != nil {
				return nil, fmt.Errorf("assemble %q: %w", line, err)
			}
		case (op == OpGoto || op == OpIfGoto) && rest != "" && !isNumber(rest):
			fixups = append(fixups, fixup{at: len(code) + 1, label: rest, line: line})
			code = append(code, byte(op), 0, 0)
		case info.ImmBytes > 0:
			if rest == "" {
				return nil, fmt.Errorf("assemble %q: missing immediate", line)
			}
			v, err := parseImmediate(rest, info.ImmBytes)
			if err != nil {
				return nil, fmt.Errorf("assemble %q: %w", line, err)
			}
			if code, err = Encode(code, []Insn{{Op: op, Imm: v}}); err != nil {
				return nil, fmt.Errorf("assemble %q: %w", line, err)
			}
		default:
			if rest != "" {
				return nil, fmt.Errorf("assemble %q: %s takes no immediate", line, name)
			}
			code = append(code, byte(op))
		}
	}
	for _, f := range fixups {
		target, ok := labels[f.label]
		if !ok {
			return nil, fmt.Errorf("assemble %q: undefined label %q", f.line, f.label)
		}
		if target > 0xffff {
			return nil, fmt.Errorf("assemble %q: label offset %d too large", f.line, target)
		}
		code[f.at], code[f.at+1] = byte(target>>8), byte(target)
	}
	return code, nil
}

func isNumber(s string) bool {
	_, err := strconv.ParseInt(s, 0, 64)
	if err == nil {
		return true
	}
	_, err = strconv.ParseUint(s, 0, 64)
	return err == nil
}

// parseImmediate parses a number for an immediate of width bytes; negative
// numbers are stored two's complement in that width.
func parseImmediate(s string, width int) (uint64, error) {
	bits := 8 * width
	if strings.HasPrefix(s, "-") {
		v, err := strconv.ParseInt(s, 0, bits)
		if err != nil {
			return 0, fmt.Errorf("immediate: %w", err)
		}
		if bits == 64 {
			return uint64(v), nil
		}
		return uint64(v) & (1<<uint(bits) - 1), nil
	}
	v, err := strconv.ParseUint(s, 0, bits)
	if err != nil {
		return 0, fmt.Errorf("immediate: %w", err)
	}
	return v, nil
}

// MustAssemble is Assemble for tests and constant programs: it panics on a
// malformed program.
func MustAssemble(src string) []byte {
	code, err := Assemble(src)
	if err != nil {
		panic(err)
	}
	return code
}
