package tracing

import (
	"encoding/binary"
	"encoding/hex"
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
