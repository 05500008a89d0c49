package agentexpr

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestFormatC(t *testing.T) {
	mem := &fakeMemory{regions: map[uint64][]byte{0x2000: []byte("hello\x00")}}
	neg := func(v int64) uint64 { return uint64(v) }
	tests := []struct {
		format string
		args   []uint64
		want   string
	}{
		{`plain`, nil, "plain"},
		{`100%%`, nil, "100%"},
		{`%d`, []uint64{neg(-5)}, "-5"},
		{`%d`, []uint64{0xffffffff}, "-1"},          // int: low 32 bits
		{`%d`, []uint64{0x1_0000_0005}, "5"},        // int: upper bits dropped
		{`%ld`, []uint64{0xffffffff}, "4294967295"}, // long: all 64 bits
		{`%lld`, []uint64{neg(-7)}, "-7"},
		{`%u`, []uint64{neg(-1)}, "4294967295"},
		{`%lu`, []uint64{neg(-1)}, "18446744073709551615"},
		{`%zu`, []uint64{neg(-1)}, "18446744073709551615"},
		{`%hd`, []uint64{0x18000}, "-32768"},
		{`%hu`, []uint64{0x18000}, "32768"},
		{`%x`, []uint64{0xdeadbeefcafe}, "beefcafe"},
		{`%lX`, []uint64{0xdeadbeefcafe}, "DEADBEEFCAFE"},
		{`%#x`, []uint64{255}, "0xff"},
		{`%#x`, []uint64{0}, "0"},
		{`%#o`, []uint64{8}, "010"},
		{`%#o`, []uint64{0}, "0"},
		{`%o`, []uint64{8}, "10"},
		{`%5d|`, []uint64{42}, "   42|"},
		{`%-5d|`, []uint64{42}, "42   |"},
		{`%05d`, []uint64{neg(-42)}, "-0042"},
		{`%+d`, []uint64{42}, "+42"},
		{`% d`, []uint64{42}, " 42"},
		{`%.3d`, []uint64{7}, "007"},
		{`%8.3d|`, []uint64{neg(-7)}, "    -007|"},
		{`%08.3d|`, []uint64{7}, "     007|"}, // 0 flag ignored with a precision
		{`%.0d|`, []uint64{0}, "|"},
		{`%c%c`, []uint64{'o', 0x16b}, "ok"},
		{`%3c|`, []uint64{'x'}, "  x|"},
		{`%s!`, []uint64{0x2000}, "hello!"},
		{`%.3s!`, []uint64{0x2000}, "hel!"},
		{`%8s|%-8s|`, []uint64{0x2000, 0x2000}, "   hello|hello   |"},
		{`%s`, []uint64{0}, "(null)"},
		{`%p %p`, []uint64{0x1234, 0}, "0x1234 (nil)"},
		{`a\tb\n`, nil, "a\tb\n"},
		{`q\"q\\`, nil, "q\"q\\"},
		{`stop"here`, nil, "stop"},
	}
	for _, tt := range tests {
		t.Run(tt.format, func(t *testing.T) {
			got, err := FormatC(tt.format, tt.args, mem)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("FormatC(%q, %v) = %q, want %q", tt.format, tt.args, got, tt.want)
			}
			n, err := FormatArgCount(tt.format)
			if err != nil || n != len(tt.args) {
				t.Errorf("FormatArgCount = %d, %v; want %d", n, err, len(tt.args))
			}
		})
	}
}

