package tracing

import (
	"slices"
	"testing"
)

// runStarterFake is an Installer with StartRun and RunStarted that
// notes, at each call, whether the engine ran.
type runStarterFake struct {
	*fakeInstaller
	e     *Engine
	calls []string
}

func (f *runStarterFake) StartRun() { f.note("StartRun") }

func (f *runStarterFake) RunStarted() { f.note("RunStarted") }

func (f *runStarterFake) Install(tp *Tracepoint) error {
	f.note("Install")
	return f.fakeInstaller.Install(tp)
}

func (f *runStarterFake) note(what string) {
	if f.e.Running() {
		what += " (running)"
	}
	f.calls = append(f.calls, what)
}

// QTStart starts the installer's run before installing and tells it the
// run has started once the engine runs: an installer that collects on
// its own (fasttp's pads) starts collecting only then, for the engine
// drops hits that come before.
func TestQTStartTellsRunStarter(t *testing.T) {
	p := newProgram()
	inst := &runStarterFake{fakeInstaller: newFakeInstaller()}
	e := NewEngine(Config{Layout: p.layout, Live: p.mem, Installer: inst})
	inst.e = e
	mustOK(t, e, "QTinit", "QTDP:1:401000:E:0:0", "QTDP:2:401010:E:0:0", "QTStart")
	want := []string{"StartRun", "Install", "Install", "RunStarted (running)"}
	if !slices.Equal(inst.calls, want) {
		t.Errorf("calls %q, want %q", inst.calls, want)
	}
	inst.calls = nil
	inst.failAddr = 0x401010
	mustOK(t, e, "QTStop")
	if reply := send(t, e, "QTStart"); reply[0] != 'E' {
		t.Fatalf("QTStart with a tracepoint that cannot go in: %s", reply)
	}
	if slices.Contains(inst.calls, "RunStarted") {
		t.Errorf("a QTStart that failed told the installer the run started: %q", inst.calls)
	}
}
