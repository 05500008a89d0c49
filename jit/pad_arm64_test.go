package jit

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/arch/arm64/arm64asm"
	"golang.org/x/sys/unix"

	"gotpstub/agentexpr"
)

// The arm64 jump pad tests run the pads in the test process (under
// qemu-aarch64 on x86 hosts). A generated driver, called with callJIT,
// loads every register from a64State's in area — x0-x27, x29, x30, nzcv,
// q0-q31, fpsr, fpcr and tpidr_el0 — and branches to the pad; the pad's
// tail is the driver's second half, which stores all of them (and sp)
// into the out area and returns to Go. The driver keeps x28 (Go's g: the
// runtime's signal handler reads it, and a signal may come while the pad
// runs) and runs the "site" on a private stack; it restores Go's
// fpcr, fpsr and tpidr_el0 afterwards.

// Offsets in the state page: in area at 0, out area at a64Out; in each,
// x0-x30 at 8*i, nzcv, fpsr, fpcr at a64NZCV.., q0-q31 at a64Q, and the
// thread pointer (in) or sp after the tail (out) at a64Extra.
const (
	a64NZCV  = 248
	a64FPSR  = 256
	a64FPCR  = 264
	a64Q     = 272
	a64Extra = a64Q + 32*16 // 784
	a64Out   = 1024
	// a64DriverFrame is the driver's frame above the site's sp: Go's
	// x19, x28, x29, x30, the state's address, Go's tpidr_el0, fpcr and
	// fpsr, and the tail's x0 and x1.
	a64DriverFrame = 80
)

// a64Driver returns the driver code; the B to the pad is at padB and the
// tail starts at tail.
func a64Driver() (code []byte, padB, tail int) {
	var a a64asm
	a.subImm(xsp, xsp, a64DriverFrame) // S = sp: the site's sp
	a.stp(19, 28, xsp, 0)
	a.stp(xfp, xlr, xsp, 16)
	a.str(0, xsp, 32)
	a.mrs(1, sysTPIDREL0)
	a.str(1, xsp, 40)
	a.mrs(1, sysFPCR)
	a.mrs(2, sysFPSR)
	a.stp(1, 2, xsp, 48)
	a.addImm(9, 0, a64Q)
	for q := xreg(0); q < 32; q += 2 {
		a.ldpQ(q, q+1, 9, int32(16*q))
	}
	for _, r := range []struct {
		off uint32
		s   a64sysreg
	}{{a64FPSR, sysFPSR}, {a64FPCR, sysFPCR}, {a64Extra, sysTPIDREL0}, {a64NZCV, sysNZCV}} {
		a.ldr(9, 0, r.off, 8)
		a.msr(r.s, 9)
	}
	for r := xreg(1); r < 27; r += 2 {
		a.ldp(r, r+1, 0, int32(8*r))
	}
	a.ldr(27, 0, 27*8, 8)
	a.ldp(29, 30, 0, 29*8)
	a.ldr(0, 0, 0, 8)
	padB = a.b()
	for a.pos()%16 != 0 {
		a.nop()
	}
	tail = a.pos()
	a.stp(0, 1, xsp, 64) // nothing below sp: the red zone check sees the pad alone
	a.mrs(1, sysNZCV)
	a.ldr(0, xsp, 32, 8)
	a.addImm(0, 0, a64Out)
	a.str(1, 0, a64NZCV)
	for r := xreg(2); r < 30; r += 2 {
		a.stp(r, r+1, 0, int32(8*r))
	}
	a.str(30, 0, 30*8)
	a.ldp(2, 3, xsp, 64)
	a.stp(2, 3, 0, 0)
	a.addImm(2, xsp, 0)
	a.str(2, 0, a64Extra)
	for q := xreg(0); q < 32; q += 2 {
		a.stpQ(q, q+1, 0, int32(a64Q+16*q))
	}
	a.mrs(2, sysFPSR)
	a.str(2, 0, a64FPSR)
	a.mrs(2, sysFPCR)
	a.str(2, 0, a64FPCR)
	a.ldp(1, 2, xsp, 48)
	a.msr(sysFPCR, 1)
	a.msr(sysFPSR, 2)
	a.ldr(1, xsp, 40, 8)
	a.msr(sysTPIDREL0, 1)
	a.ldp(19, 28, xsp, 0)
	a.ldp(xfp, xlr, xsp, 16)
	a.addImm(xsp, xsp, a64DriverFrame)
	a.retReg(xlr)
	return a.buf, padB, tail
}

// a64State is one hit's registers: what the driver loads (in) and what
// the tail captured (out).
type a64State struct {
	X          [31]uint64
	NZCV       uint64
	FPSR, FPCR uint64
	Q          [32][2]uint64
	Extra      uint64 // in: tpidr_el0; out: sp at the tail
}

