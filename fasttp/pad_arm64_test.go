package fasttp

import (
	"encoding/binary"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/arch/arm64/arm64asm"
	"golang.org/x/sys/unix"

	"gotpstub/agentexpr"
	"gotpstub/inferior"
	"gotpstub/jit"
	"gotpstub/tdesc"
	"gotpstub/tracing"
)

// These tests run real arm64 pads (jit.BuildJumpPadA64) in the test
// process (under qemu-aarch64 on x86 hosts) over lanes in this process's
// memory, and read what they wrote with fasttp's own code: ParseLane
// through lanes.drain, and the drainer into the trace engine.
//
// A driver, encoded here, is called through a func value with x0 = a
// state block: it saves Go's sp, x29, x30 and tpidr_el0, loads q0-q31,
// nzcv, tpidr_el0, the site's sp and x0-x30 (not x28, Go's g, which the
// runtime's signal handler reads) from the block and branches to the pad;
// the pad's tail is the driver's second half, which restores Go's state
// and returns.

// State block offsets.
const (
	stX      = 0   // in: x0..x30
	stNZCV   = 248 // in: nzcv
	stTP     = 256 // in: tpidr_el0
	stSiteSP = 264 // in: the site's sp
	stQ      = 272 // in: q0..q31
	stGoSP   = 800 // Go's sp, x29, x30, tpidr_el0
	stGoFP   = 808
	stGoLR   = 816
	stGoTP   = 824
	stBytes  = 832

	padAt     = 4096 // the pad's offset in the code mapping
	padTPAddr = 0x4000_1230
	padStack  = 64 << 10
	padLane   = 64 << 10 // bytes per lane
	// clockSlack is how far a record's converted time may be from the
	// wall clock around the hit (the counter and the clock are read a
	// moment apart).
	clockSlack = int64(2 * time.Millisecond)
)

// Instruction encodings of the driver.
func ldrX(rt, rn, off int) uint32 { return 0xf9400000 | uint32(off/8)<<10 | uint32(rn)<<5 | uint32(rt) }
func strX(rt, rn, off int) uint32 { return 0xf9000000 | uint32(off/8)<<10 | uint32(rn)<<5 | uint32(rt) }
func ldrQ(rt, rn, off int) uint32 {
	return 0x3dc00000 | uint32(off/16)<<10 | uint32(rn)<<5 | uint32(rt)
}
func bTo(from, to int) uint32 { return 0x14000000 | uint32(int32(to-from)>>2)&0x3ffffff }
func ldrLit(rt, from, to int) uint32 {
	return 0x58000000 | uint32(int32(to-from)>>2)&0x7ffff<<5 | uint32(rt)
}

const (
	movX1SP    = 0x910003e1 // mov x1, sp
	movSPX1    = 0x9100003f // mov sp, x1
	mrsX1TP    = 0xd53bd041 // mrs x1, tpidr_el0
	msrTPX1    = 0xd51bd041 // msr tpidr_el0, x1
	msrNZCVX1  = 0xd51b4201 // msr nzcv, x1
	retX30     = 0xd65f03c0 // ret
	nopWord    = 0xd503201f // nop
	driverTail = 512        // the tail's offset in the driver
)

// padDriver returns the driver for a pad at padAt and a state block at
// state.
func padDriver(state uint64) []byte {
	w := []uint32{movX1SP, strX(1, 0, stGoSP), strX(29, 0, stGoFP), strX(30, 0, stGoLR), mrsX1TP, strX(1, 0, stGoTP)}
	for q := 0; q < 32; q++ {
		w = append(w, ldrQ(q, 0, stQ+16*q))
	}
	w = append(w, ldrX(1, 0, stNZCV), msrNZCVX1, ldrX(1, 0, stTP), msrTPX1, ldrX(1, 0, stSiteSP), movSPX1)
	for r := 1; r <= 30; r++ {
		if r != 28 {
			w = append(w, ldrX(r, 0, 8*r))
		}
	}
	w = append(w, ldrX(0, 0, 0))
	w = append(w, bTo(4*len(w), padAt))
	for 4*len(w) < driverTail {
		w = append(w, nopWord)
	}
	lit := driverTail + 64
	w = append(w, ldrLit(0, 4*len(w), lit), ldrX(1, 0, stGoSP), movSPX1, ldrX(29, 0, stGoFP), ldrX(30, 0, stGoLR),
		ldrX(1, 0, stGoTP), msrTPX1, retX30)
	for 4*len(w) < lit {
		w = append(w, nopWord)
	}
	w = append(w, uint32(state), uint32(state>>32))
	b := make([]byte, 4*len(w))
	for i, x := range w {
		binary.LittleEndian.PutUint32(b[4*i:], x)
	}
	return b
}