func TestFormatCErrors(t *testing.T) {
	mem := &fakeMemory{regions: map[uint64][]byte{}}
	tests := []struct {
		format string
		args   []uint64
		want   error
	}{
		{`%f`, []uint64{0}, ErrBadFormat},
		{`%Lf`, []uint64{0}, ErrBadFormat},
		{`%*d`, []uint64{0, 0}, ErrBadFormat},
		{`%.*d`, []uint64{0, 0}, ErrBadFormat},
		{`%n`, []uint64{0}, ErrBadFormat},
		{`%ls`, []uint64{0}, ErrBadFormat},
		{`%lc`, []uint64{0}, ErrBadFormat},
		{`%hhd`, []uint64{0}, ErrBadFormat}, // gdb's parser rejects hh
		{`%#u`, []uint64{0}, ErrBadFormat},
		{`%+x`, []uint64{0}, ErrBadFormat},
		{`%05s`, []uint64{0}, ErrBadFormat},
		{`%.2c`, []uint64{0}, ErrBadFormat},
		{`%#p`, []uint64{0}, ErrBadFormat},
		{`%q`, []uint64{0}, ErrBadFormat},
		{`%`, nil, ErrBadFormat},
		{`\q`, nil, ErrBadFormat},
		{`trailing\`, nil, ErrBadFormat},
		{`%d %d`, []uint64{1}, ErrBadFormat},
		{`%d`, []uint64{1, 2}, ErrBadFormat},
		{`%s`, []uint64{0x9999}, ErrUnreadable},
	}
	for _, tt := range tests {
		t.Run(tt.format, func(t *testing.T) {
			_, err := FormatC(tt.format, tt.args, mem)
			if !errors.Is(err, tt.want) {
				t.Fatalf("FormatC(%q) error %v, want %v", tt.format, err, tt.want)
			}
		})
	}
}

// TestFormatCMatchesLibc compares FormatC with the C library's printf on
// random conversions, when gcc is available.
func TestFormatCMatchesLibc(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not installed")
	}
	r := rand.New(rand.NewPCG(7, 8))
	type sample struct {
		format string
		arg    uint64
		ctype  string
	}
	var samples []sample
	for len(samples) < 400 {
		var spec strings.Builder
		spec.WriteByte('%')
		conv := "diuxXoc"[r.IntN(7)]
		for _, f := range "-+ #0" {
			if r.IntN(4) == 0 {
				spec.WriteRune(f)
			}
		}
		if r.IntN(2) == 0 {
			spec.WriteString(strconv.Itoa(r.IntN(25)))
		}
		if r.IntN(3) == 0 && conv != 'c' {
			spec.WriteString("." + strconv.Itoa(r.IntN(22)))
		}
		mod, ctype := "", "int"
		if conv != 'c' {
			switch r.IntN(5) {
			case 0:
				mod, ctype = "h", "int"
			case 1:
				mod, ctype = "l", "long"
			case 2:
				mod, ctype = "ll", "long long"
			case 3:
				mod, ctype = "z", "size_t"
			}
		}
		spec.WriteString(mod)
		spec.WriteByte(conv)
		format := "[" + spec.String() + "]"
		if _, err := FormatArgCount(format); err != nil {
			continue // combinations gdb refuses are not sent to the agent
		}
		arg := genConstants[r.IntN(len(genConstants))]
		if r.IntN(2) == 0 {
			arg = r.Uint64() >> r.IntN(64)
		}
		samples = append(samples, sample{format, arg, ctype})
	}
	var src strings.Builder
	src.WriteString("#include <stdio.h>\n#include <stddef.h>\nint main(void) {\n")
	for _, s := range samples {
		// Convert the way gdbserver's ax_printf does: int val = args[i], etc.
		fmt.Fprintf(&src, "\t{ %s v = (%s)%#xULL; printf(\"%s\\n\", v); }\n", s.ctype, s.ctype, s.arg, s.format)
	}
	src.WriteString("\treturn 0;\n}\n")
	dir := t.TempDir()
	cfile := filepath.Join(dir, "printf.c")
	if err := os.WriteFile(cfile, []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "printf")
	if out, err := exec.Command("gcc", "-w", "-o", exe, cfile).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	out, err := exec.Command(exe).Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(out), "\n")
	for i, s := range samples {
		got, err := FormatC(s.format, []uint64{s.arg}, nil)
		if err != nil {
			t.Fatalf("FormatC(%q): %v", s.format, err)
		}
		if got != lines[i] {
			t.Errorf("FormatC(%q, %#x) = %q, libc prints %q", s.format, s.arg, got, lines[i])
		}
	}
}

func TestWriterOutput(t *testing.T) {
	var b strings.Builder
	w := WriterOutput{W: &b}
	if err := w.Printf(`%d-%x\n`, []uint64{3, 255}); err != nil {
		t.Fatal(err)
	}
	if b.String() != "3-ff\n" {
		t.Errorf("wrote %q", b.String())
	}
	if err := w.Printf(`%f`, []uint64{0}); !errors.Is(err, ErrBadFormat) {
		t.Errorf("bad format: %v", err)
	}
}