func (s *a64State) put(b []byte) {
	for i, x := range s.X {
		binary.LittleEndian.PutUint64(b[8*i:], x)
	}
	binary.LittleEndian.PutUint64(b[a64NZCV:], s.NZCV)
	binary.LittleEndian.PutUint64(b[a64FPSR:], s.FPSR)
	binary.LittleEndian.PutUint64(b[a64FPCR:], s.FPCR)
	for i, q := range s.Q {
		binary.LittleEndian.PutUint64(b[a64Q+16*i:], q[0])
		binary.LittleEndian.PutUint64(b[a64Q+16*i+8:], q[1])
	}
	binary.LittleEndian.PutUint64(b[a64Extra:], s.Extra)
}

func (s *a64State) get(b []byte) {
	for i := range s.X {
		s.X[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	s.NZCV = binary.LittleEndian.Uint64(b[a64NZCV:])
	s.FPSR = binary.LittleEndian.Uint64(b[a64FPSR:])
	s.FPCR = binary.LittleEndian.Uint64(b[a64FPCR:])
	for i := range s.Q {
		s.Q[i][0] = binary.LittleEndian.Uint64(b[a64Q+16*i:])
		s.Q[i][1] = binary.LittleEndian.Uint64(b[a64Q+16*i+8:])
	}
	s.Extra = binary.LittleEndian.Uint64(b[a64Extra:])
}

// a64Pattern is a register file with distinct values everywhere, flags
// nzcv and thread pointer tp.
func a64Pattern(nzcv, tp uint64) a64State {
	var s a64State
	for i := range s.X {
		s.X[i] = 0x0102030405060708*uint64(i+1) ^ 0xa5a5_0000_0000_0000
	}
	for i := range s.Q {
		s.Q[i] = [2]uint64{0x1111_2222_3333_4444 + uint64(i)<<56, 0x5555_6666_7777_8888 ^ uint64(i)<<40}
	}
	s.NZCV = nzcv
	s.FPSR = 0x0800009f // QC and the cumulative exception bits
	s.FPCR = 0x03400000 // DN, FZ, round towards +inf
	s.Extra = tp
	return s
}

// a64Rig is a traced "process" in the test's memory: a control block,
// its lanes and TSVs, a stack, and one pad run through the driver.
type a64Rig struct {
	mem      []byte // control block, TSVs, lane data
	ctl      uint64
	lanes    int
	laneSize uint64
	stack    []byte
	state    []byte
	code     *codeArena
	pad      *JumpPad
	spec     PadSpec
	driver   uintptr
}

const (
	a64CtlBytes  = 32 << 10
	a64TSVOff    = 30 << 10
	a64NTSVs     = 8
	a64TPAddr    = 0x4000_1234
	a64StackSize = 64 << 10
	a64Canary    = 0x5a
)

func newA64Rig(t *testing.T, lanes int, laneSize uint64) *a64Rig {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	mmap := func(n int) []byte {
		m, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Munmap(m) })
		return m
	}
	r := &a64Rig{lanes: lanes, laneSize: laneSize, code: newCodeArena(t, 1<<16),
		mem: mmap(a64CtlBytes + (lanes+1)*int(laneSize)), stack: mmap(a64StackSize), state: mmap(pageSize)}
	r.ctl = uint64(uintptr(unsafe.Pointer(&r.mem[0])))
	r.store(CtlActive, 1)
	r.store(CtlStubAlive, 4242)
	r.store(CtlTSVs, r.ctl+a64TSVOff)
	r.store(CtlNTSVs, a64NTSVs)
	r.store(CtlPid, uint64(os.Getpid()))
	for i := 0; i <= lanes; i++ {
		h := CtlLanes + i*LaneHdrSize
		r.store(h+LaneBase, r.ctl+a64CtlBytes+uint64(i)*laneSize)
		r.store(h+LaneSize, laneSize)
	}
	if CtlTPs+16*CtlTPSize > a64TSVOff {
		t.Fatal("control block too small")
	}
	return r
}

func (r *a64Rig) load(off int) uint64     { return binary.LittleEndian.Uint64(r.mem[off:]) }
func (r *a64Rig) store(off int, v uint64) { binary.LittleEndian.PutUint64(r.mem[off:], v) }
func (r *a64Rig) lane(i int) int          { return CtlLanes + i*LaneHdrSize }
func (r *a64Rig) tp(idx uint32) int       { return CtlTPs + int(idx)*CtlTPSize }
func (r *a64Rig) laneData(i int) []byte {
	return r.mem[a64CtlBytes+i*int(r.laneSize):][:r.laneSize]
}

// install builds the pad of spec (Ctl, Lanes, TPAddr, Addr and TailAddr
// filled in) and loads it with the driver.
func (r *a64Rig) install(t *testing.T, spec PadSpec) {
	t.Helper()
	drv, padB, tail := a64Driver()
	base := uint64(uintptr(unsafe.Pointer(&r.code.mem[0])))
	spec.Ctl, spec.Lanes, spec.TPAddr = r.ctl, r.lanes, a64TPAddr
	spec.Addr, spec.TailAddr = base+4096, base+uint64(tail)
	pad, err := BuildJumpPadA64(spec)
	if err != nil {
		t.Fatal(err)
	}
	var a a64asm
	a.buf = drv
	a.patch(padB, 4096)
	r.code.reset()
	if _, ok := r.code.add(t, a.buf); !ok {
		t.Fatal("driver does not fit")
	}
	r.code.used = 4096
	if at, ok := r.code.add(t, pad.Code); !ok || uint64(at) != spec.Addr {
		t.Fatalf("pad at %#x, want %#x", at, spec.Addr)
	}
	r.code.seal(t)
	r.pad, r.spec, r.driver = pad, spec, uintptr(base)
}

