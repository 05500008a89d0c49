//go:build amd64 || arm64

package jit

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"gotpstub/agentexpr"
)

// Options.ZeroUnreadable is what the trace engine's jump pads use: the
// stub treats memory an expression cannot read as zero. It is tested like
// the default semantics, against agentexpr.Eval with a memory that reads
// unreadable bytes as zero and a collector that records readable prefixes
// (the trace engine's hitState behaves the same way).

// zeroEnv is interpEnv with the ZeroUnreadable semantics.
type zeroEnv struct{ *interpEnv }

// readablePrefix copies the readable prefix of [addr, addr+len(buf)) of
// this process into buf and returns its length: what process_vm_readv
// reads, or under qemu-user what the emulated reader (w.readHook) reads,
// the part of the range in the data pages when it starts there.
func (w *world) readablePrefix(addr uint64, buf []byte) int {
	if len(buf) == 0 {
		return 0
	}
	if w.readHook != 0 {
		if addr < w.dataLo || addr >= w.dataHi {
			return 0
		}
		return copy(buf, w.data[addr-w.dataLo:])
	}
	n, err := unix.ProcessVMReadv(os.Getpid(), []unix.Iovec{{Base: &buf[0], Len: uint64(len(buf))}},
		[]unix.RemoteIovec{{Base: uintptr(addr), Len: len(buf)}}, 0)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// ReadMemory reads unreadable bytes as zero and never fails.
func (e zeroEnv) ReadMemory(addr uint64, buf []byte) error {
	n := e.w.readablePrefix(addr, buf)
	clear(buf[n:])
	return nil
}

// CollectMemory records the readable prefix in blocks of at most 65535
// bytes and stops at the first unreadable byte.
func (e zeroEnv) CollectMemory(addr, size uint64) error {
	for size > 0 {
		n := min(size, 65535)
		buf := make([]byte, n)
		got := uint64(e.w.readablePrefix(addr, buf))
		if got == 0 {
			return nil
		}
		if len(e.frame)+11+int(got) > e.cap {
			return errors.New("frame full")
		}
		e.frame = append(e.frame, BlockMemory)
		e.frame = binary.LittleEndian.AppendUint64(e.frame, addr)
		e.frame = binary.LittleEndian.AppendUint16(e.frame, uint16(got))
		e.frame = append(e.frame, buf[:got]...)
		if got < n {
			return nil
		}
		addr += n
		size -= n
	}
	return nil
}

// zeroCase is a hand-written ZeroUnreadable case: src run with a frame of
// frameCap bytes gives value and frame (when err is ErrNone) or err.
type zeroCase struct {
	name, src string
	frameCap  int
	value     uint64
	frame     string
	err       uint64
}

// zeroCases are the cases, whose results follow from the data pages'
// layout: readable [lo, hi), unreadable pages on both sides (guard is in
// the one before), no NUL but at lo+100.
func zeroCases(w *world) []zeroCase {
	lo, hi, guard := w.dataLo, w.dataHi, w.guardLo+16
	at := func(addr uint64, rest string) string { return fmt.Sprintf("const64 %d; %s", addr, rest) }
	last := func(n int) uint64 { // the last n data bytes, little-endian
		var v uint64
		for i := n - 1; i >= 0; i-- {
			v = v<<8 | uint64(w.data[len(w.data)-n+i])
		}
		return v
	}
	mblock := func(addr uint64, n int) string {
		b := []byte{BlockMemory}
		b = binary.LittleEndian.AppendUint64(b, addr)
		b = binary.LittleEndian.AppendUint16(b, uint16(n))
		return string(append(b, w.data[addr-lo:addr-lo+uint64(n)]...))
	}
	return []zeroCase{
		{"ref32 guard", at(guard, "ref32; end"), 100, 0, "", ErrNone},
		{"ref64 null", "const8 0; ref64; end", 100, 0, "", ErrNone},
		{"ref64 straddles 3", at(hi-3, "ref64; end"), 100, last(3), "", ErrNone},
		{"ref64 straddles 7", at(hi-7, "ref64; end"), 100, last(7), "", ErrNone},
		{"ref64 last", at(hi-8, "ref64; end"), 100, last(8), "", ErrNone},
		{"ref32 straddles", at(hi-2, "ref32; end"), 100, last(2), "", ErrNone},
		{"ref16 straddles", at(hi-1, "ref16; end"), 100, last(1), "", ErrNone},
		{"ref8 last", at(hi-1, "ref8; end"), 100, last(1), "", ErrNone},
		// A full read first leaves its bytes where the partial one reads.
		{"ref64 straddles after a full read", at(hi-3, at(lo, "ref64; pop; ref64; end")), 100, last(3), "", ErrNone},
		{"ref32 guard after a full read", at(guard, at(lo, "ref32; pop; ref32; end")), 100, 0, "", ErrNone},
		{"ref8 past end", at(hi, "ref8; end"), 100, 0, "", ErrNone},
		{"ref32 unreadable start", at(lo-2, "ref32; end"), 100, 0, "", ErrNone},
		{"trace prefix", at(hi-5, "const8 16; trace; const8 7; end"), 100, 7, mblock(hi-5, 5), ErrNone},
		{"trace_quick prefix", at(hi-5, "trace_quick 16; end"), 100, hi - 5, mblock(hi-5, 5), ErrNone},
		{"trace16 prefix", at(hi-5, "trace16 300; end"), 100, hi - 5, mblock(hi-5, 5), ErrNone},
		{"trace guard", at(guard, "const8 16; trace; const8 1; end"), 100, 1, "", ErrNone},
		{"trace unreadable start", at(lo-4, "const8 16; trace; const8 1; end"), 100, 1, "", ErrNone},
		// The whole chunk (11+16) does not fit in 20 bytes, its readable
		// prefix (11+5) does.
		{"prefix fits", at(hi-5, "const8 16; trace; const8 2; end"), 20, 2, mblock(hi-5, 5), ErrNone},
		{"prefix full", at(hi-5, "const8 16; trace; const8 2; end"), 15, 0, "", ErrFrameFull},
		{"guard full", at(guard, "const8 16; trace; const8 3; end"), 5, 3, "", ErrNone},
		{"unreadable start full", at(lo-4, "const8 16; trace; const8 3; end"), 5, 3, "", ErrNone},
		{"trace after prefix", at(hi-5, fmt.Sprintf("const8 16; trace; const64 %d; trace_quick 4; end", lo)), 100, lo,
			mblock(hi-5, 5) + mblock(lo, 4), ErrNone},
		{"tracenz unreadable", at(hi-6, "const8 16; tracenz; const8 4; end"), 100, 4, mblock(hi-6, 6), ErrNone},
		{"tracenz limit", at(hi-6, "const8 3; tracenz; const8 4; end"), 100, 4, mblock(hi-6, 3), ErrNone},
		{"tracenz guard", at(guard, "const8 16; tracenz; const8 5; end"), 100, 5, "", ErrNone},
		{"tracenz full", at(hi-6, "const8 16; tracenz; const8 5; end"), 16, 0, "", ErrFrameFull},
		{"tracenz NUL", at(lo+96, "const8 16; tracenz; const8 6; end"), 100, 6, mblock(lo+96, 5), ErrNone},
		{"trace to end", at(lo+8, "const16 0x2000; trace; const8 6; end"), 1 << 14, 6,
			mblock(lo+8, len(w.data)-8), ErrNone},
		// The 65535-byte chunk does not fit, the 8192 readable bytes do.
		{"long prefix fits", at(lo, "const32 70000; trace; const8 8; end"), 1 << 14, 8,
			mblock(lo, len(w.data)), ErrNone},
		{"long prefix full", at(lo, "const32 70000; trace; const8 8; end"), 8000, 0, "", ErrFrameFull},
	}
}

// TestZeroUnreadableSemantics runs the hand-written cases, with and
// without DirectLoads, and checks them against the reference too.
func TestZeroUnreadableSemantics(t *testing.T) {
	w := newWorld(t)
	arena := newCodeArena(t, 1<<16)
	for i := range w.data {
		w.data[i] = byte(i%251 + 1)
	}
	w.data[100] = 0
	for _, tc := range zeroCases(w) {
		e, err := agentexpr.Parse(agentexpr.MustAssemble(tc.src))
		if err != nil {
			t.Fatal(err)
		}
		for _, direct := range []bool{false, true} {
			c, err := Compile(e, testArch, Options{ZeroUnreadable: true, DirectLoads: direct})
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if c.Fallback != "" {
				t.Fatalf("%s: falls back: %s", tc.name, c.Fallback)
			}
			arena.reset()
			fn, _ := arena.add(t, c.Text)
			arena.seal(t)
			w.reset(4, tc.frameCap)
			if direct {
				w.ctx.DirectLo, w.ctx.DirectHi = w.dataLo, w.dataHi
			}
			v, code := w.run(fn)
			if code != tc.err || code == ErrNone && (v != tc.value || string(w.jitFrame()) != tc.frame) {
				t.Errorf("%s (direct %v): value %#x err %d frame %.40x (%d bytes); want %#x %d %.40x (%d bytes)", tc.name, direct, v, code, w.jitFrame(), len(w.jitFrame()), tc.value, tc.err, tc.frame, len(tc.frame))
			}
			ie := zeroEnv{&interpEnv{w: w, tsvs: make([]int64, 4), cap: tc.frameCap}}
			iv, ierr := agentexpr.Eval(e, &agentexpr.Env{Mem: ie, Regs: ie, TSV: ie, Collect: ie})
			if fmt.Sprint(interpClass(ierr)) != fmt.Sprint(errClass(code)) || ierr == nil && (iv != v || string(ie.frame) != string(w.jitFrame())) {
				t.Errorf("%s: reference %#x %v frame %.40x (%d bytes), jit %#x %d frame %.40x (%d bytes)", tc.name, iv, ierr, ie.frame, len(ie.frame), v, code, w.jitFrame(), len(w.jitFrame()))
			}
		}
	}
}

// TestZeroUnreadableDifferential compares the ZeroUnreadable code with the
// reference on random expressions (the generator of diff_test.go, which
// dereferences and collects around the data page's end and in guard
// pages).
func TestZeroUnreadableDifferential(t *testing.T) {
	n := 30000
	if !processVMReadvWorks() {
		n = 10000 // under qemu-user emulation every run is ~100x slower
	}
	if testing.Short() {
		n = 3000
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 2))
	w := newWorld(t)
	arena := newCodeArena(t, 1<<22)
	g := &progGen{r: r, w: w}
	deadline := time.Now().Add(15 * time.Second)
	classes := map[string]int{}
	for done := 0; done < n && time.Now().Before(deadline); {
		arena.reset()
		type job struct {
			e    *agentexpr.Expr
			fn   uintptr
			opts Options
		}
		var jobs []job
		for len(jobs) < 2000 && done+len(jobs) < n {
			e, err := agentexpr.Parse(g.program())
			if err != nil {
				t.Fatal(err)
			}
			opts := Options{ZeroUnreadable: true, NoFuse: r.IntN(4) == 0, DirectLoads: r.IntN(2) == 0}
			c, err := Compile(e, testArch, opts)
			if err != nil {
				t.Fatalf("compile %x: %v", e.Code, err)
			}
			if c.Fallback != "" {
				done++
				continue
			}
			fn, ok := arena.add(t, c.Text)
			if !ok {
				break
			}
			jobs = append(jobs, job{e, fn, opts})
		}
		arena.seal(t)
		for k, j := range jobs {
			ntsv, frameCap, tsvs := randomizeWorld(r, w, k%100 == 0)
			ie := zeroEnv{&interpEnv{w: w, tsvs: append([]int64(nil), tsvs...), cap: frameCap}}
			iv, ierr := agentexpr.Eval(j.e, &agentexpr.Env{Mem: ie, Regs: ie, TSV: ie, Collect: ie})
			w.reset(ntsv, frameCap)
			copy(w.tsvs, tsvs)
			if j.opts.DirectLoads {
				w.ctx.DirectLo, w.ctx.DirectHi = w.dataLo, w.dataHi
			}
			jv, jcode := w.run(j.fn)
			judgeRun(t, w, runOutcome{e: j.e, opts: j.opts, zero: true,
				iv: iv, ierr: ierr, refFrame: ie.frame, refTSVs: ie.tsvs[:ntsv], jv: jv, jcode: jcode}, classes)
		}
		done += len(jobs)
	}
	t.Logf("outcome classes %v", classes)
	if classes["ok"] < n/10 {
		t.Errorf("only %d runs succeeded", classes["ok"])
	}
}

