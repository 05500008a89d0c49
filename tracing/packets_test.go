package tracing

import (
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gotpstub/frames"
)

// newTestEngine returns an engine over a fresh fake program.
func newTestEngine(t *testing.T) (*Engine, *program, *fakeInstaller) {
	t.Helper()
	p := newProgram()
	inst := newFakeInstaller()
	e := NewEngine(Config{Layout: p.layout, Live: p.mem, Installer: inst})
	return e, p, inst
}

func TestBadPacketsAnswerErrors(t *testing.T) {
	e, _, _ := newTestEngine(t)
	mustOK(t, e, "QTinit", "QTDP:1:401000:E:0:0")
	cases := []struct {
		packet string
		want   string // reply prefix
	}{
		{"QTDP:", "E."},
		{"QTDP:1", "E."},
		{"QTDP:2:401000:Q:0:0", "E."},
		{"QTDP:2:401000:E:0", "E."},
		{"QTDP:2:401000:E:0:0:Z", "E."},
		{"QTDP:2:401000:E:0:0:X2,27", "E."},       // length beyond the hex
		{"QTDP:2:401000:E:0:0:X1,ff", "E."},       // unknown opcode
		{"QTDP:2:401000:E:0:0:X1,02", "E."},       // add on an empty stack
		{"QTDP:2:401000:E:0:0:X3,260fff27", "E."}, // no such register
		{"QTDP:2:401000:E:0:0:X3,21000027", "E."}, // goto 0: never ends
		{"QTDP:0:401000:E:0:0", "E."},             // frames cannot record tp 0
		{"QTDP:10000:401000:E:0:0", "E."},         // nor tp 65536
		{"QTDP:-1:401000:Q", "E."},                // unknown action
		{"QTDP:-1:401000:M-1,10", "E."},           // short M
		{"QTDP:-1:401000:M-2,10,4", "E."},         // base register -2
		{"QTDP:-1:401000:M99,10,4", "E."},         // no such base register
		{"QTDP:-1:401000:R-R", "E."},              // stray hyphen
		{"QTDP:-1:401000:X2,2627", "E."},          // reg without operand
		{"QTDP:-9:401000:R1", "E."},               // unknown tracepoint
		{"QTDPsrc:9:401000:at:0:1:41", "E."},      // unknown tracepoint
		{"QTDPsrc:1:401000:at:0:1:4", "E."},       // odd hex
		{"QTDV:2:5:0:7", "E."},                    // odd hex name
		{"QTDV:x", "E."},
		{"qTP:9:401000", "E."},
		{"qTP:1", "E."},
		{"QTEnable:9:401000", "E."},
		{"QTFrame:zz", "E."},
		{"QTFrame:pc:", "E."},
		{"QTFrame:range:1", "E."},
		{"qTV:", "E."},
		{"QTBuffer:size:zz", "E."},
		{"QTBuffer:circular:", "E."},
		{"qTBuffer:1", "E."},
		{"qTBuffer:1,", "E."},
		{"QTNotes:user:4;", "E."},
		{"QTro:1", "E."},
		{"QTro:1,", "E."},
		{"QTDisconnected:", "E."},
		{"QTSave:4", "E."},
		{"QTSave:", "E."},
		{"qXfer:traceframe-info:read::0,100", "E01"}, // no frame selected
		{"qXfer:traceframe-info:read:x:0,100", "E."},
		{"qXfer:traceframe-info:read::0", "E."},
		{"qXfer:statictrace:read::0,100", "E01"}, // no frame selected
		{"qXfer:statictrace:read:x:0,100", "E."},
		{"QTDP:1:401000:E:0:0-", "OK"}, // redefining a known location is allowed
	}
	for _, c := range cases {
		if got := send(t, e, c.packet); !strings.HasPrefix(got, c.want) {
			t.Errorf("%s: got %q, want prefix %q", c.packet, got, c.want)
		}
	}
	if len(e.Tracepoints()) != 1 {
		t.Errorf("bad packets defined tracepoints: %d locations, want 1", len(e.Tracepoints()))
	}
	if _, handled := e.HandlePacket([]byte("qSupported")); handled {
		t.Errorf("qSupported handled by the trace engine")
	}
}