// siteSP is the site's sp: callJIT's stack top minus the driver's
// frame.
func (r *a64Rig) siteSP() uint64 {
	return uint64(uintptr(unsafe.Pointer(&r.stack[0]))) + a64StackSize - a64DriverFrame
}

// hit runs the pad once with registers in and returns what reached the
// tail. It checks that the 128 bytes below the site's sp and the stack
// below the pad's StackBytes are untouched.
func (r *a64Rig) hit(t *testing.T, in a64State) a64State {
	t.Helper()
	for i := range r.stack {
		r.stack[i] = a64Canary
	}
	in.put(r.state)
	top := uintptr(unsafe.Pointer(&r.stack[0])) + a64StackSize
	callJIT(r.driver, uintptr(unsafe.Pointer(&r.state[0])), 0, top)
	var out a64State
	out.get(r.state[a64Out:])
	sp := int(r.siteSP() - uint64(uintptr(unsafe.Pointer(&r.stack[0]))))
	for i := sp - padA64RedZone; i < sp; i++ {
		if r.stack[i] != a64Canary {
			t.Fatalf("byte %d below sp changed (red zone)", sp-i)
		}
	}
	for i := 0; i < sp-r.pad.StackBytes; i++ {
		if r.stack[i] != a64Canary {
			t.Fatalf("stack written %d bytes below sp, StackBytes %d", sp-i, r.pad.StackBytes)
		}
	}
	return out
}

// checkSame compares the state at the tail with the state the driver
// loaded, register by register; x28 is Go's g (not loaded).
func checkSame(t *testing.T, what string, in, out a64State, sp uint64) {
	t.Helper()
	var bad []string
	for i := range in.X {
		if i != 28 && in.X[i] != out.X[i] {
			bad = append(bad, fmt.Sprintf("x%d %#x want %#x", i, out.X[i], in.X[i]))
		}
	}
	if in.NZCV != out.NZCV {
		bad = append(bad, fmt.Sprintf("nzcv %#x want %#x", out.NZCV, in.NZCV))
	}
	for i := range in.Q {
		if in.Q[i] != out.Q[i] {
			bad = append(bad, fmt.Sprintf("q%d %x want %x", i, out.Q[i], in.Q[i]))
		}
	}
	if in.FPSR != out.FPSR || in.FPCR != out.FPCR {
		bad = append(bad, fmt.Sprintf("fpsr %#x fpcr %#x want %#x %#x", out.FPSR, out.FPCR, in.FPSR, in.FPCR))
	}
	if out.Extra != sp {
		bad = append(bad, fmt.Sprintf("sp %#x want %#x", out.Extra, sp))
	}
	if len(bad) > 0 {
		t.Errorf("%s: %s", what, strings.Join(bad, "; "))
	}
}

// compileA64 assembles and compiles an agent expression for arm64.
func compileA64(t testing.TB, src string) *Code {
	t.Helper()
	e, err := agentexpr.Parse(agentexpr.MustAssemble(src))
	if err != nil {
		t.Fatalf("parse %q: %v", src, err)
	}
	c, err := Compile(e, "arm64", Options{})
	if err != nil || c.Fallback != "" {
		t.Fatalf("compile %q: %v %s", src, err, c.Fallback)
	}
	return c
}

// a64Record is a parsed lane record.
type a64Record struct {
	compact               bool
	size, tp, used, flags uint32
	time, thread          uint64
	regs, blocks          []byte
	cursor                uint64
}

// parseA64Lane reads the committed records of a lane from cursor 0 to
// head with the record constants (what fasttp's ParseLane does, with the
// arm64 register block).
func parseA64Lane(t *testing.T, data []byte, head uint64) []a64Record {
	t.Helper()
	var recs []a64Record
	size := uint64(len(data))
	for cur := uint64(0); cur < head; {
		off := cur & (size - 1)
		w := binary.LittleEndian.Uint64(data[off:])
		if w&RecCompactBit != 0 {
			tp := uint32(w >> RecCompactTPShift & RecCompactSkip)
			if tp == RecCompactSkip {
				if w != RecCompactBit|RecCompactSkip<<RecCompactTPShift {
					t.Fatalf("filler %#x", w)
				}
				cur += size - off
				continue
			}
			recs = append(recs, a64Record{compact: true, tp: tp, time: w & (1<<RecCompactTimeBits - 1), cursor: cur})
			cur += RecCompactSize
			continue
		}
		rec := a64Record{size: uint32(w), tp: uint32(w >> 32), cursor: cur,
			used:   binary.LittleEndian.Uint32(data[off+RecUsed:]),
			flags:  binary.LittleEndian.Uint32(data[off+RecFlags:]),
			time:   binary.LittleEndian.Uint64(data[off+RecTime:]),
			thread: binary.LittleEndian.Uint64(data[off+RecThread:])}
		if rec.size == 0 || rec.size%RecAlign != 0 || uint64(rec.size) > size-off {
			t.Fatalf("record at %d: size %d", cur, rec.size)
		}
		body := data[off+RecHeaderSize : off+uint64(rec.size)]
		if rec.flags&RecRegs != 0 {
			rec.regs, body = body[:PadRegBlockARM64], body[PadRegBlockARM64:]
		}
		if rec.flags&RecError == 0 {
			rec.blocks = body[:rec.used]
		}
		recs = append(recs, rec)
		cur += uint64(rec.size)
	}
	return recs
}

