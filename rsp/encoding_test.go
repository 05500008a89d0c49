package rsp

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// expandRLE mirrors gdb's read_frame: '*' followed by a count character c
// repeats the previous byte c-29 more times (3 <= count and the expanded
// count must be 1..255; a '*' with nothing before it is an error).
func expandRLE(t testing.TB, in []byte) []byte {
	t.Helper()
	var out []byte
	for i := 0; i < len(in); i++ {
		if in[i] != '*' {
			out = append(out, in[i])
			continue
		}
		i++
		if i >= len(in) {
			t.Fatalf("expandRLE(%q): '*' at end", in)
		}
		repeat := int(in[i]) - ' ' + 3
		if repeat <= 0 || repeat > 255 || len(out) == 0 {
			t.Fatalf("expandRLE(%q): invalid run length at %d", in, i)
		}
		prev := out[len(out)-1]
		for j := 0; j < repeat; j++ {
			out = append(out, prev)
		}
	}
	return out
}

// checkRLEOutput verifies the encoding rules of the manual on enc.
func checkRLEOutput(t testing.TB, payload, enc []byte) {
	t.Helper()
	for i := 0; i+1 < len(enc); i++ {
		if enc[i] != '*' {
			continue
		}
		count := enc[i+1]
		if count == '#' || count == '$' || count > 126 || count < ' ' {
			t.Fatalf("encodeRLE(%q) = %q uses forbidden count %q", payload, enc, count)
		}
		i++
	}
	if got := expandRLE(t, enc); !bytes.Equal(got, payload) {
		t.Fatalf("expand(encodeRLE(%q)) = %q", payload, got)
	}
}