// padWorld is the shared memory of a traced "process" (the control
// block and ownedLanes+1 lanes, as mapLanes sets them up), the stub's
// lanes over it, a state block, a stack and a code mapping.
type padWorld struct {
	l      *lanes
	state  []byte
	stack  []byte
	code   []byte
	siteSP uint64
}

func mmapTest(t *testing.T, n, prot int) []byte {
	t.Helper()
	m, err := unix.Mmap(-1, 0, n, prot, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(m) })
	return m
}

func newPadWorld(t *testing.T) *padWorld {
	t.Helper()
	rw := unix.PROT_READ | unix.PROT_WRITE
	n := ownedLanes + 1
	data := mmapTest(t, int(ctlBytes+uint64(n)*padLane), rw)
	addr := uint64(uintptr(unsafe.Pointer(&data[0])))
	l := newLanes(&inferior.SharedMemory{Addr: addr, Data: data}, padLane, n)
	c := l.ctl()
	store64(c, jit.CtlTSVs, addr+tsvOff)
	store64(c, jit.CtlNTSVs, padTSVs)
	store64(c, jit.CtlStubAlive, 4242)
	store64(c, jit.CtlActive, 1)
	for i := range n {
		store64(c, laneHdr(i)+jit.LaneBase, addr+l.dataOff(i))
		store64(c, laneHdr(i)+jit.LaneSize, padLane)
	}
	w := &padWorld{l: l, state: mmapTest(t, 4096, rw), stack: mmapTest(t, padStack, rw), code: mmapTest(t, 64<<10, rw)}
	w.siteSP = uint64(uintptr(unsafe.Pointer(&w.stack[0]))) + padStack - 256
	return w
}