// records returns the records of lane i.
func (r *a64Rig) records(t *testing.T, i int) []a64Record {
	t.Helper()
	return parseA64Lane(t, r.laneData(i), r.load(r.lane(i)+LaneHead))
}

func (r *a64Rig) allRecords(t *testing.T) (n int) {
	for i := 0; i <= r.lanes; i++ {
		n += len(r.records(t, i))
	}
	return n
}

// TestPadA64PreservesState runs pads of every shape with several flag
// combinations: every register must reach the tail as it left the site.
func TestPadA64PreservesState(t *testing.T) {
	specs := []struct {
		name   string
		spec   func(t *testing.T) PadSpec
		active uint64
	}{
		{"inactive", func(*testing.T) PadSpec { return PadSpec{} }, 0},
		{"no actions", func(*testing.T) PadSpec { return PadSpec{} }, 1},
		{"compact", func(*testing.T) PadSpec { return PadSpec{Compact: true} }, 1},
		{"false condition", func(t *testing.T) PadSpec {
			return PadSpec{Cond: compileA64(t, "reg 3; const8 1; equal; end")}
		}, 1},
		{"regs and collection", func(t *testing.T) PadSpec {
			return PadSpec{Cond: compileA64(t, "reg 16; reg 17; sub; end"), CollectRegs: true,
				Collect: []*Code{compileA64(t, "tracev 2; end")}, CollectCap: 32}
		}, 1},
		{"collection error", func(t *testing.T) PadSpec {
			return PadSpec{Collect: []*Code{compileA64(t, "const8 0; const8 1; div_signed; end")}, CollectCap: 16}
		}, 1},
	}
	for _, sc := range specs {
		for _, nzcv := range []uint64{0, 0x80000000, 0x40000000, 0x20000000, 0x10000000, 0xf0000000, 0x60000000} {
			for _, tp := range []uint64{0, 0x7f00_1234_5000} {
				t.Run(fmt.Sprintf("%s/nzcv=%#x/tp=%#x", sc.name, nzcv, tp), func(t *testing.T) {
					r := newA64Rig(t, 4, 4096)
					r.store(CtlActive, sc.active)
					r.install(t, sc.spec(t))
					in := a64Pattern(nzcv, tp)
					out := r.hit(t, in)
					// What the hardware keeps of fpsr and fpcr: their
					// values right after the driver set them.
					r.store(CtlActive, 0)
					base := r.hit(t, in)
					in.FPSR, in.FPCR = base.FPSR, base.FPCR
					checkSame(t, "baseline", in, base, r.siteSP())
					checkSame(t, "pad", in, out, r.siteSP())
				})
			}
		}
	}
}

