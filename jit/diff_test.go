//go:build amd64 || arm64

package jit

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"gotpstub/agentexpr"
)

// progGen writes random stack-correct agent expressions: straight-line
// code, if/else diamonds (whose conditions often end in a compare, so the
// fused compare-and-branch path is hit), memory references into the test
// data page, its guard pages and wild addresses, register reads, TSV reads,
// writes and collections. Jumps only go forward: the interpreter's step
// limit and the JIT's backward-jump budget count different things.
type progGen struct {
	r        *rand.Rand
	w        *world
	code     []byte
	depth    int
	maxDepth int
	nest     int
	budget   int
	// mappedOnly keeps every address and collected range inside the
	// data page (Options.FaultLoads code must not fault in-process).
	mappedOnly bool
}

func (g *progGen) op(op agentexpr.Op, imm uint64) {
	info := agentexpr.OpTable[op]
	g.code = append(g.code, byte(op))
	for i := info.ImmBytes - 1; i >= 0; i-- {
		g.code = append(g.code, byte(imm>>(8*uint(i))))
	}
	in := agentexpr.Insn{Op: op, Imm: imm}
	_, delta := in.StackEffect()
	g.depth += delta
	g.budget--
}

// jump emits goto/if_goto with a placeholder target and returns the
// offset of the target field.
func (g *progGen) jump(op agentexpr.Op) int {
	g.op(op, 0)
	return len(g.code) - 2
}

func (g *progGen) land(field int) {
	binary.BigEndian.PutUint16(g.code[field:], uint16(len(g.code)))
}

var interesting = []uint64{0, 1, 2, 3, 7, 8, 31, 32, 63, 64, 65, 0x7f, 0x80, 0xff, 0x100, 0xffff,
	0x7fffffff, 0x80000000, 0xffffffff, 1 << 32, 1<<63 - 1, 1 << 63, ^uint64(0), ^uint64(1)}

func (g *progGen) constant(v uint64) { g.op(agentexpr.ConstOp(v), v) }

// address returns an address: mostly inside the data page, sometimes
// straddling its end, in a guard page, null, or wild.
func (g *progGen) address() uint64 {
	w := g.w
	if g.mappedOnly {
		// Room for the longest access the generator makes (trace16 of
		// up to 299 bytes).
		return w.dataLo + uint64(g.r.IntN(len(w.data)-320))
	}
	switch n := g.r.IntN(20); {
	case n < 14:
		return w.dataLo + uint64(g.r.IntN(len(w.data)))
	case n < 16:
		return w.dataHi - uint64(g.r.IntN(8))
	case n < 17:
		return w.guardLo + uint64(g.r.IntN(pageSize))
	case n < 18:
		return uint64(g.r.IntN(64))
	default:
		return g.r.Uint64()
	}
}

// value pushes one value.
func (g *progGen) value() {
	switch g.r.IntN(10) {
	case 0, 1:
		g.constant(interesting[g.r.IntN(len(interesting))])
	case 2:
		g.constant(g.r.Uint64() >> uint(g.r.IntN(64)))
	case 3, 4:
		g.op(agentexpr.OpReg, uint64(g.r.IntN(testPadRegs)))
	case 5:
		g.op(agentexpr.OpGetv, uint64(g.r.IntN(5)))
	case 6, 7:
		g.constant(g.address())
		g.op([]agentexpr.Op{agentexpr.OpRef8, agentexpr.OpRef16, agentexpr.OpRef32, agentexpr.OpRef64}[g.r.IntN(4)], 0)
	case 8:
		g.constant(g.address())
	default:
		g.constant(uint64(g.r.IntN(100)))
	}
}

var binaryOps = []agentexpr.Op{agentexpr.OpAdd, agentexpr.OpSub, agentexpr.OpMul, agentexpr.OpDivSigned,
	agentexpr.OpDivUnsigned, agentexpr.OpRemSigned, agentexpr.OpRemUnsigned, agentexpr.OpLsh,
	agentexpr.OpRshSigned, agentexpr.OpRshUnsigned, agentexpr.OpBitAnd, agentexpr.OpBitOr,
	agentexpr.OpBitXor, agentexpr.OpEqual, agentexpr.OpLessSigned, agentexpr.OpLessUnsigned}

var compareOps = []agentexpr.Op{agentexpr.OpEqual, agentexpr.OpLessSigned, agentexpr.OpLessUnsigned}