func TestStatusFields(t *testing.T) {
	e, _, _ := newTestEngine(t)
	clock := time.UnixMicro(0x1000)
	e.now = func() time.Time { return clock }
	if got := send(t, e, "qTStatus"); !strings.HasPrefix(got, "T0;tnotrun:0;tframes:0;tcreated:0;tfree:500000;tsize:500000;circular:0;disconn:0;starttime:0;stoptime:0;username:;notes:") {
		t.Errorf("initial qTStatus = %q", got)
	}
	if got := send(t, e, "qTV:1"); got != "U" {
		t.Errorf("qTV:1 before any run = %q, want U", got)
	}
	user, notes, stop := hex.EncodeToString([]byte("me")), hex.EncodeToString([]byte("a note")), hex.EncodeToString([]byte("why"))
	mustOK(t, e, "QTinit", "QTBuffer:size:1000", "QTBuffer:circular:1", "QTDisconnected:1",
		"QTNotes:user:"+user+";notes:"+notes+";", "QTStart")
	running := send(t, e, "qTStatus")
	for field, want := range map[string]string{"tsize": "1000", "tfree": "1000", "circular": "1", "disconn": "1", "username": user, "notes": notes, "starttime": "1000"} {
		if got := statusField(t, running, field); got != want {
			t.Errorf("running qTStatus %s = %q, want %q (%s)", field, got, want, running)
		}
	}
	if !strings.HasPrefix(running, "T1;") {
		t.Errorf("qTStatus %q does not say running", running)
	}
	if got := send(t, e, "QTBuffer:size:2000"); !strings.HasPrefix(got, "E") {
		t.Errorf("QTBuffer:size while running = %q, want an error", got)
	}
	if got := send(t, e, "qTV:1"); got != "V1000" {
		t.Errorf("qTV:1 ($trace_timestamp) = %q, want V1000", got)
	}
	clock = time.UnixMicro(0x2345)
	mustOK(t, e, "QTNotes:tstop:"+stop+";", "QTStop")
	stopped := send(t, e, "qTStatus")
	if !strings.HasPrefix(stopped, "T0;tstop:"+stop+":0;") || statusField(t, stopped, "stoptime") != "2345" {
		t.Errorf("stopped qTStatus = %q", stopped)
	}
	if parseHex(t, statusField(t, stopped, "stoptime")) < parseHex(t, statusField(t, stopped, "starttime")) {
		t.Errorf("stop before start in %q", stopped)
	}
	mustOK(t, e, "QTBuffer:size:4") // gdb.trace/trace-buffer-size.exp
	if st := send(t, e, "qTStatus"); statusField(t, st, "tsize") != "4" || statusField(t, st, "tfree") != "4" {
		t.Errorf("qTStatus after QTBuffer:size:4 = %q", st)
	}
	mustOK(t, e, "QTBuffer:size:-1")
	if got := statusField(t, send(t, e, "qTStatus"), "tsize"); got != "500000" {
		t.Errorf("tsize after QTBuffer:size:-1 = %q", got)
	}
	if got := send(t, e, "qTMinFTPILen"); got != "1" {
		t.Errorf("qTMinFTPILen = %q", got)
	}
}

// simpleTracepoint defines tracepoint 1 at addrWork collecting registers
// and buf.
func simpleTracepoint(t *testing.T, e *Engine, passcount int) {
	t.Helper()
	mustOK(t, e, "QTinit",
		"QTDP:1:"+hexAddr(addrWork)+":E:0:"+hexInt(passcount)+"-",
		"QTDP:-1:"+hexAddr(addrWork)+":R"+allRegs+"-",
		"QTDP:-1:"+hexAddr(addrWork)+":M-1,"+hexAddr(addrBuf)+",20")
}

func hexAddr(a uint64) string { return strings.TrimLeft(hex.EncodeToString(be64(a)), "0") }
func hexInt(n int) string {
	s := strings.TrimLeft(hex.EncodeToString(be64(uint64(n))), "0")
	if s == "" {
		return "0"
	}
	return s
}

