//go:build amd64 || arm64

package jit

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"gotpstub/agentexpr"
)

// compileRun assembles src (with "DATA" replaced by the data page address
// and "GUARD" by a guard page address), compiles it with opts and runs it
// with the given TSVs and frame capacity. It also runs the interpreter and
// fails the test if they disagree on value or error class.
func compileRun(t *testing.T, w *world, arena *codeArena, src string, opts Options, tsvs []int64, frameCap int) (uint64, uint64, *Code) {
	t.Helper()
	src = strings.ReplaceAll(src, "DATA", fmt.Sprint(w.dataLo))
	src = strings.ReplaceAll(src, "GUARD", fmt.Sprint(w.guardLo+16))
	bc, err := agentexpr.Assemble(src)
	if err != nil {
		t.Fatalf("assemble %q: %v", src, err)
	}
	e, err := agentexpr.Parse(bc)
	if err != nil {
		t.Fatalf("parse %q: %v", src, err)
	}
	c, err := Compile(e, testArch, opts)
	if err != nil {
		t.Fatalf("compile %q: %v", src, err)
	}
	if c.Fallback != "" {
		return 0, 0, c
	}
	ie := &interpEnv{w: w, tsvs: append([]int64(nil), tsvs...), cap: frameCap}
	iv, ierr := agentexpr.Eval(e, &agentexpr.Env{Mem: ie, Regs: ie, TSV: ie, Collect: ie})
	arena.reset()
	fn, _ := arena.add(t, c.Text)
	arena.seal(t)
	w.reset(len(tsvs), frameCap)
	copy(w.tsvs, tsvs)
	if opts.DirectLoads {
		w.ctx.DirectLo, w.ctx.DirectHi = w.dataLo, w.dataHi
	}
	v, code := w.run(fn)
	if ic, jc := interpClass(ierr), errClass(code); fmt.Sprint(ic) != fmt.Sprint(jc) {
		t.Errorf("%q: interpreter error %v, jit error code %d", src, ierr, code)
	} else if ierr == nil && iv != v {
		t.Errorf("%q: interpreter %#x, jit %#x", src, iv, v)
	}
	return v, code, c
}