// step emits one random instruction (or small group) valid at the current
// depth.
func (g *progGen) step() {
	d := g.depth
	room := g.maxDepth - d
	switch k := g.r.IntN(22); {
	case d == 0 || (k < 5 && room >= 2):
		g.value()
	case k < 9 && d >= 2:
		g.op(binaryOps[g.r.IntN(len(binaryOps))], 0)
	case k < 10:
		switch g.r.IntN(4) {
		case 0:
			g.op(agentexpr.OpLogNot, 0)
		case 1:
			g.op(agentexpr.OpBitNot, 0)
		case 2:
			g.op(agentexpr.OpExt, uint64(1+g.r.IntN(70)))
		default:
			g.op(agentexpr.OpZeroExt, uint64(g.r.IntN(70)))
		}
	case k < 11 && room >= 1:
		if g.r.IntN(2) == 0 {
			g.op(agentexpr.OpDup, 0)
		} else {
			g.op(agentexpr.OpPick, uint64(g.r.IntN(d)))
		}
	case k < 12 && d >= 2:
		g.op(agentexpr.OpSwap, 0)
	case k < 13 && d >= 3:
		g.op(agentexpr.OpRot, 0)
	case k < 14 && d >= 2:
		g.op(agentexpr.OpPop, 0)
	case k < 15:
		if g.r.IntN(2) == 0 {
			g.op(agentexpr.OpSetv, uint64(g.r.IntN(5)))
		} else {
			g.op(agentexpr.OpTracev, uint64(g.r.IntN(5)))
		}
	case k < 16 && room >= 2:
		// trace / tracenz: addr, size.
		g.constant(g.address())
		g.constant(uint64(g.r.IntN(40)))
		if g.r.IntN(2) == 0 {
			g.op(agentexpr.OpTrace, 0)
		} else {
			g.op(agentexpr.OpTracenz, 0)
		}
	case k < 17 && room >= 1:
		g.constant(g.address())
		if g.r.IntN(2) == 0 {
			g.op(agentexpr.OpTraceQuick, uint64(g.r.IntN(32)))
		} else {
			g.op(agentexpr.OpTrace16, uint64(g.r.IntN(300)))
		}
		g.op(agentexpr.OpPop, 0)
	case k < 20 && g.nest < 3 && room >= 3:
		g.diamond()
	default:
		if room >= 1 {
			g.value()
		}
	}
}

// block emits about n steps and returns to the starting depth.
func (g *progGen) block(n int) {
	start := g.depth
	for i := 0; i < n && g.budget > 0; i++ {
		g.step()
	}
	for g.depth > start {
		g.op(agentexpr.OpPop, 0)
	}
	for g.depth < start {
		g.value()
	}
}

// diamond emits: cond; if_goto else; then; goto end; else: else; end:
// (or a one-armed if).
func (g *progGen) diamond() {
	g.nest++
	defer func() { g.nest-- }()
	g.value()
	g.value()
	switch g.r.IntN(3) {
	case 0:
		g.op(compareOps[g.r.IntN(len(compareOps))], 0)
	case 1:
		g.op(compareOps[g.r.IntN(len(compareOps))], 0)
		g.op(agentexpr.OpLogNot, 0)
	default:
		g.op(binaryOps[g.r.IntN(len(binaryOps))], 0)
	}
	toElse := g.jump(agentexpr.OpIfGoto)
	g.block(1 + g.r.IntN(5))
	if g.r.IntN(3) == 0 {
		g.land(toElse)
		return
	}
	toEnd := g.jump(agentexpr.OpGoto)
	g.land(toElse)
	g.block(1 + g.r.IntN(5))
	g.land(toEnd)
}

func (g *progGen) program() []byte {
	g.code = g.code[:0]
	g.depth = 0
	g.maxDepth = 2 + g.r.IntN(12)
	g.budget = 4 + g.r.IntN(40)
	g.block(g.budget)
	if g.r.IntN(8) != 0 {
		g.value()
	}
	g.op(agentexpr.OpEnd, 0)
	return append([]byte(nil), g.code...)
}

// randomizeWorld fills registers (some pointing into data) and data (with
// some NULs for tracenz) and returns the TSV count and frame capacity.
func randomizeWorld(r *rand.Rand, w *world, fillData bool) (int, int, []int64) {
	for i := range w.data {
		if !fillData {
			break
		}
		if r.IntN(6) == 0 {
			w.data[i] = 0
		} else {
			w.data[i] = byte(r.Uint32())
		}
	}
	for i := range w.regs {
		switch r.IntN(3) {
		case 0:
			w.regs[i] = w.dataLo + uint64(r.IntN(len(w.data)))
		case 1:
			w.regs[i] = interesting[r.IntN(len(interesting))]
		default:
			w.regs[i] = r.Uint64()
		}
	}
	ntsv := 4
	if r.IntN(4) == 0 {
		ntsv = r.IntN(5)
	}
	tsvs := make([]int64, ntsv)
	for i := range tsvs {
		tsvs[i] = int64(interesting[r.IntN(len(interesting))])
	}
	frameCap := frameBytes
	if r.IntN(6) == 0 {
		frameCap = r.IntN(120)
	}
	return ntsv, frameCap, tsvs
}