func be64(v uint64) []byte {
	b := make([]byte, 8)
	for i := range b {
		b[i] = byte(v >> (56 - 8*i))
	}
	return b
}

func TestLinearBufferFullStops(t *testing.T) {
	e, p, inst := newTestEngine(t)
	simpleTracepoint(t, e, 0)
	frameSize := frames.HeaderSize + 1 + p.layout.Size + 1 + 10 + 0x20
	mustOK(t, e, "QTBuffer:size:"+hexInt(3*frameSize+frames.EOBMarkerSize), "QTStart")
	tp := findTracepoint(t, e, 1)
	hits := 0
	for ; hits < 10 && e.Running(); hits++ {
		p.enterWork(hits)
		e.Hit(tp, p.thread)
	}
	status := send(t, e, "qTStatus")
	if hits != 4 || !strings.Contains(status, ";tfull:0;") || statusField(t, status, "tframes") != "3" {
		t.Errorf("after %d hits: %q; want the 4th hit to stop with tfull and 3 frames", hits, status)
	}
	if inst.count() != 0 {
		t.Errorf("tracepoint still installed after tfull")
	}
	if tp.Hits != 4 || tp.BytesUsed != uint64(3*frameSize) {
		t.Errorf("hits %d, bytes %d; want 4, %d", tp.Hits, tp.BytesUsed, 3*frameSize)
	}
	// A hit after the stop changes nothing.
	if e.Hit(tp, p.thread) != 0 || tp.Hits != 4 {
		t.Errorf("a hit after the run stopped was counted")
	}
}

func TestCircularBufferKeepsNewest(t *testing.T) {
	e, p, _ := newTestEngine(t)
	simpleTracepoint(t, e, 0)
	frameSize := frames.HeaderSize + 1 + p.layout.Size + 1 + 10 + 0x20
	mustOK(t, e, "QTBuffer:size:"+hexInt(3*frameSize+frames.EOBMarkerSize), "QTBuffer:circular:1", "QTStart")
	tp := findTracepoint(t, e, 1)
	for n := 0; n < 10; n++ {
		p.enterWork(n)
		p.mem.write(addrBuf, []byte{byte('a' + n)})
		e.Hit(tp, p.thread)
	}
	status := send(t, e, "qTStatus")
	if !e.Running() || statusField(t, status, "tframes") != "3" || statusField(t, status, "tcreated") != "a" {
		t.Fatalf("circular run: running %v, %q; want running, 3 frames, 10 created", e.Running(), status)
	}
	if got := send(t, e, "QTFrame:0"); got != "F0T1" {
		t.Fatalf("QTFrame:0 = %q", got)
	}
	b := make([]byte, 1)
	if _, err := e.FrameMemory(addrBuf, b); err != nil || b[0] != 'h' {
		t.Errorf("oldest kept frame has buf[0] %q, %v; want 'h' (hit 8 of 10)", b, err)
	}
}

func TestReadOnlyRangesAndUnavailable(t *testing.T) {
	e, p, _ := newTestEngine(t)
	// Collect 8 bytes of buf, the last 2 of which run into an unmapped hole.
	p.mem.add(0x600000, []byte("abcdef"))
	p.mem.add(0x700000, []byte("textsegment"))
	mustOK(t, e, "QTinit", "QTDP:1:"+hexAddr(addrWork)+":E:0:0-", "QTDP:-1:"+hexAddr(addrWork)+":M-1,600000,8",
		"QTro:700000,700004:700004,70000b", "QTStart")
	p.enterWork(1)
	e.Hit(findTracepoint(t, e, 1), p.thread)
	mustOK(t, e, "QTStop")
	if got := send(t, e, "QTFrame:0"); got != "F0T1" {
		t.Fatalf("QTFrame:0 = %q", got)
	}
	buf := make([]byte, 8)
	n, err := e.FrameMemory(0x600000, buf)
	if err != nil || n != 6 || string(buf[:n]) != "abcdef" {
		t.Errorf("partially collected memory: %q (%d), %v; want the 6 readable bytes", buf[:n], n, err)
	}
	if _, err := e.FrameMemory(0x600006, buf[:2]); err == nil {
		t.Errorf("unreadable bytes were recorded")
	}
	n, err = e.FrameMemory(0x700002, buf)
	if err != nil || string(buf[:n]) != "xtsegmen" {
		t.Errorf("read-only range: %q, %v", buf[:n], err)
	}
	// The frame has no R block: only the pc is known.
	regs, ok := e.FrameRegisters()
	if !ok || !regs.Valid[regRIP] || regs.Uint64(regRIP) != addrWork || regs.Valid[regRBP] {
		t.Errorf("registers of a frame without R: ok %v, rip %#x valid %v, rbp valid %v", ok, regs.Uint64(regRIP), regs.Valid[regRIP], regs.Valid[regRBP])
	}
	mustOK(t, e, "QTFrame:-1")
	if _, err := e.FrameMemory(0x700002, buf); err == nil {
		t.Errorf("FrameMemory without a selected frame succeeded")
	}
	if _, ok := e.FrameRegisters(); ok {
		t.Errorf("FrameRegisters without a selected frame succeeded")
	}
}

