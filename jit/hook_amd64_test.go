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
	var ok, fail asm
	ok.movImm(r8, 0x1122334455667788)
	ok.store64(at(rSI, 0), r8)
	ok.movRR(rAX, rCX)
	ok.ret()
	fail.movImm(rAX, uint64(0xfffffffffffffff2)) // -EFAULT
	fail.ret()
	e, _ := agentexpr.Parse(agentexpr.MustAssemble("const8 0; ref32; end"))
	c, err := Compile(e, "amd64", Options{})
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

// emulatedReadHook is not needed on amd64, where the tests run natively.
func emulatedReadHook() []byte { return nil }