// TestZeroUnreadableArm64Compiles: the arm64 backend implements
// ZeroUnreadable (with FaultLoads too, which it ignores, as fast
// tracepoints compile), so nothing falls back for it.
func TestZeroUnreadableArm64Compiles(t *testing.T) {
	for _, src := range []string{"const8 0; ref8; end", "reg 0; ref64; reg 1; ref16; add; end",
		"reg 0; const8 64; trace; reg 1; trace_quick 8; trace16 300; const8 32; tracenz; const8 1; end"} {
		e, err := agentexpr.Parse(agentexpr.MustAssemble(src))
		if err != nil {
			t.Fatal(err)
		}
		for _, opts := range []Options{{ZeroUnreadable: true}, {ZeroUnreadable: true, FaultLoads: true},
			{ZeroUnreadable: true, DirectLoads: true}} {
			c, err := Compile(e, "arm64", opts)
			if err != nil {
				t.Fatalf("%s on arm64 with %+v: %v", src, opts, err)
			}
			if c.Fallback != "" || len(c.Text) == 0 || len(c.Faults) != 0 {
				t.Errorf("%s on arm64 with %+v: fallback %q, %d bytes, %d faults", src, opts, c.Fallback, len(c.Text), len(c.Faults))
			}
		}
	}
}

