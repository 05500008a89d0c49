package agentexpr

import (
	"errors"
	"math"
	"reflect"
	"testing"
)

func newTestEnv() (*Env, *recorder, fakeTSVs) {
	rec := &recorder{}
	tsv := fakeTSVs{1: 41, 2: -5}
	mem := &fakeMemory{regions: map[uint64][]byte{
		0x1000: {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x88, 0xff},
		0x2000: []byte("hello\x00world"),
		0x3000: []byte("abc"), // no NUL before the end of the region
	}}
	regs := fakeRegisters{0: 7, 6: 0xffffffff80000000, 16: 0x401000}
	return &Env{Mem: mem, Regs: regs, TSV: tsv, Collect: rec, Out: rec}, rec, tsv
}

func TestEvalSemantics(t *testing.T) {
	const minInt = "0x8000000000000000"
	tests := []struct {
		name string
		src  string
		want uint64
	}{
		{"add", "const8 2; const8 3; add; end", 5},
		{"sub order", "const8 2; const8 3; sub; end", math.MaxUint64},
		{"mul wraps", "const64 0x8000000000000000; const8 2; mul; end", 0},
		{"div signed", "const8 7; ext 8; const8 -2; ext 8; div_signed; end", math.MaxUint64 - 2},
		{"div unsigned", "const8 7; const8 2; div_unsigned; end", 3},
		{"rem signed negative", "const8 -7; ext 8; const8 2; rem_signed; end", math.MaxUint64},
		{"rem unsigned", "const8 7; const8 4; rem_unsigned; end", 3},
		{"INT64_MIN / -1", "const64 " + minInt + "; const8 -1; ext 8; div_signed; end", 1 << 63},
		{"INT64_MIN % -1", "const64 " + minInt + "; const8 -1; ext 8; rem_signed; end", 0},
		{"lsh", "const8 1; const8 63; lsh; end", 1 << 63},
		{"lsh 64", "const8 1; const8 64; lsh; end", 0},
		{"lsh huge", "const8 1; const64 0xffffffffffffffff; lsh; end", 0},
		{"rsh_signed 4", "const64 " + minInt + "; const8 4; rsh_signed; end", 0xf800000000000000},
		{"rsh_signed 64 negative", "const64 " + minInt + "; const8 64; rsh_signed; end", math.MaxUint64},
		{"rsh_signed 200 positive", "const8 0x7f; const8 200; rsh_signed; end", 0},
		{"rsh_unsigned 64", "const64 " + minInt + "; const8 64; rsh_unsigned; end", 0},
		{"rsh_unsigned 63", "const64 " + minInt + "; const8 63; rsh_unsigned; end", 1},
		{"log_not 0", "const8 0; log_not; end", 1},
		{"log_not 5", "const8 5; log_not; end", 0},
		{"bit ops", "const8 0xc; const8 0xa; bit_and; const8 0x1; bit_or; const8 0xf; bit_xor; end", 6},
		{"bit_not", "const8 0; bit_not; end", math.MaxUint64},
		{"equal", "const8 3; const8 3; equal; end", 1},
		{"less_signed", "const8 -1; ext 8; const8 1; less_signed; end", 1},
		{"less_unsigned", "const8 -1; ext 8; const8 1; less_unsigned; end", 0},
		{"ext 8 negative", "const8 0x80; ext 8; end", 0xffffffffffffff80},
		{"ext 8 positive", "const8 0x7f; ext 8; end", 0x7f},
		{"ext 1", "const8 1; ext 1; end", math.MaxUint64},
		{"ext 64 no-op", "const8 0x80; ext 64; end", 0x80},
		{"ext 200 no-op", "const64 " + minInt + "; ext 200; end", 1 << 63},
		{"ext 32 upper garbage", "const64 0x1234567880000000; ext 32; end", 0xffffffff80000000},
		{"zero_ext 8", "const16 0x1ff; zero_ext 8; end", 0xff},
		{"zero_ext 0", "const16 0x1ff; zero_ext 0; end", 0},
		{"zero_ext 64", "const8 -1; ext 8; zero_ext 64; end", math.MaxUint64},
		{"ref8", "const16 0x1007; ref8; end", 0x88},
		{"ref16", "const16 0x1000; ref16; end", 0x0201},
		{"ref32 zero-extends", "const16 0x1004; ref32; end", 0x88070605},
		{"ref64", "const16 0x1000; ref64; end", 0x8807060504030201},
		{"ref32 then ext", "const16 0x1004; ref32; ext 32; end", 0xffffffff88070605},
		{"unaligned ref16", "const16 0x1001; ref16; end", 0x0302},
		{"reg", "reg 6; end", 0xffffffff80000000},
		{"if_goto taken", "const8 1; if_goto yes; const8 10; end; yes:; const8 20; end", 20},
		{"if_goto not taken", "const8 0; if_goto yes; const8 10; end; yes:; const8 20; end", 10},
		{"goto", "goto skip; const8 10; end; skip:; const8 30; end", 30},
		{"loop sums 1..5", "const8 0; const8 5; top:; dup; if_goto body; pop; end; body:; swap; pick 1; add; swap; const8 1; sub; goto top", 15},
		{"dup", "const8 4; dup; add; end", 8},
		{"pop", "const8 4; const8 5; pop; end", 4},
		{"swap", "const8 4; const8 5; swap; sub; end", 1},
		{"pick 0 is dup", "const8 4; pick 0; add; end", 8},
		{"pick 2", "const8 1; const8 2; const8 3; pick 2; end", 1},
		{"rot top", "const8 1; const8 2; const8 3; rot; end", 2},
		{"rot order", "const8 1; const8 2; const8 3; rot; const8 100; mul; add; const8 100; mul; add; end", 20103},
		{"getv", "getv 1; end", 41},
		{"getv negative", "getv 2; end", uint64(math.MaxUint64 - 4)},
		{"setv leaves value", "const8 9; setv 3; const8 1; add; end", 10},
		{"end on empty stack", "end", 0},
		{"end with two items", "const8 1; const8 2; end", 2},
		{"const64 big-endian", "const64 0x0102030405060708; end", 0x0102030405060708},
		{"const16 not sign-extended", "const16 0xffff; end", 0xffff},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := Parse(MustAssemble(tt.src))
			if err != nil {
				t.Fatal(err)
			}
			if err := Validate(e, Limits{}); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			env, _, _ := newTestEnv()
			got, err := Eval(e, env)
			if err != nil {
				t.Fatalf("Eval: %v", err)
			}
			if got != tt.want {
				t.Errorf("Eval = %#x, want %#x\n%s", got, tt.want, Disassemble(e))
			}
		})
	}
}

