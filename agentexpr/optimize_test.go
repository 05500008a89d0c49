package agentexpr

import (
	"bytes"
	"errors"
	"testing"
)

func TestOptimizeRewrites(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"fold add", "const8 2; const8 3; add; end", "const8 5; end"},
		{"fold chain", "const8 2; const8 3; add; const8 4; mul; end", "const8 20; end"},
		{"fold to negative keeps short form", "const8 1; const8 2; sub; end", "const8 255; ext 8; end"},
		{"minimal const encoding", "const64 5; end", "const8 5; end"},
		{"ext after fitting const", "const8 0x7f; ext 8; end", "const8 0x7f; end"},
		{"const ext kept when shortest", "const8 0xff; ext 8; end", "const8 0xff; ext 8; end"},
		{"no fold of div by zero", "const8 1; const8 0; div_signed; end", "const8 1; const8 0; div_signed; end"},
		{"fold div", "const8 7; const8 2; div_unsigned; end", "const8 3; end"},
		{"fold unary", "const8 0; log_not; bit_not; end", "const8 254; ext 8; end"},
		{"const pop", "reg 1; const8 5; pop; end", "reg 1; end"},
		{"dup pop", "reg 1; dup; pop; end", "reg 1; end"},
		{"pick pop", "reg 1; pick 0; pop; end", "reg 1; end"},
		{"swap swap", "reg 1; reg 2; swap; swap; sub; end", "reg 1; reg 2; sub; end"},
		{"swap before commutative op", "reg 1; reg 2; swap; mul; end", "reg 1; reg 2; mul; end"},
		{"swap before sub kept", "reg 1; reg 2; swap; sub; end", "reg 1; reg 2; swap; sub; end"},
		{"dup swap", "reg 1; dup; swap; sub; end", "reg 1; dup; sub; end"},
		{"pick 0", "reg 1; pick 0; add; end", "reg 1; dup; add; end"},
		{"reg pop kept (can fail)", "reg 1; pop; const8 1; end", "reg 1; pop; const8 1; end"},
		{"ext 64", "reg 1; ext 64; end", "reg 1; end"},
		{"zero_ext 64", "reg 1; zero_ext 64; end", "reg 1; end"},
		{"zero_ext after ref32", "reg 1; ref32; zero_ext 32; end", "reg 1; ref32; end"},
		{"ext wider than ref", "reg 1; ref16; ext 32; end", "reg 1; ref16; end"},
		{"ext same width as ref kept", "reg 1; ref16; ext 16; end", "reg 1; ref16; ext 16; end"},
		{"ext ext", "reg 1; ext 8; ext 16; end", "reg 1; ext 8; end"},
		{"zero_ext zero_ext", "reg 1; zero_ext 16; zero_ext 8; end", "reg 1; zero_ext 8; end"},
		{"zero_ext then ext", "reg 1; zero_ext 8; ext 32; end", "reg 1; zero_ext 8; end"},
		{"ext then narrower zero_ext", "reg 1; ext 32; zero_ext 16; end", "reg 1; zero_ext 16; end"},
		{"boolean ext", "reg 1; reg 2; less_signed; ext 32; end", "reg 1; reg 2; less_signed; end"},
		{"identities", "reg 1; const8 0; add; const8 1; mul; const8 0; lsh; end", "reg 1; end"},
		{"if_goto true", "const8 1; if_goto a; reg 1; end; a:; reg 2; end", "reg 2; end"},
		{"if_goto false", "const8 0; if_goto a; reg 1; end; a:; reg 2; end", "reg 1; end"},
		{"if_goto next", "reg 1; reg 2; if_goto a; a:; end", "reg 1; reg 2; pop; end"},
		{"double log_not before if_goto", "reg 1; log_not; log_not; if_goto a; const8 1; end; a:; const8 2; end",
			"reg 1; if_goto a; const8 1; end; a:; const8 2; end"},
		{"goto next", "reg 1; goto a; a:; end", "reg 1; end"},
		{"goto end", "reg 1; if_goto a; const8 1; goto b; a:; const8 2; b:; end", "reg 1; if_goto a; const8 1; end; a:; const8 2; end"},
		{"jump threading", "reg 1; if_goto a; const8 1; end; a:; goto b; b2:; end; b:; const8 2; goto b2",
			"reg 1; if_goto a; const8 1; end; a:; const8 2; end"},
		{"dead code", "reg 1; end; const8 1; add; end", "reg 1; end"},
		{"no rewrite across a jump target", "reg 3; reg 1; if_goto a; pop; const8 5; a:; pop; const8 1; end",
			"reg 3; reg 1; if_goto a; pop; const8 5; a:; pop; const8 1; end"},
		{"side effects kept", "reg 1; ref8; pop; const8 1; const8 2; setv 1; add; end", "reg 1; ref8; pop; const8 1; const8 2; setv 1; add; end"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := Parse(MustAssemble(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if err := Validate(e, Limits{}); err != nil {
				t.Fatalf("input invalid: %v", err)
			}
			o, err := Optimize(e)
			if err != nil {
				t.Fatal(err)
			}
			want := MustAssemble(tt.want)
			if !bytes.Equal(o.Code, want) {
				w, _ := Parse(want)
				t.Errorf("optimised:\n%swant:\n%s", Disassemble(o), Disassemble(w))
			}
			if o.MaxDepth == 0 && len(o.Insns) > 1 {
				t.Errorf("result not validated (MaxDepth 0)")
			}
		})
	}
}

func TestOptimizeDoesNotModifyInput(t *testing.T) {
	code := MustAssemble("const8 2; const8 3; add; end")
	e, _ := Parse(code)
	before := Disassemble(e)
	if _, err := Optimize(e); err != nil {
		t.Fatal(err)
	}
	if Disassemble(e) != before || !bytes.Equal(e.Code, code) {
		t.Errorf("input changed")
	}
}

func TestOptimizeRejectsInvalid(t *testing.T) {
	e, _ := Parse(MustAssemble("add; end"))
	if _, err := Optimize(e); !errors.Is(err, ErrStackUnderflow) {
		t.Errorf("Optimize of invalid code: %v", err)
	}
	if _, err := Optimize(nil); err == nil {
		t.Errorf("Optimize(nil) succeeded")
	}
}

func TestOptimizeInfiniteLoopStaysLoop(t *testing.T) {
	e, _ := Parse(MustAssemble("a:; goto b; b:; goto a"))
	o, err := Optimize(e)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Eval(o, &Env{StepLimit: 100}); !errors.Is(err, ErrStepLimit) {
		t.Errorf("optimised infinite loop: %v\n%s", err, Disassemble(o))
	}
}
