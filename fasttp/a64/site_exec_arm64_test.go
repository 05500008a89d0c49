package a64

import (
	"encoding/binary"
	"fmt"
	"math/rand"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"gotpstub/jit"
)

// The end-to-end test of a site plan: a small function, written into
// region A, runs through the harness once as it is, once with a `b` to
// an exit stub at the site (the registers at the site) and once with a
// fast tracepoint installed from PlanSite: a jit.BuildJumpPadA64 pad
// near the site (4 KB and 1 MB away in region A, and 40 MB away in a
// region B), the plan's tail after the pad, then the patch. The traced
// run must end at the same exit stub with the same registers, flags,
// vector registers and stack (from sp up; the pad works below sp), and
// the pad must have committed exactly one record holding the registers
// at the site.

// Layout of the function in region A: F is the function, the callee,
// literal and stubs follow it.
const (
	fnOff      = 0x10000 // F - A's base
	fnLit      = 0x80    // the ldr literal's 8 bytes
	fnCallee   = 0x100
	fnExit     = 0x200 // exit stub idResume
	fnAtSite   = 0x300 // exit stub idAtSite: the registers at the site
	idAtSite   = 3
	fnLitValue = 0x1122334455667788
)

// fnCode returns the function at f: every kind of the list at
// some site (plain add, adrp, ldr literal, b.cond, cbz, bl, b, ret).
func fnCode(f uint64) (main, callee []uint32) {
	main = []uint32{
		0x8b010000,                   // add x0, x0, x1
		0x90000009,                   // adrp x9, F (F is page-aligned)
		tLdrLitX(10, f+8, f+fnLit),   // ldr x10, F+fnLit
		0x8b0a0000,                   // add x0, x0, x10
		0xeb02001f,                   // cmp x0, x2
		0x54000048,                   // b.hi .+8
		0x91000400,                   // add x0, x0, #1
		0xb4000043,                   // cbz x3, .+8
		0x91000800,                   // add x0, x0, #2
		0x94000000 | (fnCallee-36)/4, // bl callee
		0x8b090000,                   // add x0, x0, x9
		tB(f+44, f+fnExit),           // b exit
	}
	callee = []uint32{
		0x91000c00, // add x0, x0, #3
		0xca01000b, // eor x11, x0, x1
		tRet,
	}
	return main, callee
}

// tpRig is the traced function, its control block and the harness.
type tpRig struct {
	t      *testing.T
	h      *harness
	a      *region
	f      uint64
	ctl    []byte // control block, then the lanes' data
	ctlAt  uint64
	rng    *rand.Rand
	broken bool // break the plan's branch back (the negative control)
	hit    bool // the last check's site was on the path (one record)
	off    bool // CtlActive 0: the pad goes straight to the tail, no record
}

const (
	tpLanes    = 1
	tpLaneSize = 4096
	tpDataOff  = 32 << 10 // lane data after the control block
)

// TestPlanSiteExec installs a fast tracepoint at every instruction of
// the function, for three register files (b.hi and cbz both ways) and
// three pad placements, and compares each traced run with the plain one.
func TestPlanSiteExec(t *testing.T) {
	r := newTPRig(t)
	w := &world{t: t, h: r.h, a: r.a, s: r.f}
	far, farPad := w.place(placement{name: "40M", dist: 40 << 20})
	places := []struct {
		name string
		reg  *region
		pad  uint64
	}{{"4K", r.a, r.f + 0x1000}, {"1M", r.a, r.a.base + 0x100000}, {"40M", far, farPad}}
	for _, pl := range places {
		hits := 0
		for _, site := range r.sites() {
			n := 0
			for i, in := range r.regFiles() {
				what := fmt.Sprintf("%s: site F+%#x regs #%d", pl.name, site-r.f, i)
				if msg := r.check(site, pl.reg, pl.pad, &in); msg != "" {
					t.Errorf("%s: %s", what, msg)
				} else if r.hit {
					n++
				}
			}
			if n == 0 {
				t.Errorf("%s: site F+%#x never hit", pl.name, site-r.f)
			}
			hits += n
		}
		t.Logf("%s: %d sites, %d traced hits", pl.name, len(r.sites()), hits)
	}
}

// TestPlanSiteExecOff runs every site with tracing off (CtlActive 0):
// the pad's fast exit goes straight to the tail, the run is unchanged and
// nothing is recorded.
func TestPlanSiteExecOff(t *testing.T) {
	r := newTPRig(t)
	r.off = true
	for _, site := range r.sites() {
		for i, in := range r.regFiles() {
			if msg := r.check(site, r.a, r.f+0x1000, &in); msg != "" {
				t.Errorf("site F+%#x regs #%d: %s", site-r.f, i, msg)
			}
		}
	}
}

