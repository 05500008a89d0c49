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

// emulatedReadHook returns a reader read(ctx, dst, src, len) that copies
// from [CtxDirectLo, CtxDirectHi) and returns -EFAULT for anything else.
func emulatedReadHook() []byte {
	var a a64asm
	a.ldr(9, 0, CtxDirectLo, 8)
	a.ldr(10, 0, CtxDirectHi, 8)
	a.cmp(2, 9)
	fail1 := a.bcond(a64LO)
	a.add(11, 2, 3)
	a.cmp(11, 2)
	fail2 := a.bcond(a64LO)
	a.cmp(11, 10)
	fail3 := a.bcond(a64HI)
	a.movImm(12, 0)
	loop := a.pos()
	a.cmp(12, 3)
	done := a.bcond(a64HS)
	a.add(14, 2, 12)
	a.ldr(13, 14, 0, 1)
	a.add(14, 1, 12)
	a.stur(13, 14, 0, 1)
	a.addImm(12, 12, 1)
	a.patch(a.b(), loop)
	a.here(done)
	a.mov(0, 3)
	a.retReg(xlr)
	a.here(fail1)
	a.here(fail2)
	a.here(fail3)
	a.movImm(0, uint64(0xfffffffffffffff2))
	a.retReg(xlr)
	return a.buf
}