func TestUnreadableConditionReadsZero(t *testing.T) {
	e, p, _ := newTestEngine(t)
	// Condition: *(u32*)0x10 == 0 — unmapped memory reads as zero.
	mustOK(t, e, "QTinit", "QTDP:4:"+hexAddr(addrWork)+":E:0:0:X7,22101922001327", "QTStart")
	tp := findTracepoint(t, e, 4)
	e.Hit(tp, p.thread)
	if !e.Running() || tp.Hits != 1 {
		t.Errorf("unreadable condition memory: running %v, hits %d; want running, 1", e.Running(), tp.Hits)
	}
}

func TestConditionErrorStopsWithTerror(t *testing.T) {
	e, p, inst := newTestEngine(t)
	// Condition: 1 / 0.
	mustOK(t, e, "QTinit", "QTDP:4:"+hexAddr(addrWork)+":E:0:0:X6,220122000527", "QTStart")
	tp := findTracepoint(t, e, 4)
	e.Hit(tp, p.thread)
	status := send(t, e, "qTStatus")
	if e.Running() || !strings.Contains(status, ";terror:") || !strings.Contains(status, ":4;tframes:0") || inst.count() != 0 || tp.Hits != 0 {
		t.Errorf("after a condition dividing by zero: running %v, %q, hits %d", e.Running(), status, tp.Hits)
	}
	reason := strings.Split(strings.TrimPrefix(status, "T0;terror:"), ":")[0]
	if msg, err := hex.DecodeString(reason); err != nil || !strings.Contains(string(msg), "condition") {
		t.Errorf("terror text %q (%v) does not name the condition", msg, err)
	}
}

func TestEnableDisableAndInstallInTrace(t *testing.T) {
	e, p, inst := newTestEngine(t)
	simpleTracepoint(t, e, 0)
	mustOK(t, e, "QTDP:2:"+hexAddr(addrLine16)+":D:0:0", "QTStart")
	if inst.count() != 1 {
		t.Fatalf("%d installed at QTStart, want 1 (tracepoint 2 is disabled)", inst.count())
	}
	mustOK(t, e, "QTEnable:2:"+hexAddr(addrLine16))
	if inst.count() != 2 {
		t.Errorf("QTEnable while running did not install")
	}
	mustOK(t, e, "QTDisable:1:"+hexAddr(addrWork), "QTDisable:1:"+hexAddr(addrWork))
	if inst.count() != 1 {
		t.Errorf("QTDisable while running did not remove")
	}
	tp1 := findTracepoint(t, e, 1)
	p.enterWork(1)
	if e.Hit(tp1, p.thread); tp1.Hits != 0 {
		t.Errorf("a disabled tracepoint counted a hit")
	}
	// A new location during the run is installed after its last packet.
	mustOK(t, e, "QTDP:3:401000:E:0:0-")
	if inst.count() != 1 {
		t.Errorf("installed before its actions arrived")
	}
	mustOK(t, e, "QTDP:-3:401000:R"+allRegs)
	if inst.count() != 2 {
		t.Errorf("not installed after its last action")
	}
	inst.failAddr = 0x402000
	if got := send(t, e, "QTDP:5:402000:E:0:0"); !strings.HasPrefix(got, "E.") {
		t.Errorf("failed install answered %q", got)
	}
	if len(e.Tracepoints()) != 3 {
		t.Errorf("the location that failed to install was kept")
	}
	// gdb re-sends known locations after a library load: redefined in
	// place; one now disabled comes out.
	mustOK(t, e, "QTDP:3:401000:E:0:0", "QTDP:2:"+hexAddr(addrLine16)+":D:0:0")
	if inst.count() != 1 || len(findTracepoint(t, e, 3).Actions) != 0 {
		t.Errorf("redefinitions: %d installed (want 1), %d actions on 3 (want 0)", inst.count(), len(findTracepoint(t, e, 3).Actions))
	}
	mustOK(t, e, "QTStop")
	if inst.count() != 0 {
		t.Errorf("%d still installed after QTStop", inst.count())
	}
	inst.failAddr = 0x401000
	if got := send(t, e, "QTStart"); !strings.HasPrefix(got, "E.") || inst.count() != 0 || e.Running() {
		t.Errorf("QTStart with a failing install: %q, %d installed, running %v", got, inst.count(), e.Running())
	}
}

