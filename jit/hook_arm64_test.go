package jit

import (
	"testing"

	"gotpstub/agentexpr"
)

// TestReadMemHook checks that a reader function in CtxReadMem replaces the
// syscall: the hook, itself generated with the encoder, writes a fixed
// pattern and reports success (or reports EFAULT).
func TestReadMemHook(t *testing.T) {
	w := newWorld(t)
	arena := newCodeArena(t, 1<<16)
	var ok, fail a64asm
	ok.movImm(9, 0x1122334455667788) // read(x0 ctx, x1 dst, x2 src, x3 len)
	ok.str(9, 1, 0)
	ok.mov(0, 3)
	ok.retReg(xlr)
	fail.movImm(0, uint64(0xfffffffffffffff2)) // -EFAULT
	fail.retReg(xlr)
	e, _ := agentexpr.Parse(agentexpr.MustAssemble("const8 0; ref32; end"))
	c, err := Compile(e, "arm64", Options{})
	if err != nil {
		t.Fatal(err)
	}
	okFn, _ := arena.add(t, ok.buf)
	failFn, _ := arena.add(t, fail.buf)
	fn, _ := arena.add(t, c.Text)
	arena.seal(t)
	w.reset(0, 0)
	w.ctx.ReadMem = uint64(okFn)
	if v, code := w.run(fn); code != 0 || v != 0x55667788 {
		t.Errorf("with reading hook: %#x err %d, want 0x55667788", v, code)
	}
	w.reset(0, 0)
	w.ctx.ReadMem = uint64(failFn)
	if _, code := w.run(fn); code != ErrMemory {
		t.Errorf("with failing hook: err %d, want ErrMemory", code)
	}
}

// emulatedReadHook returns a reader read(ctx, dst, src, len) that stands
// in for process_vm_readv over [CtxDirectLo, CtxDirectHi), the only
// readable memory: a range that starts there is copied up to its end (a
// short count, as the system call gives at an unreadable page), one that
// starts elsewhere fails with -EFAULT, and an empty one reads 0 bytes.
func emulatedReadHook() []byte {
	var a a64asm
	a.mov(9, 0) // ctx
	a.mov(0, 3)
	empty := a.cbz(3)
	a.ldr(10, 9, CtxDirectHi, 8)
	a.ldr(9, 9, CtxDirectLo, 8)
	a.cmp(2, 9)
	fail1 := a.bcond(a64LO)
	a.cmp(2, 10)
	fail2 := a.bcond(a64HS)
	a.sub(11, 10, 2) // bytes readable from src
	a.cmp(3, 11)
	a.csel(3, 3, 11, a64LO) // min(len, readable)
	a.movImm(12, 0)
	loop := a.pos()
	a.add(14, 2, 12)
	a.ldr(13, 14, 0, 1)
	a.add(14, 1, 12)
	a.stur(13, 14, 0, 1)
	a.addImm(12, 12, 1)
	a.cmp(12, 3)
	a.patch(a.bcond(a64LO), loop)
	a.mov(0, 3)
	a.here(empty)
	a.retReg(xlr)
	a.here(fail1)
	a.here(fail2)
	a.movImm(0, uint64(0xfffffffffffffff2))
	a.retReg(xlr)
	return a.buf
}