// TestDifferentialRandom compares the JIT with agentexpr.Eval on random
// valid expressions: same value, same error class, same frame bytes and
// TSV values.
func TestDifferentialRandom(t *testing.T) {
	n := 100000
	if !processVMReadvWorks() {
		n = 10000 // under qemu-user emulation every run is ~100x slower
	}
	if s := os.Getenv("JIT_DIFF_N"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	deadline := 25 * time.Second
	if testing.Short() {
		n = 5000
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	w := newWorld(t)
	arena := newCodeArena(t, 1<<22)
	g := &progGen{r: r, w: w}
	start := time.Now()
	type job struct {
		e    *agentexpr.Expr
		fn   uintptr
		opts Options
	}
	var compiled, fallbacks, errorsSeen, fused int
	classes := map[string]int{}
	for done := 0; done < n; {
		if time.Since(start) > deadline {
			// A loaded machine (or emulation) is slow: stop, but insist on
			// a meaningful number of runs (a full-system emulator runs
			// a few thousand in the time).
			t.Logf("deadline %v reached after %d of %d expressions", deadline, done, n)
			if done < min(n/10, 2000) {
				t.Errorf("only %d expressions in %v", done, deadline)
			}
			break
		}
		// Compile a batch into the arena, then run them all.
		arena.reset()
		var jobs []job
		for len(jobs) < 2000 && done+len(jobs) < n {
			code := g.program()
			e, err := agentexpr.Parse(code)
			if err != nil {
				t.Fatalf("generator produced unparsable code % x: %v", code, err)
			}
			if err := agentexpr.Validate(e, agentexpr.Limits{NumRegs: testPadRegs, MaxStack: DefaultMaxStack}); err != nil {
				t.Fatalf("generator produced invalid code % x: %v", code, err)
			}
			opts := Options{NoFuse: r.IntN(4) == 0, DirectLoads: r.IntN(2) == 0}
			c, err := Compile(e, testArch, opts)
			if err != nil {
				t.Fatalf("compile % x: %v", code, err)
			}
			if c.Fallback != "" {
				fallbacks++
				done++
				continue
			}
			fn, ok := arena.add(t, c.Text)
			if !ok {
				break
			}
			jobs = append(jobs, job{e, fn, opts})
		}
		arena.seal(t)
		for k, j := range jobs {
			ntsv, frameCap, tsvs := randomizeWorld(r, w, k%100 == 0)
			ie := &interpEnv{w: w, tsvs: append([]int64(nil), tsvs...), cap: frameCap}
			iv, ierr := agentexpr.Eval(j.e, &agentexpr.Env{Mem: ie, Regs: ie, TSV: ie, Collect: ie})
			w.reset(ntsv, frameCap)
			copy(w.tsvs, tsvs)
			if j.opts.DirectLoads {
				w.ctx.DirectLo, w.ctx.DirectHi = w.dataLo, w.dataHi
			}
			jv, jcode := w.run(j.fn)
			ic, jc := interpClass(ierr), errClass(jcode)
			if !errors.Is(ic, jc) && !(ic == nil && jc == nil) {
				t.Fatalf("error class differs on %x (%+v):\n%s\ninterpreter: %v\njit: code %d",
					j.e.Code, j.opts, disasm(j.e), ierr, jcode)
			}
			if ic != nil {
				errorsSeen++
				classes[ic.Error()]++
				continue
			}
			classes["ok"]++
			if iv != jv {
				t.Fatalf("value differs on %x (%+v):\n%s\ninterpreter %#x, jit %#x", j.e.Code, j.opts, disasm(j.e), iv, jv)
			}
			if !bytes.Equal(ie.frame, w.jitFrame()) {
				t.Fatalf("frame differs on %x:\n%s\ninterpreter % x\njit         % x", j.e.Code, disasm(j.e), ie.frame, w.jitFrame())
			}
			for i := range ntsv {
				if ie.tsvs[i] != w.tsvs[i] {
					t.Fatalf("tsv %d differs on %x:\n%s\ninterpreter %d, jit %d", i, j.e.Code, disasm(j.e), ie.tsvs[i], w.tsvs[i])
				}
			}
			if bytes.Contains(j.e.Code, []byte{byte(agentexpr.OpLessSigned), byte(agentexpr.OpIfGoto)}) {
				fused++
			}
		}
		compiled += len(jobs)
		done += len(jobs)
	}
	t.Logf("%d compiled and run, %d fallbacks, %d errors, outcome classes %v, %v", compiled, fallbacks, errorsSeen, classes, time.Since(start))
	if classes["ok"] < compiled/10 {
		t.Errorf("only %d of %d runs succeeded: generator too error-prone to test values", classes["ok"], compiled)
	}
}

func disasm(e *agentexpr.Expr) string {
	var b bytes.Buffer
	for _, in := range e.Insns {
		b.WriteString("  ")
		b.WriteString(in.Op.String())
		if agentexpr.OpTable[in.Op].ImmBytes > 0 {
			b.WriteString(" ")
			b.WriteString(hexU(in.Imm))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func hexU(v uint64) string {
	const digits = "0123456789abcdef"
	if v == 0 {
		return "0x0"
	}
	var buf []byte
	for v > 0 {
		buf = append([]byte{digits[v&15]}, buf...)
		v >>= 4
	}
	return "0x" + string(buf)
}
