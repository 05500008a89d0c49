package tracing

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gotpstub/frames"
	"gotpstub/tdesc"
)

// Addresses in the captured session (testdata/prog.c as gdb 13 saw it).
const (
	addrWork    = 0x555555555140 // tracepoint 2: work, after the prologue
	addrLine16  = 0x5555555551cb // tracepoint 3: main, line 16
	addrBuf     = 0x555555558040 // char buf[32]
	addrCounter = 0x555555558080 // int counter
	addrPoints  = 0x5555555580a0 // struct pt points[4]
	frameBase   = 0x7fffffffe6d0 // rbp inside work
)

// program is the fake inferior of the captured session.
type program struct {
	mem    *fakeMemory
	thread *fakeThread
	layout *tdesc.Layout
}

func newProgram() *program {
	layout := tdesc.AMD64Linux(false)
	mem := newFakeMemory()
	data := make([]byte, 0x80)
	copy(data, "hello tracepoints")
	mem.add(addrBuf, data)
	mem.add(frameBase-0x100, make([]byte, 0x200))
	th := &fakeThread{tid: 100, regs: layout.NewRegs(), mem: mem}
	for i := range th.regs.Valid {
		th.regs.Valid[i] = true
	}
	th.setReg(regRBP, frameBase)
	th.setReg(7, frameBase-0x20)
	return &program{mem: mem, thread: th, layout: layout}
}

// enterWork sets the state of work(n) at its tracepoint: the argument at
// rbp-20, local at rbp-4, counter, and a trap's pc (one past the int3).
func (p *program) enterWork(n int) {
	p.mem.writeU32(frameBase-20, uint32(n))
	p.mem.writeU32(frameBase-4, uint32(3*n))
	p.mem.writeU32(addrCounter, uint32(100+n))
	p.mem.writeU32(addrPoints+uint64(n&3)*8, uint32(n))
	p.thread.setReg(regRIP, addrWork+1)
}

// loadSession replays the captured definition packets (QTinit through
// QTStart) and checks the engine answers each as gdbserver did.
func loadSession(t *testing.T, e *Engine) {
	t.Helper()
	started := false
	for _, x := range readSession(t, "gdb13-gdbserver-session.txt") {
		if x.packet == "QTinit" {
			started = true
		}
		if !started {
			continue
		}
		if got := send(t, e, x.packet); got != x.reply {
			t.Fatalf("%s: got %q, gdbserver answered %q", x.packet, got, x.reply)
		}
		if x.packet == "QTStart" {
			return
		}
	}
	t.Fatal("session has no QTStart")
}

// runWork simulates the loop of prog.c: work(0..19) until the run stops,
// single-stepping as Hit asks.
func runWork(t *testing.T, e *Engine, p *program, tp *Tracepoint) {
	t.Helper()
	for n := 0; n < 20 && e.Running(); n++ {
		p.enterWork(n)
		steps := e.Hit(tp, p.thread)
		if n <= 2 && steps != 0 {
			t.Fatalf("work(%d): condition n > 2 is false, Hit asked for %d steps", n, steps)
		}
		for i := 1; i <= steps; i++ {
			p.thread.setReg(regRIP, addrWork+3+uint64(i))
			e.Step(tp, p.thread, i)
		}
	}
}

