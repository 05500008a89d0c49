package agentexpr

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name  string
		code  []byte
		insns []Insn
	}{
		{"empty", nil, nil},
		{"const8 end", []byte{0x22, 0x05, 0x27}, []Insn{{Off: 0, Op: OpConst8, Imm: 5, Len: 2}, {Off: 2, Op: OpEnd, Len: 1}}},
		{"const16 big-endian", []byte{0x23, 0x12, 0x34}, []Insn{{Op: OpConst16, Imm: 0x1234, Len: 3}}},
		{"const32", []byte{0x24, 0xff, 0xff, 0xff, 0xfe}, []Insn{{Op: OpConst32, Imm: 0xfffffffe, Len: 5}}},
		{"const64", []byte{0x25, 1, 2, 3, 4, 5, 6, 7, 8}, []Insn{{Op: OpConst64, Imm: 0x0102030405060708, Len: 9}}},
		{"reg", []byte{0x26, 0x00, 0x10}, []Insn{{Op: OpReg, Imm: 16, Len: 3}}},
		{"goto", []byte{0x21, 0x01, 0x00}, []Insn{{Op: OpGoto, Imm: 256, Len: 3}}},
		{"ext", []byte{0x16, 0x20}, []Insn{{Op: OpExt, Imm: 32, Len: 2}}},
		{"trace16", []byte{0x30, 0x01, 0x2c}, []Insn{{Op: OpTrace16, Imm: 300, Len: 3}}},
		{"printf", []byte{0x34, 0x01, 0x00, 0x03, '%', 'd', 0, 0x27}, []Insn{
			{Op: OpPrintf, Imm: 1, Str: []byte{'%', 'd', 0}, Len: 7}, {Off: 7, Op: OpEnd, Len: 1}}},
		{"float ops decode", []byte{0x01, 0x1b}, []Insn{{Op: OpFloat, Len: 1}, {Off: 1, Op: OpRefFloat, Len: 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := Parse(tt.code)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(e.Insns, tt.insns) {
				t.Errorf("Insns = %+v, want %+v", e.Insns, tt.insns)
			}
			// Encoding the instructions gives back the code.
			re, err := Encode(nil, e.Insns)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(re, tt.code) {
				t.Errorf("Encode = %x, want %x", re, tt.code)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		code []byte
		off  int
		want error
	}{
		{"opcode 0", []byte{0x00}, 0, ErrUnknownOpcode},
		{"opcode 0x35", []byte{0x22, 1, 0x35}, 2, ErrUnknownOpcode},
		{"opcode 0xff", []byte{0xff}, 0, ErrUnknownOpcode},
		{"truncated const8", []byte{0x22}, 0, ErrTruncated},
		{"truncated const64", []byte{0x27, 0x25, 1, 2, 3}, 1, ErrTruncated},
		{"truncated goto", []byte{0x21, 0}, 0, ErrTruncated},
		{"truncated printf header", []byte{0x34, 0, 0}, 0, ErrTruncated},
		{"truncated printf format", []byte{0x34, 0, 0, 5, 'a'}, 0, ErrTruncated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.code)
			if !errors.Is(err, tt.want) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
			var de *DecodeError
			if !errors.As(err, &de) || de.Off != tt.off {
				t.Fatalf("error %v: want a *DecodeError at offset %d", err, tt.off)
			}
		})
	}
}

func TestParseSummary(t *testing.T) {
	e, err := Parse(MustAssemble("reg 6; reg 2; reg 6; add; add; getv 3; setv 5; tracev 4; trace_quick 4; end"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(e.RegsUsed, []int{2, 6}) || !reflect.DeepEqual(e.TSVsRead, []int{3, 4}) ||
		!reflect.DeepEqual(e.TSVsWritten, []int{5}) || !e.Collects {
		t.Errorf("summary: regs %v read %v written %v collects %v", e.RegsUsed, e.TSVsRead, e.TSVsWritten, e.Collects)
	}
	e, _ = Parse(MustAssemble("const8 1; end"))
	if e.Collects || e.RegsUsed != nil {
		t.Errorf("plain constant: collects %v regs %v", e.Collects, e.RegsUsed)
	}
}

func TestDecodeHex(t *testing.T) {
	e, err := DecodeHex("2202220302 27")
	if err == nil {
		t.Fatalf("hex with a space inside decoded: %x", e.Code)
	}
	e, err = DecodeHex("220222030227\n")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := Eval(e, nil); got != 5 {
		t.Errorf("Eval = %d, want 5", got)
	}
	if e.Hex() != "220222030227" {
		t.Errorf("Hex = %s", e.Hex())
	}
	for _, bad := range []string{"2", "zz", "22"} {
		if _, err := DecodeHex(bad); err == nil {
			t.Errorf("DecodeHex(%q) succeeded", bad)
		}
	}
	if _, err := DecodeHex("zz"); !errors.Is(err, ErrBadHex) {
		t.Errorf("DecodeHex(zz): %v, want ErrBadHex", err)
	}
}

func TestEncodeRejectsOversizedImmediates(t *testing.T) {
	for _, in := range []Insn{{Op: OpConst8, Imm: 256}, {Op: OpReg, Imm: 1 << 16}, {Op: Op(0x99)}, {Op: OpPrintf, Imm: 300}} {
		if _, err := Encode(nil, []Insn{in}); err == nil {
			t.Errorf("Encode(%+v) succeeded", in)
		}
	}
}

func TestAssembleErrors(t *testing.T) {
	for _, src := range []string{"frob", "const8", "const8 256", "add 1", "goto nowhere", "l:; l:; end", `printf x "a"`, "printf 1 noquote"} {
		if _, err := Assemble(src); err == nil {
			t.Errorf("Assemble(%q) succeeded", src)
		}
	}
}

func TestParseGDBListing(t *testing.T) {
	listing := `Scope: 0x555555555143
Reg mask: 40
  0  const64 -1
  9  const8 220
 11  ext 8
 13  add
 14  const8 0
 16  const8 0
 18  printf "%d\n", 1 args
 27  end
`
	code, err := ParseGDBListing(listing)
	if err != nil {
		t.Fatal(err)
	}
	want := MustAssemble(`const64 0xffffffffffffffff; const8 220; ext 8; add; const8 0; const8 0; printf 1 "%d\\n"; end`)
	if !bytes.Equal(code, want) {
		t.Errorf("code %x, want %x", code, want)
	}
	for _, bad := range []string{"  0  frob", "  1  end", "  0  const8", "  0  end 3", "x  end", `  0  printf "%d", x args`} {
		if _, err := ParseGDBListing(bad); err == nil {
			t.Errorf("ParseGDBListing(%q) succeeded", bad)
		}
	}
}

// TestParseGDBListingMalformed checks that malformed listings are
// rejected with an error naming the problem, never a panic (issue 14:
// `0  printf ", 0 args` sliced arg[1:0]).
func TestParseGDBListingMalformed(t *testing.T) {
	for _, tc := range []struct {
		listing, want string
	}{
		{`0  printf ", 0 args`, "malformed printf"},
		{`  0  printf ", 0 args`, "malformed printf"},
		{`  0  printf "`, "malformed printf"},
		{`  0  printf "%d"`, "malformed printf"},
		{`  0  printf %d", 0 args`, "malformed printf"},
		{`  0  printf "", args`, "printf argument count"},
		{`  0  printf "%d", 256 args`, "printf argument count"},
		{`  0  printf`, "malformed printf"},
	} {
		t.Run(tc.listing, func(t *testing.T) {
			code, err := ParseGDBListing(tc.listing)
			if err == nil {
				t.Fatalf("ParseGDBListing(%q) = %x, want an error", tc.listing, code)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ParseGDBListing(%q): %v, want an error containing %q", tc.listing, err, tc.want)
			}
		})
	}
	// The shortest well-formed printf (empty format) still parses.
	code, err := ParseGDBListing(`  0  printf "", 0 args`)
	if err != nil {
		t.Fatal(err)
	}
	if want := MustAssemble(`printf 0 ""`); !bytes.Equal(code, want) {
		t.Errorf("code %x, want %x", code, want)
	}
}

func TestDisassemble(t *testing.T) {
	e, _ := Parse(MustAssemble(`const8 5; const64 0x8000000000000000; goto l; l:; printf 0 "hi"; end`))
	want := "    0  const8  5\n" +
		"    2  const64  9223372036854775808 (0x8000000000000000)\n" +
		"   11  goto  14\n" +
		"   14  printf  \"hi\", 0 args\n" +
		"   21  end\n"
	if got := Disassemble(e); got != want {
		t.Errorf("Disassemble:\n%s\nwant:\n%s", got, want)
	}
}

func TestJumpTarget(t *testing.T) {
	e, _ := Parse(MustAssemble("const8 1; if_goto a; const8 2; a:; end; goto 1"))
	want := []int{-1, 3, -1, -1, -1}
	for i, w := range want {
		if got := e.JumpTarget(i); got != w {
			t.Errorf("JumpTarget(%d) = %d, want %d", i, got, w)
		}
	}
	if e.JumpTarget(99) != -1 || e.JumpTarget(-1) != -1 {
		t.Errorf("out-of-range index not -1")
	}
}
