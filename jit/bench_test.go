//go:build amd64 || arm64

package jit

import (
	"fmt"
	"testing"

	"gotpstub/agentexpr"
)

// Benchmarks on gdb 13's bytecode for the golden conditions (see
// golden_test.go) plus two register-only conditions. Results and the
// command are in BENCHMARKS.md.

var benchConds = []struct {
	name string
	src  string // agentexpr assembly; "" means take golden[index]
	gold int
}{
	{"regs_only", "reg 0; reg 3; add; const8 100; less_signed; end", -1},
	{"regs_branchy", "reg 0; const8 10; less_signed; if_goto l; reg 1; const8 3; mul; reg 2; add; end; l:; reg 4; end", -1},
	{"gdb_2a_3b_gt_0", "", 0},
	{"gdb_xy_table_eq", "", 1},
	{"gdb_list_and", "", 2},
	{"gdb_div_rem", "", 3},
}

func benchExpr(b *testing.B, w *world, i int) *agentexpr.Expr {
	b.Helper()
	c := benchConds[i]
	var code []byte
	if c.gold >= 0 {
		code = relocate(w, loadGolden(b)[c.gold].code)
	} else {
		code = agentexpr.MustAssemble(c.src)
	}
	e, err := agentexpr.Parse(code)
	if err != nil {
		b.Fatal(err)
	}
	if err := agentexpr.Validate(e, agentexpr.Limits{NumRegs: testPadRegs, MaxStack: DefaultMaxStack}); err != nil {
		b.Fatal(err)
	}
	return e
}

func BenchmarkInterp(b *testing.B) {
	w := newWorld(b)
	for i, c := range benchConds {
		b.Run(c.name, func(b *testing.B) {
			setupGolden(w)
			e := benchExpr(b, w, i)
			ie := &interpEnv{w: w}
			env := &agentexpr.Env{Mem: ie, Regs: ie, TSV: ie, Collect: ie}
			for b.Loop() {
				if _, err := agentexpr.Eval(e, env); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func benchJIT(b *testing.B, opts Options) {
	w := newWorld(b)
	arena := newCodeArena(b, 1<<16)
	for i, c := range benchConds {
		b.Run(c.name, func(b *testing.B) {
			setupGolden(w)
			e := benchExpr(b, w, i)
			code, err := Compile(e, testArch, opts)
			if err != nil || code.Fallback != "" {
				b.Fatal(err, code.Fallback)
			}
			arena.reset()
			fn, _ := arena.add(b, code.Text)
			arena.seal(b)
			w.reset(0, 0)
			if opts.DirectLoads {
				w.ctx.DirectLo, w.ctx.DirectHi = w.dataLo, w.dataHi
			}
			for b.Loop() {
				if _, errc := w.run(fn); errc != 0 {
					b.Fatal(errc)
				}
			}
		})
	}
}

// BenchmarkJITCallOverhead runs the smallest expression ("const8 0; end")
// through the same harness as BenchmarkJIT: what every JIT figure pays for
// the call from Go and the context reset, not for the expression.
func BenchmarkJITCallOverhead(b *testing.B) {
	w := newWorld(b)
	arena := newCodeArena(b, 1<<16)
	e, err := agentexpr.Parse(agentexpr.MustAssemble("const8 0; end"))
	if err != nil {
		b.Fatal(err)
	}
	code, err := Compile(e, testArch, Options{FaultLoads: true})
	if err != nil || code.Fallback != "" {
		b.Fatal(err, code.Fallback)
	}
	fn, _ := arena.add(b, code.Text)
	arena.seal(b)
	w.reset(0, 0)
	for b.Loop() {
		if _, errc := w.run(fn); errc != 0 {
			b.Fatal(errc)
		}
	}
}

// BenchmarkJIT uses the default safe reads (process_vm_readv per ref).
func BenchmarkJIT(b *testing.B) { benchJIT(b, Options{}) }

// BenchmarkJITDirect loads directly from the known-mapped data page.
func BenchmarkJITDirect(b *testing.B) { benchJIT(b, Options{DirectLoads: true}) }

// BenchmarkJITFaultLoads uses plain loads whose faults a tracer would
// redirect (Options.FaultLoads); nothing faults here.
func BenchmarkJITFaultLoads(b *testing.B) { benchJIT(b, Options{FaultLoads: true}) }

// BenchmarkRef compares one ref64 through process_vm_readv with a direct
// load of the same address.
func BenchmarkRef(b *testing.B) {
	for _, tt := range []struct {
		name string
		opts Options
	}{{"syscall", Options{}}, {"direct", Options{DirectLoads: true}}, {"faultload", Options{FaultLoads: true}}} {
		b.Run(tt.name, func(b *testing.B) {
			w := newWorld(b)
			arena := newCodeArena(b, 1<<16)
			e, _ := agentexpr.Parse(agentexpr.MustAssemble("reg 0; ref64; end"))
			code, err := Compile(e, testArch, tt.opts)
			if err != nil {
				b.Fatal(err)
			}
			fn, _ := arena.add(b, code.Text)
			arena.seal(b)
			w.regs[0] = w.dataLo + 64
			w.reset(0, 0)
			w.ctx.DirectLo, w.ctx.DirectHi = w.dataLo, w.dataHi
			for b.Loop() {
				if _, errc := w.run(fn); errc != 0 {
					b.Fatal(errc)
				}
			}
		})
	}
}

// BenchmarkCollect measures one trace of 8 and of 256 bytes through the
// safe reader and with FaultLoads (REP MOVSB).
func BenchmarkCollect(b *testing.B) {
	for _, size := range []int{8, 256} {
		for _, tt := range []struct {
			name string
			opts Options
		}{{"syscall", Options{}}, {"faultload", Options{FaultLoads: true}}} {
			b.Run(fmt.Sprintf("%s/%d", tt.name, size), func(b *testing.B) {
				w := newWorld(b)
				arena := newCodeArena(b, 1<<16)
				e, _ := agentexpr.Parse(agentexpr.MustAssemble(fmt.Sprintf("reg 0; const16 %d; trace; const8 1; end", size)))
				code, err := Compile(e, testArch, tt.opts)
				if err != nil {
					b.Fatal(err)
				}
				fn, _ := arena.add(b, code.Text)
				arena.seal(b)
				w.regs[0] = w.dataLo + 64
				w.reset(0, frameBytes)
				for b.Loop() {
					w.ctx.FrameUsed = 0
					if _, errc := w.run(fn); errc != 0 {
						b.Fatal(errc)
					}
				}
			})
		}
	}
}

// BenchmarkCompile measures compile time per expression (gdb's bytecode
// for x*y + table[x&7] == 52).
func BenchmarkCompile(b *testing.B) {
	w := newWorld(b)
	e := benchExpr(b, w, 3)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Compile(e, testArch, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