func TestEvalRotPermutation(t *testing.T) {
	// a b c => c a b: after rot the stack from the bottom is 3 1 2.
	e, err := Parse(MustAssemble("const8 1; const8 2; const8 3; rot; setv 10; pop; setv 11; pop; setv 12; end"))
	if err != nil {
		t.Fatal(err)
	}
	env, _, tsv := newTestEnv()
	if _, err := Eval(e, env); err != nil {
		t.Fatal(err)
	}
	if tsv[10] != 2 || tsv[11] != 1 || tsv[12] != 3 {
		t.Errorf("after rot: top=%d next=%d third=%d, want 2 1 3", tsv[10], tsv[11], tsv[12])
	}
}

func TestEvalErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want error
	}{
		{"div by zero", "const8 1; const8 0; div_signed; end", ErrDivideByZero},
		{"udiv by zero", "const8 1; const8 0; div_unsigned; end", ErrDivideByZero},
		{"rem by zero", "const8 1; const8 0; rem_signed; end", ErrDivideByZero},
		{"urem by zero", "const8 1; const8 0; rem_unsigned; end", ErrDivideByZero},
		{"unreadable", "const16 0x5000; ref32; end", ErrUnreadable},
		{"partly unreadable", "const16 0x1006; ref64; end", ErrUnreadable},
		{"bad register", "reg 99; end", ErrBadRegister},
		{"unknown tsv", "getv 77; end", ErrUnknownTSV},
		{"underflow", "add; end", ErrStackUnderflow},
		{"pick too deep", "const8 1; pick 1; end", ErrStackUnderflow},
		{"infinite loop", "top:; goto top", ErrStepLimit},
		{"off the end", "const8 1", ErrNoEnd},
		{"float", "const8 1; l_to_d; end", ErrFloat},
		{"invalid2", "invalid2; end", ErrInvalidOpcode},
		{"jump into immediate", "goto 1; end", ErrBadJump},
		{"ext 0", "const8 1; ext 0; end", ErrBadOperand},
		{"tracenz unreadable", "const16 0x3000; const8 10; tracenz; end", ErrUnreadable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := Parse(MustAssemble(tt.src))
			if err != nil {
				t.Fatal(err)
			}
			env, _, _ := newTestEnv()
			env.StepLimit = 1000
			_, err = Eval(e, env)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Eval error = %v, want %v", err, tt.want)
			}
			var ee *EvalError
			if !errors.As(err, &ee) {
				t.Fatalf("error %T is not an *EvalError", err)
			}
		})
	}
}

