package jit

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"golang.org/x/arch/x86/x86asm"

	"gotpstub/agentexpr"
)

// Options.FaultLoads code cannot take a real SIGSEGV in-process (the Go
// runtime would die), so it is tested in two ways. With memory that is
// always mapped nothing faults and the fast path must give the safe
// path's results. With the test-only faultAlways option every faulting
// instruction is replaced by a jump to its Recover offset, registers as
// at a fault (a copy as if it had faulted half-way), so every read goes
// through the recovery code, which must then give the reference results
// everywhere, guard pages and wild pointers included.

// faultDiffMode selects one FaultLoads differential run.
type faultDiffMode struct {
	name        string
	zero        bool // Options.ZeroUnreadable, compared with zeroEnv
	mappedOnly  bool // addresses inside the data page only
	faultAlways bool // every fast-path read goes to its recovery code
}

// TestFaultLoadsDifferential compares FaultLoads code with agentexpr.Eval
// on random expressions (the generator of diff_test.go).
func TestFaultLoadsDifferential(t *testing.T) {
	if !processVMReadvWorks() {
		t.Skip("needs process_vm_readv")
	}
	modes := []faultDiffMode{
		{name: "mapped", mappedOnly: true},
		{name: "mapped-zero", zero: true, mappedOnly: true},
		{name: "recover-everywhere", faultAlways: true},
		{name: "recover-everywhere-zero", zero: true, faultAlways: true},
		{name: "recover-mapped", mappedOnly: true, faultAlways: true},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) { runFaultDifferential(t, m) })
	}
}

func runFaultDifferential(t *testing.T, m faultDiffMode) {
	n := 15000
	if testing.Short() {
		n = 2000
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 5))
	w := newWorld(t)
	arena := newCodeArena(t, 1<<22)
	g := &progGen{r: r, w: w, mappedOnly: m.mappedOnly}
	deadline := time.Now().Add(8 * time.Second)
	classes := map[string]int{}
	faultSites := 0
	type job struct {
		e    *agentexpr.Expr
		fn   uintptr
		opts Options
	}
	for done := 0; done < n && time.Now().Before(deadline); {
		arena.reset()
		var jobs []job
		for len(jobs) < 2000 && done+len(jobs) < n {
			e, err := agentexpr.Parse(g.program())
			if err != nil {
				t.Fatal(err)
			}
			opts := Options{FaultLoads: true, faultAlways: m.faultAlways, ZeroUnreadable: m.zero,
				NoFuse: r.IntN(4) == 0, DirectLoads: r.IntN(2) == 0}
			c, err := Compile(e, "amd64", opts)
			if err != nil {
				t.Fatalf("compile %x: %v", e.Code, err)
			}
			if c.Fallback != "" {
				done++
				continue
			}
			faultSites += len(c.Faults)
			fn, ok := arena.add(t, c.Text)
			if !ok {
				break
			}
			jobs = append(jobs, job{e, fn, opts})
		}
		arena.seal(t)
		for k, j := range jobs {
			ntsv, frameCap, tsvs := randomizeWorld(r, w, k%100 == 0)
			base := &interpEnv{w: w, tsvs: append([]int64(nil), tsvs...), cap: frameCap}
			var ie interface {
				agentexpr.Memory
				agentexpr.Registers
				agentexpr.TSVs
				agentexpr.Collector
			} = base
			if m.zero {
				ie = zeroEnv{base}
			}
			iv, ierr := agentexpr.Eval(j.e, &agentexpr.Env{Mem: ie, Regs: ie, TSV: ie, Collect: ie})
			w.reset(ntsv, frameCap)
			copy(w.tsvs, tsvs)
			if j.opts.DirectLoads {
				w.ctx.DirectLo, w.ctx.DirectHi = w.dataLo, w.dataHi
			}
			jv, jcode := w.run(j.fn)
			judgeRun(t, w, runOutcome{e: j.e, opts: j.opts, zero: m.zero,
				iv: iv, ierr: ierr, refFrame: base.frame, refTSVs: base.tsvs[:ntsv], jv: jv, jcode: jcode}, classes)
		}
		done += len(jobs)
	}
	t.Logf("outcome classes %v, %d fault sites", classes, faultSites)
	if classes["ok"] < n/20 {
		t.Errorf("only %d runs succeeded", classes["ok"])
	}
	if faultSites == 0 {
		t.Errorf("no fault sites compiled: the generator does not exercise FaultLoads")
	}
}

// faultTableCases are expressions covering every kind of fault site.
var faultTableCases = []string{
	"const8 0; ref8; end",
	"reg 1; ref16; reg 2; ref32; add; reg 3; ref64; add; end",
	"reg 4; const8 16; trace; end",
	"reg 4; trace_quick 8; ref64; end",
	"reg 5; trace16 300; pop; end",
	"reg 5; const8 40; tracenz; const8 1; end",
	"reg 1; ref8; reg 1; ref8; equal; if_goto 15; const8 2; end; reg 4; const8 3; trace; const8 1; end",
	"const8 1; const8 2; add; end",
}

