package tracing

import (
	"encoding/binary"
	"encoding/hex"
	"slices"
	"strings"
	"testing"

	"gotpstub/frames"
	"gotpstub/tdesc"
)

// syncInstaller is a fakeInstaller whose tracepoints collect elsewhere: the
// queued hits reach the engine on Sync, as fasttp's do.
type syncInstaller struct {
	*fakeInstaller
	e     *Engine
	queue []func()
	syncs int
}

func (s *syncInstaller) Sync() {
	s.syncs++
	q := s.queue
	s.queue = nil
	for _, f := range q {
		f()
	}
}

// mBlock is a jit-format memory block.
func mBlock(addr uint64, data []byte) []byte {
	b := []byte{'M'}
	b = binary.LittleEndian.AppendUint64(b, addr)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(data)))
	return append(b, data...)
}

// vBlock is a jit-format trace state variable block.
func vBlock(num uint32, v int64) []byte {
	b := []byte{'V'}
	b = binary.LittleEndian.AppendUint32(b, num)
	return binary.LittleEndian.AppendUint64(b, uint64(v))
}

func TestFastHitsReachTheEngineOnSync(t *testing.T) {
	p := newProgram()
	inst := &syncInstaller{fakeInstaller: newFakeInstaller()}
	e := NewEngine(Config{Layout: p.layout, Live: p.mem, Installer: inst})
	inst.e = e
	if strings.Contains(strings.Join(e.Features(), ";"), "FastTracepoints") {
		t.Fatal("FastTracepoints announced before SetFastTracepoints")
	}
	e.SetFastTracepoints(true)
	if !strings.Contains(strings.Join(e.Features(), ";"), "FastTracepoints+") {
		t.Fatal("FastTracepoints not announced after SetFastTracepoints(true)")
	}
	mustOK(t, e, "QTinit", "QTDP:1:401000:E:0:2:F5-", "QTDP:-1:401000:R"+allRegs, "QTDV:2:0:0:6e", "QTStart")
	tp := findTracepoint(t, e, 1)
	regs := make([]uint64, 24)
	for i := range regs {
		regs[i] = 0x1000 + uint64(i)
	}
	regs[regRIP] = 0x401000
	for i := 0; i < 3; i++ { // the third is past the passcount: dropped
		v := int64(i)
		inst.queue = append(inst.queue, func() {
			blocks := append(mBlock(0x600000+uint64(v), []byte{byte(v), 0xee}), vBlock(2, 40+v)...)
			if err := e.FastHit(tp, regs, blocks); err != nil {
				t.Errorf("FastHit: %v", err)
			}
		})
	}
	st := send(t, e, "qTStatus")
	if inst.syncs == 0 {
		t.Fatal("qTStatus did not sync the installer")
	}
	if got := statusField(t, st, "tframes"); got != "2" {
		t.Fatalf("tframes = %s, want 2 (passcount 2)", got)
	}
	if !strings.Contains(st, "tpasscount:1") {
		t.Fatalf("status %q: want a stop by passcount of tracepoint 1", st)
	}
	if got := send(t, e, "qTP:1:401000"); !strings.HasPrefix(got, "V2:") || got == "V2:0" {
		t.Fatalf("qTP = %q, want 2 hits and some bytes", got)
	}
	if r := send(t, e, "QTFrame:1"); r != "F1T1" {
		t.Fatalf("QTFrame:1 = %q", r)
	}
	regsNow, ok := e.FrameRegisters()
	if !ok {
		t.Fatal("frame 1 has no registers")
	}
	if got := regsNow.Uint64(regRIP); got != 0x401000 {
		t.Fatalf("frame rip = %#x", got)
	}
	if got := regsNow.Uint64(regRBP); got != 0x1000+regRBP {
		t.Fatalf("frame rbp = %#x, want %#x", got, 0x1000+regRBP)
	}
	buf := make([]byte, 2)
	if n, err := e.FrameMemory(0x600001, buf); err != nil || n != 2 || hex.EncodeToString(buf) != "01ee" {
		t.Fatalf("frame memory = %x (%d, %v), want 01ee", buf, n, err)
	}
	if r := send(t, e, "qTV:2"); r != "V29" {
		t.Fatalf("qTV:2 while looking at frame 1 = %q, want V29 (41)", r)
	}
}

