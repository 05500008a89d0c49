package jit

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/arch/x86/x86asm"
	"golang.org/x/sys/cpu"
	"golang.org/x/sys/unix"

	"gotpstub/agentexpr"
)

// Flag bits used by the pad tests.
const (
	flagCF = 1 << 0
	flagPF = 1 << 2
	flagZF = 1 << 6
	flagSF = 1 << 7
	flagDF = 1 << 10
	flagOF = 1 << 11
)

// siteImm is the immediate of the site instruction add rcx, imm32.
const siteImm = 0x12345678

// rigCtlBytes is the control block of the rig: room for 16 tracepoint
// table entries, rounded to pages.
const rigCtlBytes = (CtlTPs + 16*CtlTPSize + pageSize - 1) &^ (pageSize - 1)

// padRig is an in-process stand-in for an inferior: an RWX code region
// holding a site (add rcx, imm32; ret), a ret-only function, the tail
// (the site instruction + jmp back to the site's ret), an rdtsc function
// and the pad; and an RW region with the control block, the TSVs, a data
// page, a PROT_NONE page and the lanes (nLanes owned ones and the shared
// one, laneSize bytes each).
type padRig struct {
	code                []byte
	site, retOnly, tail uintptr
	tscFn, tscTop       uintptr
	padAddr             uintptr
	pad                 *JumpPad
	spec                PadSpec // the installed pad's
	siteBytes           []byte
	ctlMem              []byte
	ctl                 uintptr
	tsvs                []int64
	data                []byte
	dataAddr, guardAddr uint64
	nLanes              int
	laneSize            uint64
	lanes               [][]byte
}

const (
	rigCodeSize = 1 << 16
	rigPadOff   = 4096
)

// newPadRig maps a rig with nLanes owned lanes (a power of two) of
// laneSize bytes each (a power of two), reset and active.
func newPadRig(t testing.TB, nLanes int, laneSize uint64) *padRig {
	t.Helper()
	code, err := unix.Mmap(-1, 0, rigCodeSize, unix.PROT_READ|unix.PROT_WRITE|unix.PROT_EXEC, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatalf("mmap rwx: %v", err)
	}
	t.Cleanup(func() { unix.Munmap(code) })
	lanesBytes := (uint64(nLanes+1)*laneSize + pageSize - 1) &^ (pageSize - 1)
	rw, err := unix.Mmap(-1, 0, rigCtlBytes+4*pageSize+int(lanesBytes), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatalf("mmap rw: %v", err)
	}
	t.Cleanup(func() { unix.Munmap(rw) })
	guard := rw[rigCtlBytes+2*pageSize : rigCtlBytes+3*pageSize]
	if err := unix.Mprotect(guard, unix.PROT_NONE); err != nil {
		t.Fatalf("mprotect guard: %v", err)
	}
	r := &padRig{code: code, ctlMem: rw[:rigCtlBytes], data: rw[rigCtlBytes+pageSize : rigCtlBytes+2*pageSize],
		nLanes: nLanes, laneSize: laneSize}
	lanes := rw[rigCtlBytes+4*pageSize:]
	for i := range nLanes + 1 {
		r.lanes = append(r.lanes, lanes[uint64(i)*laneSize:uint64(i+1)*laneSize])
	}
	base := uintptr(unsafe.Pointer(&code[0]))
	r.site = base
	r.siteBytes = []byte{0x48, 0x81, 0xc1, 0x78, 0x56, 0x34, 0x12} // add rcx, 0x12345678
	copy(code, r.siteBytes)
	code[len(r.siteBytes)] = 0xc3
	r.retOnly = base + 32
	code[32] = 0xc3
	r.tail = base + 64
	n := copy(code[64:], r.siteBytes)
	code[64+n] = 0xe9
	binary.LittleEndian.PutUint32(code[64+n+1:], uint32(int32(int64(r.site+uintptr(len(r.siteBytes)))-int64(r.tail+uintptr(n)+5))))
	r.tscFn = base + 128
	copy(code[128:], emit(func(a *asm) {
		a.rdtsc()
		a.shiftImm(shiftShl, rDX, 32)
		a.aluRR(aluOr, rAX, rDX)
		a.ret()
	}))
	// The rdtsc function's stack: the top of the page below the lanes.
	r.tscTop = uintptr(unsafe.Pointer(&rw[rigCtlBytes+3*pageSize])) + pageSize
	r.padAddr = base + rigPadOff
	r.ctl = uintptr(unsafe.Pointer(&rw[0]))
	r.tsvs = unsafe.Slice((*int64)(unsafe.Pointer(&rw[rigCtlBytes])), 64)
	r.dataAddr = uint64(uintptr(unsafe.Pointer(&r.data[0])))
	r.guardAddr = uint64(uintptr(unsafe.Pointer(&guard[0])))
	for i := range r.data {
		r.data[i] = byte(i*7 + 1)
	}
	r.reset(true)
	return r
}

// field returns a pointer to the control block's 8-byte field at off.
func (r *padRig) field(off int) *uint64 { return (*uint64)(unsafe.Pointer(&r.ctlMem[off])) }

// load reads the control block's field at off atomically.
func (r *padRig) load(off int) uint64 { return atomic.LoadUint64(r.field(off)) }

// laneField returns a pointer to field off of lane i's header.
func (r *padRig) laneField(i, off int) *uint64 { return r.field(CtlLanes + i*LaneHdrSize + off) }

// tpField returns a pointer to field off of tracepoint table entry i.
func (r *padRig) tpField(i, off int) *uint64 { return r.field(CtlTPs + i*CtlTPSize + off) }

// stopWhy and stopTP decode CtlStop.
func (r *padRig) stopWhy() uint64 { return r.load(CtlStop) & 0xffffffff }
func (r *padRig) stopTP() uint64  { return r.load(CtlStop) >> 32 }

// owner returns owner table entry i.
func (r *padRig) owner(i int) uint64 { return r.load(CtlOwners + 8*i) }

// reset zeroes the control block, the lanes and the TSVs and sets them up:
// a live stub (CtlStubAlive), the lanes' bases and sizes.
func (r *padRig) reset(active bool) {
	clear(r.ctlMem)
	for _, l := range r.lanes {
		clear(l)
	}
	clear(r.tsvs)
	if active {
		*r.field(CtlActive) = 1
	}
	*r.field(CtlStubAlive) = 4242 // a tracer thread id
	*r.field(CtlTSVs) = uint64(uintptr(unsafe.Pointer(&r.tsvs[0])))
	*r.field(CtlNTSVs) = uint64(len(r.tsvs))
	*r.field(CtlPid) = uint64(os.Getpid())
	for i, l := range r.lanes {
		*r.laneField(i, LaneBase) = uint64(uintptr(unsafe.Pointer(&l[0])))
		*r.laneField(i, LaneSize) = r.laneSize
	}
}

// install builds a pad for spec (Addr, TPAddr, Ctl, TailAddr and Lanes
// filled in), copies it in and patches the site. A spec with FSBase is
// skipped where rdfsbase is not allowed.
func (r *padRig) install(t testing.TB, spec PadSpec) {
	t.Helper()
	if spec.FSBase && !padHaveFSBase() {
		t.Skip("rdfsbase not allowed here (no HWCAP2_FSGSBASE)")
	}
	spec.Addr, spec.TPAddr, spec.Ctl, spec.TailAddr = uint64(r.padAddr), uint64(r.site), uint64(r.ctl), uint64(r.tail)
	spec.Lanes = r.nLanes
	p, err := BuildJumpPadAMD64(spec)
	if err != nil {
		t.Fatalf("BuildJumpPadAMD64: %v", err)
	}
	if rigPadOff+len(p.Code) > len(r.code) {
		t.Fatalf("pad too large: %d bytes", len(p.Code))
	}
	r.pad, r.spec = p, spec
	clear(r.code[rigPadOff:])
	copy(r.code[rigPadOff:], p.Code)
	r.code[0] = 0xe9
	binary.LittleEndian.PutUint32(r.code[1:], uint32(int32(int64(r.padAddr)-int64(r.site+5))))
}

// unpatch restores the site's original bytes.
func (r *padRig) unpatch() { copy(r.code, r.siteBytes) }

// tsc reads the time-stamp counter as the pad does (the calling
// goroutine must be the only one using it).
func (r *padRig) tsc() uint64 { return callJIT(r.tscFn, 0, 0, r.tscTop) }

// testStack is a machine stack for callSite.
type testStack struct {
	mem []byte
	top uintptr
}

func newTestStack(t testing.TB) *testStack {
	t.Helper()
	s, err := unix.Mmap(-1, 0, 16*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatalf("mmap stack: %v", err)
	}
	t.Cleanup(func() { unix.Munmap(s) })
	return &testStack{mem: s, top: uintptr(unsafe.Pointer(&s[0])) + uintptr(len(s))}
}

// checkCanary verifies the red zone below the site's stack pointer sp.
func checkCanary(t testing.TB, st *testStack, sp uint64) {
	t.Helper()
	base := uint64(uintptr(unsafe.Pointer(&st.mem[0])))
	if sp < base+128 || sp > base+uint64(len(st.mem)) {
		t.Fatalf("site rsp %#x outside the stack", sp)
	}
	for i := range 16 {
		got := binary.LittleEndian.Uint64(st.mem[sp-128+uint64(8*i)-base:])
		if got != padCanary(i) {
			t.Errorf("red zone qword %d = %#x, want %#x", i, got, padCanary(i))
		}
	}
}

// hit runs the patched site with in and checks that the thread comes out
// exactly as from the original instruction (every GPR, rsp, flags; the
// tail is the original instruction followed by the site's ret) with its
// red zone intact. It returns the registers after the hit.
func (r *padRig) hit(t testing.TB, in *[18]uint64, st *testStack) [18]uint64 {
	t.Helper()
	var expect, out [18]uint64
	callSite(r.tail, in, &expect, st.top)
	if expect[2] != in[2]+siteImm {
		t.Fatalf("original instruction: rcx %#x", expect[2])
	}
	callSite(r.site, in, &out, st.top)
	if out != expect {
		for i := range out {
			if out[i] != expect[i] {
				t.Errorf("slot %d after the hit: %#x, the original instruction gives %#x", i, out[i], expect[i])
			}
		}
		t.FailNow()
	}
	checkCanary(t, st, out[17])
	return out
}

// entryFlags returns rflags as the site sees them for in (callSite's
// popfq may normalize bits).
func (r *padRig) entryFlags(in *[18]uint64, st *testStack) uint64 {
	var out [18]uint64
	callSite(r.retOnly, in, &out, st.top)
	return out[16]
}

// padHaveFSBase reports whether this process may execute rdfsbase.
var padHaveFSBase = sync.OnceValue(func() bool {
	auxv, err := os.ReadFile("/proc/self/auxv")
	if err != nil {
		return false
	}
	const atHWCap2, hwcap2FSGSBase = 26, 1 << 1
	for i := 0; i+16 <= len(auxv); i += 16 {
		if binary.LittleEndian.Uint64(auxv[i:]) == atHWCap2 {
			return binary.LittleEndian.Uint64(auxv[i+8:])&hwcap2FSGSBase != 0
		}
	}
	return false
})

// threadFSBase returns the calling thread's fs base (arch_prctl
// ARCH_GET_FS); the goroutine should be locked to its thread.
func threadFSBase() uint64 {
	var v uint64
	if _, _, e := unix.RawSyscall(unix.SYS_ARCH_PRCTL, 0x1003, uintptr(unsafe.Pointer(&v)), 0); e != 0 || v == 0 {
		panic(fmt.Sprintf("arch_prctl(ARCH_GET_FS): %v, %#x", e, v))
	}
	return v
}

// laneOf returns the lane a thread with fs base fs writes to: the one
// whose owner entry holds fs, else the shared lane.
func (r *padRig) laneOf(fs uint64) int {
	for i := range r.nLanes {
		if fs != 0 && r.owner(i) == fs {
			return i
		}
	}
	return r.nLanes
}

// testRecord is one lane record as the tests see it.
type testRecord struct {
	lane                  int
	cursor, off           uint64
	size, tp, used, flags uint32
	time, thread          uint64
	regs                  [PadRegs]uint64 // RecRegs only
	xsave                 []byte          // RecXSave only
	blocks                []byte
}