// TestFaultTable checks every Faults entry: Off is an instruction
// boundary whose instruction reads memory (a plain load or REP MOVSB),
// Recover is an instruction boundary inside Text, entries are sorted and
// every ref and collection has a site; without FaultLoads, or under
// faultAlways, the table is the same shape.
func TestFaultTable(t *testing.T) {
	for _, src := range faultTableCases {
		e, err := agentexpr.Parse(agentexpr.MustAssemble(src))
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		plain, err := Compile(e, "amd64", Options{})
		if err != nil {
			t.Fatal(err)
		}
		if len(plain.Faults) != 0 {
			t.Errorf("%s: Faults without FaultLoads: %v", src, plain.Faults)
		}
		refs, collects := 0, 0
		for _, in := range e.Insns {
			switch in.Op {
			case agentexpr.OpRef8, agentexpr.OpRef16, agentexpr.OpRef32, agentexpr.OpRef64:
				refs++
			case agentexpr.OpTrace, agentexpr.OpTraceQuick, agentexpr.OpTrace16, agentexpr.OpTracenz:
				collects++
			}
		}
		for _, always := range []bool{false, true} {
			c, err := Compile(e, "amd64", Options{FaultLoads: true, faultAlways: always})
			if err != nil {
				t.Fatal(err)
			}
			checkFaultTable(t, src, c, refs, collects)
		}
	}
}

func checkFaultTable(t *testing.T, src string, c *Code, refs, collects int) {
	t.Helper()
	boundary := map[int]x86asm.Inst{}
	for off := 0; off < len(c.Text); {
		inst, err := x86asm.Decode(c.Text[off:], 64)
		if err != nil {
			t.Fatalf("%s: offset %d does not decode: %v", src, off, err)
		}
		boundary[off] = inst
		off += inst.Len
	}
	loads, copies := 0, 0
	for i, f := range c.Faults {
		if i > 0 && c.Faults[i-1].Off >= f.Off {
			t.Errorf("%s: Faults not sorted: %v", src, c.Faults)
		}
		inst, ok := boundary[f.Off]
		if !ok {
			t.Errorf("%s: fault Off %d is not an instruction boundary", src, f.Off)
			continue
		}
		if _, ok := boundary[f.Recover]; !ok || f.Recover == f.Off {
			t.Errorf("%s: fault Recover %d is not another instruction boundary", src, f.Recover)
		}
		switch {
		case inst.Op == x86asm.MOVSB && inst.Prefix[0]&0xff == x86asm.PrefixREP:
			copies++ // the copy helper's long copy
		case inst.Op == x86asm.MOVZX && memBase(inst.Args[1]) == x86asm.RSI:
			copies++ // the copy helper's byte loop
		case (inst.Op == x86asm.MOV || inst.Op == x86asm.MOVZX) && memBase(inst.Args[1]) == x86asm.RAX:
			loads++ // an inline ref
		default:
			t.Errorf("%s: fault Off %d holds %s, not a memory read", src, f.Off, x86asm.IntelSyntax(inst, 0, nil))
		}
	}
	if loads != refs {
		t.Errorf("%s: %d load sites for %d refs", src, loads, refs)
	}
	wantCopies := 0
	if refs+collects > 0 {
		wantCopies = 2 // the shared copy helper: byte loop and REP MOVSB
	}
	if copies != wantCopies {
		t.Errorf("%s: %d copy sites, want %d", src, copies, wantCopies)
	}
}

// memBase returns the base register of a memory operand, 0 otherwise.
func memBase(a x86asm.Arg) x86asm.Reg {
	if m, ok := a.(x86asm.Mem); ok && m.Index == 0 && m.Disp == 0 {
		return m.Base
	}
	return 0
}

