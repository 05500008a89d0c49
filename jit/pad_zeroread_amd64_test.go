package jit

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
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
// this process into buf and returns its length.
func readablePrefix(addr uint64, buf []byte) int {
	if len(buf) == 0 {
		return 0
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
	n := readablePrefix(addr, buf)
	clear(buf[n:])
	return nil
}

// CollectMemory records the readable prefix in blocks of at most 65535
// bytes and stops at the first unreadable byte.
func (e zeroEnv) CollectMemory(addr, size uint64) error {
	for size > 0 {
		n := min(size, 65535)
		buf := make([]byte, n)
		got := uint64(readablePrefix(addr, buf))
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

// TestZeroUnreadableSemantics runs hand-written cases whose results are
// known from the data page layout, and checks them against the reference.
func TestZeroUnreadableSemantics(t *testing.T) {
	if !processVMReadvWorks() {
		t.Skip("needs process_vm_readv")
	}
	w := newWorld(t)
	arena := newCodeArena(t, 1<<16)
	for i := range w.data {
		w.data[i] = byte(i%251 + 1) // no NUL
	}
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
		return string(append(b, w.data[addr-w.dataLo:addr-w.dataLo+uint64(n)]...))
	}
	hi := w.dataHi
	cases := []struct {
		src      string
		frameCap int
		value    uint64
		frame    string
		err      uint64
	}{
		{"const64 GUARD; ref32; end", 100, 0, "", ErrNone},
		{"const8 0; ref64; end", 100, 0, "", ErrNone},
		{fmt.Sprintf("const64 %d; ref64; end", hi-3), 100, last(3), "", ErrNone},
		{fmt.Sprintf("const64 %d; ref16; end", hi-1), 100, last(1), "", ErrNone},
		{fmt.Sprintf("const64 %d; ref8; end", hi-1), 100, last(1), "", ErrNone},
		{fmt.Sprintf("const64 %d; const8 16; trace; const8 7; end", hi-5), 100, 7, mblock(hi-5, 5), ErrNone},
		{fmt.Sprintf("const64 %d; trace_quick 16; end", hi-5), 100, hi - 5, mblock(hi-5, 5), ErrNone},
		{"const64 GUARD; const8 16; trace; const8 1; end", 100, 1, "", ErrNone},
		// The whole chunk (11+16) does not fit in 20 bytes, its readable
		// prefix (11+5) does.
		{fmt.Sprintf("const64 %d; const8 16; trace; const8 2; end", hi-5), 20, 2, mblock(hi-5, 5), ErrNone},
		{fmt.Sprintf("const64 %d; const8 16; trace; const8 2; end", hi-5), 15, 0, "", ErrFrameFull},
		{"const64 GUARD; const8 16; trace; const8 3; end", 5, 3, "", ErrNone},
		{fmt.Sprintf("const64 %d; const8 16; tracenz; const8 4; end", hi-6), 100, 4, mblock(hi-6, 6), ErrNone},
		{"const64 GUARD; const8 16; tracenz; const8 5; end", 100, 5, "", ErrNone},
		{fmt.Sprintf("const64 %d; const16 0x2000; trace; const8 6; end", w.dataLo+8), 1 << 14, 6,
			mblock(w.dataLo+8, len(w.data)-8), ErrNone},
	}
	for _, tc := range cases {
		src := strings.ReplaceAll(tc.src, "GUARD", fmt.Sprint(w.guardLo+16))
		e, err := agentexpr.Parse(agentexpr.MustAssemble(src))
		if err != nil {
			t.Fatal(err)
		}
		for _, direct := range []bool{false, true} {
			c, err := Compile(e, "amd64", Options{ZeroUnreadable: true, DirectLoads: direct})
			if err != nil || c.Fallback != "" {
				t.Fatalf("%s: %v %s", src, err, c.Fallback)
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
				t.Errorf("%s (direct %v): value %#x err %d frame %.40x (%d bytes); want %#x %d %.40x (%d bytes)", src, direct, v, code, w.jitFrame(), len(w.jitFrame()), tc.value, tc.err, tc.frame, len(tc.frame))
			}
			ie := zeroEnv{&interpEnv{w: w, tsvs: make([]int64, 4), cap: tc.frameCap}}
			iv, ierr := agentexpr.Eval(e, &agentexpr.Env{Mem: ie, Regs: ie, TSV: ie, Collect: ie})
			if fmt.Sprint(interpClass(ierr)) != fmt.Sprint(errClass(code)) || ierr == nil && (iv != v || string(ie.frame) != string(w.jitFrame())) {
				t.Errorf("%s: reference %#x %v frame %.40x (%d bytes), jit %#x %d frame %.40x (%d bytes)", src, iv, ierr, ie.frame, len(ie.frame), v, code, w.jitFrame(), len(w.jitFrame()))
			}
		}
	}
}

// TestZeroUnreadableDifferential compares the ZeroUnreadable code with the
// reference on random expressions (the generator of diff_test.go, which
// dereferences and collects around the data page's end and in guard
// pages).
func TestZeroUnreadableDifferential(t *testing.T) {
	if !processVMReadvWorks() {
		t.Skip("needs process_vm_readv")
	}
	n := 30000
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
			c, err := Compile(e, "amd64", opts)
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
			if jcode == ErrMemory {
				t.Fatalf("ErrMemory under ZeroUnreadable on %x:\n%s", j.e.Code, disasm(j.e))
			}
			ic, jc := interpClass(ierr), errClass(jcode)
			if !errors.Is(ic, jc) && !(ic == nil && jc == nil) {
				t.Fatalf("error class differs on %x (%+v):\n%s\nreference: %v\njit: code %d", j.e.Code, j.opts, disasm(j.e), ierr, jcode)
			}
			if ic != nil {
				classes[ic.Error()]++
				continue
			}
			classes["ok"]++
			if iv != jv {
				t.Fatalf("value differs on %x (%+v):\n%s\nreference %#x, jit %#x", j.e.Code, j.opts, disasm(j.e), iv, jv)
			}
			if !bytes.Equal(ie.frame, w.jitFrame()) {
				t.Fatalf("frame differs on %x:\n%s\nreference % x\njit       % x", j.e.Code, disasm(j.e), ie.frame, w.jitFrame())
			}
			for i := range ntsv {
				if ie.tsvs[i] != w.tsvs[i] {
					t.Fatalf("tsv %d differs on %x:\n%s", i, j.e.Code, disasm(j.e))
				}
			}
		}
		done += len(jobs)
	}
	t.Logf("outcome classes %v", classes)
	if classes["ok"] < n/10 {
		t.Errorf("only %d runs succeeded", classes["ok"])
	}
}

// TestZeroUnreadableArm64Falls: the arm64 backend does not implement it.
func TestZeroUnreadableArm64Falls(t *testing.T) {
	e, _ := agentexpr.Parse(agentexpr.MustAssemble("const8 0; ref8; end"))
	c, err := Compile(e, "arm64", Options{ZeroUnreadable: true})
	if err != nil || c.Fallback == "" {
		t.Errorf("arm64 with ZeroUnreadable: %v, fallback %q", err, c.Fallback)
	}
}
