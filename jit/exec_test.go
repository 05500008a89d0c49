//go:build amd64 || arm64

package jit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"gotpstub/agentexpr"
)

const pageSize = 4096

// testArch is the backend under test: the machine the tests run on.
const testArch = runtime.GOARCH

// testPadRegs is the number of pad slots of testArch.
var testPadRegs = map[string]int{"amd64": PadRegs, "arm64": PadRegsARM64}[testArch]

// codeArena holds compiled functions in memory that is writable while
// being filled and executable (not writable) while they run.
type codeArena struct {
	mem  []byte
	used int
	exec bool
}

func newCodeArena(t testing.TB, size int) *codeArena {
	t.Helper()
	m, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatalf("mmap code: %v", err)
	}
	t.Cleanup(func() { unix.Munmap(m) })
	return &codeArena{mem: m}
}

// add copies code in and returns its address, or ok=false when full.
func (c *codeArena) add(t testing.TB, code []byte) (uintptr, bool) {
	if c.exec {
		if err := unix.Mprotect(c.mem, unix.PROT_READ|unix.PROT_WRITE); err != nil {
			t.Fatalf("mprotect RW: %v", err)
		}
		c.exec = false
	}
	start := (c.used + 15) &^ 15
	if start+len(code) > len(c.mem) {
		return 0, false
	}
	copy(c.mem[start:], code)
	c.used = start + len(code)
	return uintptr(unsafe.Pointer(&c.mem[start])), true
}

func (c *codeArena) reset() { c.used = 0 }

// seal makes the arena executable.
func (c *codeArena) seal(t testing.TB) {
	if !c.exec {
		if err := unix.Mprotect(c.mem, unix.PROT_READ|unix.PROT_EXEC); err != nil {
			t.Fatalf("mprotect RX: %v", err)
		}
		c.exec = true
	}
}

// ctxBlock mirrors the Ctx* layout.
type ctxBlock struct {
	Err, Result, TSVs, NumTSVs, FrameBuf, FrameCap, FrameUsed, Pid, DirectLo, DirectHi, ReadMem, JumpLimit uint64
}

// world is the memory the generated code and the interpreter both see:
// one mmap'd arena with a readable data page between two PROT_NONE pages,
// the register pad, the TSV array, the frame buffer, the ctx block and a
// machine stack with a guard page.
type world struct {
	arena                []byte
	data                 []byte // readable test data (dataPages pages)
	dataLo, dataHi       uint64
	guardLo, guardHi     uint64 // addresses in the PROT_NONE pages
	regs                 []uint64
	tsvs                 []int64
	frame                []byte
	ctx                  *ctxBlock
	stackTop             uintptr
	regsAddr, ctxAddr    uintptr
	numTSVs, frameCapCfg int
	// readHook, when nonzero, is installed at CtxReadMem: under qemu-user,
	// which does not implement process_vm_readv, a generated reader that
	// copies from the data pages (the part of the range there, as the
	// system call stops at the guard page) and fails elsewhere stands in
	// for it.
	readHook uintptr
}

// processVMReadvWorks reports whether process_vm_readv is implemented
// (qemu-user answers ENOSYS).
func processVMReadvWorks() bool {
	var src, dst [8]byte
	_, err := unix.ProcessVMReadv(os.Getpid(), []unix.Iovec{{Base: &dst[0], Len: 8}},
		[]unix.RemoteIovec{{Base: uintptr(unsafe.Pointer(&src[0])), Len: 8}}, 0)
	return err != unix.ENOSYS
}

const (
	dataPages  = 2
	frameBytes = 3 * pageSize
	stackBytes = 16 * pageSize
)

func newWorld(t testing.TB) *world {
	t.Helper()
	// Layout (pages): guard | data*dataPages | guard | regs+ctx+tsvs | frame*3 | stack guard | stack*16
	total := (1 + dataPages + 1 + 1 + 3 + 1 + 16) * pageSize
	m, err := unix.Mmap(-1, 0, total, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatalf("mmap world: %v", err)
	}
	t.Cleanup(func() { unix.Munmap(m) })
	w := &world{arena: m}
	p := 0
	page := func(n int) []byte { s := m[p*pageSize : (p+n)*pageSize]; p += n; return s }
	g1 := page(1)
	w.data = page(dataPages)
	g2 := page(1)
	misc := page(1)
	w.frame = page(3)
	g3 := page(1)
	stack := page(16)
	for _, g := range [][]byte{g1, g2, g3} {
		if err := unix.Mprotect(g, unix.PROT_NONE); err != nil {
			t.Fatalf("mprotect guard: %v", err)
		}
	}
	w.dataLo = uint64(uintptr(unsafe.Pointer(&w.data[0])))
	w.dataHi = w.dataLo + uint64(len(w.data))
	w.guardLo = uint64(uintptr(unsafe.Pointer(&g1[0])))
	w.guardHi = uint64(uintptr(unsafe.Pointer(&g2[0])))
	w.regs = unsafe.Slice((*uint64)(unsafe.Pointer(&misc[0])), testPadRegs)
	w.ctx = (*ctxBlock)(unsafe.Pointer(&misc[1024]))
	w.tsvs = unsafe.Slice((*int64)(unsafe.Pointer(&misc[2048])), 64)
	w.regsAddr = uintptr(unsafe.Pointer(&misc[0]))
	w.ctxAddr = uintptr(unsafe.Pointer(&misc[1024]))
	w.stackTop = uintptr(unsafe.Pointer(&stack[len(stack)-1])) + 1
	if !processVMReadvWorks() {
		t.Logf("process_vm_readv is not implemented (qemu-user?): reads go through a test hook")
		hooks := newCodeArena(t, pageSize)
		w.readHook, _ = hooks.add(t, emulatedReadHook())
		hooks.seal(t)
	}
	return w
}

