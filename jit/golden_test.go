//go:build amd64 || arm64

package jit

import (
	"bufio"
	"encoding/binary"
	"os"
	"strconv"
	"strings"
	"testing"

	"gotpstub/agentexpr"
)

// testdata/gdb13-agent-eval.txt is the output of gdb 13.1's
// "maint agent-eval EXPR" for conditions on testdata/cond.c (stopped in f,
// x=3, y=4), preceded by the addresses gdb used. The test rebuilds the
// exact bytecode, relocates the global addresses and the frame pointer into
// the test's data page, and checks the JIT, the interpreter and the C value.

const (
	gdbDataBase = 0x555555558000 // page of a, b, table, tail, head in gdb's run
	gdbRBP      = 0x7fffffffe6b0
	frameOff    = 0x800 // where the test puts rbp inside the data page
)

type goldenExpr struct {
	src  string
	code []byte
}

func loadGolden(t testing.TB) []goldenExpr {
	t.Helper()
	f, err := os.Open("testdata/gdb13-agent-eval.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names := map[string]agentexpr.Op{}
	for op, info := range agentexpr.OpTable {
		names[info.Name] = op
	}
	var out []goldenExpr
	var insns []agentexpr.Insn
	flush := func() {
		if len(out) > 0 && insns != nil {
			code, err := agentexpr.Encode(nil, insns)
			if err != nil {
				t.Fatalf("%s: %v", out[len(out)-1].src, err)
			}
			out[len(out)-1].code = code
		}
		insns = nil
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if src, ok := strings.CutPrefix(line, "EXPR "); ok {
			flush()
			out = append(out, goldenExpr{src: src})
			continue
		}
		fields := strings.Fields(line)
		if len(out) == 0 || len(fields) < 2 {
			continue
		}
		if _, err := strconv.Atoi(fields[0]); err != nil {
			continue
		}
		op, ok := names[fields[1]]
		if !ok {
			t.Fatalf("unknown op in %q", line)
		}
		in := agentexpr.Insn{Op: op}
		if len(fields) > 2 {
			v, err := strconv.ParseInt(fields[2], 10, 64)
			if err != nil {
				t.Fatalf("bad immediate in %q", line)
			}
			in.Imm = uint64(v)
		}
		insns = append(insns, in)
	}
	flush()
	return out
}

// setupGolden writes cond.c's variables into the world's data page.
func setupGolden(w *world) {
	d := w.data
	le := binary.LittleEndian
	for i := range d {
		d[i] = 0
	}
	le.PutUint32(d[0x20:], 5)                  // a
	le.PutUint32(d[0x24:], uint32(0xfffffffe)) // b = -2
	for i := range 8 {                         // table
		le.PutUint32(d[0x40+4*i:], uint32(10*(i+1)))
	}
	le.PutUint32(d[0x70:], 2)             // tail.value
	le.PutUint32(d[0x80:], 1)             // head.value
	le.PutUint64(d[0x88:], w.dataLo+0x70) // head.next = &tail
	le.PutUint32(d[frameOff-4:], 3)       // x
	le.PutUint64(d[frameOff-16:], 4)      // y
	for i := range w.regs {
		w.regs[i] = 0
	}
	w.regs[6] = w.dataLo + frameOff
}

// relocate moves gdb's global addresses into the data page.
func relocate(w *world, code []byte) []byte {
	e, err := agentexpr.Parse(code)
	if err != nil {
		panic(err)
	}
	for i, in := range e.Insns {
		if in.Op == agentexpr.OpConst64 && in.Imm >= gdbDataBase && in.Imm < gdbDataBase+pageSize {
			e.Insns[i].Imm = in.Imm - gdbDataBase + w.dataLo
		}
	}
	out, err := agentexpr.Encode(nil, e.Insns)
	if err != nil {
		panic(err)
	}
	return out
}

func TestGoldenGDBConditions(t *testing.T) {
	want := map[string]uint64{
		"2*a+3*b > 0":                           1,
		"x*y + table[x&7] == 52":                1,
		"head.next->value != 0 && x < 10":       1,
		"y / 3 + (x % 2)":                       2,
		"(a << 3) - (b >> 1) + (unsigned)b / 7": 613566797,
	}
	w := newWorld(t)
	arena := newCodeArena(t, 1<<16)
	golden := loadGolden(t)
	if len(golden) != len(want) {
		t.Fatalf("golden file has %d expressions, want %d", len(golden), len(want))
	}
	for _, g := range golden {
		setupGolden(w)
		e, err := agentexpr.Parse(relocate(w, g.code))
		if err != nil {
			t.Fatalf("%s: %v", g.src, err)
		}
		if err := agentexpr.Validate(e, agentexpr.Limits{NumRegs: testPadRegs, MaxStack: DefaultMaxStack}); err != nil {
			t.Fatalf("%s: validate: %v", g.src, err)
		}
		for _, opts := range []Options{{}, {NoFuse: true}, {DirectLoads: true}} {
			code, err := Compile(e, testArch, opts)
			if err != nil || code.Fallback != "" {
				t.Fatalf("%s: compile: %v %q", g.src, err, code.Fallback)
			}
			ie := &interpEnv{w: w}
			iv, ierr := agentexpr.Eval(e, &agentexpr.Env{Mem: ie, Regs: ie, TSV: ie, Collect: ie})
			fn, _ := arena.add(t, code.Text)
			arena.seal(t)
			w.reset(0, 0)
			if opts.DirectLoads {
				w.ctx.DirectLo, w.ctx.DirectHi = w.dataLo, w.dataHi
			}
			jv, jerr := w.run(fn)
			if ierr != nil || jerr != 0 {
				t.Errorf("%s %+v: interpreter error %v, jit error %d", g.src, opts, ierr, jerr)
			}
			if iv != want[g.src] || jv != want[g.src] {
				t.Errorf("%s %+v: interpreter %d, jit %d, want %d", g.src, opts, iv, jv, want[g.src])
			}
			if got := code.RegsRead; len(strings.TrimSpace(g.src)) > 0 && strings.ContainsAny(g.src, "xy") && (len(got) != 1 || got[0] != 6) {
				t.Errorf("%s: RegsRead = %v, want [6] (rbp)", g.src, got)
			}
		}
		arena.reset()
	}
}
