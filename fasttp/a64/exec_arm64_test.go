package a64

import (
	"errors"
	"fmt"
	"math/rand"
	"testing"
)

// Exit stub ids.
const (
	idResume = 1
	idTarget = 2
)

// Layout of the execution tests: region A holds the site S in its middle,
// the exit stub at S+4, and the target (or literal) T within ±1 MB of S;
// the relocated copy goes at R, in A (near) or in a region B mapped at a
// distance, with its own resume stub.
const (
	regionASize = 4 << 20
	regionBSize = 1 << 16
	siteOff     = 2 << 20
)

// placement is where the relocated copy goes, relative to the site.
type placement struct {
	name string
	off  uint64 // R - S for a copy in region A; 0 for region B
	dist uint64 // B's distance from A (hint)
}

var placements = []placement{
	{name: "near", off: 0x8000},
	{name: "256K", off: 0x40000},
	{name: "40M", dist: 40 << 20},
	{name: "8G", dist: 8 << 30},
}

// execCase is one instruction to run in place and relocated.
type execCase struct {
	word   uint32
	target uint64 // T: 0 when the instruction reaches nothing
	stub   bool   // an exit stub at T (branches)
	regs   regs
}

// world is region A, the harness and the random source.
type world struct {
	t   *testing.T
	rng *rand.Rand
	h   *harness
	a   *region
	s   uint64
}

// TestRelocateExec runs every kind, many times with random operands and
// registers, at the site and relocated to every placement, and compares
// the landing stub, x0-x30, sp, nzcv, v0-v31 and the stack.
func TestRelocateExec(t *testing.T) {
	h := newHarness(t)
	w := &world{t: t, rng: rand.New(rand.NewSource(12)), h: h}
	w.a = mapRegion(t, 0, regionASize, h.stateAddr())
	w.s = w.a.base + siteOff
	n := 100
	if testing.Short() {
		n = 10
	}
	counts := map[string]int{}
	for _, pl := range placements {
		b, r := w.place(pl)
		for _, k := range execKinds {
			for i := 0; i < n; i++ {
				c := k.gen(w, r)
				what := fmt.Sprintf("%s/%s #%d %#08x", pl.name, k.name, i, c.word)
				if res := w.check(what, c, b, r); res != "" {
					counts[pl.name+" "+k.name+" "+res]++
				}
			}
		}
	}
	for _, pl := range placements {
		for _, k := range execKinds {
			key := pl.name + " " + k.name + " "
			run, rng, ven := counts[key+"run"], counts[key+"range"], counts[key+"veneer"]
			t.Logf("%s%d run, %d rightly out of range, %d run with Options.Veneer", key, run, rng, ven)
			want := n // every case runs, but the conditional branches 8 GB away
			if pl.name == "8G" && (k.name == "b.cond" || k.name == "cbz/cbnz" || k.name == "tbz/tbnz") {
				want = 0
				if rng != n {
					t.Errorf("%s%d of %d rightly out of range", key, rng, n)
				}
			}
			if run+ven != want {
				t.Errorf("%s%d of %d cases ran", key, run+ven, want)
			}
		}
	}
}

// place returns the region of the relocated copy and its address. A
// region B is mapped exactly dist above or below A (the kernel may have
// no room on one side: 48-bit address spaces put A near the top).
func (w *world) place(pl placement) (*region, uint64) {
	if pl.dist == 0 {
		return w.a, w.s + pl.off
	}
	for _, hint := range []uint64{w.a.base - pl.dist, w.a.base + pl.dist} {
		if b := mapRegion(w.t, hint, regionBSize, w.h.stateAddr(), mapFixedNoReplace); b != nil {
			return b, b.base + 0x1000
		}
	}
	w.t.Fatalf("%s: cannot map region B %#x from %#x", pl.name, pl.dist, w.a.base)
	return nil, 0
}