// parseLane reads the committed records (fillers included) of lane data
// from cursor tail up to head, stopping at the first uncommitted one, and
// returns them with the cursor after the last. Anything malformed is an
// error. The size word is loaded atomically: a pad may be writing.
func parseLane(data []byte, tail, head uint64) ([]testRecord, uint64, error) {
	size := uint64(len(data))
	var recs []testRecord
	if head < tail || head-tail > size {
		return nil, tail, fmt.Errorf("head %d tail %d in a %d-byte lane", head, tail, size)
	}
	for tail < head {
		off := tail & (size - 1)
		if off%RecMinAlign != 0 || head-tail < RecMinAlign {
			return recs, tail, fmt.Errorf("cursor %d: misaligned or %d bytes to head", tail, head-tail)
		}
		w := atomic.LoadUint64((*uint64)(unsafe.Pointer(&data[off])))
		if w&RecCompactBit != 0 {
			rec := testRecord{cursor: tail, off: off, size: RecCompactSize, tp: uint32(w >> RecCompactTPShift & RecCompactSkip),
				time: w & (1<<RecCompactTimeBits - 1)}
			if rec.tp == RecCompactSkip {
				if rec.time != 0 {
					return recs, tail, fmt.Errorf("cursor %d: filler word %#x", tail, w)
				}
				rec.size, rec.flags = uint32(size-off), RecSkip
			}
			recs = append(recs, rec)
			tail += uint64(rec.size)
			continue
		}
		n := uint64(uint32(w))
		if n == 0 {
			break
		}
		if off%RecAlign != 0 && n < RecAlign {
			return recs, tail, fmt.Errorf("cursor %d: size %d", tail, n)
		}
		h := data[off:]
		rec := testRecord{cursor: tail, off: off, size: uint32(n), tp: binary.LittleEndian.Uint32(h[RecTPIndex:]),
			used: binary.LittleEndian.Uint32(h[RecUsed:]), flags: binary.LittleEndian.Uint32(h[RecFlags:])}
		if n%RecAlign != 0 || n > size-off || n > head-tail {
			return recs, tail, fmt.Errorf("cursor %d: size %d (lane %d, head %d)", tail, n, size, head)
		}
		xsaveSize := 0
		if rec.flags&RecXSave != 0 && rec.flags&RecRegs != 0 {
			xsaveSize = int(rec.flags>>RecXSaveShift&0xff) * 64
			rec.flags &^= RecXSave | 0xff<<RecXSaveShift
		}
		switch rec.flags {
		case RecError, 0, RecRegs:
			if n < RecHeaderSize {
				return recs, tail, fmt.Errorf("cursor %d: size %d", tail, n)
			}
			rec.time = binary.LittleEndian.Uint64(h[RecTime:])
			rec.thread = binary.LittleEndian.Uint64(h[RecThread:])
			if rec.flags == RecError {
				if rec.used < ErrMemory || rec.used > ErrSteps {
					return recs, tail, fmt.Errorf("cursor %d: error code %d", tail, rec.used)
				}
				break
			}
			body := h[RecHeaderSize:n]
			if rec.flags == RecRegs {
				if len(body) < padBlockBytes {
					return recs, tail, fmt.Errorf("cursor %d: size %d cannot hold the registers", tail, n)
				}
				for i := range rec.regs {
					rec.regs[i] = binary.LittleEndian.Uint64(body[8*i:])
				}
				body = body[padBlockBytes:]
				if xsaveSize > 0 {
					start := int((off+RecHeaderSize+padBlockBytes+63)&^63 - off - RecHeaderSize - padBlockBytes)
					if region := XSaveRegion(xsaveSize); len(body) < region || start+xsaveSize > region {
						return recs, tail, fmt.Errorf("cursor %d: size %d cannot hold a %d-byte XSAVE area", tail, n, xsaveSize)
					}
					rec.xsave = append([]byte(nil), body[start:start+xsaveSize]...)
					body = body[XSaveRegion(xsaveSize):]
				}
			}
			if int(rec.used) > len(body) {
				return recs, tail, fmt.Errorf("cursor %d: %d bytes of blocks in %d", tail, rec.used, len(body))
			}
			rec.blocks = append([]byte(nil), body[:rec.used]...)
		default:
			return recs, tail, fmt.Errorf("cursor %d: flags %#x", tail, rec.flags)
		}
		recs = append(recs, rec)
		tail += n
	}
	return recs, tail, nil
}

// laneRecords returns every record (fillers included) between lane i's
// tail and head, failing on an uncommitted or malformed one.
func (r *padRig) laneRecords(t testing.TB, i int) []testRecord {
	t.Helper()
	head, tail := r.load(CtlLanes+i*LaneHdrSize+LaneHead), r.load(CtlLanes+i*LaneHdrSize+LaneTail)
	recs, end, err := parseLane(r.lanes[i], tail, head)
	if err != nil || end != head {
		t.Fatalf("lane %d [%d, %d): %v (parsed to %d)", i, tail, head, err, end)
	}
	for k := range recs {
		recs[k].lane = i
	}
	return recs
}

// records returns the records of every lane, lane by lane, fillers left
// out.
func (r *padRig) records(t testing.TB) []testRecord {
	t.Helper()
	var all []testRecord
	for i := range r.lanes {
		for _, rec := range r.laneRecords(t, i) {
			if rec.flags != RecSkip {
				all = append(all, rec)
			}
		}
	}
	return all
}

// consume zeroes lane i's bytes from its tail to cursor to and then
// publishes to as the tail, as the stub does.
func (r *padRig) consume(i int, to uint64) {
	tailP := r.laneField(i, LaneTail)
	from := atomic.LoadUint64(tailP)
	data, size := r.lanes[i], r.laneSize
	for from < to {
		off := from & (size - 1)
		n := min(size-off, to-from)
		clear(data[off : off+n])
		from += n
	}
	atomic.StoreUint64(tailP, to)
}

// consumeAll consumes everything committed in every lane.
func (r *padRig) consumeAll(t testing.TB) {
	t.Helper()
	for i := range r.lanes {
		r.laneRecords(t, i)
		r.consume(i, r.load(CtlLanes+i*LaneHdrSize+LaneHead))
	}
}

// dropped sums LaneDropped over every lane.
func (r *padRig) dropped() uint64 {
	var n uint64
	for i := range r.lanes {
		n += r.load(CtlLanes + i*LaneHdrSize + LaneDropped)
	}
	return n
}

// compileAX assembles and compiles an agent expression for amd64.
func compileAX(t testing.TB, src string) *Code {
	t.Helper()
	bc, err := agentexpr.Assemble(src)
	if err != nil {
		t.Fatalf("assemble %q: %v", src, err)
	}
	e, err := agentexpr.Parse(bc)
	if err != nil {
		t.Fatalf("parse %q: %v", src, err)
	}
	c, err := Compile(e, "amd64", Options{})
	if err != nil || c.Fallback != "" {
		t.Fatalf("compile %q: %v %s", src, err, c.Fallback)
	}
	return c
}

// padInput returns distinct register values for hit h (rflags 0x2).
func padInput(h int) [18]uint64 {
	var in [18]uint64
	for i := range 16 {
		in[i] = 0x1111_0000_0000_0000*uint64(i+1) + uint64(h)<<8 + uint64(i)
	}
	in[16] = 0x2
	return in
}

// mBlock is the 'M' block of n bytes at addr with contents b.
func mBlock(addr uint64, b []byte) []byte {
	out := []byte{BlockMemory}
	out = binary.LittleEndian.AppendUint64(out, addr)
	out = binary.LittleEndian.AppendUint16(out, uint16(len(b)))
	return append(out, b...)
}

// vBlock is the 'V' block of variable num holding v.
func vBlock(num uint32, v int64) []byte {
	out := []byte{BlockTSV}
	out = binary.LittleEndian.AppendUint32(out, num)
	return binary.LittleEndian.AppendUint64(out, uint64(v))
}

func TestPadEncodings(t *testing.T) {
	m := at(r15, 16)
	checkInsn(t, "pushfq", emit(func(a *asm) { a.pushfq() }), x86asm.PUSHFQ)
	checkInsn(t, "popfq", emit(func(a *asm) { a.popfq() }), x86asm.POPFQ)
	checkInsn(t, "cld", emit(func(a *asm) { a.cld() }), x86asm.CLD)
	checkInsn(t, "int3", emit(func(a *asm) { a.int3() }), x86asm.INT, x86asm.Imm(3))
	checkInsn(t, "rdtsc", emit(func(a *asm) { a.rdtsc() }), x86asm.RDTSC)
	if b := emit(func(a *asm) { a.rdtsc() }); string(b) != "\x0f\x31" {
		t.Errorf("rdtsc: % x", b)
	}
	for _, r := range allGPRs {
		code := emit(func(a *asm) { a.rdfsbase(r) })
		want := []byte{0xf3, 0x48 | byte(r>>3), 0x0f, 0xae, 0xc0 | byte(r&7)}
		if string(code) != string(want) {
			t.Errorf("rdfsbase %v: % x, want % x", reg64(r), code, want)
		}
		checkInsn(t, "rdfsbase", code, x86asm.RDFSBASE, reg64(r))
	}
	if inst, err := x86asm.Decode(emit(func(a *asm) { a.repMovsq() }), 64); err != nil || inst.Op != x86asm.MOVSQ || inst.Len != 3 ||
		inst.Prefix[0]&0xff != x86asm.PrefixREP {
		t.Errorf("rep movsq: %v %v", inst, err)
	}
	// The pad's operands: lane header fields, owner entries indexed by
	// rdx, tracepoint entries.
	padMems := []mem{m, at(rSP, 8), at(r13, 0), at(r14, LaneHead), at(r14, LaneTail), at(rBX, CtlStubGoneSkips),
		{base: rBX, index: int(rDX), scale: 8, disp: CtlOwners}, {base: rBX, index: int(rDX), scale: 1, disp: CtlLanes}}
	for _, r := range allGPRs {
		for _, mm := range padMems {
			checkInsn(t, "xadd", emit(func(a *asm) { a.lockXadd(mm, r) }), x86asm.XADD, memArg(mm), reg64(r))
			checkInsn(t, "cmpxchg", emit(func(a *asm) { a.lockCmpxchg(mm, r) }), x86asm.CMPXCHG, memArg(mm), reg64(r))
			checkInsn(t, "lea", emit(func(a *asm) { a.lea(r, mm) }), x86asm.LEA, reg64(r), memArg(mm))
		}
	}
	for _, mm := range append(testMems(), padMems...) {
		checkInsn(t, "lock add", emit(func(a *asm) { a.lockAluMI(aluAdd, mm, 1) }), x86asm.ADD, memArg(mm), x86asm.Imm(1))
		checkInsn(t, "store32Imm", emit(func(a *asm) { a.store32Imm(mm, 0x1234abcd) }), x86asm.MOV, memArg(mm), x86asm.Imm(0x1234abcd))
		checkInsn(t, "div mem", emit(func(a *asm) { a.divMem(mm) }), x86asm.DIV, memArg(mm))
	}
	for _, r := range allGPRs {
		for s, want := range []x86asm.Reg{x86asm.ES, x86asm.CS, x86asm.SS, x86asm.DS, x86asm.FS, x86asm.GS} {
			checkInsn(t, "mov r64, sreg", emit(func(a *asm) { a.movFromSreg(r, sreg(s)) }), x86asm.MOV, reg64(r), want)
		}
	}
	// The lock prefix is really there.
	for name, b := range map[string][]byte{
		"xadd":    emit(func(a *asm) { a.lockXadd(m, rAX) }),
		"cmpxchg": emit(func(a *asm) { a.lockCmpxchg(m, rAX) }),
		"add":     emit(func(a *asm) { a.lockAluMI(aluAdd, m, 1) }),
	} {
		if inst, err := x86asm.Decode(b, 64); b[0] != 0xf0 || err != nil || !hasLock(inst) {
			t.Errorf("lock %s: % x", name, b)
		}
	}
}