// reset prepares the ctx for one run with numTSVs variables and a frame
// capacity of frameCap bytes.
func (w *world) reset(numTSVs, frameCap int) {
	*w.ctx = ctxBlock{
		TSVs:     uint64(uintptr(unsafe.Pointer(&w.tsvs[0]))),
		NumTSVs:  uint64(numTSVs),
		FrameBuf: uint64(uintptr(unsafe.Pointer(&w.frame[0]))),
		FrameCap: uint64(frameCap),
		Pid:      uint64(os.Getpid()),
	}
	if w.readHook != 0 {
		w.ctx.ReadMem = uint64(w.readHook)
		w.ctx.DirectLo, w.ctx.DirectHi = w.dataLo, w.dataHi
	}
	w.numTSVs, w.frameCapCfg = numTSVs, frameCap
}

// run calls the function at fn.
func (w *world) run(fn uintptr) (uint64, uint64) {
	v := callJIT(fn, w.regsAddr, w.ctxAddr, w.stackTop)
	return v, w.ctx.Err
}

// errClass maps a ctx error code to the agentexpr error class.
func errClass(code uint64) error {
	switch code {
	case ErrNone:
		return nil
	case ErrMemory:
		return agentexpr.ErrUnreadable
	case ErrDivZero:
		return agentexpr.ErrDivideByZero
	case ErrFrameFull, ErrCollect:
		return agentexpr.ErrCollect
	case ErrTSV:
		return agentexpr.ErrUnknownTSV
	case ErrSteps:
		return agentexpr.ErrStepLimit
	}
	return fmt.Errorf("unknown jit error code %d", code)
}

// interpClass reduces an Eval error to its class.
func interpClass(err error) error {
	if err == nil {
		return nil
	}
	for _, c := range []error{agentexpr.ErrUnreadable, agentexpr.ErrDivideByZero, agentexpr.ErrCollect,
		agentexpr.ErrUnknownTSV, agentexpr.ErrStepLimit} {
		if errors.Is(err, c) {
			return c
		}
	}
	return err
}

// interpEnv implements the agentexpr interfaces over the same world, with
// its own copies of the TSVs and frame so the two runs can be compared.
type interpEnv struct {
	w     *world
	tsvs  []int64
	frame []byte
	cap   int
}

func (e *interpEnv) ReadMemory(addr uint64, buf []byte) error {
	n := uint64(len(buf))
	if addr >= e.w.dataLo && addr <= e.w.dataHi && n <= e.w.dataHi-addr {
		copy(buf, e.w.data[addr-e.w.dataLo:])
		return nil
	}
	// Elsewhere, what this process really has mapped (the test binary's
	// own image, for instance) is what the generated code will see.
	if n == 0 {
		return nil
	}
	got, err := unix.ProcessVMReadv(os.Getpid(),
		[]unix.Iovec{{Base: &buf[0], Len: n}},
		[]unix.RemoteIovec{{Base: uintptr(addr), Len: int(n)}}, 0)
	if err != nil || uint64(got) != n {
		return fmt.Errorf("no memory at %#x: %v", addr, err)
	}
	return nil
}

func (e *interpEnv) Register(num int) (uint64, error) {
	if num < 0 || num >= len(e.w.regs) {
		return 0, fmt.Errorf("no register %d", num)
	}
	return e.w.regs[num], nil
}

func (e *interpEnv) GetTSV(num int) (int64, bool) {
	if num < 0 || num >= len(e.tsvs) {
		return 0, false
	}
	return e.tsvs[num], true
}

func (e *interpEnv) SetTSV(num int, v int64) {
	if num >= 0 && num < len(e.tsvs) {
		e.tsvs[num] = v
	}
}

// CollectMemory appends 'M' blocks of at most 65535 bytes, as the JIT does.
func (e *interpEnv) CollectMemory(addr, size uint64) error {
	for size > 0 {
		n := min(size, 65535)
		buf := make([]byte, n)
		if err := e.ReadMemory(addr, buf); err != nil {
			return err
		}
		if len(e.frame)+11+int(n) > e.cap {
			return errors.New("frame full")
		}
		e.frame = append(e.frame, BlockMemory)
		e.frame = binary.LittleEndian.AppendUint64(e.frame, addr)
		e.frame = binary.LittleEndian.AppendUint16(e.frame, uint16(n))
		e.frame = append(e.frame, buf...)
		addr += n
		size -= n
	}
	return nil
}

func (e *interpEnv) CollectTSV(num int) error {
	v, ok := e.GetTSV(num)
	if !ok {
		return fmt.Errorf("no variable %d", num)
	}
	if len(e.frame)+13 > e.cap {
		return errors.New("frame full")
	}
	e.frame = append(e.frame, BlockTSV)
	e.frame = binary.LittleEndian.AppendUint32(e.frame, uint32(num))
	e.frame = binary.LittleEndian.AppendUint64(e.frame, uint64(v))
	return nil
}

// jitFrame returns the bytes the generated code appended.
func (w *world) jitFrame() []byte { return w.frame[:w.ctx.FrameUsed] }
