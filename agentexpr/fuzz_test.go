package agentexpr

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
)

// fuzzSeeds are bytecodes every fuzz target starts from.
func fuzzSeeds() [][]byte {
	seeds := [][]byte{
		{},
		{0x27},
		{0x22, 0x05, 0x27},
		{0x34, 0x01, 0x00, 0x03, '%', 'd', 0, 0x27},
		{0x21, 0x00, 0x00},
		{0x01, 0x31, 0xff},
		MustAssemble("reg 6; const8 16; add; trace_quick 4; ref32; ext 32; end"),
		MustAssemble("const8 3; top:; dup; if_goto body; end; body:; const8 1; sub; goto top"),
		MustAssemble(`const16 0x2000; const8 50; tracenz; getv 1; tracev 1; const8 1; add; setv 1; end`),
		MustAssemble(`const8 1; const8 2; const8 3; rot; pick 2; swap; const8 0; const8 0; printf 1 "%lx"; end`),
	}
	r := rand.New(rand.NewPCG(5, 6))
	for range 10 {
		seeds = append(seeds, randomProgram(r))
	}
	return seeds
}

func FuzzParse(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, code []byte) {
		e, err := Parse(code)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) || de.Off < 0 || de.Off >= len(code) {
				t.Fatalf("bad decode error %v", err)
			}
			return
		}
		// Decoding is lossless: the instructions re-encode to the input.
		re, err := Encode(nil, e.Insns)
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		if !bytes.Equal(re, code) {
			t.Fatalf("round trip %x != %x", re, code)
		}
		_ = Disassemble(e)
	})
}

func FuzzValidate(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s, uint8(0), uint16(0))
	}
	f.Fuzz(func(t *testing.T, code []byte, numRegs uint8, maxStack uint16) {
		e, err := Parse(code)
		if err != nil {
			return
		}
		lim := Limits{NumRegs: int(numRegs), MaxStack: int(maxStack)}
		if err := Validate(e, lim); err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Validate error %T %v", err, err)
			}
			return
		}
		// A validated expression never underflows, overflows, jumps badly
		// or runs off the end when evaluated.
		env, _, _ := randomEnv(rand.New(rand.NewPCG(1, uint64(len(code)))))
		_, err = Eval(e, env)
		for _, never := range []error{ErrStackUnderflow, ErrStackOverflow, ErrBadJump, ErrNoEnd, ErrFloat, ErrInvalidOpcode, ErrBadOperand} {
			if errors.Is(err, never) {
				t.Fatalf("validated expression failed with %v\n%s", err, Disassemble(e))
			}
		}
		if errors.Is(err, ErrBadFormat) {
			t.Fatalf("validated printf failed: %v", err)
		}
		_ = Explain(e)
	})
}

func FuzzEval(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s, uint64(1))
	}
	f.Fuzz(func(t *testing.T, code []byte, seed uint64) {
		e, err := Parse(code)
		if err != nil {
			return
		}
		// Eval must not panic on any parsed expression, valid or not.
		env, _, _ := randomEnv(rand.New(rand.NewPCG(seed, 3)))
		env.StepLimit = 5000
		_, err = Eval(e, env)
		if err != nil {
			var ee *EvalError
			if !errors.As(err, &ee) {
				t.Fatalf("Eval error %T %v", err, err)
			}
		}
	})
}

func FuzzOptimize(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s, uint64(1))
	}
	f.Fuzz(func(t *testing.T, code []byte, seed uint64) {
		e, err := Parse(code)
		if err != nil || Validate(e, optLimits) != nil {
			return
		}
		o, err := Optimize(e)
		if err != nil {
			t.Fatalf("Optimize of a valid expression: %v\n%s", err, Disassemble(e))
		}
		if len(o.Code) > len(e.Code) {
			t.Fatalf("optimised code grew\n%s", Explain(e))
		}
		want, got := runOutcome(e, seed), runOutcome(o, seed)
		if want.Class == errorClass(ErrStepLimit) || got.Class == errorClass(ErrStepLimit) {
			return // fewer instructions legitimately reach the limit later
		}
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("original %+v\noptimised %+v\n%s", want, got, Explain(e))
		}
	})
}

func FuzzFormatC(f *testing.F) {
	for _, s := range []string{"%d", "%s|%5.2s", "%#x %lu %zd", `a\tb\n%%`, "%-08.3ld", "%c%p", "%", `\`, `"x`} {
		f.Add(s, uint64(0x2000), uint64(5))
	}
	f.Fuzz(func(t *testing.T, format string, a, b uint64) {
		mem := &fakeMemory{regions: map[uint64][]byte{0x2000: []byte("str\x00")}}
		n, err := FormatArgCount(format)
		if err != nil {
			if !errors.Is(err, ErrBadFormat) {
				t.Fatalf("FormatArgCount error %v is not ErrBadFormat", err)
			}
			return
		}
		args := []uint64{a, b, a, b}
		if n > len(args) {
			return
		}
		if _, err := FormatC(format, args[:n], mem); err != nil && !errors.Is(err, ErrUnreadable) {
			t.Fatalf("FormatC(%q) of an accepted format: %v", format, err)
		}
	})
}

func FuzzParseGDBListing(f *testing.F) {
	f.Add("Scope: 0x1\nReg mask: 00\n  0  const8 2\n  2  end\n")
	f.Add("  0  printf \"%d\\n\", 1 args\n")
	f.Add("  0  const64 -1\n  9  goto 0\n")
	f.Fuzz(func(t *testing.T, listing string) {
		code, err := ParseGDBListing(listing)
		if err != nil {
			return
		}
		if _, err := Parse(code); err != nil {
			t.Fatalf("listing produced undecodable code %x: %v", code, err)
		}
	})
}

func FuzzAssemble(f *testing.F) {
	f.Add("const8 1; l:; goto l")
	f.Add(`printf 1 "%d"; end`)
	f.Fuzz(func(t *testing.T, src string) {
		code, err := Assemble(src)
		if err != nil {
			return
		}
		if _, err := Parse(code); err != nil {
			t.Fatalf("Assemble produced undecodable code %x: %v", code, err)
		}
	})
}
