package agentexpr

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// maxStringRead bounds how many bytes a %s conversion reads from memory when
// no precision limits it.
const maxStringRead = 1 << 16

// formatPiece is one literal run or one conversion of a C format string.
type formatPiece struct {
	literal string // for literal runs ("%%" already reduced to "%")
	conv    byte   // conversion character; 0 for a literal run
	minus   bool   // '-' flag
	plus    bool   // '+' flag
	space   bool   // ' ' flag
	alt     bool   // '#' flag
	zero    bool   // '0' flag
	width   int
	prec    int  // precision, valid when hasPrec
	hasPrec bool //
	bits    int  // integer argument width implied by the length modifier
}

// unescapeFormat processes the escape sequences GDB's format parser
// accepts in agent printf formats (\\ \a \b \e \f \n \r \t \v \"): GDB
// sends the format "just as it appears in C source". Like GDB it stops at an
// unescaped double quote and rejects any other escape.
func unescapeFormat(format string) (string, error) {
	if strings.IndexByte(format, '\\') < 0 && strings.IndexByte(format, '"') < 0 {
		return format, nil
	}
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c == '"' {
			break
		}
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(format) {
			return "", fmt.Errorf("%w: format ends with a backslash", ErrBadFormat)
		}
		switch format[i] {
		case '\\':
			b.WriteByte('\\')
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'e':
			b.WriteByte(0x1b)
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte('\v')
		case '"':
			b.WriteByte('"')
		default:
			return "", fmt.Errorf("%w: unrecognized escape \\%c", ErrBadFormat, format[i])
		}
	}
	return b.String(), nil
}