func TestEncodeRLE(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"", ""},
		{"0", "0"},
		{"000", "000"},
		{"0000", "0* "},
		{"00000", "0*!"},
		{"000000", "0*\""},
		{"0000000", "0*\"0"},   // 6 repeats would be '#'
		{"00000000", "0*\"00"}, // 7 repeats would be '$'; the manual's example
		{"000000000", "0*%"},
		{"x" + strings.Repeat("f", 16) + "y", "xf*,y"},
		{strings.Repeat("a", 98), "a*~"},
		{strings.Repeat("a", 99), "a*~a"},
		{strings.Repeat("a", 102), "a*~a* "},
	}
	for _, tt := range tests {
		got := encodeRLE([]byte(tt.in))
		checkRLEOutput(t, []byte(tt.in), got)
		if string(got) != tt.want {
			t.Errorf("encodeRLE(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestEscapeBinary(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"", ""},
		{"abc", "abc"},
		{"$", "}\x04"},
		{"#", "}\x03"},
		{"}", "}]"},
		{"*", "}\x0a"},
		{"a$#}*b\x00\xff", "a}\x04}\x03}]}\x0ab\x00\xff"},
	}
	for _, tt := range tests {
		got := EscapeBinary([]byte(tt.in))
		if string(got) != tt.want {
			t.Errorf("EscapeBinary(%q) = %q, want %q", tt.in, got, tt.want)
		}
		back, err := UnescapeBinary(got)
		if err != nil || string(back) != tt.in {
			t.Errorf("UnescapeBinary(%q) = %q, %v; want %q", got, back, err, tt.in)
		}
	}
}

func TestUnescapeBinary(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr bool
	}{
		{"", "", false},
		{"plain", "plain", false},
		{"}]", "}", false},
		{"}\x03}\x04", "#$", false},
		{"}", "", true},
		{"ab}", "", true},
		{"}}", "]", false}, // the escaped byte is 0x7d^0x20
	}
	for _, tt := range tests {
		got, err := UnescapeBinary([]byte(tt.in))
		if tt.wantErr {
			if !errors.Is(err, ErrTrailingEscape) {
				t.Errorf("UnescapeBinary(%q) error = %v, want ErrTrailingEscape", tt.in, err)
			}
			continue
		}
		if err != nil || string(got) != tt.want {
			t.Errorf("UnescapeBinary(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestHex(t *testing.T) {
	if got := EncodeHex([]byte{0x00, 0x1f, 0xab, 0xff}); got != "001fabff" {
		t.Errorf("EncodeHex = %q", got)
	}
	tests := []struct {
		in      string
		want    []byte
		wantErr bool
	}{
		{"", []byte{}, false},
		{"00", []byte{0}, false},
		{"aBcD", []byte{0xab, 0xcd}, false},
		{"abc", nil, true},
		{"zz", nil, true},
		{"0g", nil, true},
	}
	for _, tt := range tests {
		got, err := DecodeHex(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("DecodeHex(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			continue
		}
		if !tt.wantErr && !bytes.Equal(got, tt.want) {
			t.Errorf("DecodeHex(%q) = %x, want %x", tt.in, got, tt.want)
		}
	}
}

func TestParseHexUint(t *testing.T) {
	tests := []struct {
		in      string
		want    uint64
		wantErr bool
	}{
		{"0", 0, false},
		{"1f", 0x1f, false},
		{"DEADbeef", 0xdeadbeef, false},
		{"ffffffffffffffff", ^uint64(0), false},
		{"0000000000000000001", 1, false},
		{"10000000000000000", 0, true},
		{"", 0, true},
		{"0x10", 0, true},
		{"-1", 0, true},
		{"12 ", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseHexUint(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseHexUint(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			continue
		}
		if got != tt.want {
			t.Errorf("ParseHexUint(%q) = %#x, want %#x", tt.in, got, tt.want)
		}
	}
}

func TestParseThreadID(t *testing.T) {
	tests := []struct {
		in       string
		pid, tid int64
		wantErr  bool
	}{
		{"p1a.1b", 0x1a, 0x1b, false},
		{"p1a", 0x1a, -1, false},
		{"p-1", -1, -1, false},
		{"p-1.-1", -1, -1, false},
		{"p5.0", 5, 0, false},
		{"1b", 0, 0x1b, false},
		{"-1", 0, -1, false},
		{"0", 0, 0, false},
		{"", 0, 0, true},
		{"p", 0, 0, true},
		{"p1.", 0, 0, true},
		{"p.1", 0, 0, true},
		{"-2", 0, 0, true},
		{"xyz", 0, 0, true},
		{"p1.2.3", 0, 0, true},
		{"ffffffffffffffff", 0, 0, true},
	}
	for _, tt := range tests {
		pid, tid, err := ParseThreadID(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseThreadID(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			continue
		}
		if pid != tt.pid || tid != tt.tid {
			t.Errorf("ParseThreadID(%q) = %d, %d; want %d, %d", tt.in, pid, tid, tt.pid, tt.tid)
		}
	}
}

func TestFormatThreadID(t *testing.T) {
	tests := []struct {
		pid, tid int
		multi    bool
		want     string
	}{
		{0x1a, 0x1b, true, "p1a.1b"},
		{0x1a, 0x1b, false, "1b"},
		{-1, -1, true, "p-1.-1"},
		{5, -1, false, "-1"},
	}
	for _, tt := range tests {
		if got := FormatThreadID(tt.pid, tt.tid, tt.multi); got != tt.want {
			t.Errorf("FormatThreadID(%d, %d, %v) = %q, want %q", tt.pid, tt.tid, tt.multi, got, tt.want)
		}
	}
}

func TestErrorReplies(t *testing.T) {
	tests := []struct {
		code int
		want string
	}{
		{1, "E01"},
		{0x16, "E16"},
		{255, "Eff"},
	}
	for _, tt := range tests {
		if got := string(ErrorReply(tt.code)); got != tt.want {
			t.Errorf("ErrorReply(%d) = %q, want %q", tt.code, got, tt.want)
		}
	}
	msgs := []struct {
		in, want string
	}{
		{"no such file", "E.no such file"},
		{"bad $#*} chars\n\x00é", "E.bad ???? chars????"},
	}
	for _, tt := range msgs {
		if got := string(ErrorMessage(tt.in)); got != tt.want {
			t.Errorf("ErrorMessage(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got := ErrorMessage(strings.Repeat("x", 10000)); len(got) > MaxPacketSize {
		t.Errorf("ErrorMessage of a long message is %d bytes", len(got))
	}
}

func TestMux(t *testing.T) {
	m := NewMux()
	reply := func(s string) Handler { return func([]byte) []byte { return []byte(s) } }
	m.Handle("q", reply("generic q"))
	m.Handle("qXfer:", reply("xfer"))
	m.Handle("qXfer:features:read:", reply("features"))
	m.Handle("qSupported", reply("supported"))
	m.Handle("g", reply("registers"))
	m.Handle("g", reply("registers v2")) // replaces
	m.Handle("vFile:", func(p []byte) []byte { return append([]byte("got "), p...) })
	tests := []struct {
		in        string
		want      string
		wantFound bool
	}{
		{"qSupported:multiprocess+", "supported", true},
		{"qXfer:features:read:target.xml:0,fff", "features", true},
		{"qXfer:auxv:read::0,fff", "xfer", true},
		{"qC", "generic q", true},
		{"g", "registers v2", true},
		{"vFile:close:3", "got vFile:close:3", true},
		{"vCont?", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		got, found := m.Dispatch([]byte(tt.in))
		if found != tt.wantFound || string(got) != tt.want {
			t.Errorf("Dispatch(%q) = %q, %v; want %q, %v", tt.in, got, found, tt.want, tt.wantFound)
		}
	}
}
