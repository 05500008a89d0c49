package a64

import (
	"encoding/binary"
	"runtime"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The execution harness: machine code, generated here, that loads a
// register file (x0-x30 but x28, sp, nzcv, v0-v31) from a state block,
// branches to the code under test and, wherever that code lands (an
// "exit stub" at every address it may reach), stores the registers back
// with the stub's id. x28 keeps Go's g throughout: Go's signal handler
// relies on it. The code runs on a private stack; a signal arriving
// meanwhile runs on the signal stack.

// State block offsets.
const (
	stX     = 0    // in: x0..x30
	stSP    = 248  // in: sp
	stNZCV  = 256  // in: nzcv
	stOutX  = 264  // out: x0..x30
	stOutSP = 512  // out: sp
	stOutNZ = 520  // out: nzcv
	stOutID = 528  // out: exit stub id
	stGoSP  = 536  // Go's sp
	stGoFP  = 544  // Go's x29
	stGoLR  = 552  // Go's x30
	stV     = 576  // in: v0..v31
	stOutV  = 1088 // out: v0..v31
	stSize  = 1600
)

// regs is a register file.
type regs struct {
	X    [31]uint64
	SP   uint64
	NZCV uint64
	V    [32][2]uint64
}

// The flush routine and the trampoline, called from Go with blr, start
// with bti c so that they may live in BTI-guarded pages.

// trampoline is the entry sequence; it ends with a b to entry, at the
// address at which it is placed (at).
func trampoline(at, entry uint64) []uint32 {
	c := []uint32{tBTIC, tMovX1SP, tStrX(1, 0, stGoSP), tStrX(29, 0, stGoFP), tStrX(30, 0, stGoLR)}
	for i := 0; i < 32; i++ {
		c = append(c, tLdrQ(i, 0, stV+16*i))
	}
	c = append(c, tLdrX(1, 0, stNZCV), tMsrNZCVX1, tLdrX(1, 0, stSP), tMovSPX1)
	for i := 1; i <= 30; i++ {
		if i != 28 {
			c = append(c, tLdrX(i, 0, stX+8*i))
		}
	}
	c = append(c, tLdrX(0, 0, stX))
	return append(c, tB(at+4*uint64(len(c)), entry))
}

// commonExit stores the registers; it is entered with x0 = the exit id and
// the original x0 pushed on the stack. lit is the address of the 8-byte
// literal holding the state block's address.
func commonExit(at, lit uint64) []uint32 {
	c := []uint32{tStrX1SP8}
	c = append(c, tLdrLitX(1, at+4, lit), tStrX(0, 1, stOutID), tMovX0X1)
	for i := 2; i <= 30; i++ {
		c = append(c, tStrX(i, 0, stOutX+8*i))
	}
	c = append(c, tMrsX1NZCV, tStrX(1, 0, stOutNZ), tPopX1X2, tStrX(1, 0, stOutX), tStrX(2, 0, stOutX+8),
		tMovX1SP, tStrX(1, 0, stOutSP))
	for i := 0; i < 32; i++ {
		c = append(c, tStrQ(i, 0, stOutV+16*i))
	}
	return append(c, tLdrX(1, 0, stGoSP), tMovSPX1, tLdrX(29, 0, stGoFP), tLdrX(30, 0, stGoLR), tRet)
}

// exitStub is the 3-word stub at at that reports id through the common
// exit at common.
func exitStub(at, common uint64, id uint16) []uint32 {
	return []uint32{tPushX0, tMovz(0, id), tB(at+8, common)}
}

// flushCode is a routine flush(start, end) that makes code written at
// [start, end) visible to instruction fetch (4-byte steps: always within
// the smallest cache line).
var flushCode = []uint32{
	tBTIC, tMovX2X0, tDcCvauX2, tAddX2X2_4, tCmpX2X1, tBLoMinus12, tDsbIsh,
	tMovX2X0, tIcIvauX2, tAddX2X2_4, tCmpX2X1, tBLoMinus12, tDsbIsh, tIsb, tRet,
}

// region is an executable mapping of the harness: its own trampoline,
// common exit, state literal and flush routine in the first page.
type region struct {
	mem    []byte
	base   uint64
	common uint64
	tramp  uint64
	flush  uint64
	dirty  [][2]uint64 // written spans not yet flushed
}

// Offsets in a region's first page.
const (
	rgFlush  = 0
	rgLit    = 0x80
	rgCommon = 0x100
	rgTramp  = 0x800
)

// Extra flags of mapRegion.
const (
	mapFixedNoReplace = unix.MAP_FIXED_NOREPLACE // exactly at the hint, or fail
	protBTI           = 0x10                     // PROT_BTI: a BTI-guarded page
)

// mapRegion maps size bytes, at hint if the kernel agrees (hint 0: any).
// With mapFixedNoReplace it returns nil when the mapping is not exactly
// at hint; with protBTI the pages are BTI-guarded.
func mapRegion(t *testing.T, hint uint64, size int, state uint64, extra ...int) *region {
	t.Helper()
	prot, flags := unix.PROT_READ|unix.PROT_WRITE|unix.PROT_EXEC, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS
	for _, e := range extra {
		if e == protBTI {
			prot |= e
		} else {
			flags |= e
		}
	}
	// The hint as a pointer without a uintptr conversion (vet's rule).
	p, err := unix.MmapPtr(-1, 0, unsafe.Add(unsafe.Pointer(nil), hint), uintptr(size), prot, flags)
	if err != nil && flags&mapFixedNoReplace != 0 {
		return nil
	}
	if err != nil {
		t.Fatalf("mmap %#x: %v", size, err)
	}
	mem := unsafe.Slice((*byte)(p), size)
	t.Cleanup(func() { unix.MunmapPtr(p, uintptr(size)) })
	if flags&mapFixedNoReplace != 0 && uint64(uintptr(p)) != hint { // kernels before 4.17
		return nil
	}
	r := &region{mem: mem, base: uint64(uintptr(p))}
	r.common, r.tramp, r.flush = r.base+rgCommon, r.base+rgTramp, r.base+rgFlush
	r.put(r.flush, flushCode)
	binary.LittleEndian.PutUint64(mem[rgLit:], state)
	r.put(r.common, commonExit(r.common, r.base+rgLit))
	return r
}

func (r *region) contains(a uint64) bool { return a >= r.base && a-r.base < uint64(len(r.mem)) }

// put writes words at address a.
func (r *region) put(a uint64, words []uint32) {
	for i, w := range words {
		binary.LittleEndian.PutUint32(r.mem[a-r.base+4*uint64(i):], w)
	}
	r.dirty = append(r.dirty, [2]uint64{a, a + 4*uint64(len(words))})
}

// sync makes the written code visible to instruction fetch.
func (r *region) sync() {
	for _, d := range r.dirty {
		callCode(uintptr(r.flush), uintptr(d[0]), uintptr(d[1]))
	}
	r.dirty = r.dirty[:0]
}

// word reads the word at a.
func (r *region) word(a uint64) uint32 { return binary.LittleEndian.Uint32(r.mem[a-r.base:]) }

// callCode calls the machine code at fn with x0 = a0, x1 = a1 through a
// func value whose code pointer is fn (Go's internal ABI passes the first
// integer arguments in x0 and x1; nothing is callee-saved but sp, x28 and
// x29, which the harness restores).
func callCode(fn, a0, a1 uintptr) {
	fv := &struct{ pc uintptr }{fn}
	f := *(*func(uintptr, uintptr))(unsafe.Pointer(&fv))
	f(a0, a1)
}

// harness is a state block and a private stack.
type harness struct {
	state []byte
	stack []byte
}

const stackSize = 1 << 16

func newHarness(t *testing.T) *harness {
	t.Helper()
	m, err := unix.Mmap(-1, 0, 4096+stackSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(m) })
	return &harness{state: m[:4096], stack: m[4096:]}
}

