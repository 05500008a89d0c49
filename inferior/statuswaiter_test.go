package inferior

import (
	"os/exec"
	"testing"
	"time"
)

// TestStatusWaiterForeignChild: a child of the stub's that is no tracee
// and has exited unreaped is seen by statusWaiter's waitid too, every
// time it looks; the ptrace goroutine does not collect it (wait4 with
// __WNOTHREAD sees tracees only), so the waiter must back off
// (statusWaiterBackoff) instead of waking it without pause. A program
// stopping at an internal trap meanwhile is still served.
func TestStatusWaiterForeignChild(t *testing.T) {
	p := launchNonStop(t, "sleep")
	resumeAll(t, p)
	child := exec.Command("true")
	if err := child.Start(); err != nil {
		t.Skipf("no child process: %v", err)
	}
	defer func() { _ = child.Wait() }()
	for deadline := time.Now().Add(5 * time.Second); threadState(child.Process.Pid, child.Process.Pid) != 'Z'; {
		if time.Now().After(deadline) {
			t.Fatal("the child did not exit")
		}
		time.Sleep(time.Millisecond)
	}
	before := p.waiterWakes.Load()
	const watch = 300 * time.Millisecond
	time.Sleep(watch)
	wakes := p.waiterWakes.Load() - before
	// At most one wake a backoff, with room for the program's own.
	if limit := int64(2 * watch / statusWaiterBackoff); wakes > limit {
		t.Errorf("%d wakes in %v with an unreaped foreign child, want at most %d", wakes, watch, limit)
	}
	counter := symbol(t, p, "counter")
	if !counterMoves(t, p, counter) {
		t.Error("the program is stuck")
	}
}
