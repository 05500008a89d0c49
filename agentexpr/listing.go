package agentexpr

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseGDBListing rebuilds bytecode from the listing GDB prints for
// "maint agent" and "maint agent-eval" (ax_print in gdb/ax-general.c):
// lines "%3d  name[ imm]", where the immediate is printed as a signed
// decimal of the operand's width, and printf lines
// `N  printf "FORMAT", NARGS args`. "Scope:" and "Reg mask:" lines are
// skipped. Each line's offset must match the bytes rebuilt so far.
func ParseGDBListing(listing string) ([]byte, error) {
	names := make(map[string]Op, len(OpTable))
	for op, info := range OpTable {
		names[info.Name] = op
	}
	var code []byte
	for lineNo, line := range strings.Split(listing, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "Scope:") || strings.HasPrefix(trimmed, "Reg mask:") {
			continue
		}
		offText, rest, ok := strings.Cut(trimmed, "  ")
		if !ok {
			return nil, fmt.Errorf("listing line %d %q: no offset column", lineNo+1, line)
		}
		off, err := strconv.Atoi(offText)
		if err != nil {
			return nil, fmt.Errorf("listing line %d %q: offset: %w", lineNo+1, line, err)
		}
		if off != len(code) {
			return nil, fmt.Errorf("listing line %d %q: offset %d, but %d bytes precede it", lineNo+1, line, off, len(code))
		}
		rest = strings.TrimSpace(rest)
		name, arg, _ := strings.Cut(rest, " ")
		op, ok := names[name]
		if !ok {
			return nil, fmt.Errorf("listing line %d %q: unknown opcode %q", lineNo+1, line, name)
		}
		in := Insn{Op: op}
		switch {
		case op == OpPrintf:
			// printf "FORMAT", N args -- FORMAT is printed raw. The
			// closing `", ` must come after the opening quote: in
			// `printf ", 0 args` both are the same character.
			q1 := strings.IndexByte(arg, '"')
			q2 := strings.LastIndex(arg, "\", ")
			if q1 != 0 || q2 <= q1 || !strings.HasSuffix(arg, " args") {
				return nil, fmt.Errorf("listing line %d %q: malformed printf", lineNo+1, line)
			}
			nargs, err := strconv.ParseUint(strings.TrimSuffix(arg[q2+3:], " args"), 10, 8)
			if err != nil {
				return nil, fmt.Errorf("listing line %d %q: printf argument count: %w", lineNo+1, line, err)
			}
			in.Imm = nargs
			in.Str = append([]byte(arg[q1+1:q2]), 0)
		case OpTable[op].ImmBytes > 0:
			if arg == "" {
				return nil, fmt.Errorf("listing line %d %q: missing immediate", lineNo+1, line)
			}
			v, err := parseImmediate(arg, OpTable[op].ImmBytes)
			if err != nil {
				return nil, fmt.Errorf("listing line %d %q: %w", lineNo+1, line, err)
			}
			in.Imm = v
		case arg != "":
			return nil, fmt.Errorf("listing line %d %q: %s takes no immediate", lineNo+1, line, name)
		}
		if code, err = Encode(code, []Insn{in}); err != nil {
			return nil, fmt.Errorf("listing line %d %q: %w", lineNo+1, line, err)
		}
	}
	return code, nil
}