func TestFastHitErrorStopsTheRun(t *testing.T) {
	p := newProgram()
	inst := &syncInstaller{fakeInstaller: newFakeInstaller()}
	e := NewEngine(Config{Layout: p.layout, Live: p.mem, Installer: inst})
	mustOK(t, e, "QTinit", "QTDP:1:401000:E:0:0", "QTStart")
	tp := findTracepoint(t, e, 1)
	inst.queue = append(inst.queue, func() { e.FastHitError(tp, "condition: division by zero") })
	st := send(t, e, "qTStatus")
	if !strings.Contains(st, "terror:") {
		t.Fatalf("status %q: want terror", st)
	}
	if inst.count() != 0 {
		t.Fatal("tracepoint still installed after the error stop")
	}
	if err := e.FastHit(tp, nil, mBlock(1, []byte{1})); err != nil || statusField(t, send(t, e, "qTStatus"), "tframes") != "0" {
		t.Fatal("a hit after the stop was recorded")
	}
}

func TestFastHitRejectsCorruptBlocks(t *testing.T) {
	p := newProgram()
	inst := &syncInstaller{fakeInstaller: newFakeInstaller()}
	e := NewEngine(Config{Layout: p.layout, Live: p.mem, Installer: inst})
	mustOK(t, e, "QTinit", "QTDP:1:401000:E:0:0", "QTStart")
	tp := findTracepoint(t, e, 1)
	for _, blocks := range [][]byte{{'M', 1, 2}, {'Q'}, mBlock(5, []byte{1, 2, 3})[:12], {'V', 1}} {
		mustOK(t, e, "QTStop", "QTStart")
		if err := e.FastHit(tp, nil, blocks); err == nil {
			t.Errorf("blocks %x accepted", blocks)
		}
		if !strings.Contains(send(t, e, "qTStatus"), "terror:") {
			t.Errorf("blocks %x: the run did not stop with terror", blocks)
		}
	}
}

func TestCollectedRegisters(t *testing.T) {
	layout := tdesc.AMD64Linux(true)
	regs := layout.NewRegs()
	withFS := layout.NewRegs()
	_ = withFS.SetUint64(tdesc.FSBASE, 0x7f00)
	cases := []struct {
		from frames.RegsSource
		num  int
		regs *tdesc.Regs
		want bool
	}{
		{frames.RegsAll, tdesc.YMM0H, regs, true},
		{frames.RegsAll, tdesc.ORIGRAX, regs, true},
		{frames.RegsGeneral, tdesc.RAX, regs, true},
		{frames.RegsGeneral, tdesc.GS, regs, true},
		{frames.RegsGeneral, tdesc.ST0, regs, false},
		{frames.RegsGeneral, tdesc.XMM0, regs, false},
		{frames.RegsGeneral, tdesc.YMM0H, regs, false},
		{frames.RegsGeneral, tdesc.FSBASE, regs, false},
		{frames.RegsGeneral, tdesc.FSBASE, withFS, true},
		{frames.RegsGeneralVector, tdesc.XMM0 + 15, regs, true},
		{frames.RegsGeneralVector, tdesc.MXCSR, regs, true},
		{frames.RegsGeneralVector, tdesc.YMM0H, regs, true},
		{frames.RegsGeneralVector, tdesc.ORIGRAX, regs, false},
		{frames.RegsGeneralVector, tdesc.GSBASE, regs, false},
	}
	for _, c := range cases {
		if got := collected(c.from, c.num, c.regs); got != c.want {
			t.Errorf("collected(%d, register %d) = %v, want %v", c.from, c.num, got, c.want)
		}
	}
}

// allRegs is an R action's mask naming every register of the test
// layouts (gdb's `collect $regs`): frames hold the whole register block.
const allRegs = "ffffffffffffffffffffffff"