func TestCapturedSession(t *testing.T) {
	p := newProgram()
	inst := newFakeInstaller()
	e := NewEngine(Config{Layout: p.layout, Live: p.mem, Installer: inst})
	loadSession(t, e)
	if !e.Running() || inst.count() != 2 {
		t.Fatalf("after QTStart: running %v, %d installed, want true, 2", e.Running(), inst.count())
	}
	tp := findTracepoint(t, e, 2)
	if len(tp.Actions) != 7 || len(tp.StepActions) != 1 || tp.Cond == nil || len(tp.Sources) != 9 {
		t.Fatalf("tracepoint 2: %d actions, %d step actions, cond %v, %d sources; want 7, 1, set, 9",
			len(tp.Actions), len(tp.StepActions), tp.Cond != nil, len(tp.Sources))
	}
	runWork(t, e, p, tp)

	// gdbserver stopped this very run with: T0;tpasscount:2;tframes:18;tcreated:18;...
	status := send(t, e, "qTStatus")
	for field, want := range map[string]string{"tpasscount": "2", "tframes": "12", "tcreated": "12", "circular": "0", "disconn": "0"} {
		if got := statusField(t, status, field); got != want {
			t.Errorf("qTStatus %s = %q, want %q (%s)", field, got, want, status)
		}
	}
	if !strings.HasPrefix(status, "T0;") {
		t.Errorf("qTStatus %q: run should be stopped", status)
	}
	if inst.count() != 0 {
		t.Errorf("%d tracepoints still installed after the passcount stop", inst.count())
	}
	used := e.buf.Used()
	if got, want := send(t, e, "qTP:2:555555555140"), fmt.Sprintf("V6:%x", used); got != want {
		t.Errorf("qTP = %q, want %q", got, want)
	}
	if got := send(t, e, "qTP:3:5555555551cb"); got != "V0:0" {
		t.Errorf("qTP tracepoint 3 = %q, want V0:0", got)
	}
	// teval $v = $v + 1 ran on each of the 6 collecting hits: 5 + 6.
	if got := send(t, e, "qTV:2"); got != "Vb" {
		t.Errorf("qTV:2 = %q, want Vb", got)
	}
	if got := send(t, e, "qTV:3"); got != "Vfffffffffffffffd" {
		t.Errorf("qTV:3 = %q, want Vfffffffffffffffd", got)
	}

	// tfind start: the first hit, work(3).
	if got := send(t, e, "QTFrame:0"); got != "F0T2" {
		t.Fatalf("QTFrame:0 = %q", got)
	}
	regs, ok := e.FrameRegisters()
	if !ok || regs.Uint64(regRIP) != addrWork || regs.Uint64(regRBP) != frameBase || !regs.Valid[regRIP] {
		t.Fatalf("frame 0 registers: ok %v rip %#x rbp %#x", ok, regs.Uint64(regRIP), regs.Uint64(regRBP))
	}
	buf := make([]byte, 17)
	if n, err := e.FrameMemory(addrBuf, buf); err != nil || string(buf[:n]) != "hello tracepoints" {
		t.Errorf("frame 0 buf = %q, %v", buf, err)
	}
	word := make([]byte, 4)
	for _, c := range []struct {
		addr uint64
		want uint32
	}{{addrCounter, 103}, {frameBase - 4, 9}, {addrPoints + 3*8, 3}} {
		if n, err := e.FrameMemory(c.addr, word); err != nil || n != 4 || binary.LittleEndian.Uint32(word) != c.want {
			t.Errorf("frame 0 memory at %#x = % x (n %d, %v), want %d", c.addr, word, n, err, c.want)
		}
	}
	if _, err := e.FrameMemory(frameBase-8, word); err == nil {
		t.Errorf("frame 0: memory never collected read without error")
	}
	if got := send(t, e, "qTV:2"); got != "V6" {
		t.Errorf("qTV:2 in frame 0 = %q, want V6 (collected after the first teval)", got)
	}
	if got := send(t, e, "qTV:3"); got != "U" {
		t.Errorf("qTV:3 in frame 0 = %q, want U (not collected)", got)
	}
	info := send(t, e, "qXfer:traceframe-info:read::0,1000")
	for _, want := range []string{"l<traceframe-info>", `<memory start="0x555555558040" length="0x20"/>`, `<tvar id="2"/>`} {
		if !strings.Contains(info, want) {
			t.Errorf("traceframe-info %q lacks %q", info, want)
		}
	}

	// Frame 1 is the first while-stepping frame: registers only, its own pc.
	if got := send(t, e, "QTFrame:1"); got != "F1T2" {
		t.Fatalf("QTFrame:1 = %q", got)
	}
	regs, _ = e.FrameRegisters()
	if regs.Uint64(regRIP) != addrWork+4 {
		t.Errorf("step frame rip = %#x, want %#x", regs.Uint64(regRIP), addrWork+4)
	}
	if _, err := e.FrameMemory(addrBuf, buf); err == nil {
		t.Errorf("step frame: buf should not be collected")
	}

	tfind := []struct{ packet, want string }{
		{"QTFrame:pc:555555555140", "F3T2"}, // next hit frame after frame 1
		{"QTFrame:pc:555555555140", "F6T2"},
		{"QTFrame:tdp:3", "F-1"},
		{"QTFrame:tdp:ffffffff", "F-1"}, // tfind tracepoint -1 (gdb.trace/tfind.exp)
		{"QTFrame:fffffffe", "F-1"},
		{"QTFrame:range:555555555141:555555555150", "F7T2"},
		{"QTFrame:outside:555555555141:555555555150", "F9T2"},
		{"QTFrame:11", "F11T2"},
		{"QTFrame:12", "F-1"},
		{"QTFrame:tdp:2", "F-1"}, // nothing after the last frame
		{"QTFrame:ffffffff", "OK"},
		{"QTFrame:tdp:2", "F0T2"},
		{"QTFrame:-1", "OK"},
	}
	for _, c := range tfind {
		if got := send(t, e, c.packet); got != c.want {
			t.Errorf("%s = %q, want %q", c.packet, got, c.want)
		}
	}
	if e.FrameSelected() {
		t.Errorf("frame still selected after QTFrame:-1")
	}

	// qTBuffer serves the frames byte for byte.
	var raw []byte
	for off := 0; ; {
		r := send(t, e, fmt.Sprintf("qTBuffer:%x,%x", off, 1000))
		if r == "l" {
			break
		}
		b, err := hex.DecodeString(r)
		if err != nil || len(b) == 0 {
			t.Fatalf("qTBuffer at %d: %q", off, r)
		}
		raw = append(raw, b...)
		off += len(b)
	}
	if len(raw) != used || binary.LittleEndian.Uint16(raw) != 2 {
		t.Errorf("qTBuffer gave %d bytes starting with tp %d, want %d starting with 2", len(raw), binary.LittleEndian.Uint16(raw), used)
	}
	if got := send(t, e, fmt.Sprintf("qTBuffer:%x,10", used+1)); got != "E01" {
		t.Errorf("qTBuffer past the end = %q, want E01", got)
	}
}