func TestDisconnect(t *testing.T) {
	for _, keep := range []bool{false, true} {
		e, _, inst := newTestEngine(t)
		simpleTracepoint(t, e, 0)
		flag := "0"
		if keep {
			flag = "1"
		}
		mustOK(t, e, "QTDisconnected:"+flag, "QTStart", "QTFrame:-1")
		e.OnDisconnect()
		if e.Running() != keep || (inst.count() == 1) != keep {
			t.Errorf("disconnected tracing %v: running %v, %d installed", keep, e.Running(), inst.count())
		}
		if !keep && !strings.Contains(send(t, e, "qTStatus"), ";tdisconnected:0;") {
			t.Errorf("stop reason is not tdisconnected")
		}
	}
	e, _, _ := newTestEngine(t)
	simpleTracepoint(t, e, 0)
	mustOK(t, e, "QTStart")
	e.OnInferiorExit()
	if e.Running() || !strings.Contains(send(t, e, "qTStatus"), ";tstop:") {
		t.Errorf("inferior exit did not stop the run")
	}
}

func TestFeatures(t *testing.T) {
	e, _, _ := newTestEngine(t)
	got := strings.Join(e.Features(), ";")
	for _, want := range []string{"ConditionalTracepoints+", "TraceStateVariables+", "InstallInTrace+", "QTBuffer:size+", "qXfer:traceframe-info:read+"} {
		if !strings.Contains(got, want) {
			t.Errorf("features %q lack %q", got, want)
		}
	}
	if strings.Contains(got, "FastTracepoints") {
		t.Errorf("FastTracepoints announced: %q", got)
	}
}

func FuzzHandlePacket(f *testing.F) {
	for _, x := range readSession(f, "gdb13-gdbserver-session.txt") {
		f.Add(x.packet)
	}
	for _, s := range []string{"QTDP:-1:1:SR1-", "QTFrame:range:1:2", "qTBuffer:0,ffffffffffffffff", "QTro:1,2:3,4",
		"QTNotes:user:41;notes:;tstop:42", "qXfer:traceframe-info:read::0,ffff", "QTDP:1:0:E:0:0:F5:S:X1,27"} {
		f.Add(s)
	}
	p := newProgram()
	f.Fuzz(func(t *testing.T, packet string) {
		if strings.HasPrefix(packet, "QTSave") {
			return // would write files anywhere
		}
		e := NewEngine(Config{Layout: p.layout, Live: p.mem, Installer: newFakeInstaller()})
		mustOK(t, e, "QTinit", "QTDP:1:"+hexAddr(addrWork)+":E:1:0", "QTDP:-1:"+hexAddr(addrWork)+":R1M6,fffffffffffffffc,4", "QTStart")
		tp := findTracepoint(t, e, 1)
		e.Hit(tp, p.thread)
		e.Step(tp, p.thread, 1)
		e.HandlePacket([]byte(packet))
		for _, tp := range e.Tracepoints() {
			e.Hit(tp, p.thread)
			e.Step(tp, p.thread, 1)
		}
		e.HandlePacket([]byte("QTFrame:0"))
		e.HandlePacket([]byte(packet))
		e.FrameRegisters()
		e.FrameMemory(addrBuf, make([]byte, 16))
		e.HandlePacket([]byte("qTStatus"))
	})
}