// runOutcome is one expression's reference result (iv, ierr, its frame
// and trace state variables) and JIT result (jv, jcode; the frame and
// variables are the world's), with what describes it in a failure.
type runOutcome struct {
	e        *agentexpr.Expr
	opts     Options
	zero     bool // under ZeroUnreadable: ErrMemory may not occur
	iv       uint64
	ierr     error
	refFrame []byte
	refTSVs  []int64
	jv       uint64
	jcode    uint64
}

// judgeRun fails the test when the JIT's run differs from the
// reference's — error class, value, frame, trace state variables — and
// counts the outcome's class.
func judgeRun(t *testing.T, w *world, o runOutcome, classes map[string]int) {
	t.Helper()
	code := o.e.Code
	if o.zero && o.jcode == ErrMemory {
		t.Fatalf("ErrMemory under ZeroUnreadable on %x:\n%s", code, disasm(o.e))
	}
	ic, jc := interpClass(o.ierr), errClass(o.jcode)
	if !errors.Is(ic, jc) && !(ic == nil && jc == nil) {
		t.Fatalf("error class differs on %x (%+v):\n%s\nreference: %v\njit: code %d", code, o.opts, disasm(o.e), o.ierr, o.jcode)
	}
	if ic != nil {
		classes[ic.Error()]++
		return
	}
	classes["ok"]++
	if o.iv != o.jv {
		t.Fatalf("value differs on %x (%+v):\n%s\nreference %#x, jit %#x", code, o.opts, disasm(o.e), o.iv, o.jv)
	}
	if !bytes.Equal(o.refFrame, w.jitFrame()) {
		t.Fatalf("frame differs on %x (%+v):\n%s\nreference % x\njit       % x", code, o.opts, disasm(o.e), o.refFrame, w.jitFrame())
	}
	for i, v := range o.refTSVs {
		if v != w.tsvs[i] {
			t.Fatalf("tsv %d differs on %x:\n%s", i, code, disasm(o.e))
		}
	}
}