func TestUploadRoundTrip(t *testing.T) {
	p := newProgram()
	e := NewEngine(Config{Layout: p.layout, Installer: newFakeInstaller()})
	loadSession(t, e)
	mustOK(t, e, "QTStop")
	lines := upload(t, e, "qTfP", "qTsP")
	if len(lines) != 1+7+1+9+1+2+2 || lines[0] != "T2:555555555140:E:2:6:X13,26000622100222dc16080219162022022b1427" {
		t.Fatalf("uploaded %d lines, first %q", len(lines), lines[0])
	}
	tsvs := upload(t, e, "qTfV", "qTsV")
	// Newest first, like gdbserver.
	want := []string{"3:fffffffffffffffd:0:6e6567", "2:5:0:76", "1:0:1:74726163655f74696d657374616d70"}
	if strings.Join(tsvs, " ") != strings.Join(want, " ") {
		t.Errorf("qTfV/qTsV = %q, want %q", tsvs, want)
	}

	// Define everything again from the upload, as a reconnecting gdb
	// would learn it, and upload again: same definitions.
	e2 := NewEngine(Config{Layout: p.layout, Installer: newFakeInstaller()})
	mustOK(t, e2, "QTinit")
	seenStep := map[string]bool{}
	for _, l := range lines {
		num, rest, _ := strings.Cut(l[1:], ":")
		addr, body, _ := strings.Cut(rest, ":")
		var pkt string
		switch l[0] {
		case 'T':
			pkt = "QTDP:" + l[1:]
		case 'A':
			pkt = "QTDP:-" + num + ":" + addr + ":" + body
		case 'S':
			prefix := ""
			if !seenStep[num+addr] {
				prefix, seenStep[num+addr] = "S", true
			}
			pkt = "QTDP:-" + num + ":" + addr + ":" + prefix + body
		case 'Z':
			pkt = "QTDPsrc:" + l[1:]
		default:
			t.Fatalf("unexpected upload line %q", l)
		}
		mustOK(t, e2, pkt)
	}
	for _, v := range slices.Backward(tsvs[:len(tsvs)-1]) { // gdb defines them oldest first
		mustOK(t, e2, "QTDV:"+v)
	}
	if again := upload(t, e2, "qTfP", "qTsP"); strings.Join(again, "\n") != strings.Join(lines, "\n") {
		t.Errorf("second upload differs:\n%s\nfirst:\n%s", strings.Join(again, "\n"), strings.Join(lines, "\n"))
	}
	if again := upload(t, e2, "qTfV", "qTsV"); strings.Join(again, " ") != strings.Join(tsvs, " ") {
		t.Errorf("second TSV upload %q, want %q", again, tsvs)
	}
	tp := findTracepoint(t, e2, 2)
	if len(tp.StepActions) != 1 || len(tp.Actions) != 7 {
		t.Errorf("re-created tracepoint 2: %d actions, %d step actions", len(tp.Actions), len(tp.StepActions))
	}
}