// TestPadA64Record checks a record with registers and a collection: the
// header, the register block slot by slot, the SIMD/FP part and the
// block, and the lane the thread claimed.
func TestPadA64Record(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tp     uint64
		bias   int32
		lanes  int
		shared bool
	}{
		{"owned lane", 0x7f12_3456_7000, 0, 4, false},
		{"shared lane (tp 0)", 0, 16, 4, true},
		{"one lane", 0x7f12_3456_7000, -32, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newA64Rig(t, tc.lanes, 4096)
			binary.LittleEndian.PutUint64(r.mem[a64TSVOff+8*2:], 0x1122334455667788)
			spec := PadSpec{TPIndex: 5, Cond: compileA64(t, "reg 2; reg 1; less_unsigned; end"),
				Collect:    []*Code{compileA64(t, "tracev 2; end"), compileA64(t, "reg 31; reg 33; add; setv 3; tracev 3; end")},
				CollectCap: 64, CollectRegs: true, SPBias: tc.bias, FrameBase: 100}
			r.install(t, spec)
			in := a64Pattern(0x90000000, tc.tp)
			out := r.hit(t, in)
			r.store(CtlActive, 0)
			base := r.hit(t, in)
			in.FPSR, in.FPCR = base.FPSR, base.FPCR
			checkSame(t, "pad", in, out, r.siteSP())

			lane := LaneSlot(tc.tp, tc.lanes)
			if tc.shared {
				lane = tc.lanes
			} else if got := r.load(CtlOwners + 8*lane); got != tc.tp {
				t.Fatalf("owner %d = %#x, want %#x", lane, got, tc.tp)
			}
			recs := r.records(t, lane)
			if len(recs) != 1 || r.allRecords(t) != 1 {
				t.Fatalf("lane %d: %d records (%d in all), want 1", lane, len(recs), r.allRecords(t))
			}
			rec := recs[0]
			if want := PadRecordSizeARM64(true, 64); rec.size != uint32(want) || rec.tp != 5 || rec.flags != RecRegs || rec.thread != tc.tp || rec.time == 0 {
				t.Errorf("header %+v, want size %d tp 5 flags RecRegs thread %#x", rec, want, tc.tp)
			}
			reg := func(i int) uint64 { return binary.LittleEndian.Uint64(rec.regs[8*i:]) }
			for i := 0; i < 31; i++ {
				want := in.X[i]
				if i == 28 {
					want = base.X[28]
				}
				if reg(i) != want {
					t.Errorf("slot x%d = %#x, want %#x", i, reg(i), want)
				}
			}
			sp := uint64(int64(r.siteSP()) + int64(tc.bias))
			if reg(31) != sp || reg(32) != a64TPAddr || reg(33) != in.NZCV {
				t.Errorf("sp pc cpsr = %#x %#x %#x, want %#x %#x %#x", reg(31), reg(32), reg(33), sp, a64TPAddr, in.NZCV)
			}
			for i := 0; i < 32; i++ {
				q := [2]uint64{reg(PadQRegsARM64/8 + 2*i), reg(PadQRegsARM64/8 + 2*i + 1)}
				if q != in.Q[i] {
					t.Errorf("q%d = %x, want %x", i, q, in.Q[i])
				}
			}
			if reg(PadFPSRARM64/8) != in.FPSR || reg(PadFPCRARM64/8) != in.FPCR {
				t.Errorf("fpsr fpcr = %#x %#x, want %#x %#x", reg(PadFPSRARM64/8), reg(PadFPCRARM64/8), in.FPSR, in.FPCR)
			}
			v3 := sp + in.NZCV
			want := append(vBlock(2, 0x1122334455667788), vBlock(3, v3)...)
			if string(rec.blocks) != string(want) {
				t.Errorf("blocks % x, want % x", rec.blocks, want)
			}
			if got := r.load(r.lane(lane) + LaneSpent); got != 100+uint64(len(want)) {
				t.Errorf("spent %d, want %d", got, 100+len(want))
			}
		})
	}
}

// vBlock is a 'V' collection block.
func vBlock(num uint32, v uint64) []byte {
	b := []byte{'V'}
	b = binary.LittleEndian.AppendUint32(b, num)
	return binary.LittleEndian.AppendUint64(b, v)
}

// TestPadA64Skips checks the hits that write nothing: collection off, no
// stub, a false condition.
func TestPadA64Skips(t *testing.T) {
	for _, tc := range []struct {
		name     string
		active   uint64
		alive    uint64
		cond     string
		stubGone uint64
	}{
		{"active 0", 0, 4242, "", 0},
		{"stub gone", 1, 0x40000000, "", 1},
		{"false condition", 1, 4242, "reg 0; const8 0; equal; end", 0},
		{"true condition", 1, 4242, "reg 0; const8 0; equal; log_not; end", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newA64Rig(t, 2, 4096)
			r.store(CtlActive, tc.active)
			r.store(CtlStubAlive, tc.alive)
			spec := PadSpec{TPIndex: 1}
			if tc.cond != "" {
				spec.Cond = compileA64(t, tc.cond)
			}
			r.install(t, spec)
			in := a64Pattern(0x20000000, 0x1000)
			out := r.hit(t, in)
			in.FPSR, in.FPCR = out.FPSR, out.FPCR
			checkSame(t, tc.name, in, out, r.siteSP())
			want := 0
			if tc.name == "true condition" {
				want = 1
			}
			if n := r.allRecords(t); n != want {
				t.Errorf("%d records, want %d", n, want)
			}
			if got := r.load(CtlStubGoneSkips); got != tc.stubGone {
				t.Errorf("stubgone %d, want %d", got, tc.stubGone)
			}
			if got := r.load(CtlActive); got != tc.active {
				t.Errorf("active %d, want %d", got, tc.active)
			}
		})
	}
}

// TestPadA64PassCount: a passcount P lets exactly P hits record, then
// stops tracing; a hit past it (collection switched on again by hand, as
// another thread's late hit would see it) is skipped.
func TestPadA64PassCount(t *testing.T) {
	for _, p := range []uint64{1, 3} {
		t.Run(fmt.Sprint(p), func(t *testing.T) {
			r := newA64Rig(t, 2, 4096)
			r.store(r.tp(7)+TPPassCount, p)
			r.install(t, PadSpec{TPIndex: 7, CollectRegs: true})
			in := a64Pattern(0, 0x5000)
			for i := uint64(0); i < p+2; i++ {
				r.hit(t, in)
			}
			if n := r.allRecords(t); uint64(n) != p {
				t.Errorf("%d records, want %d", n, p)
			}
			if got := r.load(CtlStop); got != StopPassCount|7<<32 {
				t.Errorf("stop %#x", got)
			}
			if r.load(CtlActive) != 0 || r.load(r.tp(7)+TPHits) != p {
				t.Errorf("active %d hits %d", r.load(CtlActive), r.load(r.tp(7)+TPHits))
			}
			r.store(CtlActive, 1)
			r.hit(t, in)
			if n := r.allRecords(t); uint64(n) != p || r.load(r.tp(7)+TPHits) != p+1 {
				t.Errorf("after the passcount: %d records, hits %d", n, r.load(r.tp(7)+TPHits))
			}
		})
	}
}