// hasLock reports whether inst has a LOCK prefix.
func hasLock(inst x86asm.Inst) bool {
	for _, p := range inst.Prefix {
		if p == 0 {
			break
		}
		if p&0xff == x86asm.PrefixLOCK {
			return true
		}
	}
	return false
}

// padInsn is one decoded instruction of a pad body.
type padInsn struct {
	off  int
	inst x86asm.Inst
}

// decodePadBody decodes the pad's body: the instructions before the first
// expression code. It fails on anything undecodable or on an int3 that is
// not alignment padding (after an unconditional jmp, up to the next 16-byte
// boundary, where expression code starts).
func decodePadBody(t *testing.T, code []byte, codeStarts map[int]bool) []padInsn {
	t.Helper()
	var body []padInsn
	for off := 0; off < len(code); {
		if codeStarts[off] {
			return body
		}
		if code[off] == 0xcc {
			end := (off + 15) &^ 15
			last := body[len(body)-1].inst
			if len(codeStarts) == 0 || !codeStarts[end] || last.Op != x86asm.JMP {
				t.Fatalf("int3 at pad offset %d in the body", off)
			}
			for i := off; i < end; i++ {
				if code[i] != 0xcc {
					t.Fatalf("padding at %d: % x", i, code[off:end])
				}
			}
			return body
		}
		inst, err := x86asm.Decode(code[off:], 64)
		if err != nil {
			t.Fatalf("offset %d: % x: %v", off, code[off:min(off+8, len(code))], err)
		}
		body = append(body, padInsn{off, inst})
		off += inst.Len
	}
	if len(codeStarts) != 0 {
		t.Fatalf("no expression code after the body")
	}
	return body
}

// TestPadShape decodes whole pads. The body (everything before the
// expression code) holds no int3 and nothing that touches x87/SSE state
// or makes a system call; it starts by stepping below the red zone; its
// branches land on its own instruction boundaries, the tail, or (calls)
// the expression code placed after it; Skip restores every register in
// the reverse order of the saves and jumps to the tail; rdtsc is read
// once, rdfsbase only with FSBase; the control block is written only at
// CtlActive with a plain store and through locked
// instructions elsewhere.
func TestPadShape(t *testing.T) {
	cond := compileAX(t, "const8 1; reg 1; div_unsigned; end")
	coll1 := compileAX(t, "reg 4; const8 16; trace; end")
	coll2 := compileAX(t, "tracev 3; end")
	base := PadSpec{Addr: 0x7000_0000_1000, TPAddr: 0x40_1000, Ctl: 0x7100_0000_0000, TailAddr: 0x7000_0000_0800, Lanes: 1}
	specs := []struct {
		name string
		edit func(*PadSpec)
	}{
		{"bare", func(s *PadSpec) {}},
		{"bare regs fsbase", func(s *PadSpec) { s.CollectRegs, s.FSBase, s.Lanes = true, true, MaxLanes }},
		{"condition", func(s *PadSpec) { s.Cond, s.FSBase, s.Lanes, s.TPIndex = cond, true, 8, 3 }},
		{"collect", func(s *PadSpec) { s.Collect, s.CollectCap, s.TPIndex = []*Code{coll1, coll2}, 100, 7 }},
		{"everything", func(s *PadSpec) {
			s.Cond, s.Collect, s.CollectCap, s.CollectRegs, s.FSBase, s.Lanes, s.TPIndex = cond, []*Code{coll1, coll2}, 100, true, true, 16, 2
		}},
	}
	for _, sc := range specs {
		t.Run(sc.name, func(t *testing.T) {
			spec := base
			sc.edit(&spec)
			p, err := BuildJumpPadAMD64(spec)
			if err != nil {
				t.Fatal(err)
			}
			// Where the expression code is: the call targets, in order.
			var exprs []*Code
			if spec.Cond != nil {
				exprs = append(exprs, spec.Cond)
			}
			exprs = append(exprs, spec.Collect...)
			codeStarts := map[int]bool{}
			off := -1
			for _, c := range exprs {
				off++
				for off%16 != 0 {
					off++
				}
				// Search from the previous start: each is placed after the last.
				for off+len(c.Text) <= len(p.Code) && string(p.Code[off:off+len(c.Text)]) != string(c.Text) {
					off += 16
				}
				if off+len(c.Text) > len(p.Code) {
					t.Fatalf("expression code not found in the pad")
				}
				codeStarts[off] = true
				off += len(c.Text) - 1
			}
			body := decodePadBody(t, p.Code, codeStarts)
			bodyEnd := body[len(body)-1].off + body[len(body)-1].inst.Len
			boundary := map[int]bool{bodyEnd: false}
			for _, in := range body {
				boundary[in.off] = true
			}
			syntax := func(in padInsn) string {
				return x86asm.IntelSyntax(in.inst, spec.Addr+uint64(in.off), nil)
			}
			if s := syntax(body[0]); s != "lea rsp, ptr [rsp-0x80]" {
				t.Errorf("first instruction %q", s)
			}
			if s := syntax(body[1]); s != "push rcx" {
				t.Errorf("second instruction %q", syntax(body[1]))
			}
			if last := body[len(body)-1].inst; last.Op != x86asm.JMP {
				t.Errorf("the body ends with %v, not a jmp", last)
			}
			calls, rdtscs, rdfsbases, tails := 0, 0, 0, 0
			lockedHead, unlockedHead := 0, 0
			lockedSpent, unlockedSpent := 0, 0
			for _, in := range body {
				inst := in.inst
				switch inst.Op {
				case x86asm.INT, x86asm.SYSCALL, x86asm.UD2, x86asm.HLT:
					t.Errorf("offset %d: %s", in.off, syntax(in))
				case x86asm.RDTSC:
					rdtscs++
				case x86asm.RDFSBASE:
					rdfsbases++
				}
				for _, a := range inst.Args {
					if r, ok := a.(x86asm.Reg); ok && (r >= x86asm.F0 && r <= x86asm.X15 || r >= x86asm.Y0 && r <= x86asm.Y15) {
						t.Errorf("offset %d: %s touches %v", in.off, syntax(in), r)
					}
				}
				if rel, ok := inst.Args[0].(x86asm.Rel); ok {
					target := int64(in.off+inst.Len) + int64(rel)
					switch {
					case inst.Op == x86asm.CALL:
						if !codeStarts[int(target)] {
							t.Errorf("offset %d: call to pad offset %d, not expression code", in.off, target)
						}
						calls++
					case inst.Op == x86asm.JMP && spec.Addr+uint64(target) == spec.TailAddr:
						tails++
					case !boundary[int(target)]:
						t.Errorf("offset %d: %s lands at %d, not an instruction of the body", in.off, syntax(in), target)
					}
				}
				// Writes to the control block (rbx), the lane header (r14)
				// and the tracepoint entry (r15).
				if mm, ok := inst.Args[0].(x86asm.Mem); ok && (mm.Base == x86asm.RBX || mm.Base == x86asm.R14 || mm.Base == x86asm.R15) {
					switch inst.Op {
					case x86asm.MOV:
						if mm.Base != x86asm.RBX || mm.Index != 0 || mm.Disp != CtlActive {
							t.Errorf("offset %d: plain store %s to shared memory", in.off, syntax(in))
						}
					case x86asm.CMPXCHG:
						// The lane head: LOCK for the shared lane, none for
						// the thread's own (one writer), always in pairs.
						switch {
						case mm.Base == x86asm.R14 && mm.Disp == LaneHead && hasLock(inst):
							lockedHead++
						case mm.Base == x86asm.R14 && mm.Disp == LaneHead:
							unlockedHead++
						case !hasLock(inst):
							t.Errorf("offset %d: %s without lock", in.off, syntax(in))
						}
					case x86asm.ADD, x86asm.SUB, x86asm.OR, x86asm.AND, x86asm.XOR, x86asm.INC, x86asm.DEC, x86asm.XADD:
						// LaneSpent: like the head, no LOCK in the
						// thread's own lane.
						if inst.Op == x86asm.ADD && mm.Base == x86asm.R14 && mm.Disp == LaneSpent {
							if hasLock(inst) {
								lockedSpent++
							} else {
								unlockedSpent++
							}
							break
						}
						if !hasLock(inst) {
							t.Errorf("offset %d: %s without lock", in.off, syntax(in))
						}
					case x86asm.CMP, x86asm.TEST:
					default:
						t.Errorf("offset %d: unexpected %s", in.off, syntax(in))
					}
				}
			}
			if lockedHead == 0 || lockedHead != unlockedHead {
				t.Errorf("lane head reserved by %d locked and %d unlocked cmpxchg", lockedHead, unlockedHead)
			}
			if lockedSpent != 1 || unlockedSpent != 1 {
				t.Errorf("LaneSpent added to by %d locked and %d unlocked adds, want 1 and 1", lockedSpent, unlockedSpent)
			}
			if calls != len(exprs) {
				t.Errorf("%d calls for %d expressions", calls, len(exprs))
			}
			if tails != 2 { // the inactive fast exit and Skip
				t.Errorf("%d jumps to TailAddr, want 2", tails)
			}
			if rdtscs != 1 {
				t.Errorf("%d rdtsc", rdtscs)
			}
			if wantFS := map[bool]int{false: 0, true: 1}[spec.FSBase]; spec.FSBase && spec.Cond != nil {
				// The condition-error path finds the lane too.
				if rdfsbases != 2 {
					t.Errorf("%d rdfsbase, want 2", rdfsbases)
				}
			} else if rdfsbases != wantFS {
				t.Errorf("%d rdfsbase, want %d", rdfsbases, wantFS)
			}
			// Skip: lea rsp, [rbp+block]; pop the GPRs but rcx and rax;
			// restore the flags (no popfq); pop rcx and rax; lea rsp,
			// [rsp+8+128]; jmp TailAddr.
			skip := int(p.Skip - spec.Addr)
			k := 0
			for k < len(body) && body[k].off != skip {
				k++
			}
			if k == len(body) {
				t.Fatalf("Skip %#x is not an instruction of the body", p.Skip)
			}
			want := []string{fmt.Sprintf("lea rsp, ptr [rbp+%#x]", padBlockBytes)}
			for i := len(padPushOrder) - 1; i >= 2; i-- {
				want = append(want, "pop "+strings.ToLower(reg64(padPushOrder[i]).String()))
			}
			want = append(want, "mov rax, qword ptr [rsp+0x10]", "mov rcx, rax", "shr rcx, 0xb", "and rcx, 0x1",
				"shl rax, 0x8", "or rax, rcx", "test dword ptr [rsp+0x10], 0x400", "", "std", "add al, 0x7f", "sahf",
				"pop rcx", "pop rax", "lea rsp, ptr [rsp+0x88]", fmt.Sprintf("jmp %#x", spec.TailAddr))
			for i, w := range want {
				if k+i >= len(body) {
					t.Fatalf("Skip sequence cut short")
				}
				if got := syntax(body[k+i]); w != "" && got != w {
					t.Errorf("Skip+%d: %q, want %q", i, got, w)
				}
			}
			// The fast exit when collection is off: rcx only, the flags
			// untouched (jrcxz); when on, the flags are pushed.
			exit := []string{"lea rsp, ptr [rsp-0x80]", "push rcx", fmt.Sprintf("mov rcx, %#x", spec.Ctl),
				"mov rcx, qword ptr [rcx]", "", "", "pop rcx", "lea rsp, ptr [rsp+0x80]",
				fmt.Sprintf("jmp %#x", spec.TailAddr), "pop rcx", "pushfq"}
			for i, w := range exit {
				if got := syntax(body[i]); w != "" && got != w {
					t.Errorf("fast exit %d: %q, want %q", i, got, w)
				}
			}
			// The saves are the mirror image of Skip's restores.
			for i, r := range padPushOrder {
				if got := syntax(body[len(exit)+i]); got != "push "+strings.ToLower(reg64(r).String()) {
					t.Errorf("save %d: %q", i, got)
				}
			}
		})
	}

	bad := []PadSpec{
		{Lanes: 1, Cond: &Code{Arch: "amd64", Fallback: "printf needs the interpreter"}},
		{Lanes: 1, Collect: []*Code{nil}},
		{Lanes: 1, Collect: []*Code{{Arch: "arm64", Text: []byte{0}}}},
		{Lanes: 1, Collect: []*Code{{Arch: "amd64"}}},
		{Lanes: 1, Cond: &Code{Arch: "amd64", Text: []byte{0xc3}, Relocs: make([]Reloc, 1)}},
		{Lanes: 1, TPIndex: 1 << 30},
		{Lanes: 1, CollectCap: math.MaxUint32},
		{Lanes: 1, Addr: 0x7000_0000_0000, TailAddr: 0x1000},
		{Lanes: 0},
		{Lanes: -1},
		{Lanes: 3},
		{Lanes: 2 * MaxLanes},
	}
	for i, s := range bad {
		if _, err := BuildJumpPadAMD64(s); err == nil {
			t.Errorf("bad spec %d: no error", i)
		}
	}
	for _, lanes := range []int{1, 2, 4, MaxLanes} {
		if _, err := BuildJumpPadAMD64(PadSpec{Lanes: lanes}); err != nil {
			t.Errorf("%d lanes: %v", lanes, err)
		}
	}
}