// check runs c at the site and relocated to r (in region b) and compares.
// It returns "run", "veneer" (run with Options.Veneer) or "range" (refused
// as out of range, rightly) or "" after reporting a failure.
func (w *world) check(what string, c execCase, b *region, r uint64) string {
	t := w.t
	in, err := Decode(c.word, w.s)
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return ""
	}
	if c.target != 0 && in.Kind != KindBLR && in.Kind != KindPlain && in.Target != c.target {
		t.Errorf("%s: decoded target %#x, generated %#x", what, in.Target, c.target)
	}
	resume := r + 0x100
	code, err := Relocate(in, r, resume)
	how := "run"
	if errors.Is(err, ErrOutOfRange) {
		if !outOfRange(in, r, resume) {
			t.Errorf("%s: %v", what, err)
			return ""
		}
		if in.Kind != KindB && in.Kind != KindBL {
			return "range"
		}
		how = "veneer"
		code, err = RelocateWith(in, r, resume, Options{Veneer: true})
	}
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return ""
	}
	if len(code) > MaxWords {
		t.Errorf("%s: %d words", what, len(code))
	}
	w.a.put(w.s, []uint32{c.word})
	w.a.put(w.s+4, exitStub(w.s+4, w.a.common, idResume))
	if c.stub {
		w.a.put(c.target, exitStub(c.target, w.a.common, idTarget))
	}
	b.put(r, code)
	b.put(resume, exitStub(resume, b.common, idResume))
	stack := make([]byte, stackSize)
	w.rng.Read(stack)
	want, wantStack, wantID := w.h.run(w.a, w.s, &c.regs, stack, b)
	got, gotStack, gotID := w.h.run(b, r, &c.regs, stack, w.a)
	if how == "veneer" {
		got.X[16] = want.X[16]
	}
	if msg := diff(want, got, wantStack, gotStack, w.h.stackBase(), wantID, gotID); msg != "" {
		t.Errorf("%s at %#x relocated to %#x as %s: %s", what, w.s, r, disasm(code, r), msg)
		return ""
	}
	if c.stub { // no stale stub for the next cases
		w.a.put(c.target, []uint32{0, 0, 0})
	}
	b.put(r, make([]uint32, MaxWords))
	return how
}

// outOfRange reports whether a branch of in's relocation to r truly cannot
// reach: its destination or resume is 128 MB or more away.
func outOfRange(in Insn, r, resume uint64) bool {
	far := func(a, b uint64) bool {
		d := int64(a - b)
		return d >= rangeB-64 || d < -rangeB+64
	}
	switch in.Kind {
	case KindB, KindBL, KindBCond, KindCBZ, KindTBZ:
		return far(in.Target, r) || far(resume, r)
	}
	return far(resume, r)
}

// diff compares the state after the original and after the relocated code.
func diff(want, got regs, wantStack, gotStack []byte, stackBase uint64, wantID, gotID uint16) string {
	if wantID != gotID {
		return fmt.Sprintf("landed at stub %d, want %d", gotID, wantID)
	}
	for i := range want.X {
		if want.X[i] != got.X[i] {
			return fmt.Sprintf("x%d = %#x, want %#x", i, got.X[i], want.X[i])
		}
	}
	if want.SP != got.SP || want.NZCV != got.NZCV {
		return fmt.Sprintf("sp %#x nzcv %#x, want %#x %#x", got.SP, got.NZCV, want.SP, want.NZCV)
	}
	for i := range want.V {
		if want.V[i] != got.V[i] {
			return fmt.Sprintf("v%d = %#x, want %#x", i, got.V[i], want.V[i])
		}
	}
	slot := want.SP - 16 - stackBase // the exit stub's push
	for i := range wantStack {
		if wantStack[i] != gotStack[i] && (uint64(i) < slot || uint64(i) >= slot+16) {
			return fmt.Sprintf("stack byte at sp%+d differs", int64(uint64(i)+stackBase-want.SP))
		}
	}
	return ""
}