// TestPadA64FullLane: records fill a lane, the next hit is dropped and
// counted; once the consumer moves the tail a record that does not fit
// before the lane's end leaves a filler word and goes to the start.
func TestPadA64FullLane(t *testing.T) {
	r := newA64Rig(t, 1, 256)
	r.install(t, PadSpec{TPIndex: 2, Collect: []*Code{compileA64(t, "tracev 0; end")}, CollectCap: 16})
	size := PadRecordSizeARM64(false, 16) // 48
	in := a64Pattern(0, 0x9000)
	for i := 0; i < 6; i++ {
		out := r.hit(t, in)
		in.FPSR, in.FPCR = out.FPSR, out.FPCR
		checkSame(t, fmt.Sprint("hit ", i), in, out, r.siteSP())
	}
	h := r.lane(0)
	if head, dropped := r.load(h+LaneHead), r.load(h+LaneDropped); head != 5*size || dropped != 1 {
		t.Fatalf("head %d dropped %d, want %d 1", head, dropped, 5*size)
	}
	// The consumer takes every record: zero them, move the tail.
	clear(r.laneData(0))
	r.store(h+LaneTail, 5*size)
	r.hit(t, in)
	data := r.laneData(0)
	if w := binary.LittleEndian.Uint64(data[5*size:]); w != RecCompactBit|RecCompactSkip<<RecCompactTPShift {
		t.Errorf("filler %#x", w)
	}
	if got := binary.LittleEndian.Uint32(data); got != uint32(size) {
		t.Errorf("record at the lane start: size %d", got)
	}
	if head := r.load(h + LaneHead); head != 256+size {
		t.Errorf("head %d, want %d", head, 256+size)
	}
}

// TestPadA64Errors: a failing condition writes a header-only RecError
// record, a failing collection turns its record into one; both count the
// error and stop tracing with StopError.
func TestPadA64Errors(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec PadSpec
		code uint32
		size uint64
	}{
		{"condition", PadSpec{Cond: compileA64(t, "const8 1; reg 1; div_unsigned; end"), CollectRegs: true}, ErrDivZero, RecHeaderSize},
		{"collection", PadSpec{Collect: []*Code{compileA64(t, "tracev 1; end"), compileA64(t, "getv 100; end")}, CollectCap: 32, CollectRegs: true},
			ErrTSV, PadRecordSizeARM64(true, 32)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newA64Rig(t, 2, 4096)
			tc.spec.TPIndex = 9
			r.install(t, tc.spec)
			in := a64Pattern(0x40000000, 0x3000)
			in.X[1] = 0
			out := r.hit(t, in)
			r.store(CtlActive, 0)
			base := r.hit(t, in)
			in.FPSR, in.FPCR = base.FPSR, base.FPCR
			checkSame(t, "pad", in, out, r.siteSP())
			lane := LaneSlot(0x3000, 2)
			recs := r.records(t, lane)
			if len(recs) != 1 {
				t.Fatalf("%d records", len(recs))
			}
			if rec := recs[0]; rec.flags != RecError || rec.used != tc.code || uint64(rec.size) != tc.size || rec.tp != 9 || rec.thread != 0x3000 {
				t.Errorf("record %+v, want RecError code %d size %d", rec, tc.code, tc.size)
			}
			if r.load(r.tp(9)+TPErrors) != 1 || r.load(CtlStop) != StopError|9<<32 {
				t.Errorf("errors %d stop %#x", r.load(r.tp(9)+TPErrors), r.load(CtlStop))
			}
			if r.load(r.lane(lane)+LaneSpent) != 0 {
				t.Errorf("error record spent %d", r.load(r.lane(lane)+LaneSpent))
			}
		})
	}
}

// TestPadA64Compact: a tracepoint that collects nothing writes one word
// in the thread's own lane, a full record in the shared lane.
func TestPadA64Compact(t *testing.T) {
	r := newA64Rig(t, 4, 4096)
	r.install(t, PadSpec{TPIndex: 300, Compact: true, FrameBase: 40})
	for _, tp := range []uint64{0x7000, 0x7000, 0} {
		r.hit(t, a64Pattern(0, tp))
	}
	own := LaneSlot(0x7000, 4)
	recs := r.records(t, own)
	if len(recs) != 2 || !recs[0].compact || !recs[1].compact || recs[0].tp != 300 || recs[1].cursor != 8 {
		t.Fatalf("own lane: %+v", recs)
	}
	shared := r.records(t, 4)
	if len(shared) != 1 || shared[0].compact || shared[0].size != RecHeaderSize || shared[0].tp != 300 || shared[0].thread != 0 {
		t.Fatalf("shared lane: %+v", shared)
	}
	if r.load(r.lane(own)+LaneSpent) != 80 || r.load(r.lane(4)+LaneSpent) != 40 {
		t.Errorf("spent %d %d", r.load(r.lane(own)+LaneSpent), r.load(r.lane(4)+LaneSpent))
	}
}