func TestPadRecordSize(t *testing.T) {
	for _, tc := range []struct {
		regs bool
		cap  uint32
		want uint64
	}{
		{false, 0, 32}, {false, 1, 48}, {false, 16, 48}, {false, 17, 64}, {false, 224, 256},
		{true, 0, 32 + 192}, {true, 1, 32 + 192 + 16}, {true, 64, 288}, {true, 100, 336},
	} {
		if got := PadRecordSize(tc.regs, tc.cap); got != tc.want {
			t.Errorf("PadRecordSize(%v, %d) = %d, want %d", tc.regs, tc.cap, got, tc.want)
		}
	}
}

// TestPadHit runs single hits of the patched site: with and without a
// condition, collection, the register block and rdfsbase. The thread
// continues exactly as from the original instruction; a record holds the
// tracepoint index, its size, RecRegs and the registers when asked,
// increasing time stamps and the thread's fs base.
func TestPadHit(t *testing.T) {
	const tpIndex, collectCap, hits = 2, 64, 3
	cond := compileAX(t, "const8 1; reg 1; div_unsigned; end")
	collect := []*Code{compileAX(t, "reg 4; const8 16; trace; end"), compileAX(t, "tracev 3; end")}
	cases := []struct {
		name                      string
		cond, collect, regs, fsOn bool
		rbx, flags                uint64
		record                    bool
	}{
		{"bare", false, false, false, false, 0, 0x2, true},
		{"bare regs", false, false, true, false, 0, 0x2 | flagCF | flagZF, true},
		{"bare fsbase", false, false, false, true, 0, 0x2 | flagPF, true},
		{"collect", false, true, false, false, 0, 0x2 | flagSF | flagOF, true},
		{"collect regs fsbase", false, true, true, true, 0, 0x2 | flagDF | flagCF, true},
		{"cond true", true, true, false, false, 1, 0x2 | flagPF, true},
		{"cond true regs fsbase", true, true, true, true, 1, 0x2 | flagCF | flagZF | flagPF | flagSF | flagOF, true},
		{"cond true no collect", true, false, true, false, 1, 0x2 | flagDF, true},
		{"cond false", true, true, true, true, 2, 0x2 | flagZF, false},
		{"cond false DF", true, false, false, false, 2, 0x2 | flagDF | flagCF, false},
		{"regs after a push", false, true, true, false, 0, 0x2, true},
	}
	// The bytes a push left in place before the jump stored (fasttp's
	// Site.Lead): the recorded rsp is that much higher.
	spBias := map[string]int32{"regs after a push": 8}
	rig := newPadRig(t, 4, 1<<14)
	st := newTestStack(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			spec := PadSpec{TPIndex: tpIndex, CollectRegs: tc.regs, FSBase: tc.fsOn, SPBias: spBias[tc.name]}
			if tc.cond {
				spec.Cond = cond
			}
			var wantUsed, capacity uint32
			if tc.collect {
				spec.Collect, spec.CollectCap, capacity, wantUsed = collect, collectCap, collectCap, 11+16+13
			}
			rig.reset(true)
			rig.install(t, spec)
			rig.tsvs[3] = -12345
			fs := threadFSBase()
			var ins, outs [hits][18]uint64
			t0 := rig.tsc()
			for h := range hits {
				ins[h] = padInput(h)
				ins[h][1], ins[h][4], ins[h][16] = tc.rbx, rig.dataAddr+40+uint64(h), tc.flags
				outs[h] = rig.hit(t, &ins[h], st)
			}
			t1 := rig.tsc()
			recs := rig.records(t)
			if *rig.field(CtlActive) != 1 || rig.stopWhy() != 0 || *rig.tpField(tpIndex, TPHits) != 0 ||
				*rig.tpField(tpIndex, TPErrors) != 0 || *rig.field(CtlStubGoneSkips) != 0 || rig.dropped() != 0 {
				t.Errorf("control block: active %d stop %d hits %d errors %d stub-gone skips %d dropped %d", *rig.field(CtlActive),
					rig.stopWhy(), *rig.tpField(tpIndex, TPHits), *rig.tpField(tpIndex, TPErrors),
					*rig.field(CtlStubGoneSkips), rig.dropped())
			}
			if !tc.record {
				if len(recs) != 0 {
					t.Errorf("%d records, want none", len(recs))
				}
				return
			}
			if len(recs) != hits {
				t.Fatalf("%d records, want %d", len(recs), hits)
			}
			wantLane, wantThread := rig.nLanes, uint64(0)
			if tc.fsOn {
				wantLane, wantThread = rig.laneOf(fs), fs
				owners := 0
				for i := range MaxLanes {
					if rig.owner(i) != 0 {
						owners++
					}
				}
				if wantLane >= rig.nLanes || owners != 1 {
					t.Errorf("the thread owns lane %d; %d owner entries", wantLane, owners)
				}
			} else {
				for i := range MaxLanes {
					if rig.owner(i) != 0 {
						t.Errorf("owner %d = %#x without FSBase", i, rig.owner(i))
					}
				}
			}
			wantFlags := uint32(0)
			if tc.regs {
				wantFlags = RecRegs
			}
			prev := t0
			for h, rec := range recs {
				if rec.lane != wantLane || rec.tp != tpIndex || rec.flags != wantFlags || uint64(rec.size) != PadRecordSize(tc.regs, capacity) ||
					rec.used != wantUsed || rec.thread != wantThread || rec.cursor != uint64(h)*uint64(rec.size) {
					t.Errorf("record %d: %+v; want lane %d tp %d flags %d size %d used %d thread %#x", h, rec, wantLane, tpIndex, wantFlags,
						PadRecordSize(tc.regs, capacity), wantUsed, wantThread)
				}
				if rec.time <= prev || rec.time > t1 {
					t.Errorf("record %d: time %d, previous %d, after the hits %d", h, rec.time, prev, t1)
				}
				prev = rec.time
				if tc.regs {
					for i := range 16 {
						want := ins[h][i]
						if i == 7 {
							want = outs[h][17] + uint64(spBias[tc.name])
						}
						if rec.regs[i] != want {
							t.Errorf("record %d reg %d = %#x, want %#x", h, i, rec.regs[i], want)
						}
					}
					if rec.regs[16] != uint64(rig.site) {
						t.Errorf("record rip %#x, want the site %#x", rec.regs[16], rig.site)
					}
					if f := rig.entryFlags(&ins[h], st); rec.regs[17] != f {
						t.Errorf("record eflags %#x, want %#x", rec.regs[17], f)
					}
					if rec.regs[18] != 0x33 || rec.regs[19] != 0x2b {
						t.Errorf("record cs %#x ss %#x", rec.regs[18], rec.regs[19])
					}
				}
				if tc.collect {
					want := append(mBlock(ins[h][4], rig.data[40+h:56+h]), vBlock(3, -12345)...)
					if string(rec.blocks) != string(want) {
						t.Errorf("record %d blocks\n % x\nwant\n % x", h, rec.blocks, want)
					}
				}
			}
		})
	}
}

// TestPadLaneSelect: which lane a thread's records go to. Without FSBase,
// the shared lane; with it, the owner entry holding the thread's fs base
// (claimed on the first hit, probing past entries of other threads), or
// the shared lane when every entry belongs to another thread.
func TestPadLaneSelect(t *testing.T) {
	const other = 0x7777_0000_0000
	cases := []struct {
		name    string
		lanes   int
		fsOn    bool
		owners  func(fs uint64) []uint64 // the owner table before the hits (nil: empty)
		want    int                      // the lane; -1: whichever entry the thread claimed
		claimed bool                     // the owner table gains the thread's entry
	}{
		{"no fsbase", 4, false, nil, 4, false},
		{"no fsbase, one lane", 1, false, nil, 1, false},
		{"fresh, one lane", 1, true, nil, 0, true},
		{"fresh, 4 lanes", 4, true, nil, -1, true},
		{"fresh, 64 lanes", MaxLanes, true, nil, -1, true},
		{"probe to the only free entry", 4, true, func(fs uint64) []uint64 { return []uint64{other, other + 1, 0, other + 3} }, 2, true},
		{"probe wraps", 8, true, func(fs uint64) []uint64 {
			return []uint64{0, other + 1, other + 2, other + 3, other + 4, other + 5, other + 6, other + 7}
		}, 0, true},
		{"already owned", 4, true, func(fs uint64) []uint64 { return []uint64{other, other + 1, other + 2, fs} }, 3, false},
		{"table full", 4, true, func(fs uint64) []uint64 { return []uint64{other, other + 1, other + 2, other + 3} }, 4, false},
		{"table full, one lane", 1, true, func(fs uint64) []uint64 { return []uint64{other} }, 1, false},
	}
	st := newTestStack(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			rig := newPadRig(t, tc.lanes, 1<<12)
			rig.install(t, PadSpec{TPIndex: 1, FSBase: tc.fsOn})
			fs := threadFSBase()
			var before []uint64
			if tc.owners != nil {
				before = tc.owners(fs)
				for i, o := range before {
					*rig.field(CtlOwners + 8*i) = o
				}
			}
			for h := range 3 {
				in := padInput(h)
				rig.hit(t, &in, st)
			}
			recs := rig.records(t)
			if len(recs) != 3 {
				t.Fatalf("%d records", len(recs))
			}
			want := tc.want
			if want < 0 {
				want = rig.laneOf(fs)
				if want >= tc.lanes {
					t.Fatalf("the thread claimed no lane")
				}
			}
			wantThread := uint64(0)
			if tc.fsOn {
				wantThread = fs
			}
			for _, rec := range recs {
				if rec.lane != want || rec.thread != wantThread {
					t.Errorf("record in lane %d from thread %#x, want lane %d thread %#x", rec.lane, rec.thread, want, wantThread)
				}
			}
			// The owner table: unchanged but for the claimed entry.
			for i := range MaxLanes {
				w := uint64(0)
				if i < len(before) {
					w = before[i]
				}
				if tc.claimed && i == want {
					w = fs
				}
				if got := rig.owner(i); got != w {
					t.Errorf("owner %d = %#x, want %#x", i, got, w)
				}
			}
		})
	}
}

// laneModel predicts where records of size rec go in a lane of size
// laneSize: from cursor c, it returns the filler's offset (-1: none), the
// record's offset and the cursor after it.
func laneModel(laneSize, rec, c uint64) (filler int64, off, next uint64) {
	off = c % laneSize
	if off+rec <= laneSize {
		return -1, off, c + rec
	}
	return int64(off), 0, c + laneSize - off + rec
}

