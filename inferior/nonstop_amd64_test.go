//go:build amd64

package inferior

import (
	"slices"
	"testing"
	"time"
)

// Non-stop tests that patch x86-64 code.

// TestLivePatchWhileRunning: five threads run through a 5-byte nop while
// it is patched 300 times with the live protocol — to a jmp to the next
// instruction (a thread meeting the int3 goes to the jump's target) and
// to another 5-byte nop (no jump either way: such a thread waits for
// the bytes to be complete) — and back. No thread may ever execute a
// half-written instruction (the program would crash and the wait below
// report it), no stop may reach the caller, and the threads keep
// running throughout.
func TestLivePatchWhileRunning(t *testing.T) {
	if !kernelSyncCore() {
		t.Skip("the kernel has no SYNC_CORE membarriers")
	}
	p := launchNonStop(t, "livepatch")
	counter, site := symbol(t, p, "counter"), symbol(t, p, "nop5_at")
	p.SetLivePatching(true)
	resumeAll(t, p)
	time.Sleep(20 * time.Millisecond)
	if !p.CanPatchLive() {
		t.Fatal("live patching unavailable")
	}
	patches := [][]byte{
		{0xe9, 0, 0, 0, 0},          // jmp to the next instruction
		{0x3e, 0x0f, 0x1f, 0x40, 0}, // ds nopl 0(%rax)
	}
	for i := range 300 {
		if err := p.InsertPatch(site, patches[i%2]); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if err := p.RemovePatch(site); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
	}
	if !counterMoves(t, p, counter) {
		t.Fatal("the threads stopped running")
	}
	var orig [5]byte
	if _, err := p.readRawForTest(site, orig[:]); err != nil || orig != [5]byte{0x0f, 0x1f, 0x44, 0, 0} {
		t.Errorf("bytes at the site after the rounds: % x (%v)", orig, err)
	}
	st := p.LiveStats()
	if st.Flushes < 600 || st.Patches < 600 {
		t.Errorf("stats %+v: want 600 flushes with threads running", st)
	}
	t.Logf("%+v", st)
	// Nothing was reported: the first event is the stop asked for.
	if err := p.Resume([]Action{{Tid: -1, Stop: true}}); err != nil {
		t.Fatal(err)
	}
	for range p.Threads() {
		if ev := wait(t, p); ev.Kind != SignalStop || ev.Signal != 0 {
			t.Fatalf("event %+v, want a stop with signal 0", ev)
		}
	}
}

// TestAllThreadPointersRunning: with every thread running and live
// patching on, AllThreadPointers stops each a moment and returns every
// thread's fs base, as Registers reads them once the threads are
// stopped; the threads run on.
func TestAllThreadPointersRunning(t *testing.T) {
	if !kernelSyncCore() {
		t.Skip("the kernel has no SYNC_CORE membarriers")
	}
	p := launchNonStop(t, "livepatch")
	counter := symbol(t, p, "counter")
	p.SetLivePatching(true)
	resumeAll(t, p)
	// The program's threads all started (main and four).
	for deadline := time.Now().Add(5 * time.Second); len(p.Threads()) < 5 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	tps, err := p.AllThreadPointers()
	if err != nil {
		t.Fatal(err)
	}
	if !counterMoves(t, p, counter) {
		t.Fatal("the threads stopped running")
	}
	if err := p.Resume([]Action{{Tid: -1, Stop: true}}); err != nil {
		t.Fatal(err)
	}
	for range p.Threads() {
		if ev := wait(t, p); ev.Kind != SignalStop || ev.Signal != 0 {
			t.Fatalf("event %+v, want a stop with signal 0", ev)
		}
	}
	var want []uint64
	for _, tid := range p.Threads() {
		tp, err := p.ThreadPointer(tid)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, tp)
	}
	slices.Sort(tps)
	slices.Sort(want)
	if len(want) < 2 || !slices.Equal(tps, want) {
		t.Errorf("AllThreadPointers %x, want the stopped threads' %x", tps, want)
	}
}

// TestSetLivePatchingRegisters: live patching switched on while the
// process is stopped registers it for SYNC_CORE membarriers then (the
// kernel's RCU grace period of a multi-threaded registration is not
// spent holding a running thread at the first live patch): the command
// itself, refused (EPERM) before, succeeds without registering again.
func TestSetLivePatchingRegisters(t *testing.T) {
	if !kernelSyncCore() {
		t.Skip("the kernel has no SYNC_CORE membarriers")
	}
	p := launchNonStop(t, "livepatch")
	syncCore := func() error {
		return p.do(func() error {
			th, err := p.anyStoppedThread()
			if err != nil {
				return err
			}
			return p.membarrier(th, membarrierCmdPrivateExpeditedSyncCore)
		})
	}
	if err := syncCore(); err == nil {
		t.Fatal("SYNC_CORE membarrier accepted before any registration")
	}
	p.SetLivePatching(true)
	if err := syncCore(); err != nil {
		t.Fatalf("SYNC_CORE membarrier after SetLivePatching(true) with the process stopped: %v", err)
	}
	registered := false
	_ = p.do(func() error { registered = p.live.registered; return nil })
	if !registered {
		t.Error("the process is not marked registered")
	}
}
