package agentexpr

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateAccepts(t *testing.T) {
	tests := []struct {
		name     string
		src      string
		maxDepth int
	}{
		{"const end", "const8 1; end", 1},
		{"bare end", "end", 0},
		{"if else", "reg 0; if_goto a; const8 1; goto b; a:; const8 2; b:; end", 1},
		{"loop", "const8 3; top:; dup; if_goto body; end; body:; const8 1; sub; goto top", 2},
		{"pick", "const8 1; const8 2; pick 1; end", 3},
		{"rot", "const8 1; const8 2; const8 3; rot; end", 3},
		{"tracev no push", "tracev 1; end", 0},
		{"setv", "const8 1; setv 2; end", 1},
		{"printf", `const8 7; const8 0; const8 0; printf 1 "%ld\n"; end`, 3},
		{"ext 64 and zero_ext 64 as gdb emits", "reg 16; zero_ext 64; ext 64; end", 1},
		{"dead code may underflow", "end; add", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := Parse(MustAssemble(tt.src))
			if err != nil {
				t.Fatal(err)
			}
			if err := Validate(e, Limits{NumRegs: 17}); err != nil {
				t.Fatal(err)
			}
			if e.MaxDepth != tt.maxDepth {
				t.Errorf("MaxDepth = %d, want %d", e.MaxDepth, tt.maxDepth)
			}
		})
	}
}

func TestValidateRejects(t *testing.T) {
	tests := []struct {
		name   string
		code   []byte
		lim    Limits
		off    int
		op     Op
		class  error
		phrase string
	}{
		{"empty", nil, Limits{}, -1, 0, ErrEmpty, "empty"},
		{"underflow", MustAssemble("const8 1; add; end"), Limits{}, 2, OpAdd, ErrStackUnderflow, "needs 2 stack items, only 1"},
		{"depth differs at a join", MustAssemble("reg 0; if_goto a; const8 1; a:; pop; end"), Limits{}, 6, OpConst8, ErrDepthMismatch, "depth"},
		{"pick too deep", MustAssemble("const8 1; pick 1; end"), Limits{}, 2, OpPick, ErrStackUnderflow, "needs 2"},
		{"printf args", MustAssemble(`const8 0; const8 0; printf 1 "%d"; end`), Limits{}, 4, OpPrintf, ErrStackUnderflow, "needs 3"},
		{"overflow", MustAssemble("const8 1; const8 1; const8 1; end"), Limits{MaxStack: 2}, 4, OpConst8, ErrStackOverflow, "exceeds the limit 2"},
		{"growing loop", MustAssemble("top:; const8 1; goto top"), Limits{}, 2, OpGoto, ErrDepthMismatch, "another path"},
		{"no end", MustAssemble("const8 1"), Limits{}, 0, OpConst8, ErrNoEnd, "off the end"},
		{"if_goto falls off", MustAssemble("const8 1; if_goto 0"), Limits{}, 2, OpIfGoto, ErrNoEnd, "off the end"},
		{"jump outside", MustAssemble("goto 100; end"), Limits{}, 0, OpGoto, ErrBadJump, "outside the code"},
		{"jump into immediate", MustAssemble("const8 1; if_goto 1; end"), Limits{}, 2, OpIfGoto, ErrBadJump, "inside an instruction"},
		{"float prefix", []byte{0x22, 1, 0x01, 0x27}, Limits{}, 2, OpFloat, ErrFloat, "floating-point opcode 0x01"},
		{"ref_double", []byte{0x22, 1, 0x1c, 0x27}, Limits{}, 2, OpRefDouble, ErrFloat, "0x1c"},
		{"d_to_l", []byte{0x22, 1, 0x1f, 0x27}, Limits{}, 2, OpDToL, ErrFloat, "0x1f"},
		{"invalid2", []byte{0x31, 0x27}, Limits{}, 0, OpInvalid2, ErrInvalidOpcode, "0x31"},
		{"register range", MustAssemble("reg 17; end"), Limits{NumRegs: 17}, 0, OpReg, ErrBadRegister, "register 17"},
		{"ext 0", MustAssemble("const8 1; ext 0; end"), Limits{}, 2, OpExt, ErrBadOperand, "0 bits"},
		{"printf count", MustAssemble(`const8 0; const8 0; const8 0; printf 1 "%d %d"; end`), Limits{}, 6, OpPrintf, ErrBadFormat, "takes 2 arguments"},
		{"printf float", MustAssemble(`const8 0; const8 0; const8 0; printf 1 "%f"; end`), Limits{}, 6, OpPrintf, ErrBadFormat, "floating-point"},
		{"printf unterminated", []byte{0x22, 0, 0x22, 0, 0x34, 0, 0, 1, 'x', 0x27}, Limits{}, 4, OpPrintf, ErrBadFormat, "NUL-terminated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := Parse(tt.code)
			if err != nil {
				t.Fatal(err)
			}
			err = Validate(e, tt.lim)
			if !errors.Is(err, tt.class) {
				t.Fatalf("Validate = %v, want class %v", err, tt.class)
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("%T is not a *ValidationError", err)
			}
			if ve.Off != tt.off || (tt.off >= 0 && ve.Op != tt.op) {
				t.Errorf("error at offset %d (%s), want %d (%s): %v", ve.Off, ve.Op, tt.off, tt.op, err)
			}
			if !strings.Contains(err.Error(), tt.phrase) {
				t.Errorf("message %q does not mention %q", err, tt.phrase)
			}
			if tt.off >= 0 && !strings.Contains(err.Error(), tt.op.String()) {
				t.Errorf("message %q does not name the op %s", err, tt.op)
			}
		})
	}
}

func TestValidateAllowFloat(t *testing.T) {
	e, _ := Parse([]byte{0x22, 1, 0x1e, 0x27})
	if err := Validate(e, Limits{AllowFloat: true}); err != nil {
		t.Fatalf("AllowFloat: %v", err)
	}
	if _, err := Eval(e, nil); !errors.Is(err, ErrFloat) {
		t.Fatalf("Eval of l_to_d: %v, want ErrFloat", err)
	}
}