func FuzzParseActions(f *testing.F) {
	for _, x := range readSession(f, "gdb13-gdbserver-session.txt") {
		if strings.HasPrefix(x.packet, "QTDP:-") {
			parts := strings.SplitN(x.packet, ":", 4)
			f.Add(parts[3])
		}
	}
	f.Add("SR1M-1,10,4X3,26000627-")
	e := NewEngine(Config{Layout: newProgram().layout})
	f.Fuzz(func(t *testing.T, s string) {
		acts, stepping, more, err := e.parseActions(s)
		if err != nil {
			return
		}
		// The actions' texts are the packet, split.
		var b strings.Builder
		if stepping {
			b.WriteString("S")
		}
		for _, a := range acts {
			if a.Text == "" {
				t.Fatalf("empty action text in %q", s)
			}
			b.WriteString(a.Text)
		}
		if more {
			b.WriteString("-")
		}
		if b.String() != s {
			t.Fatalf("actions %q do not rebuild %q", b.String(), s)
		}
	})
}

// TestConcurrentHitsAndPackets runs hits on one goroutine (the ptrace
// thread) while packets arrive on another; run with -race.
func TestConcurrentHitsAndPackets(t *testing.T) {
	e, p, inst := newTestEngine(t)
	simpleTracepoint(t, e, 0)
	mustOK(t, e, "QTBuffer:circular:1", "QTStart")
	tp := findTracepoint(t, e, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 2000; i++ {
			if e.Hit(tp, p.thread) != 0 {
				t.Error("Hit asked for steps without while-stepping")
				return
			}
		}
	}()
	for i := 0; i < 200; i++ {
		for _, pkt := range []string{"qTStatus", "qTP:1:" + hexAddr(addrWork), "QTStop", "QTStart", "qTV:1"} {
			send(t, e, pkt)
		}
	}
	<-done
	mustOK(t, e, "QTStop")
	if inst.count() != 0 || e.Running() {
		t.Errorf("after the last QTStop: %d installed, running %v", inst.count(), e.Running())
	}
	// Hits count the last run only; frames accumulate until QTinit.
	if created := parseHex(t, statusField(t, send(t, e, "qTStatus"), "tcreated")); created < tp.Hits {
		t.Errorf("%d frames created for %d hits", created, tp.Hits)
	}
}

func TestBaseRegisterActionAndPartialXfer(t *testing.T) {
	p := newProgram()
	e := NewEngine(Config{Layout: p.layout, Live: p.mem})
	inst := newFakeInstaller()
	e.SetInstaller(inst)
	// M6,ffffffffffffffec,4: the 4 bytes at rbp-20 (work's n).
	mustOK(t, e, "QTinit", "QTDP:1:"+hexAddr(addrWork)+":E:0:0-", "QTDP:-1:"+hexAddr(addrWork)+":M6,ffffffffffffffec,4", "QTStart")
	if inst.count() != 1 {
		t.Fatalf("SetInstaller's installer was not used")
	}
	p.enterWork(42)
	e.Hit(findTracepoint(t, e, 1), p.thread)
	mustOK(t, e, "QTStop")
	send(t, e, "QTFrame:0")
	word := make([]byte, 4)
	if n, err := e.FrameMemory(frameBase-20, word); err != nil || n != 4 || word[0] != 42 {
		t.Errorf("rbp-relative collection: % x (%d), %v; want 42", word, n, err)
	}
	whole := send(t, e, "qXfer:traceframe-info:read::0,1000")
	if !strings.HasPrefix(whole, "l") {
		t.Fatalf("traceframe-info = %q", whole)
	}
	doc := whole[1:]
	var got strings.Builder
	for off := 0; ; off += 7 {
		r := send(t, e, "qXfer:traceframe-info:read::"+hexInt(off)+",7")
		got.WriteString(r[1:])
		if r[0] == 'l' {
			break
		}
		if r[0] != 'm' || len(r) != 8 {
			t.Fatalf("chunk at %d = %q", off, r)
		}
	}
	if got.String() != doc {
		t.Errorf("chunked traceframe-info %q, want %q", got.String(), doc)
	}
}