// TestFastHitsAArch64 hands FastHits an arm64 pad's registers (x0-x30,
// sp, pc, cpsr in Regs, v0-v31, fpsr, fpcr in FPSIMD) with the aarch64
// layout: every one of them is in the frame, collected; the vector state
// only with FPSIMD.
func TestFastHitsAArch64(t *testing.T) {
	regs := make([]byte, 8*(tdesc.AArch64CPSR+1))
	for i := range tdesc.AArch64CPSR + 1 {
		binary.LittleEndian.PutUint64(regs[8*i:], 0x1000+uint64(i))
	}
	fpsimd := make([]byte, tdesc.AArch64FPSIMDSize)
	for i := range fpsimd {
		fpsimd[i] = byte(i)
	}
	for _, tc := range []struct {
		name   string
		fpsimd []byte
	}{{"general registers", nil}, {"with the vector state", fpsimd}} {
		t.Run(tc.name, func(t *testing.T) {
			e := NewEngine(Config{Layout: tdesc.AArch64Linux(), Installer: newFakeInstaller()})
			e.SetFastTracepoints(true)
			mustOK(t, e, "QTinit", "QTDP:1:401000:E:0:0-", "QTDP:-1:401000:R"+allRegs, "QTStart")
			e.FastHits([]FastRecord{{TP: findTracepoint(t, e, 1), Regs: regs, FPSIMD: tc.fpsimd, Thread: 0x7000}})
			if r := send(t, e, "QTFrame:0"); r != "F0T1" {
				t.Fatalf("QTFrame:0 = %q", r)
			}
			got, ok := e.FrameRegisters()
			if !ok {
				t.Fatal("no registers")
			}
			for i := range tdesc.AArch64CPSR + 1 {
				if want := 0x1000 + uint64(i); !got.Valid[i] || got.Uint64(i) != want&(1<<(8*got.Layout.Regs[i].Size)-1) {
					t.Errorf("%s = %#x (valid %v), want %#x", got.Layout.Regs[i].Name, got.Uint64(i), got.Valid[i], want)
				}
			}
			for i := tdesc.AArch64V0; i <= tdesc.AArch64FPCR; i++ {
				if got.Valid[i] != (tc.fpsimd != nil) {
					t.Errorf("%s valid %v", got.Layout.Regs[i].Name, got.Valid[i])
				}
			}
			if tc.fpsimd == nil {
				return
			}
			if v := got.Get(tdesc.AArch64V0 + 3); string(v) != string(fpsimd[48:64]) {
				t.Errorf("v3 = % x, want % x", v, fpsimd[48:64])
			}
			for _, r := range []struct{ num, off int }{{tdesc.AArch64FPSR, 512}, {tdesc.AArch64FPCR, 520}} {
				if want := uint64(binary.LittleEndian.Uint32(fpsimd[r.off:])); got.Uint64(r.num) != want {
					t.Errorf("%s = %#x, want %#x", got.Layout.Regs[r.num].Name, got.Uint64(r.num), want)
				}
			}
		})
	}
}

// prepInstaller is a fakeInstaller that records Prepare calls.
type prepInstaller struct {
	*fakeInstaller
	prepared []uint64
}

func (p *prepInstaller) Prepare(addr uint64) { p.prepared = append(p.prepared, addr) }

// TestPrepareFastDefinitions: a Preparer installer hears of each fast
// tracepoint gdb defines (not of trap ones), before QTStart.
func TestPrepareFastDefinitions(t *testing.T) {
	p := newProgram()
	inst := &prepInstaller{fakeInstaller: newFakeInstaller()}
	e := NewEngine(Config{Layout: p.layout, Live: p.mem, Installer: inst})
	e.SetFastTracepoints(true)
	mustOK(t, e, "QTinit", "QTDP:1:401000:E:0:0:F5-", "QTDP:-1:401000:R"+allRegs, "QTDP:2:401010:E:0:0", "QTDP:3:401020:E:0:0:F5")
	if want := []uint64{0x401000, 0x401020}; !slices.Equal(inst.prepared, want) {
		t.Fatalf("prepared %#x, want %#x", inst.prepared, want)
	}
	if n := inst.count(); n != 0 {
		t.Fatalf("%d tracepoints installed before QTStart", n)
	}
}