// TestPadLaneWrap drives small lanes with records that do not divide the
// lane size: a record that does not fit before the lane's end leaves a
// RecSkip filler to the end and goes to the lane's start. The test
// consumes (zeroes, then advances the tail) after every hit.
func TestPadLaneWrap(t *testing.T) {
	cases := []struct {
		name     string
		regs     bool
		cap      uint32
		laneSize uint64
		hits     int
	}{
		{"regs 288 in 1024", true, 64, 1024, 12}, // filler of 160 bytes
		{"256 in 1024", false, 224, 1024, 10},    // exact fit, never a filler
		{"336 in 1024", false, 304, 1024, 12},    // fillers of 16 bytes
		{"regs 2048 in 4096", true, 2048 - 224, 4096, 7},
		{"1040 in 2048", false, 1008, 2048, 6}, // every other record wraps
	}
	st := newTestStack(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rig := newPadRig(t, 1, tc.laneSize)
			rig.install(t, PadSpec{TPIndex: 1, Collect: []*Code{compileAX(t, "tracev 0; end")}, CollectCap: tc.cap, CollectRegs: tc.regs})
			recSize := PadRecordSize(tc.regs, tc.cap)
			lane := rig.nLanes // shared: no FSBase
			fillers := 0
			var c uint64
			for h := range tc.hits {
				in := padInput(h)
				rig.tsvs[0] = int64(100 + h)
				rig.hit(t, &in, st)
				filler, off, next := laneModel(tc.laneSize, recSize, c)
				recs := rig.laneRecords(t, lane)
				if head := *rig.laneField(lane, LaneHead); head != next {
					t.Fatalf("hit %d: head %d, want %d", h, head, next)
				}
				if filler >= 0 {
					fillers++
					if len(recs) != 2 || recs[0].flags != RecSkip || recs[0].off != uint64(filler) || uint64(recs[0].size) != tc.laneSize-uint64(filler) ||
						recs[0].tp != RecCompactSkip {
						t.Fatalf("hit %d: want a filler at %d, got %+v", h, filler, recs)
					}
					recs = recs[1:]
				}
				if len(recs) != 1 {
					t.Fatalf("hit %d: %d records", h, len(recs))
				}
				r := recs[0]
				wantFlags := uint32(0)
				if tc.regs {
					wantFlags = RecRegs
				}
				if r.off != off || r.flags != wantFlags || uint64(r.size) != recSize || string(r.blocks) != string(vBlock(0, int64(100+h))) ||
					tc.regs && r.regs[0] != in[0] {
					t.Errorf("hit %d: record %+v, want offset %d", h, r, off)
				}
				rig.consume(lane, next)
				c = next
			}
			if want := map[bool]bool{true: true, false: false}[tc.laneSize%recSize != 0]; (fillers > 0) != want {
				t.Errorf("%d fillers", fillers)
			}
			if rig.dropped() != 0 {
				t.Errorf("%d dropped", rig.dropped())
			}
		})
	}
}

// TestPadLaneFull fills a lane without consuming: further hits are dropped
// and counted in LaneDropped, the thread continues unharmed (there is no
// trap), and once the stub consumes, hits are recorded again.
func TestPadLaneFull(t *testing.T) {
	cases := []struct {
		name     string
		regs     bool
		cap      uint32
		laneSize uint64
		fit      int // records that fit
	}{
		{"exact", false, 224, 1024, 4},
		{"filler does not fit", true, 64, 1024, 3},
		{"one record", true, 0, 256, 1},
		{"none fits", true, 1024, 1024, 0},
	}
	st := newTestStack(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rig := newPadRig(t, 1, tc.laneSize)
			rig.install(t, PadSpec{TPIndex: 0, CollectRegs: tc.regs, CollectCap: tc.cap})
			lane := rig.nLanes
			const extra = 5
			for h := range tc.fit + extra {
				in := padInput(h)
				in[16] = 0x2 | flagCF | flagOF | uint64(h&1)*flagDF
				rig.hit(t, &in, st)
			}
			recs := rig.records(t)
			if len(recs) != tc.fit || *rig.laneField(lane, LaneDropped) != extra || rig.dropped() != extra {
				t.Fatalf("%d records, %d dropped; want %d, %d", len(recs), rig.dropped(), tc.fit, extra)
			}
			for h, r := range recs {
				if r.regs[0] != padInput(h)[0] && tc.regs {
					t.Errorf("record %d is from hit %#x", h, r.regs[0])
				}
			}
			if *rig.field(CtlActive) != 1 {
				t.Errorf("a full lane stopped tracing")
			}
			if tc.fit == 0 {
				return
			}
			head := *rig.laneField(lane, LaneHead)
			rig.consume(lane, head)
			in := padInput(99)
			rig.hit(t, &in, st)
			recs = rig.records(t)
			if len(recs) != 1 || recs[0].cursor < head || tc.regs && recs[0].regs[0] != in[0] || rig.dropped() != extra {
				t.Errorf("after consuming: %+v, %d dropped", recs, rig.dropped())
			}
		})
	}
}

// TestPadInactive: with CtlActive 0 or no live stub (CtlStubAlive's
// thread id bits clear, as the kernel leaves them when the stub's thread
// ends), a hit leaves no trace but the stub-gone count: no condition run
// (its setv would count), no passcount numbering, no record.
func TestPadInactive(t *testing.T) {
	st := newTestStack(t)
	rig := newPadRig(t, 2, 1<<12)
	cases := []struct {
		name       string
		active     bool
		alive      uint64
		record     bool
		leaseSkips bool
	}{
		{"active", true, 4242, true, false},
		{"active, waiters bit", true, 0x80000000 | 4242, true, false},
		{"inactive", false, 4242, false, false},
		{"inactive, stub gone", false, 0x40000000, false, false},
		{"stub gone", true, 0x40000000, false, true},
		{"no stub yet", true, 0, false, true},
		{"high half ignored", true, 0xffffffff00000000, false, true},
	}
	const hits = 4
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			rig.reset(tc.active)
			rig.install(t, PadSpec{TPIndex: 3, Cond: compileAX(t, "getv 5; const8 1; add; setv 5; end"),
				Collect: []*Code{compileAX(t, "tracev 5; end")}, CollectCap: 16, CollectRegs: true, FSBase: padHaveFSBase()})
			*rig.field(CtlStubAlive) = tc.alive
			*rig.tpField(3, TPPassCount) = 100
			for h := range hits {
				in := padInput(h)
				in[16] = 0x2 | uint64(h)*flagCF | flagZF
				rig.hit(t, &in, st)
			}
			recs := rig.records(t)
			wantRecs, wantSkips := 0, uint64(0)
			if tc.record {
				wantRecs = hits
			}
			if tc.leaseSkips {
				wantSkips = hits
			}
			if len(recs) != wantRecs || *rig.field(CtlStubGoneSkips) != wantSkips || rig.tsvs[5] != int64(wantRecs) ||
				*rig.tpField(3, TPHits) != uint64(wantRecs) {
				t.Errorf("%d records, %d stub-gone skips, %d condition runs, %d hits; want %d %d %d %d", len(recs), *rig.field(CtlStubGoneSkips),
					rig.tsvs[5], *rig.tpField(3, TPHits), wantRecs, wantSkips, wantRecs, wantRecs)
			}
			if !tc.record {
				for i := range rig.lanes {
					if h := *rig.laneField(i, LaneHead); h != 0 {
						t.Errorf("lane %d head %d", i, h)
					}
				}
				for i := range MaxLanes {
					if rig.owner(i) != 0 {
						t.Errorf("owner %d claimed", i)
					}
				}
			}
			if a := *rig.field(CtlActive); a != map[bool]uint64{false: 0, true: 1}[tc.active] || rig.stopWhy() != 0 {
				t.Errorf("active %d stop %d", a, rig.stopWhy())
			}
		})
	}
}

