//go:build amd64 || arm64

package jit

import (
	"errors"
	"testing"

	"gotpstub/agentexpr"
)

// FuzzCompile feeds arbitrary bytecode to Compile. Compile must never panic;
// whatever Validate accepts must compile (or fall back with a reason), and
// the compiled code must agree with the interpreter.
func FuzzCompile(f *testing.F) {
	for _, src := range []string{
		"const8 2; const8 3; add; end",
		"reg 6; const8 16; add; ref32; ext 32; const8 0; less_signed; end",
		"const8 1; const8 2; less_signed; if_goto l; const8 3; end; l:; const8 4; end",
		"getv 1; setv 0; tracev 1; end",
		"const8 0; const8 8; trace; const8 0; trace_quick 4; end",
		"const8 1; const8 0; div_signed; end",
		"const8 1; const8 2; const8 3; rot; pick 2; swap; pop; end",
	} {
		f.Add(agentexpr.MustAssemble(src))
	}
	f.Add([]byte{0x21, 0x00, 0x00})
	f.Add([]byte{0x26, 0xff, 0xff, 0x27})
	w := newWorld(f)
	arena := newCodeArena(f, 1<<20)
	f.Fuzz(func(t *testing.T, code []byte) {
		e, err := agentexpr.Parse(code)
		if err != nil {
			return
		}
		verr := agentexpr.Validate(e, agentexpr.Limits{NumRegs: testPadRegs, MaxStack: DefaultMaxStack})
		c, cerr := Compile(e, testArch, Options{})
		if verr != nil || cerr != nil {
			if verr == nil && cerr != nil {
				t.Fatalf("Validate accepts % x but Compile fails: %v", code, cerr)
			}
			return
		}
		if c.Fallback != "" {
			return
		}
		arena.reset()
		fn, ok := arena.add(t, c.Text)
		if !ok {
			t.Fatalf("%d bytes of code do not fit the arena", len(c.Text))
		}
		arena.seal(t)
		tsvs := []int64{1, -1, 1 << 40}
		ie := &interpEnv{w: w, tsvs: append([]int64(nil), tsvs...), cap: 512}
		iv, ierr := agentexpr.Eval(e, &agentexpr.Env{Mem: ie, Regs: ie, TSV: ie, Collect: ie, StepLimit: 100000})
		w.reset(len(tsvs), 512)
		copy(w.tsvs, tsvs)
		w.ctx.JumpLimit = 1000
		jv, jcode := w.run(fn)
		// Loops: the interpreter counts instructions, the JIT backward
		// jumps; either running out makes the comparison meaningless.
		if errors.Is(ierr, agentexpr.ErrStepLimit) || jcode == ErrSteps {
			return
		}
		ic, jc := interpClass(ierr), errClass(jcode)
		if !errors.Is(ic, jc) && !(ic == nil && jc == nil) {
			t.Fatalf("% x: interpreter %v, jit code %d", code, ierr, jcode)
		}
		if ierr == nil && iv != jv {
			t.Fatalf("% x: interpreter %#x, jit %#x", code, iv, jv)
		}
	})
}