func TestEvalUnreadableKeepsCause(t *testing.T) {
	e, _ := Parse(MustAssemble("const16 0x5000; ref8; end"))
	env, _, _ := newTestEnv()
	_, err := Eval(e, env)
	if !errors.Is(err, ErrUnreadable) || !errors.Is(err, errFault) {
		t.Fatalf("error %v should wrap both ErrUnreadable and the memory error", err)
	}
}

func TestEvalCollection(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []block
		top  uint64
	}{
		{"trace", "const16 0x1000; const8 4; trace; const8 7; end", []block{{0x1000, 4, -1}}, 7},
		{"trace_quick keeps addr", "const16 0x1000; trace_quick 8; end", []block{{0x1000, 8, -1}}, 0x1000},
		{"trace16 keeps addr", "const16 0x1000; trace16 300; end", []block{{0x1000, 300, -1}}, 0x1000},
		{"tracenz stops at NUL", "const16 0x2000; const8 100; tracenz; end", []block{{0x2000, 6, -1}}, 0},
		{"tracenz limit", "const16 0x2000; const8 3; tracenz; end", []block{{0x2000, 3, -1}}, 0},
		{"tracenz limit equals length", "const16 0x2000; const8 6; tracenz; end", []block{{0x2000, 6, -1}}, 0},
		{"tracenz zero limit", "const16 0x2000; const8 0; tracenz; end", nil, 0},
		{"tracenz limit at region end", "const16 0x3000; const8 3; tracenz; end", []block{{0x3000, 3, -1}}, 0},
		{"tracev keeps stack", "getv 1; tracev 1; end", []block{{TSV: 1}}, 41},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := Parse(MustAssemble(tt.src))
			if err != nil {
				t.Fatal(err)
			}
			if err := Validate(e, Limits{}); err != nil {
				t.Fatal(err)
			}
			if !e.Collects {
				t.Error("Collects = false")
			}
			env, rec, _ := newTestEnv()
			top, err := Eval(e, env)
			if err != nil {
				t.Fatal(err)
			}
			if top != tt.top {
				t.Errorf("top = %#x, want %#x", top, tt.top)
			}
			if !reflect.DeepEqual(rec.blocks, tt.want) {
				t.Errorf("collected %v, want %v", rec.blocks, tt.want)
			}
		})
	}
}

func TestEvalPrintf(t *testing.T) {
	// GDB pushes the arguments last first, then channel and function.
	e, err := Parse(MustAssemble(`const16 0x2000; const8 -3; ext 8; const8 0; const8 0; printf 2 "%d:%s\n"; end`))
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(e, Limits{}); err != nil {
		t.Fatal(err)
	}
	env, rec, _ := newTestEnv()
	if _, err := Eval(e, env); err != nil {
		t.Fatal(err)
	}
	want := []string{`"%d:%s\n" [18446744073709551613 8192]`}
	if !reflect.DeepEqual(rec.printfs, want) {
		t.Fatalf("printf calls %v, want %v", rec.printfs, want)
	}
}

func TestEvalDeepStack(t *testing.T) {
	var src string
	for range 1500 {
		src += "const8 1; "
	}
	for range 1499 {
		src += "add; "
	}
	e, err := Parse(MustAssemble(src + "end"))
	if err != nil {
		t.Fatal(err)
	}
	// Unvalidated, the default limit applies.
	if _, err := Eval(e, nil); !errors.Is(err, ErrStackOverflow) {
		t.Fatalf("Eval beyond the default stack: %v", err)
	}
	if err := Validate(e, Limits{}); !errors.Is(err, ErrStackOverflow) {
		t.Fatalf("Validate with the default limit: %v", err)
	}
	// Validated with a larger limit, Eval honours it.
	if err := Validate(e, Limits{MaxStack: 2000}); err != nil {
		t.Fatal(err)
	}
	if got, err := Eval(e, nil); err != nil || got != 1500 {
		t.Fatalf("Eval = %d, %v; want 1500", got, err)
	}
}