func (h *harness) stateAddr() uint64 { return uint64(uintptr(unsafe.Pointer(&h.state[0]))) }
func (h *harness) stackBase() uint64 { return uint64(uintptr(unsafe.Pointer(&h.stack[0]))) }

// run enters r's trampoline, which branches to entry, with the register
// file in (in.X[28] is ignored) and the stack filled from stack; it
// returns the registers and stack as the exit stub found them and its id.
// The code written into r and the sync regions is flushed first.
func (h *harness) run(r *region, entry uint64, in *regs, stack []byte, sync ...*region) (out regs, outStack []byte, id uint16) {
	copy(h.stack, stack)
	le := binary.LittleEndian
	for i, x := range in.X {
		le.PutUint64(h.state[stX+8*i:], x)
	}
	le.PutUint64(h.state[stSP:], in.SP)
	le.PutUint64(h.state[stNZCV:], in.NZCV)
	for i, v := range in.V {
		le.PutUint64(h.state[stV+16*i:], v[0])
		le.PutUint64(h.state[stV+16*i+8:], v[1])
	}
	le.PutUint64(h.state[stOutID:], 0xdead)
	r.put(r.tramp, trampoline(r.tramp, entry))
	for _, x := range append(sync, r) {
		x.sync()
	}
	runtime.LockOSThread()
	callCode(uintptr(r.tramp), uintptr(h.stateAddr()), 0)
	runtime.UnlockOSThread()
	for i := range out.X {
		out.X[i] = le.Uint64(h.state[stOutX+8*i:])
	}
	out.SP, out.NZCV = le.Uint64(h.state[stOutSP:]), le.Uint64(h.state[stOutNZ:])
	for i := range out.V {
		out.V[i] = [2]uint64{le.Uint64(h.state[stOutV+16*i:]), le.Uint64(h.state[stOutV+16*i+8:])}
	}
	return out, append([]byte(nil), h.stack...), uint16(le.Uint64(h.state[stOutID:]))
}