func TestSemantics(t *testing.T) {
	w := newWorld(t)
	arena := newCodeArena(t, 1<<16)
	for i := range w.data {
		w.data[i] = byte(i)
	}
	copy(w.data[100:], "hello\x00world")
	binary.LittleEndian.PutUint64(w.data[200:], 0x8877665544332211)
	for i := range w.regs {
		w.regs[i] = uint64(1000 + i)
	}
	tests := []struct {
		name string
		src  string
		want uint64
		err  uint64
	}{
		{"add", "const8 2; const8 3; add; end", 5, 0},
		{"sub wraps", "const8 2; const8 3; sub; end", ^uint64(0), 0},
		{"mul", "const16 1000; const16 1000; mul; end", 1000000, 0},
		{"div signed", "const8 7; ext 8; const8 2; div_signed; end", 3, 0},
		{"div signed negative", "const8 0xf9; ext 8; const8 2; div_signed; end", uint64(0xfffffffffffffffd), 0},
		{"div min by -1", "const64 0x8000000000000000; const8 0xff; ext 8; div_signed; end", 1 << 63, 0},
		{"rem min by -1", "const64 0x8000000000000000; const8 0xff; ext 8; rem_signed; end", 0, 0},
		{"div unsigned", "const8 0xff; ext 8; const8 2; div_unsigned; end", 1<<63 - 1, 0},
		{"rem unsigned", "const8 17; const8 5; rem_unsigned; end", 2, 0},
		{"div by zero", "const8 1; const8 0; div_signed; end", 0, ErrDivZero},
		{"rem by zero", "const8 1; const8 0; rem_unsigned; end", 0, ErrDivZero},
		{"lsh 63", "const8 1; const8 63; lsh; end", 1 << 63, 0},
		{"lsh 64", "const8 1; const8 64; lsh; end", 0, 0},
		{"lsh huge", "const8 1; const64 0x100000000; lsh; end", 0, 0},
		{"rsh_signed 200", "const64 0x8000000000000000; const8 200; rsh_signed; end", ^uint64(0), 0},
		{"rsh_signed positive 64", "const8 5; const8 64; rsh_signed; end", 0, 0},
		{"rsh_unsigned 64", "const8 0xff; ext 8; const8 64; rsh_unsigned; end", 0, 0},
		{"rsh_unsigned 4", "const8 0xf0; const8 4; rsh_unsigned; end", 0xf, 0},
		{"ext 1", "const8 1; ext 1; end", ^uint64(0), 0},
		{"ext 64", "const8 0x80; ext 64; end", 0x80, 0},
		{"zero_ext 0", "const8 0xff; zero_ext 0; end", 0, 0},
		{"zero_ext 32", "const8 0xff; ext 8; zero_ext 32; end", 0xffffffff, 0},
		{"zero_ext 5", "const8 0xff; zero_ext 5; end", 0x1f, 0},
		{"log_not", "const8 0; log_not; end", 1, 0},
		{"bit_not", "const8 0; bit_not; end", ^uint64(0), 0},
		{"equal", "const8 4; const8 4; equal; end", 1, 0},
		{"less_signed", "const8 0xff; ext 8; const8 0; less_signed; end", 1, 0},
		{"less_unsigned", "const8 0xff; ext 8; const8 0; less_unsigned; end", 0, 0},
		{"swap", "const8 1; const8 2; swap; sub; end", 1, 0},
		{"rot", "const8 1; const8 2; const8 3; rot; const8 10; mul; add; const8 10; mul; add; end", 213, 0},
		{"pick 2", "const8 7; const8 8; const8 9; pick 2; end", 7, 0},
		{"dup pop", "const8 7; dup; pop; end", 7, 0},
		{"empty stack end", "end", 0, 0},
		{"reg", "reg 17; end", 1017, 0},
		{"ref8", "const64 DATA; const8 5; add; ref8; end", 5, 0},
		{"ref16", "const64 DATA; const8 200; add; ref16; end", 0x2211, 0},
		{"ref32", "const64 DATA; const8 200; add; ref32; end", 0x44332211, 0},
		{"ref64", "const64 DATA; const8 200; add; ref64; end", 0x8877665544332211, 0},
		{"ref guard", "const64 GUARD; ref8; end", 0, ErrMemory},
		{"ref null", "const8 0; ref64; end", 0, ErrMemory},
		{"ref straddles end", fmt.Sprintf("const64 DATA; const16 %d; add; ref32; end", len(w.data)-2), 0, ErrMemory},
		{"getv", "getv 1; end", 22, 0},
		{"getv unknown", "getv 3; end", 0, ErrTSV},
		{"setv keeps top", "const8 9; setv 0; getv 0; add; end", 18, 0},
		{"setv unknown ignored", "const8 9; setv 7; end", 9, 0},
		{"getv add setv (lock xadd)", "getv 2; const8 5; add; setv 2; getv 2; add; end", 76, 0},
		{"getv add setv, unknown", "getv 4; const8 5; add; setv 4; end", 0, ErrTSV},
		{"getv add ext 64 setv (gdb's teval)", "getv 2; const8 1; add; ext 64; setv 2; end", 34, 0},
		{"getv add setv, big constant", "getv 0; const32 0x80000000; add; setv 0; end", 0x8000000b, 0},
		{"getv add setv into a jump target", "getv 0; const8 1; l:; add; setv 0; end", 12, 0},
		{"tracev unknown", "tracev 7; const8 1; end", 0, ErrCollect},
		{"if_goto taken", "const8 1; if_goto yes; const8 10; end; yes:; const8 20; end", 20, 0},
		{"if_goto not taken", "const8 0; if_goto yes; const8 10; end; yes:; const8 20; end", 10, 0},
		{"fused less taken", "const8 5; const8 1; const8 2; less_signed; if_goto yes; const8 10; end; yes:; end", 5, 0},
		{"fused equal not taken", "const8 1; const8 2; equal; if_goto yes; const8 10; end; yes:; const8 20; end", 10, 0},
		{"fused log_not", "const8 0; log_not; if_goto yes; const8 10; end; yes:; const8 20; end", 20, 0},
		{"goto", "goto l; const8 1; end; l:; const8 2; end", 2, 0},
		{"trace", "const64 DATA; const8 4; trace; const8 1; end", 1, 0},
		{"trace unreadable", "const64 GUARD; const8 4; trace; const8 1; end", 0, ErrCollect},
		{"tracenz stops at NUL", "const64 DATA; const8 100; add; const8 50; tracenz; const8 1; end", 1, 0},
		{"trace_quick keeps addr", "const64 DATA; trace_quick 2; const64 DATA; sub; end", 0, 0},
		{"loop hits jump limit", "l:; goto l", 0, ErrSteps},
	}
	for _, tt := range tests {
		for _, opts := range []Options{{}, {NoFuse: true}, {DirectLoads: true}} {
			v, code, c := compileRun(t, w, arena, tt.src, opts, []int64{11, 22, 33}, 1024)
			if c.Fallback != "" {
				t.Errorf("%s: unexpected fallback %q", tt.name, c.Fallback)
				continue
			}
			if code != tt.err || (code == 0 && v != tt.want) {
				t.Errorf("%s %+v: got %#x err %d, want %#x err %d", tt.name, opts, v, code, tt.want, tt.err)
			}
		}
	}
}