// TestPadA64LaneProbe: an owner table entry held by another thread sends
// the search on; a full table sends the thread to the shared lane.
func TestPadA64LaneProbe(t *testing.T) {
	const tp = 0x7f00_0000_8000
	r := newA64Rig(t, 4, 4096)
	r.install(t, PadSpec{TPIndex: 1})
	first := LaneSlot(tp, 4)
	r.store(CtlOwners+8*first, 0x1234000)
	r.hit(t, a64Pattern(0, tp))
	next := (first + 1) % 4
	if r.load(CtlOwners+8*next) != tp || len(r.records(t, next)) != 1 {
		t.Errorf("not claimed at the next entry %d: owners %#x", next, r.mem[CtlOwners:CtlOwners+32])
	}
	r2 := newA64Rig(t, 2, 4096)
	r2.install(t, PadSpec{TPIndex: 1})
	r2.store(CtlOwners, 0x1000)
	r2.store(CtlOwners+8, 0x2000)
	r2.hit(t, a64Pattern(0, tp))
	if len(r2.records(t, 2)) != 1 {
		t.Errorf("full owner table: no record in the shared lane")
	}
}

// TestPadA64Budget: the record that takes LaneSpent past LaneBudget
// switches collection off.
func TestPadA64Budget(t *testing.T) {
	r := newA64Rig(t, 1, 4096)
	r.store(r.lane(1)+LaneBudget, 250)
	r.install(t, PadSpec{TPIndex: 1, FrameBase: 100})
	for i, active := range []uint64{1, 1, 0} {
		r.hit(t, a64Pattern(0, 0))
		if got := r.load(CtlActive); got != active {
			t.Errorf("after hit %d: active %d, want %d", i, got, active)
		}
	}
}

