package tracing

import "testing"

// A disconnection that stops the run (QTDisconnected:0) collects the hits
// the Installer still holds first, as QTStop does: a gdb that reconnects
// finds them, and they stay until the next QTinit.
func TestDisconnectKeepsHeldHits(t *testing.T) {
	p := newProgram()
	inst := &syncInstaller{fakeInstaller: newFakeInstaller()}
	e := NewEngine(Config{Layout: p.layout, Live: p.mem, Installer: inst})
	inst.e = e
	e.SetFastTracepoints(true)
	mustOK(t, e, "QTinit", "QTDP:1:401000:E:0:0:F5-", "QTDP:-1:401000:R"+allRegs, "QTDisconnected:0", "QTStart")
	tp := findTracepoint(t, e, 1)
	regs := make([]uint64, 24)
	regs[regRIP] = 0x401000
	for range 3 {
		inst.queue = append(inst.queue, func() {
			if err := e.FastHit(tp, regs, nil); err != nil {
				t.Errorf("FastHit: %v", err)
			}
		})
	}
	e.OnDisconnect()
	if e.Running() {
		t.Fatal("the run goes on after a disconnection with disconnected tracing off")
	}
	st := send(t, e, "qTStatus")
	if got := statusField(t, st, "tframes"); got != "3" {
		t.Fatalf("after the disconnection: tframes = %s, want 3 (status %q)", got, st)
	}
	// A new gdb's status, upload and frame selection see them.
	for i := range 2 {
		st = send(t, e, "qTStatus")
		if got := statusField(t, st, "tframes"); got != "3" {
			t.Fatalf("reconnection %d: tframes = %s, want 3", i, got)
		}
		if got := send(t, e, "QTFrame:2"); got != "F2T1" {
			t.Fatalf("reconnection %d: QTFrame:2 = %q, want F2T1", i, got)
		}
		e.OnDisconnect()
	}
	mustOK(t, e, "QTinit")
	if got := statusField(t, send(t, e, "qTStatus"), "tframes"); got != "0" {
		t.Fatalf("after QTinit: tframes = %s, want 0", got)
	}
}

// With disconnected tracing on the run goes on (the held hits are synced:
// what the inferior collected is kept whatever happens next).
func TestDisconnectedTracingKeepsRunning(t *testing.T) {
	p := newProgram()
	inst := &syncInstaller{fakeInstaller: newFakeInstaller()}
	e := NewEngine(Config{Layout: p.layout, Live: p.mem, Installer: inst})
	inst.e = e
	mustOK(t, e, "QTinit", "QTDP:1:401000:E:0:0", "QTDisconnected:1", "QTStart")
	e.OnDisconnect()
	if !e.Running() {
		t.Fatal("the run stopped although gdb asked for disconnected tracing")
	}
}