// upload runs a qTf*/qTs* sequence up to "l".
func upload(t *testing.T, e *Engine, first, next string) []string {
	t.Helper()
	var out []string
	for r := send(t, e, first); r != "l"; r = send(t, e, next) {
		out = append(out, r)
		if len(out) > 1000 {
			t.Fatal("upload never ends")
		}
	}
	return out
}

func TestQTSaveWritesReadableTFile(t *testing.T) {
	p := newProgram()
	e := NewEngine(Config{Layout: p.layout, Installer: newFakeInstaller()})
	loadSession(t, e)
	runWork(t, e, p, findTracepoint(t, e, 2))
	name := filepath.Join(t.TempDir(), "saved.tf")
	if got := send(t, e, "QTSave:"+hex.EncodeToString([]byte(name))); got != "OK" {
		t.Fatalf("QTSave = %q", got)
	}
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	tf, err := frames.ReadTFile(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("reading the saved tfile: %v", err)
	}
	if tf.RegBlockSize != p.layout.Size || len(tf.Frames) != 18 || len(tf.TSVs) != 3 {
		t.Errorf("tfile: regblock %d, %d frames, %d tsvs; want %d, 18, 3", tf.RegBlockSize, len(tf.Frames), len(tf.TSVs), p.layout.Size)
	}
	if !strings.Contains(tf.Status, "tpasscount:2") {
		t.Errorf("tfile status %q lacks the stop reason", tf.Status)
	}
	if len(tf.Frames) > 0 && tf.Frames[0].TPNum != 2 {
		t.Errorf("first saved frame is from tracepoint %d", tf.Frames[0].TPNum)
	}
	if got := send(t, e, "QTSave:"+hex.EncodeToString([]byte(filepath.Join(name, "sub", "x")))); !strings.HasPrefix(got, "E.") {
		t.Errorf("QTSave to an impossible path = %q, want an E. error", got)
	}
}

// parseHex parses a hex status field.
func parseHex(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		t.Fatalf("hex %q: %v", s, err)
	}
	return v
}

// BenchmarkHit measures one hit of the captured session's tracepoint 2
// (condition, registers, memory, three expressions) in a circular buffer.
func BenchmarkHit(b *testing.B) {
	p := newProgram()
	e := NewEngine(Config{Layout: p.layout, Installer: newFakeInstaller()})
	for _, x := range readSession(b, "gdb13-gdbserver-session.txt") {
		if strings.HasPrefix(x.packet, "QTDP:-2:") && strings.HasPrefix(x.packet[len("QTDP:-2:0000555555555140:"):], "S") {
			continue // no while-stepping here
		}
		if x.packet == "QTStart" {
			break
		}
		e.HandlePacket([]byte(x.packet))
	}
	mustOK(b, e, "QTBuffer:circular:1", "QTStart")
	tp := findTracepoint(b, e, 2)
	tp.StepCount, tp.PassCount = 0, 0
	p.enterWork(5)
	b.ReportAllocs()
	for b.Loop() {
		e.Hit(tp, p.thread)
	}
	if !e.Running() || tp.Hits < uint64(b.N) {
		b.Fatalf("running %v, %d hits counted for %d", e.Running(), tp.Hits, b.N)
	}
}
