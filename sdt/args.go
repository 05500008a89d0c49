package sdt

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
)

// Arg is one probe argument of an SDT spec (x86-64: "-4@%eax",
// "8@-8(%rbp)", "4@$5"; aarch64: "-4@w0", "8@[sp, 16]", "4@5"): its size
// in bytes and signedness, and where its value is.
type Arg struct {
	Size   int    // 1, 2, 4 or 8
	Signed bool   // a negative size in the spec
	Imm    bool   // the value is Disp ($N)
	Reg    string // the register (64-bit name: rax, x0, sp) holding the value or the address
	Mem    bool   // the value is in memory at Reg+Disp
	Disp   int64
}

// ParseArgs parses an argument spec: arguments separated by spaces, each
// SIZE@OPERAND with OPERAND, in x86-64's syntax, %reg, $imm, disp(%reg)
// or (%reg) (registers of any width), or in aarch64's, reg, imm, #imm,
// [reg] or [reg, disp] (xN, wN, sp); a 64-bit register name is kept.
// A spec with an aarch64 comma inside brackets is one argument.
func ParseArgs(spec string) ([]Arg, error) {
	var out []Arg
	for _, f := range fields(spec) {
		size, op, ok := strings.Cut(f, "@")
		if !ok {
			return nil, fmt.Errorf("sdt: argument %q: no size", f)
		}
		n, err := strconv.Atoi(size)
		if err != nil {
			return nil, fmt.Errorf("sdt: argument %q: size: %w", f, err)
		}
		a := Arg{Size: n, Signed: n < 0}
		if a.Signed {
			a.Size = -n
		}
		switch a.Size {
		case 1, 2, 4, 8:
		default:
			return nil, fmt.Errorf("sdt: argument %q: size %d", f, n)
		}
		if err := a.operand(op); err != nil {
			return nil, fmt.Errorf("sdt: argument %q: %w", f, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// fields splits a spec at the spaces outside brackets ("8@[sp, 16]" is
// one argument).
func fields(spec string) []string {
	var out []string
	depth, start := 0, -1
	for i, c := range spec {
		switch {
		case c == '[':
			depth++
		case c == ']':
			depth--
		case c == ' ' || c == '\t':
			if depth <= 0 && start >= 0 {
				out = append(out, spec[start:i])
				start = -1
			}
			continue
		}
		if start < 0 {
			start = i
		}
	}
	if start >= 0 {
		out = append(out, spec[start:])
	}
	return out
}

// operand parses the part after '@'.
func (a *Arg) operand(op string) error {
	var err error
	switch {
	case strings.HasPrefix(op, "$"):
		a.Imm = true
		a.Disp, err = strconv.ParseInt(op[1:], 0, 64)
		return err
	case strings.HasPrefix(op, "%"):
		a.Reg, err = reg64(op[1:])
		return err
	case !strings.ContainsAny(op, "(%"):
		return a.operandA64(op)
	}
	open := strings.IndexByte(op, '(')
	if open < 0 || !strings.HasSuffix(op, ")") || !strings.HasPrefix(op[open+1:], "%") {
		return fmt.Errorf("operand %q not understood", op)
	}
	a.Mem = true
	if open > 0 {
		if a.Disp, err = strconv.ParseInt(op[:open], 0, 64); err != nil {
			return fmt.Errorf("displacement %q: %w", op[:open], err)
		}
	}
	a.Reg, err = reg64(op[open+2 : len(op)-1])
	return err
}

// operandA64 parses an aarch64 operand: #imm or imm, a register, or
// [reg] and [reg, disp] (disp possibly with a '#').
func (a *Arg) operandA64(op string) error {
	var err error
	switch {
	case strings.HasPrefix(op, "#"), op != "" && (op[0] == '-' || op[0] >= '0' && op[0] <= '9'):
		a.Imm = true
		a.Disp, err = strconv.ParseInt(strings.TrimPrefix(op, "#"), 0, 64)
		return err
	case strings.HasPrefix(op, "[") && strings.HasSuffix(op, "]"):
		a.Mem = true
		base, disp, hasDisp := strings.Cut(op[1:len(op)-1], ",")
		if hasDisp {
			d := strings.TrimPrefix(strings.TrimSpace(disp), "#")
			if a.Disp, err = strconv.ParseInt(d, 0, 64); err != nil {
				return fmt.Errorf("displacement %q: %w", disp, err)
			}
		}
		a.Reg, err = regA64(strings.TrimSpace(base))
		return err
	}
	a.Reg, err = regA64(op)
	return err
}

// regA64 names the 64-bit aarch64 register a register name is part of
// (x0-x30, w0-w30, sp, wsp).
func regA64(name string) (string, error) {
	switch name {
	case "sp", "wsp":
		return "sp", nil
	}
	if len(name) > 1 && (name[0] == 'x' || name[0] == 'w') {
		if v, err := strconv.Atoi(name[1:]); err == nil && v >= 0 && v <= 30 && strconv.Itoa(v) == name[1:] {
			return "x" + name[1:], nil
		}
	}
	return "", fmt.Errorf("register %q", name)
}

// reg64 names the 64-bit register a register name is part of.
func reg64(name string) (string, error) {
	legacy := map[string]string{
		"al": "rax", "ax": "rax", "eax": "rax", "bl": "rbx", "bx": "rbx", "ebx": "rbx",
		"cl": "rcx", "cx": "rcx", "ecx": "rcx", "dl": "rdx", "dx": "rdx", "edx": "rdx",
		"sil": "rsi", "si": "rsi", "esi": "rsi", "dil": "rdi", "di": "rdi", "edi": "rdi",
		"bpl": "rbp", "bp": "rbp", "ebp": "rbp", "spl": "rsp", "sp": "rsp", "esp": "rsp",
	}
	switch {
	case legacy[name] != "":
		return legacy[name], nil
	case name == "rip" || len(name) == 3 && name[0] == 'r' && strings.Contains("abcdsb", name[1:2]):
		return name, nil
	case strings.HasPrefix(name, "r"):
		// r8 .. r15 and their d/w/b parts.
		n := strings.TrimRight(name[1:], "dwb")
		if v, err := strconv.Atoi(n); err == nil && v >= 8 && v <= 15 {
			return "r" + n, nil
		}
	}
	return "", fmt.Errorf("register %q", name)
}

// Value computes the argument from the registers (reg, by 64-bit name)
// and memory (mem, false when unreadable), sign- or zero-extended.
func (a Arg) Value(reg func(name string) (uint64, bool), mem func(addr uint64, buf []byte) bool) (int64, bool) {
	var v uint64
	switch {
	case a.Imm:
		return a.Disp, true
	case a.Mem:
		base, ok := reg(a.Reg)
		if !ok {
			return 0, false
		}
		var b [8]byte
		if !mem(base+uint64(a.Disp), b[:a.Size]) {
			return 0, false
		}
		v = binary.LittleEndian.Uint64(b[:])
	default:
		r, ok := reg(a.Reg)
		if !ok {
			return 0, false
		}
		v = r
	}
	bits := uint(8 * a.Size)
	if bits < 64 {
		v &= 1<<bits - 1
		if a.Signed && v&(1<<(bits-1)) != 0 {
			v |= ^uint64(0) << bits
		}
	}
	return int64(v), true
}

// Format is the static trace data of a hit at marker m, as gdb shows
// $_sdata: "provider:name(v1, v2, ...)", each argument in decimal ("?"
// when it cannot be read).
func Format(m Marker, args []Arg, reg func(name string) (uint64, bool), mem func(addr uint64, buf []byte) bool) string {
	var b strings.Builder
	b.WriteString(m.ID())
	b.WriteByte('(')
	for i, a := range args {
		if i > 0 {
			b.WriteString(", ")
		}
		v, ok := a.Value(reg, mem)
		switch {
		case !ok:
			b.WriteByte('?')
		case a.Signed || a.Imm:
			b.WriteString(strconv.FormatInt(v, 10))
		default:
			b.WriteString(strconv.FormatUint(uint64(v), 10))
		}
	}
	b.WriteByte(')')
	return b.String()
}