// install builds the pad of spec (control block, lanes, addresses filled
// in) and loads it after the driver.
func (w *padWorld) install(t *testing.T, spec jit.PadSpec) {
	t.Helper()
	base := uint64(uintptr(unsafe.Pointer(&w.code[0])))
	spec.Ctl, spec.Lanes, spec.TPAddr = w.l.mem.Addr, ownedLanes, padTPAddr
	spec.Addr, spec.TailAddr = base+padAt, base+driverTail
	pad, err := jit.BuildJumpPadA64(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Mprotect(w.code, unix.PROT_READ|unix.PROT_WRITE); err != nil {
		t.Fatal(err)
	}
	copy(w.code, padDriver(uint64(uintptr(unsafe.Pointer(&w.state[0])))))
	copy(w.code[padAt:], pad.Code)
	if err := unix.Mprotect(w.code, unix.PROT_READ|unix.PROT_EXEC); err != nil {
		t.Fatal(err)
	}
}

// padRegs is what a hit's site has in its registers.
type padRegs struct {
	X    [31]uint64
	NZCV uint64
	TP   uint64
	Q    [32][2]uint64
}

// patternRegs returns distinct register values with thread pointer tp.
func patternRegs(tp uint64) padRegs {
	r := padRegs{NZCV: 0x60000000, TP: tp}
	for i := range r.X {
		r.X[i] = 0x0102030405060708*uint64(i+1) ^ 0xa5a5_0000_0000_0000
	}
	for i := range r.Q {
		r.Q[i] = [2]uint64{0x1111_2222_3333_4444 + uint64(i)<<56, 0x5555_6666_7777_8888 ^ uint64(i)<<40}
	}
	return r
}

// hit runs the pad once from a site with registers in.
func (w *padWorld) hit(in padRegs) {
	le := binary.LittleEndian
	for i, x := range in.X {
		le.PutUint64(w.state[stX+8*i:], x)
	}
	le.PutUint64(w.state[stNZCV:], in.NZCV)
	le.PutUint64(w.state[stTP:], in.TP)
	le.PutUint64(w.state[stSiteSP:], w.siteSP)
	for i, q := range in.Q {
		le.PutUint64(w.state[stQ+16*i:], q[0])
		le.PutUint64(w.state[stQ+16*i+8:], q[1])
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	fv := &struct{ pc uintptr }{uintptr(unsafe.Pointer(&w.code[0]))}
	f := *(*func(uintptr))(unsafe.Pointer(&fv))
	f(uintptr(unsafe.Pointer(&w.state[0])))
}

// compileA64 compiles an agent expression for the arm64 pads.
func compileA64(t *testing.T, src string) *jit.Code {
	t.Helper()
	e, err := agentexpr.Parse(agentexpr.MustAssemble(src))
	if err != nil {
		t.Fatal(err)
	}
	c, err := jit.Compile(e, "arm64", jit.Options{})
	if err != nil || c.Fallback != "" {
		t.Fatalf("compile %q: %v %s", src, err, c.Fallback)
	}
	return c
}

// TestPadDriverDecodes checks the driver's encodings with arm64asm.
func TestPadDriverDecodes(t *testing.T) {
	code := padDriver(0x1234_5678_9000)
	for off := 0; off < driverTail+64; off += 4 {
		if _, err := arm64asm.Decode(code[off : off+4]); err != nil {
			t.Errorf("+%d: % x: %v", off, code[off:off+4], err)
		}
	}
}

// TestArm64LaneRecords runs arm64 pads and drains their records with
// lanes.drain (ParseLane, compact completion): each record's lane,
// thread, time and, with registers, every slot of the arm64 block.
func TestArm64LaneRecords(t *testing.T) {
	const tp = 0x7f12_3456_7000
	for _, tc := range []struct {
		name    string
		spec    func(t *testing.T) jit.PadSpec
		thread  uint64
		compact bool
		regs    bool
	}{
		{"registers, own lane", func(t *testing.T) jit.PadSpec {
			return jit.PadSpec{CollectRegs: true, Collect: []*jit.Code{compileA64(t, "tracev 2; end")}, CollectCap: 16}
		}, tp, false, true},
		{"registers, shared lane", func(*testing.T) jit.PadSpec { return jit.PadSpec{CollectRegs: true} }, 0, false, true},
		{"compact", func(*testing.T) jit.PadSpec { return jit.PadSpec{Compact: true} }, tp, true, false},
		{"header only", func(*testing.T) jit.PadSpec { return jit.PadSpec{} }, tp, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newPadWorld(t)
			spec := tc.spec(t)
			spec.TPIndex = 3
			w.install(t, spec)
			store64(w.l.ctl(), tsvOff+8*2, 0x1122334455667788)
			in := patternRegs(tc.thread)
			clock := newTSCClock()
			if !clock.fixed || clock.perTSC <= 0 {
				t.Fatalf("clock rate %g ns per tick not from cntfrq_el0 (%d Hz)", clock.perTSC, cntfrq())
			}
			start, before := time.Now().UnixNano(), rdtsc()
			w.hit(in)
			w.hit(in)
			after, end := rdtsc(), time.Now().UnixNano()
			recs, lost, more, err := w.l.drain(nil, false)
			if err != nil || lost != 0 || more || len(recs) != 2 {
				t.Fatalf("drain: %d records, lost %d, more %v, %v", len(recs), lost, more, err)
			}
			lane := ownedLanes
			if tc.thread != 0 {
				lane = jit.LaneSlot(tc.thread, ownedLanes)
			}
			for i, r := range recs {
				if r.Lane != lane || r.TPIndex != 3 || r.Thread != tc.thread || r.Compact != tc.compact || r.HasRegs() != tc.regs {
					t.Errorf("record %d: lane %d tp %d thread %#x compact %v regs %v, want %d 3 %#x %v %v",
						i, r.Lane, r.TPIndex, r.Thread, r.Compact, r.HasRegs(), lane, tc.thread, tc.compact, tc.regs)
				}
				if r.Time < before || r.Time > after || (i > 0 && r.Time < recs[i-1].Time) {
					t.Errorf("record %d: time %d not in [%d, %d] in order", i, r.Time, before, after)
				}
				if ns := clock.snapshot().nanos(r.Time); ns < start-clockSlack || ns > end+clockSlack {
					t.Errorf("record %d: %d ns, not within %d ns of [%d, %d]", i, ns, clockSlack, start, end)
				}
				if tc.regs {
					checkBlock(t, r, in, w.siteSP)
				}
			}
			w.l.release()
		})
	}
}

// checkBlock compares a record's arm64 register block with the site's
// registers: x0-x30 but x28 (Go's g), sp, pc, cpsr, q0-q31.
func checkBlock(t *testing.T, r *RingRecord, in padRegs, sp uint64) {
	t.Helper()
	if len(r.Regs) != jit.PadRegBlockARM64 {
		t.Fatalf("register block of %d bytes, want %d", len(r.Regs), jit.PadRegBlockARM64)
	}
	for i, x := range in.X {
		if i != 28 && r.Reg(tdesc.AArch64X0+i) != x {
			t.Errorf("x%d = %#x, want %#x", i, r.Reg(i), x)
		}
	}
	if r.Reg(tdesc.AArch64SP) != sp || r.Reg(tdesc.AArch64PC) != padTPAddr || r.Reg(tdesc.AArch64CPSR) != in.NZCV {
		t.Errorf("sp pc cpsr %#x %#x %#x, want %#x %#x %#x", r.Reg(tdesc.AArch64SP), r.Reg(tdesc.AArch64PC),
			r.Reg(tdesc.AArch64CPSR), sp, padTPAddr, in.NZCV)
	}
	for i, q := range in.Q {
		got := [2]uint64{r.Reg(jit.PadQRegsARM64/8 + 2*i), r.Reg(jit.PadQRegsARM64/8 + 2*i + 1)}
		if got != q {
			t.Errorf("q%d = %x, want %x", i, got, q)
		}
	}
}

// TestArm64DrainIntoEngine drains an arm64 pad's record into a running
// engine with the aarch64 layout: the frame's registers are the site's
// under GDB's aarch64 numbers (x0-x30, sp, pc, cpsr, v0-v31, fpsr, fpcr),
// and its time is the counter converted with cntfrq_el0.
func TestArm64DrainIntoEngine(t *testing.T) {
	e := tracing.NewEngine(tracing.Config{Layout: tdesc.AArch64Linux(), Installer: nopInstaller{}})
	for _, p := range []string{"QTinit", "QTDP:1:40001230:E:0:0-", "QTDP:-1:40001230:R" + allRegsMask(), "QTStart"} {
		if r, _ := e.HandlePacket([]byte(p)); string(r) != "OK" {
			t.Fatalf("%s: %s", p, r)
		}
	}
	w := newPadWorld(t)
	in := &Installer{engine: e, logf: t.Logf, lanes: w.l, bySlot: make([]*jumpSite, maxSlots), clock: newTSCClock()}
	in.bySlot[0] = &jumpSite{tp: e.Tracepoints()[0]}
	w.install(t, jit.PadSpec{CollectRegs: true})
	regs := patternRegs(0x7f00_0000_5000)
	w.hit(regs)
	if n := in.drainOnce(false); n != 1 {
		t.Fatalf("drained %d records, want 1", n)
	}
	if r, _ := e.HandlePacket([]byte("QTFrame:0")); string(r) != "F0T1" {
		t.Fatalf("QTFrame:0 = %s", r)
	}
	got, ok := e.FrameRegisters()
	if !ok {
		t.Fatal("no frame registers")
	}
	want := map[int][]byte{tdesc.AArch64SP: le64(w.siteSP), tdesc.AArch64PC: le64(padTPAddr), tdesc.AArch64CPSR: le64(regs.NZCV)[:4]}
	for i, x := range regs.X {
		if i != 28 {
			want[tdesc.AArch64X0+i] = le64(x)
		}
	}
	for i, q := range regs.Q {
		want[tdesc.AArch64V0+i] = append(le64(q[0]), le64(q[1])...)
	}
	for num, v := range want {
		if !got.Valid[num] || string(got.Get(num)) != string(v) {
			t.Errorf("register %s = % x (valid %v), want % x", got.Layout.Regs[num].Name, got.Get(num), got.Valid[num], v)
		}
	}
	if !got.Valid[tdesc.AArch64FPSR] || !got.Valid[tdesc.AArch64FPCR] {
		t.Errorf("fpsr, fpcr not collected")
	}
}

// allRegsMask is an R action's mask naming every aarch64 register.
func allRegsMask() string { return strings.Repeat("f", (tdesc.AArch64NumRegs+3)/4) }

func le64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