// TestPadPassCount: a tracepoint with passcount N records exactly its
// first N hits (those whose condition holds); the N-th clears CtlActive
// with CtlStop = StopPassCount and its index; later hits
// do nothing. Also with threads racing.
func TestPadPassCount(t *testing.T) {
	t.Run("one thread", func(t *testing.T) {
		st := newTestStack(t)
		rig := newPadRig(t, 2, 1<<12)
		rig.install(t, PadSpec{TPIndex: 4, Cond: compileAX(t, "reg 0; const8 1; bit_and; end"), CollectRegs: true})
		*rig.tpField(4, TPPassCount) = 3
		n := 0
		for h := range 12 {
			in := padInput(h)
			in[0] = uint64(h)
			in[16] = 0x2 | flagSF | uint64(h&1)*flagDF
			rig.hit(t, &in, st)
			if h&1 == 1 {
				n++
			}
			active := *rig.field(CtlActive)
			if (n < 3) != (active == 1) {
				t.Fatalf("after hit %d (%d true): active %d", h, n, active)
			}
		}
		recs := rig.records(t)
		if len(recs) != 3 || *rig.tpField(4, TPHits) != 3 || rig.stopWhy() != StopPassCount || rig.stopTP() != 4 {
			t.Fatalf("%d records, hits %d, stop %d tp %d", len(recs), *rig.tpField(4, TPHits), rig.stopWhy(), rig.stopTP())
		}
		for i, r := range recs {
			if r.regs[0] != uint64(2*i+1) || r.flags != RecRegs {
				t.Errorf("record %d: %+v", i, r)
			}
		}
	})
	t.Run("dropped passcount hit stops", func(t *testing.T) {
		st := newTestStack(t)
		rig := newPadRig(t, 1, 256)
		rig.install(t, PadSpec{TPIndex: 0, CollectRegs: true}) // 224 bytes: one record per lane
		*rig.tpField(0, TPPassCount) = 2
		for h := range 3 {
			in := padInput(h)
			rig.hit(t, &in, st)
		}
		if n := len(rig.records(t)); n != 1 || rig.dropped() != 1 || *rig.field(CtlActive) != 0 || rig.stopWhy() != StopPassCount {
			t.Errorf("%d records, %d dropped, active %d, stop %d", n, rig.dropped(), *rig.field(CtlActive), rig.stopWhy())
		}
	})
	for _, fsOn := range []bool{true, false} {
		t.Run(fmt.Sprintf("4 threads fsbase=%v", fsOn), func(t *testing.T) {
			const threads, perThread, passCount = 4, 3000, 1000
			rig := newPadRig(t, 4, 1<<17)
			rig.install(t, PadSpec{TPIndex: 6, Cond: compileAX(t, "reg 9; const8 1; bit_and; end"), Collect: []*Code{compileAX(t, "reg 8; trace_quick 1; end")},
				CollectCap: 16, FSBase: fsOn})
			*rig.tpField(6, TPPassCount) = passCount
			var wg sync.WaitGroup
			errs := make(chan string, threads)
			// All threads hold their lock before any hits: a thread a
			// finished goroutine unlocked could otherwise be reused.
			var locked sync.WaitGroup
			locked.Add(threads)
			for th := range threads {
				st := newTestStack(t)
				wg.Add(1)
				go func() {
					defer wg.Done()
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					locked.Done()
					locked.Wait()
					in := padInput(th)
					in[8] = rig.dataAddr + uint64(th)
					for i := range perThread {
						in[9] = uint64(i)
						var out [18]uint64
						callSite(rig.site, &in, &out, st.top)
						if out[2] != in[2]+siteImm || out[9] != in[9] || out[8] != in[8] {
							errs <- fmt.Sprintf("thread %d hit %d: %x", th, i, out)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for e := range errs {
				t.Fatal(e)
			}
			recs := rig.records(t)
			hits := *rig.tpField(6, TPHits)
			if len(recs) != passCount || *rig.field(CtlActive) != 0 || rig.stopWhy() != StopPassCount || rig.stopTP() != 6 ||
				hits < passCount || hits > threads*perThread/2 || rig.dropped() != 0 {
				t.Fatalf("%d records (want %d), active %d, stop %d tp %d, hits %d, dropped %d", len(recs), passCount, *rig.field(CtlActive),
					rig.stopWhy(), rig.stopTP(), hits, rig.dropped())
			}
			for _, r := range recs {
				addr := binary.LittleEndian.Uint64(r.blocks[1:])
				if len(r.blocks) != 12 || addr < rig.dataAddr || addr >= rig.dataAddr+threads || r.tp != 6 {
					t.Fatalf("record %+v", r)
				}
			}
			t.Logf("%d hits numbered for a passcount of %d", hits, passCount)
		})
	}
}

// TestPadErrors: a condition that fails writes a header-only RecError
// record, a collection that fails turns its record into a RecError one of
// the same size; both count TPErrors and stop tracing (StopError). Loops
// end with ErrSteps after PadJumpLimit backward jumps. The thread
// continues unharmed, and the next hits do nothing.
func TestPadErrors(t *testing.T) {
	const loop = "l:; getv 0; const8 1; add; setv 0; pop; const8 1; if_goto l; const8 1; end"
	cases := []struct {
		name      string
		cond      string
		collect   []string
		cap       uint32
		regs      bool
		full      bool // the lane is full
		rsiGuard  bool // rsi points at the PROT_NONE page
		wantErr   uint32
		condError bool
		loops     bool // tsv 0 counts loop iterations
	}{
		{name: "condition divides by zero", cond: "const8 1; reg 1; div_unsigned; end", collect: []string{"tracev 1; end"}, cap: 32,
			wantErr: ErrDivZero, condError: true},
		{name: "condition divides by zero, regs", cond: "const8 1; reg 1; div_unsigned; end", regs: true, wantErr: ErrDivZero, condError: true},
		{name: "condition reads a bad tsv", cond: "getv 100; end", wantErr: ErrTSV, condError: true},
		{name: "condition loops", cond: loop, regs: true, wantErr: ErrSteps, condError: true, loops: true},
		{name: "condition fails, lane full", cond: "const8 1; reg 1; div_unsigned; end", full: true, wantErr: ErrDivZero, condError: true},
		{name: "collection unreadable", collect: []string{"reg 4; const8 16; trace; end"}, cap: 64, rsiGuard: true, wantErr: ErrCollect},
		{name: "collection unreadable, regs", collect: []string{"reg 4; const8 16; trace; end"}, cap: 64, regs: true, rsiGuard: true, wantErr: ErrCollect},
		{name: "second collection unreadable", cond: "const8 1; end", collect: []string{"tracev 2; end", "reg 4; const8 16; trace; end"}, cap: 64,
			regs: true, rsiGuard: true, wantErr: ErrCollect},
		{name: "collection frame full", collect: []string{"tracev 2; end", "reg 4; const8 16; trace; end"}, cap: 20, wantErr: ErrFrameFull},
		{name: "collection loops", collect: []string{loop}, cap: 16, wantErr: ErrSteps, loops: true},
	}
	st := newTestStack(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			rig := newPadRig(t, 2, 1<<12)
			spec := PadSpec{TPIndex: 5, CollectCap: tc.cap, CollectRegs: tc.regs, FSBase: padHaveFSBase()}
			if tc.cond != "" {
				spec.Cond = compileAX(t, tc.cond)
			}
			for _, c := range tc.collect {
				spec.Collect = append(spec.Collect, compileAX(t, c))
			}
			rig.install(t, spec)
			fs := uint64(0)
			if spec.FSBase {
				fs = threadFSBase()
			}
			if tc.full {
				for i := range rig.lanes {
					*rig.laneField(i, LaneHead) = rig.laneSize
				}
			}
			for h := range 3 {
				in := padInput(h)
				in[1] = 0
				in[4] = rig.dataAddr
				if tc.rsiGuard {
					in[4] = rig.guardAddr + 8
				}
				in[16] = 0x2 | flagOF | uint64(h)*flagCF
				rig.hit(t, &in, st)
				if h == 0 && *rig.field(CtlActive) != 0 {
					t.Fatalf("the error did not stop tracing")
				}
			}
			if *rig.tpField(5, TPErrors) != 1 || rig.stopWhy() != StopError || rig.stopTP() != 5 {
				t.Errorf("errors %d stop %d tp %d", *rig.tpField(5, TPErrors), rig.stopWhy(), rig.stopTP())
			}
			if tc.loops {
				if n := rig.tsvs[0]; n < PadJumpLimit || n > PadJumpLimit+1 {
					t.Errorf("the loop ran %d times; the budget is %d backward jumps", n, PadJumpLimit)
				} else {
					t.Logf("the loop body ran %d times", n)
				}
			}
			if tc.full {
				for i, l := range rig.lanes {
					for _, c := range l {
						if c != 0 {
							t.Fatalf("lane %d written to", i)
						}
					}
				}
				if rig.dropped() != 1 {
					t.Errorf("%d dropped", rig.dropped())
				}
				return
			}
			recs := rig.records(t)
			if len(recs) != 1 {
				t.Fatalf("%d records", len(recs))
			}
			r := recs[0]
			wantSize := PadRecordSize(tc.regs, tc.cap)
			if tc.condError {
				wantSize = RecHeaderSize
			}
			if r.flags != RecError || r.used != tc.wantErr || uint64(r.size) != wantSize || r.tp != 5 || r.thread != fs || r.time == 0 ||
				r.lane != rig.laneOf(fs) {
				t.Errorf("record %+v; want RecError, code %d, size %d, thread %#x", r, tc.wantErr, wantSize, fs)
			}
		})
	}
}

// TestPadConcurrent: four threads hit the same pad at once while a
// consumer drains the lanes as the stub does, with lanes small enough
// that some hits are dropped. With FSBase each thread writes to the lane
// it owns (owner = its fs base) and its dropped hits are exactly its
// lane's LaneDropped; without, all share the shared lane. Per-lane order
// is per-thread order, every record is complete and consistent, and
// records + drops = hits.
func TestPadConcurrent(t *testing.T) {
	for _, fsOn := range []bool{true, false} {
		t.Run(fmt.Sprintf("fsbase=%v", fsOn), func(t *testing.T) {
			const threads, perThread = 4, 20000
			rig := newPadRig(t, 8, 1<<13)
			rig.install(t, PadSpec{TPIndex: 5, Cond: compileAX(t, "reg 8; const8 100; less_unsigned; end"),
				Collect: []*Code{compileAX(t, "reg 4; const8 16; trace; end")}, CollectCap: 32, CollectRegs: true, FSBase: fsOn})
			for i := range rig.data {
				rig.data[i] = byte(i / 16)
			}
			var fsBases, sps [threads]uint64
			var wg sync.WaitGroup
			var stop atomic.Bool
			errs := make(chan string, threads+1)
			perLane := make([][]testRecord, len(rig.lanes))
			consumer := make(chan struct{})
			go func() {
				defer close(consumer)
				tails := make([]uint64, len(rig.lanes))
				for {
					last := stop.Load()
					for i := range rig.lanes {
						head := rig.load(CtlLanes + i*LaneHdrSize + LaneHead)
						recs, end, err := parseLane(rig.lanes[i], tails[i], head)
						if err != nil {
							errs <- fmt.Sprintf("lane %d: %v", i, err)
							return
						}
						for _, r := range recs {
							if r.flags != RecSkip {
								r.lane = i
								perLane[i] = append(perLane[i], r)
							}
						}
						rig.consume(i, end)
						tails[i] = end
						if last && end != head {
							errs <- fmt.Sprintf("lane %d: uncommitted record at %d after the threads ended", i, end)
							return
						}
					}
					if last {
						return
					}
					runtime.Gosched()
				}
			}()
			// All threads hold their lock before any hits, so they are four
			// distinct threads (a thread a finished goroutine unlocked
			// could otherwise be reused) and hit at once.
			var locked sync.WaitGroup
			locked.Add(threads)
			for th := range threads {
				st := newTestStack(t)
				wg.Add(1)
				go func() {
					defer wg.Done()
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					fsBases[th] = threadFSBase()
					locked.Done()
					locked.Wait()
					in := padInput(th)
					in[8] = uint64(th)
					in[4] = rig.dataAddr + 16*uint64(th)
					in[16] = 0x2 | flagCF
					// rcx = i<<20 + siteImm: the flags of the add do not
					// depend on i.
					in[2] = 0
					var expect, out [18]uint64
					callSite(rig.tail, &in, &expect, st.top)
					for i := range perThread {
						in[9] = uint64(i)
						in[2] = uint64(i) << 20
						expect[9], expect[2] = in[9], in[2]+siteImm
						callSite(rig.site, &in, &out, st.top)
						if out != expect {
							errs <- fmt.Sprintf("thread %d hit %d: %x, want %x", th, i, out, expect)
							return
						}
						if i%128 == 127 {
							runtime.Gosched() // let the consumer run now and then
						}
					}
					sps[th] = out[17]
				}()
			}
			wg.Wait()
			stop.Store(true)
			<-consumer
			close(errs)
			for e := range errs {
				t.Fatal(e)
			}
			defer func() {
				if t.Failed() {
					for i := range rig.lanes {
						t.Logf("lane %d: owner %#x head %d dropped %d records %d", i, rig.owner(i), *rig.laneField(i, LaneHead),
							*rig.laneField(i, LaneDropped), len(perLane[i]))
					}
					t.Logf("fs bases %#x", fsBases)
				}
			}()
			total, inversions := 0, 0
			threadLane := map[int]int{}
			for lane, recs := range perLane {
				total += len(recs)
				if len(recs) == 0 {
					continue
				}
				th := int(recs[0].regs[8])
				if th >= threads {
					t.Fatalf("lane %d: record %+v", lane, recs[0])
				}
				if fsOn {
					if lane == rig.nLanes {
						t.Errorf("%d records in the shared lane", len(recs))
					}
					if rig.owner(lane) != fsBases[th] {
						t.Errorf("lane %d: owner %#x, thread %d has fs base %#x", lane, rig.owner(lane), th, fsBases[th])
					}
					if _, dup := threadLane[th]; dup {
						t.Errorf("thread %d writes to lanes %d and %d", th, threadLane[th], lane)
					}
					threadLane[th] = lane
				} else if lane != rig.nLanes {
					t.Errorf("%d records in lane %d without FSBase", len(recs), lane)
				}
				next := map[int]uint64{} // per thread: the least hit number still possible
				seen := map[int]int{}
				for k, r := range recs {
					th, i := int(r.regs[8]), r.regs[9]
					wantThread := uint64(0)
					if fsOn {
						wantThread = fsBases[th]
					}
					wantBlocks := mBlock(rig.dataAddr+16*uint64(th), rig.data[16*th:16*th+16])
					if th >= threads || i < next[th] || i >= perThread || r.flags != RecRegs || r.tp != 5 || r.thread != wantThread ||
						r.regs[2] != i<<20 || r.regs[7] != sps[th] || r.regs[16] != uint64(rig.site) || r.regs[4] != rig.dataAddr+16*uint64(th) ||
						string(r.blocks) != string(wantBlocks) || fsOn && int(r.regs[8]) != int(recs[0].regs[8]) {
						t.Fatalf("lane %d record %d (after hit %d of thread %d): %+v", lane, k, next[th], th, r)
					}
					if k > 0 && r.time < recs[k-1].time {
						inversions++
					}
					next[th] = i + 1
					seen[th]++
				}
				if fsOn {
					if missing := uint64(perThread - seen[th]); missing != *rig.laneField(lane, LaneDropped) {
						t.Errorf("lane %d: thread %d lost %d hits, LaneDropped %d", lane, th, missing, *rig.laneField(lane, LaneDropped))
					}
				}
			}
			if fsOn && len(threadLane) != threads {
				t.Errorf("%d threads have records", len(threadLane))
			}
			if uint64(total)+rig.dropped() != threads*perThread {
				t.Errorf("%d records + %d dropped != %d hits", total, rig.dropped(), threads*perThread)
			}
			if *rig.field(CtlActive) != 1 || *rig.tpField(5, TPErrors) != 0 {
				t.Errorf("active %d errors %d", *rig.field(CtlActive), *rig.tpField(5, TPErrors))
			}
			t.Logf("%d records, %d dropped, %d time inversions within a lane", total, rig.dropped(), inversions)
			if fsOn && inversions != 0 {
				t.Logf("warning: time stamps of one thread went backwards %d times (TSC not synchronized?)", inversions)
			}
		})
	}
}

// TestPadStackBytes checks JumpPad.StackBytes against the deepest stack
// byte a hit actually writes (condition, collection through the
// process_vm_readv helper).
func TestPadStackBytes(t *testing.T) {
	rig := newPadRig(t, 1, 1<<14)
	st := newTestStack(t)
	rig.install(t, PadSpec{Cond: compileAX(t, "const8 1; reg 8; const8 1; add; div_unsigned; end"),
		Collect: []*Code{compileAX(t, "reg 4; const8 16; trace; reg 4; ref32; pop; end")}, CollectCap: 64, CollectRegs: true})
	for i := range st.mem {
		st.mem[i] = 0xa5
	}
	in := [18]uint64{4: rig.dataAddr, 8: 0, 16: 0x2}
	var out [18]uint64
	callSite(rig.site, &in, &out, st.top)
	if recs := rig.records(t); len(recs) != 1 || len(recs[0].blocks) != 27 {
		t.Fatalf("records %+v", recs)
	}
	lowest := 0
	for lowest < len(st.mem) && st.mem[lowest] == 0xa5 {
		lowest++
	}
	base := uint64(uintptr(unsafe.Pointer(&st.mem[0])))
	used := int(out[17] - (base + uint64(lowest)))
	if used > rig.pad.StackBytes || used < padRedZone+padSaveBytes+padBlockBytes+CtxSize {
		t.Errorf("the hit used %d stack bytes; StackBytes %d", used, rig.pad.StackBytes)
	}
	t.Logf("stack used %d of %d bytes", used, rig.pad.StackBytes)
}

// BenchmarkPadHit measures one call of the site: unpatched, through an
// inactive pad, and through active pads recording every hit (no actions;
// the register block; a condition and a tracev; no actions with every
// thread in the shared lane). Each thread consumes its
// lane every 64 hits (tail = head) so that it never fills. The threads=2
// variants run two threads hitting at once, each b.N times: ns/op is the
// cost of a hit to each thread.
func BenchmarkPadHit(b *testing.B) {
	fsOn := padHaveFSBase()
	b.Run("unpatched", func(b *testing.B) {
		rig := newPadRig(b, 4, 1<<16)
		st := newTestStack(b)
		rig.unpatch()
		in := padInput(0)
		var out [18]uint64
		for b.Loop() {
			callSite(rig.site, &in, &out, st.top)
		}
	})
	variants := []struct {
		name   string
		active bool
		spec   func(b *testing.B) PadSpec
	}{
		{"inactive", false, func(*testing.B) PadSpec { return PadSpec{} }},
		{"hit", true, func(*testing.B) PadSpec { return PadSpec{FSBase: fsOn} }},
		{"regs", true, func(*testing.B) PadSpec { return PadSpec{CollectRegs: true, FSBase: fsOn} }},
		// collect $regs: the register block and the x87/SSE/AVX state.
		{"regs+xsave", true, func(*testing.B) PadSpec {
			mask, size := uint64(3), 576
			if cpu.X86.HasAVX {
				mask, size = 7, 832
			}
			return PadSpec{CollectRegs: true, XSaveMask: mask, XSaveSize: size, FSBase: fsOn}
		}},
		// Every thread in the shared lane (no rdfsbase): one reservation
		// cursor for all.
		{"hit-shared-lane", true, func(*testing.B) PadSpec { return PadSpec{} }},
		{"cond+tracev", true, func(b *testing.B) PadSpec {
			return PadSpec{Cond: compileAX(b, "reg 8; const8 100; less_unsigned; end"), Collect: []*Code{compileAX(b, "tracev 1; end")},
				CollectCap: 16, FSBase: fsOn}
		}},
	}
	for _, threads := range []int{1, 2} {
		for _, v := range variants {
			b.Run(fmt.Sprintf("%s/threads=%d", v.name, threads), func(b *testing.B) {
				rig := newPadRig(b, 4, 1<<20) // 64 records of ~1.1 KB between consumptions
				rig.reset(v.active)
				rig.install(b, v.spec(b))
				stacks := make([]*testStack, threads)
				for i := range stacks {
					stacks[i] = newTestStack(b)
				}
				var wg sync.WaitGroup
				var start sync.WaitGroup
				start.Add(1)
				for th := range threads {
					wg.Add(1)
					go func() {
						defer wg.Done()
						runtime.LockOSThread()
						defer runtime.UnlockOSThread()
						in := padInput(th)
						in[8] = 7
						var out [18]uint64
						var fs uint64
						if rig.spec.FSBase {
							fs = threadFSBase()
						}
						start.Wait()
						callSite(rig.site, &in, &out, stacks[th].top)
						lane := rig.laneOf(fs)
						head, tail := rig.laneField(lane, LaneHead), rig.laneField(lane, LaneTail)
						for i := 1; i < b.N; i++ {
							callSite(rig.site, &in, &out, stacks[th].top)
							if i&63 == 0 {
								// Consume up to head; in the shared lane
								// another thread may have gone further.
								h, t := atomic.LoadUint64(head), atomic.LoadUint64(tail)
								for h > t && !atomic.CompareAndSwapUint64(tail, t, h) {
									t = atomic.LoadUint64(tail)
								}
							}
						}
					}()
				}
				b.ResetTimer()
				start.Done()
				wg.Wait()
				b.StopTimer()
				if d := rig.dropped(); d != 0 {
					b.Fatalf("%d hits dropped", d)
				}
				heads := uint64(0)
				for i := range rig.lanes {
					heads += *rig.laneField(i, LaneHead)
				}
				if v.active != (heads != 0) {
					b.Fatalf("active %v, %d bytes recorded", v.active, heads)
				}
			})
		}
	}
}

// TestPadStaleHead: in a lane several threads write to (the shared lane),
// a thread may read the lane's head, be preempted, and read the tail only
// after other threads reserved more records and the consumer moved the
// tail past the head it read. The lane is not full: the pad must retry
// with the current head, not drop the hit. The test makes this happen
// deterministically: it redirects the pad's load of LaneTail through a
// trampoline that, the first time, plays the other threads and the
// consumer (two records reserved and consumed: head += 64, tail = head)
// and then executes the load.
func TestPadStaleHead(t *testing.T) {
	for _, fsOn := range []bool{false, true} {
		t.Run(fmt.Sprintf("fsbase=%v", fsOn), func(t *testing.T) {
			rig := newPadRig(t, 1, 1<<12)
			st := newTestStack(t)
			rig.install(t, PadSpec{TPIndex: 0, FSBase: fsOn})
			if fsOn {
				// Every owner entry taken: this thread uses the shared lane.
				*rig.field(CtlOwners) = 0x7777_0000_0000
			}
			stallPad(t, rig)
			in := padInput(0)
			rig.hit(t, &in, st)
			lane := rig.nLanes
			head := *rig.laneField(lane, LaneHead)
			if rig.dropped() != 0 || head != 64+PadRecordSize(false, 0) {
				t.Fatalf("lane not full (2 records reserved and consumed), yet: dropped %d, head %d", rig.dropped(), head)
			}
			if recs := rig.records(t); len(recs) != 1 || recs[0].cursor != 64 {
				t.Errorf("records %+v", recs)
			}
		})
	}
}

// stallPad redirects the installed pad's only load of LaneTail through a
// trampoline that first (once) advances the lane's head by two records
// and sets the tail to it, as other threads and the consumer would while
// this thread is preempted.
func stallPad(t *testing.T, rig *padRig) {
	t.Helper()
	code := rig.code[rigPadOff : rigPadOff+len(rig.pad.Code)]
	load := -1
	var loadLen int
	for off := 0; off < len(code); {
		inst, err := x86asm.Decode(code[off:], 64)
		if err != nil {
			break // the expression code's padding
		}
		for _, a := range inst.Args[1:] {
			if m, ok := a.(x86asm.Mem); ok && m.Base == x86asm.R14 && m.Disp == LaneTail {
				if load >= 0 {
					t.Fatalf("two loads of LaneTail")
				}
				load, loadLen = off, inst.Len
			}
		}
		off += inst.Len
	}
	if load < 0 || loadLen < 5 {
		t.Fatalf("no load of LaneTail of 5 bytes or more in the pad")
	}
	orig := append([]byte(nil), code[load:load+loadLen]...)
	tramp := uintptr(unsafe.Pointer(&rig.code[256]))
	once := uint64(uintptr(unsafe.Pointer(&rig.tsvs[63])))
	tc := emit(func(a *asm) {
		a.push(rAX)
		a.movImm(rAX, once)
		a.aluMI(aluCmp, at(rAX, 0), 0)
		done := a.jcc8(condNE)
		a.aluMI(aluOr, at(rAX, 0), 1)
		a.load64(rAX, at(r14, LaneHead))
		a.aluRI(aluAdd, rAX, 64)
		a.store64(at(r14, LaneHead), rAX)
		a.store64(at(r14, LaneTail), rAX)
		a.here8(done)
		a.pop(rAX)
		a.byte1(orig...)
		a.byte1(0xe9)
		a.imm32(0)
	})
	back := rig.padAddr + uintptr(load+loadLen)
	binary.LittleEndian.PutUint32(tc[len(tc)-4:], uint32(int32(int64(back)-int64(tramp+uintptr(len(tc))))))
	copy(rig.code[256:], tc)
	code[load] = 0xe9
	binary.LittleEndian.PutUint32(code[load+1:], uint32(int32(int64(tramp)-int64(rig.padAddr+uintptr(load)+5))))
	for i := load + 5; i < load+loadLen; i++ {
		code[i] = 0x90
	}
}

// TestPadSharedLaneNoSpuriousDrop: threads share the shared lane while a
// consumer moves its tail up to its head. The lane is larger than all the
// records of the test, so it can never be full: no hit may be dropped.
// (The statistical twin of TestPadStaleHead: more threads than CPUs, so
// that the kernel preempts them anywhere in the pad.)
func TestPadSharedLaneNoSpuriousDrop(t *testing.T) {
	const threads, perThread = 8, 200000
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(threads + 1))
	rig := newPadRig(t, 1, 1<<26) // more than threads*perThread records of 32 bytes
	rig.install(t, PadSpec{TPIndex: 0})
	lane := rig.nLanes
	head, tail := rig.laneField(lane, LaneHead), rig.laneField(lane, LaneTail)
	var stop atomic.Bool
	consumer := make(chan struct{})
	go func() {
		defer close(consumer)
		for !stop.Load() {
			atomic.StoreUint64(tail, atomic.LoadUint64(head)) // the only writer of tail
		}
	}()
	var wg sync.WaitGroup
	for range threads {
		st := newTestStack(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := padInput(0)
			var out [18]uint64
			for range perThread {
				callSite(rig.site, &in, &out, st.top)
			}
		}()
	}
	wg.Wait()
	stop.Store(true)
	<-consumer
	recorded := *head / PadRecordSize(false, 0)
	t.Logf("%d hits, %d recorded, %d dropped", threads*perThread, recorded, rig.dropped())
	if d := rig.dropped(); d != 0 || recorded != threads*perThread {
		t.Errorf("%d hits dropped from a lane that cannot be full", d)
	}
}

// TestPadXSave: with an XSAVE area the record holds the thread's x87, SSE
// (and AVX) state in the standard format at a 64-byte aligned address,
// and the blocks still follow it; the thread's state is untouched.
func TestPadXSave(t *testing.T) {
	avx := cpu.X86.HasAVX
	mask, size := uint64(3), 576
	if avx {
		mask, size = 7, 832
	}
	st := newTestStack(t)
	for _, laneOff := range []uint64{0, 16, 48} { // record alignments modulo 64
		rig := newPadRig(t, 1, 1<<14)
		rig.reset(true)
		rig.install(t, PadSpec{TPIndex: 1, CollectRegs: true, XSaveMask: mask, XSaveSize: size,
			Collect: []*Code{compileAX(t, "tracev 2; end")}, CollectCap: 16})
		*rig.laneField(1, LaneHead), *rig.laneField(1, LaneTail) = laneOff, laneOff
		runtime.LockOSThread()
		in := padInput(1)
		rig.hit(t, &in, st)
		runtime.UnlockOSThread()
		recs := rig.records(t)
		if len(recs) != 1 {
			t.Fatalf("lane offset %d: %d records", laneOff, len(recs))
		}
		r := recs[0]
		if len(r.xsave) != size || len(r.blocks) != 13 || r.blocks[0] != BlockTSV {
			t.Fatalf("lane offset %d: xsave %d bytes, blocks %x", laneOff, len(r.xsave), r.blocks)
		}
		bv := binary.LittleEndian.Uint64(r.xsave[512:])
		if bv&^mask != 0 {
			t.Errorf("XSTATE_BV %#x outside the mask %#x", bv, mask)
		}
		if mxcsr := binary.LittleEndian.Uint32(r.xsave[24:]); mxcsr&0xffc0 != 0x1f80 {
			t.Errorf("MXCSR %#x, want Go's default 0x1f80 (exception flags aside)", mxcsr)
		}
	}
}

// A lane the stub claimed for a thread beforehand (LaneSlot, then the
// next free entry) is the lane the thread's pad writes to, whatever
// entries other threads hold on the way.
func TestPadFindsLaneClaimedByStub(t *testing.T) {
	if !padHaveFSBase() {
		t.Skip("no rdfsbase on this machine (HWCAP2_FSGSBASE)")
	}
	const lanes = 4
	for others := range lanes + 1 {
		t.Run(fmt.Sprint("others=", others), func(t *testing.T) {
			runtime.LockOSThread() // subtests run on goroutines of their own
			defer runtime.UnlockOSThread()
			fs := threadFSBase()
			rig := newPadRig(t, lanes, 1<<14)
			rig.reset(true)
			rig.install(t, PadSpec{FSBase: true})
			// Entries from the thread's slot on belong to other threads.
			slot := LaneSlot(fs, lanes)
			for k := range others {
				*rig.field(CtlOwners + 8*((slot+k)%lanes)) = fs + uint64(k+1)<<20
			}
			want := (slot + others) % lanes
			if others < lanes {
				*rig.field(CtlOwners + 8*want) = fs
			} else {
				want = lanes // every entry taken: the shared lane
			}
			st := newTestStack(t)
			in := padInput(0)
			var out [18]uint64
			callSite(rig.site, &in, &out, st.top)
			for i := range lanes + 1 {
				head := *rig.laneField(i, LaneHead)
				if (i == want) != (head != 0) {
					t.Errorf("lane %d: head %d (want the record in lane %d)", i, head, want)
				}
			}
		})
	}
}

// Each committed record adds FrameBase + its blocks' bytes to its lane's
// LaneSpent; hits the condition rejects add nothing.
func TestPadLaneSpent(t *testing.T) {
	tracev := func(n int) *Code { return compileAX(t, fmt.Sprintf("tracev %d; end", n)) }
	for _, tc := range []struct {
		name      string
		collect   int // tracev collections, 13-byte 'V' blocks each
		uncounted int // of which the last ones are not counted
		perHit    uint64
	}{
		{"one", 1, 0, 100 + 13},
		{"two, one uncounted", 2, 1, 100 + 13},
		{"two, both uncounted", 2, 2, 100},
	} {
		for _, fs := range []bool{false, true} {
			t.Run(fmt.Sprint(tc.name, "/fsbase=", fs), func(t *testing.T) {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				rig := newPadRig(t, 4, 1<<14)
				rig.reset(true)
				var collect []*Code
				for i := range tc.collect {
					collect = append(collect, tracev(i+1))
				}
				// Condition: rdi (GDB register 5) < 3.
				rig.install(t, PadSpec{FSBase: fs, FrameBase: 100, CollectCap: 32, Uncounted: tc.uncounted,
					Cond:    compileAX(t, "reg 5; const8 3; less_unsigned; end"),
					Collect: collect})
				st := newTestStack(t)
				var out [18]uint64
				for i := range 5 {
					in := padInput(0)
					in[5] = uint64(i) // rdi: hits 0, 1, 2 pass the condition
					callSite(rig.site, &in, &out, st.top)
				}
				var fsb uint64
				if fs {
					fsb = threadFSBase()
				}
				lane := rig.laneOf(fsb)
				if got := *rig.laneField(lane, LaneSpent); got != 3*tc.perHit {
					t.Errorf("lane %d spent %d, want %d", lane, got, 3*tc.perHit)
				}
				recs := rig.records(t)
				if len(recs) != 3 {
					t.Errorf("%d records, want 3", len(recs))
				}
				for _, r := range recs {
					if r.used != uint32(13*tc.collect) {
						t.Errorf("record used %d, want %d (every block recorded)", r.used, 13*tc.collect)
					}
				}
			})
		}
	}
}

// LaneBudget: the record that takes a lane's LaneSpent past it switches
// collection off (it is kept: the stub finds the buffer full and
// discards what does not fit); 0 sets no limit.
func TestPadLaneBudget(t *testing.T) {
	for _, tc := range []struct {
		budget  uint64
		records int
		active  bool
	}{
		{0, 5, true},
		{250, 3, false}, // 100, 200, 300 > 250: off after the third
		{300, 4, false}, // 300 is within; 400 is not
		{10000, 5, true},
	} {
		t.Run(fmt.Sprint(tc.budget), func(t *testing.T) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			rig := newPadRig(t, 4, 1<<14)
			rig.reset(true)
			for i := 0; i <= 4; i++ {
				*rig.laneField(i, LaneBudget) = tc.budget
			}
			rig.install(t, PadSpec{FrameBase: 100})
			st := newTestStack(t)
			var out [18]uint64
			for range 5 {
				in := padInput(0)
				callSite(rig.site, &in, &out, st.top)
			}
			if got := len(rig.records(t)); got != tc.records {
				t.Errorf("%d records, want %d", got, tc.records)
			}
			if got := rig.load(CtlActive) != 0; got != tc.active {
				t.Errorf("active %v, want %v", got, tc.active)
			}
		})
	}
}