// TestFaultLoadsFastPath checks that FaultLoads really reads with loads:
// with a readmem hook that always fails, mapped memory still reads
// (nothing faulted, the hook is never called), while under faultAlways
// every read goes through the hook and fails.
func TestFaultLoadsFastPath(t *testing.T) {
	w := newWorld(t)
	arena := newCodeArena(t, 1<<16)
	var fail asm
	fail.movImm(rAX, uint64(0xfffffffffffffff2)) // -EFAULT
	fail.ret()
	failFn, _ := arena.add(t, fail.buf)
	for i := range 64 {
		w.data[i] = byte(0x11 * (i + 1))
	}
	tests := []struct {
		name    string
		src     string
		opts    Options
		want    uint64
		wantErr uint64
		frame   int // bytes of frame expected
	}{
		{"ref32 fast", "reg 0; ref32; end", Options{FaultLoads: true}, 0x44332211, ErrNone, 0},
		{"ref32 recovered", "reg 0; ref32; end", Options{FaultLoads: true, faultAlways: true}, 0, ErrMemory, 0},
		{"ref32 recovered zero", "reg 0; ref32; end", Options{FaultLoads: true, faultAlways: true, ZeroUnreadable: true}, 0, ErrNone, 0},
		{"safe path uses the hook", "reg 0; ref32; end", Options{}, 0, ErrMemory, 0},
		{"trace fast", "reg 0; const8 8; trace; const8 7; end", Options{FaultLoads: true}, 7, ErrNone, 19},
		{"trace recovered", "reg 0; const8 8; trace; const8 7; end", Options{FaultLoads: true, faultAlways: true}, 0, ErrCollect, 0},
		{"long trace fast", "reg 0; const8 64; trace; const8 7; end", Options{FaultLoads: true}, 7, ErrNone, 75},
		{"long trace recovered zero", "reg 0; const8 64; trace; const8 7; end", Options{FaultLoads: true, faultAlways: true, ZeroUnreadable: true}, 7, ErrNone, 0},
		{"tracenz fast", "reg 0; const8 8; tracenz; const8 7; end", Options{FaultLoads: true}, 7, ErrNone, 19},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := agentexpr.Parse(agentexpr.MustAssemble(tt.src))
			if err != nil {
				t.Fatal(err)
			}
			c, err := Compile(e, "amd64", tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			fn, ok := arena.add(t, c.Text)
			if !ok {
				t.Fatal("arena full")
			}
			arena.seal(t)
			w.reset(0, 128)
			w.regs[0] = w.dataLo
			w.ctx.ReadMem = uint64(failFn)
			v, code := w.run(fn)
			if v != tt.want || code != tt.wantErr {
				t.Errorf("got %#x err %d, want %#x err %d", v, code, tt.want, tt.wantErr)
			}
			if int(w.ctx.FrameUsed) != tt.frame {
				t.Errorf("frame used %d, want %d", w.ctx.FrameUsed, tt.frame)
			}
			if tt.frame > 0 && !bytes.Equal(w.jitFrame()[11:], w.data[:tt.frame-11]) {
				t.Errorf("frame % x does not hold the data", w.jitFrame())
			}
		})
	}
}

// TestPadFaults checks that a pad relocates its expressions' fault tables
// to absolute addresses that hold the same instructions.
func TestPadFaults(t *testing.T) {
	opts := Options{FaultLoads: true}
	compile := func(src string) *Code {
		e, err := agentexpr.Parse(agentexpr.MustAssemble(src))
		if err != nil {
			t.Fatal(err)
		}
		c, err := Compile(e, "amd64", opts)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	cond := compile("reg 1; ref32; const8 3; equal; end")
	coll1 := compile("reg 4; const8 16; trace; end")
	coll2 := compile("const8 1; const8 2; add; end") // no faults
	coll3 := compile("reg 5; ref64; trace_quick 8; end")
	spec := PadSpec{Addr: 0x7000_0000_1000, TPAddr: 0x40_1000, Ctl: 0x7100_0000_0000, TPIndex: 1, Lanes: 4, FSBase: true,
		Cond: cond, Collect: []*Code{coll1, coll2, coll3}, CollectCap: 100, TailAddr: 0x7000_0000_0800}
	p, err := BuildJumpPadAMD64(spec)
	if err != nil {
		t.Fatal(err)
	}
	want := len(cond.Faults) + len(coll1.Faults) + len(coll2.Faults) + len(coll3.Faults)
	if len(p.Faults) != want || want == 0 {
		t.Fatalf("pad has %d faults, want %d (nonzero)", len(p.Faults), want)
	}
	// Each code's faults, in order, must reappear at a common offset.
	k := 0
	for _, c := range []*Code{cond, coll1, coll2, coll3} {
		if len(c.Faults) == 0 {
			continue
		}
		placed := p.Faults[k].PC - spec.Addr - uint64(c.Faults[0].Off)
		if !bytes.Equal(p.Code[placed:placed+uint64(len(c.Text))], c.Text) {
			t.Fatalf("code not found at pad offset %d", placed)
		}
		for _, f := range c.Faults {
			pf := p.Faults[k]
			if pf.PC != spec.Addr+placed+uint64(f.Off) || pf.Recover != spec.Addr+placed+uint64(f.Recover) {
				t.Errorf("pad fault %d = %+v, want code offset %d + %+v", k, pf, placed, f)
			}
			k++
		}
	}
	for i := 1; i < len(p.Faults); i++ {
		if p.Faults[i-1].PC >= p.Faults[i].PC {
			t.Errorf("pad faults not sorted: %+v", p.Faults)
		}
	}
}