// parseFormat splits a C printf format into pieces after processing its
// escapes, accepting what GDB's format parser (gdbsupport/format.cc) accepts
// for the agent: flags "0-+ #", numeric width and precision, the length
// modifiers h, l, ll and z, and the conversions d i u o x X c s p and %%,
// with GDB's rules about which flags each conversion may carry. It rejects
// '*', %n, floating-point and wide (%lc, %ls) conversions, as gdbserver does
// (except %p, which this package prints like glibc).
func parseFormat(format string) ([]formatPiece, error) {
	format, err := unescapeFormat(format)
	if err != nil {
		return nil, err
	}
	var pieces []formatPiece
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			pieces = append(pieces, formatPiece{literal: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(format); {
		c := format[i]
		if c != '%' {
			lit.WriteByte(c)
			i++
			continue
		}
		start := i
		i++
		if i < len(format) && format[i] == '%' {
			lit.WriteByte('%')
			i++
			continue
		}
		p := formatPiece{bits: 32}
	flags:
		for ; i < len(format); i++ {
			switch format[i] {
			case '-':
				p.minus = true
			case '+':
				p.plus = true
			case ' ':
				p.space = true
			case '#':
				p.alt = true
			case '0':
				p.zero = true
			default:
				break flags
			}
		}
		var err error
		if p.width, i, err = parseFormatNumber(format, i); err != nil {
			return nil, fmt.Errorf("%w: width in %q: %w", ErrBadFormat, format[start:], err)
		}
		if i < len(format) && format[i] == '.' {
			p.hasPrec = true
			if p.prec, i, err = parseFormatNumber(format, i+1); err != nil {
				return nil, fmt.Errorf("%w: precision in %q: %w", ErrBadFormat, format[start:], err)
			}
		}
		longs, short, size := 0, false, false
		switch {
		case strings.HasPrefix(format[i:], "ll"):
			longs, i = 2, i+2
		case strings.HasPrefix(format[i:], "l"):
			longs, i = 1, i+1
		case strings.HasPrefix(format[i:], "h"):
			short, i = true, i+1
		case strings.HasPrefix(format[i:], "z"):
			size, i = true, i+1
		case strings.HasPrefix(format[i:], "L"):
			return nil, fmt.Errorf("%w: long double in %q not supported", ErrBadFormat, format[start:])
		}
		if i >= len(format) {
			return nil, fmt.Errorf("%w: incomplete conversion %q at end of format", ErrBadFormat, format[start:])
		}
		p.conv = format[i]
		i++
		spec := format[start:i]
		inappropriate := func() error {
			return fmt.Errorf("%w: inappropriate modifiers in %q", ErrBadFormat, spec)
		}
		switch p.conv {
		case 'd', 'i', 'u', 'o', 'x', 'X':
			if p.conv == 'u' && p.alt {
				return nil, inappropriate()
			}
			if p.conv != 'd' && p.conv != 'i' && (p.space || p.plus) {
				return nil, inappropriate()
			}
			switch {
			case longs > 0 || size:
				p.bits = 64
			case short:
				p.bits = 16
			}
		case 'c':
			if longs > 0 {
				return nil, fmt.Errorf("%w: wide character %q not supported", ErrBadFormat, spec)
			}
			if short || size || p.hasPrec || p.zero || p.space || p.plus {
				return nil, inappropriate()
			}
		case 's':
			if longs > 0 {
				return nil, fmt.Errorf("%w: wide string %q not supported", ErrBadFormat, spec)
			}
			if short || size || p.zero || p.space || p.plus {
				return nil, inappropriate()
			}
		case 'p':
			if longs > 0 || short || size || p.hasPrec || p.alt || p.zero || p.space || p.plus {
				return nil, inappropriate()
			}
			p.bits = 64
		case '*':
			return nil, fmt.Errorf("%w: '*' width or precision not supported in %q", ErrBadFormat, spec)
		case 'n':
			return nil, fmt.Errorf("%w: %%n not supported", ErrBadFormat)
		case 'e', 'E', 'f', 'F', 'g', 'G', 'a', 'A':
			return nil, fmt.Errorf("%w: floating-point conversion %q not supported", ErrBadFormat, spec)
		default:
			return nil, fmt.Errorf("%w: unrecognized conversion %q", ErrBadFormat, spec)
		}
		flush()
		pieces = append(pieces, p)
	}
	flush()
	return pieces, nil
}

// parseFormatNumber reads a decimal number (possibly empty) at format[i:].
func parseFormatNumber(format string, i int) (int, int, error) {
	start := i
	for i < len(format) && format[i] >= '0' && format[i] <= '9' {
		i++
	}
	if i < len(format) && format[i] == '*' {
		return 0, i, fmt.Errorf("'*' not supported")
	}
	if i == start {
		return 0, i, nil
	}
	n, err := strconv.Atoi(format[start:i])
	if err != nil || n > 4096 {
		return 0, i, fmt.Errorf("number %q too large", format[start:i])
	}
	return n, i, nil
}

// FormatArgCount returns how many arguments the C format string consumes,
// or an error (wrapping ErrBadFormat) if it has a conversion the agent
// cannot print.
func FormatArgCount(format string) (int, error) {
	pieces, err := parseFormat(format)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range pieces {
		if p.conv != 0 {
			n++
		}
	}
	return n, nil
}

// FormatC formats args with a C printf format string the way a C library
// would on an LP64 target: a conversion without a length modifier takes an
// int (the low 32 bits of the argument), hh a char, h a short, and l, ll,
// j, z, t a 64-bit value. %s reads a NUL-terminated string from mem (a zero
// address prints "(null)"), %c prints one byte and %p prints 0x-prefixed
// hex or "(nil)" like glibc. Memory errors wrap ErrUnreadable.
func FormatC(format string, args []uint64, mem Memory) (string, error) {
	pieces, err := parseFormat(format)
	if err != nil {
		return "", err
	}
	var out strings.Builder
	next := 0
	for _, p := range pieces {
		if p.conv == 0 {
			out.WriteString(p.literal)
			continue
		}
		if next >= len(args) {
			return "", fmt.Errorf("%w: format wants more than %d arguments", ErrBadFormat, len(args))
		}
		arg := args[next]
		next++
		switch p.conv {
		case 's':
			s, err := formatString(p, arg, mem)
			if err != nil {
				return "", err
			}
			pad(&out, p, s)
		case 'c':
			pad(&out, p, string([]byte{byte(arg)}))
		case 'p':
			if arg == 0 {
				pad(&out, p, "(nil)")
			} else {
				q := p
				q.conv, q.alt = 'x', true
				out.WriteString(formatInteger(q, arg))
			}
		default:
			out.WriteString(formatInteger(p, arg))
		}
	}
	if next != len(args) {
		return "", fmt.Errorf("%w: format uses %d arguments, %d given", ErrBadFormat, next, len(args))
	}
	return out.String(), nil
}

// formatString fetches the %s argument from memory and applies precision.
func formatString(p formatPiece, addr uint64, mem Memory) (string, error) {
	if addr == 0 {
		s := "(null)"
		if p.hasPrec && p.prec < len(s) {
			s = s[:p.prec]
		}
		return s, nil
	}
	limit := maxStringRead
	if p.hasPrec && p.prec < limit {
		limit = p.prec
	}
	if mem == nil {
		return "", fmt.Errorf("%%s at %#x: %w: no memory", addr, ErrUnreadable)
	}
	var buf []byte
	var b [1]byte
	for len(buf) < limit {
		if err := mem.ReadMemory(addr+uint64(len(buf)), b[:]); err != nil {
			return "", fmt.Errorf("%%s at %#x: %w: %w", addr+uint64(len(buf)), ErrUnreadable, err)
		}
		if b[0] == 0 {
			break
		}
		buf = append(buf, b[0])
	}
	return string(buf), nil
}

// pad writes s padded to the piece's width.
func pad(out *strings.Builder, p formatPiece, s string) {
	n := p.width - len(s)
	if n <= 0 {
		out.WriteString(s)
		return
	}
	if p.minus {
		out.WriteString(s)
		out.WriteString(strings.Repeat(" ", n))
		return
	}
	out.WriteString(strings.Repeat(" ", n))
	out.WriteString(s)
}

// formatInteger formats one integer conversion with C semantics.
func formatInteger(p formatPiece, arg uint64) string {
	signed := p.conv == 'd' || p.conv == 'i'
	v := arg
	if p.bits < 64 {
		v &= 1<<uint(p.bits) - 1
	}
	neg := false
	if signed && p.bits > 0 && v>>(uint(p.bits)-1)&1 == 1 {
		// Negative in its own width: take the magnitude.
		neg = true
		v = (^v + 1)
		if p.bits < 64 {
			v &= 1<<uint(p.bits) - 1
		}
	}
	var digits string
	switch p.conv {
	case 'o':
		digits = strconv.FormatUint(v, 8)
	case 'x':
		digits = strconv.FormatUint(v, 16)
	case 'X':
		digits = strings.ToUpper(strconv.FormatUint(v, 16))
	default:
		digits = strconv.FormatUint(v, 10)
	}
	if p.hasPrec && p.prec == 0 && v == 0 {
		digits = ""
	}
	if p.hasPrec && len(digits) < p.prec {
		digits = strings.Repeat("0", p.prec-len(digits)) + digits
	}
	prefix := ""
	switch {
	case signed && neg:
		prefix = "-"
	case signed && p.plus:
		prefix = "+"
	case signed && p.space:
		prefix = " "
	}
	if p.alt {
		switch p.conv {
		case 'o':
			if !strings.HasPrefix(digits, "0") {
				digits = "0" + digits
			}
		case 'x':
			if v != 0 {
				prefix = "0x"
			}
		case 'X':
			if v != 0 {
				prefix = "0X"
			}
		}
	}
	n := p.width - len(prefix) - len(digits)
	if n <= 0 {
		return prefix + digits
	}
	switch {
	case p.minus:
		return prefix + digits + strings.Repeat(" ", n)
	case p.zero && !p.hasPrec:
		return prefix + strings.Repeat("0", n) + digits
	default:
		return strings.Repeat(" ", n) + prefix + digits
	}
}

// formatOf returns the printf format string of the instruction: the bytes up
// to the first NUL.
func formatOf(in Insn) string {
	s := in.Str
	if i := bytes.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	return string(s)
}

// WriterOutput is an Output that formats with FormatC, reading %s strings
// from Mem, and writes the text to W.
type WriterOutput struct {
	W   io.Writer
	Mem Memory
}

// Printf formats and writes one printf.
func (w WriterOutput) Printf(format string, args []uint64) error {
	s, err := FormatC(format, args, w.Mem)
	if err != nil {
		return fmt.Errorf("agent printf: %w", err)
	}
	if _, err := io.WriteString(w.W, s); err != nil {
		return fmt.Errorf("agent printf: %w", err)
	}
	return nil
}