// TestPlanSiteExecBroken is the negative control: a plan whose branch
// back skips an instruction must fail the comparison.
func TestPlanSiteExecBroken(t *testing.T) {
	r := newTPRig(t)
	r.broken = true
	in := r.regFiles()[0]
	msg := r.check(r.f, r.a, r.f+0x1000, &in) // the add before the adrp
	if msg == "" {
		t.Fatal("a tail branching back to the site + 8 went unnoticed")
	}
	t.Logf("broken plan detected: %s", msg)
}

func newTPRig(t *testing.T) *tpRig {
	h := newHarness(t)
	ctl, err := unix.Mmap(-1, 0, tpDataOff+(tpLanes+1)*tpLaneSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(ctl) })
	r := &tpRig{t: t, h: h, a: mapRegion(t, 0, regionASize, h.stateAddr()), ctl: ctl, rng: rand.New(rand.NewSource(3))}
	r.f = r.a.base + fnOff
	r.ctlAt = uint64(uintptr(unsafe.Pointer(&ctl[0])))
	return r
}

// sites lists every instruction of the function and the callee.
func (r *tpRig) sites() []uint64 {
	main, callee := fnCode(r.f)
	var s []uint64
	for i := range main {
		s = append(s, r.f+4*uint64(i))
	}
	for i := range callee {
		s = append(s, r.f+fnCallee+4*uint64(i))
	}
	return s
}

// regFiles returns random register files with b.hi taken (x2 = 0) and
// not (x2 = ^0), cbz taken (x3 = 0) and not.
func (r *tpRig) regFiles() []regs {
	w := &world{rng: r.rng, h: r.h}
	var out []regs
	for _, x23 := range [][2]uint64{{0, 0}, {^uint64(0), 1}, {r.rng.Uint64(), r.rng.Uint64()}} {
		in := w.randRegs()
		in.X[2], in.X[3] = x23[0], x23[1]
		out = append(out, in)
	}
	return out
}

// writeFn writes the function, its literal, callee and exit stubs, with
// the word at site replaced by site (0: none).
func (r *tpRig) writeFn(site uint64, word uint32) {
	main, callee := fnCode(r.f)
	r.a.put(r.f, main)
	r.a.put(r.f+fnCallee, callee)
	binary.LittleEndian.PutUint64(r.a.mem[r.f+fnLit-r.a.base:], fnLitValue)
	r.a.put(r.f+fnExit, exitStub(r.f+fnExit, r.a.common, idResume))
	r.a.put(r.f+fnAtSite, exitStub(r.f+fnAtSite, r.a.common, idAtSite))
	if site != 0 {
		r.a.put(site, []uint32{word})
	}
}

// check runs the function plain, stopped at site and traced with the pad
// at pad in region b; it returns what differs ("" when nothing).
func (r *tpRig) check(site uint64, b *region, pad uint64, in *regs) string {
	stack := make([]byte, stackSize)
	r.rng.Read(stack)
	r.hit = false
	r.writeFn(0, 0)
	want, wantStack, wantID := r.h.run(r.a, r.f, in, stack)
	r.writeFn(site, tB(site, r.f+fnAtSite))
	at, _, atID := r.h.run(r.a, r.f, in, stack)
	r.writeFn(0, 0)
	if err := r.install(site, b, pad); err != nil {
		return err.Error()
	}
	got, gotStack, gotID := r.h.run(r.a, r.f, in, stack, b)
	if wantID != idResume {
		return fmt.Sprintf("the plain run ended at stub %d", wantID)
	}
	if msg := sameRun(want, got, wantStack, gotStack, r.h.stackBase(), wantID, gotID); msg != "" {
		return msg
	}
	if atID != idAtSite { // the site is not on this run's path
		return r.checkRecords(site, nil)
	}
	return r.checkRecords(site, &at)
}

// install builds the pad, writes it and the plan's tail into b, and
// patches the site.
func (r *tpRig) install(site uint64, b *region, pad uint64) error {
	r.resetCtl()
	tail := pad + 0x4000
	word := r.a.word(site)
	plan, err := PlanSite(site, word, pad, tail)
	if err != nil {
		return err
	}
	jp, err := jit.BuildJumpPadA64(jit.PadSpec{Addr: pad, TailAddr: tail, TPAddr: site, Ctl: r.ctlAt,
		Lanes: tpLanes, CollectRegs: true, FrameBase: 100})
	if err != nil {
		return err
	}
	if len(jp.Code) > 0x4000 {
		return fmt.Errorf("pad of %d bytes", len(jp.Code))
	}
	if r.broken && plan.Resumes {
		n := len(plan.Tail) - 1
		plan.Tail[n] = tB(tail+4*uint64(n), site+8)
	}
	b.put(pad, words(jp.Code))
	b.put(tail, plan.Tail)
	r.a.put(site, []uint32{plan.Patch}) // last; run flushes
	return nil
}