// With TPLoad the pad reads the thread pointer at %fs:0 and lists that
// load among its faults: a thread without one (fs base 0) is resumed at
// code that takes the shared lane (rsi = 0) and goes on after the load.
func TestPadThreadPointerLoad(t *testing.T) {
	const addr = 0x7000_0000_0000
	pad, err := BuildJumpPadAMD64(PadSpec{Lanes: 4, TPLoad: true, Addr: addr, TailAddr: addr + 0x1000})
	if err != nil {
		t.Fatal(err)
	}
	at := func(pc uint64) x86asm.Inst {
		in, err := x86asm.Decode(pad.Code[pc-addr:], 64)
		if err != nil {
			t.Fatalf("decode at %#x: %v", pc, err)
		}
		return in
	}
	var load *PadFault
	for i, f := range pad.Faults {
		in := at(f.PC)
		if m, ok := in.Args[1].(x86asm.Mem); ok && in.Op == x86asm.MOV && m.Segment == x86asm.FS {
			load = &pad.Faults[i]
		}
	}
	if load == nil {
		t.Fatalf("no %%fs load among the faults %v", pad.Faults)
	}
	if in := at(load.PC); in.Args[0] != x86asm.RSI || in.Args[1].(x86asm.Mem).Disp != 0 || in.Args[1].(x86asm.Mem).Base != 0 {
		t.Errorf("load %v, want rsi = %%fs:0", in)
	}
	xor := at(load.Recover)
	jmp := at(load.Recover + uint64(xor.Len))
	if xor.Op != x86asm.XOR || jmp.Op != x86asm.JMP {
		t.Fatalf("recovery %v; %v", xor, jmp)
	}
	next := load.PC + uint64(at(load.PC).Len)
	if target := load.Recover + uint64(xor.Len) + uint64(jmp.Len) + uint64(int64(jmp.Args[0].(x86asm.Rel))); target != next {
		t.Errorf("recovery goes on at %#x, want %#x (after the load)", target, next)
	}
	plain, _ := BuildJumpPadAMD64(PadSpec{Lanes: 4, Addr: addr, TailAddr: addr + 0x1000})
	if len(plain.Faults) != 0 {
		t.Errorf("a pad without TPLoad lists faults %v", plain.Faults)
	}
}