func TestFrameBlocks(t *testing.T) {
	w := newWorld(t)
	arena := newCodeArena(t, 1<<16)
	copy(w.data[100:], "hello\x00world")
	_, code, _ := compileRun(t, w, arena, "const64 DATA; const8 100; add; const8 50; tracenz; tracev 1; const64 DATA; trace_quick 3; end", Options{}, []int64{5, -2}, 1024)
	if code != 0 {
		t.Fatalf("error code %d", code)
	}
	var want []byte
	want = append(want, 'M')
	want = binary.LittleEndian.AppendUint64(want, w.dataLo+100)
	want = binary.LittleEndian.AppendUint16(want, 6)
	want = append(want, "hello\x00"...)
	want = append(want, 'V', 1, 0, 0, 0)
	want = binary.LittleEndian.AppendUint64(want, uint64(0xfffffffffffffffe))
	want = append(want, 'M')
	want = binary.LittleEndian.AppendUint64(want, w.dataLo)
	want = binary.LittleEndian.AppendUint16(want, 3)
	want = append(want, w.data[:3]...)
	if got := w.jitFrame(); string(got) != string(want) {
		t.Errorf("frame\n got % x\nwant % x", got, want)
	}
	// Frame full: the same collection with too little room.
	_, code, _ = compileRun(t, w, arena, "const64 DATA; trace_quick 8; end", Options{}, nil, 18)
	if code != ErrFrameFull {
		t.Errorf("frame of 18 bytes: error code %d, want ErrFrameFull", code)
	}
	// A large trace is split in 65535-byte blocks.
	_, code, _ = compileRun(t, w, arena, "const64 DATA; const32 70000; trace; const8 0; end", Options{}, nil, 1<<20)
	if code != ErrCollect {
		t.Errorf("70000 bytes from an 8 KB page: error code %d, want ErrCollect", code)
	}
}

func TestFallback(t *testing.T) {
	for _, tt := range []struct{ src, why string }{
		{`const8 1; const8 0; const8 0; printf 1 "%d"; const8 0; end`, "printf"},
		{"const8 1; ref_float; end", "floating-point"},
		{"reg 40; end", "register 40"},
	} {
		bc := agentexpr.MustAssemble(tt.src)
		e, err := agentexpr.Parse(bc)
		if err != nil {
			t.Fatal(err)
		}
		c, err := Compile(e, testArch, Options{})
		if err != nil {
			t.Fatalf("%s: %v", tt.src, err)
		}
		if !strings.Contains(c.Fallback, tt.why) || c.Text != nil {
			t.Errorf("%s: fallback %q, text %d bytes; want fallback mentioning %q", tt.src, c.Fallback, len(c.Text), tt.why)
		}
	}
	e, _ := agentexpr.Parse(agentexpr.MustAssemble("const8 1; const8 2; const8 3; add; add; end"))
	c, err := Compile(e, testArch, Options{MaxStack: 2})
	if err != nil || !strings.Contains(c.Fallback, "stack depth") {
		t.Errorf("MaxStack 2: %v %q", err, c.Fallback)
	}
	if _, err := Compile(e, "mips", Options{}); err == nil {
		t.Errorf("Compile for mips succeeded")
	}
}