// TestPadA64Place: a pad built at one address and placed at another is
// the pad built there; a tail out of a B's range is refused.
func TestPadA64Place(t *testing.T) {
	spec := PadSpec{Ctl: 0x10000, Lanes: 2, TPAddr: 0x400000, Cond: compileA64(t, "reg 0; end"),
		Collect: []*Code{compileA64(t, "tracev 1; end")}, CollectCap: 16, CollectRegs: true,
		Addr: 0x7000_0000, TailAddr: 0x7100_0000}
	p, err := BuildJumpPadA64(spec)
	if err != nil {
		t.Fatal(err)
	}
	spec.Addr, spec.TailAddr = 0x5000_0000, 0x4900_0000
	q, err := BuildJumpPadA64(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Place(spec.Addr, spec.TailAddr); err != nil {
		t.Fatal(err)
	}
	if string(p.Code) != string(q.Code) || p.Skip != q.Skip {
		t.Errorf("placed pad differs from the pad built there")
	}
	spec.TailAddr = spec.Addr + 1<<28
	if _, err := BuildJumpPadA64(spec); err == nil {
		t.Errorf("tail 256 MB away accepted")
	}
	if err := q.Retarget(0x1000, 3); err == nil {
		t.Errorf("arm64 pad retargeted")
	}
}

// TestPadA64Decodes: every word of a pad's body decodes, its branches
// land inside the pad, and nothing in it touches a SIMD register but the
// save of the register block (stores only: nothing loads one).
func TestPadA64Decodes(t *testing.T) {
	spec := PadSpec{Ctl: 0x10000, Lanes: 4, TPAddr: 0x400000, Cond: compileA64(t, "reg 0; end"),
		Collect: []*Code{compileA64(t, "tracev 1; end")}, CollectCap: 16, CollectRegs: true,
		Addr: 0x7000_0000, TailAddr: 0x7000_8000}
	p, err := BuildJumpPadA64(spec)
	if err != nil {
		t.Fatal(err)
	}
	var qs int
	for off := 0; off < len(p.Code); off += 4 {
		inst, err := arm64asm.Decode(p.Code[off : off+4])
		if err != nil {
			t.Fatalf("+%d: % x: %v", off, p.Code[off:off+4], err)
		}
		text := arm64asm.GNUSyntax(inst)
		if strings.Contains(text, " q") || strings.Contains(text, " v") {
			if !strings.HasPrefix(text, "stp ") {
				t.Errorf("+%d: %s writes a SIMD register (an SVE z register's upper bits would be lost)", off, text)
			}
			qs++
		}
		for _, arg := range inst.Args {
			rel, ok := arg.(arm64asm.PCRel)
			if !ok {
				continue
			}
			to := int64(off) + int64(rel)
			if to < 0 || to >= int64(len(p.Code)) {
				if uint64(int64(spec.Addr)+to) != spec.TailAddr {
					t.Errorf("+%d: %s leaves the pad", off, text)
				}
			}
		}
	}
	if qs != 16 {
		t.Errorf("%d instructions name q registers, want 16 stp (the save; nothing restores them)", qs)
	}
}

// TestPadA64Threads runs one pad from four threads at once, two owning a
// lane and two sharing the shared lane, or all four in the shared lane
// (thread pointer 0), with lanes that fill up or not: every
// hit is counted (hits through the passcount), records + dropped = hits,
// each lane holds every thread's records in its hit order, and no record
// is torn (its register block is its thread's).
func TestPadA64Threads(t *testing.T) {
	const threads, hits = 4, 300
	for _, tc := range []struct {
		laneSize uint64
		shared   bool
	}{{1 << 20, false}, {32 << 10, false}, {2 << 20, true}, {32 << 10, true}} {
		laneSize := tc.laneSize
		t.Run(fmt.Sprint(laneSize, tc.shared), func(t *testing.T) {
			r := newA64Rig(t, 2, laneSize)
			r.store(r.tp(3)+TPPassCount, threads*hits+1)
			r.install(t, PadSpec{TPIndex: 3, CollectRegs: true,
				Collect: []*Code{compileA64(t, "tracev 5; end")}, CollectCap: 16})
			binary.LittleEndian.PutUint64(r.mem[a64TSVOff+8*5:], 0x5555aaaa)
			r.hitFromThreads(t, threads, hits, func(th, i int, in *a64State) {
				if i == 0 {
					*in = a64Pattern(0x80000000, uint64(th+1)<<20)
					if tc.shared {
						in.Extra = 0
					}
				}
				in.X[0] = uint64(th)<<32 | uint64(i)
			})
			if got := r.load(r.tp(3) + TPHits); got != threads*hits {
				t.Errorf("hits %d, want %d", got, threads*hits)
			}
			total, dropped := 0, uint64(0)
			for l := 0; l <= 2; l++ {
				next := map[uint64]uint64{}
				for _, rec := range r.records(t, l) {
					x0 := binary.LittleEndian.Uint64(rec.regs)
					th, seq := x0>>32, x0&0xffffffff
					tp := (th + 1) << 20
					if tc.shared {
						tp = 0
					}
					if rec.thread != tp || seq < next[th] {
						t.Fatalf("lane %d: record of thread %#x with x0 %#x after seq %d", l, rec.thread, x0, next[th])
					}
					next[th] = seq + 1
					want := vBlock(5, 0x5555aaaa)
					if string(rec.blocks) != string(want) {
						t.Fatalf("lane %d: blocks % x, want % x", l, rec.blocks, want)
					}
					total++
				}
				dropped += r.load(r.lane(l) + LaneDropped)
			}
			if uint64(total)+dropped != threads*hits {
				t.Errorf("%d records + %d dropped, want %d hits", total, dropped, threads*hits)
			}
			if laneSize < 1<<20 && dropped == 0 {
				t.Errorf("small lanes dropped nothing")
			}
			t.Logf("%d records, %d dropped", total, dropped)
		})
	}
}

// TestPadA64AtomicTSVAdd: threads hitting one pad at once whose action
// is gdb's `teval $n = $n + 1` (an exclusive load/store loop, tsvAdd)
// lose no increment, and the sequence's value is the variable's new
// value (a condition `$n = $n + 1`, never 0, holds on every hit).
func TestPadA64AtomicTSVAdd(t *testing.T) {
	const threads, hits = 4, 3000
	r := newA64Rig(t, 2, 1<<20)
	r.store(r.tp(3)+TPPassCount, threads*hits+1)
	r.install(t, PadSpec{TPIndex: 3,
		Cond:    compileA64(t, "getv 6; const8 1; add; ext 64; setv 6; end"),
		Collect: []*Code{compileA64(t, "getv 7; const8 3; add; setv 7; pop; end")}})
	r.hitFromThreads(t, threads, hits, func(_, i int, in *a64State) {
		if i == 0 {
			*in = a64Pattern(0, 0)
		}
	})
	tsv := func(n int) uint64 { return binary.LittleEndian.Uint64(r.mem[a64TSVOff+8*n:]) }
	if got := tsv(6); got != threads*hits {
		t.Errorf("$6 = %d after %d hits", got, threads*hits)
	}
	if got := tsv(7); got != 3*threads*hits {
		t.Errorf("$7 = %d, want %d", got, 3*threads*hits)
	}
	if got := r.load(r.tp(3) + TPHits); got != threads*hits {
		t.Errorf("hits %d, want %d (the condition held every time)", got, threads*hits)
	}
}

// hitFromThreads runs the rig's pad hits times from each of threads OS
// threads at once, each on a stack of its own; before each hit,
// set(thread, i, &state) sets the registers the driver loads (the state
// is kept between a thread's hits).
func (r *a64Rig) hitFromThreads(t *testing.T, threads, hits int, set func(th, i int, in *a64State)) {
	t.Helper()
	var wg sync.WaitGroup
	for th := 0; th < threads; th++ {
		stack, err := unix.Mmap(-1, 0, a64StackSize+pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Munmap(stack) })
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			state, top := stack[a64StackSize:], uintptr(unsafe.Pointer(&stack[0]))+a64StackSize
			var in a64State
			for i := range hits {
				set(th, i, &in)
				in.put(state)
				callJIT(r.driver, uintptr(unsafe.Pointer(&state[0])), 0, top)
			}
		}()
	}
	wg.Wait()
}