// withTCBSelfPointer runs f on a locked thread whose %fs:0 holds its fs
// base, as glibc's thread control block does (PadSpec.TPLoad). In a Go
// thread the word at the fs base is an unused TLS slot of the runtime's
// m; it is restored afterwards.
func withTCBSelfPointer(t *testing.T, f func(fs uint64)) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	fs := threadFSBase()
	// The fs base is memory of the runtime's, outside the Go heap.
	slot := (*uint64)(unsafe.Add(nil, fs))
	saved := *slot
	*slot = fs
	defer func() { *slot = saved }()
	f(fs)
}

// A tracepoint that collects nothing (PadSpec.Compact) writes 8-byte
// compact records in a lane its thread owns: the tracepoint index and
// the time stamp's low bits in one word; in the shared lane (no lane
// free) it writes full records with the thread pointer.
func TestPadCompactRecords(t *testing.T) {
	const tp = 5
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprint("shared=", shared), func(t *testing.T) {
			withTCBSelfPointer(t, func(fs uint64) {
				rig := newPadRig(t, 4, 1<<12)
				rig.reset(true)
				rig.install(t, PadSpec{TPIndex: tp, TPLoad: true, Compact: true, FrameBase: 6})
				if shared {
					for i := range 4 {
						*rig.field(CtlOwners + 8*i) = 0x7777_0000_0000 + uint64(i)
					}
				}
				st := newTestStack(t)
				for h := range 3 {
					in := padInput(h)
					rig.hit(t, &in, st)
				}
				lane := rig.laneOf(fs)
				if shared != (lane == 4) {
					t.Fatalf("records in lane %d (owners %#x %#x %#x %#x, fs %#x)", lane, rig.owner(0), rig.owner(1), rig.owner(2), rig.owner(3), fs)
				}
				recs := rig.laneRecords(t, lane)
				if len(recs) != 3 {
					t.Fatalf("%d records: %+v", len(recs), recs)
				}
				wantSize, wantThread := uint32(RecCompactSize), uint64(0)
				if shared {
					wantSize, wantThread = RecHeaderSize, fs
				}
				for i, r := range recs {
					if r.size != wantSize || r.tp != tp || r.flags != 0 || r.used != 0 || r.thread != wantThread {
						t.Errorf("record %d: %+v, want %d bytes, thread %#x", i, r, wantSize, wantThread)
					}
					if i > 0 && r.time <= recs[i-1].time {
						t.Errorf("record %d: time %#x after %#x", i, r.time, recs[i-1].time)
					}
					if r.time >= 1<<RecCompactTimeBits && !shared {
						t.Errorf("record %d: time %#x has more than %d bits", i, r.time, RecCompactTimeBits)
					}
				}
				if spent := *rig.laneField(lane, LaneSpent); spent != 3*6 {
					t.Errorf("spent %d, want %d", spent, 3*6)
				}
			})
		})
	}
	if _, err := BuildJumpPadAMD64(PadSpec{Lanes: 4, Compact: true, CollectRegs: true}); err == nil {
		t.Errorf("compact records accepted for a tracepoint collecting registers")
	}
}

// Compact and full records share a thread's lane: a full record then
// starts 8 bytes past a 16-byte boundary, and one that does not fit
// before the lane's end leaves a filler word even when only 8 bytes
// remain.
func TestPadCompactAndFullRecordsWrap(t *testing.T) {
	withTCBSelfPointer(t, func(fs uint64) {
		rig := newPadRig(t, 4, 1024)
		rig.reset(true)
		st := newTestStack(t)
		hits := func(spec PadSpec, n int) {
			rig.install(t, spec)
			for h := range n {
				in := padInput(h)
				rig.hit(t, &in, st)
			}
		}
		compact := PadSpec{TPIndex: 1, TPLoad: true, Compact: true}
		full := PadSpec{TPIndex: 2, TPLoad: true}
		hits(compact, 1)
		hits(full, 31)
		hits(compact, 2)
		lane := rig.laneOf(fs)
		if lane >= 4 {
			t.Fatalf("no lane claimed")
		}
		recs := rig.laneRecords(t, lane)
		if len(recs) != 34 || recs[1].off != 8 || recs[1].size != RecHeaderSize || recs[33].off != 1008 {
			t.Fatalf("%d records, the first full one at %d", len(recs), recs[1].off)
		}
		rig.consume(lane, *rig.laneField(lane, LaneHead)) // head 1016
		hits(full, 1)
		recs = rig.laneRecords(t, lane)
		if len(recs) != 2 || recs[0].flags != RecSkip || recs[0].off != 1016 || recs[0].size != 8 ||
			recs[1].off != 0 || recs[1].tp != 2 || recs[1].thread != fs {
			t.Fatalf("after the wrap: %+v", recs)
		}
		if head := *rig.laneField(lane, LaneHead); head != 1024+RecHeaderSize {
			t.Errorf("head %d, want %d", head, 1024+RecHeaderSize)
		}
	})
}