func TestActionErrorsAndRegisterFailures(t *testing.T) {
	e, p, _ := newTestEngine(t)
	// X action dividing by zero.
	mustOK(t, e, "QTinit", "QTDP:7:"+hexAddr(addrWork)+":E:0:0-", "QTDP:-7:"+hexAddr(addrWork)+":R1X6,220122000527", "QTStart")
	tp := findTracepoint(t, e, 7)
	e.Hit(tp, p.thread)
	status := send(t, e, "qTStatus")
	msg, _ := hex.DecodeString(strings.Split(strings.TrimPrefix(status, "T0;terror:"), ":")[0])
	if e.Running() || !strings.Contains(string(msg), "action") || statusField(t, status, "tframes") != "0" {
		t.Errorf("failing action: running %v, %q (%q)", e.Running(), status, msg)
	}
	// A thread whose registers cannot be read stops the run too.
	mustOK(t, e, "QTStart")
	p.thread.regsErr = errors.New("thread vanished")
	e.Hit(tp, p.thread)
	if e.Running() || !strings.Contains(send(t, e, "qTStatus"), ";terror:") {
		t.Errorf("register failure did not stop the run")
	}
}

func TestHugeCollectionFillsWithoutReadingEverything(t *testing.T) {
	e, p, _ := newTestEngine(t)
	big := make([]byte, 1<<20)
	p.mem.add(0x10000000, big)
	reads := 0
	counting := &countingThread{fakeThread: p.thread, reads: &reads}
	// A circular 64 KiB buffer and a 1 MiB collection: the frame can
	// never be stored, whatever is dropped.
	mustOK(t, e, "QTinit", "QTBuffer:size:10000", "QTBuffer:circular:1",
		"QTDP:1:"+hexAddr(addrWork)+":E:0:0-", "QTDP:-1:"+hexAddr(addrWork)+":M-1,10000000,100000", "QTStart")
	e.Hit(findTracepoint(t, e, 1), counting)
	if e.Running() || !strings.Contains(send(t, e, "qTStatus"), ";tfull:0;") {
		t.Errorf("a frame larger than the buffer did not stop the run with tfull")
	}
	if reads > 2 {
		t.Errorf("%d chunk reads for a frame that cannot fit", reads)
	}
}

// countingThread counts memory reads.
type countingThread struct {
	*fakeThread
	reads *int
}

func (c *countingThread) ReadMemory(addr uint64, buf []byte) (int, error) {
	*c.reads++
	return c.fakeThread.ReadMemory(addr, buf)
}

func TestTracepointsSortedByAddress(t *testing.T) {
	e, _, _ := newTestEngine(t)
	mustOK(t, e, "QTinit", "QTDP:1:500:E:0:0", "QTDP:2:300:E:0:0", "QTDP:3:500:E:0:0", "QTDP:4:100:D:0:0", "QTDP:1:300:E:0:0")
	var got []string
	for _, tp := range e.Tracepoints() {
		got = append(got, hexInt(tp.Num)+"@"+hexAddr(tp.Addr))
	}
	if want := "4@100 2@300 1@300 1@500 3@500"; strings.Join(got, " ") != want {
		t.Errorf("tracepoint order %q, want %q (by address, then definition)", strings.Join(got, " "), want)
	}
	if got := send(t, e, "qTfP"); got != "T4:100:D:0:0" {
		t.Errorf("first uploaded location %q", got)
	}
}