func TestCompileRejectsInvalid(t *testing.T) {
	for _, src := range []string{
		"add; end",                               // underflow
		"const8 1",                               // runs off the end
		"const8 1; if_goto l; const8 2; l:; end", // depths 0 and 1 meet
	} {
		e, err := agentexpr.Parse(agentexpr.MustAssemble(src))
		if err != nil {
			t.Fatal(err)
		}
		if c, err := Compile(e, testArch, Options{}); err == nil {
			t.Errorf("%q compiled (fallback %q)", src, c.Fallback)
		}
	}
	if _, err := Compile(&agentexpr.Expr{}, testArch, Options{}); err == nil {
		t.Errorf("empty expression compiled")
	}
}

// TestPositionIndependent runs the same bytes from two addresses (one not
// even 16-byte aligned): results must not depend on where the code lies.
func TestPositionIndependent(t *testing.T) {
	w := newWorld(t)
	arena := newCodeArena(t, 1<<16)
	copy(w.data[100:], "hello\x00")
	src := strings.ReplaceAll("const64 DATA; const8 100; add; dup; ref16; swap; const8 9; tracenz; "+
		"const8 3; swap; less_signed; if_goto l; const8 7; end; l:; getv 0; const8 0; div_signed; end", "DATA", fmt.Sprint(w.dataLo))
	e, err := agentexpr.Parse(agentexpr.MustAssemble(src))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Compile(e, testArch, Options{})
	if err != nil || c.Fallback != "" {
		t.Fatal(err, c.Fallback)
	}
	if len(c.Relocs) != 0 {
		t.Errorf("relocations: %v", c.Relocs)
	}
	padding := make([]byte, 1000+4) // keeps arm64's 4-byte alignment
	fn1, _ := arena.add(t, c.Text)
	arena.add(t, padding)
	shifted := append(append([]byte(nil), padding[:20]...), c.Text...)
	fn2, _ := arena.add(t, shifted)
	fn2 += 20
	arena.seal(t)
	var results [2][3]uint64
	for i, fn := range []uintptr{fn1, fn2} {
		w.reset(1, 100)
		v, code := w.run(fn)
		results[i] = [3]uint64{v, code, w.ctx.FrameUsed}
	}
	if results[0] != results[1] {
		t.Errorf("results differ by placement: %v vs %v", results[0], results[1])
	}
	if results[0][1] != ErrDivZero || results[0][2] != 11+6 {
		t.Errorf("got (value, err, frame used) %v, want err %d after a 17-byte block", results[0], ErrDivZero)
	}
}

func TestARM64DeepStackFallsBack(t *testing.T) {
	var src strings.Builder
	for range 600 {
		src.WriteString("const8 1; ")
	}
	for range 599 {
		src.WriteString("add; ")
	}
	src.WriteString("end")
	e, err := agentexpr.Parse(agentexpr.MustAssemble(src.String()))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Compile(e, "arm64", Options{MaxStack: 1000})
	if err != nil || !strings.Contains(c.Fallback, "too deep") {
		t.Errorf("600-deep stack on arm64: %v, fallback %q", err, c.Fallback)
	}
	c, err = Compile(e, "amd64", Options{MaxStack: 1000})
	if err != nil || c.Fallback != "" || c.StackBytes < 8*600 {
		t.Errorf("600-deep stack on amd64: %v, fallback %q, %d stack bytes", err, c.Fallback, c.StackBytes)
	}
}