// words reads code as little-endian words.
func words(code []byte) []uint32 {
	w := make([]uint32, len(code)/4)
	for i := range w {
		w[i] = binary.LittleEndian.Uint32(code[4*i:])
	}
	return w
}

// sameRun compares the plain and traced runs: stub, registers, flags,
// vector registers and the stack from sp up.
func sameRun(want, got regs, wantStack, gotStack []byte, base uint64, wantID, gotID uint16) string {
	sp := want.SP - base
	if sp < uint64(len(wantStack)) {
		wantStack, gotStack = wantStack[sp:], gotStack[sp:]
	}
	return diff(want, got, wantStack, gotStack, want.SP, wantID, gotID)
}

// resetCtl clears the control block and the lanes and makes tracing
// active with a live stub.
func (r *tpRig) resetCtl() {
	clear(r.ctl)
	if !r.off {
		r.put(jit.CtlActive, 1)
	}
	r.put(jit.CtlStubAlive, 4242)
	for i := 0; i <= tpLanes; i++ {
		h := jit.CtlLanes + i*jit.LaneHdrSize
		r.put(h+jit.LaneBase, r.ctlAt+tpDataOff+uint64(i)*tpLaneSize)
		r.put(h+jit.LaneSize, tpLaneSize)
	}
}

func (r *tpRig) put(off int, v uint64) { binary.LittleEndian.PutUint64(r.ctl[off:], v) }
func (r *tpRig) get(off int) uint64    { return binary.LittleEndian.Uint64(r.ctl[off:]) }

// checkRecords checks that the lanes hold exactly one committed record
// with the registers at site (none when at is nil: the site was not run).
func (r *tpRig) checkRecords(site uint64, at *regs) string {
	size := jit.PadRecordSizeARM64(true, 0)
	var lane []byte
	var total uint64
	for i := 0; i <= tpLanes; i++ {
		h := jit.CtlLanes + i*jit.LaneHdrSize
		if head := r.get(h + jit.LaneHead); head != 0 {
			total += head
			lane = r.ctl[tpDataOff+i*tpLaneSize:][:head]
		}
		if d := r.get(h + jit.LaneDropped); d != 0 {
			return fmt.Sprintf("lane %d dropped %d", i, d)
		}
	}
	switch {
	case (at == nil || r.off) && total == 0:
		return ""
	case at == nil || r.off:
		return fmt.Sprintf("%d bytes recorded by a site not on the path or with tracing off", total)
	case total != size:
		return fmt.Sprintf("%d bytes recorded, want one record of %d", total, size)
	}
	r.hit = true
	return checkRecord(lane, site, *at)
}

// checkRecord checks the header and register block of the record of a
// hit at site.
func checkRecord(rec []byte, site uint64, at regs) string {
	le := binary.LittleEndian
	size, flags := le.Uint32(rec[jit.RecSize:]), le.Uint32(rec[jit.RecFlags:])
	if uint64(size) != uint64(len(rec)) || le.Uint32(rec[jit.RecTPIndex:]) != 0 || flags != jit.RecRegs {
		return fmt.Sprintf("record size %d flags %#x tp %d", size, flags, le.Uint32(rec[jit.RecTPIndex:]))
	}
	blk := rec[jit.RecHeaderSize:]
	slot := func(i int) uint64 { return le.Uint64(blk[8*i:]) }
	for i, x := range at.X {
		if slot(i) != x {
			return fmt.Sprintf("recorded x%d %#x, want %#x", i, slot(i), x)
		}
	}
	if slot(31) != at.SP || slot(32) != site || slot(33) != at.NZCV {
		return fmt.Sprintf("recorded sp %#x pc %#x cpsr %#x, want %#x %#x %#x", slot(31), slot(32), slot(33), at.SP, site, at.NZCV)
	}
	for i, v := range at.V {
		q := jit.PadQRegsARM64 + 16*i
		if le.Uint64(blk[q:]) != v[0] || le.Uint64(blk[q+8:]) != v[1] {
			return fmt.Sprintf("recorded q%d differs", i)
		}
	}
	return ""
}