func TestQTSaveSafety(t *testing.T) {
	dir := t.TempDir()
	hexName := func(s string) string { return hex.EncodeToString([]byte(s)) }
	cases := []struct {
		name    string
		cfg     Config
		file    string
		want    string // reply prefix
		written string // file that must exist afterwards ("" none)
	}{
		{"no limit", Config{}, filepath.Join(dir, "a.tf"), "OK", filepath.Join(dir, "a.tf")},
		{"refused", Config{NoSave: true}, filepath.Join(dir, "b.tf"), "E.QTSave: refused", ""},
		{"relative in dir", Config{SaveDir: dir}, "c.tf", "OK", filepath.Join(dir, "c.tf")},
		{"absolute in dir", Config{SaveDir: dir}, filepath.Join(dir, "sub/../d.tf"), "OK", filepath.Join(dir, "d.tf")},
		{"escape", Config{SaveDir: dir}, "../e.tf", "E.QTSave: refused", ""},
		{"absolute outside", Config{SaveDir: filepath.Join(dir, "x")}, filepath.Join(dir, "f.tf"), "E.QTSave: refused", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Layout = newProgram().layout
			e := NewEngine(c.cfg)
			reply, _ := e.HandlePacket([]byte("QTSave:" + hexName(c.file)))
			if !strings.HasPrefix(string(reply), c.want) {
				t.Errorf("QTSave %q: %s, want %s...", c.file, reply, c.want)
			}
			if c.written != "" {
				if _, err := os.Stat(c.written); err != nil {
					t.Errorf("no tfile: %v", err)
				}
			}
		})
	}
	// A symlink planted where the tfile goes is not followed.
	target := filepath.Join(dir, "target")
	if err := os.Symlink(target, filepath.Join(dir, "link.tf")); err != nil {
		t.Fatal(err)
	}
	e := NewEngine(Config{Layout: newProgram().layout, SaveDir: dir})
	if reply, _ := e.HandlePacket([]byte("QTSave:" + hexName("link.tf"))); !strings.HasPrefix(string(reply), "E.") {
		t.Errorf("QTSave through a symlink: %s", reply)
	}
	if _, err := os.Stat(target); err == nil {
		t.Error("the symlink was followed")
	}
}

// codeMemory is a live reader that knows where code is.
type codeMemory struct {
	MemoryReader
	start, end uint64
}

func (c codeMemory) CodeSpan(addr uint64, n int) int {
	if addr < c.start || addr >= c.end {
		return 0
	}
	return int(min(uint64(n), c.end-addr))
}

// TestFrameMemoryReadsCode: in a trace frame, the program's code is read
// live even where no QTro range names it (a PIE's, which gdb's unrelocated
// QTro ranges miss), and what is neither collected, QTro nor code is not.
func TestFrameMemoryReadsCode(t *testing.T) {
	p := newProgram()
	p.mem.add(0x700000, []byte("codebytes"))
	p.mem.add(0x800000, []byte("livedata"))
	e := NewEngine(Config{Layout: p.layout, Live: codeMemory{p.mem, 0x700000, 0x700004}, Installer: newFakeInstaller()})
	mustOK(t, e, "QTinit", "QTDP:1:"+hexAddr(addrWork)+":E:0:0-", "QTDP:-1:"+hexAddr(addrWork)+":M-1,800000,4", "QTStart")
	p.enterWork(1)
	e.Hit(findTracepoint(t, e, 1), p.thread)
	mustOK(t, e, "QTStop")
	if got := send(t, e, "QTFrame:0"); got != "F0T1" {
		t.Fatalf("QTFrame:0 = %q", got)
	}
	tests := []struct {
		addr uint64
		n    int
		want string // "" for an error
	}{
		{0x700000, 8, "code"}, // the code span ends after 4 bytes
		{0x700002, 2, "de"},   // inside it
		{0x700004, 4, ""},     // past it: neither code nor collected
		{0x800000, 8, "live"}, // collected
		{0x800004, 4, ""},     // live, not collected, not code
	}
	for _, tc := range tests {
		buf := make([]byte, tc.n)
		n, err := e.FrameMemory(tc.addr, buf)
		if tc.want == "" {
			if err == nil {
				t.Errorf("%#x: read %q, want an error", tc.addr, buf[:n])
			}
			continue
		}
		if err != nil || string(buf[:n]) != tc.want {
			t.Errorf("%#x: %q, %v; want %q", tc.addr, buf[:n], err, tc.want)
		}
	}
}
